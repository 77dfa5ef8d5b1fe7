"""Print each framework's CPU throughput per workload: the steady rate its declaration names (training:
the first, compiling step left out), else its throughput (inference: images/s).

    python benchmarks/framework_throughput.py [--frameworks pytorch,keras-jax] [--repeat 1]

Smoke-sized (8 training batches, 2 inference batches) on synthetic data, through the real local
backend, so a regression in one implementation shows up beside its peers. Prints, asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import frameworks  # noqa: E402
from orchestrator.results import load_results  # noqa: E402
from workloads.common import declaration  # noqa: E402


def rate(workload: declaration.Workload) -> declaration.Metric:
    """The figure compared: the steady rate where the workload declares one, else its throughput."""
    return workload.metric(workload.steady or workload.throughput)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frameworks", default=",".join(frameworks.discover()))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--variants", "cpu",
                   "--frameworks", args.frameworks, "--profile", "smoke", "--data", "synthetic",
                   "--repeat", str(args.repeat), "--results-dir", folder, "--no-report"]
        subprocess.run(command, cwd=ROOT, check=False)
        results = load_results(Path(folder))
    workloads = declaration.declared()
    figures: dict[tuple[str, str], list[float]] = defaultdict(list)
    for result in results:
        if result.status == "ok" and result.cell.workload in workloads:
            value = rate(workloads[result.cell.workload]).value(result)
            if value is not None:
                figures[(result.cell.framework, result.cell.workload)].append(value)
    names = sorted({framework for framework, _ in figures})
    print(f"\n{'framework':<14}" + "".join(f"{name + ' ' + rate(w).unit:>22}" for name, w in workloads.items()))
    for name in names:
        cells = [figures.get((name, w)) for w in workloads]
        print(f"{name:<14}" + "".join(f"{statistics.median(c):>22.1f}" if c else f"{'-':>22}" for c in cells))
    print("\nmedian over repeats; CPU, smoke profile, steady state (training: after the first step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
