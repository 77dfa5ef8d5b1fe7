"""A cell container's lifetime with a stand-in Docker client: its own deadline, its owner's labels, the
clean-up of ended runs, Ctrl-C while it is created, and its log and tmpfs caps. The same against a
real engine: tests/test_docker_backend.py."""
import os
import signal
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.backends.options import BackendOptions
from orchestrator.backends import CellJob, container_lifetime
from orchestrator.backends.container_lifetime import (CELL_LABEL, DEADLINE_GRACE_S, DEADLINE_LABEL,
                                                      OWNER_HOST_LABEL, OWNER_PID_LABEL, OWNER_STARTED_LABEL,
                                                      run_has_ended)
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends import LONGEST_TIMEOUT_S
from workloads.common.result import Cell

ENTRYPOINT = ["/opt/venv/bin/python", "-m", "workloads"]


class FakeEngine:
    """Records what the backend asks of the engine; `on_create` / `on_remove` stand in for what
    happens meanwhile (a Ctrl-C)."""

    def __init__(self, entrypoint=ENTRYPOINT):
        self.created: list[dict] = []
        self.removed: list[str] = []
        self.on_create = lambda: None
        self.on_start = lambda: None
        self.on_remove = lambda: None
        image = SimpleNamespace(id="sha256:fake", labels={}, attrs={"Config": {"Entrypoint": entrypoint}})
        self.images = SimpleNamespace(get=lambda reference: image)
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(remove_container=self._remove_container)

    def info(self):
        return {"Name": "engine-host"}

    def _create(self, image, command, **options):
        self.created.append(dict(options, image=image, command=command))
        self.on_create()
        return SimpleNamespace(start=self.on_start, wait=lambda timeout: {"StatusCode": 3}, reload=lambda: None,
                               attrs={"State": {}}, logs=lambda **kwargs: iter([b"a log line\n"]),
                               short_id="fake")

    def _remove_container(self, name, force):
        assert force
        self.on_remove()
        self.removed.append(name)


def make_job(tmp_path: Path, timeout=None) -> CellJob:
    cell = Cell("fake", "cnn", profile="smoke", data="synthetic")
    return CellJob(cell=cell, device="cpu", work_dir=tmp_path / ".work" / cell.key,
                   log_path=tmp_path / "logs" / f"{cell.key}.log", data_dir=tmp_path / "data", timeout=timeout)


def backend_on(engine: FakeEngine) -> DockerBackend:
    return DockerBackend({}, client=engine, image_for=lambda cell: "fake:tag", log=lambda line: None)


def test_the_cell_command_runs_under_a_deadline_of_its_own(tmp_path):
    engine = FakeEngine()
    before = time.time()
    result = backend_on(engine).run_cell(make_job(tmp_path, timeout=100))
    assert result.status == "failed"  # the stand-in exits 3 and writes nothing
    [options] = engine.created
    lifetime = 100 + DEADLINE_GRACE_S
    assert options["entrypoint"] == ["timeout", "-s", "KILL", str(lifetime), *ENTRYPOINT]
    assert options["command"][0] == "--cell"
    assert before + lifetime <= int(options["labels"][DEADLINE_LABEL]) <= time.time() + lifetime + 1
    # a cell with no time limit still has one: the longest a cell may be given
    backend_on(engine).run_cell(make_job(tmp_path / "unlimited"))
    assert engine.created[-1]["entrypoint"][3] == str(LONGEST_TIMEOUT_S + DEADLINE_GRACE_S)
    assert container_lifetime.container_lifetime_s(0.2) == 1 + DEADLINE_GRACE_S  # whole seconds, rounded up


def test_an_image_without_an_exec_form_entrypoint_fails_the_cell_and_runs_nothing(tmp_path):
    engine = FakeEngine(entrypoint=None)
    result = backend_on(engine).run_cell(make_job(tmp_path, timeout=10))
    assert result.status == "failed" and "ENTRYPOINT" in result.reason and "\n" not in result.reason
    assert engine.created == []


# --- whose a container is, and the clean-up of ended runs -------------------------------------------

def ended_pid() -> int:
    """The pid of a process that has ended (waited for, so not a zombie either)."""
    import subprocess

    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def owner(pid, *, host=None, deadline=None, started=None) -> dict:
    labels = {OWNER_PID_LABEL: str(pid), OWNER_HOST_LABEL: host or socket.gethostname(),
              DEADLINE_LABEL: str(int(deadline if deadline is not None else time.time() + 3600))}
    if started is not None:
        labels[OWNER_STARTED_LABEL] = str(started)
    return labels


def test_a_container_is_labelled_with_its_owner(tmp_path):
    engine = FakeEngine()
    backend_on(engine).run_cell(make_job(tmp_path, timeout=5))
    labels = engine.created[0]["labels"]
    assert labels[OWNER_PID_LABEL] == str(os.getpid()) and labels[OWNER_HOST_LABEL] == socket.gethostname()
    assert labels[OWNER_STARTED_LABEL] == str(container_lifetime.process_start_ticks(os.getpid()))
    assert not run_has_ended(labels)  # ours, and we are alive


def test_which_runs_have_ended():
    me = container_lifetime.process_start_ticks(os.getpid())
    assert not run_has_ended(owner(os.getpid(), started=me))
    assert run_has_ended(owner(ended_pid()))  # its owner on this host is gone
    assert run_has_ended(owner(os.getpid(), started=me + 1))  # our pid, another process's start: reused
    assert not run_has_ended(owner(ended_pid(), host="another-host"))  # a pid elsewhere says nothing here
    assert run_has_ended(owner(os.getpid(), host="another-host", deadline=time.time() - 1))  # past its deadline
    assert not run_has_ended({})  # no owner, no deadline: kept (an older release's; doctor lists it)


@pytest.mark.parametrize("pid", ["0", "-1", "1.5", " 7", "abc", "99999999", "4194305", "1" * 40])
def test_a_malformed_owner_is_never_signalled(pid, monkeypatch):
    signalled = []
    monkeypatch.setattr(container_lifetime.os, "kill", lambda *args: signalled.append(args))
    labels = {OWNER_PID_LABEL: pid, OWNER_HOST_LABEL: socket.gethostname(), DEADLINE_LABEL: "not-a-time"}
    assert not run_has_ended(labels)
    assert signalled == []


class FakeContainer:
    def __init__(self, labels, engine_removed):
        self.labels = labels
        self._removed = engine_removed

    def remove(self, force):
        assert force
        self._removed.append(self.labels.get(CELL_LABEL))


def test_a_docker_run_starts_by_removing_the_containers_of_ended_runs_only(monkeypatch):
    from orchestrator.backends import docker as docker_backend, registry

    removed, listed = [], []
    containers = [FakeContainer({CELL_LABEL: "ended", **owner(ended_pid())}, removed),
                  FakeContainer({CELL_LABEL: "late", **owner(os.getpid(), deadline=time.time() - 5)}, removed),
                  FakeContainer({CELL_LABEL: "live", **owner(os.getpid())}, removed),
                  FakeContainer({CELL_LABEL: "elsewhere", **owner(ended_pid(), host="another-host")}, removed)]

    def list_containers(all, filters):
        listed.append((all, filters))
        return containers

    engine = SimpleNamespace(containers=SimpleNamespace(list=list_containers))
    monkeypatch.setattr(docker_backend, "connect", lambda: engine)
    lines = []
    backend = registry.start(BackendOptions(backend="docker"), {}, log=lines.append)
    assert isinstance(backend, DockerBackend)
    assert listed == [(True, {"label": CELL_LABEL})]
    assert removed == ["ended", "late"]
    assert lines == ["Removed 2 cell containers of runs that have ended (their owner gone, or past their "
                     "deadline) from the Docker engine."]
    removed.clear()
    containers[:] = containers[2:]
    lines.clear()
    registry.start(BackendOptions(backend="docker"), {}, log=lines.append)
    assert removed == [] and lines == []  # nothing removed, nothing said


# --- Ctrl-C while a container is created, started or removed ---------------------------------------

def interrupt():
    raise KeyboardInterrupt


def test_the_container_has_its_name_before_it_is_created_and_is_removed_by_it(tmp_path):
    engine = FakeEngine()
    backend = backend_on(engine)
    backend.run_cell(make_job(tmp_path, timeout=5))
    backend.run_cell(make_job(tmp_path / "again", timeout=5))
    names = [options["name"] for options in engine.created]
    assert engine.removed == names and len(set(names)) == 2 and all(backend.session in name for name in names)


@pytest.mark.parametrize("step", ["on_create", "on_start"])
def test_ctrl_c_while_the_container_is_created_or_started_removes_it_by_name(tmp_path, step):
    engine = FakeEngine()
    setattr(engine, step, interrupt)  # the engine has made the container; the answer never reaches us
    job = make_job(tmp_path, timeout=5)
    with pytest.raises(KeyboardInterrupt):
        backend_on(engine).run_cell(job)
    assert engine.removed == [engine.created[0]["name"]]
    assert not job.work_dir.exists()


def test_a_second_ctrl_c_does_not_cut_the_clean_up_short(tmp_path, ctrl_c_interrupts):
    engine = FakeEngine()
    engine.on_create = interrupt
    engine.on_remove = lambda: os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again, while it is removed
    job = make_job(tmp_path, timeout=5)
    with pytest.raises(KeyboardInterrupt):
        backend_on(engine).run_cell(job)
    assert engine.removed == [engine.created[0]["name"]]  # the removal went on to its end
    assert not job.work_dir.exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before


def test_an_interrupt_deferred_is_raised_at_the_end_of_the_block(ctrl_c_interrupts):
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with container_lifetime.deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("went on")
    assert steps == ["went on"]
    with container_lifetime.deferred_interrupts():
        steps.append("no interrupt, nothing raised")
    assert len(steps) == 2


def test_deferring_interrupts_off_the_main_thread_leaves_the_handlers_alone():
    import threading

    before = signal.getsignal(signal.SIGINT)
    seen = []

    def block():
        with container_lifetime.deferred_interrupts():
            seen.append(signal.getsignal(signal.SIGINT))

    worker = threading.Thread(target=block)
    worker.start()
    worker.join()
    assert seen == [before]


# --- what a cell can fill: its log and its tmpfs ----------------------------------------------------

def test_a_cells_log_and_scratch_space_are_capped(tmp_path):
    engine = FakeEngine()
    backend_on(engine).run_cell(make_job(tmp_path, timeout=5))
    [options] = engine.created
    assert options["log_config"] == {"Type": "json-file", "Config": {"max-size": "32m", "max-file": "2"}}
    assert set(options["tmpfs"]) == {"/tmp", "/home/rosetta"}
    assert all("size=4g" in mount.split(",") for mount in options["tmpfs"].values())
