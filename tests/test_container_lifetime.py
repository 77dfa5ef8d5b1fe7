"""A cell container's lifetime with a stand-in Docker client: its own deadline, its owner's labels, the
clean-up of ended runs, Ctrl-C while it is created, and its log and tmpfs caps. The same against a
real engine: tests/test_docker_backend.py."""
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.backends import CellJob, container_lifetime
from orchestrator.backends.container_lifetime import (DEADLINE_GRACE_S, DEADLINE_LABEL, OWNER_HOST_LABEL,
                                                      OWNER_PID_LABEL)
from orchestrator.backends.docker import DockerBackend
from orchestrator.commands.common_args import LONGEST_TIMEOUT_S
from workloads.common.result import Cell

ENTRYPOINT = ["/opt/venv/bin/python", "-m", "workloads"]


class FakeEngine:
    """Records what the backend asks of the engine; `on_create` / `on_remove` stand in for what
    happens meanwhile (a Ctrl-C)."""

    def __init__(self, entrypoint=ENTRYPOINT):
        self.created: list[dict] = []
        self.removed: list[str] = []
        self.on_create = lambda: None
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
        return SimpleNamespace(start=lambda: None, wait=lambda timeout: {"StatusCode": 3}, reload=lambda: None,
                               attrs={"State": {}}, logs=lambda **kwargs: iter([b"a log line\n"]),
                               short_id="fake", remove=lambda force: self.removed.append("by its object"))

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
