"""The backend contract: what the runner asks of every backend, each hook stated once with its default.

A backend is a subclass of `Backend`. It must say its `name` and how to `run_cell`; every other hook
has a default that fits a backend running one cell at a time on this host, and a backend that
differs overrides it visibly:

    unsupported_reason(cell, variant)  why this host can never run the cell (default: it can)
    prepare(jobs)                      make ready what the cells need before the first one starts
    run_cell(job)                      run one cell, its Result filed under job.cell (required)
    make_writable_by_cells(folder)     hand a folder of ours to the cells' user (default: the same user)
    gpus_given()                       the GPU indices its CUDA cells get, for the energy meter
    use_session(session)               label what it starts with a run's id (a cluster's clean-up finds it)
    cells_at_once(measured=)           how many cells may run at once on this host (default: one);
                                       a backend that says more for cells that measure nothing
                                       (the parity check's) also kills them from another thread:
    stop_cells()                       kill every cell running now, and any started later (a
                                       concurrent dispatch's cancel; the run then ends)
    dispatcher(...)                    the Dispatch that runs the submitted cells (default: one at a
                                       time on this host, each measured cell's energy metered here;
                                       cells_at_once of the unmeasured ones, ConcurrentDispatch)

A Dispatch is submit-and-gather: the runner submits every cell it runs and writes each result as
`gather` hands it over. Ray's backend has a dispatch of its own (many cells at once, on many nodes);
every other backend is wrapped in SerialDispatch, or in ConcurrentDispatch for cells that measure
nothing where it runs several at once (docs/RUN-GUARANTEES.md: one measured cell at a time).
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import deque
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from workloads.common.result import Cell, Result

# Cells that measure nothing (the parity check's) at once on one host, at most: each is mostly a
# framework's import and a few small steps; more would only crowd the host's memory with frameworks.
UNMEASURED_CELLS_AT_ONCE = 4


def unmeasured_cells_for(cpus: int | None) -> int:
    """How many cells that measure nothing a backend runs at once on a host of `cpus` CPUs (None:
    unknown): one per CPU, at most UNMEASURED_CELLS_AT_ONCE."""
    return max(1, min(UNMEASURED_CELLS_AT_ONCE, cpus or 1))


@dataclass
class CellJob:
    """Everything a backend needs to run one cell."""

    cell: Cell
    device: str  # cpu or cuda: the variant's device
    work_dir: Path  # scratch space for this cell, removed afterwards
    log_path: Path  # the cell's full stdout + stderr, kept
    data_dir: Path
    timeout: float | None = None
    git_revision: str | None = None
    parity: str | None = None  # parity check: the canonical files' folder, relative to data_dir
    export_dir: Path | None = None  # with parity: export the model to ONNX into this writable host folder
    onnx_model: str | None = None  # the exported ONNX model an inference engine runs, relative to data_dir
    accelerator_type: str | None = None  # ray: the GPU model this CUDA cell must run on (matrix.toml), else --accelerator-type
    threads: int | None = None  # --threads: every framework's CPU threads; None: the CPUs the cell may use


class Dispatch(ABC):
    """Submit-and-gather: `prepare(jobs, datasets)` comes first (may refuse the run with a
    UserError, before anything starts); the runner then submits every job and writes each result
    `gather` hands over; `cancel()` on Ctrl-C or SIGTERM stops whatever is outstanding and cleans up
    after it; `close()` always comes last."""

    @abstractmethod
    def prepare(self, jobs: list[CellJob], datasets: dict[str, Path]) -> None: ...

    @abstractmethod
    def submit(self, job: CellJob) -> None: ...

    @abstractmethod
    def gather(self, *, wait: bool) -> Iterator[tuple[CellJob, Result]]:
        """The (job, result) pairs finished since the last call; with `wait`, until none is outstanding."""

    def cancel(self) -> None:
        """Stop whatever is outstanding (default: nothing runs between calls to gather)."""

    def close(self) -> None:
        """Release what the dispatch holds (default: nothing)."""


class Backend(ABC):
    """One way of running cells (local environments, containers, a cluster); see the module's docstring."""

    name: str = ""

    def unsupported_reason(self, cell: Cell, variant) -> str | None:
        """Why this host cannot run the cell at all (decided before anything starts), or None."""
        return None

    def prepare(self, jobs: list[CellJob]) -> None:
        """Before the first cell: make ready what these cells need (the local backend builds the
        environments they lack, several at once), so that no preparation overlaps a measured cell."""

    @abstractmethod
    def run_cell(self, job: CellJob) -> Result:
        """Run one cell to its end (ok, unsupported, failed or timed out) and hand back its Result."""

    def make_writable_by_cells(self, folder: Path) -> None:
        """Hand a folder of ours (mode 0700) to the cells' user. Default: the cells run as we do, so
        it is theirs already; Docker's cells run as another user when the orchestrator is root."""

    def gpus_given(self) -> list[str] | None:
        """The GPU indices (NVML's numbering) this backend's CUDA cells are given; None: every GPU.
        The energy meter reads exactly these (orchestrator/telemetry/)."""
        return None

    def use_session(self, session: str) -> None:
        """Label what this backend starts with `session`, a run's id, so that a clean-up on the
        same machine finds it (a Ray node's backend uses the driver's). Default: nothing to label."""

    def cells_at_once(self, *, measured: bool) -> int:
        """How many cells this backend may run at once on this host. A measured cell always runs
        alone (docs/RUN-GUARANTEES.md); cells that measure nothing (the parity check's: outputs
        only) may share the host. Default: one at a time either way."""
        return 1

    def stop_cells(self) -> None:
        """Kill every cell this backend is running now, from a thread other than the ones waiting on
        them (ConcurrentDispatch.cancel), and any it starts afterwards: a thread between taking its
        cell and starting the process is caught too, and a cancelled run ends, so the backend is not
        used again. Each cell's own thread then cleans up after it. Needed only where
        cells_at_once can exceed one."""

    def dispatcher(self, *, started: Callable[[CellJob], None], progress=None, task=None,
                   telemetry=None, measured: bool = True) -> Dispatch:
        """How the runner's submitted cells run: by default one at a time on this host, in the
        order submitted, each measured one metered by `telemetry` (orchestrator/telemetry/) where
        it runs; cells that measure nothing (`measured` False) run `cells_at_once` at a time,
        unmetered. `started(job)` is called as each cell starts; `progress` and `task` are the
        run's progress display, for a dispatch that shows more than one cell at once."""
        at_once = self.cells_at_once(measured=measured)
        if not measured and at_once > 1:
            return ConcurrentDispatch(self, started, at_once=at_once)
        return SerialDispatch(self, started, telemetry=telemetry if measured else None)


class SerialDispatch(Dispatch):
    """A backend's cells as a Dispatch: `gather` runs each submitted cell in turn (one cell at a
    time, in the order submitted, on this host). Each result's wall_time_s is the whole cell as the
    host saw it, and its energy what `telemetry` measured around it."""

    def __init__(self, backend: Backend, started: Callable[[CellJob], None] = lambda job: None,
                 telemetry=None):
        self.backend = backend
        self.started = started
        self.telemetry = telemetry
        self._queue: list[CellJob] = []

    def prepare(self, jobs: list[CellJob], datasets: dict[str, Path]) -> None:
        self.backend.prepare(jobs)  # the datasets are in the host's data folder already

    def submit(self, job: CellJob) -> None:
        self._queue.append(job)

    def gather(self, *, wait: bool) -> Iterator[tuple[CellJob, Result]]:
        while self._queue:
            job = self._queue.pop(0)
            self.started(job)
            meter = self.telemetry.meter_for(self.backend, job) if self.telemetry is not None else None
            try:
                if meter is not None:
                    meter.start()  # the idle window first, outside the cell's wall time
                start = time.perf_counter()
                result = self.backend.run_cell(job)
            finally:  # an interrupt too: the sampling thread never outlives its cell
                if meter is not None:
                    meter.stop()
            result.wall_time_s = time.perf_counter() - start
            if meter is not None:
                result.energy = meter.energy(result)
            yield job, result

    def cancel(self) -> None:
        self._queue.clear()  # the running cell cleans up after itself as the interrupt unwinds it

    def close(self) -> None:
        if self.telemetry is not None:
            self.telemetry.close()


class ConcurrentDispatch(Dispatch):
    """Cells that measure nothing (the parity check's, which record outputs only) run `at_once` at a
    time on this host, each in a thread that waits on it, in the order submitted; a CUDA cell runs
    alone (two frameworks on one GPU may each claim its whole memory). Results come back as cells
    finish. No energy is metered: there is no figure to attribute it to. `cancel` kills the running
    cells through the backend (Backend.stop_cells) and `close` waits for their threads, which remove
    each cell's work folder as a serial run does."""

    def __init__(self, backend: Backend, started: Callable[[CellJob], None] = lambda job: None, *,
                 at_once: int):
        self.backend = backend
        self.started = started
        self.at_once = at_once
        self._queue: deque[CellJob] = deque()
        self._running: dict[futures.Future, CellJob] = {}
        self._pool = futures.ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="cell")

    def prepare(self, jobs: list[CellJob], datasets: dict[str, Path]) -> None:
        self.backend.prepare(jobs)

    def submit(self, job: CellJob) -> None:
        self._queue.append(job)

    def _start_what_fits(self) -> None:
        while self._queue and len(self._running) < self.at_once:
            alone = self._queue[0].device == "cuda"
            if self._running and (alone or any(job.device == "cuda" for job in self._running.values())):
                return
            job = self._queue.popleft()
            self.started(job)
            self._running[self._pool.submit(self._run, job)] = job

    def _run(self, job: CellJob) -> Result:
        start = time.perf_counter()
        result = self.backend.run_cell(job)
        result.wall_time_s = time.perf_counter() - start  # the cell as the host saw it, sharing the host
        return result

    def gather(self, *, wait: bool) -> Iterator[tuple[CellJob, Result]]:
        while True:
            self._start_what_fits()
            if not self._running:
                return
            done, _ = futures.wait(self._running, timeout=None if wait else 0, return_when=futures.FIRST_COMPLETED)
            if not done:
                return
            for future in done:
                job = self._running.pop(future)
                yield job, future.result()

    def cancel(self) -> None:
        self._queue.clear()
        if self._running:
            self.backend.stop_cells()

    def close(self) -> None:
        self.cancel()  # nothing runs after a finished run; after an error, nothing may
        self._pool.shutdown(wait=True, cancel_futures=True)
