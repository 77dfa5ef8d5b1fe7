"""report.html and code.html in a real headless Chromium (tests/support/browser.py): they render without
console errors, the grid is on screen, code.html shows the pair its address names, and its
phrasebook shows every concept in every framework, filters by concept and framework, and links
each snippet to its lines in the side-by-side view.

Skipped without Chromium (`apt-get install -y chromium fonts-dejavu-core`), except under
ROSETTA_REQUIRE_DOCKER=1 (CI), where a missing browser fails."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

from orchestrator import report
from support.browser import open_page, require_chromium
from test_report_views import ONNX_NOT_APPLICABLE, inference, training, write


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    require_chromium()
    folder = tmp_path_factory.mktemp("run")
    results = [training("pytorch", rate, repeat=repeat, matched="dense kernels (out, in) | <b>not bold</b>")
               for repeat, rate in enumerate([1000.0, 1200.0, 1400.0])]
    results += [training("pytorch", 1000.0, variant="cu118", cuda="11.8"), training("jax", 900.0),
                training("tensorflow", 600.0), training("jax", 0, variant="cpu", precision="fp16",
                                                        status="unsupported", reason="fp16 needs a CUDA GPU"),
                training("tensorflow", 500.0, workload="gru"), inference("pytorch", 400.0),
                inference("onnxruntime", 800.0)]
    write(folder, results, [ONNX_NOT_APPLICABLE])
    return report.write_report(folder)


class _Elements(HTMLParser):
    """Every element's tag and attributes, in document order."""

    def __init__(self, dom: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.feed(dom)

    def handle_starttag(self, tag, attributes):
        self.elements.append((tag, dict(attributes)))


def shown_panes(dom: str) -> dict[str, set[str]]:
    """Per framework, whether its panes are shown ("shown"), hidden ("hidden") or both."""
    states: dict[str, set[str]] = {}
    for tag, attributes in _Elements(dom).elements:
        if tag == "div" and "pane" in (attributes.get("class") or "").split():
            states.setdefault(attributes["data-framework"], set()).add("hidden" if "hidden" in attributes else "shown")
    return states


def body_pair(dom: str) -> str:
    return next(attributes["data-pair"] for tag, attributes in _Elements(dom).elements if tag == "body")


def test_the_report_renders_without_console_errors_and_shows_the_grid_first(pages):
    page = open_page(pages.html)
    assert page.console_errors == []
    elements = _Elements(page.dom).elements
    tables = [attributes for tag, attributes in elements if tag == "table"]
    assert tables[0] == {"class": "grid", "id": "grid-1"}
    assert '<td class="figure best"' in page.dom and "1,200 ★" in page.dom
    assert any(tag == "svg" for tag, _ in elements)  # the charts and step plots are part of the page
    assert ("a", {"href": "code.html"}) in elements
    # the gate's columns (FAIRNESS.md: ranking-gate): each row's parity verdict and what the gate decided
    assert "<th>Parity</th>" in page.dom and "<th>Gate</th>" in page.dom
    assert '<td class="gate">passed</td>' in page.dom
    assert '<td class="gate">not checked: this run has no parity check' in page.dom


def test_the_code_view_renders_without_console_errors_with_its_default_pair(pages):
    page = open_page(pages.code)
    assert page.console_errors == []
    assert body_pair(page.dom) == "pytorch,tensorflow"
    states = shown_panes(page.dom)
    assert states["pytorch"] == states["tensorflow"] == {"shown"}
    assert states["jax"] == states["keras"] == {"hidden"}
    assert 'class="highlight"' in page.dom and "&lt;b&gt;not bold&lt;/b&gt;" in page.dom


def test_the_address_picks_any_pair_left_and_right(pages):
    page = open_page(pages.code, fragment="jax,mxnet-module")
    assert page.console_errors == []
    assert body_pair(page.dom) == "jax,mxnet-module"
    states = shown_panes(page.dom)
    assert states["jax"] == states["mxnet-module"] == {"shown"}
    assert states["pytorch"] == states["tensorflow"] == {"hidden"}
    orders = {attributes.get("style") for tag, attributes in _Elements(page.dom).elements
              if tag == "div" and attributes.get("data-framework") == "jax"}
    assert orders == {"order: 1;"}  # the left one is on the left, whatever the files' order
    assert 'id="pair">jax and mxnet-module<' in page.dom
    # a framework a shared file serves picks that file; a name no file serves keeps the default
    assert body_pair(open_page(pages.code, fragment="keras-jax,pytorch").dom) == "keras,pytorch"
    fallback = open_page(pages.code, fragment="nonsense")
    assert fallback.console_errors == [] and body_pair(fallback.dom) == "pytorch,tensorflow"


def test_the_helper_reports_a_pages_errors_and_nothing_else(tmp_path):
    require_chromium()
    noisy = tmp_path / "noisy.html"
    noisy.write_text('<!DOCTYPE html><html><body><p id="x">x</p><script>console.log("fine"); console.warn("fine too");'
                     'console.error("broken"); document.getElementById("x").textContent = location.hash;'
                     "undefinedFunction();</script></body></html>")
    page = open_page(noisy, fragment="here")
    assert page.console_errors[0] == "console.error: broken"
    assert len(page.console_errors) == 2 and "undefinedFunction is not defined" in page.console_errors[1]
    assert '<p id="x">#here</p>' in page.dom


def test_compare_html_renders_without_console_errors_and_shows_the_table(tmp_path):
    """compare.html (orchestrator/compare.py) in the same browser: its table is there, the slowdown
    reads "worse", and a hostile option string stays text."""
    require_chromium()
    from orchestrator.__main__ import main
    from test_compare import HOSTILE_OPTION, SLOWER, STEADY, repeats, write_run

    base = write_run(tmp_path / "base", repeats("pytorch", STEADY, options={"xla": HOSTILE_OPTION}))
    new = write_run(tmp_path / "new", repeats("pytorch", SLOWER, options={"xla": HOSTILE_OPTION}))
    assert main(["compare", str(base), str(new)]) == 1
    page = open_page(new / "compare.html")
    assert page.console_errors == []
    elements = _Elements(page.dom).elements
    assert ("table", {"id": "compare"}) in [(tag, {"id": attributes.get("id")}) for tag, attributes in elements
                                           if tag == "table"]
    assert "worse" in page.dom and "Mann-Whitney U" in page.dom
    assert not any(tag == "img" for tag, _ in elements)  # the option's markup was escaped, never rendered


# --- the phrasebook in code.html -------------------------------------------------------------------

def phrase_rows(dom: str) -> dict[str, bool]:
    """Each phrasebook row's concept, and whether it is shown."""
    return {attributes["data-concept"]: "hidden" not in attributes for tag, attributes in _Elements(dom).elements
            if tag == "tr" and "data-concept" in attributes}


def phrase_columns(dom: str) -> dict[str, set[str]]:
    """Per framework column of the phrasebook: whether its cells are shown, hidden, or both."""
    states: dict[str, set[str]] = {}
    for tag, attributes in _Elements(dom).elements:
        if tag in ("td", "th") and "data-phrase-framework" in attributes:
            states.setdefault(attributes["data-phrase-framework"], set()).add(
                "hidden" if "hidden" in attributes else "shown")
    return states


def marked_lines(dom: str) -> list[str]:
    """The ids of the lines a phrasebook link marked in the side-by-side view."""
    return [attributes["id"] for tag, attributes in _Elements(dom).elements
            if tag == "a" and "phrase-target" in (attributes.get("class") or "").split()]


def test_the_phrasebook_shows_every_concept_in_every_framework(pages):
    from orchestrator.phrasebook import build

    book = build()
    page = open_page(pages.code)
    assert page.console_errors == []
    assert phrase_rows(page.dom) == {concept.id: True for concept in book.concepts}
    assert phrase_columns(page.dom) == {item.key: {"shown"} for item in book.implementations}
    table = page.dom.split('<table class="phrasebook">')[1].split("</table>")[0]
    assert table.count('class="highlight"') == sum(cell.snippet is not None for cell in book.cells.values())
    assert "knet.jl:" in table and "r_keras.R:" in table  # Julia's and R's rows, from the same markers
    assert "no compiled mode: Chainer is define-by-run only" in table


def test_the_phrasebook_filters_by_concept_and_framework(pages):
    chosen = open_page(pages.code, fragment="phrasebook:concepts=adam,dense;frameworks=pytorch,keras-jax")
    assert chosen.console_errors == []
    rows = phrase_rows(chosen.dom)
    assert {concept for concept, shown in rows.items() if shown} == {"adam", "dense"}
    columns = phrase_columns(chosen.dom)
    assert {key for key, states in columns.items() if states == {"shown"}} == {"pytorch", "keras"}
    assert all(states == {"hidden"} for key, states in columns.items() if key not in ("pytorch", "keras"))
    assert 'data-shown-concepts="2"' in chosen.dom
    assert body_pair(chosen.dom) == "pytorch,tensorflow"  # the side-by-side pair keeps its default
    # a user unticking a concept and a framework
    clicked = open_page(pages.code, script="document.querySelector('#phrase-filter input[value=\"seeding\"]').click();"
                                           "document.querySelector('#phrase-filter input[value=\"jax\"]').click();")
    assert clicked.console_errors == []
    rows = phrase_rows(clicked.dom)
    assert rows["seeding"] is False and rows["adam"] is True
    assert phrase_columns(clicked.dom)["jax"] == {"hidden"} and phrase_columns(clicked.dom)["pytorch"] == {"shown"}


def test_a_phrasebook_link_opens_its_lines_in_the_side_by_side_view(pages):
    from orchestrator.phrasebook import build

    snippet = build().cell("sgd-momentum", "mxnet").snippet
    table = open_page(pages.code).dom.split('<table class="phrasebook">')[1]
    link = f"#mxnet/code-cnn-mxnet-{snippet.first_line}"
    assert f'<a href="{link}">{snippet.file}:{snippet.first_line}</a>' in table
    page = open_page(pages.code, fragment=link[1:])
    assert page.console_errors == []
    assert body_pair(page.dom) == "mxnet,tensorflow"  # beside the pair's other implementation
    assert shown_panes(page.dom)["mxnet"] == {"shown"}
    assert marked_lines(page.dom) == [f"code-cnn-mxnet-{snippet.first_line}"]
    # R's lines too
    r_snippet = build().cell("dropout", "r-keras").snippet
    r_page = open_page(pages.code, fragment=f"r-keras/code-cnn-r-keras-{r_snippet.first_line}")
    assert body_pair(r_page.dom) == "r-keras,tensorflow" and f'id="code-cnn-r-keras-{r_snippet.first_line}"' in r_page.dom
    # and a runtime's lines (the step, the synchronisation: workloads/runtime/), a package's module too
    for concept, key, module in (("device-sync", "pytorch", ""), ("train-step", "keras", "-loops")):
        snippet = build().cell(concept, key).snippet
        anchor = f"code-runtime-{key}{module}-{snippet.first_line}"
        assert f'<a href="#{key}/{anchor}">{snippet.file}:{snippet.first_line}</a>' in table
        runtime_page = open_page(pages.code, fragment=f"{key}/{anchor}")
        assert runtime_page.console_errors == [] and marked_lines(runtime_page.dom) == [anchor]
