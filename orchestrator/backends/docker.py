"""The Docker backend: each cell in a fresh, locked-down container of its framework's image.

The image's ENTRYPOINT is the framework's cell command (`python -m workloads`, or the command its
metadata's [language] table names: images/Dockerfile.j2), so the container's command is `--cell
/results/cell.json`: the cell document every backend writes (`cell_request`), with the paths as
the container sees them. The container gets no network, no capabilities, a read-only root
filesystem, the dataset cache read-only at /data and one writable per-cell folder at /results,
which holds the cell document and where the workload writes its JSON result. Frameworks write
caches to HOME and /tmp, so both are fresh tmpfs mounts: nothing leaks between cells or persists.
Limits on memory and processes, and caps on the tmpfs mounts and on the output the engine keeps,
keep a runaway cell from taking the host down; Docker's init (`--init`) is the container's PID 1,
so processes a cell leaves behind are reaped while it runs, and all of them end with the
container, which is removed however the cell ends.

Who the container runs as: the images' user (uid 10001) when the orchestrator runs as root, which
hands the cell's /results folder to that user; otherwise the invoking user's own uid:gid, which
owns the folder already. Either way the folder is mode 0700, writable by the cell and nobody else.

The engine must share this host's filesystem (a local engine): the dataset cache and the result
folder are bind mounts of host paths. A container outlives no run: the cell command runs under a
deadline of its own, and its labels name its owner, so the next run removes what a killed one
left behind (orchestrator/backends/container_lifetime.py).
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import docker
import requests


from orchestrator import host, images
from orchestrator.images import labels as image_labels
from orchestrator.images.resolve import CellImages
from orchestrator.backends import (Backend, CellJob, cell_request, collect, gpu_mismatch, remove_work, tail, write_cell_document)
from orchestrator.backends.container_lifetime import (CellsStopped, StartedContainers, deadline_entrypoint,
                                                      deferred_interrupts, remove_containers_of_ended_runs,
                                                      remove_leftover_containers)
from orchestrator.backends.contract import unmeasured_cells_for
from orchestrator.backends.docker_container import (DATA_MOUNT, EXPORT_MOUNT, RESULT_FILE, RESULTS_MOUNT,
                                                    container_options, give_to_container_user)
from orchestrator.backends.options import DEFAULT_CONTAINER_MEMORY, DEFAULT_CONTAINER_PIDS, BackendOptions
from orchestrator.errors import CannotRunHere, UserError, first_line
from orchestrator.frameworks import Framework
from workloads.common import safe_files
from workloads.common.result import Cell, Result

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

# API calls other than waiting for a cell (create, logs, kill, remove) get the SDK's usual limit.
API_TIMEOUT_S = 60.0
# After a timeout: how long to wait for the killed container to stop before reading its logs.
KILL_GRACE_S = 30.0
_UNKNOWN = object()  # "not asked yet", for answers cached on first use that may be None


@dataclass
class _Exit:
    """How a container ended: its exit code, or the time limit it ran past."""

    exit_code: int | None = None
    timed_out_after: float | None = None
    out_of_memory: bool = False


class DockerBackend(Backend):
    name = "docker"

    def __init__(self, frameworks: dict[str, Framework], *, client: docker.DockerClient, image_for: Callable[[Cell], str],
                 gpus: str | None = None, memory_limit: str | None = DEFAULT_CONTAINER_MEMORY,
                 pids_limit: int | None = DEFAULT_CONTAINER_PIDS, log: Callable[[str], None] = print):
        """`image_for(cell)` gives a local image reference (tag or ID) for the cell; this backend
        never builds or pulls. `gpus`: None for every GPU, else comma-separated device indices
        (or UUIDs) as `--gpus` takes them. `memory_limit` ("16g", as Docker's --memory takes it)
        and `pids_limit`: each cell container's, None for none."""
        self.frameworks = frameworks
        self.memory_limit = memory_limit
        self.pids_limit = pids_limit
        self.client = client
        self.image_for = image_for
        self.gpu_ids = _parse_gpus(gpus)
        self.log = log
        self.session = uuid.uuid4().hex[:12]
        self._gpu_problem = _UNKNOWN
        self._engine_info: dict | None = None
        self._sources_hashes: dict[tuple[str, str], str] = {}  # (framework, variant) -> images.sources_hash
        self._started = StartedContainers()

    # --- what this host can run -----------------------------------------------------------------

    def prepare(self, jobs: list[CellJob]) -> None:
        pass  # each image is built or pulled when its first cell comes up (images are checked per tag)

    def unsupported_reason(self, cell: Cell, variant) -> str | None:
        if variant.device != "cuda":
            return None
        if self._gpu_problem is _UNKNOWN:  # the same answer for every CUDA cell: ask once
            self._gpu_problem = self._gpu_support_problem()
        if self._gpu_problem:
            return self._gpu_problem
        return gpu_mismatch(variant, host.gpu_compute_capabilities(), ",".join(self.gpu_ids or []) or None)

    def _gpu_support_problem(self) -> str | None:
        if not host.gpus():
            return "no GPU runtime on this host (nvidia-smi lists no GPU)"
        # Docker hands device requests to the NVIDIA Container Toolkit's hook; older set-ups register
        # an 'nvidia' runtime instead. Either one means GPUs can reach a container.
        if shutil.which("nvidia-container-runtime-hook") or shutil.which("nvidia-container-cli"):
            return None
        info = self._info()
        if info is not None and "nvidia" in (info.get("Runtimes") or {}):
            return None
        return ("no GPU runtime on this host (the NVIDIA Container Toolkit is not installed; install it and run "
                "`sudo nvidia-ctk runtime configure --runtime=docker`)")

    def _info(self) -> dict | None:
        if self._engine_info is None:
            try:
                self._engine_info = self.client.info()
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                return None
        return self._engine_info

    # --- one cell -------------------------------------------------------------------------------

    def run_cell(self, job: CellJob) -> Result:
        """Run the cell in a fresh container and return its Result; Docker's own errors (no image,
        a refused container, a lost engine) become a failed Result with a one-line reason."""
        cell = job.cell
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        safe_files.open_no_follow(job.log_path).close()  # this attempt's log only, not an earlier run's
        reference = None
        try:
            reference = self.image_for(cell)
            image = self.client.images.get(reference)
        except docker.errors.ImageNotFound:
            return self._failed(job, f"image {reference} is not on the Docker engine; build it with "
                                     f"`python -m orchestrator build {cell.framework} --variant {cell.variant}`")
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            return self._failed(job, f"no image for {cell.framework}/{cell.variant}: {first_line(error)}")
        except CannotRunHere as error:  # e.g. a base image this host cannot get: not run here, and why
            return self._not_run(job, "unsupported", str(error))
        except UserError as error:  # a failed build or pull fails this cell; the matrix goes on
            return self._failed(job, str(error))
        entrypoint = deadline_entrypoint(image.attrs, job.timeout)
        if entrypoint is None:
            return self._failed(job, f"image {reference} has no ENTRYPOINT in exec form (a JSON list) to run under "
                                     f"the container's deadline; rebuild it with `python -m orchestrator build "
                                     f"{cell.framework} --variant {cell.variant}`")

        out_dir = self._prepare_scratch(job)
        job.data_dir.mkdir(parents=True, exist_ok=True)  # a bind mount needs an existing source
        request = cell_request(cell, device=job.device, data_dir=DATA_MOUNT, out=RESULT_FILE, parity=job.parity,
                               onnx_model=job.onnx_model, export_onnx=EXPORT_MOUNT if job.export_dir else None,
                               threads=job.threads)
        document = write_cell_document(request, out_dir)
        command = ["--cell", f"{RESULTS_MOUNT}/{document.name}"]
        # Named before it exists: a Ctrl-C while the engine creates it (its answer never read) still
        # leaves us the name to remove it by.
        name = f"rosetta-bench-{self.session}-{uuid.uuid4().hex[:12]}"
        try:
            try:
                with self._started.starting(name):
                    container = self.client.containers.create(image.id, command, name=name, entrypoint=entrypoint,
                                                              **self._container_options(job, out_dir))
                    container.start()
                ending = self._wait(container, job.timeout)
                self._save_logs(container, job.log_path)
                result = collect(cell, exit_code=ending.exit_code, result_file=self._result_file(container, job),
                                 log_path=job.log_path, timed_out_after=ending.timed_out_after)
                if ending.out_of_memory and result.status == "failed":
                    limit = f"the container's limit is {self.memory_limit}; raise it with --container-memory" \
                        if self.memory_limit else "no container limit"
                    result.reason = f"killed for lack of memory (out-of-memory killer; {limit}); {result.reason}"
            except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
                result = self._failed(job, f"Docker: {first_line(error)}")
            except CellsStopped:
                result = self._failed(job, "stopped before its container started: the run was cancelled")
        finally:
            # Always, Ctrl-C included: a forced removal kills the container if it still runs, and a
            # second Ctrl-C waits for the clean-up's end instead of cutting it short.
            with deferred_interrupts():
                self._remove(name)
                self._started.removed(name)
                remove_work(self.log, job.work_dir)
        self._record_image(result, image, reference)
        self._record_sources_match(result)
        self._record_limits(result)
        return result

    def _prepare_scratch(self, job: CellJob) -> Path:
        """A fresh /results folder that only the container's user can write (mode 0700)."""
        safe_files.remove_tree(job.work_dir)  # left behind by a run killed outright
        out_dir = job.work_dir / "out"
        out_dir.mkdir(parents=True)
        out_dir.chmod(0o700)
        give_to_container_user(out_dir)
        return out_dir

    def cells_at_once(self, *, measured: bool) -> int:
        """A measured cell alone; cells that measure nothing one per CPU of the (local) engine's host."""
        engine_cpus = (self._info() or {}).get("NCPU")
        return 1 if measured else unmeasured_cells_for(engine_cpus if type(engine_cpus) is int else os.cpu_count())

    def stop_cells(self) -> None:
        """Kill every cell container running now; a cell whose container is not yet created never
        gets one. Each cell's own thread then reads what is left and removes its container."""
        for name in self._started.stop_all():
            try:
                self.client.api.kill(name)
            except docker.errors.APIError:
                pass  # it ended by itself (409: not running), or was removed meanwhile (404)
            except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
                self.log(f"could not kill container {name} ({first_line(error)}); its cell's clean-up removes it")

    def make_writable_by_cells(self, folder: Path) -> None:
        """A folder we created (mode 0700), for a cell to write (the ONNX export's): see container_user."""
        give_to_container_user(folder)

    def gpus_given(self) -> list[str] | None:
        return list(self.gpu_ids) if self.gpu_ids else None

    def use_session(self, session: str) -> None:
        self.session = session  # its containers' session label: the run's clean-up finds them by it

    def _record_limits(self, result: Result) -> None:
        """The limits the cell ran under, with its result: a cell killed for memory reads with them."""
        result.provenance.extras["container_memory_limit"] = self.memory_limit or "none"
        result.provenance.extras["container_pids_limit"] = str(self.pids_limit) if self.pids_limit else "none"

    def _container_options(self, job: CellJob, out_dir: Path) -> dict:
        return container_options(job, out_dir, session=self.session, memory_limit=self.memory_limit,
                                 pids_limit=self.pids_limit, gpu_ids=self.gpu_ids,
                                 engine_host=(self._info() or {}).get("Name"))

    def _wait(self, container, timeout: float | None) -> _Exit:
        started = time.monotonic()
        try:
            status = container.wait(timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            # Over a unix socket the SDK reports a read timeout as a ConnectionError, so tell our
            # time limit apart from a lost engine by the clock.
            if timeout is None or time.monotonic() - started < timeout * 0.9:
                raise
            _kill(container)
            try:
                container.wait(timeout=KILL_GRACE_S)
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                pass  # its logs so far are still worth reading
            return _Exit(timed_out_after=timeout)
        container.reload()
        return _Exit(exit_code=status.get("StatusCode"),
                     out_of_memory=bool(container.attrs.get("State", {}).get("OOMKilled")))

    @staticmethod
    def _save_logs(container, log_path: Path) -> None:
        with safe_files.open_no_follow(log_path) as log:
            for chunk in container.logs(stdout=True, stderr=True, stream=True, follow=False):
                log.write(chunk)

    @staticmethod
    def _result_file(container, job: CellJob) -> Path:
        """The result as the host can read it. The container runs as us, or we are root, so it is
        readable; should it not be (an engine that maps users, e.g. rootless Docker), the engine
        hands over a copy."""
        written = job.work_dir / "out" / "result.json"
        if not written.is_file() or os.access(written, os.R_OK):
            return written
        copy = job.work_dir / "result.json"
        stream, _ = container.get_archive(RESULT_FILE)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.extractfile(archive.getmembers()[0])
            copy.write_bytes(member.read() if member else b"")
        return copy

    def _remove(self, name: str) -> None:
        try:
            self.client.api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass  # never created, or gone already
        except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
            self.log(f"could not remove container {name} ({first_line(error)}); remove it with `docker rm -f {name}`")

    def _failed(self, job: CellJob, reason: str) -> Result:
        return self._not_run(job, "failed", reason)

    def _not_run(self, job: CellJob, status: str, reason: str) -> Result:
        """A cell stopped on the Docker side (failed, or unsupported here); the log says why too, so
        every cell has one."""
        with safe_files.open_no_follow(job.log_path, append=True) as log:
            log.write(f"rosetta-bench: {reason}\n".encode())
        result = Result(cell=job.cell, status=status, reason=reason, stderr_tail=tail(job.log_path))
        result.provenance.backend = self.name
        return result

    def _record_image(self, result: Result, image, reference: str | None = None) -> None:
        """The image the cell ran in: its ID, its registry digest, and what its labels say it was
        built from (the project's revision, the digest of its workload sources): a result read later
        says which code produced it, whichever image tag it came from."""
        result.provenance.backend = self.name
        result.provenance.image_id = image.id
        labels = image_labels.read(image)
        result.provenance.image_revision = labels.get(images.REVISION_LABEL) or None
        result.provenance.image_sources_sha256 = labels.get(images.SOURCES_LABEL) or None
        digests = image.attrs.get("RepoDigests") or []
        # prefer the digest from the registry the image was asked for (it may sit in several)
        # a reference is repository:tag, or repository@digest (pulled by images.lock)
        repository = (reference.split("@", 1)[0] if "@" in reference else reference.rsplit(":", 1)[0]) \
            if reference else None
        matching = [d for d in digests if repository and d.split("@")[0] == repository]
        result.provenance.image_digest = (matching or digests or [None])[0]

    def _record_sources_match(self, result: Result) -> None:
        """Whether the image holds this checkout's workload sources (its sources label against
        images.sources_hash): "no" marks a result measured with other code than the checkout's
        (a pulled image, run with a warning), so a reader need not compare digests by hand."""
        cell = result.cell
        framework = self.frameworks.get(cell.framework)
        if framework is None or cell.variant not in framework.variants:
            return
        key = (cell.framework, cell.variant)
        if key not in self._sources_hashes:
            self._sources_hashes[key] = images.sources_hash(framework, framework.variant(cell.variant))
        recorded = result.provenance.image_sources_sha256
        result.provenance.extras["image_sources_current"] = (
            "yes" if recorded == self._sources_hashes[key] else
            "no: the image was built from other workload sources than this checkout's" if recorded else
            "unknown: the image has no sources label")

    def remove_leftovers(self) -> int:
        """Remove this backend's containers that an interrupted run may have left behind."""
        return remove_leftover_containers(self.client, session=self.session)


# --- the engine -----------------------------------------------------------------------------------

def connect(timeout: float = 10.0) -> docker.DockerClient:
    """A client for the engine that DOCKER_HOST names (or the local socket), once it has answered.

    `timeout`: seconds to wait for that first answer. Later calls use API_TIMEOUT_S; waiting for a
    cell has its own limit (the job's timeout)."""
    address = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        raise UserError(f"no Docker engine answered at {address} ({first_line(error)}); start it "
                        "(e.g. `sudo systemctl start docker` or `dockerd &`) or use --backend local") from None
    client.api.timeout = max(timeout, API_TIMEOUT_S)
    return client


def _parse_gpus(gpus: str | None) -> list[str] | None:
    if gpus is None:
        return None
    ids = [part.strip() for part in gpus.split(",")]
    if not all(ids):
        raise UserError(f"--gpus {gpus!r}: give comma-separated device indices, e.g. --gpus 0 or --gpus 0,1")
    return ids


def _kill(container) -> None:
    try:
        container.kill()
    except docker.errors.APIError:
        pass  # it stopped by itself meanwhile (409: not running) or is already gone


def start(frameworks: dict, options: BackendOptions, log: Callable[[str], None]) -> "DockerBackend":
    """The registry's factory (orchestrator/backends/registry.py): connect, clear what ended runs left,
    and run each cell in the image built or pulled for it once."""
    if options.python:
        raise UserError("--python runs cells with a host interpreter: it needs --backend local")
    client = connect()
    _remove_containers_of_ended_runs(client, log)
    image_for = CellImages(client, frameworks, options.build, pull=options.pull, log=log)
    return DockerBackend(frameworks, client=client, image_for=image_for, gpus=options.gpus,
                         memory_limit=options.container_memory, pids_limit=options.container_pids, log=log)


def _remove_containers_of_ended_runs(client, log: Callable[[str], None]) -> None:
    """Before the first cell: what runs killed outright left on the engine goes, a live run's stays
    (orchestrator/backends/container_lifetime.py). A refusal is said in one line; the run goes on."""
    try:
        removed = remove_containers_of_ended_runs(client)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        log(f"could not look for containers of ended runs on the Docker engine ({first_line(error, 200)}); "
            f"the run goes on")
        return
    if removed:
        log(f"Removed {removed} cell container{'' if removed == 1 else 's'} of runs that have ended (their owner "
            f"gone, or past their deadline) from the Docker engine.")
