"""The Docker backend against a real Docker engine, with a tiny image standing in for a framework.

The test image is the local Debian base (images/base/make-local-base.sh) plus the real `workloads`
package and a fake entrypoint that honours the same contract as `python -m workloads`: it takes
`--cell FILE`, reads the cell document the backend wrote with the real `workloads.common.cell`,
writes its Result where the document says with the real `workloads.common.result` (standard
library only, so no numpy or framework is needed) and exits 0 / 3 / other. What it does depends on the cell:

    cnn       ok, and reports what it saw from inside: uid, network, writable paths, capabilities,
              PID 1, its limits; it leaves a child (`sleep 987`) running behind it
    gru       hangs (for the timeout and Ctrl-C tests)
    resnet50  unsupported (exit 3)
    fp16      crashes with a message on stderr (any workload)
    real data takes 1 GiB of memory (any workload)
"""
import os
import shutil
import signal
import textwrap
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from orchestrator.backends.options import BackendOptions
from orchestrator.backends import CellJob
from orchestrator.backends.container_lifetime import CELL_LABEL, SESSION_LABEL
from orchestrator.backends.docker import DockerBackend, connect, remove_leftover_containers
from orchestrator.errors import UserError
from orchestrator.frameworks import WORKLOADS_DIR, Variant
from workloads.common.result import Cell

pytestmark = pytest.mark.xdist_group("docker-engine")  # one worker builds, runs and removes the images

BASE_IMAGE = os.environ.get("ROSETTA_BASE_IMAGE", "rosetta-base:bookworm")
# CI sets ROSETTA_REQUIRE_DOCKER=1: there a missing engine or base image fails, never skips quietly.
REQUIRE_DOCKER = os.environ.get("ROSETTA_REQUIRE_DOCKER") == "1"

try:
    docker.from_env(timeout=10).ping()
except Exception as error:  # noqa: BLE001 - any failure to reach the engine means: no engine here
    reason = f"no Docker engine answered ({str(error).splitlines()[0][:160]}); these tests need one"
    if REQUIRE_DOCKER:
        raise RuntimeError(reason) from None
    pytest.skip(reason, allow_module_level=True)

FAKE_WORKLOAD = textwrap.dedent('''
    """Stands in for `python -m workloads` inside the test image (same document, same exit codes)."""
    import os, socket, subprocess, sys, time
    from workloads.common.cell import CellRequest
    from workloads.common.result import Metrics, Provenance, Result

    if len(sys.argv) != 3 or sys.argv[1] != "--cell":
        sys.exit(f"fake workload: expected --cell FILE, got {sys.argv[1:]}")  # the whole contract, or fail
    request = CellRequest.read(sys.argv[2])
    cell = request.cell
    print(f"fake workload: {cell.key} on {request.device}")  # stdout, for the log

    def attempt(action):
        try:
            action()
            return "yes"
        except OSError as error:
            return f"no ({error.strerror or error})"

    def write(path):
        return lambda: open(path, "w").close()

    def connect_out():
        with socket.create_connection(("1.1.1.1", 53), timeout=3):
            pass

    if cell.precision == "fp16":
        print("boom: fp16 kernels crashed", file=sys.stderr)
        sys.exit(7)
    if cell.workload == "gru":
        time.sleep(120)
    if cell.data == "real":  # more memory than the limit the test gives it
        hog = [bytearray(16 << 20) for _ in range(64)]
    result = Result(cell, phases={"train": 1.0}, metrics=Metrics(steady_samples_per_s=1.0),
                    provenance=Provenance(framework_version="0.0-stand-in"))
    if cell.workload == "resnet50":
        result.status, result.reason = "unsupported", "resnet50 needs a GPU here"
        result.write(request.out)
        sys.exit(3)
    status = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
    subprocess.Popen(["sleep", "987"])  # left running: the cell must not leave it behind

    def read(path):
        try:
            return open(path).read().replace("\\0", " ").strip()
        except OSError as error:
            return f"unreadable ({error.strerror})"
    result.provenance.git_revision = os.environ.get("ROSETTA_GIT_REVISION")
    result.provenance.hostname = socket.gethostname()
    result.provenance.extras = {
        "uid": subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip(),
        "network": attempt(connect_out),
        "data_writable": attempt(write(os.path.join(request.data_dir, "probe"))),
        "data_visible": str(os.listdir(request.data_dir)),
        "root_writable": attempt(write("/opt/rosetta/probe")),
        "home_writable": attempt(write(os.path.expanduser("~/probe"))),
        "tmp_writable": attempt(write("/tmp/probe")),
        "capabilities": status["CapEff"].strip(),
        "no_new_privileges": status["NoNewPrivs"].strip(),
        "unbuffered": os.environ.get("PYTHONUNBUFFERED", ""),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS", "unset"),
        "pid1": read("/proc/1/cmdline"),
        "memory_max": read("/sys/fs/cgroup/memory.max"),
        "pids_max": read("/sys/fs/cgroup/pids.max"),
        "results_mode": oct(os.stat(os.path.dirname(request.out)).st_mode & 0o777),
        "tmp_bytes": str(os.statvfs("/tmp").f_blocks * os.statvfs("/tmp").f_frsize),
        "home_bytes": str(os.statvfs(os.path.expanduser("~")).f_blocks * os.statvfs(os.path.expanduser("~")).f_frsize),
    }
    result.write(request.out)
''')

DOCKERFILE = textwrap.dedent(f"""
    FROM {BASE_IMAGE}
    RUN useradd --uid 10001 --user-group --create-home --home-dir /home/rosetta rosetta
    COPY workloads/ /opt/rosetta/workloads/
    COPY fake_workload.py /opt/fake/fake_workload.py
    ENV PYTHONPATH=/opt/rosetta PYTHONDONTWRITEBYTECODE=1 HOME=/home/rosetta
    USER 10001:10001
    WORKDIR /home/rosetta
    ENTRYPOINT ["python3", "/opt/fake/fake_workload.py"]
    LABEL org.opencontainers.image.revision=test-revision io.rosetta-bench.sources-sha256=test-sources
""")


@pytest.fixture(scope="module")
def client():
    engine = connect()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def test_image(client, tmp_path_factory):
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        reason = f"no {BASE_IMAGE} image: run images/base/make-local-base.sh first"
        if REQUIRE_DOCKER:
            pytest.fail(reason)
        pytest.skip(reason)
    context = tmp_path_factory.mktemp("image-context")
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "fake_workload.py").write_text(FAKE_WORKLOAD)
    shutil.copytree(WORKLOADS_DIR, context / "workloads", ignore=shutil.ignore_patterns("__pycache__"))
    tag = f"rosetta-bench-test/docker-backend:{uuid.uuid4().hex[:8]}"
    image, _ = client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    yield image
    client.images.remove(image.id, force=True)


@pytest.fixture
def backend(client, test_image):
    return DockerBackend({}, client=client, image_for=lambda cell: test_image.tags[0], log=lambda message: None)


def make_job(tmp_path: Path, workload: str, *, precision="fp32", device="cpu", timeout=None,
             data="synthetic") -> CellJob:
    cell = Cell("fake", workload, precision=precision, profile="smoke", data=data)
    return CellJob(cell=cell, device=device, work_dir=tmp_path / "run" / ".work" / cell.key,
                   log_path=tmp_path / "run" / "logs" / f"{cell.key}.log", data_dir=tmp_path / "data",
                   timeout=timeout, git_revision="0123abc")


def host_processes(command_line: str) -> list[int]:
    """Processes on this host (the engine's containers' included: the engine is local) running exactly it."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip() == command_line.encode():
                found.append(int(entry.name))
        except OSError:
            pass  # it ended while we looked
    return found


def containers_of(client, backend: DockerBackend) -> list:
    return client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={backend.session}"})


def test_an_ok_cell_runs_locked_down_and_leaves_nothing_behind(tmp_path, client, backend, test_image, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the host's thread counts reach the container, as locally
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    job = make_job(tmp_path, "cnn")
    job.data_dir.mkdir()
    (job.data_dir / "cifar-10.tar.gz").write_text("cached dataset")
    same_cell = {"label": f"{CELL_LABEL}={job.cell.key}"}
    # a run killed outright (SIGKILL) may have left one behind on this engine: this run must add none
    before = {container.id for container in client.containers.list(all=True, filters=same_cell)}
    result = backend.run_cell(job)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    seen = result.provenance.extras
    assert seen["uid"] == "10001"
    assert seen["network"].startswith("no")  # network_mode none
    assert seen["data_writable"] == "no (Read-only file system)" and "cifar-10.tar.gz" in seen["data_visible"]
    assert seen["root_writable"] == "no (Read-only file system)"
    assert seen["home_writable"] == "yes" and seen["tmp_writable"] == "yes"  # the tmpfs mounts
    assert seen["tmp_bytes"] == seen["home_bytes"] == str(4 << 30)  # each capped: it fills no host's memory
    assert seen["capabilities"] == "0000000000000000" and seen["no_new_privileges"] == "1"
    assert seen["unbuffered"] == "1" and result.provenance.git_revision == "0123abc"
    assert result.provenance.backend == "docker"
    assert result.provenance.image_id == test_image.id and result.provenance.image_digest is None  # never pushed
    assert (seen["omp_num_threads"], seen["mkl_num_threads"]) == ("3", "2")
    assert result.provenance.image_revision == "test-revision"  # the image's own labels
    assert result.provenance.image_sources_sha256 == "test-sources"
    assert "fake workload: fake__cpu__cnn__fp32__smoke__synthetic__r0 on cpu" in job.log_path.read_text()
    assert seen["pid1"].startswith("/sbin/docker-init")  # --init: PID 1 reaps what the cell leaves
    assert seen["results_mode"] == "0o700"  # /results: the container user's alone
    assert not job.work_dir.exists()
    assert host_processes("sleep 987") == []  # the child the cell left running ended with it
    assert containers_of(client, backend) == []
    assert {container.id for container in client.containers.list(all=True, filters=same_cell)} <= before


def test_a_hanging_cell_is_killed_and_its_container_removed(tmp_path, client, backend):
    start = time.monotonic()
    result = backend.run_cell(make_job(tmp_path, "gru", timeout=3))
    assert time.monotonic() - start < 60
    assert result.status == "timeout" and result.reason == "timed out after 3 s; the cell was killed"
    assert "fake workload" in result.stderr_tail  # the log up to the kill is kept
    assert containers_of(client, backend) == []


def test_unsupported_exit_code(tmp_path, client, backend):
    job = make_job(tmp_path, "resnet50")
    result = backend.run_cell(job)
    assert (result.status, result.reason) == ("unsupported", "resnet50 needs a GPU here")
    assert job.data_dir.is_dir()  # created for the mount when missing
    assert containers_of(client, backend) == []


def test_a_crash_keeps_the_stderr_tail(tmp_path, client, backend):
    result = backend.run_cell(make_job(tmp_path, "cnn", precision="fp16"))
    assert (result.status, result.reason) == ("failed", "exit code 7; no result written")
    assert "boom: fp16 kernels crashed" in result.stderr_tail
    assert containers_of(client, backend) == []


def test_as_a_non_root_user_of_the_engine(tmp_path, client, backend, monkeypatch):
    """Without root we cannot hand the scratch folder to uid 10001, and it is never opened to all:
    the container runs as the invoking user, who owns it (mode 0700). Should the result still be
    unreadable to us, the engine hands over a copy."""
    from orchestrator.backends import docker as docker_backend

    monkeypatch.setattr(docker_backend.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(docker_backend.os, "getegid", lambda: 1000)
    readable = os.access
    monkeypatch.setattr(docker_backend.os, "access",
                        lambda path, mode: False if Path(path).name == "result.json" else readable(path, mode))
    prepare = backend._prepare_scratch
    folders = []

    def prepare_as_user_1000(job):
        folder = prepare(job)
        folders.append((folder.stat().st_uid, folder.stat().st_mode & 0o777))
        os.chown(folder, 1000, 1000)  # this test really runs as root: the folder a user 1000 would own
        return folder

    monkeypatch.setattr(backend, "_prepare_scratch", prepare_as_user_1000)
    result = backend.run_cell(make_job(tmp_path, "cnn"))
    assert result.status == "ok", (result.reason, result.stderr_tail)
    assert folders == [(os.getuid(), 0o700)]  # ours, never chowned or opened to others
    assert result.provenance.extras["uid"] == "1000" and result.provenance.extras["results_mode"] == "0o700"
    assert result.provenance.extras["home_writable"] == "yes"  # HOME's tmpfs belongs to that user too


def test_the_scratch_folder_is_the_container_users_alone(tmp_path, backend):
    if os.geteuid() != 0:
        pytest.skip("as root, the folder is handed to the images' user")
    folder = backend._prepare_scratch(make_job(tmp_path, "cnn"))
    info = folder.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (10001, 10001, 0o700)


def test_cell_containers_get_memory_and_process_limits_and_record_them(tmp_path, client, test_image):
    limited = DockerBackend({}, client=client, image_for=lambda cell: test_image.tags[0], memory_limit="256m",
                            pids_limit=64, log=lambda message: None)
    job = make_job(tmp_path, "cnn")
    job.data_dir.mkdir()
    container = client.containers.create(test_image.id, ["--help"], **limited._container_options(job, job.data_dir))
    try:
        host_config = client.api.inspect_container(container.id)["HostConfig"]
    finally:
        container.remove(force=True)
    assert host_config["Memory"] == host_config["MemorySwap"] == 256 << 20  # no swap beyond the limit
    assert host_config["PidsLimit"] == 64 and host_config["Init"] is True
    assert host_config["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "32m", "max-file": "2"}}
    result = limited.run_cell(job)
    assert result.status == "ok", (result.reason, result.stderr_tail)
    extras = result.provenance.extras
    assert (extras["container_memory_limit"], extras["container_pids_limit"]) == ("256m", "64")
    assert extras["memory_max"] in (str(256 << 20), "unreadable (No such file or directory)")  # cgroup v2 shows it
    assert extras["pids_max"] in ("64", "unreadable (No such file or directory)")
    hog = limited.run_cell(make_job(tmp_path / "hog", "cnn", data="real"))
    assert hog.status == "failed" and hog.reason.startswith(
        "killed for lack of memory (out-of-memory killer; the container's limit is 256m; raise it with "
        "--container-memory); exit code 137"), hog.reason
    unlimited = DockerBackend({}, client=client, image_for=str, memory_limit=None, pids_limit=None)
    options = unlimited._container_options(job, job.data_dir)
    assert not {"mem_limit", "memswap_limit", "pids_limit"} & set(options)


def test_the_default_limits_are_recorded(tmp_path, backend):
    from orchestrator.backends.options import DEFAULT_CONTAINER_MEMORY, DEFAULT_CONTAINER_PIDS

    result = backend.run_cell(make_job(tmp_path, "resnet50"))
    assert result.provenance.extras["container_memory_limit"] == DEFAULT_CONTAINER_MEMORY == "16g"
    assert result.provenance.extras["container_pids_limit"] == str(DEFAULT_CONTAINER_PIDS) == "4096"


def test_cuda_cells_request_the_chosen_gpus(tmp_path, client, test_image):
    chosen = DockerBackend({}, client=client, image_for=lambda cell: test_image.id, gpus="0, 1")
    job = make_job(tmp_path, "cnn", device="cuda")
    options = chosen._container_options(job, tmp_path)
    [request] = options["device_requests"]
    assert request["DeviceIDs"] == ["0", "1"] and request["Capabilities"] == [["gpu"]]
    every = DockerBackend({}, client=client, image_for=lambda cell: test_image.id)
    [request] = every._container_options(job, tmp_path)["device_requests"]
    assert request["Count"] == -1
    assert "device_requests" not in every._container_options(make_job(tmp_path, "cnn"), tmp_path)
    with pytest.raises(UserError, match="--gpus '0,,1'"):
        DockerBackend({}, client=client, image_for=str, gpus="0,,1")


def test_ctrl_c_removes_the_running_container_and_propagates(tmp_path, client, backend, ctrl_c_interrupts):
    def interrupt_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if client.containers.list(filters={"label": f"{SESSION_LABEL}={backend.session}", "status": "running"}):
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does: KeyboardInterrupt in the main thread

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    job = make_job(tmp_path, "gru")
    with pytest.raises(KeyboardInterrupt):
        backend.run_cell(job)
    assert containers_of(client, backend) == []
    assert not job.work_dir.exists()


def test_sighup_removes_the_running_container_as_ctrl_c_does(tmp_path, client, backend):
    """The orchestrator's handlers (orchestrator/__main__.py) turn SIGHUP into the same
    KeyboardInterrupt as Ctrl-C: the running cell's container and work folder are removed."""
    from orchestrator.__main__ import install_signal_handlers

    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}

    def hang_up_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if client.containers.list(filters={"label": f"{SESSION_LABEL}={backend.session}", "status": "running"}):
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGHUP)

    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        install_signal_handlers()
        threading.Thread(target=hang_up_once_running, daemon=True).start()
        job = make_job(tmp_path, "gru")
        with pytest.raises(KeyboardInterrupt):
            backend.run_cell(job)
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
    assert containers_of(client, backend) == []
    assert not job.work_dir.exists()


def test_cells_that_measure_nothing_share_the_host_and_a_cancel_kills_every_one(tmp_path, client, backend):
    """docs/RUN-GUARANTEES.md, one measured cell at a time: the parity check's cells run one per CPU
    (at most four) in containers of their own, a measured cell alone; a concurrent dispatch's cancel
    kills every running container, the cell after them never starts, and the engine keeps nothing."""
    from orchestrator.backends import ConcurrentDispatch
    from orchestrator.backends.contract import UNMEASURED_CELLS_AT_ONCE

    assert backend.cells_at_once(measured=True) == 1
    assert backend.cells_at_once(measured=False) == max(1, min(UNMEASURED_CELLS_AT_ONCE, client.info()["NCPU"]))
    started = []
    dispatch = ConcurrentDispatch(backend, started.append, at_once=2)
    jobs = [make_job(tmp_path / f"cell{index}", "gru") for index in range(3)]  # each hangs until killed
    for job in jobs:
        dispatch.submit(job)
    try:
        assert list(dispatch.gather(wait=False)) == []  # two started, none finished
        running = {"label": f"{SESSION_LABEL}={backend.session}", "status": "running"}
        deadline = time.monotonic() + 60  # only a wrong run waits this long
        while len(client.containers.list(filters=running)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(client.containers.list(filters=running)) == 2  # side by side
        dispatch.cancel()
        finished = list(dispatch.gather(wait=True))
    finally:
        dispatch.close()
    assert started == jobs[:2] and [job for job, _ in finished] != []
    assert sorted(id(job) for job, _ in finished) == sorted(id(job) for job in jobs[:2])  # the third never started
    assert all(result.status == "failed" for _, result in finished), [r.reason for _, r in finished]
    assert containers_of(client, backend) == []
    assert not any(job.work_dir.exists() for job in jobs)
    # a cancelled backend starts no container again
    late = backend.run_cell(make_job(tmp_path / "late", "cnn"))
    assert (late.status, late.reason) == ("failed", "stopped before its container started: the run was cancelled")
    assert containers_of(client, backend) == []


def test_docker_errors_become_failed_cells_not_crashes(tmp_path, client, backend):
    missing = DockerBackend({}, client=client, image_for=lambda cell: "rosetta-bench-test/missing:none")
    result = missing.run_cell(make_job(tmp_path, "cnn"))
    assert result.status == "failed"
    assert result.reason.startswith("image rosetta-bench-test/missing:none is not on the Docker engine; build it")
    # A CUDA cell on an engine without GPU support: the engine refuses the device request.
    if backend.unsupported_reason(None, Variant("cuda", "cuda", Path("requirements-cuda.txt"))) is None:
        pytest.skip("this host can run CUDA containers")
    result = backend.run_cell(make_job(tmp_path, "cnn", device="cuda"))
    assert result.status == "failed" and result.reason.startswith("Docker: ") and "\n" not in result.reason
    assert containers_of(client, backend) == []


def test_cuda_cells_are_unsupported_without_a_gpu_runtime(backend):
    cuda = Variant("cuda", "cuda", Path("requirements-cuda.txt"))
    reason = backend.unsupported_reason(None, cuda)
    if reason is None:
        pytest.skip("this host has a GPU and the NVIDIA container runtime")
    assert reason.startswith("no GPU runtime on this host (")
    assert backend.unsupported_reason(None, Variant("cpu", "cpu", Path("requirements-cpu.txt"))) is None


def test_leftover_containers_are_found_by_label_and_removed(client, backend, test_image):
    from orchestrator.commands.doctor import leftover_containers

    leftover = client.containers.create(test_image.id, ["cnn"], labels={CELL_LABEL: "leftover", SESSION_LABEL: backend.session})
    assert len(containers_of(client, backend)) == 1
    assert "docker rm -f" in leftover_containers() and leftover.short_id in leftover_containers()  # doctor names it
    assert remove_leftover_containers(client, session=backend.session) == 1
    assert containers_of(client, backend) == []


def test_connect_names_the_fix_when_no_engine_answers(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(UserError) as raised:
        connect(timeout=2)
    message = str(raised.value)
    assert message.startswith("no Docker engine answered at unix:///nonexistent.sock (")
    assert "`sudo systemctl start docker` or `dockerd &`) or use --backend local" in message
    assert "\n" not in message


# A run of one hanging cell (gru) whose orchestrator never comes back to wait for it: the test kills
# it outright (SIGKILL), as the out-of-memory killer would. The container's grace is cut to 1 s.
ORPHANING_RUN = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from orchestrator.backends import CellJob, container_lifetime
    from orchestrator.backends.docker import DockerBackend, connect
    from workloads.common.result import Cell

    tag, root, session, timeout = sys.argv[1:]
    container_lifetime.DEADLINE_GRACE_S = 1
    backend = DockerBackend({}, client=connect(), image_for=lambda cell: tag, log=print)
    backend.session = session
    backend._wait = lambda container, timeout: time.sleep(3600)  # never waits on the container
    cell = Cell("fake", "gru", precision="fp32", profile="smoke", data="synthetic")
    root = Path(root)
    backend.run_cell(CellJob(cell=cell, device="cpu", work_dir=root / "work", log_path=root / "cell.log",
                             data_dir=root / "data", timeout=float(timeout)))
''')


def orphaned_container(client, tmp_path: Path, image, timeout: float):
    """The running container of a real run (its own process) killed outright once the cell runs."""
    import subprocess
    import sys

    session = uuid.uuid4().hex[:12]
    label = {"label": f"{SESSION_LABEL}={session}", "status": "running"}
    run = subprocess.Popen([sys.executable, "-c", ORPHANING_RUN, image.tags[0], str(tmp_path), session, str(timeout)],
                           cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while not client.containers.list(filters=label) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.1)
    finally:
        run.kill()
        run.wait()
    [container] = client.containers.list(all=True, filters={"label": f"{SESSION_LABEL}={session}"})
    return container, run.pid


def test_a_container_whose_orchestrator_was_killed_ends_itself_at_its_deadline(tmp_path, client, test_image):
    container, _ = orphaned_container(client, tmp_path, test_image, timeout=2)
    try:
        status = container.wait(timeout=60)  # the cell sleeps 120 s: only its own deadline (2 + 1 s) ends it sooner
        container.reload()
        assert status["StatusCode"] == 137 and container.attrs["State"]["OOMKilled"] is False  # SIGKILL
        assert container.attrs["Config"]["Entrypoint"][:4] == ["timeout", "-s", "KILL", "3"]
    finally:
        container.remove(force=True)


def test_the_next_docker_run_removes_what_a_killed_run_left_and_keeps_a_live_runs(tmp_path, client, test_image):
    from orchestrator.backends import registry
    from orchestrator.backends.container_lifetime import (DEADLINE_LABEL, OWNER_HOST_LABEL, OWNER_PID_LABEL,
                                                          lifetime_labels)

    orphan, owner_pid = orphaned_container(client, tmp_path, test_image, timeout=3600)  # far from its deadline
    assert orphan.labels[OWNER_PID_LABEL] == str(owner_pid) and orphan.status == "running"
    session = {SESSION_LABEL: uuid.uuid4().hex[:12]}
    live = client.containers.create(test_image.id, ["--help"],
                                    labels={CELL_LABEL: "live", **session, **lifetime_labels(3600)})
    elsewhere = client.containers.create(test_image.id, ["--help"], labels={
        CELL_LABEL: "elsewhere", **session, OWNER_PID_LABEL: str(owner_pid), OWNER_HOST_LABEL: "another-host",
        DEADLINE_LABEL: str(int(time.time()) + 3600)})
    late = client.containers.create(test_image.id, ["--help"], labels={
        CELL_LABEL: "late", **session, OWNER_PID_LABEL: str(os.getpid()), OWNER_HOST_LABEL: "another-host",
        DEADLINE_LABEL: str(int(time.time()) - 1)})
    lines = []
    try:
        registry.start(BackendOptions(backend="docker"), {}, log=lines.append)
        remaining = {container.id for container in client.containers.list(all=True, filters={"label": CELL_LABEL})}
        assert orphan.id not in remaining and late.id not in remaining
        assert {live.id, elsewhere.id} <= remaining  # a live owner's, and one this host cannot judge before its deadline
        [line] = lines
        assert line.startswith("Removed ") and " cell containers of runs that have ended (" in line
    finally:
        for container in (orphan, live, elsewhere, late):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
