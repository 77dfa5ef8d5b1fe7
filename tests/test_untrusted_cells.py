"""A cell is untrusted (docs/RUN-GUARANTEES.md, the trust model): what it writes back is filed under
the job's own cell, read bounded and type-checked, and a bad result is that cell failed, never the
matrix ended. Real subprocesses stand in for a framework (the local backend runs them as it runs
a framework's interpreter); the Docker and Ray backends hand their results to the same `collect`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import frameworks, results
from orchestrator.backends.local import LocalBackend
from orchestrator.errors import UserError
from orchestrator.runner import run_cells
from workloads.common import safe_files
from workloads.common.result import Cell, Result
from records import fake_interpreter, measured

REGISTRY = frameworks.discover()
CELLS = [Cell("pytorch", workload, profile="smoke", data="synthetic") for workload in ("cnn", "gru", "resnet50")]


def run_with(tmp_path: Path, hostile: str, *, resume: bool = False):
    """Run CELLS on the local backend; the gru cell does `hostile` (Python, with `request`, `out`
    and `ok(cell)`), the other two write an honest ok result."""
    body = "if request.cell.workload == 'gru':\n" + "".join(f"    {line}\n" for line in hostile.splitlines()) + \
           "else:\n    ok(request.cell).write(out)\n"
    backend = LocalBackend(REGISTRY, python=fake_interpreter(tmp_path, body))
    return run_cells(CELLS, backend, REGISTRY, results_dir=tmp_path / "run", data_dir=tmp_path / "data",
                     resume=resume)


def outcome(summary, workload: str) -> Result:
    [result] = [result for result in summary.results if result.cell.workload == workload]
    return result


def files_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}


def test_a_result_naming_a_path_is_filed_under_its_own_cell_and_fails_it(tmp_path):
    summary = run_with(tmp_path, "from workloads.common.result import Cell\n"
                                 "forged = ok(Cell('../../../escaped', 'gru', profile='smoke', data='synthetic'))\n"
                                 "forged.write(out)")
    gru = outcome(summary, "gru")
    assert gru.status == "failed" and "names another cell" in gru.reason and "refused" in gru.reason
    assert [outcome(summary, name).status for name in ("cnn", "resnet50")] == ["ok", "ok"]  # the matrix went on
    assert not list(tmp_path.rglob("escaped*")), "a forged name put a file outside its cell"
    assert f"cells/{CELLS[1].key}.json" in files_under(tmp_path / "run")


def test_a_result_naming_another_cell_never_overwrites_it(tmp_path):
    summary = run_with(tmp_path, "from workloads.common.result import Cell\n"
                                 "forged = ok(Cell('pytorch', 'cnn', profile='smoke', data='synthetic'))\n"
                                 "forged.metrics.steady_samples_per_s = 1e12\n"
                                 "forged.write(out)")
    assert outcome(summary, "gru").status == "failed"
    cnn = Result.read(results.cell_path(tmp_path / "run", CELLS[0]))
    assert cnn.status == "ok" and cnn.metrics.steady_samples_per_s == 1.0  # the honest cnn cell's own figure


@pytest.mark.parametrize("hostile, reason", [
    ("open(out, 'wb').write(b'\\xff\\xfe not text')", "not UTF-8 text"),
    ("open(out, 'w').write('42')", "schema_version None is not supported"),
    ("open(out, 'w').write('[' * 100000 + ']' * 100000)", "nested"),
    ("import json\nrecord = ok(request.cell).to_dict()\nrecord['metrics'] = 5\nopen(out, 'w').write(json.dumps(record))",
     "metrics must be an object"),
    ("import json\nrecord = ok(request.cell).to_dict()\nrecord['cell']['workload'] = 'bert'\n"
     "open(out, 'w').write(json.dumps(record))", "names another cell"),
    ("import os\nok(request.cell).write(out + '.real')\nos.symlink(out + '.real', out)", "symbolic link"),
    ("import os\nos.mkfifo(out)", "not a regular file"),
    ("from workloads.common.result import Result\nResult(request.cell).write(out)",
     "status ok but it lacks its timed phases, its headline figure"),
])
def test_a_bad_result_is_that_cell_failed_and_the_matrix_goes_on(tmp_path, hostile, reason):
    summary = run_with(tmp_path, hostile)
    gru = outcome(summary, "gru")
    assert gru.status == "failed" and reason in gru.reason, gru.reason
    assert "\n" not in gru.reason
    assert [outcome(summary, name).status for name in ("cnn", "resnet50")] == ["ok", "ok"]
    assert Result.read(results.cell_path(tmp_path / "run", CELLS[1])).status == "failed"


def test_a_result_larger_than_the_cap_is_never_read(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "LONGEST_CELL_FILE", 10_000)
    summary = run_with(tmp_path, "record = ok(request.cell)\nrecord.settings['padding'] = 'x' * 20000\n"
                                 "record.write(out)")
    gru = outcome(summary, "gru")
    assert gru.status == "failed" and "is larger than 10000 bytes" in gru.reason


def test_resume_reruns_a_planted_or_foreign_file_never_counts_it_finished(tmp_path):
    run_with(tmp_path, "ok(request.cell).write(out)")
    cells = tmp_path / "run" / "cells"
    gru_file = results.cell_path(tmp_path / "run", CELLS[1])
    other = measured(Result(Cell("pytorch", "cnn", profile="smoke", data="synthetic")))
    gru_file.write_text(json.dumps(other.to_dict()))  # another cell's record under gru's name
    cnn_file = results.cell_path(tmp_path / "run", CELLS[0])
    cnn_file.unlink()
    (cells / "elsewhere.json").write_text(json.dumps(measured(Result(CELLS[0])).to_dict()))
    cnn_file.symlink_to(cells / "elsewhere.json")  # a link is never a finished cell
    again = run_with(tmp_path, "ok(request.cell).write(out)", resume=True)
    assert sorted(result.cell.workload for result in again.results) == ["cnn", "gru"]
    assert again.skipped == 1
    assert Result.read(gru_file).cell == CELLS[1]


@pytest.mark.parametrize("name", ["../up", "a/b", "..", "", "x" * 201, "tab\there", "nul\0"])
def test_a_name_joined_into_a_path_is_one_plain_file_name(name):
    with pytest.raises(safe_files.UnsafePath):
        safe_files.safe_name(name)
    if name not in ("", ".."):  # within a key ("..__cpu__cnn__...") these are harmless
        with pytest.raises(safe_files.UnsafePath):
            results.cell_path("/tmp/run", Cell(name, "cnn"))


def test_a_cell_whose_name_is_a_path_is_refused_before_anything_runs(tmp_path):
    backend = LocalBackend(REGISTRY, python=fake_interpreter(tmp_path, "ok(request.cell).write(out)"))
    with pytest.raises(UserError, match="is not a plain file name"):
        run_cells([Cell("pytorch", "cnn", variant="../../x", profile="smoke", data="synthetic")], backend,
                  REGISTRY, results_dir=tmp_path / "run", data_dir=tmp_path / "data")
    assert not (tmp_path / "x").exists()


def command(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *arguments], capture_output=True, text=True,
                          timeout=300)


def test_report_compare_and_export_name_each_file_left_out_and_exit_1(tmp_path):
    """An ok that lacks its figures is not ok: the rest is rendered, each such file named with why."""
    for run in ("base", "new"):
        for result in (measured(Result(CELLS[0]), rate=100.0), measured(Result(CELLS[2]), rate=50.0)):
            result.write(results.cell_path(tmp_path / run, result.cell))
    hollow = Result(CELLS[1])  # status ok, nothing measured
    hollow.write(results.cell_path(tmp_path / "new", hollow.cell))
    reason = "status ok but it lacks its timed phases"
    for arguments in (("report", str(tmp_path / "new")), ("compare", str(tmp_path / "base"), str(tmp_path / "new")),
                      ("export", str(tmp_path / "new"), "--out", str(tmp_path / "cells.csv"))):
        finished = command(*arguments)
        assert finished.returncode == 1, finished.stderr
        assert "Traceback" not in finished.stderr
        [line] = [line for line in finished.stderr.splitlines() if line.startswith("left out ")]
        assert CELLS[1].key in line and reason in line
    assert (tmp_path / "new" / "report.md").is_file() and (tmp_path / "cells.csv").is_file()
    assert CELLS[0].key in (tmp_path / "cells.csv").read_text()
