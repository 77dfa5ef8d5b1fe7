"""The results folder (docs/RUN-GUARANTEES.md): nothing lost, nothing overwritten, nothing deleted
outside it, and nothing written or removed through a link.

Most runs use a fake backend registered for the test (as tests/test_commands.py does), so no
framework runs; one runs a real PyTorch smoke cell through the local backend with links planted.
"""
import datetime
import errno
import fcntl
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.framework_cells import framework_python

from orchestrator.run_settings import RunSettings
from orchestrator.backends.contract import Backend
from orchestrator.backends.options import BackendOptions
from orchestrator import frameworks, run_folder, runner
from orchestrator.__main__ import main
from orchestrator.backends import registry
from orchestrator.backends.local import LocalBackend
from workloads.common import safe_files
from workloads.common.result import Cell, Result
from support.records import measured

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = frameworks.discover()
CNN = Cell("pytorch", "cnn", variant="cpu", profile="smoke", data="synthetic", mode="eager")
GRU = Cell("pytorch", "gru", variant="cpu", profile="smoke", data="synthetic", mode="eager")


class FakeBackend(Backend):
    """'Runs' each cell by writing an ok result into its log and returning it; `during` runs inside."""

    name = "fake"
    during = None

    def run_cell(self, job):
        if FakeBackend.during:
            FakeBackend.during(job)
        job.log_path.parent.mkdir(parents=True, exist_ok=True)  # as the real backends do
        with open(job.log_path, "ab") as log:  # as a cell's subprocess does: appends to what it is given
            log.write(b"cell output\n")
        return measured(Result(cell=job.cell, status="ok"))


@pytest.fixture
def in_tmp(in_tmp, monkeypatch):
    """conftest's, with a stand-in backend registered as "fake"."""
    monkeypatch.setitem(registry.REGISTRY, "fake", registry.Registration(
        lambda known, options, log: FakeBackend(), "fake", "cells pretend to run"))
    monkeypatch.setattr(FakeBackend, "during", None)
    return in_tmp


def run_matrix(results_dir, *extra, workloads="cnn", report=False) -> int:
    argv = ["run-matrix", "--backend", "fake", "--frameworks", "pytorch", "--variants", "cpu", "--modes", "eager",
            "--workloads", workloads, "--profile", "smoke", "--data", "synthetic", "--data-dir", "data"]
    if results_dir is not None:
        argv += ["--results-dir", str(results_dir)]
    return main(argv + ([] if report else ["--no-report"]) + list(extra))


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def victim_folder(tmp_path) -> Path:
    """A folder outside the results folder that a run must never touch."""
    victim = tmp_path / "victim"
    (victim / CNN.key).mkdir(parents=True)
    (victim / CNN.key / "precious.txt").write_text("precious")
    (victim / "precious.txt").write_text("precious")
    return victim


def assert_untouched(victim: Path) -> None:
    assert (victim / "precious.txt").read_text() == "precious"
    assert (victim / CNN.key / "precious.txt").read_text() == "precious"


# --- item 1: never delete or write outside the results folder through a link ---------------------

WRITES_AN_OK_RESULT = "print('cell output')\nok(cell).write(out)\n"


def test_a_planted_work_link_never_deletes_its_target(in_tmp, capsys, fake_interpreter):
    """`.work/<key>` linked to a folder elsewhere: the old runner resolved it and the local backend
    removed the target. Now the link is removed, never its target."""
    victim = victim_folder(in_tmp)
    (in_tmp / "run" / ".work").mkdir(parents=True)
    (in_tmp / "run" / ".work" / CNN.key).symlink_to(victim / CNN.key)
    code = main(["run-matrix", "--backend", "local", "--python", fake_interpreter(WRITES_AN_OK_RESULT), "--frameworks", "pytorch",
                 "--variants", "cpu", "--modes", "eager", "--workloads", "cnn", "--profile", "smoke", "--data", "synthetic",
                 "--results-dir", "run", "--data-dir", "data", "--no-report", "--resume"])
    assert code == 0, capsys.readouterr().err
    assert_untouched(victim)
    assert not (in_tmp / "run" / ".work").exists()  # the run's scratch folder is gone after it
    assert json.loads((in_tmp / "run" / "cells" / f"{CNN.key}.json").read_text())["status"] == "ok"


def test_a_linked_work_folder_is_refused_and_its_target_kept(in_tmp, capsys):
    victim = victim_folder(in_tmp)
    (in_tmp / "run").mkdir()
    (in_tmp / "run" / ".work").symlink_to(victim)
    assert run_matrix(in_tmp / "run", "--resume") == 2
    line = error_line(capsys)
    assert ".work is a symbolic link" in line and "--results-dir" in line
    assert_untouched(victim)


def test_the_local_backend_unlinks_a_linked_work_folder_without_following_it(tmp_path, fake_interpreter):
    victim = victim_folder(tmp_path)
    work = tmp_path / "work" / CNN.key
    work.parent.mkdir()
    work.symlink_to(victim / CNN.key)
    from orchestrator.backends import CellJob

    result = LocalBackend(REGISTRY, python=fake_interpreter(WRITES_AN_OK_RESULT)).run_cell(
        CellJob(cell=CNN, device="cpu", work_dir=work, log_path=tmp_path / "cell.log", data_dir=tmp_path / "data"))
    assert result.status == "ok", result.reason
    assert_untouched(victim)
    assert not os.path.lexists(work)


# --- item 2: two runs never overwrite each other ------------------------------------------------

class _FrozenClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2024, 1, 2, 3, 4, 5, tzinfo=tz)


def test_run_folders_named_in_the_same_second_are_distinct(tmp_path, monkeypatch):
    monkeypatch.setattr(datetime, "datetime", _FrozenClock)
    first, second = run_folder.new_results_dir(tmp_path), run_folder.new_results_dir(tmp_path)
    third = run_folder.new_results_dir(tmp_path, prefix="parity-")
    assert first.name == "20240102-030405" and second.name == "20240102-030405-2"
    assert third.name == "parity-20240102-030405"
    assert first.is_dir() and second.is_dir() and third.is_dir()  # created, exclusively


def test_a_non_empty_results_dir_is_refused_without_resume_or_force(in_tmp, capsys):
    assert run_matrix(in_tmp / "run") == 0
    (in_tmp / "run" / "notes.txt").write_text("mine")
    before = (in_tmp / "run" / "cells" / f"{CNN.key}.json").read_bytes()
    assert run_matrix(in_tmp / "run", workloads="gru") == 2
    line = error_line(capsys)
    assert "run already holds results" in line and "--resume" in line and "--force" in line
    assert not list((in_tmp / "run" / "cells").glob("*gru*"))
    # --force runs into it: the new cell is added, nothing else changed or deleted
    assert run_matrix(in_tmp / "run", "--force", workloads="gru") == 0
    assert (in_tmp / "run" / "cells" / f"{CNN.key}.json").read_bytes() == before
    assert (in_tmp / "run" / "cells" / f"{GRU.key}.json").is_file()
    assert (in_tmp / "run" / "notes.txt").read_text() == "mine"
    assert len(json.loads((in_tmp / "run" / "run.json").read_text())["invocations"]) == 2


def test_force_is_offered_by_run_matrix_and_parity():
    from orchestrator.__main__ import build_parser

    parser = build_parser()
    assert parser.parse_args(["run-matrix", "--force"]).force is True
    assert parser.parse_args(["parity", "--force"]).force is True


def test_a_second_run_on_a_locked_folder_gets_one_line(in_tmp, capsys):
    """A second run started while the first still runs (here: from inside its cell) is refused."""
    seen = []

    def second_run(job):
        FakeBackend.during = None
        seen.append(run_matrix(in_tmp / "run", "--resume", workloads="gru"))

    FakeBackend.during = second_run
    assert run_matrix(in_tmp / "run") == 0
    assert seen == [2]
    err = capsys.readouterr().err
    assert "another run" in err and "is writing into" in err and str(in_tmp / "run") in err
    assert not list((in_tmp / "run" / "cells").glob("*gru*"))


def test_a_folder_locked_by_another_process_is_refused(in_tmp, capsys):
    (in_tmp / "run").mkdir()
    with open(in_tmp / "run" / ".run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert run_matrix(in_tmp / "run", "--resume") == 2
    assert "another run" in error_line(capsys)
    assert run_matrix(in_tmp / "run", "--resume") == 0  # free again once the holder lets go


# --- item 3: atomic writes, never through a link ------------------------------------------------

def test_a_planted_log_link_does_not_truncate_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run" / "logs" / f"{CNN.key}.log").symlink_to(victim)
    runner.run_cells([CNN], FakeBackend(), REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                                 data_dir=tmp_path / "data", resume=True))
    assert victim.read_text() == "precious"
    log = tmp_path / "run" / "logs" / f"{CNN.key}.log"
    assert not log.is_symlink() and log.read_text() == "cell output\n"


def test_planted_report_and_parity_links_are_replaced_not_written_through(in_tmp):
    from orchestrator.commands import report

    victim = in_tmp / "victim.txt"
    victim.write_text("precious")
    assert run_matrix(in_tmp / "run") == 0
    for name in ("report.md", "report.html"):
        (in_tmp / "run" / name).symlink_to(victim)
    report.render(in_tmp / "run")
    assert victim.read_text() == "precious"
    assert not (in_tmp / "run" / "report.md").is_symlink()
    assert "Rosetta Bench report" in (in_tmp / "run" / "report.md").read_text()


def test_parity_files_are_written_atomically(in_tmp, monkeypatch):
    """parity.md and parity.json go through safe_files (replacing a link, never through one)."""
    from orchestrator import parity
    from orchestrator.commands import parity as parity_command

    written = []
    real = safe_files.write_text_atomic
    monkeypatch.setattr(safe_files, "write_text_atomic", lambda path, text, **kw: written.append(Path(path).name)
                        or real(path, text, **kw))
    monkeypatch.setattr(parity, "write_canonical", lambda data_dir, workloads: None)
    monkeypatch.setattr(parity, "compare", lambda results: [])
    victim = in_tmp / "victim.txt"
    victim.write_text("precious")
    (in_tmp / "p").mkdir()
    settings = RunSettings(results_dir=in_tmp / "p", data_dir=in_tmp / "data")
    assert parity_command.parity_check(BackendOptions(backend="fake"), settings, frameworks=["pytorch"],
                                       workloads=["cnn"]) == 0
    assert {"parity.md", "parity.json"} <= set(written)
    assert victim.read_text() == "precious"
    assert stat.S_IMODE((in_tmp / "p" / "parity.md").stat().st_mode) == safe_files.FILE_MODE


# --- item 4: --resume continues benchmark runs only ---------------------------------------------

def test_resume_picks_the_newest_benchmark_run_not_parity(in_tmp, capsys):
    benchmark, parity_run = in_tmp / "results" / "20240101-000000", in_tmp / "results" / "parity-20240102-000000"
    for folder, mode in ((benchmark, "benchmark"), (parity_run, "parity")):
        (folder / "cells").mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"invocations": [{"mode": mode}]}))
    os.utime(benchmark / "run.json", (1, 1))  # the parity run is the newest
    # an older run.json without a mode, in a folder not named parity-*, is a benchmark run
    assert run_matrix(None, "--resume") == 0, capsys.readouterr().err
    assert (benchmark / "cells" / f"{CNN.key}.json").is_file()
    assert not list((parity_run / "cells").iterdir())
    invocations = json.loads((benchmark / "run.json").read_text())["invocations"]
    assert invocations[-1]["mode"] == "benchmark"


def test_resume_with_only_parity_runs_says_so(in_tmp, capsys):
    (in_tmp / "results" / "parity-20240102-000000").mkdir(parents=True)
    (in_tmp / "results" / "parity-20240102-000000" / "run.json").write_text('{"invocations": []}')
    assert run_matrix(None, "--resume") == 2
    assert "--resume: no earlier run under results/" in error_line(capsys)


# --- item 5: an unusable results folder or a full disk: one line, exit 2 -------------------------

def _plant(kind: str, run: Path) -> None:
    if kind == "a file":
        run.write_text("x")
    elif kind == "under a file":
        run.write_text("x")
    else:
        run.mkdir()
        what, name = kind.split(" as ")
        path = run / name
        if what == "file":
            path.write_text("x")
        elif what == "folder":
            path.mkdir()
        else:
            path.symlink_to(run.parent / "elsewhere")


@pytest.mark.parametrize("kind, expected", [
    ("a file", "is a file, not a folder"),
    ("under a file", "a part of that path is a file"),
    ("file as cells", "cells is a file where the run keeps a folder"),
    ("file as logs", "logs is a file where the run keeps a folder"),
    ("folder as run.json", "run.json is a folder where the run writes a file"),
    ("folder as report.md", "report.md is a folder where the run writes a file"),
    ("link as cells", "cells is a symbolic link"),
    ("link as run.json", "run.json is a symbolic link"),
    ("link as report.html", "report.html is a symbolic link"),
    ("link as code.html", "code.html is a symbolic link"),
    ("link as compare.html", "compare.html is a symbolic link"),
    ("folder as cells.csv", "cells.csv is a folder where the run writes a file"),
])
def test_unusable_results_folders_get_one_line(in_tmp, capsys, kind, expected):
    (in_tmp / "elsewhere").mkdir()
    _plant(kind, in_tmp / "run")
    results_dir = in_tmp / "run" / "sub" if kind == "under a file" else in_tmp / "run"
    assert run_matrix(results_dir, "--resume") == 2
    assert expected in error_line(capsys)
    assert not list((in_tmp / "elsewhere").iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_results_folder_that_is_not_writable_gets_one_line(in_tmp, capsys):
    (in_tmp / "run").mkdir(mode=0o500)
    assert run_matrix(in_tmp / "run") == 2
    assert "is not writable" in error_line(capsys)


def test_parity_with_a_results_folder_that_is_a_file(in_tmp, capsys, monkeypatch):
    from orchestrator import parity

    monkeypatch.setattr(parity, "write_canonical", lambda data_dir, workloads: None)
    (in_tmp / "p").write_text("x")
    assert main(["parity", "--backend", "fake", "--frameworks", "pytorch", "--workloads", "cnn",
                 "--results-dir", "p", "--data-dir", "data"]) == 2
    assert "p is a file, not a folder" in error_line(capsys)


def test_a_full_disk_while_writing_a_cell_says_which_file_and_keeps_the_finished_ones(in_tmp, capsys, monkeypatch):
    real_fsync, cell_writes = os.fsync, []

    def fsync(descriptor):
        if "/cells/" in os.readlink(f"/proc/self/fd/{descriptor}"):
            cell_writes.append(descriptor)
            if len(cell_writes) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    assert run_matrix(in_tmp / "run", workloads="cnn,gru") == 2
    line = error_line(capsys)
    written = sorted(path.name for path in (in_tmp / "run" / "cells").iterdir())
    assert len(written) == 1 and written[0].endswith(".json")  # the first cell, and no temporary
    assert "cannot write" in line and "/cells/pytorch__cpu__" in line and "no space left" in line
    assert "1 cell(s) finished are kept" in line and "--resume" in line


def test_a_full_disk_keeps_the_old_report_and_says_which_file(in_tmp):
    """`ulimit -f` makes writes past a few KiB fail (EFBIG) as a full disk would."""
    assert run_matrix(in_tmp / "run") == 0
    (in_tmp / "run" / "report.html").write_text("the good one")
    command = f"ulimit -f 4; exec {sys.executable} -m orchestrator report {in_tmp / 'run'}"
    completed = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
                                    "MPLCONFIGDIR": str(in_tmp / "mpl")})
    assert completed.returncode == 2, completed.stderr
    assert "Traceback" not in completed.stderr
    assert "cannot write the report" in completed.stderr and "report.html" in completed.stderr
    assert "are kept" in completed.stderr
    assert (in_tmp / "run" / "report.html").read_text() == "the good one"
    assert not [p.name for p in (in_tmp / "run").iterdir() if p.name.endswith(".tmp")]


# --- item 6: one mode for everything a run produces ---------------------------------------------

def test_results_logs_and_reports_share_one_mode_whatever_the_umask(in_tmp):
    previous = os.umask(0o077)
    try:
        assert run_matrix(in_tmp / "run", report=True) == 0
    finally:
        os.umask(previous)
    files = [path for path in (in_tmp / "run").rglob("*") if path.is_file()]
    names = {path.name for path in files}
    assert {"run.json", "report.md", "report.html", f"{CNN.key}.json", f"{CNN.key}.log"} <= names
    assert {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in files} == \
        {path.name: oct(safe_files.FILE_MODE) for path in files}


# --- the real path: a PyTorch smoke cell through the local backend, links planted ---------------

def test_a_real_pytorch_cell_with_planted_links_touches_nothing_outside(tmp_path):
    framework_python("pytorch")  # the environment run-matrix uses, built once per test session
    victim = victim_folder(tmp_path)
    victim_log = tmp_path / "victim.log"
    victim_log.write_text("precious")
    run = tmp_path / "run"
    (run / ".work").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / ".work" / CNN.key).symlink_to(victim / CNN.key)
    (run / "logs" / f"{CNN.key}.log").symlink_to(victim_log)
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "pytorch",
               "--variants", "cpu", "--modes", "eager", "--workloads", "cnn", "--profile", "smoke", "--data",
               "synthetic", "--results-dir", str(run), "--data-dir", str(tmp_path / "data"), "--resume", "--timeout",
               "600"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr
    assert_untouched(victim)
    assert victim_log.read_text() == "precious"
    assert Result.read(run / "cells" / f"{CNN.key}.json").status == "ok"
    log = run / "logs" / f"{CNN.key}.log"
    assert not log.is_symlink() and log.stat().st_size > 0
    assert not (run / ".work").exists()
    assert (run / "report.md").is_file() and not (run / "report.md").is_symlink()
