"""What both backends hand a cell, checked without a Docker engine: the cell document (its init and
framework options), the speed variables it inherits (one list, OMP_NUM_THREADS and the rest), and
what the Docker backend records about the image (its revision and sources labels).

The Docker backend runs here against a stand-in for the Docker SDK's client: its `containers.create`
plays the container, reading the cell document from the /results mount as `python -m workloads`
would and writing the result there. tests/test_docker_backend.py runs the same against a real engine.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import frameworks
from orchestrator.backends import SPEED_VARIABLES, CellJob, inherited_speed_variables
from orchestrator.backends.local import _PASSED_THROUGH, LocalBackend
from orchestrator.images import REVISION_LABEL, SOURCES_LABEL
from workloads.common.cell import CellRequest
from workloads.common.result import Cell, Result
from support.records import measured

REGISTRY = frameworks.discover()
CELL = Cell("pytorch", "cnn", profile="smoke", data="synthetic", init="framework", options={"channels_last": "on"},
            mode="compiled")
HOST_SPEED = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "1", "KMP_AFFINITY": "compact"}


@pytest.fixture
def speed_environment(monkeypatch):
    for name in SPEED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in HOST_SPEED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_something")  # a compiler switch: an option's business, not inherited
    return HOST_SPEED


def make_job(tmp_path: Path, cell: Cell = CELL, device: str = "cpu") -> CellJob:
    return CellJob(cell=cell, device=device, work_dir=tmp_path / "run" / ".work" / cell.key,
                   log_path=tmp_path / "run" / "logs" / f"{cell.key}.log", data_dir=tmp_path / "data",
                   git_revision="0123abc")


# --- the local backend --------------------------------------------------------------------------

# a stand-in framework Python (tests/support/records.py) that records the cell it was handed and
# the speed variables it saw
REPORTS_WHAT_IT_WAS_HANDED = """
    import json
    result = ok(cell)
    result.provenance.extras = {"seen_options": json.dumps(cell.options), "seen_init": cell.init,
                                "seen_mode": cell.mode,
                                "environment": json.dumps({k: v for k, v in os.environ.items()
                                                           if k.endswith(("_THREADS", "AFFINITY", "FLAGS"))})}
    result.write(out)
"""


def test_the_local_backend_hands_over_init_options_and_the_speed_variables(tmp_path, speed_environment, fake_interpreter):
    backend = LocalBackend(REGISTRY, python=fake_interpreter(REPORTS_WHAT_IT_WAS_HANDED))
    result = backend.run_cell(make_job(tmp_path))
    assert result.status == "ok", result.stderr_tail
    assert result.cell == CELL
    assert json.loads(result.provenance.extras["seen_options"]) == {"channels_last": "on"}
    assert result.provenance.extras["seen_mode"] == "compiled"
    assert result.provenance.extras["seen_init"] == "framework"
    assert json.loads(result.provenance.extras["environment"]) == speed_environment  # XLA_FLAGS left out


def test_one_list_of_speed_variables_for_both_backends():
    assert {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"} <= set(SPEED_VARIABLES)
    assert not set(SPEED_VARIABLES) & set(_PASSED_THROUGH)  # the local backend adds the shared list, not its own
    assert "CUDA_VISIBLE_DEVICES" not in SPEED_VARIABLES  # a host's GPU numbering means nothing in a container
    assert inherited_speed_variables({"OMP_NUM_THREADS": "4", "PATH": "/bin", "XLA_FLAGS": "x"}) == {"OMP_NUM_THREADS": "4"}


# --- the Docker backend, against a stand-in client -----------------------------------------------

class FakeImage:
    def __init__(self, labels: dict | None):
        self.id = "sha256:" + "ab" * 32
        self.labels = labels
        # the exec-form ENTRYPOINT images/Dockerfile.j2 writes, which the cell's deadline wraps
        self.attrs = {"RepoDigests": [], "Config": {"Labels": labels,
                                                    "Entrypoint": ["/opt/venv/bin/python", "-m", "workloads"]}}


class FakeContainer:
    """A container that 'runs' `python -m workloads --cell /results/cell.json` when started."""

    short_id = "fake0000"

    def __init__(self, command: list[str], options: dict):
        self.command, self.options = command, options
        self.attrs = {"State": {"OOMKilled": False}}

    def start(self):
        results = next(Path(mount["Source"]) for mount in self.options["mounts"] if mount["Target"] == "/results")
        request = CellRequest.read(results / Path(self.command[-1]).name)
        assert request.out == "/results/result.json" and request.data_dir == "/data"
        result = measured(Result(request.cell))
        result.provenance.extras = {"seen_options": json.dumps(request.cell.options), "seen_init": request.cell.init,
                                    "seen_mode": request.cell.mode}
        result.write(results / "result.json")

    def wait(self, timeout=None):
        return {"StatusCode": 0}

    def reload(self):
        pass

    def logs(self, **_):
        return iter([b"fake container\n"])

    def remove(self, force=False):
        pass


class FakeClient:
    def __init__(self, labels: dict | None):
        self.created: list[FakeContainer] = []
        image = FakeImage(labels)
        client = self

        class Images:
            def get(self, reference):
                return image

        class Containers:
            def create(self, image_id, command, **options):
                client.created.append(FakeContainer(command, options))
                return client.created[-1]

        class Api:
            def remove_container(self, name, force=False):
                client.removed.append(name)

        self.removed: list[str] = []
        self.images, self.containers, self.api = Images(), Containers(), Api()

    def info(self):
        return {"Name": "engine-host", "Runtimes": {}}


def fake_docker_backend(labels: dict | None):
    from orchestrator.backends.docker import DockerBackend

    client = FakeClient(labels)
    return DockerBackend(REGISTRY, client=client, image_for=lambda cell: "rosetta-tensorflow:cpu-x", log=lambda _: None), client


def test_the_docker_backend_hands_over_init_options_and_the_same_speed_variables(tmp_path, speed_environment):
    backend, client = fake_docker_backend({REVISION_LABEL: "0123abc-dirty", SOURCES_LABEL: "f" * 64})
    result = backend.run_cell(make_job(tmp_path))
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert json.loads(result.provenance.extras["seen_options"]) == {"channels_last": "on"}
    assert result.provenance.extras["seen_mode"] == "compiled"
    assert result.provenance.extras["seen_init"] == "framework"
    [container] = client.created
    environment = container.options["environment"]
    assert {name: environment[name] for name in HOST_SPEED} == speed_environment  # Docker used to drop them
    assert "XLA_FLAGS" not in environment and "PATH" not in environment  # the image's own PATH stays
    # the image's own provenance, from its labels
    assert result.provenance.image_revision == "0123abc-dirty"
    assert result.provenance.image_sources_sha256 == "f" * 64
    assert result.provenance.image_id == "sha256:" + "ab" * 32
    assert result.provenance.extras["image_sources_current"] == \
        "no: the image was built from other workload sources than this checkout's"


def test_an_image_of_this_checkouts_sources_says_so(tmp_path):
    from orchestrator import images

    framework = REGISTRY[CELL.framework]
    current = images.sources_hash(framework, framework.variant("cpu"))
    backend, _ = fake_docker_backend({REVISION_LABEL: "0123abc", SOURCES_LABEL: current})
    result = backend.run_cell(make_job(tmp_path))
    assert result.provenance.image_sources_sha256 == current
    assert result.provenance.extras["image_sources_current"] == "yes"


def test_an_image_without_labels_records_none(tmp_path):
    backend, _ = fake_docker_backend(None)
    result = backend.run_cell(make_job(tmp_path, Cell("pytorch", "cnn", profile="smoke", data="synthetic")))
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert (result.provenance.image_revision, result.provenance.image_sources_sha256) == (None, None)
    assert result.provenance.extras["image_sources_current"] == "unknown: the image has no sources label"


def test_built_images_carry_the_revision_and_sources_labels():
    from orchestrator import images

    framework = REGISTRY["pytorch"]
    labels = images.image_labels(framework, framework.variant("cpu"))
    assert labels[REVISION_LABEL] and labels[SOURCES_LABEL] == images.sources_hash(framework, framework.variant("cpu"))
