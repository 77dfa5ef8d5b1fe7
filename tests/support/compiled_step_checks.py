"""Checks that need a compiled-step framework itself (TensorFlow, JAX), run INSIDE its environment.

The unit tests (tests/frameworks/test_tensorflow_units.py, tests/frameworks/test_jax_units.py) run this file with the
framework's cached interpreter, one process per framework so its import is paid once:

    PYTHONPATH=<repo> <framework python> tests/support/compiled_step_checks.py <framework> <check> [<check> ...]

and read the one JSON object it prints last: ``{check: what it found}``. Each check runs real cells
through the real harness (workloads.common.harness.Run), on the CPU, and reports what the result
recorded; the assertions live in the tests.
"""
import dataclasses
import importlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workloads.common import naming  # noqa: E402
from workloads.common.harness import Run  # noqa: E402
from workloads.common.result import Cell  # noqa: E402

TRAIN_STEPS = 20  # the trace-once rule: at least 20 steps of the one compiled training step
EVAL_BATCHES = 3
SHORT_LAST_BATCH = 5  # the test set's last batch is this many samples short: a second shape, unless padded
BATCH_SIZE = 16  # any one shape shows a retrace; a smaller batch only makes the steps cheaper


def _module(framework: str, workload: str):
    return importlib.import_module(f"workloads.{workload}.{naming.module_name(framework)}")


def _summary(run: Run) -> dict:
    result = run.finish()
    return {"status": result.status, "reason": result.reason, "traces": dict(result.samples.traces),
            "epoch_steps": list(result.samples.epoch_steps), "first_loss": result.samples.first_loss,
            "epoch_losses": list(result.samples.epoch_losses), "accuracy": result.metrics.test_accuracy,
            "extras": {key: value for key, value in result.provenance.extras.items() if key != "matched"}}


def training(framework: str, workload: str, options: dict, init: str = "canonical", mode: str = "") -> dict:
    """A smoke cell raised to TRAIN_STEPS steps, its test set ending in a partial batch."""
    run = Run(Cell(framework, workload, profile="smoke", data="synthetic", init=init, options=options, mode=mode),
              device="cpu")
    run.settings = dataclasses.replace(run.settings, max_train_batches=TRAIN_STEPS, max_eval_batches=EVAL_BATCHES,
                                       batch_size=BATCH_SIZE)
    loader_name = "load_cifar10" if workload == "cnn" else "load_imdb"
    load = getattr(run, loader_name)

    def load_with_a_partial_last_batch():
        data = load()
        keep = len(data.y_test) - SHORT_LAST_BATCH
        return dataclasses.replace(data, x_test=data.x_test[:keep], y_test=data.y_test[:keep])

    setattr(run, loader_name, load_with_a_partial_last_batch)
    compiles = None
    if framework == "jax":
        from jax_compiles import timed_step_compiles  # this folder: the script's own

        compiles = timed_step_compiles(run)
    _module(framework, workload).run(run)
    summary = _summary(run)
    summary["timed_step_compiles"] = None if compiles is None else len(compiles)
    summary["test_batches"] = -(-(EVAL_BATCHES * run.settings.batch_size - SHORT_LAST_BATCH) // run.settings.batch_size)
    return summary


def first_loss(framework: str, init: str) -> dict:
    """The GRU smoke cell as the benchmark runs it (no dropout in the model: its first loss is
    determined by the starting weights and the first batch)."""
    run = Run(Cell(framework, "gru", profile="smoke", data="synthetic", init=init), device="cpu")
    _module(framework, "gru").run(run)
    return _summary(run)


def inference(framework: str, options: dict, mode: str = "") -> dict:
    """The runtime's inference loop on a tiny model (4 warm and timed batches of 4 images)."""
    import numpy as np

    run = Run(Cell(framework, "resnet50", profile="smoke", data="synthetic", options=options, mode=mode),
              device="cpu")
    run.settings = dataclasses.replace(run.settings, batch_size=4, feature_size=8, batches=4, warmup_batches=2)
    images = np.random.default_rng(0).normal(size=(16, 3, 8, 8)).astype(np.float32)
    if framework == "tensorflow":
        import tensorflow as tf
        from workloads.runtime import tensorflow as runtime

        policy = runtime.select_device(run)

        class Tiny(tf.Module):
            def __init__(self):
                super().__init__()
                self.kernel = tf.Variable(tf.random.normal((3, 8)))

            def __call__(self, x):
                return tf.matmul(tf.reduce_mean(x, axis=[2, 3]), self.kernel)

        runtime.extract_features(run, policy, Tiny(), images)
    else:
        import flax.linen as nn
        import jax
        from workloads.runtime import jax as runtime

        policy = runtime.select_device(run)

        class Tiny(nn.Module):
            @nn.compact
            def __call__(self, x):
                return nn.Dense(8)(x.mean(axis=(2, 3)))

        model = Tiny()
        variables = {"params": model.init(jax.random.key(0), images[:4])["params"]}
        runtime.extract_features(run, policy, model, variables, images)
    summary = _summary(run)
    summary["timed_batches"] = len(run.result.samples.batch_times_s)
    return summary


def initial_variables(framework: str) -> dict:
    """Each JAX workload's model as its build_model makes it, from the canonical weights and with
    --init framework: its variables' kinds ("array", or "shape" for a value never computed) and shapes."""
    import jax

    found = {}
    for workload in ("cnn", "gru", "resnet50"):
        implementation = _module(framework, workload).IMPLEMENTATION
        for init in ("canonical", "framework"):
            run = Run(Cell(framework, workload, profile="smoke", data="synthetic", init=init), device="cpu")
            leaves = jax.tree_util.tree_leaves(implementation.build_model(run, implementation.device_policy(run)).params)
            found[f"{workload}:{init}"] = {
                "shapes": [list(leaf.shape) for leaf in leaves],
                "kinds": sorted({"array" if isinstance(leaf, jax.Array) else "shape" for leaf in leaves})}
    return found


def tensorflow_optimizers() -> dict:
    """The workload files' fused optimizers, one variable, tiny gradients (where epsilon's place
    matters), against PyTorch's update written out in float64."""
    import numpy as np
    import tensorflow as tf

    from workloads.cnn import tensorflow as cnn
    from workloads.common import hyperparams
    from workloads.gru import tensorflow as gru

    rng = np.random.default_rng(0)
    start = rng.normal(size=6).astype(np.float32)
    gradients = (rng.normal(size=(3, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])).astype(np.float32)
    found = {}

    s = hyperparams.settings("gru", "full")
    variable = tf.Variable(start)
    adam = gru.Adam([variable], s)
    step = tf.function(lambda g: adam.apply([g], [variable]))
    w, m, v = start.astype(np.float64), np.zeros(6), np.zeros(6)
    for t, g in enumerate(gradients.astype(np.float64), start=1):
        step(tf.constant(g, tf.float32))
        m, v = s.beta1 * m + (1 - s.beta1) * g, s.beta2 * v + (1 - s.beta2) * g * g  # torch.optim.Adam
        w = w - s.learning_rate / (1 - s.beta1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - s.beta2 ** t) + s.epsilon)
    found["adam"] = {"tensorflow": variable.numpy().tolist(), "pytorch_form": w.tolist(),
                     "start": start.tolist(), "description": adam.description}

    s = hyperparams.settings("cnn", "full")
    variable = tf.Variable(start)
    sgd = cnn.SGDMomentum([variable], s.learning_rate, s.momentum)
    step = tf.function(lambda g: sgd.apply([g], [variable]))
    w, velocity = start.astype(np.float64), np.zeros(6)
    for g in gradients.astype(np.float64):
        step(tf.constant(g, tf.float32))
        velocity = s.momentum * velocity + g  # torch.optim.SGD(momentum), dampening 0
        w = w - s.learning_rate * velocity
    found["momentum"] = {"tensorflow": variable.numpy().tolist(), "pytorch_form": w.tolist(),
                         "start": start.tolist(), "description": sgd.description}
    return found


# --- the host side: what the unit tests call ------------------------------------------------------

def assert_each_step_traced_once(found: dict) -> None:
    """A training check's findings: an ok cell whose train step, and evaluation step over a test set
    ending in a partial batch (padded to the one shape, so no second trace), each traced once."""
    assert found["status"] == "ok", found["reason"]
    assert found["epoch_steps"] == [TRAIN_STEPS] and TRAIN_STEPS >= 20
    assert found["test_batches"] == 3  # 3 batches, the last one short: a second shape unless padded
    assert found["traces"] == {"train_step": 1, "eval_step": 1}
    assert 0.0 <= found["accuracy"] <= 1.0 and found["epoch_losses"][-1] < 2 * found["first_loss"]


def run_checks(framework: str, checks, environment=None) -> dict:
    """Run ``checks`` in ``framework``'s cached CPU environment (built on first use); their report."""
    import subprocess

    from support.framework_cells import framework_python

    python = framework_python(framework)  # the cached environment, or the test skips
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(environment or {}))
    completed = subprocess.run([python, str(Path(__file__).resolve()), framework, *checks], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=1800)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main(argv) -> None:
    framework, checks = argv[0], argv[1:]
    os.environ.update(naming.environment(framework))
    os.environ.update(naming.precision_environment("fp32"))
    report = {}
    for check in checks:
        name, _, argument = check.partition(":")  # e.g. "training:cnn:mode=compiled", "inference:mode=compiled"
        workload, _, option = argument.partition(":")
        options = dict([option.split("=", 1)]) if option else {}
        if name == "training":
            report[check] = training(framework, workload, options, mode=options.pop("mode", ""))
        elif name == "first_loss":
            report[check] = first_loss(framework, argument)
        elif name == "inference":
            options = dict([argument.split("=", 1)]) if argument else {}
            report[check] = inference(framework, options, mode=options.pop("mode", ""))
        elif name == "initial_variables":
            report[check] = initial_variables(framework)
        elif name == "optimizers":
            report[check] = tensorflow_optimizers()
        else:
            raise SystemExit(f"unknown check {check!r}")
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
