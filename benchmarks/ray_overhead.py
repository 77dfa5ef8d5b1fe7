"""Print what Ray's scheduling adds per cell over running the same cells on this host directly.

    python benchmarks/ray_overhead.py [--workloads cnn] [--repeat 3] [--node-backend auto|docker|local]
                                      [--ray-address HOST:PORT] [-- extra run-matrix options]

The same tiny matrix (PyTorch's CPU variant, smoke profile, synthetic data) runs twice: through the
node backend itself (`--backend docker`, or `local` where no Docker engine answers) and through
`--backend ray --node-backend <the same>`, each cell one Ray task. Per run it measures the run's
total (the run-matrix process, as this script saw it) and the sum of the cells' own wall times (as
the node backend saw each cell); what is left over, divided by the cells, is the cost outside the
cells (starting the process, connecting, scheduling, writing results: the fixed part spreads
thinner with more repeats). Ray's overhead per cell is
that figure for the Ray run minus the same figure for the direct run; the issue's target is at
most 1 s per cell. The median cell wall time of both runs is printed beside it (a cell that takes
longer when Ray runs it shows there).

Without --ray-address the script starts a local Ray instance in its own process first (timed on
its own line, not counted per cell) and hands its address to run-matrix; it stops it at the end.
One warm-up cell runs first through the direct backend (it builds the image or environment on
first use) and is not measured. Several nodes run cells side by side, so on a real cluster the
run's total can be less than the sum of its cells: the per-cell figure then says nothing about
scheduling; measure on one node.

Prints figures, asserts nothing. Without Ray installed (pip install -e ".[ray]") it says so and
exits 0.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.errors import UserError  # noqa: E402
from orchestrator.results import load_results  # noqa: E402

TARGET_PER_CELL_S = 1.0


@dataclass
class Run:
    backend: str  # as given to run-matrix, e.g. "docker" or "ray (docker on the node)"
    exit_code: int
    total_s: float  # the run-matrix process, start to end
    cell_wall_s: list[float]  # each ok cell's wall_time_s

    @property
    def cells(self) -> int:
        return len(self.cell_wall_s)

    @property
    def outside_per_cell_s(self) -> float:
        return (self.total_s - sum(self.cell_wall_s)) / self.cells


def run_matrix(label: str, options: list[str], args: argparse.Namespace, *, workloads: str, repeat: int) -> Run:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "orchestrator", "run-matrix", *options, "--frameworks", "pytorch",
                   "--variants", "cpu", "--workloads", workloads, "--profile", "smoke", "--data", "synthetic",
                   "--repeat", str(repeat), "--results-dir", folder, "--no-report", *args.extra]
        print(f"\n$ {' '.join(command)}", flush=True)
        started = time.monotonic()
        exit_code = subprocess.run(command, cwd=ROOT, check=False).returncode
        total = time.monotonic() - started
        try:
            results = load_results(Path(folder))
        except UserError:  # nothing written
            results = []
    walls = [r.wall_time_s for r in results if r.status == "ok" and r.wall_time_s is not None]
    return Run(label, exit_code, total, walls)


def start_local_ray() -> tuple[object, str, float]:
    """A local Ray instance owned by this process (address="local": never an existing cluster of
    this machine); token authentication is Ray's default for it, and run-matrix, a child of this
    process, inherits RAY_AUTH_MODE and finds the token Ray saved."""
    import ray

    started = time.monotonic()
    context = ray.init(address="local", include_dashboard=False, log_to_driver=False)
    return ray, context.address_info["gcs_address"], time.monotonic() - started


def node_backend(choice: str) -> str:
    if choice != "auto":
        return choice
    from orchestrator import host

    engine = host.docker_engine()
    print(f"node backend: {'docker' if engine.available else 'local'} ({engine.detail})")
    return "docker" if engine.available else "local"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="cnn", help="run-matrix --workloads (default: cnn)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats per cell (default: 3)")
    parser.add_argument("--node-backend", choices=("auto", "docker", "local"), default="auto",
                        help="what runs a cell, directly and on the Ray node (auto: docker when an engine answers)")
    parser.add_argument("--ray-address", help="an existing Ray cluster (default: a local instance started here)")
    parser.add_argument("extra", nargs="*", help="after --: more run-matrix options for both runs "
                                                 "(e.g. --registry R --pull, --base-image B)")
    args = parser.parse_args()

    if importlib.util.find_spec("ray") is None:
        print('Ray is not installed here (pip install -e ".[ray]"): nothing to measure.')
        return 0

    backend = node_backend(args.node_backend)
    print("\nwarm-up: one cell through the direct backend (builds the image or environment on first use; "
          "not measured)")
    warm_up = run_matrix(backend, ["--backend", backend], args, workloads=args.workloads.split(",")[0], repeat=1)
    if not warm_up.cells:
        print(f"\nthe warm-up cell did not run (run-matrix exit {warm_up.exit_code}); see its output above")
        return 1

    direct = run_matrix(backend, ["--backend", backend], args, workloads=args.workloads, repeat=args.repeat)
    ray_module, address, ray_start_s = None, args.ray_address, None
    if address is None:
        ray_module, address, ray_start_s = start_local_ray()
    try:
        through_ray = run_matrix(f"ray/{backend}", ["--backend", "ray", "--ray-address", address,
                                                    "--node-backend", backend], args, workloads=args.workloads,
                                 repeat=args.repeat)
    finally:
        if ray_module is not None:
            ray_module.shutdown()

    for run in (direct, through_ray):
        if not run.cells:
            print(f"\n{run.backend}: no ok cell (run-matrix exit {run.exit_code}); see its output above")
            return 1

    print(f"\n{'backend':<12} {'cells':>5} {'run total s':>12} {'sum of cells s':>15} {'outside/cell s':>15} "
          f"{'median cell s':>14}")
    for run in (direct, through_ray):
        print(f"{run.backend:<12} {run.cells:>5} {run.total_s:>12.2f} {sum(run.cell_wall_s):>15.2f} "
              f"{run.outside_per_cell_s:>15.2f} {statistics.median(run.cell_wall_s):>14.2f}")
    if ray_start_s is not None:
        print(f"\nstarting the local Ray instance (once per run, not per cell): {ray_start_s:.2f} s")
    overhead = through_ray.outside_per_cell_s - direct.outside_per_cell_s
    cell_difference = statistics.median(through_ray.cell_wall_s) - statistics.median(direct.cell_wall_s)
    print(f"Ray's scheduling overhead per cell: {overhead:+.2f} s (target: at most {TARGET_PER_CELL_S:.0f} s per "
          f"cell): {'met' if overhead <= TARGET_PER_CELL_S else 'NOT met'}")
    print(f"median cell wall time, Ray minus direct: {cell_difference:+.2f} s")
    if through_ray.total_s < sum(through_ray.cell_wall_s):
        print("the Ray run took less than the sum of its cells: cells ran side by side (several nodes or "
              "--cpu-cells-per-node > 1), so the per-cell figure is not a scheduling cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
