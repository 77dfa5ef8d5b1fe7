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
    dispatcher(...)                    the Dispatch that runs the submitted cells (default: one at a
                                       time on this host, each cell's energy metered here)

A Dispatch is submit-and-gather: the runner submits every cell it runs and writes each result as
`gather` hands it over. Ray's backend has a dispatch of its own (many cells at once, on many nodes);
every other backend is wrapped in SerialDispatch.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from workloads.common.result import Cell, Result


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

    def dispatcher(self, *, started: Callable[[CellJob], None], progress=None, task=None,
                   telemetry=None) -> Dispatch:
        """How the runner's submitted cells run: by default one at a time on this host, in the
        order submitted, each metered by `telemetry` (orchestrator/telemetry/) where it runs.
        `started(job)` is called as each cell starts; `progress` and `task` are the run's progress
        display, for a dispatch that shows more than one cell at once."""
        return SerialDispatch(self, started, telemetry=telemetry)


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
