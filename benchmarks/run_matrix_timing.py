"""One timed `run-matrix` for the benchmark scripts beside it (parity_cost.py, compiled_modes_cost.py)."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def timed_run_matrix(*arguments: str) -> float:
    """Seconds one `python -m orchestrator run-matrix ARGUMENTS` took; a run that could not finish
    (exit other than 0, or 1 for failed cells) ends the benchmark with its stderr's tail."""
    command = [sys.executable, "-m", "orchestrator", "run-matrix", *arguments]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if completed.returncode not in (0, 1):
        sys.exit(f"run-matrix exited {completed.returncode}: {completed.stderr[-2000:]}")
    return elapsed
