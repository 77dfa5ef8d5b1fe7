"""The Ray backend: every cell a Ray task on a node of a cluster, run there by the node's own backend.

The driver (this process) connects to a cluster (`--ray-address HOST:PORT`) or starts a local Ray
instance bound to 127.0.0.1, and hands each cell to a node as a Ray task; the task runs the Docker
backend on that node (the node's own engine, the image by tag and digest from `--registry`), or the
local backend (`--node-backend local`), and sends back the Result and the cell's log, which the
driver writes into the run folder as it arrives. Ray is imported here only: it is an optional extra
(`pip install -e ".[ray]"`).

Placement is decided on the driver from Ray's node table, and enforced by Ray's resources:
  - a CUDA cell asks for one GPU (`num_gpus=1`) on a node that has one (and, with
    `--accelerator-type NAME`, carries the label accelerator-type=NAME or Ray's
    accelerator_type:NAME resource); Ray sets CUDA_VISIBLE_DEVICES in the task, and exactly that
    device is handed to the node backend (`gpus`), so no two timed cells share a GPU;
  - a node runs at most `--cpu-cells-per-node` CPU cells at once (default 1);
  - cells no node can take are named before anything starts (exit 2).
Each task is pinned to the node chosen (NodeAffinitySchedulingStrategy, not soft), so the driver
always knows which cell runs where (the progress display) without asking the cluster.

Faults: a task lost to its node's or worker's death is tried again on another node, at most
`--max-retries` times, each try recorded in provenance.cluster; a cell whose workload failed is a
failed result and never retried. Ctrl-C or SIGTERM cancels what is outstanding (KeyboardInterrupt in
the tasks first, so the node backend removes its container as it unwinds; then by force) and a
clean-up task on every node removes whatever container of this run is left.

Data: the driver prepares and verifies the datasets as ever; each verified archive goes into the
object store once (ray.put), and a node writes it into its own data cache only after checking the
published checksum on the very bytes received, or verifies the copy its cache already holds.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from rich.markup import escape

from orchestrator import numerals
from orchestrator.backends import SPEED_VARIABLES, CellJob, inherited_speed_variables
from orchestrator.errors import ClusterLost, UserError, first_line
from workloads.common import safe_files
from workloads.common.result import Cell, Result

RAY_EXTRA = 'pip install -e ".[ray]"'
ACCELERATOR_LABEL = "accelerator-type"  # the node label `--accelerator-type` matches (ray start --labels)
NODE_BACKENDS = ("docker", "local")
CONNECT_TIMEOUT_S = 10.0
NODE_TABLE_REFRESH_S = 5.0
CANCEL_GRACE_S = 10.0  # after a polite cancel, how long the tasks get to remove their containers
CLEANUP_TIMEOUT_S = 60.0
LOG_LIMIT_BYTES = 64 << 20
_STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))  # a cell's log shipped back to the driver: its last 64 MiB


def import_ray():
    """Ray, or one line naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--backend ray needs Ray, which is not installed: install the extra with "
                        f"{RAY_EXTRA} (on the driver and on every node)") from None
    return ray


def check_address(address: str) -> tuple[str, int]:
    """HOST:PORT, answering on TCP now: else one line (an unreachable head would have Ray wait long)."""
    parsed = numerals.host_and_port(address)
    if parsed is None:
        raise UserError(f"--ray-address {address!r:.80}: give the head node's HOST:PORT, e.g. 10.0.0.5:6379")
    host, port = parsed
    try:
        socket.create_connection((host.strip("[]"), port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise UserError(f"--ray-address {address}: no Ray head answers there ({error.strerror or error}); "
                        f"start one with `ray start --head --node-ip-address=HOST --port={port}` or check the "
                        f"address") from None
    return host, port


def start(frameworks: dict, options, log: Callable[[str], None]) -> "RayBackend":
    """The registry's factory: connect to (or start) the cluster."""
    if options.python and options.node_backend != "local":
        raise UserError("--python runs cells with an interpreter of the node: it needs --node-backend local")
    if options.node_backend not in NODE_BACKENDS:
        raise UserError(f"--node-backend {options.node_backend!r}: choose from {', '.join(NODE_BACKENDS)}")
    if options.gpus:
        raise UserError("--gpus picks this host's GPUs; on --backend ray every CUDA cell gets one GPU of the "
                        "node it runs on (use --accelerator-type to choose the GPU model)")
    if options.ray_address:
        check_address(options.ray_address)
        use_token_when_there_is_one()  # before Ray is imported: it reads the mode once
    ray = import_ray()
    # Ray's core installs its own SIGTERM handler (it logs and exits): keep ours, which stops a run
    # as Ctrl-C does (the tasks cancelled, the nodes' containers removed, finished cells kept).
    handlers = {number: signal.getsignal(number) for number in _STOPPING_SIGNALS}
    try:
        if options.ray_address:
            ray.init(address=options.ray_address, logging_level="WARNING", log_to_driver=False)
        else:  # a fresh local instance, on the loopback interface only
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                     logging_level="WARNING", log_to_driver=False)
    except Exception as error:  # Ray raises ConnectionError, RuntimeError, its own AuthenticationError...
        where = options.ray_address or "a local Ray instance"
        raise UserError(f"could not connect to {where}: {first_line(error)}") from None
    finally:
        if threading.current_thread() is threading.main_thread():  # elsewhere Python keeps no handlers
            for number, handler in handlers.items():
                if handler is not None:
                    signal.signal(number, handler)
    where = options.ray_address or "a local Ray instance on 127.0.0.1"
    log(f"Ray {ray.__version__}: {where}, {len(_alive_nodes(ray))} node(s); cells run with the "
        f"{options.node_backend} backend on each node")
    return RayBackend(frameworks, options, log)


def use_token_when_there_is_one() -> None:
    """Current Ray turns token authentication on for the clusters `ray start` makes, but a driver
    that connects presents the token only in token mode: turn it on when a token is at hand
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and RAY_AUTH_MODE says nothing.
    The token is never read here, nor recorded anywhere."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"


def _alive_nodes(ray) -> list[dict]:
    return [node for node in ray.nodes() if node.get("Alive")]


# --- the driver -------------------------------------------------------------------------------------

class RayBackend:
    """A Backend with a dispatcher of its own (many cells at once, on many nodes)."""

    def __init__(self, frameworks: dict, options, log: Callable[[str], None] = print):
        self.frameworks = frameworks
        self.options = options
        self.log = log
        self.name = f"ray/{options.node_backend}"
        self.session = uuid.uuid4().hex[:12]

    def unsupported_reason(self, cell: Cell, variant) -> str | None:
        """An inference engine's cells (ONNX Runtime: PyTorch's model exported on this host) cannot run
        on a node yet: the export is not shipped to nodes. Anything else the node decides (its GPU, its
        Python); placement is checked before the run."""
        from orchestrator import onnx_export

        if onnx_export.needs_export(self.frameworks[cell.framework]):
            return ("the Ray backend does not ship an exported ONNX model to its nodes yet: run this engine's "
                    "cells with --backend docker or local")
        return None

    def run_cell(self, job: CellJob) -> Result:
        """One cell outside the matrix (an ONNX export): it writes into a folder of this host, which
        a node cannot reach."""
        return Result(cell=job.cell, status="failed",
                      reason="the ONNX export runs on this host: run it once with --backend docker or local, "
                             "then its cells on --backend ray")

    def dispatcher(self, *, progress=None, task=None) -> "RayDispatch":
        return RayDispatch(self, progress=progress, task=task)


@dataclass
class _Node:
    node_id: str
    address: str
    gpus: int
    accelerator: str | None  # the accelerator-type label, else Ray's accelerator_type resource
    running: int = 0  # cells of this run on it now
    gpu_running: int = 0

    @property
    def short(self) -> str:
        return f"{self.address}/{self.node_id[:6]}"


@dataclass
class _Flight:
    job: CellJob
    node: _Node
    tries: list[str] = field(default_factory=list)  # why each earlier try was lost


class RayDispatch:
    def __init__(self, backend: RayBackend, *, progress=None, task=None):
        self.ray = import_ray()
        self.backend = backend
        self.options = backend.options
        self.progress, self.task = progress, task
        self.queue: list[tuple[CellJob, list[str]]] = []  # waiting: the job, the tries lost so far
        self.running: dict = {}  # ObjectRef -> _Flight
        self.ready: list[tuple[CellJob, Result]] = []
        self.data: dict = {}  # dataset name -> (RemoteFile, ObjectRef of its verified bytes)
        self.nodes: dict[str, _Node] = {}
        # cell key -> the nodes it was lost on: a retry goes elsewhere while another node can take it
        # (Ray may still list a killed node as alive for a few seconds)
        self.lost_on: dict[str, set[str]] = {}
        self._nodes_read = 0.0
        self.done = self.failed = 0
        self._refresh_nodes(force=True)

    # --- the cluster --------------------------------------------------------------------------

    def _refresh_nodes(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._nodes_read < NODE_TABLE_REFRESH_S:
            return
        try:
            alive = _alive_nodes(self.ray)
        except Exception as error:
            raise self._lost(error) from None
        table = {}
        for entry in alive:
            resources = entry.get("Resources") or {}
            labels = entry.get("Labels") or {}
            accelerator = labels.get(ACCELERATOR_LABEL) or next(
                (name.split(":", 1)[1] for name in resources if name.startswith("accelerator_type:")), None)
            node_id = entry["NodeID"]
            known = self.nodes.get(node_id)
            table[node_id] = _Node(node_id, entry.get("NodeManagerAddress", "?"), int(resources.get("GPU", 0)),
                                   accelerator, known.running if known else 0, known.gpu_running if known else 0)
        for flight in self.running.values():  # a node that left keeps its flights until they end
            table.setdefault(flight.node.node_id, flight.node)
        self.nodes = table
        self._alive = set(entry["NodeID"] for entry in alive)
        self._nodes_read = time.monotonic()

    def _lost(self, error: BaseException):
        return ClusterLost(f"lost the Ray cluster ({first_line(error)})")

    def _eligible(self, job: CellJob) -> list[_Node]:
        nodes = [node for node in self.nodes.values() if node.node_id in self._alive]
        if job.device == "cuda":
            wanted = self._wanted(job)
            nodes = [node for node in nodes if node.gpus >= 1 and (not wanted or node.accelerator == wanted)]
        return nodes

    def _wanted(self, job: CellJob) -> str | None:
        """The GPU model a CUDA cell must run on: its variant's in matrix.toml, else --accelerator-type."""
        return job.accelerator_type or self.options.accelerator_type

    def _why_not(self, job: CellJob) -> str:
        wanted = self._wanted(job)
        if job.device == "cuda":
            return f"no node with a GPU{f' of type {wanted}' if wanted else ''}"
        return "no node"

    # --- Dispatch -----------------------------------------------------------------------------

    def prepare(self, jobs: list[CellJob], datasets: dict[str, Path]) -> None:
        unplaceable: dict[str, list[str]] = {}
        for job in jobs:
            if not self._eligible(job):
                unplaceable.setdefault(self._why_not(job), []).append(job.cell.key)
        if unplaceable:
            said = "; ".join(f"{why} for {len(keys)} cell(s) ({', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''})"
                             for why, keys in unplaceable.items())
            hint = (f"; start a node with `ray start --num-gpus=N --labels={ACCELERATOR_LABEL}="
                    f"{self.options.accelerator_type}`" if self.options.accelerator_type else
                    "; start a node with GPUs (`ray start --num-gpus=N`) or leave the CUDA variants out")
            raise UserError(f"cannot place cells on this Ray cluster before starting: {said}{hint}")
        from workloads.common import data

        published = {"cifar10": data.CIFAR10, "imdb": data.IMDB}
        from workloads.common.data import checksum

        for name, archive in datasets.items():
            remote = published[name]
            try:  # checked again here, on the very bytes shipped
                content = checksum.read_verified(remote, archive)
            except (OSError, data.DataError) as error:
                raise UserError(f"{name}: {error}") from None
            self.data[name] = (remote, self.ray.put(content))

    def submit(self, job: CellJob) -> None:
        if job.onnx_model:
            self.ready.append((job, Result(cell=job.cell, status="failed", reason=(
                "an exported ONNX model is not shipped to Ray nodes yet: run this engine's cells with "
                "--backend docker or local"))))
            return
        self.queue.append((job, []))
        self._launch_waiting()

    def _launch_waiting(self) -> None:
        self._refresh_nodes()
        waiting = []
        for job, tries in self.queue:
            node = self._free_node(job)
            if node is None:
                if not self._eligible(job):  # its nodes are gone: placed nowhere, said so
                    self.ready.append((job, self._lost_result(job, tries, f"{self._why_not(job)} is left "
                                                                          f"in the cluster")))
                else:
                    waiting.append((job, tries))
                continue
            self._launch(job, node, tries)
        self.queue = waiting
        self._show()

    def _free_node(self, job: CellJob) -> _Node | None:
        cuda = job.device == "cuda"
        limit = self.options.cpu_cells_per_node
        eligible = self._eligible(job)
        avoided = self.lost_on.get(job.cell.key, set())
        eligible = [node for node in eligible if node.node_id not in avoided] or eligible
        free = [node for node in eligible
                if (node.gpu_running < node.gpus if cuda else node.running - node.gpu_running < limit)]
        return min(free, key=lambda node: node.running) if free else None

    def _launch(self, job: CellJob, node: _Node, tries: list[str]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cuda = job.device == "cuda"
        needed = {} if job.cell.data != "real" else {
            name: ref for name, ref in self._datasets_of(job.cell).items()}
        try:
            ref = _cell_task().options(
                num_cpus=0, num_gpus=1 if cuda else 0, max_retries=0, name=f"rosetta:{job.cell.key}",
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            ).remote(job, self.options, self.backend.session, needed, inherited_speed_variables())
        except Exception as error:
            raise self._lost(error) from None
        node.running += 1
        node.gpu_running += cuda
        self.running[ref] = _Flight(job, node, list(tries))

    def _datasets_of(self, cell: Cell) -> dict:
        from workloads.common import declaration

        name = declaration.get(cell.workload).dataset
        return {name: self.data[name]} if name in self.data else {}

    def gather(self, *, wait: bool) -> Iterator[tuple[CellJob, Result]]:
        while True:
            while self.ready:
                yield self.ready.pop(0)
            if not self.running:
                if self.queue:
                    self._launch_waiting()
                    if self.ready:
                        continue
                    if not self.running:  # nothing can start: the nodes are busy elsewhere or gone
                        self._refresh_nodes(force=True)
                        time.sleep(1.0)
                        continue
                else:
                    return
            refs = list(self.running)
            try:
                finished, _ = self.ray.wait(refs, num_returns=len(refs), timeout=1.0 if wait else 0,
                                            fetch_local=False)
            except Exception as error:
                raise self._lost(error) from None
            for ref in finished:
                self._finished(ref)
            if finished:
                self._launch_waiting()
            elif not wait:
                return
            self._show()

    def _finished(self, ref) -> None:
        ray = self.ray
        flight = self.running.pop(ref)
        flight.node.running -= 1
        flight.node.gpu_running -= flight.job.device == "cuda"
        job = flight.job
        try:
            answer = ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.TaskUnschedulableError, ray.exceptions.LocalRayletDiedError,
                ray.exceptions.RaySystemError) as error:
            tries = [*flight.tries, f"lost on node {flight.node.short}: {type(error).__name__}"]
            self.lost_on.setdefault(job.cell.key, set()).add(flight.node.node_id)
            self._refresh_nodes(force=True)
            if len(tries) <= self.options.max_retries:
                self.backend.log(f"[yellow]{escape(job.cell.key)}: lost on {flight.node.short} "
                                 f"({type(error).__name__}); trying again on another node[/yellow]")
                self.queue.insert(0, (job, tries))
            else:
                self._count(self._keep(job, self._lost_result(job, tries, "infrastructure failures only")))
            return
        except ray.exceptions.TaskCancelledError:
            return
        except ray.exceptions.RayTaskError as error:  # the node side itself broke: not retried
            result = Result(cell=job.cell, status="failed", reason=f"on node {flight.node.short}: "
                                                                   f"{first_line(error.cause or error)}")
            self._count(self._keep(job, result, flight))
            return
        result = answer["result"]
        self._write_log(job, answer.get("log") or b"")
        result.wall_time_s = answer.get("wall_time_s")
        self._count(self._keep(job, result, flight, answer))

    def _keep(self, job: CellJob, result: Result, flight: _Flight | None = None, answer: dict | None = None) -> Result:
        result.provenance.backend = self.backend.name
        cluster = {"ray_version": self.ray.__version__}
        if flight is not None:
            node = flight.node
            cluster.update(node_id=node.node_id, node_address=node.address, accelerator_type=node.accelerator or "")
            tries = flight.tries
        else:
            tries = []
        if answer:
            cluster["hostname"] = answer.get("hostname") or ""
            if answer.get("gpus"):
                cluster["gpus"] = answer["gpus"]
        cluster["tries"] = str(len(tries) + (flight is not None))
        for number, why in enumerate(tries, start=1):
            cluster[f"try_{number}"] = why
        result.provenance.cluster = cluster
        self.ready.append((job, result))
        return result

    def _lost_result(self, job: CellJob, tries: list[str], note: str) -> Result:
        result = Result(cell=job.cell, status="failed",
                        reason=f"lost {len(tries)} time(s) to the cluster ({'; '.join(tries) or 'never placed'}); "
                               f"{note}")
        result.provenance.backend = self.backend.name
        result.provenance.cluster = {"ray_version": self.ray.__version__, "tries": str(len(tries)),
                                     **{f"try_{n}": why for n, why in enumerate(tries, start=1)}}
        return result

    def _count(self, result: Result) -> None:
        if result.status in ("ok", "unsupported"):
            self.done += 1
        else:
            self.failed += 1

    @staticmethod
    def _write_log(job: CellJob, content: bytes) -> None:
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        with safe_files.open_no_follow(job.log_path) as log:
            log.write(content)

    def _show(self) -> None:
        if self.progress is None:
            return
        per_node: dict[str, int] = {}
        for flight in self.running.values():
            per_node[flight.node.short] = per_node.get(flight.node.short, 0) + 1
        running = ", ".join(f"{name} {count}" for name, count in sorted(per_node.items())) or "none"
        self.progress.update(self.task, description=f"running: {running} | done {self.done} | failed {self.failed} "
                                                    f"| waiting {len(self.queue)}")

    def cancel(self) -> None:
        """Outstanding tasks end (politely first, so their containers go as they unwind; then by
        force), then every node removes what is left of this run (its containers, its scratch)."""
        ray = self.ray
        self.queue.clear()
        refs = list(self.running)
        try:
            for ref in refs:
                ray.cancel(ref, force=False)
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S, fetch_local=False)
            for ref in refs:
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass  # it ended meanwhile
            self._refresh_nodes(force=True)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            cleanups = [_cleanup_task().options(num_cpus=0, max_retries=0,
                                                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                        .remote(self.backend.session, self.options.node_backend) for node in self._alive]
            removed = sum(ray.get(cleanups, timeout=CLEANUP_TIMEOUT_S))
            if removed:
                self.backend.log(f"removed {removed} container(s) of this run from the nodes")
        except Exception as error:
            self.backend.log(f"[yellow]could not clean up on every node ({escape(first_line(error))}); remove "
                             f"containers labelled io.rosetta-bench.session={self.backend.session} by hand[/yellow]")
        self.running.clear()

    def close(self) -> None:
        try:
            self.ray.shutdown()
        except Exception:
            pass


# --- the node side ----------------------------------------------------------------------------------

_TASKS: dict[str, object] = {}


def _cell_task():
    if "cell" not in _TASKS:
        ray = import_ray()
        _TASKS["cell"] = ray.remote(run_on_node)
    return _TASKS["cell"]


def _cleanup_task():
    if "cleanup" not in _TASKS:
        ray = import_ray()
        _TASKS["cleanup"] = ray.remote(clean_node)
    return _TASKS["cleanup"]


def node_scratch(session: str) -> Path:
    """This run's scratch folder on a node (its cells' work folders and logs until shipped back)."""
    return Path(os.environ.get("ROSETTA_NODE_SCRATCH") or tempfile.gettempdir()) / f"rosetta-ray-{session}"


def install_dataset(remote, content_ref, data_dir: Path, get: Callable) -> None:
    """The node's copy of a published archive, verified: the one in its cache when it checks out,
    else the driver's bytes (fetched from the object store only then), checked against the
    published digest before they are written. Nothing unverified is ever written or read."""
    from workloads.common.data import checksum
    from workloads.common.data.files import write_atomically

    target = Path(data_dir) / remote.filename
    if target.is_file():
        try:
            checksum.verify_present_file(remote, target)
            return
        except Exception:
            pass  # corrupt: replaced by the verified bytes below
    content = get(content_ref)
    hasher = checksum.new_hasher(remote.algorithm)
    hasher.update(content)
    if hasher.hexdigest() != remote.digest.lower():
        raise UserError(f"{remote.name}: the bytes received do not match the published {remote.algorithm}; "
                        f"not written")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, content)
    checksum.write_stamp(remote, target)


def run_on_node(job: CellJob, options, session: str, datasets: dict, speed_variables: dict | None = None) -> dict:
    """The Ray task: run one cell with this node's backend; the Result, the log, where it ran.

    ``speed_variables``: the thread and math-library variables the driver's host sets
    (backends.SPEED_VARIABLES). Ray sets OMP_NUM_THREADS=1 in a task that asks for no CPU, which
    the node backend would hand on: the cell would run single-threaded. The cell gets exactly the
    driver's, as it would on one host."""
    import ray

    for name in SPEED_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(speed_variables or {})
    from orchestrator import frameworks as framework_registry
    from orchestrator.backends import registry
    from workloads.common import data

    started = time.perf_counter()
    node_facts = {"hostname": socket.gethostname()}
    cuda = job.device == "cuda"
    gpus = ",".join(str(index) for index in ray.get_gpu_ids()) if cuda else None
    if gpus:
        node_facts["gpus"] = gpus
    scratch = node_scratch(session)
    log_path = scratch / "logs" / f"{job.cell.key}.log"
    data_dir = data.default_data_dir()
    node_job = replace(job, work_dir=scratch / "work" / job.cell.key, log_path=log_path, data_dir=data_dir,
                       export_dir=None)
    try:
        try:
            for name, (remote, ref) in datasets.items():
                install_dataset(remote, ref, data_dir, ray.get)
                data.prepare(name, data_dir, offline=True)  # parses into the node's cache, verified again
            if job.parity:
                from orchestrator import parity

                parity.write_canonical(data_dir, [job.cell.workload])
            frameworks = framework_registry.discover()
            node_options = replace(options, backend=options.node_backend, gpus=gpus)
            backend = registry.REGISTRY[options.node_backend].factory(frameworks, node_options, lambda line: None)
            if hasattr(backend, "session"):
                backend.session = session  # labels its containers with this run's id: the clean-up finds them
            variant = frameworks[job.cell.framework].variant(job.cell.variant)
            reason = backend.unsupported_reason(job.cell, variant)
            if reason:
                result = Result(cell=job.cell, status="unsupported", reason=reason)
            else:
                result = backend.run_cell(node_job)
        except (UserError, data.DataError) as error:
            result = Result(cell=job.cell, status="failed", reason=f"on {node_facts['hostname']}: {error}")
        log = b""
        if log_path.is_file():
            with open(log_path, "rb") as stream:
                stream.seek(max(0, log_path.stat().st_size - LOG_LIMIT_BYTES))
                log = stream.read()
    finally:
        try:
            log_path.unlink()
        except OSError:
            pass
    return {"result": result, "log": log, "wall_time_s": time.perf_counter() - started, **node_facts}


def clean_node(session: str, node_backend: str) -> int:
    """After a cancelled run: remove this run's containers and scratch on this node; how many containers."""
    removed = 0
    if node_backend == "docker":
        from orchestrator.backends import docker as docker_backend

        import docker

        label = f"{docker_backend.SESSION_LABEL}={session}"
        try:
            client = docker_backend.connect()
        except UserError:
            client = None  # no engine here: no container either
        deadline = time.monotonic() + CLEANUP_TIMEOUT_S / 2
        while client is not None:
            try:
                removed += docker_backend.remove_leftover_containers(client, session=session)
            except docker.errors.APIError:
                pass  # a removal the cancelled task started is still under way (409): wait for it
            if not client.containers.list(all=True, filters={"label": label}) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    shutil.rmtree(node_scratch(session), ignore_errors=True)
    return removed
