"""Print how long every CPU row's environment takes to build from scratch, with pip and with uv.

    python benchmarks/environment_build.py [--frameworks pytorch,tensorflow] [--warm-caches]

Each framework's CPU environment is built twice into a temporary folder, once by each installer,
from the same pinned requirements and the same package sources (this host's pip configuration,
which orchestrator/environments.py hands to uv too). By default each installer starts with an empty
cache of its own (the first build on a new machine); --warm-caches keeps the host's caches.
Rows whose Python this host lacks are left out, and said so. Prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import environments, frameworks  # noqa: E402
from orchestrator.backends.local import find_python  # noqa: E402


def cpu_rows(names: list[str] | None) -> list[tuple[str, frameworks.Variant, str | None]]:
    """(framework, its CPU variant, the interpreter to build from or None when the host lacks it)."""
    rows = []
    for name, framework in frameworks.discover().items():
        if (names and name not in names) or "cpu" not in framework.variants:
            continue
        if not framework.language.uses_python_environment or framework.environment_name != name:
            continue  # r-keras shares keras-tf's environment; the Julia row has none
        variant = framework.variant("cpu")
        version = variant.python or f"{sys.version_info.major}.{sys.version_info.minor}"
        rows.append((name, variant, find_python(version)))
    return rows


def build_once(name: str, variant, python: str, installer: str, folder: Path, config) -> tuple[float, str]:
    request = environments.BuildRequest(venv=folder / f"{name}-{installer}", python=python,
                                        requirements=variant.requirements, device=variant.device,
                                        build_constraints=variant.build_constraints, label=f"{name}/cpu")
    started = time.perf_counter()
    try:
        used = environments.build(request, folder / f"{name}-{installer}.log", installer=installer, config=config)
    except environments.EnvironmentBuildError as error:
        return time.perf_counter() - started, f"failed: {error}"
    return time.perf_counter() - started, used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frameworks", help="comma-separated (default: every CPU row)")
    parser.add_argument("--warm-caches", action="store_true", help="keep pip's and uv's caches (default: empty ones)")
    args = parser.parse_args()
    if environments.uv_binary() is None:
        print("uv is not installed here (pip install uv): nothing to compare.")
        return 0
    rows = cpu_rows(args.frameworks.split(",") if args.frameworks else None)
    config = environments.PipConfiguration.read()
    totals = {environments.PIP: 0.0, environments.UV: 0.0}
    print(f"{'framework':<14} {'pip (s)':>9} {'uv (s)':>9} {'pip / uv':>9}  notes")
    with tempfile.TemporaryDirectory(prefix="rosetta-envs-") as scratch:
        folder = Path(scratch)
        if not args.warm_caches:
            os.environ["PIP_CACHE_DIR"] = str(folder / "pip-cache")
            os.environ["UV_CACHE_DIR"] = str(folder / "uv-cache")
        for name, variant, python in rows:
            if python is None:
                print(f"{name:<14} {'-':>9} {'-':>9} {'-':>9}  this host has no Python {variant.python}")
                continue
            times, notes = {}, []
            for installer in (environments.PIP, environments.UV):
                seconds, outcome = build_once(name, variant, python, installer, folder, config)
                times[installer] = seconds
                if outcome != installer:
                    notes.append(f"{installer}: {outcome}")
                shutil.rmtree(folder / f"{name}-{installer}", ignore_errors=True)  # disk: one environment at a time
            for installer, seconds in times.items():
                totals[installer] += seconds
            ratio = times["pip"] / times["uv"] if times["uv"] > 0 else float("nan")
            print(f"{name:<14} {times['pip']:>9.1f} {times['uv']:>9.1f} {ratio:>8.1f}x  {'; '.join(notes)}",
                  flush=True)
    ratio = totals["pip"] / totals["uv"] if totals["uv"] > 0 else float("nan")
    print(f"{'total':<14} {totals['pip']:>9.1f} {totals['uv']:>9.1f} {ratio:>8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
