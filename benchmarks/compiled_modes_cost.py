"""What the compiled rows add to README command 1: ``python benchmarks/compiled_modes_cost.py [FRAMEWORKS]``.

README command 1 is the smoke run-matrix on synthetic data; the default matrix runs every mode each
framework declares (workloads/common/modes.py: its default and any other). This runs that
smoke matrix on the local backend twice for FRAMEWORKS (default: pytorch; CPU variants only, whose
environments are built on first use, so run it once before timing): once with each framework's
default mode only (a matrix file naming it), once with every mode, each into its own temporary
results folder, parity check and report included, as the command runs them. Prints both wall times,
the difference (the project's target: at most 120 s on a bare machine) and the compiled cells' own
time (benchmark and parity cells' wall_time_s); asserts nothing. Every compiled cell compiles cold
(its caches live in its own temporary folder), so the figure is what a fresh machine pays. A machine
other work is loading gives noisy figures: compare rounds, not single runs.
"""
from __future__ import annotations

import json
import pathlib
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from workloads.common import modes  # noqa: E402  (the declared modes: standard library only)

from run_matrix_timing import timed_run_matrix

TARGET_S = 120.0


def matrix_file(folder: pathlib.Path, frameworks: list[str], default_only: bool) -> pathlib.Path:
    lines = ['[defaults]', 'profile = "smoke"', 'data = "synthetic"', '']
    for name in frameworks:
        lines += [f"[frameworks.{name}]", 'variants = ["cpu"]']
        if default_only:
            lines.append(f'modes = ["{modes.default(name)}"]')
        lines.append("")
    path = folder / ("default-mode.toml" if default_only else "every-mode.toml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def run(matrix: pathlib.Path, folder: pathlib.Path) -> float:
    return timed_run_matrix("--backend", "local", "--matrix", str(matrix), "--results-dir", str(folder),
                            "--timeout", "1800")


def compiled_cells(folder: pathlib.Path) -> tuple[int, float, list[str]]:
    """(how many, their summed wall time, each one's key and status) of the non-default-mode cells."""
    count, seconds, lines = 0, 0.0, []
    for path in sorted(folder.glob("cells/*.json")) + sorted(folder.glob("parity/cells/*.json")):
        record = json.loads(path.read_text())
        cell = record.get("cell") or {}
        framework = cell.get("framework", "")
        if modes.resolve(framework, cell.get("mode") or "") != modes.default(framework):
            count += 1
            seconds += record.get("wall_time_s") or 0.0
            first = (record.get("samples") or {}).get("first_step_s")
            lines.append(f"  {path.parent.parent.name}/{path.stem}: {record.get('status')}, "
                         f"{record.get('wall_time_s') or 0:.0f} s"
                         + (f" (first step {first:.1f} s)" if first is not None else ""))
    return count, seconds, lines


def main() -> None:
    frameworks = (sys.argv[1] if len(sys.argv) > 1 else "pytorch").split(",")
    with tempfile.TemporaryDirectory(prefix="compiled-modes-cost-") as scratch:
        root = pathlib.Path(scratch)
        default_only = run(matrix_file(root, frameworks, True), root / "default")
        every_mode = run(matrix_file(root, frameworks, False), root / "every")
        count, seconds, lines = compiled_cells(root / "every")
        added = every_mode - default_only
        print(f"smoke run-matrix ({','.join(frameworks)}, cpu, synthetic, local, parity and report included): "
              f"default modes only {default_only:.0f} s, every declared mode {every_mode:.0f} s: the other modes' "
              f"rows add {added:.0f} s (target: at most {TARGET_S:.0f} s: "
              f"{'within' if added <= TARGET_S else 'over'}); {count} such cells ran {seconds:.0f} s")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
