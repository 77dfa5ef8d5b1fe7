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

Ray is handed in by connect.start (a test may hand a stand-in); node.py runs on the nodes, answer.py
checks what they hand back.
"""
from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from rich.markup import escape

from orchestrator import telemetry
from orchestrator.backends import Backend, CellJob, Dispatch, inherited_speed_variables
from orchestrator.backends.container_lifetime import SESSION_LABEL
from orchestrator.backends.ray import answer as node_answer, node as node_side
from orchestrator.backends.ray.nodes import ACCELERATOR_LABEL, Node, alive_nodes, node_table
from orchestrator.errors import ClusterLost, UserError, first_line
from workloads.common import safe_files
from workloads.common.result import Cell, Result

NODE_TABLE_REFRESH_S = 5.0
CANCEL_GRACE_S = 10.0  # after a polite cancel, how long the tasks get to remove their containers
NOT_METERED = "ran on a cluster node: energy is measured only for cells that run on the orchestrator's host"


def cluster_lost(error: BaseException) -> ClusterLost:
    return ClusterLost(f"lost the Ray cluster ({first_line(error)})")


class RayBackend(Backend):
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

    def dispatcher(self, *, started=None, progress=None, task=None, telemetry=None,
                   measured: bool = True) -> "RayDispatch":
        """Many cells at once, on many nodes, measured or not (placed as the module says); no
        energy is metered here: the cells run elsewhere."""
        return RayDispatch(self, progress=progress, task=task)


@dataclass
class _Flight:
    job: CellJob
    node: Node
    tries: list[str] = field(default_factory=list)  # why each earlier try was lost


class RayDispatch(Dispatch):
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
        self.nodes: dict[str, Node] = {}
        # cell key -> the nodes it was lost on: a retry goes elsewhere while another node can take it
        # (Ray may still list a killed node as alive for a few seconds)
        self.lost_on: dict[str, set[str]] = {}
        self._nodes_read = 0.0
        self.counts: Counter = Counter()  # done, failed: for the progress line
        self._refresh_nodes(force=True)

    def _refresh_nodes(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._nodes_read < NODE_TABLE_REFRESH_S:
            return
        try:
            alive = alive_nodes(self.ray)
        except Exception as error:
            raise cluster_lost(error) from None
        table = node_table(alive, self.nodes)
        for flight in self.running.values():  # a node that left keeps its flights until they end
            table.setdefault(flight.node.node_id, flight.node)
        self.nodes = table
        self._alive = set(entry["NodeID"] for entry in alive)
        self._nodes_read = time.monotonic()

    def _eligible(self, job: CellJob) -> list[Node]:
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
        from workloads.common.data import checksum

        for name, archive in datasets.items():
            remote = data.published_dataset(name).remote
            try:  # checked again here, on the very bytes shipped
                content = checksum.read_verified(remote, archive)
            except (OSError, data.DataError) as error:
                raise UserError(f"{name}: {error}") from None
            self.data[name] = (remote, self.ray.put(content))

    def submit(self, job: CellJob) -> None:
        if job.onnx_model:
            self._file(job, Result(cell=job.cell, status="failed", reason=(
                "an exported ONNX model is not shipped to Ray nodes yet: run this engine's cells with "
                "--backend docker or local")))
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
                    self._file(job, self._lost_result(job, tries, f"{self._why_not(job)} is left in the cluster"))
                else:
                    waiting.append((job, tries))
                continue
            self._launch(job, node, tries)
        self.queue = waiting
        self._show()

    def _free_node(self, job: CellJob) -> Node | None:
        cuda = job.device == "cuda"
        limit = self.options.cpu_cells_per_node
        eligible = self._eligible(job)
        avoided = self.lost_on.get(job.cell.key, set())
        eligible = [node for node in eligible if node.node_id not in avoided] or eligible
        free = [node for node in eligible
                if (node.gpu_running < node.gpus if cuda else node.running - node.gpu_running < limit)]
        return min(free, key=lambda node: node.running) if free else None

    def _launch(self, job: CellJob, node: Node, tries: list[str]) -> None:
        cuda = job.device == "cuda"
        needed = self._datasets_of(job.cell) if job.cell.data == "real" else {}
        try:
            ref = self.cell_task.options(
                num_cpus=0, num_gpus=1 if cuda else 0, max_retries=0, name=f"rosetta:{job.cell.key}",
                scheduling_strategy=self._pinned_to(node.node_id),
            ).remote(job, self.options, self.backend.session, needed, inherited_speed_variables())
        except Exception as error:
            raise cluster_lost(error) from None
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
                raise cluster_lost(error) from None
            for ref in finished:
                self._finished(ref)
            if finished:
                self._launch_waiting()
            elif not wait:
                return
            self._show()

    def _finished(self, ref) -> None:
        """File what a node's task gave back: its answer, checked as untrusted data, or what Ray's error
        means (answer.error_outcome), never a traceback. A stopping run's tasks end in cancel(), never
        here: a task found cancelled here was cancelled by someone else, and its cell gets a result."""
        flight = self.running.pop(ref)
        flight.node.running -= 1
        flight.node.gpu_running -= flight.job.device == "cuda"
        job, where = flight.job, flight.node.short
        try:
            answer = self.ray.get(ref)
        except Exception as error:
            outcome, why = node_answer.error_outcome(error, self.ray.exceptions, where)
            if outcome == node_answer.LOST:
                self._lost_try(flight, why)
            else:  # failed, or cancelled by someone else
                self._keep(job, Result(cell=job.cell, status="failed", reason=why), flight)
            return
        try:
            checked = node_answer.check(answer, job.cell, where)
        except node_answer.Refused as refusal:
            self._keep(job, Result(cell=job.cell, status="failed", reason=str(refusal)), flight)
            return
        self._write_log(job, checked.log)
        self._keep(job, checked.result, flight, checked)

    def _lost_try(self, flight: _Flight, why: str) -> None:
        """A try lost with its node or worker: again on another node, within --max-retries."""
        job, tries = flight.job, [*flight.tries, why]
        self.lost_on.setdefault(job.cell.key, set()).add(flight.node.node_id)
        self._refresh_nodes(force=True)
        if len(tries) <= self.options.max_retries:
            self.backend.log(f"[yellow]{escape(job.cell.key)}: {escape(why)}; trying again on another node[/yellow]")
            self.queue.insert(0, (job, tries))
        else:
            self._file(job, self._lost_result(job, tries, "infrastructure failures only"))

    def _keep(self, job: CellJob, result: Result, flight: _Flight,
              answer: node_answer.CheckedAnswer | None = None) -> None:
        """`result` of the try `flight`, with where it ran (provenance.cluster), ready to hand over."""
        result.provenance.backend = self.backend.name
        cluster = self._cluster_provenance(job, flight.tries)
        node = flight.node
        cluster.update(node_id=node.node_id, node_address=node.address, accelerator_type=node.accelerator or "",
                       tries=str(len(flight.tries) + 1))
        if answer:  # the node's checked facts; its git revision never empty (the runner would file the driver's)
            result.wall_time_s = answer.wall_time_s
            result.provenance.git_revision = answer.git_revision or node_answer.UNKNOWN_REVISION
            cluster["hostname"] = answer.hostname
            if answer.gpus:
                cluster["gpus"] = answer.gpus
        result.provenance.cluster = cluster
        self._file(job, result)

    def _cluster_provenance(self, job: CellJob, tries: list[str]) -> dict[str, str]:
        """provenance.cluster's common part: Ray's version, the driver's git revision (the node's is
        provenance.git_revision: a mismatch shows), the tries lost and why."""
        return {"ray_version": self.ray.__version__, "driver_git_revision": job.git_revision or "",
                "tries": str(len(tries)), **{f"try_{n}": why for n, why in enumerate(tries, start=1)}}

    def _lost_result(self, job: CellJob, tries: list[str], note: str) -> Result:
        result = Result(cell=job.cell, status="failed", reason=f"lost {len(tries)} time(s) to the cluster "
                                                               f"({'; '.join(tries) or 'never placed'}); {note}")
        result.provenance.backend = self.backend.name
        result.provenance.cluster = self._cluster_provenance(job, tries)
        return result

    def _file(self, job: CellJob, result: Result) -> None:
        """Hand `result` over at the next gather, counted in the progress line. Energy is measured only
        on the orchestrator's host: whatever a node claims is replaced by why there is none."""
        if result.provenance.cluster:
            result.energy = telemetry.not_sampled(NOT_METERED)
        self.ready.append((job, result))
        self.counts["done" if result.status in ("ok", "unsupported") else "failed"] += 1

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
        done, failed = self.counts["done"], self.counts["failed"]
        self.progress.update(self.task, description=f"running: {running} | done {done} | failed {failed} "
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
                             f"containers labelled {SESSION_LABEL}={self.backend.session} by hand[/yellow]")
        self.running.clear()

    def close(self) -> None:
        try:
            self.ray.shutdown()
        except Exception:
            pass


