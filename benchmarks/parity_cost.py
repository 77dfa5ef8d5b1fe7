"""What run-matrix's parity check adds to a run: ``python benchmarks/parity_cost.py [FRAMEWORKS]``.

Runs the same smoke matrix on synthetic data twice on the local backend, with the parity check and
with --no-parity (default frameworks: pytorch,jax; their environments are built on first use, so
run it once before timing), each into its own temporary results folder, the order alternating
between rounds so that a machine's drift does not favour one side. Prints each run's wall time, the
difference, and the parity cells' own time (their results' wall_time_s); asserts nothing. A machine
other work is loading gives noisy figures: compare rounds, not single runs.
"""
from __future__ import annotations

import json
import pathlib
import sys
import tempfile

from run_matrix_timing import timed_run_matrix

ROUNDS = 1


def run(frameworks: str, folder: pathlib.Path, *extra: str) -> float:
    return timed_run_matrix("--backend", "local", "--frameworks", frameworks, "--profile", "smoke", "--data",
                            "synthetic", "--results-dir", str(folder), *extra)


def parity_cell_seconds(folder: pathlib.Path) -> float:
    return sum(json.loads(path.read_text()).get("wall_time_s") or 0.0
               for path in (folder / "parity" / "cells").glob("*.json"))


def main() -> None:
    frameworks = sys.argv[1] if len(sys.argv) > 1 else "pytorch,jax"
    with tempfile.TemporaryDirectory(prefix="parity-cost-") as scratch:
        for number in range(ROUNDS):
            root = pathlib.Path(scratch) / f"round{number}"
            order = [("with", ()), ("without", ("--no-parity",))]
            timings = {}
            for label, extra in (order if number % 2 == 0 else order[::-1]):
                timings[label] = run(frameworks, root / label, *extra)
            cells = parity_cell_seconds(root / "with")
            print(f"round {number + 1} ({frameworks}, smoke, synthetic, local): with the parity check "
                  f"{timings['with']:.0f} s, with --no-parity {timings['without']:.0f} s: the check adds "
                  f"{timings['with'] - timings['without']:.0f} s ({timings['with'] / timings['without'] - 1:+.0%}); "
                  f"its cells ran {cells:.0f} s")


if __name__ == "__main__":
    main()
