"""A cell is untrusted (docs/RUN-GUARANTEES.md, the trust model): what it writes back is filed under
the job's own cell, read bounded and type-checked, and a bad result is that cell failed, never the
matrix ended. Real subprocesses stand in for a framework (the local backend runs them as it runs
a framework's interpreter); the Docker and Ray backends hand their results to the same `collect`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.run_settings import RunSettings
from orchestrator import frameworks, results
from orchestrator.backends.local import LocalBackend
from orchestrator.errors import UserError
from orchestrator.runner import run_cells
from workloads.common import safe_files
from workloads.common.result import Cell, Result
from support.records import measured, write_fake_interpreter

REGISTRY = frameworks.discover()
CELLS = [Cell("pytorch", workload, profile="smoke", data="synthetic") for workload in ("cnn", "gru", "resnet50")]


def run_with(tmp_path: Path, hostile: str, *, resume: bool = False):
    """Run CELLS on the local backend; the gru cell does `hostile` (Python, with `request`, `out`
    and `ok(cell)`), the other two write an honest ok result."""
    body = "if request.cell.workload == 'gru':\n" + "".join(f"    {line}\n" for line in hostile.splitlines()) + \
           "else:\n    ok(request.cell).write(out)\n"
    backend = LocalBackend(REGISTRY, python=write_fake_interpreter(tmp_path, body))
    return run_cells(CELLS, backend, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data",
                                                           resume=resume))


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


def test_a_cell_whose_name_is_a_path_is_refused_before_anything_runs(tmp_path, fake_interpreter):
    backend = LocalBackend(REGISTRY, python=fake_interpreter("ok(request.cell).write(out)"))
    with pytest.raises(UserError, match="is not a plain file name"):
        run_cells([Cell("pytorch", "cnn", variant="../../x", profile="smoke", data="synthetic")], backend,
                  REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data"))
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


# --- whatever bytes a cell hands back ------------------------------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from orchestrator.backends import collect  # noqa: E402

VALID = json.dumps(measured(Result(CELLS[1])).to_dict()).encode("utf-8")
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4), max_leaves=12)


@st.composite
def mutated_results(draw) -> bytes:
    """A valid result's bytes with one hostile change: bytes flipped, cut or inserted, or one field's
    value replaced by any JSON value."""
    kind = draw(st.sampled_from(["flip", "cut", "insert", "replace"]))
    if kind == "replace":
        record = json.loads(VALID)
        parts = [record]
        while isinstance(parts[-1], dict) and parts[-1] and draw(st.booleans()):
            parts.append(parts[-1][draw(st.sampled_from(sorted(parts[-1])))])
        target = parts[-2] if len(parts) > 1 else record
        key = draw(st.sampled_from(sorted(target))) if isinstance(target, dict) and target else "cell"
        target[key] = draw(JSON_VALUES)
        return json.dumps(record, allow_nan=draw(st.booleans()) or True).encode("utf-8")
    at = draw(st.integers(0, len(VALID)))
    if kind == "cut":
        return VALID[:at]
    if kind == "insert":
        return VALID[:at] + draw(st.binary(min_size=1, max_size=16)) + VALID[at:]
    flipped = bytearray(VALID)
    flipped[min(at, len(VALID) - 1)] ^= draw(st.integers(1, 255))
    return bytes(flipped)


@settings(max_examples=int(os.environ.get("ROSETTA_HYPOTHESIS_EXAMPLES", "1000")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(content=mutated_results(), exit_code=st.sampled_from([0, 1, 3]))
def test_whatever_a_cell_writes_back_is_a_result_of_its_own_cell_never_a_traceback(tmp_path, content, exit_code):
    out = tmp_path / "result.json"
    out.write_bytes(content)
    result = collect(CELLS[1], exit_code=exit_code, result_file=out, log_path=tmp_path / "cell.log")
    assert result.cell == CELLS[1]
    assert result.status in ("ok", "failed", "unsupported")
    if result.status == "ok":
        assert results.ok_result_problem(result) is None and exit_code == 0
    else:
        assert isinstance(result.reason, str) and result.reason
        if result.reason.startswith(("unreadable result", "its result")):  # the host's own reason: one line
            assert result.reason.isprintable() and len(result.reason) < 2000, result.reason
