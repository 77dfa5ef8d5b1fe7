"""How one run goes: one object, built once from the command line (and, for run-matrix, the matrix
file), read by the command, the runner and whatever they call, instead of a dozen keyword
arguments handed down through each signature."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from orchestrator.telemetry import IDLE_WINDOW_S


@dataclass(frozen=True)
class RunSettings:
    results_dir: Path | None = None  # None: a fresh folder under results/ (with resume: the latest run)
    data_dir: Path | None = None  # None: the data cache ($ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data)
    timeout: float | None = None  # seconds per cell before it is killed; None: no limit
    threads: int | None = None  # every framework's intra-op and inter-op threads; None: the CPUs each cell may use
    resume: bool = False  # skip the cells already ok in results_dir
    force: bool = False  # run into a results_dir that already holds files
    idle_window_s: float = IDLE_WINDOW_S  # idle power's window before each cell metered on this host
    render_report: bool = True  # run-matrix: render the report at the end
    check_parity: bool = True  # run-matrix: the parity check beside the cells (FAIRNESS.md: parity-gate)
    parity: bool = False  # parity cells: canonical weights in, outputs recorded (orchestrator/parity.py)
    # (framework, variant) -> the GPU model a cluster backend must place its CUDA cells on (matrix.toml)
    accelerator_types: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # what run.json records of this invocation beside the host's facts (profile, seed, options, argv...)
    record: Mapping = field(default_factory=dict)

    @classmethod
    def from_args(cls, args, **more) -> "RunSettings":
        """The run options every run command takes (common_args.add_run_options), and `more`."""
        return cls(results_dir=args.results_dir, data_dir=args.data_dir, timeout=args.timeout, force=args.force,
                   threads=args.threads, **more)

    def but(self, **changes) -> "RunSettings":
        """These settings with `changes` (what the command resolved: the folder, the matrix's facts)."""
        return replace(self, **changes)
