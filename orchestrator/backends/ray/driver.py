"""The driver's side of the Ray backend: RayBackend and its dispatch, on the driver only.

Placement is decided here from Ray's node table, and enforced by Ray's resources:
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

Data: each verified archive goes into the object store once (ray.put); node.install_dataset.

Ray itself is handed in (connect.start imports it), never imported here: a test may hand a stand-in.
Connecting is connect.py; what runs on a node is node.py; what a node hands back is answer.py.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from rich.markup import escape

from orchestrator.backends import CellJob, inherited_speed_variables
from orchestrator.backends.ray import node as node_side
from orchestrator.errors import ClusterLost, UserError, first_line
from workloads.common import safe_files
from workloads.common.result import Cell, Result

ACCELERATOR_LABEL = "accelerator-type"  # the node label `--accelerator-type` matches (ray start --labels)
NODE_TABLE_REFRESH_S = 5.0
CANCEL_GRACE_S = 10.0  # after a polite cancel, how long the tasks get to remove their containers


def alive_nodes(ray) -> list[dict]:
    return [entry for entry in ray.nodes() if entry.get("Alive")]


class RayBackend:
    """A Backend with a dispatcher of its own (many cells at once, on many nodes)."""

    def __init__(self, frameworks: dict, options, log: Callable[[str], None] = print, *, ray):
        self.frameworks = frameworks
        self.options = options
        self.log = log
        self.ray = ray  # the Ray module connect.start connected
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
        self.ray = backend.ray
        self.backend = backend
        # the node's functions as Ray tasks: Ray ships them by name, a node imports node.py itself
        self.cell_task = self.ray.remote(node_side.run_on_node)
        self.cleanup_task = self.ray.remote(node_side.clean_node)
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

    def _refresh_nodes(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._nodes_read < NODE_TABLE_REFRESH_S:
            return
        try:
            alive = alive_nodes(self.ray)
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
        return f"no node with a GPU{f' of type {wanted}' if wanted else ''}" if job.device == "cuda" else "no node"

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
        cuda = job.device == "cuda"
        needed = {} if job.cell.data != "real" else {
            name: ref for name, ref in self._datasets_of(job.cell).items()}
        try:
            ref = self.cell_task.options(
                num_cpus=0, num_gpus=1 if cuda else 0, max_retries=0, name=f"rosetta:{job.cell.key}",
                scheduling_strategy=self._pinned_to(node.node_id),
            ).remote(job, self.options, self.backend.session, needed, inherited_speed_variables())
        except Exception as error:
            raise self._lost(error) from None
        node.running += 1
        node.gpu_running += cuda
        self.running[ref] = _Flight(job, node, list(tries))

    def _pinned_to(self, node_id: str):
        """Ray's strategy that runs a task on that node or nowhere (placement is decided here)."""
        return self.ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)

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
            cleanups = [self.cleanup_task.options(num_cpus=0, max_retries=0, scheduling_strategy=self._pinned_to(node))
                        .remote(self.backend.session, self.options.node_backend) for node in self._alive]
            removed = sum(ray.get(cleanups, timeout=node_side.CLEANUP_TIMEOUT_S))
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


