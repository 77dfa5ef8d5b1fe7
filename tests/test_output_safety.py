"""What Rosetta Bench writes for others to open is safe to open: a CSV a spreadsheet reads runs no
formula from a result's strings, and the Markdown pages carry no live link from them and no cell
without end (docs/RUN-GUARANTEES.md, the trust model: a cell is untrusted). Run folders are
fabricated from Result objects in tmp_path and go through the real commands."""
from __future__ import annotations

import csv
import html
import re

from markdown_it import MarkdownIt  # rich's Markdown parser, a CommonMark one

from orchestrator.__main__ import main
from orchestrator.commands import export
from orchestrator.report.formatting import LONGEST_CELL, LONGEST_LINE, WORD_JOINER, markdown_cell
from workloads.common.result import Cell, Metrics, Provenance, Result
from support.records import cell_file, measured

# What a spreadsheet takes for the start of a formula (OWASP, CSV injection): =, +, -, @, tab, CR.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def hostile_result(**provenance) -> Result:
    return measured(Result(
        cell=Cell(framework="=1+2", workload="cnn", variant="cuda12", options={"xla": "-on"}),
        status="ok", metrics=Metrics(steady_samples_per_s=1200.0, samples_per_s=1100.0, test_accuracy=0.77),
        started_at="2026-12-02T10:00:00+00:00",
        provenance=Provenance(framework_version="@SUM(1+1)*cmd|' /C calc'!A0", device="cuda",
                              gpu_name="+HYPERLINK(\"http://evil.example\")", gpu_driver="\t=1+1",
                              cpu_model="\r=cmd", hostname="-2+3+cmd|' /C calc'!A0", cuda_version="-3.5",
                              backend="docker", **provenance)))


def failed_result(reason: str) -> Result:
    return Result(cell=Cell(framework="jax", workload="cnn", variant="cuda12"), status="failed", reason=reason,
                  started_at="2026-12-02T10:01:00+00:00", provenance=Provenance(device="cuda", backend="docker"))


def write_run(folder, results) -> None:
    for item in results:
        item.write(cell_file(folder, item))


def test_the_csv_export_neutralises_every_formula_a_result_could_carry(tmp_path):
    folder = tmp_path / "run"
    write_run(folder, [hostile_result(), failed_result("=HYPERLINK(\"http://evil.example\",\"click\")")])
    assert main(["export", str(folder), "--format", "csv"]) == 0
    with open(folder / export.DEFAULT_FILE, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 2
    cells = [value for row in rows for value in row.values()]
    assert [value for value in cells if value.startswith(FORMULA_STARTS)] == ["-3.5"]  # a numeral, below
    hostile = next(row for row in rows if row["framework"] != "jax")
    assert hostile["framework"] == "'=1+2"  # the text itself, after the quote a spreadsheet hides
    assert hostile["framework_version"] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert hostile["gpu_name"] == "'+HYPERLINK(\"http://evil.example\")"
    assert hostile["gpu_driver"] == "'\t=1+1" and hostile["cpu_model"] == "'\r=cmd"
    assert hostile["hostname"] == "'-2+3+cmd|' /C calc'!A0"
    assert hostile["options"] == "xla=-on"  # a formula character inside a cell is no formula
    assert hostile["key"].startswith("'=1+2__cuda12__cnn")
    failed = next(row for row in rows if row["framework"] == "jax")
    assert failed["reason"] == "'=HYPERLINK(\"http://evil.example\",\"click\")"
    # genuine numbers stay numbers: a negative numeral and the figures themselves
    assert hostile["cuda_version"] == "-3.5"
    assert float(hostile["headline"]) == 1200.0 and float(hostile["test_accuracy"]) == 0.77


# --- Markdown: no live link from a result, no cell without end -----------------------------------

# GitHub's autolinks (GFM's extended autolinks, and CommonMark's <...>), as they would be found in
# the Markdown's source: an escaped ":" or "." and an "@" followed by a word joiner are none.
LIVE_AUTOLINKS = re.compile(r"(?i)(?:https?|ftp)://|(?:^|[\s*_~(])www\.|[\w.+-]@[\w-]+\.[\w-]|(?:mailto|xmpp):"
                            r"|<[a-z][a-z0-9+.-]{1,31}:[^\s<>]*>|<[^\s@<>]+@[^\s@<>]+>")
LINKS = ("see http://evil.example/x and HTTPS://evil.example, www.evil.example, (WWW.evil.example), "
         "<https://evil.example/y>, <bob@evil.example>, mailto:bob@evil.example, xmpp:bob@evil.example/a, "
         "bob@evil.example, [click](http://evil.example) and ftp://evil.example")
LONG = "A" * 5000


def rendered_text(markdown: str) -> str:
    """What a reader sees of `markdown` (CommonMark, as markdown-it renders it): its text, entities decoded."""
    rendered = MarkdownIt("commonmark").render(markdown)
    assert "<a " not in rendered  # no <...> autolink, no [text](url) link
    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).strip()


def test_markdown_cell_defuses_every_autolink_and_keeps_the_text():
    cell = markdown_cell(LINKS)
    assert not LIVE_AUTOLINKS.search(cell), cell
    assert LIVE_AUTOLINKS.search(LINKS)  # the detector finds them in the text as it was
    assert rendered_text(cell).replace(WORD_JOINER, "") == LINKS  # a reader sees the text itself


def test_markdown_cell_caps_a_cell_with_an_ellipsis():
    cell = markdown_cell(LONG + " | <b>")
    assert rendered_text(cell) == "A" * (LONGEST_CELL - 1) + "…"
    assert markdown_cell("A" * LONGEST_CELL) == "A" * LONGEST_CELL  # up to the cap, whole
    assert rendered_text(markdown_cell(LONG, LONGEST_LINE)) == "A" * (LONGEST_LINE - 1) + "…"
    # the cap counts what a reader sees, so an escape is never cut in two
    cell = markdown_cell("|" * 1000)
    assert rendered_text(cell) == "|" * (LONGEST_CELL - 1) + "…" and cell.count("\\|") == LONGEST_CELL - 1


def hostile_markdown_result(framework: str, *, status="failed") -> Result:
    return measured(Result(
        cell=Cell(framework=framework, workload="cnn", variant="cuda12"), status=status,
        reason=None if status == "ok" else LINKS + " " + LONG,
        metrics=Metrics(steady_samples_per_s=1200.0, samples_per_s=1100.0, test_accuracy=0.77) if status == "ok"
        else Metrics(),
        started_at="2026-12-02T10:00:00+00:00",
        provenance=Provenance(framework_version="1.0", device="cuda", gpu_name="www.evil.example",
                              hostname="bob@evil.example", cpu_model="http://evil.example " + LONG,
                              backend="docker", extras={"layout": LINKS, "other": LONG})))


def assert_safe_markdown(markdown: str) -> None:
    assert not LIVE_AUTOLINKS.search(markdown), LIVE_AUTOLINKS.search(markdown)
    assert "evil.example" in markdown  # the results' text is there, defused
    assert "A" * LONGEST_LINE not in markdown
    for line in markdown.splitlines():
        if line.startswith("|"):  # a table row: no cell longer than the cap
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            assert all(len(rendered_text(cell).replace(WORD_JOINER, "")) <= LONGEST_CELL
                       for cell in cells if cell.strip()), line
    rendered_text(markdown)


def test_the_report_and_compare_pages_carry_no_live_link_and_no_endless_cell(tmp_path):
    base, new = tmp_path / "base", tmp_path / "new"
    write_run(base, [hostile_markdown_result("pytorch", status="ok"), hostile_markdown_result("jax", status="ok")])
    write_run(new, [hostile_markdown_result("pytorch", status="ok"), hostile_markdown_result("jax")])
    assert main(["report", str(new)]) == 0
    report = (new / "report.md").read_text(encoding="utf-8")
    assert_safe_markdown(report)
    assert re.search(r"\| failed: see http\\://evil\.example.* AAAA+… \|", report)  # the reason, capped in its cell
    main(["compare", str(base), str(new)])
    compared = (new / "compare.md").read_text(encoding="utf-8")
    assert_safe_markdown(compared)
    assert "evil" in next(line for line in compared.splitlines() if "· jax \\[compiled\\] ·" in line)
