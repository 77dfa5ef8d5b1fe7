"""Running one real cell of a framework whose Python this host's tests cannot import (CNTK: Python
3.6; Caffe2: torch 1.10.2), in the environment the local backend caches, and reading its result.

`framework_python(name)` is ROSETTA_<NAME>_PYTHON when set, else the local backend's cached cpu
environment (`python -m orchestrator run-matrix --backend local` builds it on first use); a test
skips when neither exists. `run_cell(..., steps=N)` runs the smoke cell with N training batches
instead of the smoke profile's 8 (the trace-once rule needs 20 or more), through
workloads/__main__.py as a backend would. `first_batch(...)` is that cell's first training batch, as
the harness draws it, and `cross_entropy` the mean loss a canonical-start framework must report on
it (its first_loss), so the same start is checked against numpy, not against another framework.
"""
import dataclasses
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from workloads.common import hyperparams
from workloads.common.harness import Run
from workloads.common.result import Cell

ROOT = Path(__file__).resolve().parent.parent

# Run inside the framework's Python: the smoke profile with `steps` training batches, then the cell as usual.
DRIVER = """
import dataclasses, os, sys
from workloads.common import hyperparams
smoke = hyperparams.settings
steps = int(os.environ["ROSETTA_TEST_TRAIN_BATCHES"])
hyperparams.settings = lambda workload, profile: dataclasses.replace(smoke(workload, profile), max_train_batches=steps)
import workloads.__main__ as cell
code = cell.main(sys.argv[1:])
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


def framework_python(framework: str) -> str:
    variable = "ROSETTA_{}_PYTHON".format(framework.upper().replace("-", "_"))
    if os.environ.get(variable):
        return os.environ[variable]
    from orchestrator import frameworks
    from orchestrator.backends.local import READY_MARKER, LocalBackend

    known = frameworks.discover()
    venv = LocalBackend(known).environment_dir(known[framework].variant("cpu"), framework)
    if not (venv / READY_MARKER).is_file():
        pytest.skip(f"no {framework} environment: set {variable}, or let `python -m orchestrator run-matrix "
                    f"--backend local --frameworks {framework}` build {venv}")
    return str(venv / "bin" / "python")


def run_cell(python: str, framework: str, workload: str, folder: Path, *args: str, steps: int = None,
             environment: dict = None, timeout: float = 1200) -> dict:
    """One smoke cell on synthetic data, on the CPU; returns its result document (status checked by the caller)."""
    out = Path(folder) / f"{framework}-{workload}-{'-'.join(a.strip('-') for a in args) or 'default'}.json"
    command = [python, "-c", DRIVER] if steps else [python, "-m", "workloads"]
    command += [workload, "--framework", framework, "--profile", "smoke", "--data", "synthetic", "--device", "cpu",
                "--out", str(out), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROSETTA_TEST_TRAIN_BATCHES=str(steps or 0), **(environment or {}))
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=folder)
    assert out.is_file(), completed.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["status"] == "ok", (result["status"], result.get("reason"), completed.stderr[-3000:])
    return result


def first_batch(framework: str, workload: str, steps: int, monkeypatch) -> tuple:
    """The first training batch of that cell (with `steps` training batches), drawn as the harness draws it."""
    smoke = hyperparams.settings
    monkeypatch.setattr(hyperparams, "settings", lambda w, p: dataclasses.replace(smoke(w, p), max_train_batches=steps))
    run = Run(Cell(framework, workload, profile="smoke", data="synthetic"), data_dir="/nonexistent")
    data = run.load_imdb() if workload == "gru" else run.load_cifar10()
    return next(iter(run.train_batches(data.x_train, data.y_train)))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy, in float64."""
    logits = logits - logits.max(axis=1, keepdims=True)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_softmax[np.arange(len(labels)), labels].mean())
