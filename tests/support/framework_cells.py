"""Run real cells of a framework from the host's tests, in that framework's own environment.

A framework is importable only in its own virtual environment (the local backend's cache,
~/.cache/rosetta-bench/venvs/<framework>-cpu-<digest>, or the interpreter named by
ROSETTA_<FRAMEWORK>_PYTHON), built on first use by ``framework_python``. ``run_cell`` runs
``python -m workloads`` there through a small driver that can override the workload's settings
(e.g. 20 training batches, or no dropout) and count calls to framework functions, and returns the
result document. The first-batch helpers rebuild, in the host, the exact batch the harness feeds
every framework first (same-data-feed), so a test can hold a framework's first loss to numpy's.
"""
import dataclasses
import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs inside the framework's environment: argv = overrides (JSON), counted functions (JSON list of
# "module:attribute"), the counts file, then python -m workloads' own arguments.
_DRIVER = r"""
import dataclasses, functools, importlib, json, sys
overrides, counted, counts_path = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
from workloads.common import hyperparams
settings = hyperparams.settings
hyperparams.settings = lambda workload, profile: dataclasses.replace(settings(workload, profile), **overrides)
counts = {}
for target in counted:
    module_name, attribute = target.split(":")
    module = importlib.import_module(module_name)
    function = getattr(module, attribute)
    def counting(*args, _function=function, _target=target, **kwargs):
        counts[_target] = counts.get(_target, 0) + 1
        return _function(*args, **kwargs)
    setattr(module, attribute, counting)
    counts[target] = 0
from workloads.__main__ import main
code = main(sys.argv[4:])
with open(counts_path, "w") as stream:
    json.dump(counts, stream)
sys.stdout.flush()
sys.stderr.flush()
import os
os._exit(code)  # as python -m workloads does: no framework teardown (CNTK's can hang)
"""


def framework_python(framework: str) -> str:
    """The interpreter of `framework`'s CPU environment: ROSETTA_<FRAMEWORK>_PYTHON, else the local
    backend's, built on first use and then shared by every test of the session (and by the
    run-matrix commands the end-to-end tests run: the same cache), whatever order pytest picks.
    Skips (which CI turns into a failure, tests/ci-skips.toml) only where it cannot be built here."""
    variable = "ROSETTA_{}_PYTHON".format(framework.upper().replace("-", "_"))
    if os.environ.get(variable):
        return os.environ[variable]
    python, problem = _built_environment(framework)
    if problem:
        pytest.skip(f"no {framework} environment: {problem}")
    return python


@functools.lru_cache(maxsize=None)
def _built_environment(framework: str) -> Tuple[str, str]:
    """(interpreter, "") once built; ("", why) when this host cannot build it. Built once per session."""
    from orchestrator import frameworks
    from orchestrator.backends.local import EnvironmentBuildError, LocalBackend

    known = frameworks.discover()
    backend = LocalBackend(known, log=lambda line: None)
    variant = known[framework].variant("cpu")
    problem = backend.python_mismatch(variant)
    if problem:
        return "", problem
    try:
        return backend.interpreter(framework, "cpu"), ""
    except EnvironmentBuildError as error:
        return "", str(error)


def run_cell(python: str, workload: str, framework: str, folder: Path, *, overrides: Optional[dict] = None,
             count: Iterable[str] = (), arguments: Iterable[str] = (), env: Optional[Dict[str, str]] = None,
             timeout: float = 600) -> Tuple[dict, dict, str]:
    """Run one smoke cell on synthetic data on the CPU; return (result, call counts, stdout)."""
    folder.mkdir(parents=True, exist_ok=True)
    out, counts = folder / f"{framework}-{workload}.json", folder / f"{framework}-{workload}.counts.json"
    command = [python, "-c", _DRIVER, json.dumps(overrides or {}), json.dumps(list(count)), str(counts),
               workload, "--framework", framework, "--profile", "smoke", "--data", "synthetic", "--device", "cpu",
               "--out", str(out), *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, env=_environment(env), timeout=timeout,
                               cwd=ROOT)
    assert out.exists(), completed.stderr[-3000:]
    result = json.loads(out.read_text())
    assert completed.returncode == 0, (result.get("reason"), completed.stderr[-3000:])
    return result, json.loads(counts.read_text()), completed.stdout


def _environment(env: Optional[Dict[str, str]]) -> Dict[str, str]:
    """This process's environment without NVIDIA_TF32_OVERRIDE (a cell sets what its precision needs
    itself), the repository importable, then `env`."""
    environment = {name: value for name, value in os.environ.items() if name != "NVIDIA_TF32_OVERRIDE"}
    environment.update(PYTHONPATH=str(ROOT), **(env or {}))
    return environment


def run_snippet(python: str, code: str, env: Optional[Dict[str, str]] = None, timeout: float = 300) -> str:
    """Run `code` in the framework's interpreter (the repository importable); return its stdout."""
    completed = subprocess.run([python, "-c", code], capture_output=True, text=True, env=_environment(env),
                               timeout=timeout, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


# Before a script run_script runs: `cell_run(workload, ...)` makes the framework's smoke cell on
# synthetic data, on the CPU, with settings overridden; `say(value)` hands a JSON value back.
_SCRIPT_PRELUDE = """
import dataclasses, importlib, json
import numpy as np
from workloads.common import canonical
from workloads.common.harness import Run, Unsupported
from workloads.common.result import Cell

def cell_run(workload, init="canonical", options=None, mode="", **settings):
    run = Run(Cell(FRAMEWORK, workload, profile="smoke", data="synthetic", init=init, options=options or {},
                   mode=mode), device="cpu")
    run.settings = dataclasses.replace(run.settings, **settings)
    return run

def say(value):
    print("RESULT " + json.dumps(value), flush=True)
"""


def run_script(framework: str, script: str, env: Optional[Dict[str, str]] = None,
               timeout: float = 900) -> Tuple[object, str]:
    """Run `script` (after the prelude above) in `framework`'s environment, from a file in a folder
    of its own that is also its working folder (MindSpore's jit reads its functions' source; a failed
    compilation leaves files in the working folder); return (the value it said once, its stdout)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "check.py"
        path.write_text(f"FRAMEWORK = {framework!r}\n" + _SCRIPT_PRELUDE + script)
        completed = subprocess.run([framework_python(framework), str(path)], cwd=folder, capture_output=True,
                                   text=True, timeout=timeout, env=_environment(env))
    assert completed.returncode == 0, completed.stderr[-3000:]
    [line] = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), completed.stdout


def first_batch(workload: str, overrides: Optional[dict] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The first training batch the harness feeds every framework's smoke cell on synthetic data
    (same-data-feed: the framework plays no part in it)."""
    from workloads.common import hyperparams
    from workloads.common.harness import Run
    from workloads.common.result import Cell

    run = Run(Cell(framework="pytorch", workload=workload, profile="smoke", data="synthetic"))
    run.settings = dataclasses.replace(run.settings, **(overrides or {}))
    assert workload in hyperparams.WORKLOADS
    data = run.load_cifar10() if workload == "cnn" else run.load_imdb()
    return next(iter(run.train_batches(data.x_train, data.y_train)))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The mean softmax cross-entropy, in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probabilities[np.arange(len(labels)), labels].mean())


def expected_first_loss(workload: str, overrides: Optional[dict] = None) -> float:
    """numpy's loss on the canonical weights for the first batch (the model without dropout); the
    batch does not depend on the framework, so it is computed once per workload and overrides."""
    return _expected_first_loss(workload, json.dumps(overrides or {}, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _expected_first_loss(workload: str, overrides: str) -> float:
    from support import numpy_reference
    from workloads.common import canonical

    x, y = first_batch(workload, json.loads(overrides))
    params = canonical.parameters(workload)
    logits = numpy_reference.cnn_logits(params, x) if workload == "cnn" else numpy_reference.gru_logits(params, x)
    return cross_entropy(logits, np.asarray(y, dtype=np.int64))


def assert_init_framework_keeps_its_initialisers(framework: str, folder: Path, overrides: dict) -> None:
    """`--init framework` on the GRU: an ok cell that records it, whose first loss is not the
    canonical start's (the framework's own initialisers ran, not the canonical weights)."""
    result, _, _ = run_cell(framework_python(framework), "gru", framework, folder, overrides=overrides,
                            arguments=["--init", "framework"])
    assert result["status"] == "ok" and result["provenance"]["extras"]["init"] == "framework"
    assert result["samples"]["first_loss"] != pytest.approx(expected_first_loss("gru", overrides), rel=1e-3)


RUNTIME_LOOPS = ("select_device", "train_and_evaluate", "parity_steps", "extract_features", "parity_features")


def assert_workload_files_keep_the_model(workload_modules: dict, runtime, loops=RUNTIME_LOOPS) -> None:
    """Each workload file (imported without its framework) has the sections every file has and its
    matched facts, and leaves the loops to its runtime, which has them (the harness owns the loops)."""
    for function in loops:
        assert callable(getattr(runtime, function)), function
    for name, module in workload_modules.items():
        assert module.MATCHED and all(isinstance(line, str) and line for line in module.MATCHED), name
        for function in ("run", "parity", "load_canonical", "canonical_arrays"):
            assert callable(getattr(module, function)), (name, function)
        assert module.runtime is runtime and not hasattr(module, "env"), name
