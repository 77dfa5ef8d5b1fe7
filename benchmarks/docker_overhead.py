"""Print the Docker backend's extra cost per cell against the local backend, for the same cell.

    python benchmarks/docker_overhead.py [--workload cnn] [--repeat 3] [--base-image rosetta-base:bookworm]

Both backends run the same smoke cell on synthetic data; a cell's overhead is its wall time (as the
host saw it) minus its timed phases. The difference is what a container costs: create, start,
collect, remove. Target: <= 2 s per cell. Prints figures, asserts nothing. Needs a Docker engine
and the PyTorch CPU image (built on first use with the same options as `orchestrator build`).
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

TARGET_EXTRA_S = 2.0


def overheads(backend: str, args: argparse.Namespace) -> list[float]:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", backend, "--frameworks",
                   "pytorch", "--variants", "cpu", "--workloads", args.workload, "--profile", "smoke",
                   "--data", "synthetic", "--repeat", str(args.repeat), "--results-dir", folder, "--no-report"]
        if backend == "docker" and args.base_image:
            command += ["--base-image", args.base_image]
        subprocess.run(command, cwd=ROOT, check=False)
        results = [r for r in load_results(Path(folder)) if r.status == "ok"]
    return [r.wall_time_s - sum(r.phases.values()) for r in results]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="cnn")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base-image", help="for building the image if it is missing")
    args = parser.parse_args()
    local, docker = overheads("local", args), overheads("docker", args)
    if not local or not docker:
        print("a backend produced no ok cell; see the output above")
        return 1
    print(f"\n{'backend':<8} {'cells':>5} {'median overhead s':>18} {'samples s':>40}")
    for name, samples in (("local", local), ("docker", docker)):
        print(f"{name:<8} {len(samples):>5} {statistics.median(samples):>18.2f}   {', '.join(f'{s:.2f}' for s in samples)}")
    extra = statistics.median(docker) - statistics.median(local)
    print(f"\nDocker's extra cost per cell: {extra:.2f} s (target <= {TARGET_EXTRA_S:.0f} s): "
          f"{'met' if extra <= TARGET_EXTRA_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
