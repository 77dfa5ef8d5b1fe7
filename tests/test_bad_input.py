"""Bad input, from the command line, a matrix file or a results folder: one line naming the fix and
exit 2 (never a traceback), or, for results, a report that lists what it could not use and goes on.

Cases that would run cells on the code before this was fixed use an interpreter that fails at once
(/bin/false) and a one-cell selection, so that they fail fast instead of running a matrix.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from workloads.common.result import Cell, Metrics, Result
from conftest import error_line
from support.records import measured

ROOT = Path(__file__).resolve().parent.parent
ONE_CELL = ["--frameworks", "pytorch", "--variants", "cpu", "--workloads", "cnn", "--profile", "smoke",
            "--data", "synthetic", "--backend", "local", "--python", "/bin/false"]


def refused(argv, capsys) -> str:
    assert main(argv) == 2
    return error_line(capsys)


# --- 1. matrix files of the wrong TOML type, or not UTF-8 ----------------------------------------

@pytest.mark.parametrize("text, expected", [
    ('frameworks = "pytorch"\n', "m.toml: frameworks must be tables ([frameworks.<name>]), not a string"),
    ("frameworks = [1]\n", "m.toml: frameworks must be tables ([frameworks.<name>]), not a list"),
    ("defaults = [1]\n[frameworks.pytorch]\n", "m.toml: defaults must be a table ([defaults]), not a list"),
    ('defaults = "full"\n[frameworks.pytorch]\n', "m.toml: defaults must be a table ([defaults]), not a string"),
    ("[frameworks]\npytorch = ['cpu']\n", "m.toml [frameworks.pytorch]: must be a table, e.g. variants = "),
    ("[frameworks]\npytorch = 'cpu'\n", "not a string"),
    ("[defaults]\nrepeat = '3'\n[frameworks.pytorch]\n", "[defaults]: repeat must be a whole number from 1 to 100, "
                                                          "not a string"),
    ("[defaults]\nrepeat = true\n[frameworks.pytorch]\n", "repeat must be a whole number from 1 to 100, not true/false"),
    ("[defaults]\nrepeat = 101\n[frameworks.pytorch]\n", "repeat must be a whole number from 1 to 100, not 101"),
    pytest.param("[defaults]\nrepeat = 1000000000000\n[frameworks.pytorch]\n", "from 1 to 100, not 1000000000000",
                 id="huge-repeat"),
    ("[defaults]\nprofile = 5\n[frameworks.pytorch]\n", "[defaults]: profile must be a string, not an integer"),
    ("[defaults]\ndata = {a = 1}\n[frameworks.pytorch]\n", "data source must be a string, not a table"),
    ("[defaults]\nworkloads = [1]\n[frameworks.pytorch]\n", "each of workloads must be a string (a name), not an integer"),
    ("[defaults]\nprecisions = {a = 'fp32'}\n[frameworks.pytorch]\n", "precisions must be a non-empty list of names"),
    ("[frameworks.pytorch]\nvariants = [['cpu']]\n", "each of variants must be a string (a name), not a list"),
    ("[frameworks.pytorch]\nvariants = 1979-05-27\n", "variants must be a non-empty list of names"),
    ("[frameworks.pytorch]\nvariants = ['cpu'\n", "not valid TOML"),
])
def test_matrix_values_of_the_wrong_type_name_file_key_and_type(in_tmp, capsys, text, expected):
    (in_tmp / "m.toml").write_text(text)
    line = refused(["run-matrix", "--matrix", "m.toml", *ONE_CELL[-4:]], capsys)
    assert expected in line


def test_matrix_not_utf8(in_tmp, capsys):
    (in_tmp / "m.toml").write_bytes(b"[frameworks.pytorch]\nvariants = ['cpu'] # caf\xe9\n")
    assert "matrix file m.toml: not UTF-8 (byte 45); save it as UTF-8 text" in refused(["run-matrix", "--matrix", "m.toml"], capsys)


# --- 2. --python: a folder, a file that is not executable, a relative path ------------------------

def test_python_folder_not_executable_or_relative(in_tmp, capsys):
    folder = in_tmp / "venv"
    (folder / "bin").mkdir(parents=True)
    plain = folder / "bin" / "python"
    plain.write_text("#!/bin/sh\nexit 1\n")
    selection = ONE_CELL[:-2] + ["--results-dir", str(in_tmp / "r")]
    line = refused(["run-matrix", *selection, "--python", str(folder)], capsys)
    assert f"--python {folder}: a folder, not an interpreter; give the Python inside it (e.g. {plain})" in line
    line = refused(["run-matrix", *selection, "--python", str(plain)], capsys)
    assert "not an executable file" in line
    plain.chmod(0o755)
    line = refused(["run-matrix", *selection, "--python", "venv/bin/python"], capsys)
    assert "a relative path; cells run in another working directory, so give the absolute path" in line
    assert str(plain) in line
    line = refused(["parity", "--frameworks", "pytorch", "--workloads", "cnn", "--backend", "local",
                    "--python", "venv/bin/python"], capsys)
    assert "a relative path" in line


# --- 4. duplicates, empty lists, --repeat and --timeout out of range ------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--frameworks", ""], "argument --frameworks: names nothing (''); give comma-separated names, or leave"),
    (["--frameworks", ","], "argument --frameworks: names nothing (',')"),
    (["--workloads", " , "], "argument --workloads: names nothing"),
    (["--variants", ","], "argument --variants: names nothing"),
    (["--frameworks", "pytorch,jax,pytorch"], "command line: framework 'pytorch' is given twice in frameworks; "
                                              "name each once"),
    (["--workloads", "cnn,cnn"], "workload 'cnn' is given twice in workloads"),
    (["--variants", "cpu,cpu"], "variant 'cpu' is given twice in variants"),
    (["--precisions", "fp32,fp32"], "precision 'fp32' is given twice in precisions"),
    (["--repeat", "101"], "argument --repeat: must be a whole number from 1 to 100, not '101'"),
    (["--repeat", "-3"], "argument --repeat: must be a whole number from 1 to 100, not '-3'"),
    pytest.param(["--repeat", "1000000000000"], "from 1 to 100", id="huge-repeat"),
    (["--timeout", "nan"], "argument --timeout: must be a number of seconds more than 0 and at most 604800"),
    (["--timeout", "inf"], "not 'inf'"),
    (["--timeout", "0"], "not '0'"),
    (["--timeout", "-5"], "not '-5'"),
    (["--timeout", "1e400"], "at most 604800"),
])
def test_run_matrix_refuses_duplicates_empty_lists_and_out_of_range_numbers(in_tmp, capsys, argv, expected):
    (in_tmp / "m.toml").write_text("[frameworks.pytorch]\nvariants = ['cpu']\n")
    defaults = dict(zip(ONE_CELL[::2], ONE_CELL[1::2]))
    for option, value in zip(argv[::2], argv[1::2]):
        defaults[option] = value
    flat = [item for pair in defaults.items() for item in pair]
    line = refused(["run-matrix", "--matrix", "m.toml", "--results-dir", str(in_tmp / "r"), *flat], capsys)
    assert expected in line


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1"])
def test_parity_refuses_a_timeout_out_of_range(in_tmp, capsys, timeout):
    line = refused(["parity", "--frameworks", "pytorch", "--workloads", "cnn", "--backend", "local", "--python",
                    "/bin/false", "--results-dir", str(in_tmp / "p"), "--timeout", timeout], capsys)
    assert "argument --timeout: must be a number of seconds more than 0 and at most 604800" in line


# --- 5. framework options, init and the order seed ------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--option", "executor=simple"], "--option executor: no selected framework (pytorch) declares it; executor is "
                                      "an option of caffe2: select one with --frameworks"),
    (["--option", "xla=on"], "--option xla: no selected framework (pytorch) declares it; options: "),  # now a mode
    (["--modes", "eager,xla"], "command line: unknown mode 'xla'; choose from eager, graph, compiled"),
    (["--option", "channels_last=diagonal"], "--option channels_last=diagonal refused: option "
                                             "channels_last='diagonal' for pytorch: choose from off, on"),
    (["--option", "channels_last"], "--option 'channels_last': give NAME=VALUE"),
    (["--option", "nonsense=1"], "--option nonsense: no selected framework (pytorch) declares it; options: "),
    (["--init", "random"], "argument --init: invalid choice: 'random'"),
    (["--seed", "-1"], "argument --seed: must be a whole number from 0 to 4294967295, not '-1'"),
    (["--seed", "x"], "argument --seed: must be a whole number"),
])
def test_run_matrix_refuses_bad_options_init_and_seed(in_tmp, capsys, argv, expected):
    line = refused(["run-matrix", "--results-dir", str(in_tmp / "r"), *ONE_CELL, *argv], capsys)
    assert expected in line
    assert not (in_tmp / "r" / "cells").exists()  # refused before any cell ran


def test_a_matrix_file_with_a_bad_option_is_one_line(in_tmp, capsys):
    (in_tmp / "m.toml").write_text("[frameworks.pytorch]\nvariants = ['cpu']\noptions = { xla = ['off', 'on'] }\n")
    line = refused(["run-matrix", "--matrix", "m.toml", "--results-dir", str(in_tmp / "r"), *ONE_CELL[4:]], capsys)
    assert "m.toml [frameworks.pytorch]: pytorch has no option 'xla' (its options: channels_last)" in line
    (in_tmp / "m.toml").write_text("[frameworks.pytorch]\nvariants = ['cpu']\nmodes = ['jit']\n")
    line = refused(["run-matrix", "--matrix", "m.toml", "--results-dir", str(in_tmp / "r"), *ONE_CELL[4:]], capsys)
    assert "m.toml [frameworks.pytorch]: unknown mode 'jit'; choose from eager, graph, compiled" in line


def test_parity_refuses_an_option_no_selected_framework_declares(in_tmp, capsys):
    line = refused(["parity", "--frameworks", "jax", "--workloads", "cnn", "--backend", "local", "--python",
                    "/bin/false", "--results-dir", str(in_tmp / "p"), "--option", "channels_last=on"], capsys)
    assert "--option channels_last: no selected framework (jax) declares it; channels_last is an option of pytorch" in line


def test_matrix_file_refuses_names_given_twice(in_tmp, capsys):
    (in_tmp / "m.toml").write_text("[frameworks.pytorch]\nvariants = ['cpu', 'cpu']\n")
    line = refused(["run-matrix", "--matrix", "m.toml", "--results-dir", str(in_tmp / "r"), *ONE_CELL[4:]], capsys)
    assert "m.toml [frameworks.pytorch]: variant 'cpu' is given twice in variants; name each once" in line


# --- 3. and 5. report on results with foreign values ----------------------------------------------

def good_result(framework="pytorch", seconds=10.0) -> Result:
    """An ok CNN result: `seconds` of training, its steady rate (the headline) 50,000 samples / seconds,
    and what the ranking's gate checks (the reference's parameter count, an accuracy on target)."""
    return measured(Result(Cell(framework, "cnn"), started_at="2026-12-02T10:00:00+00:00",
                  metrics=Metrics(train_time_s=seconds, steady_samples_per_s=50_000 / seconds,
                                  parameter_count=3_441_592, test_accuracy=0.77)))


def write_raw(results_dir: Path, name: str, data) -> None:
    (results_dir / "cells").mkdir(parents=True, exist_ok=True)
    (results_dir / "cells" / name).write_text(data if isinstance(data, str) else json.dumps(data))


def foreign(**changes) -> dict:
    """A good record with `changes` applied at dotted paths ("metrics.parameter_count")."""
    record = good_result("foreign").to_dict()
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = record
        for parent in parents:
            target = target[parent]
        target[last] = value
    return record


def render_report(results_dir: Path, capsys) -> str:
    """report.md of `results_dir`, rendered by the command: exit 1 and a "left out FILE: why" line
    when a file had to be left out (docs/RUN-GUARANTEES.md, the trust model), else exit 0."""
    code = main(["report", str(results_dir)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    markdown = (results_dir / "report.md").read_text()
    left_out = "## Unreadable result files" in markdown
    assert code == (1 if left_out else 0), err
    assert ("left out " in err) == left_out, err
    return markdown


def table_row(markdown: str, framework: str) -> list[str]:
    """The framework's row in the first table (the results; the published reference comes after)."""
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {framework} |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("content, reason", [
    (foreign(cell__workload=["cnn"]), "cell.workload must be a string, not a list"),
    (foreign(cell__framework={"a": 1}), "cell.framework must be a string, not an object"),
    (foreign(cell__repeat="0"), "cell.repeat must be an integer, not a string"),
    (foreign(metrics__parameter_count=1.5), "metrics.parameter_count must be an integer, not a number"),
    (foreign(metrics__parameter_count=10 ** 30), "metrics.parameter_count is out of range (31 digits)"),
    (foreign(metrics__train_time_s="fast"), "metrics.train_time_s must be a number, not a string"),
    (foreign(metrics__train_time_s=True), "metrics.train_time_s must be a number, not true/false"),
    (foreign(samples__epoch_times_s=[1, "x"]), "samples.epoch_times_s[1] must be a number, not a string"),
    (foreign(provenance__extras={"matched": 5}), "provenance.extras.matched must be a string, not an integer"),
    (foreign(reason=["why"]), "reason must be a string, not a list"),
    (foreign(metrics=5), "metrics must be an object, not an integer"),
    (json.dumps(foreign()).replace('"repeat": 0', '"repeat": ' + "9" * 5000), "not valid JSON"),  # huge integer
    (json.dumps(foreign(settings={"x": "DEEP"})).replace('"DEEP"', DEEP), "nested too deeply"),
    (json.dumps(foreign(settings={"x": "DEEP"})).replace('"DEEP"', "[" * 50 + "]" * 50), "more than 32 levels"),
    ("{not json", "not valid JSON"),
    ([1, 2], "schema_version None is not supported"),
], ids=lambda value: value if isinstance(value, str) and len(value) < 80 else "")
def test_foreign_values_make_the_file_unreadable_not_the_report(tmp_path, capsys, content, reason):
    good_result().write(tmp_path / "cells" / "good.json")
    write_raw(tmp_path, "bad.json", content)
    markdown = render_report(tmp_path, capsys)
    assert "## Unreadable result files" in markdown
    [listed] = [line for line in markdown.splitlines() if line.startswith("- bad.json: ")]
    assert reason.replace("_", "\\_").replace("[", "\\[").replace("]", "\\]") in listed
    assert table_row(markdown, "pytorch")[-1] == "ok"  # the rest still renders
    assert "unreadable" in (tmp_path / "report.html").read_text().lower()


def test_unknown_workload_names_are_listed_not_fatal(tmp_path, capsys):
    good_result().write(tmp_path / "cells" / "good.json")
    write_raw(tmp_path, "other.json", foreign(cell__workload="bert"))
    markdown = render_report(tmp_path, capsys)
    [listed] = [line for line in markdown.splitlines() if line.startswith("- other.json: ")]
    assert "unknown workload 'bert'" in listed  # listed with the unreadable files, never fatal
    assert table_row(markdown, "pytorch")[-1] == "ok"


def test_only_unreadable_results_is_one_line(tmp_path, capsys):
    write_raw(tmp_path, "bad.json", "{not json")
    line = refused(["report", str(tmp_path)], capsys)
    assert "no readable result in" in line and "1 unreadable file(s), e.g. bad.json: not valid JSON" in line


def test_labels_with_dollar_signs_are_text_not_mathtext(tmp_path, capsys):
    good_result().write(tmp_path / "cells" / "good.json")
    good_result(framework=r"fw$\notacommand{$", seconds=12.0).write(tmp_path / "cells" / "dollar.json")
    markdown = render_report(tmp_path, capsys)
    assert table_row(markdown, r"fw$\\notacommand{$")[-1] == "ok"
    assert r"fw$\notacommand{$" in (tmp_path / "report.html").read_text()  # the SVG label, as written


def _report_in_a_bounded_process(results_dir: Path) -> subprocess.CompletedProcess:
    """`report` in a child with a time and memory limit: were a FIFO opened blocking, or a device
    read to its end, the test fails in seconds instead of hanging or filling the memory."""
    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run([sys.executable, "-m", "orchestrator", "report", str(results_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, preexec_fn=limit_memory,
                          env={**os.environ, "MPLBACKEND": "Agg"})


@pytest.mark.parametrize("plant, reason", [
    (lambda path: os.mkfifo(path), "is not a regular file"),
    pytest.param(lambda path: path.symlink_to("/dev/zero"), "is a symbolic link; links are never followed here",
                 id="dev-zero"),
    (lambda path: path.symlink_to(path.parent / "good.json"), "is a symbolic link"),
    (lambda path: path.mkdir(), "is not a regular file"),
])
def test_fifo_device_link_or_folder_in_cells_neither_hangs_nor_fills_memory(tmp_path, plant, reason):
    good_result().write(tmp_path / "cells" / "good.json")
    plant(tmp_path / "cells" / "planted.json")
    try:
        finished = _report_in_a_bounded_process(tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("report hung on a planted file in cells/")
    assert finished.returncode == 1, finished.stderr[-2000:]  # rendered, the planted file left out and named
    assert "left out " in finished.stderr and "planted.json" in finished.stderr
    markdown = (tmp_path / "report.md").read_text()
    [listed] = [line for line in markdown.splitlines() if line.startswith("- planted.json: ")]
    assert reason in listed


def test_a_larger_than_allowed_cell_file_is_not_read(tmp_path, capsys, monkeypatch):
    from orchestrator import results

    monkeypatch.setattr(results, "LONGEST_CELL_FILE", 4000)
    good_result().write(tmp_path / "cells" / "good.json")
    write_raw(tmp_path, "big.json", foreign(settings={"padding": "x" * 10000}))
    markdown = render_report(tmp_path, capsys)
    assert "- big.json: " in markdown and "is larger than 4000 bytes" in markdown


@pytest.mark.parametrize("bad", ["Infinity", "-Infinity", "NaN", "-3.0"])
def test_infinite_negative_or_nan_times_are_invalid_never_ranked(tmp_path, capsys, bad):
    good_result("pytorch", 10.0).write(tmp_path / "cells" / "good.json")
    good_result("tensorflow", 20.0).write(tmp_path / "cells" / "slower.json")
    record = json.dumps(good_result("broken", 1.0).to_dict()).replace('"train_time_s": 1.0',
                                                                       f'"train_time_s": {bad}')
    write_raw(tmp_path, "broken.json", record)
    markdown = render_report(tmp_path, capsys)
    headings = table_row(markdown, "Framework")
    relative = headings.index("Relative")
    assert table_row(markdown, "pytorch")[relative] == "1.00x"  # the best valid figure ranks first
    assert table_row(markdown, "tensorflow")[relative] == "2.00x"
    broken = table_row(markdown, "broken")  # only in the "Not ranked" table: no median, no relative
    value = {"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan", "-3.0": "-3.0"}[bad]
    assert broken[-1] == (f"invalid: metrics.train\\_time\\_s is {value}: not a finite, non-negative number, "
                          f"so not a measurement")
    ranking = markdown.split("## Steady-state ranking", 1)[1].split("## This run", 1)[0]
    ranked = [line.split(" | ")[1] for line in ranking.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    assert ranked == ["pytorch", "tensorflow"]


def test_markdown_escapes_html_and_markdown_from_results(tmp_path, capsys):
    good_result().write(tmp_path / "cells" / "good.json")
    failed = Result(Cell("evil<b>", "cnn"), status="failed", reason="<script>alert(1)</script> | [x](javascript:y) *z*")
    failed.provenance.framework_version = "<img src=x onerror=alert(1)>"
    failed.provenance.extras["matched"] = "<i>shape</i>"
    failed.write(tmp_path / "cells" / "evil.json")
    ok_evil = good_result("<u>fw</u>")
    ok_evil.provenance.extras["matched"] = "<i>shape</i> | `code`"
    ok_evil.write(tmp_path / "cells" / "evil-ok.json")
    markdown = render_report(tmp_path, capsys)
    assert "<script>" not in markdown and "<img" not in markdown and "<i>" not in markdown and "<b>" not in markdown
    assert "<u>" not in markdown
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| \\[x\\](javascript:y) \\*z\\*" in markdown
    assert "### &lt;u&gt;fw&lt;/u&gt;" in markdown
    lines = markdown.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| evil&lt;b&gt; |"))
    header = next(line for line in reversed(lines[:at]) if line.startswith("| Framework |"))  # its own table's
    assert lines[at].replace("\\|", "").count("|") == header.count("|")  # the table keeps its columns
