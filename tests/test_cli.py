"""Every command-line error path: one clear line naming the fix, a non-zero exit, no traceback."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import default_signal_dispositions
from orchestrator.__main__ import main
from workloads.common.result import Cell, Result

ROOT = Path(__file__).resolve().parent.parent


def error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("argv, expected", [
    (["run-matrix", "--matrix", "missing.toml"], "matrix file missing.toml not found; pass --matrix FILE"),
    (["run-matrix", "--frameworks", "caffe3"], "unknown framework 'caffe3'; choose from"),
    (["run-matrix", "--variants", "rocm"], "unknown variant 'rocm'; choose from cpu, cu1"),
    (["run-matrix", "--workloads", "bert"], "unknown workload 'bert'; choose from cnn, resnet50, gru"),
    (["run-matrix", "--precisions", "fp8"], "unknown precision 'fp8'"),
    (["run-matrix", "--backend", "docker", "--python", "/usr/bin/python3"], "--python runs cells with a host interpreter: it needs --backend local"),
    (["run-matrix", "--backend", "local", "--timeout", "0"], "argument --timeout: must be a number of seconds more than 0 and at most 604800"),
    (["run-matrix", "--backend", "local", "--python", "/no/such/python"], "no such interpreter"),
    (["run-matrix", "--backend", "local", "--resume"], "--resume: no earlier run under results/"),
    (["run-matrix", "--repeat", "0"], "argument --repeat: must be a whole number from 1 to 100, not '0'"),
    (["run-matrix", "--backend", "local", "--container-memory", "lots"], "--container-memory 'lots': give a size of at least 6m"),
    (["parity", "--backend", "local", "--container-pids", "0"], "--container-pids '0': give a number of processes from 1"),
    (["report", "no-such-run"], "no-such-run is not a results directory"),
])
def test_error_paths(in_tmp, capsys, argv, expected):
    assert main(argv) == 2
    assert expected in error_line(capsys)


def test_docker_engine_unreachable(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["run-matrix", "--backend", "docker"]) == 2
    line = error_line(capsys)
    assert "no Docker engine answered" in line and "--backend local" in line
    assert main(["build", "pytorch"]) == 2
    assert "no Docker engine answered" in error_line(capsys)


def test_bad_matrix_file(in_tmp, capsys):
    (in_tmp / "m.toml").write_text("[frameworks.pytorch]\nvariants = ['cpu']\nrepeats = 3\n")
    assert main(["run-matrix", "--matrix", "m.toml"]) == 2
    assert "m.toml [frameworks.pytorch]: unknown key 'repeats'; valid keys: variants, workloads, precisions" in error_line(capsys)


def test_report_refuses_unknown_schema_version(in_tmp, capsys):
    record = Result(Cell("pytorch", "cnn")).to_dict()
    record["schema_version"] = 99
    (in_tmp / "run" / "cells").mkdir(parents=True)
    (in_tmp / "run" / "cells" / "x.json").write_text(json.dumps(record))
    assert main(["report", "run"]) == 2
    line = error_line(capsys)
    assert "x.json" in line and "schema_version 99 is not supported" in line


def test_report_of_an_empty_run(in_tmp, capsys):
    (in_tmp / "run").mkdir()
    assert main(["report", "run"]) == 2
    assert "no results in" in error_line(capsys)


def test_missing_dataset_fails_its_cells_with_the_fix_and_the_rest_run(in_tmp, capsys, monkeypatch, fake_interpreter):
    """Offline without the file: one line names the file, the folder and --data synthetic."""
    monkeypatch.setenv("ROSETTA_OFFLINE", "1")
    fake = fake_interpreter("ok(cell).write(out)")
    code = main(["run-matrix", "--backend", "local", "--frameworks", "pytorch", "--variants", "cpu", "--workloads", "cnn,resnet50",
                 "--python", str(fake), "--data", "real", "--data-dir", str(in_tmp / "data"),
                 "--results-dir", "run", "--no-report"])
    assert code == 1  # a failed cell
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "cifar-10-python.tar.gz" in line and str(in_tmp / "data") in line and "--data synthetic" in line
    statuses = {p.name.split("__")[2]: json.loads(p.read_text())["status"] for p in (in_tmp / "run" / "cells").glob("*.json")}
    assert statuses == {"cnn": "failed", "resnet50": "ok"}
    assert not list((in_tmp / "data").glob("*.part*"))


def test_list_and_doctor(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["list"]) == 0
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "pytorch" in out and "cnn resnet50 gru" in out
    assert "Python" in out and "Docker engine" in out and "GPUs" in out


def test_list_fits_80_columns_in_a_pipe_and_cuts_no_name(capsys, monkeypatch):
    """As people read it: a terminal of 80 columns or a pipe. One line per framework, every name whole
    (the framework, its variants, workloads and options); the notes are in `list FRAMEWORK`."""
    from orchestrator import frameworks
    from workloads.common import options

    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "…" not in "".join(lines) and len(lines) < 40
    words = {word for line in lines for word in line.split()}
    for name, framework in frameworks.discover().items():
        assert name in words and set(framework.variants) <= words and set(framework.workloads) <= words
        assert set(options.declared(name)) <= words
    assert main(["list", "caffe2"]) == 0
    one = capsys.readouterr().out
    assert "executor: async_scheduling|simple (default async_scheduling)" in one
    assert "AVX/AVX2/FMA" in one.replace("\n", " ") and "cu102: cuda 10.2; Python 3.9" in one
    assert main(["list", "--verbose"]) == 0
    assert capsys.readouterr().out.count("variants:") == len(frameworks.discover())
    assert main(["list", "no-such-framework"]) == 2
    assert "no framework 'no-such-framework'; choose from caffe2, " in capsys.readouterr().err


@pytest.mark.parametrize("which", ["cache", "data"])
def test_doctor_on_an_unreadable_folder_is_one_line(in_tmp, capsys, monkeypatch, which):
    """Tests run as root, whom chmod 000 does not stop: the folder's listing raises as it would for a user."""
    from pathlib import Path as RealPath

    monkeypatch.setenv("COLUMNS", "250")
    unreadable = in_tmp / which
    (unreadable / "venvs").mkdir(parents=True)
    real_glob, real_is_file = RealPath.glob, RealPath.is_file

    def denied_glob(self, pattern):
        if str(self).startswith(str(unreadable)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_glob(self, pattern)

    def denied_is_file(self):
        if str(self).startswith(str(unreadable)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(RealPath, "glob", denied_glob)
    monkeypatch.setattr(RealPath, "is_file", denied_is_file)
    assert main(["doctor", f"--{which}-dir", str(unreadable)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Python" in captured.out  # the rest is still reported
    line = next(line for line in captured.err.splitlines() if line.startswith("error:"))
    assert f"cannot read {unreadable}" in line and "Permission denied" in line and f"--{which}-dir" in line


def test_doctor_with_a_cache_path_that_is_a_file(in_tmp, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    (in_tmp / "a-file").write_text("")
    a_file = in_tmp / "a-file"
    assert main(["doctor", "--cache-dir", str(a_file), "--data-dir", str(a_file)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error:"), err
    assert f"cannot use {a_file} (it is not a folder)" in lines[0]
    assert "--cache-dir DIR" in lines[0] and "--data-dir DIR" in lines[0]


def test_verbose_shows_the_traceback_and_the_module_entry_point_works(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "orchestrator", "--verbose", "run-matrix", "--frameworks", "nope"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert "Traceback" in completed.stderr and "unknown framework 'nope'" in completed.stderr
    completed = subprocess.run([sys.executable, "-m", "orchestrator", "run-matrix", "--frameworks", "nope"],
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in completed.stderr and completed.stderr.strip().startswith("error:")


def test_auto_backend_says_why_it_runs_locally(monkeypatch):
    from orchestrator import host
    from orchestrator.backends import registry

    monkeypatch.setattr(host, "docker_engine", lambda: host.DockerStatus(False, "no Docker engine answered"))
    said = []
    assert registry.choose("auto", log=said.append) == "local"
    assert said == ["No Docker engine answered; using the local backend (per-framework virtual environments)."]


def test_auto_backend_says_which_engine_answered(monkeypatch):
    from orchestrator import host
    from orchestrator.backends import registry

    monkeypatch.setattr(host, "docker_engine", lambda: host.DockerStatus(True, "Docker Engine 27.0"))
    said = []
    assert registry.choose("auto", log=said.append) == "docker"
    assert said == ["Docker Engine 27.0 answered; using the Docker backend (one container per cell)."]


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_ctrl_c_keeps_finished_cells_and_stops_the_running_one(tmp_path, signal_name, fake_interpreter):
    """SIGINT (Ctrl-C), SIGTERM (kill, a CI timeout) or SIGHUP (a closed terminal or SSH session)
    while a cell hangs: exit 130, the finished cell stays on disk, the cell's process is gone and
    so is its work folder."""
    import signal
    import time

    fake = fake_interpreter(  # the cells run in a shuffled order: whichever runs second hangs
        f"if os.path.exists({str(tmp_path / 'one-done')!r}):\n"
        f"    open({str(tmp_path / 'hanging.pid')!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(120)\n"
        f"open({str(tmp_path / 'one-done')!r}, 'w').close()\n"
        "ok(cell).write(out)\n")
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "pytorch",
               "--variants", "cpu", "--workloads", "cnn,gru", "--python", str(fake), "--data", "synthetic", "--profile", "smoke",
               "--results-dir", str(tmp_path / "run")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_signal_dispositions)
    deadline = time.monotonic() + 60
    while not (tmp_path / "hanging.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.1)  # the pid is written before the file is closed
    pid = int((tmp_path / "hanging.pid").read_text())
    try:
        process.send_signal(getattr(signal, signal_name))
        _, err = process.communicate(timeout=60)
        assert process.returncode == 130, err
        assert "interrupted" in err and "--resume" in err
        finished = [p.name.split("__")[2] for p in (tmp_path / "run" / "cells").glob("*.json")]
        assert len(finished) == 1 and finished[0] in ("cnn", "gru")
        assert list((tmp_path / "run" / ".work").glob("*")) == []  # the running cell's work folder went too
        time.sleep(0.2)
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    finally:  # a failing run must not leave its cell running for two minutes
        process.kill()
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_sighup_and_sigterm_interrupt_but_nohup_is_respected():
    """SIGTERM and SIGHUP become KeyboardInterrupt (the runner's clean stop) unless the run was
    started with the signal ignored, as `nohup` does for SIGHUP."""
    import signal

    from orchestrator import __main__ as entry

    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        entry.install_signal_handlers()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == entry._interrupt_on_signal
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        entry.install_signal_handlers()
        with pytest.raises(KeyboardInterrupt):
            entry._interrupt_on_signal(signal.SIGHUP, None)
        # the clean-up that follows is not cut short by a second signal
        assert signal.getsignal(signal.SIGHUP) == signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_container_limits_reach_the_backend_options():
    from orchestrator.__main__ import build_parser
    from orchestrator.commands.common_args import backend_options

    for verb in ("run-matrix", "parity"):
        given = backend_options(build_parser().parse_args([verb, "--container-memory", "8G", "--container-pids", "100"]))
        assert (given.container_memory, given.container_pids) == ("8g", 100)
        default = backend_options(build_parser().parse_args([verb]))
        assert (default.container_memory, default.container_pids) == ("16g", 4096)
        off = backend_options(build_parser().parse_args([verb, "--container-memory", "none", "--container-pids", "none"]))
        assert (off.container_memory, off.container_pids) == (None, None)
