"""The local backend's side of the contract, with real subprocesses standing in for a framework."""
import sys
import time
from pathlib import Path


from orchestrator.run_settings import RunSettings
from orchestrator import frameworks
from orchestrator.backends import CellJob
from orchestrator.backends.local import LocalBackend
from orchestrator.runner import run_cells
from workloads.common.result import Cell, Result

REGISTRY = frameworks.discover()


def job(tmp_path, timeout=None):
    cell = Cell("pytorch", "cnn", profile="smoke", data="synthetic")
    return CellJob(cell=cell, device="cpu", work_dir=tmp_path / "work" / cell.key, log_path=tmp_path / "cell.log",
                   data_dir=tmp_path / "data", timeout=timeout)


def pid_then(pid_file: Path, body: str) -> str:
    """A stand-in cell's body that records its process id in `pid_file`, then does `body`."""
    return f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n{body}\n"


def test_a_hanging_cell_is_killed_and_recorded(tmp_path, fake_interpreter):
    pid_file = tmp_path / "work" / "pid"
    backend = LocalBackend(REGISTRY, python=fake_interpreter(pid_then(pid_file, "time.sleep(60)")))
    start = time.monotonic()
    result = backend.run_cell(job(tmp_path, timeout=1.5))
    assert time.monotonic() - start < 30
    assert result.status == "timeout" and "timed out after 1.5 s" in result.reason
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_a_crash_keeps_the_stderr_tail(tmp_path, fake_interpreter):
    backend = LocalBackend(REGISTRY, python=fake_interpreter("print('boom: out of memory', file=sys.stderr); sys.exit(7)"))
    result = backend.run_cell(job(tmp_path))
    assert result.status == "failed" and result.reason == "exit code 7; no result written"
    assert "boom: out of memory" in result.stderr_tail
    assert not (tmp_path / "work" / "pytorch__cpu__cnn__fp32__smoke__synthetic__r0").exists()


def test_unsupported_exit_code_and_isolated_home(tmp_path, fake_interpreter):
    body = """
        from workloads.common.result import Cell, Result
        assert os.environ["HOME"].endswith("/home") and "PYTHONPATH" in os.environ
        Result(request.cell, status="unsupported", reason="fp16 needs a CUDA GPU").write(out)
        sys.exit(3)
    """
    backend = LocalBackend(REGISTRY, python=fake_interpreter(body))
    result = backend.run_cell(job(tmp_path))
    assert (result.status, result.reason) == ("unsupported", "fp16 needs a CUDA GPU")


def test_one_failing_cell_never_stops_the_matrix_and_resume_skips_ok_cells(tmp_path, fake_interpreter):
    body = """
        from workloads.common.result import Cell, Result
        workload = request.cell.workload
        if workload == "gru":
            sys.exit("gru exploded")
        ok(Cell("pytorch", workload, profile="smoke", data="synthetic")).write(out)
    """
    backend = LocalBackend(REGISTRY, python=fake_interpreter(body))
    cells = [Cell("pytorch", w, profile="smoke", data="synthetic") for w in ("cnn", "gru", "resnet50")]
    summary = run_cells(cells, backend, REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                              data_dir=tmp_path / "data"))
    assert [r.status for r in summary.results] == ["ok", "failed", "ok"]
    assert "gru exploded" in summary.results[1].stderr_tail
    assert len(list((tmp_path / "run" / "cells").glob("*.json"))) == 3
    again = run_cells(cells, backend, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data",
                                                            resume=True))
    assert again.skipped == 2 and [r.cell.workload for r in again.results] == ["gru"]


def test_cuda_variant_without_gpu_is_unsupported_not_a_crash(tmp_path, monkeypatch, fake_interpreter):
    monkeypatch.setattr("orchestrator.host.gpus", lambda: [])  # read by the backend
    backend = LocalBackend(REGISTRY, python=fake_interpreter("sys.exit('must not run')"))
    cell = Cell("pytorch", "cnn", variant="cu130", profile="smoke", data="synthetic")
    run_cells([cell], backend, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data"))
    result = Result.read(tmp_path / "run" / "cells" / f"{cell.key}.json")
    assert result.status == "unsupported" and "no GPU runtime on this host" in result.reason


def test_environment_build_failure_is_one_failed_cell(tmp_path, monkeypatch):
    requirements = tmp_path / "requirements-cpu.txt"
    requirements.write_text("this-package-does-not-exist-rosetta==0.0.1\n")
    variant = frameworks.Variant("cpu", "cpu", requirements)
    registry = {"pytorch": frameworks.Framework("pytorch", "PyTorch", tmp_path, {"cpu": variant}, "cpu", ("cnn",))}
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # fail fast, offline
    backend = LocalBackend(registry, cache_dir=tmp_path / "cache", log=lambda line: None)
    result = backend.run_cell(job(tmp_path))
    assert result.status == "failed" and "environment failed; see" in result.reason
    assert not (Path(result.reason.split("see ")[1]).parent / ".rosetta-ready").exists()


def test_a_cuda_build_that_cannot_target_the_gpu_is_unsupported_before_it_starts(tmp_path, monkeypatch, fake_interpreter):
    """E.g. MXNet's CUDA 11.2 build on a Hopper GPU: a clear cell, never a crash or a hang."""
    from orchestrator import host

    monkeypatch.setattr(host, "gpus", lambda: ["GPU 0: NVIDIA H200 (UUID: GPU-x)"])
    monkeypatch.setattr(host, "gpu_compute_capabilities", lambda: [("NVIDIA H200", "9.0")])
    old = frameworks.Variant("cu112", "cuda", tmp_path / "r.txt", cuda="11.2", max_compute_capability="8.6")
    new = frameworks.Variant("cu130", "cuda", tmp_path / "r.txt", cuda="13.0")
    backend = LocalBackend(REGISTRY, python=fake_interpreter("sys.exit('must not run')"))
    cell = Cell("pytorch", "cnn")
    reason = backend.unsupported_reason(cell, old)
    assert reason == ("unsupported on this GPU: NVIDIA H200 has compute capability 9.0; CUDA 11.2 targets up "
                      "to 8.6, so it needs a build for 9.0 or newer")
    assert backend.unsupported_reason(cell, new) is None
    assert backend.unsupported_reason(cell, frameworks.Variant("cpu", "cpu", tmp_path / "r.txt")) is None


def test_a_variant_for_another_python_is_defined_not_run_here(tmp_path, monkeypatch, fake_interpreter):
    """CNTK's Python 3.6, an old CUDA base's 3.8: without that Python on the host the cell says so
    (and names the ways to run it) before it starts."""
    from orchestrator.backends import local

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    monkeypatch.setattr(local, "find_python", lambda version: sys.executable if version == here else None)
    cell = Cell("pytorch", "cnn")
    backend = LocalBackend(REGISTRY, cache_dir=tmp_path)
    old = frameworks.Variant("cpu", "cpu", tmp_path / "r.txt", python="3.6")
    reason = backend.unsupported_reason(cell, old)
    assert reason == (f"defined, not run on this host: the cpu variant needs Python 3.6 (this host runs {here} and "
                      "has no python3.6); run it in its image (--backend docker), install that Python, or pass --python")
    assert backend.unsupported_reason(cell, frameworks.Variant("cpu", "cpu", tmp_path / "r.txt", python=here)) is None
    given = LocalBackend(REGISTRY, python=fake_interpreter("pass"))
    assert given.unsupported_reason(cell, old) is None  # --python: the user vouches for the interpreter
    assert all(v.python == "3.11" for v in REGISTRY["pytorch"].variants.values())  # inherited from the framework


def test_another_python_on_the_host_is_found_and_builds_the_environment(tmp_path):
    """pyenv's shims refuse a version that is installed but not selected: find_python checks that
    the interpreter runs and is the version asked for."""
    from orchestrator.backends import local

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert local.find_python(here) == sys.executable
    assert local.find_python("2.1") is None
    fake = tmp_path / "bin" / "python9.9"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 9.9\n")
    fake.chmod(0o755)
    refusing = tmp_path / "bin" / "python9.8"
    refusing.write_text("#!/bin/sh\necho 'pyenv: python9.8: command not found' >&2; exit 127\n")
    refusing.chmod(0o755)
    local.find_python.cache_clear()
    import os
    path = os.environ["PATH"]
    try:
        os.environ["PATH"] = f"{fake.parent}:{path}"
        assert local.find_python("9.9") == str(fake)
        assert local.find_python("9.8") is None
        variant = frameworks.Variant("cpu", "cpu", tmp_path / "r.txt", python="9.9")
        (tmp_path / "r.txt").write_text("numpy\n")
        backend = LocalBackend(REGISTRY, cache_dir=tmp_path)
        assert backend.unsupported_reason(Cell("pytorch", "cnn"), variant) is None
        assert local._python_for(variant) == str(fake)  # the environment is built from it
        assert backend.environment_dir(variant, "x") != backend.environment_dir(
            frameworks.Variant("cpu", "cpu", tmp_path / "r.txt"), "x")
    finally:
        os.environ["PATH"] = path
        local.find_python.cache_clear()


def test_chainers_cuda_build_refuses_gpus_newer_than_cuda_11_0():
    """Chainer 7.8.1 takes CuPy 7.x only, built for CUDA <= 11.0: an A100 runs it, a Hopper cannot."""
    from orchestrator.backends import gpu_mismatch

    cu110 = REGISTRY["chainer"].variants["cu110"]
    assert cu110.python == "3.8" and cu110.cuda == "11.0"
    assert gpu_mismatch(cu110, [("NVIDIA A100-SXM4-80GB", "8.0")]) is None
    assert gpu_mismatch(cu110, [("NVIDIA H200", "9.0")]) == (
        "unsupported on this GPU: NVIDIA H200 has compute capability 9.0; CUDA 11.0 targets up to 8.0, "
        "so it needs a build for 9.0 or newer")


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process `pid` ends (or is a zombie, ended but not yet reaped) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def kill_if_running(pid_file: Path) -> None:
    """Tidy up after a failing test: a process it left must not outlive the test either."""
    import os
    import signal

    try:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_a_finished_cells_children_do_not_outlive_it(tmp_path, fake_interpreter):
    """A child the workload started and left behind (a data loader's worker, a daemon) is killed
    with the cell's process group when the cell ends, ok or not, so it cannot skew the next cell."""
    child_pid = tmp_path / "child.pid"
    body = f"""
        import subprocess
        from workloads.common.result import Cell, Result
        child = subprocess.Popen(["sleep", "300"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        ok(Cell("pytorch", "cnn", profile="smoke", data="synthetic")).write(out)
    """
    backend = LocalBackend(REGISTRY, python=fake_interpreter(body))
    try:
        result = backend.run_cell(job(tmp_path))
        assert result.status == "ok", result.stderr_tail
        assert gone(int(child_pid.read_text()), within=5)
    finally:
        kill_if_running(child_pid)


def test_an_interrupted_cell_leaves_no_process_and_no_work_folder(tmp_path, ctrl_c_interrupts, fake_interpreter):
    """Ctrl-C (SIGTERM and SIGHUP become the same KeyboardInterrupt) while a cell runs: its process
    group is killed and its work folder removed before the interrupt goes on to the runner."""
    import os
    import signal
    import threading

    import pytest

    pid_file = tmp_path / "work" / "pid"  # the fake interpreter writes it there

    def interrupt_once_running():
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    backend = LocalBackend(REGISTRY, python=fake_interpreter(pid_then(pid_file, "time.sleep(60)")))
    the_job = job(tmp_path)
    threading.Thread(target=interrupt_once_running, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            backend.run_cell(the_job)
        assert gone(int(pid_file.read_text()), within=5)
        assert not the_job.work_dir.exists()
    finally:
        kill_if_running(pid_file)


def test_a_cell_dies_with_the_orchestrator_even_when_it_is_killed_outright(tmp_path, fake_interpreter):
    """SIGKILL cannot be caught, so the orchestrator cannot kill its cell then: the kernel does
    (the cell's parent-death signal), instead of leaving it running with no timeout enforced."""
    import os
    import signal
    import subprocess

    pid_file = tmp_path / "hanging.pid"
    fake = fake_interpreter(pid_then(pid_file, "time.sleep(120)"))
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "pytorch",
               "--variants", "cpu", "--workloads", "cnn", "--python", str(fake), "--data", "synthetic",
               "--profile", "smoke", "--results-dir", str(tmp_path / "run")]
    root = Path(__file__).resolve().parent.parent
    orchestrator = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env={**os.environ, "ROSETTA_CACHE_DIR": str(tmp_path / "cache")})
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # the pid is written before the file is closed
        cell = int(pid_file.read_text())
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=10)
        assert gone(cell, within=5)
    finally:
        orchestrator.kill()
        kill_if_running(pid_file)


# --- cells that measure nothing run at once; a measured cell alone (docs/RUN-GUARANTEES.md) ---------

def arrivals_body(folder: Path, wait_for: int) -> str:
    """A stand-in cell that marks its arrival in `folder` and, while it runs, waits until `wait_for`
    cells have arrived (60 s at most: only a failing run waits that long), recording how many it saw,
    and how many were running beside it; then an ok result with outputs, as a parity cell writes."""
    return f"""
        folder = {str(folder)!r}
        open(os.path.join(folder, "arrived-%d" % os.getpid()), "w").close()
        running = os.path.join(folder, "running-%d" % os.getpid())
        open(running, "w").close()
        deadline = time.monotonic() + 60
        arrived = 0
        while time.monotonic() < deadline:
            arrived = sum(name.startswith("arrived-") for name in os.listdir(folder))
            if arrived >= {wait_for}:
                break
            time.sleep(0.01)
        beside = sum(name.startswith("running-") for name in os.listdir(folder))
        os.remove(running)
        result = ok(cell)
        result.outputs = {{"logits": [[1.0]]}}
        result.provenance.extras.update(arrived=str(arrived), beside=str(beside))
        result.write(out)
    """


def test_parity_cells_run_at_once_and_a_measured_cell_alone(tmp_path, monkeypatch, fake_interpreter):
    from orchestrator.backends import local

    monkeypatch.setattr(local.os, "cpu_count", lambda: 2)  # two at once, whatever this host has
    cells = [Cell("pytorch", w, profile="smoke", data="synthetic") for w in ("cnn", "gru", "resnet50")]
    (tmp_path / "parity-marks").mkdir()
    backend = LocalBackend(REGISTRY, python=fake_interpreter(arrivals_body(tmp_path / "parity-marks", 2)))
    assert backend.cells_at_once(measured=False) == 2 and backend.cells_at_once(measured=True) == 1
    summary = run_cells(cells, backend, REGISTRY, RunSettings(results_dir=tmp_path / "parity",
                                                              data_dir=tmp_path / "data", parity=True))
    assert sorted(r.status for r in summary.results) == ["ok"] * 3
    seen = {r.cell.workload: r.provenance.extras for r in summary.results}
    assert seen["cnn"]["arrived"] == "2" and seen["gru"]["arrived"] in ("2", "3")  # the first two ran together
    assert all(r.energy is None for r in summary.results)  # nothing measured, nothing metered
    assert not (tmp_path / "parity" / ".work").exists()  # every cell's work folder removed

    (tmp_path / "benchmark-marks").mkdir()
    # a measured cell that waits for a second one would wait alone: give it one second to show it
    body = arrivals_body(tmp_path / "benchmark-marks", 2).replace("time.monotonic() + 60", "time.monotonic() + 1")
    backend = LocalBackend(REGISTRY, python=fake_interpreter(body))
    summary = run_cells(cells, backend, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data"))
    assert [r.provenance.extras["beside"] for r in summary.results] == ["1", "1", "1"]
    assert summary.results[0].provenance.extras["arrived"] == "1"


def test_stopping_a_concurrent_dispatch_kills_every_running_cell(tmp_path, fake_interpreter):
    import os

    from orchestrator.backends import ConcurrentDispatch

    marks = tmp_path / "pids"
    marks.mkdir()
    backend = LocalBackend(REGISTRY, python=fake_interpreter(
        f"open(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close()\ntime.sleep(600)"))
    dispatch = ConcurrentDispatch(backend, at_once=2)
    jobs = []
    for workload in ("cnn", "gru", "resnet50"):
        cell = Cell("pytorch", workload, profile="smoke", data="synthetic")
        jobs.append(CellJob(cell=cell, device="cpu", work_dir=tmp_path / "work" / cell.key,
                            log_path=tmp_path / f"{workload}.log", data_dir=tmp_path / "data"))
        dispatch.submit(jobs[-1])
    try:
        assert list(dispatch.gather(wait=False)) == []  # two started, none finished
        deadline = time.monotonic() + 60
        while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(name) for name in os.listdir(marks)]
        assert len(pids) == 2
        dispatch.cancel()
        finished = list(dispatch.gather(wait=True))
    finally:
        dispatch.close()
    assert sorted(job.cell.workload for job, _ in finished) == ["cnn", "gru"]  # the third never started
    assert all(result.status == "failed" for _, result in finished)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # killed and reaped
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


def test_a_cuda_cell_that_measures_nothing_runs_alone(tmp_path):
    """ConcurrentDispatch's rule, on a backend of events: two CPU cells share the host, a CUDA cell
    waits until nothing else runs, and nothing starts beside it (two frameworks on one GPU may each
    claim all its memory)."""
    import threading

    from orchestrator.backends import Backend, ConcurrentDispatch

    class Gates(Backend):
        name = "gates"

        def __init__(self):
            self.release = {}

        def run_cell(self, job):
            self.release[job.cell.workload].wait(60)  # only a wrong run waits this long
            return Result(cell=job.cell, status="ok")

    backend = Gates()
    started = []
    dispatch = ConcurrentDispatch(backend, lambda job: started.append(job.cell.workload), at_once=2)
    for workload, device in (("cnn", "cpu"), ("gru", "cuda"), ("resnet50", "cpu")):
        backend.release[workload] = threading.Event()
        dispatch.submit(CellJob(cell=Cell("pytorch", workload), device=device, work_dir=tmp_path / workload,
                                log_path=tmp_path / f"{workload}.log", data_dir=tmp_path))
    try:
        assert list(dispatch.gather(wait=False)) == [] and started == ["cnn"]  # the CUDA cell waits
        backend.release["cnn"].set()
        finished = [job.cell.workload for job, _ in dispatch.gather(wait=False)]
        give_up = time.monotonic() + 60  # its thread ends at once now; only a wrong run waits this long
        while "cnn" not in finished and time.monotonic() < give_up:
            time.sleep(0.01)
            finished += [job.cell.workload for job, _ in dispatch.gather(wait=False)]
        assert finished == ["cnn"]
        assert started == ["cnn", "gru"]  # alone: the CPU cell behind it waits too
        backend.release["gru"].set()
        backend.release["resnet50"].set()
        finished += [job.cell.workload for job, _ in dispatch.gather(wait=True)]
    finally:
        dispatch.close()
    assert finished == ["cnn", "gru", "resnet50"] and started == finished
