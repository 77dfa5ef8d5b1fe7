"""The Rosetta phrasebook (orchestrator/phrasebook/): the vocabulary is declared once
(workloads/common/phrasebook.toml), every marker in the workload and runtime files names a declared
concept and is balanced, every snippet is code that parses in its language, and every framework
marks each concept its workloads use or says in one line why it cannot. The marker comments leave
code.html's section split (orchestrator/report/code_view.py) as it was."""
from __future__ import annotations

import ast
import dataclasses
import io
import re
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest

from orchestrator.errors import UserError
from orchestrator.phrasebook import Concept, build, load_vocabulary
from orchestrator.phrasebook.book import implementations
from orchestrator.phrasebook.markers import read_markers, strip_markers
from orchestrator.report.code_view import SECTION_MARKER, split_sections
from test_languages import julia_syntax_errors

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def book():
    return build()


def test_every_marker_names_a_declared_concept_and_every_framework_covers_its_concepts(book):
    assert book.problems == []
    # every implementation with workload files is in the book, R's and Julia's included
    keys = {item.key for item in book.implementations}
    assert {"pytorch", "keras", "mxnet-module", "r-keras", "knet", "onnxruntime"} <= keys
    assert len(book.concepts) >= 20


def test_the_checks_find_a_missing_concept_and_an_undeclared_one():
    vocabulary = load_vocabulary()
    extra = Concept("teleport-tensor", "a concept no file marks", ("cnn",))
    problems = build(vocabulary=dataclasses.replace(vocabulary, concepts=vocabulary.concepts + (extra,))).problems
    assert any(problem.startswith("pytorch implements cnn but marks no `teleport-tensor`") for problem in problems)
    assert not any("knet" in problem and "teleport-tensor" in problem for problem in problems)  # no CNN in Knet
    fewer = dataclasses.replace(vocabulary, concepts=tuple(c for c in vocabulary.concepts if c.id != "seeding"),
                                not_expressible={key: {c: r for c, r in table.items() if c != "seeding"}
                                                 for key, table in vocabulary.not_expressible.items()})
    assert any("`seeding` is no concept of the vocabulary" in problem for problem in build(vocabulary=fewer).problems)
    reasons = dict(vocabulary.not_expressible, pytorch={"seeding": "pretend it cannot"})
    assert any("pytorch marks `seeding` and also says it cannot express it" in problem
               for problem in build(vocabulary=dataclasses.replace(vocabulary, not_expressible=reasons)).problems)


def test_unbalanced_and_misplaced_markers_are_reported():
    text = "# phrase: dense\nx = 1\n# end phrase\n# end phrase\n# phrase: flatten\ny = 2\n# note  # phrase: dense\n"
    found = read_markers(text, "f.py", "python")
    assert [snippet.code for snippet in found.snippets] == ["x = 1"]
    assert [problem.split(": ", 1)[0] for problem in found.problems] == ["f.py:4", "f.py:7", "f.py:5"]


def test_a_line_marker_takes_its_statement_or_its_open_brackets():
    python = "def f(x):  # phrase: dense\n    return x\n\ny = [1,  # phrase: flatten, dropout\n     2]\nz = 3\n"
    snippets = {snippet.concept: snippet for snippet in read_markers(python, "f.py", "python").snippets}
    assert snippets["dense"].code == "def f(x):\n    return x"
    assert snippets["flatten"].code == snippets["dropout"].code == "y = [1,\n     2]"
    r = 'f <- function(x) {  # phrase: dense\n  x + "}"\n}\ng <- 1\n'
    assert read_markers(r, "f.R", "r").snippets[0].code == 'f <- function(x) {\n  x + "}"\n}'
    assert strip_markers("  a = 1  # why  # phrase: dense\n  # phrase: x\n  # end phrase") == "  a = 1  # why"


def _r_parse_errors(snippets: dict[str, str], folder: Path) -> dict[str, str]:
    """R's own parser where Rscript is installed (CI installs it); balanced brackets elsewhere."""
    if shutil.which("Rscript") is None:
        return {name: "unbalanced brackets" for name, code in snippets.items()
                if any(code.count(a) != code.count(b) for a, b in ("()", "[]", "{}"))}
    paths = {}
    for number, (name, code) in enumerate(snippets.items()):
        paths[name] = folder / f"snippet{number}.R"
        paths[name].write_text(code + "\n")
    script = ('for (f in commandArgs(TRUE)) tryCatch(parse(f), error = function(e) '
              'cat(f, "\\t", gsub("\\n", " ", conditionMessage(e)), "\\n", sep = ""))')
    output = subprocess.run(["Rscript", "--vanilla", "-e", script, *map(str, paths.values())],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    failed = dict(line.split("\t", 1) for line in output.splitlines() if "\t" in line)
    return {name: failed[str(path)] for name, path in paths.items() if str(path) in failed}


def test_every_snippet_parses_in_its_language(book, tmp_path):
    errors, r_snippets = {}, {}
    for (concept, key), cell in book.cells.items():
        snippet = cell.snippet
        if snippet is None:
            continue
        name = f"{key}/{concept} ({snippet.file}:{snippet.first_line})"
        if snippet.language == "python":
            try:
                ast.parse(snippet.code)
            except SyntaxError as error:
                errors[name] = str(error)
        elif snippet.language == "julia":
            if julia_syntax_errors(snippet.code.encode()):
                errors[name] = "; ".join(julia_syntax_errors(snippet.code.encode()))
        else:
            r_snippets[name] = snippet.code
    assert len(r_snippets) >= 8  # R's row is in the book
    errors.update(_r_parse_errors(r_snippets, tmp_path))
    assert errors == {}
    # the R check can fail
    assert _r_parse_errors({"broken": "f <- function(x) {\n  x +\n"}, tmp_path)


def test_the_markers_leave_code_html_s_sections_as_they_were():
    for item in implementations():
        for file in item.files:
            text = (ROOT / file).read_text()
            marked = [line for line in text.splitlines() if re.search(r"#\s*(phrase:|end phrase)", line)]
            assert not any(SECTION_MARKER.match(line) for line in marked), file
            assert list(split_sections(text)) == list(split_sections(strip_markers(text))), file
            if file.endswith(".py"):  # every marker is a comment, none sits inside a string
                comments = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline)
                            if token.type == tokenize.COMMENT and re.search(r"#\s*(phrase:|end phrase)", token.string)}
                assert comments == {number for number, line in enumerate(text.splitlines(), start=1)
                                    if line in marked}, file


def test_the_vocabulary_refuses_a_malformed_entry(tmp_path):
    bad = tmp_path / "phrasebook.toml"
    bad.write_text('[[concept]]\nid = "Not An Id"\nmeaning = "x"\nworkloads = ["cnn"]\n')
    with pytest.raises(UserError, match="lower-case-with-dashes"):
        load_vocabulary(bad)
    bad.write_text('[[concept]]\nid = "ok"\nmeaning = "x"\nworkloads = ["cnn"]\n[not_expressible.pytorch]\nnope = "y"\n')
    with pytest.raises(UserError, match="not_expressible.pytorch.nope"):
        load_vocabulary(bad)


def test_docs_phrasebook_md_is_current(book):
    """docs/PHRASEBOOK.md is generated: regenerate it with the command its first lines name."""
    from orchestrator.phrasebook.render import COMMAND, markdown

    page = (ROOT / "docs" / "PHRASEBOOK.md").read_text()
    assert page == markdown(book), f"docs/PHRASEBOOK.md is stale: run `{COMMAND}`"
    for concept in book.concepts:
        assert f"\n## {concept.id}\n" in page
    # every snippet's link points at its lines, relative to docs/
    sgd = book.cell("sgd-momentum", "pytorch").snippet
    assert f"](../{sgd.file}#L{sgd.first_line}-L{sgd.last_line})" in page
    assert "**chainer**: no compiled mode: Chainer is define-by-run only." in page


def _phrasebook_command(*arguments: str, columns: str = "80") -> subprocess.CompletedProcess:
    import os
    import sys

    environment = dict(os.environ, COLUMNS=columns)
    return subprocess.run([sys.executable, "-m", "orchestrator", "phrasebook", *arguments], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=120)


def test_the_command_prints_every_snippet_within_80_columns(book):
    printed = _phrasebook_command()
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    for concept in book.concepts:
        assert any(line.startswith(f"{concept.id}: ") for line in lines)
    assert "knet  workloads/resnet50/knet.jl:" in printed.stdout
    assert "r-keras  workloads/cnn/r_keras.R:" in printed.stdout
    # the widest snippet line is wrapped, not cut: its last word is still printed
    widest = max((line for cell in book.cells.values() if cell.snippet for line in cell.snippet.code.splitlines()),
                 key=len)
    assert len(widest) > 100 and widest.split()[-1] in printed.stdout


def test_the_command_narrows_to_a_concept_and_frameworks():
    printed = _phrasebook_command("adam", "--frameworks", "keras-jax,mxnet", columns="60")
    assert printed.returncode == 0, printed.stderr
    assert max(map(len, printed.stdout.splitlines())) <= 60
    assert printed.stdout.startswith("adam: ")
    assert "keras  workloads/runtime/keras/optimizers.py:" in printed.stdout
    assert "mxnet  workloads/gru/mxnet.py:" in printed.stdout
    assert "pytorch  " not in printed.stdout and "sgd-momentum" not in printed.stdout
    unknown = _phrasebook_command("teleport")
    assert unknown.returncode == 2 and "no concept 'teleport'" in unknown.stderr and "choose from" in unknown.stderr
    assert _phrasebook_command("--frameworks", "nope").returncode == 2
    assert _phrasebook_command("adam", "--markdown", "x.md").returncode == 2


def test_a_julia_line_marker_reads_a_transpose_as_code():
    julia = "y = f(x',  # phrase: dense\n      z)\nw = 1\n"
    assert read_markers(julia, "f.jl", "julia").snippets[0].code == "y = f(x',\n      z)"
