"""Print, per cell, the harness's own cost: the cell's wall time (as the host saw it) minus its
timed phases (framework import included), and the data load phase.

    python benchmarks/harness_overhead.py [--frameworks pytorch] [--repeat 1] [--python PATH]

Target on a 2-core machine: overhead <= 1 s per cell. Runs the smoke profile on synthetic data
through the real local backend; prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.results import load_results  # noqa: E402
from workloads.common.hyperparams import WORKLOADS  # noqa: E402

TARGET_OVERHEAD_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frameworks", default="pytorch")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--python", help="an interpreter with the framework (skips building environments)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--variants", "cpu",
                   "--frameworks", args.frameworks, "--workloads", args.workloads, "--profile", "smoke",
                   "--data", "synthetic", "--repeat", str(args.repeat), "--results-dir", folder, "--no-report"]
        if args.python:
            command += ["--python", args.python]
        subprocess.run(command, cwd=ROOT, check=False)
        results = [r for r in load_results(Path(folder)) if r.status == "ok"]
    print(f"\n{'cell':<58} {'wall s':>8} {'phases s':>9} {'import s':>9} {'data s':>8} {'overhead s':>11}")
    overheads = []
    for result in results:
        phases = sum(result.phases.values())
        overhead = result.wall_time_s - phases
        overheads.append(overhead)
        print(f"{result.cell.key:<58} {result.wall_time_s:8.2f} {phases:9.2f} "
              f"{result.phases.get('framework_import', 0):9.2f} {result.phases.get('data_load', 0):8.3f} {overhead:11.2f}")
    if overheads:
        print(f"\nharness overhead per cell: median {statistics.median(overheads):.2f} s, max {max(overheads):.2f} s "
              f"(target <= {TARGET_OVERHEAD_S:.1f} s): {'met' if max(overheads) <= TARGET_OVERHEAD_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
