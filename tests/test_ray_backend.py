"""The Ray backend on a real Ray cluster: a head and worker nodes started with `ray start` on
127.0.0.1 (never another interface), cells run by the local node backend with a stand-in
interpreter (cheap: no framework), or by the Docker node backend with a tiny image.

Skipped when Ray is not installed, unless ROSETTA_REQUIRE_RAY=1 (then they fail)."""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import default_signal_dispositions
from support.records import write_fake_interpreter
from orchestrator.run_settings import RunSettings
from orchestrator.backends.options import BackendOptions
from orchestrator import frameworks
from orchestrator.backends import registry
from orchestrator.errors import UserError
from workloads.common.result import Cell, Result

REQUIRE_RAY = os.environ.get("ROSETTA_REQUIRE_RAY") == "1"
ROOT = Path(__file__).resolve().parent.parent
REGISTRY = frameworks.discover()
LABEL = "FAKE-GPU"

# Not imported here: the backend turns token authentication on before Ray is first imported.
HAVE_RAY = importlib.util.find_spec("ray") is not None
if REQUIRE_RAY and not HAVE_RAY:
    raise ImportError("ROSETTA_REQUIRE_RAY=1 but Ray is not installed: pip install -e \".[ray]\"")
RAY = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
pytestmark = [pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install -e \".[ray]\")"),
              pytest.mark.xdist_group("docker-engine")]  # its nodes run containers of the test images


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    """Ray processes started here, each `ray start` with its own --temp-dir under one folder; stopped by PID.

    Token authentication is on, as `ray start` has it by default, with a token made here in the
    cluster's own folder (RAY_AUTH_TOKEN_PATH): never ~/.ray/auth_token, which only a machine where
    someone once ran `ray start` by hand has."""

    def __init__(self, root: Path, data_dir: Path):
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.token_path = root / "auth_token"
        descriptor = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as stream:
            stream.write(secrets.token_hex(32))
        self.environment = {**os.environ, "PYTHONPATH": str(ROOT), "ROSETTA_DATA_DIR": str(data_dir),
                            "ROSETTA_NODE_SCRATCH": str(root / "scratch"), "RAY_USAGE_STATS_ENABLED": "0",
                            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path),
                            # a dead node is noticed in seconds, not half a minute
                            "RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
                            "RAY_health_check_initial_delay_ms": "0"}
        self.environment.pop("RAY_ADDRESS", None)

    def start(self, *arguments: str, environment: dict | None = None) -> None:
        subprocess.run([RAY, "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats", *arguments],
                       env=environment or self.environment, check=True, capture_output=True, timeout=180)

    def head(self) -> None:
        self.start("--head", f"--port={self.port}", "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false",
                   f"--temp-dir={self.root / 'ray'}", f"--dashboard-agent-listen-port={free_port()}")

    def worker(self, *arguments: str, gpu: bool = False) -> str:
        """Start a worker node; its node id. `gpu`: a logical GPU (Ray's count) that the node's own
        checks see too (a stand-in nvidia-smi listing one GPU on its PATH); no CUDA behind it."""
        before = {node["NodeID"] for node in self.nodes()}
        environment = dict(self.environment)
        if gpu:
            arguments = ("--num-gpus=1", f"--labels=accelerator-type={LABEL}", *arguments)
            bin_dir = self.root / "gpu-bin"
            bin_dir.mkdir(exist_ok=True)
            smi = bin_dir / "nvidia-smi"
            smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: Stand-in GPU (UUID: GPU-0000)'\nexit 0\n")
            smi.chmod(0o755)
            environment["PATH"] = f"{bin_dir}:{environment['PATH']}"
        self.start(f"--address={self.address}", "--num-cpus=1", *arguments, environment=environment)
        for _ in range(100):
            new = {node["NodeID"] for node in self.nodes()} - before
            if new:
                return new.pop()
            time.sleep(0.2)
        raise AssertionError("the worker never joined")

    def nodes(self) -> list[dict]:
        script = ("import json, ray; ray.init(address=%r, logging_level='ERROR'); "
                  "print(json.dumps([n for n in ray.nodes() if n['Alive']], default=str))" % self.address)
        answer = subprocess.run([sys.executable, "-c", script], env=self.environment, capture_output=True, text=True,
                                timeout=120, check=True)
        return json.loads(answer.stdout.strip().splitlines()[-1])

    def raylet_pids(self) -> dict[str, int]:
        """node id -> its raylet's pid (the node's own process: killing it kills the node)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if command and command[0].endswith(b"raylet") and any(str(self.root).encode() in part
                                                                  for part in command):
                node = next((part.split(b"=", 1)[1].decode() for part in command if part.startswith(b"--node_id=")),
                            None)
                found[node] = int(entry.name)
        return found

    def stop(self) -> None:
        subprocess.run([RAY, "stop", "--force"], env={**self.environment}, capture_output=True, timeout=120) \
            if False else None  # `ray stop` stops every Ray on the machine: ours are stopped by PID instead
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if str(self.root).encode() in command or str(self.root).encode() in environ:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass


def sleeping_interpreter(folder: Path) -> str:
    """A stand-in framework Python (tests/support/records.py): an ok result, after sleeping as long
    as the file `<folder>/sleep-<workload>` says; it records where it ran (its pid, CUDA_VISIBLE_DEVICES)."""
    return write_fake_interpreter(folder, f"""
        marker = os.path.join({str(folder)!r}, "sleep-" + cell.workload)
        if os.path.exists(marker):
            open(os.path.join({str(folder)!r}, "started-" + cell.key), "w").write(str(os.getpid()))
            time.sleep(float(open(marker).read()))
        began = time.time()
        time.sleep(0.3)
        print("cell", cell.key, "ran")
        result = ok(cell)
        result.provenance.hostname = socket.gethostname()
        result.provenance.git_revision = os.environ.get("ROSETTA_GIT_REVISION")  # as the harness records it
        result.provenance.environment = {{"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "-"),
                                          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "-"),
                                          "BEGAN": repr(began), "ENDED": repr(time.time())}}
        result.write(out)
    """)


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    (root / "data").mkdir()
    (root / "bin").mkdir()
    made = Cluster(root, root / "data")
    driver = pytest.MonkeyPatch()  # this process drives the cluster too: the same mode and token
    driver.setenv("RAY_AUTH_MODE", "token")
    driver.setenv("RAY_AUTH_TOKEN_PATH", str(made.token_path))
    try:
        made.head()
        made.head_id = next(node["NodeID"] for node in made.nodes() if node.get("Resources", {}).get("GPU", 0) == 0)
        made.gpu_id = made.worker(gpu=True)
        made.python = sleeping_interpreter(root / "bin")
        yield made
    finally:
        made.stop()
        driver.undo()
        shutil.rmtree(root, ignore_errors=True)


def options(cluster, **changes) -> BackendOptions:
    return BackendOptions(backend="ray", ray_address=cluster.address, node_backend="local",
                                   python=cluster.python, **changes)


def run(cluster, tmp_path, cells, *, backend_options=None, resume=False, accelerator_types=None):
    from orchestrator.runner import run_cells

    engine = registry.start(backend_options or options(cluster), REGISTRY, log=lambda line: None)
    return run_cells(cells, engine, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data",
                                                          resume=resume, accelerator_types=accelerator_types or {}))


def cells(workloads=("cnn", "gru"), variant="cpu", repeats=1) -> list[Cell]:
    return [Cell("pytorch", workload, variant=variant, profile="smoke", data="synthetic", repeat=repeat)
            for workload in workloads for repeat in range(repeats)]


def written(tmp_path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in (tmp_path / "run" / "cells").glob("*.json")}


def test_a_smoke_matrix_over_two_nodes_lands_where_placement_says(cluster, tmp_path, monkeypatch):
    from orchestrator import host

    os.environ.pop("RAY_ADDRESS", None)
    node_revision = host.git_revision() or "unknown"  # the nodes run this checkout...
    monkeypatch.setattr(host, "git_revision", lambda: "driver-checkout-stand-in")  # ...the driver another
    matrix = cells(("cnn", "gru", "resnet50")) + cells(("cnn",), variant="cu128")
    summary = run(cluster, tmp_path, matrix, backend_options=options(cluster, accelerator_type=LABEL))
    assert [result.status for result in summary.results].count("ok") == len(matrix), \
        [(r.status, r.reason) for r in summary.results]
    results = written(tmp_path)
    assert len(results) == len(matrix)
    nodes = {cluster.head_id, cluster.gpu_id}
    addresses = {node["NodeID"]: node["NodeManagerAddress"] for node in cluster.nodes()}
    for key, document in results.items():
        Result.from_dict(document)  # the same shape every backend writes
        where = document["provenance"]["cluster"]
        assert document["provenance"]["backend"] == "ray/local"
        assert where["node_id"] in nodes and where["tries"] == "1" and where["ray_version"] == ray_version()
        assert where["node_address"] == addresses[where["node_id"]] and where["hostname"] == socket.gethostname()
        # the revision of the checkout the node ran (the cell records it too), the driver's beside it
        assert document["provenance"]["git_revision"] == node_revision
        assert where["driver_git_revision"] == "driver-checkout-stand-in"
        if "__cu128__" in key:  # the CUDA cell on the node with the GPU, and only that device
            assert where["node_id"] == cluster.gpu_id and where["accelerator_type"] == LABEL
            assert where["gpus"] == "0" and document["provenance"]["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
        assert (tmp_path / "run" / "logs" / f"{key}.log").read_text().strip() == f"cell {key} ran"
        assert isinstance(document["wall_time_s"], float)
        # the driver's thread settings, not Ray's OMP_NUM_THREADS=1 for a task that asks for no CPU
        assert document["provenance"]["environment"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS", "-")
    assert {document["provenance"]["cluster"]["node_id"] for document in results.values()} == nodes
    for node in nodes:  # --cpu-cells-per-node 1 (the default): a node's CPU cells never overlap
        spans = sorted((float(d["provenance"]["environment"]["BEGAN"]), float(d["provenance"]["environment"]["ENDED"]))
                       for key, d in results.items() if "__cpu__" in key
                       and d["provenance"]["cluster"]["node_id"] == node)
        assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), spans
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_json["invocations"][-1]["backend"] == "ray/local"


def test_a_hostile_nodes_answer_fails_only_its_cell_and_names_no_file(cluster, tmp_path, monkeypatch):
    """A node running other code than ours (its checkout changed, or a hostile member of the
    cluster) hands back what it likes: each such answer is that cell failed, one line, filed under
    the driver's names only; an honest answer beside them is ok."""
    from orchestrator.backends.ray import node

    def other_code_on_the_node(job, options, session, datasets, speed_variables=None):
        # runs on a real node (Ray ships a function defined here by value): no name of the test module
        import json
        import socket

        from workloads.common.result import Cell, Metrics, Provenance, Result

        def ok(cell):
            return Result(cell, phases={"train": 1.0}, metrics=Metrics(steady_samples_per_s=1.0, images_per_s=1.0),
                          provenance=Provenance(framework_version="0.0-stand-in"))

        def plain(result):
            return json.dumps(result.to_dict()).encode()

        honest = {"result": plain(ok(job.cell)), "log": b"ran on a node\n", "wall_time_s": 1.0,
                  "hostname": socket.gethostname(), "gpus": None, "git_revision": None}
        outside = Cell("../../outside", "cnn", variant="cpu", profile="smoke", data="synthetic")
        return [{**honest, "result": ok(job.cell)},  # an object where plain values belong
                {**honest, "result": plain(ok(outside))},  # a result naming a path, another cell
                {**honest, "hostname": "../../outside\n" * 1000, "wall_time_s": float("inf")},
                honest][job.cell.repeat]

    monkeypatch.setattr(node, "run_on_node", other_code_on_the_node)
    matrix = cells(("cnn",), repeats=4)
    summary = run(cluster, tmp_path, matrix)
    results = {result.cell.key: result for result in summary.results}
    reasons = [results[cell.key].reason for cell in matrix[:3]]
    assert [results[cell.key].status for cell in matrix] == ["failed", "failed", "failed", "ok"], reasons
    assert "answered with a bad result (must be bytes, not Result)" in reasons[0]
    assert "its result names another cell ('../../outside__cpu__cnn" in reasons[1]
    assert "answered with a bad wall_time_s (inf is not" in reasons[2]
    assert all(reason.isprintable() for reason in reasons)
    assert sorted(written(tmp_path)) == sorted(cell.key for cell in matrix)
    assert sorted(path.name for path in (tmp_path / "run" / "logs").iterdir()) == sorted(
        f"{cell.key}.log" for cell in matrix)
    assert {path.name for path in tmp_path.iterdir()} <= {"data", "run"}


def test_cells_no_node_can_take_are_named_before_anything_starts(cluster, tmp_path):
    with pytest.raises(UserError, match=r"cannot place cells on this Ray cluster before starting: no node with a "
                                        r"GPU of type H100 for 1 cell\(s\) \(pytorch__cu128__cnn"):
        run(cluster, tmp_path, cells(("cnn",), variant="cu128") + cells(("gru",)),
            backend_options=options(cluster, accelerator_type="H100"))
    assert written(tmp_path) == {}


def test_a_variants_gpu_model_from_the_matrix_places_its_cells(cluster, tmp_path):
    """matrix.toml's accelerator_types = { cu128 = "..." }: that variant's cells only on that GPU model."""
    with pytest.raises(UserError, match=r"no node with a GPU of type H100 for 1 cell\(s\) \(pytorch__cu128__cnn"):
        run(cluster, tmp_path / "elsewhere", cells(("cnn",), variant="cu128"),
            accelerator_types={("pytorch", "cu128"): "H100"})
    summary = run(cluster, tmp_path, cells(("cnn",), variant="cu128"), accelerator_types={("pytorch", "cu128"): LABEL})
    assert [result.status for result in summary.results] == ["ok"], [r.reason for r in summary.results]
    assert summary.results[0].provenance.cluster["node_id"] == cluster.gpu_id


def test_token_mode_is_turned_on_when_a_token_is_at_hand_and_the_mode_unsaid(tmp_path, monkeypatch):
    """Cluster membership is full trust (docs/RUN-GUARANTEES.md, "What a Ray node can do"): a driver
    connecting to a cluster presents its token whenever one is at hand."""
    from orchestrator.backends.ray.connect import use_token_when_there_is_one

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    use_token_when_there_is_one()
    assert "RAY_AUTH_MODE" not in os.environ
    (tmp_path / "token").write_text("secret")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "token"))
    use_token_when_there_is_one()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # said: left as said
    use_token_when_there_is_one()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


def test_bad_input_is_one_line(cluster, monkeypatch):
    port = free_port()
    with pytest.raises(UserError, match=rf"--ray-address 127.0.0.1:{port}: no Ray head answers there"):
        registry.start(BackendOptions(backend="ray", ray_address=f"127.0.0.1:{port}"), REGISTRY)
    with pytest.raises(UserError, match="--ray-address 'nowhere': give the head node's HOST:PORT"):
        registry.start(BackendOptions(backend="ray", ray_address="nowhere"), REGISTRY)
    monkeypatch.setitem(sys.modules, "ray", None)  # Ray not installed
    with pytest.raises(UserError, match=r'--backend ray needs Ray, which is not installed: install the extra with '
                                        r'pip install -e "\.\[ray\]"'):
        registry.start(BackendOptions(backend="ray"), REGISTRY)


def test_ray_missing_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    script = ("import sys; sys.modules['ray'] = None; from orchestrator.__main__ import main; "
              "sys.exit(main(['run-matrix', '--backend', 'ray', '--frameworks', 'pytorch', '--variants', 'cpu', "
              "'--workloads', 'cnn', '--profile', 'smoke', '--data', 'synthetic', '--no-report', "
              f"'--results-dir', {str(tmp_path / 'run')!r}]))")
    answer = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "300"})
    assert answer.returncode == 2, answer.stderr
    assert "Traceback" not in answer.stderr
    assert 'needs Ray, which is not installed: install the extra with pip install -e ".[ray]"' in answer.stderr


def test_a_node_killed_mid_cell_the_cell_completes_on_another_and_nothing_finished_is_lost(cluster, tmp_path):
    doomed = cluster.worker(gpu=True)
    marker = Path(cluster.python).parent / "sleep-resnet50"
    marker.write_text("20")
    try:
        matrix = cells(("cnn", "gru")) + cells(("resnet50",), variant="cu128")
        outcome = {}
        # the slow CUDA cell lands on one of the two GPU nodes, which is killed mid-cell
        runner = threading.Thread(target=lambda: outcome.update(summary=run(cluster, tmp_path, matrix)))
        runner.start()
        slow_key = matrix[2].key
        started = Path(cluster.python).parent / f"started-{slow_key}"
        for _ in range(600):
            if started.exists():
                break
            time.sleep(0.1)
        assert started.exists(), "the slow cell never started"
        marker.write_text("0")  # its next try is quick
        # kill the node the slow cell runs on: its raylet and the cell's processes
        pids = cluster.raylet_pids()
        cell_pid = int(started.read_text())
        victim = next(node for node, pid in pids.items() if node != cluster.head_id and _ancestor(pid, cell_pid))
        os.kill(pids[victim], signal.SIGKILL)
        runner.join(timeout=240)
        assert not runner.is_alive()
        results = written(tmp_path)
        assert {document["status"] for document in results.values()} == {"ok"} and len(results) == 3
        slow = results[slow_key]["provenance"]["cluster"]
        assert slow["tries"] == "2" and slow["node_id"] not in (victim, cluster.head_id) and victim[:6] in slow["try_1"]
        assert slow["accelerator_type"] == LABEL
    finally:
        marker.unlink(missing_ok=True)
        # the later tests want the head and one GPU worker: whichever GPU node survived is it
        workers = {node: pid for node, pid in cluster.raylet_pids().items() if node != cluster.head_id}
        survivor = cluster.gpu_id if cluster.gpu_id in workers else doomed
        for node, pid in workers.items():
            if node != survivor:
                os.kill(pid, signal.SIGKILL)
        cluster.gpu_id = survivor


def _ancestor(ancestor: int, pid: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


# --- the Docker node backend: Ctrl-C or SIGTERM on the driver leaves no container on any node -------

DOCKER_BASE = os.environ.get("ROSETTA_BASE_IMAGE")
TEST_REGISTRY = "rosetta-ray-test"
SLEEPING_DOCKERFILE = textwrap.dedent("""
    FROM {base}
    RUN useradd --uid 10001 --user-group --create-home --home-dir /home/rosetta rosetta
    USER 10001:10001
    ENTRYPOINT ["python3", "-c", "import time; print('sleeping', flush=True); time.sleep(600)"]
""")


@pytest.fixture(scope="module")
def sleeping_image():
    """A tiny image standing in for PyTorch's under a test registry's name: every cell sleeps."""
    docker = pytest.importorskip("docker")
    from orchestrator import images
    from orchestrator.backends.docker import connect

    try:
        client = connect()
    except UserError as error:
        pytest.skip(str(error))
    base = DOCKER_BASE or next((tag for image in client.images.list() for tag in image.tags
                                if tag.startswith("rosetta-base:")), None)
    if base is None:
        pytest.skip("no rosetta-base image: run images/base/make-local-base.sh first")
    pytorch = REGISTRY["pytorch"]
    tag = images.image_tag(pytorch, pytorch.variant("cpu"), TEST_REGISTRY)
    folder = Path(tempfile.mkdtemp(prefix="rr-image-"))
    (folder / "Dockerfile").write_text(SLEEPING_DOCKERFILE.format(base=base))
    client.images.build(path=str(folder), tag=tag, rm=True)
    shutil.rmtree(folder, ignore_errors=True)
    yield client, tag
    for container in client.containers.list(all=True, filters={"ancestor": tag}):
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass  # gone, or going
    try:
        client.images.remove(tag, force=True)
    except docker.errors.APIError:
        pass


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_driver_leaves_no_container_on_any_node(cluster, sleeping_image, tmp_path, stop):
    client, tag = sleeping_image
    assert gone(client, tag), "an earlier test's containers are still there"
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "ray", "--ray-address",
               cluster.address, "--node-backend", "docker", "--pull", "--registry", TEST_REGISTRY,
               "--frameworks", "pytorch", "--variants", "cpu", "--modes", "eager", "--workloads", "cnn,gru",
               "--profile", "smoke", "--data", "synthetic", "--no-report", "--results-dir", str(tmp_path / "run"),
               "--timeout", "300"]
    # Ctrl-C as at a terminal, even when this test run was started in the background (SIGINT ignored)
    driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**cluster.environment, "COLUMNS": "300"}, preexec_fn=default_signal_dispositions)
    try:
        for _ in range(600):  # both cells running, one per node
            if len(client.containers.list(filters={"ancestor": tag, "status": "running"})) == 2 \
                    or driver.poll() is not None:
                break
            time.sleep(0.2)
        assert driver.poll() is None, driver.stdout.read()
        running = client.containers.list(filters={"ancestor": tag, "status": "running"})
        assert len(running) == 2
        driver.send_signal(stop)
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, output
    assert "interrupted: 0 finished cell(s) kept" in output and "Traceback" not in output
    # none running now; a busy engine may take a moment to finish removing them
    assert client.containers.list(filters={"ancestor": tag, "status": "running"}) == [], output
    assert gone(client, tag)
    assert not list((tmp_path / "run" / "cells").glob("*.json"))


def gone(client, tag: str, within: float = 60.0) -> bool:
    """No container of the image is left (one whose removal is under way counts until it is done)."""
    deadline = time.monotonic() + within
    while client.containers.list(all=True, filters={"ancestor": tag}):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


# --- data: a node writes only verified bytes ----------------------------------------------------------

def test_a_node_writes_a_dataset_only_after_checking_the_published_checksum(tmp_path):
    import hashlib

    from orchestrator.backends.ray.node import install_dataset
    from workloads.common.data import RemoteFile

    content = b"the published archive"
    remote = RemoteFile("Toy", "toy.tar.gz", "https://example.invalid/toy.tar.gz", "sha256",
                        hashlib.sha256(content).hexdigest())
    fetched = []

    def get(reference):
        fetched.append(reference)
        return reference

    with pytest.raises(UserError, match="Toy: the bytes received do not match the published sha256; not written"):
        install_dataset(remote, b"tampered in transit", tmp_path, get)
    assert not (tmp_path / "toy.tar.gz").exists()
    install_dataset(remote, content, tmp_path, get)
    assert (tmp_path / "toy.tar.gz").read_bytes() == content and len(fetched) == 2
    install_dataset(remote, content, tmp_path, get)  # the node's verified copy: nothing fetched
    assert len(fetched) == 2
    (tmp_path / "toy.tar.gz").write_bytes(b"corrupted on the node")
    install_dataset(remote, content, tmp_path, get)  # a corrupt copy is replaced by verified bytes
    assert (tmp_path / "toy.tar.gz").read_bytes() == content and len(fetched) == 3
