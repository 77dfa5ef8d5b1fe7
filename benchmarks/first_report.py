"""How long README command 1 takes on a bare machine: ``python benchmarks/first_report.py``.

Runs the README's first command's matrix (``run-matrix --profile smoke --data synthetic``) on the
local backend, as on a machine without a Docker engine, with an empty home folder and an empty
project cache in a temporary folder: every framework's environment is built from scratch (uv
where it serves the Python, pip where not), every cell runs, the parity check runs, the report is
rendered. What is installed system-wide (the Python interpreters, pip's own configuration in
/etc) stays, as it would on a new machine set up to run the project.

Prints the whole run's wall time, how long building the environments took (the cells' wait
before their first one ran is in it), the cells by status, the cells' time in each framework's
default mode and in its second one (the compiled rows, or eager beside a graph default: what
`--modes default` leaves out), and where the report is; the target is a report within 7 minutes.
Asserts nothing: a machine other work is loading gives slower figures.

    python benchmarks/first_report.py [--frameworks a,b] [--modes default] [--keep FOLDER]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from workloads.common import modes  # noqa: E402  (standard library only: no framework)
TARGET_S = 7 * 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", help="only these (comma-separated); default: the whole matrix")
    parser.add_argument("--modes", help="passed to run-matrix (default: each framework's default and compiled modes)")
    parser.add_argument("--keep", type=pathlib.Path, help="run in this folder and keep it (default: a temporary one)")
    arguments = parser.parse_args()
    scratch = arguments.keep or pathlib.Path(tempfile.mkdtemp(prefix="rosetta-first-report-"))
    home, results = scratch / "home", scratch / "results"
    home.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "HOME": str(home), "ROSETTA_CACHE_DIR": str(home / ".cache" / "rosetta-bench"),
                   "PYENV_ROOT": os.environ.get("PYENV_ROOT", str(pathlib.Path.home() / ".pyenv"))}
    environment.pop("ROSETTA_DATA_DIR", None)
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--profile", "smoke", "--data", "synthetic",
               "--backend", "local", "--results-dir", str(results)]
    if arguments.frameworks:
        command += ["--frameworks", arguments.frameworks]
    if arguments.modes:
        command += ["--modes", arguments.modes]
    print("running:", " ".join(command[1:]), f"(HOME={home})", flush=True)
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    (scratch / "run-matrix.log").write_text(completed.stdout + completed.stderr)
    cells, parity_cells = cell_records(results / "cells"), cell_records(results / "parity" / "cells")
    statuses = Counter(document.get("status", "?") for document in cells)
    by_mode, parity_by_mode = seconds_by_mode(cells), seconds_by_mode(parity_cells)
    cell_seconds = sum(by_mode.values())
    parity_seconds = parity_span(parity_cells)
    report = results / "report.html"
    print(f"exit {completed.returncode}; wall time {elapsed / 60:.1f} min ({elapsed:.0f} s; target "
          f"{TARGET_S // 60} min: {'met' if elapsed <= TARGET_S else 'missed'})")
    print("cells: " + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items())))
    print(f"time inside the cells: {cell_seconds:.0f} s; the parity check's cells (several at once), first "
          f"start to last end: {parity_seconds:.0f} s; "
          f"the rest (environments built, the host's own work): {elapsed - cell_seconds - parity_seconds:.0f} s")
    for label, figures in (("the cells, one at a time", by_mode), ("the parity cells' own times (overlapping)", parity_by_mode)):
        print(f"{label}: {figures[DEFAULT_MODE]:.0f} s in each framework's default mode, "
              f"{figures[SECOND_MODE]:.0f} s in a second mode")
    print(f"report: {report if report.exists() else 'not written'}; log: {scratch / 'run-matrix.log'}")
    if arguments.keep is None:
        shutil.rmtree(home, ignore_errors=True)  # the environments: gigabytes; the results stay
    return 0


DEFAULT_MODE, SECOND_MODE = "default", "second"


def cell_records(folder: pathlib.Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in folder.glob("*.json")]


def seconds_by_mode(documents: list[dict]) -> dict[str, float]:
    """The cells' wall times summed by whether each ran its framework's default mode
    (workloads/common/modes.py) or a second one: the share `--modes default` leaves out."""
    totals = {DEFAULT_MODE: 0.0, SECOND_MODE: 0.0}
    for document in documents:
        cell = document.get("cell") or {}
        framework = str(cell.get("framework", ""))
        default = modes.resolve(framework, str(cell.get("mode") or "")) == modes.default(framework)
        totals[DEFAULT_MODE if default else SECOND_MODE] += float(document.get("wall_time_s") or 0.0)
    return totals


def parity_span(documents: list[dict]) -> float:
    """Seconds from the first parity cell's start to the last one's end: they run several at once,
    so their wall times overlap and their sum says nothing of the run's time."""
    spans = []
    for document in documents:
        wall, started = float(document.get("wall_time_s") or 0.0), document.get("started_at")
        if wall and started:
            begin = datetime.datetime.fromisoformat(started).timestamp()
            spans.append((begin, begin + wall))
    return max(end for _, end in spans) - min(begin for begin, _ in spans) if spans else 0.0


if __name__ == "__main__":
    sys.exit(main())
