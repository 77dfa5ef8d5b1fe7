"""Probes of the PyTorch and Keras rows' fairness rules, run INSIDE a framework's cached environment.

    <venv>/bin/python tests/support/fairness_probes.py pytorch|keras-tf|keras-jax|keras-torch

prints one JSON object of facts, which tests/frameworks/test_pytorch_fairness.py and tests/frameworks/test_keras_units.py
check (they start this script with the framework's interpreter from the local backend's cache, and
skip where that environment has not been built). Everything runs on the CPU, on synthetic data,
with settings cut to a few small batches: the rules do not depend on sizes. Not a test module
itself (no test_ prefix): it needs the framework, which the host's interpreter lacks.
"""
import dataclasses
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workloads.common import canonical, naming  # noqa: E402

FRAMEWORK = sys.argv[1] if __name__ == "__main__" else ""

from workloads.common.harness import Run, Unsupported  # noqa: E402
from workloads.common.result import Cell  # noqa: E402

TRAIN_STEPS = 20  # the trace-once rule is checked over at least 20 steps
SMALL = dict(batch_size=16, max_eval_batches=1)


def make_run(workload: str, *, init: str = "canonical", options=None, mode: str = "", **settings) -> Run:
    cell = Cell(framework=FRAMEWORK, workload=workload, profile="smoke", data="synthetic", init=init,
                options=dict(options or {}), mode=mode)
    run = Run(cell, device="cpu")
    run.settings = dataclasses.replace(run.settings, **settings)
    return run


def summary(run: Run) -> dict:
    result = run.finish()
    return {"status": result.status, "reason": result.reason, "traces": result.samples.traces,
            "steps": sum(result.samples.epoch_steps), "first_loss": result.samples.first_loss,
            "epoch_losses": result.samples.epoch_losses, "extras": result.provenance.extras,
            "phases": sorted(result.phases)}


def precompiled_headers(result) -> dict:
    """Where inductor built its precompiled header (a .gch file in this process's own temporary
    folder) against the phases' wall-clock spans: the first compiled cell of the process builds it."""
    import glob
    import tempfile

    built = [os.path.getmtime(path) for path in
             glob.glob(os.path.join(tempfile.gettempdir(), "**", "*.gch"), recursive=True)]
    (start, end), = result.phase_spans.get("compiler_setup") or [(0.0, -1.0)]  # none: nothing was in it
    first_step = result.phase_spans["first_step"][0][0]
    return {"headers": len(built), "in_setup": sum(start <= when <= end for when in built),
            "before_the_first_step": sum(when < first_step for when in built)}


def max_relative(a, b) -> float:
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def built_model(module, runtime_module, workload: str, init: str, capture: str, **settings):
    """The model `module.run` builds (with --init ``init``), caught where run hands it to its runtime."""
    caught = {}

    def catch(run, policy, model, *rest):
        caught["model"] = model

    original = getattr(runtime_module, capture)
    setattr(runtime_module, capture, catch)
    try:
        run = make_run(workload, init=init, **settings)
        module.run(run)
    finally:
        setattr(runtime_module, capture, original)
    return caught["model"], run


# --- PyTorch -----------------------------------------------------------------------------------------

def pytorch_facts() -> dict:
    import numpy as np
    import torch

    from workloads.cnn import pytorch as cnn
    from workloads.gru import pytorch as gru
    from workloads.resnet50 import pytorch as resnet50
    from workloads.runtime import pytorch as runtime

    facts = {}
    # channels_last: the same outputs as NCHW (parity's own path), the model really in NHWC memory
    for workload, module in (("cnn", cnn), ("resnet50", resnet50)):
        params, batch = canonical.parameters(workload), canonical.parity_batch(workload)
        outputs = {}
        for value in ("off", "on"):
            run = make_run(workload, options={"channels_last": value} if value == "on" else {})
            outputs[value] = module.parity(run, params, batch)
            outputs[value + "_layout"] = run.result.provenance.extras["layout"]
        facts[f"{workload}_channels_last"] = {
            "layout_off": outputs["off_layout"], "layout_on": outputs["on_layout"],
            "max_relative": {name: max_relative(outputs["on"][name], outputs["off"][name]) for name in outputs["off"]},
        }
        model, run = built_model(module, runtime, workload, "canonical",
                                 "train_and_evaluate" if workload == "cnn" else "extract_features",
                                 options={"channels_last": "on"})
        convolutions = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        facts[f"{workload}_channels_last"]["conv_weights_nhwc"] = all(
            c.weight.is_contiguous(memory_format=torch.channels_last) for c in convolutions)
        policy = runtime.select_device(run)
        facts[f"{workload}_channels_last"]["batch_nhwc"] = policy.batch(
            batch["x"]).is_contiguous(memory_format=torch.channels_last)

    run = make_run("gru", options={"channels_last": "on"})
    try:
        runtime.select_device(run, convolutions=False)
        facts["gru_channels_last"] = {"refused": None}
    except Unsupported as reason:
        facts["gru_channels_last"] = {"refused": str(reason)}

    # the same start: run() loads the canonical weights (or keeps PyTorch's own with --init framework)
    for init in ("canonical", "framework"):
        model, run = built_model(cnn, runtime, "cnn", init, "train_and_evaluate")
        conv1 = model.layers[0].weight.detach().numpy()
        expected = canonical.parameters("cnn")["conv1.kernel"]
        facts[f"cnn_init_{init}"] = {"equals_canonical": bool(np.array_equal(conv1, expected)),
                                     "extra": run.result.provenance.extras.get("init")}

    # a short GRU run: what ran (kernel, optimizer), TF32 on the CPU
    run = make_run("gru", max_train_batches=2, sequence_length=20, **SMALL)
    gru.run(run)
    facts["gru_run"] = summary(run)
    # the compiled mode's GRU (runtime.StepCompiledGRU), the same short run
    run = make_run("gru", mode="compiled", max_train_batches=2, sequence_length=20, **SMALL)
    gru.run(run)
    facts["gru_compiled_run"] = summary(run)
    facts["compiled_setup"] = precompiled_headers(run.result)  # this process's first compiled cell
    run = make_run("cnn", max_train_batches=2, **SMALL)
    cnn.run(run)
    facts["cnn_run"] = summary(run)

    # StepCompiledGRU keeps nn.GRU's forward-hook contract: a returned value replaces the outputs
    facts["gru_forward_hook"] = {}
    for name, layer in (("eager", torch.nn.GRU(3, 4)), ("compiled", runtime.StepCompiledGRU(3, 4, "eager"))):
        handle = layer.register_forward_hook(lambda module, inputs, outputs: (outputs[0] * 0, outputs[1]))
        hooked = layer(torch.ones(5, 2, 3))[0]
        handle.remove()
        unhooked = layer(torch.ones(5, 2, 3))[0]
        facts["gru_forward_hook"][name] = {"replaced": bool(torch.all(hooked == 0)),
                                           "removed": bool(torch.any(unhooked != 0))}

    # the host copy: bf16 features reach numpy (which has no bfloat16) as float32
    facts["to_host_bf16"] = str(runtime.to_host(torch.ones(2, 3, dtype=torch.bfloat16)).dtype)
    return facts


# --- Keras ---------------------------------------------------------------------------------------------

def keras_facts() -> dict:
    import numpy as np

    from workloads.cnn import keras as cnn
    from workloads.gru import keras as gru
    from workloads.resnet50 import keras as resnet50
    from workloads.runtime import keras as runtime

    facts = {"backend": runtime.BACKEND}
    # the benchmark's own training path over TRAIN_STEPS steps: traces, what ran
    for workload, module, settings in (("cnn", cnn, {}), ("gru", gru, {"sequence_length": 20})):
        run = make_run(workload, max_train_batches=TRAIN_STEPS, **settings, **SMALL)
        compiles = None
        if runtime.BACKEND == "jax":
            from jax_compiles import timed_step_compiles  # this folder: the script's own

            compiles = timed_step_compiles(run)
        module.run(run)
        facts[f"{workload}_run"] = {**summary(run), "timed_step_compiles": None if compiles is None else len(compiles)}
    run = make_run("resnet50", batch_size=2, warmup_batches=2, batches=4)  # inference: predict_step
    resnet50.run(run)
    facts["resnet50_run"] = summary(run)

    # the same start
    for init in ("canonical", "framework"):
        model, run = built_model(cnn, runtime, "cnn", init, "train_and_evaluate")
        kernel = keras_numpy(model.get_layer("conv1").kernel)
        expected = canonical.oihw_to_hwio(canonical.parameters("cnn")["conv1.kernel"])
        facts[f"cnn_init_{init}"] = {"equals_canonical": bool(np.array_equal(kernel, expected)),
                                     "extra": run.result.provenance.extras.get("init")}

    # XLA: the compiled mode on TensorFlow, always on JAX, never on torch
    xla = {}
    for value in ("graph", "compiled") if FRAMEWORK == "keras-tf" else ("default",):
        run = make_run("cnn", mode="" if value == "default" else value)
        policy = runtime.select_device(run)
        model = cnn.compile_model(cnn.vgg_style_cnn(run.settings, policy.data_format), run.settings, policy)
        xla[value] = {"jit_compile": bool(model.jit_compile), "extra": run.result.provenance.extras["xla"]}
    facts["xla"] = xla

    facts["optimizers"] = optimizer_updates()
    if runtime.BACKEND == "torch":
        facts["torch_cudnn_fallback"] = torch_cudnn_fallback(runtime)
        facts["torch_compiled"] = torch_compiled(runtime)
    return facts


def keras_numpy(value):
    import keras
    return keras.ops.convert_to_numpy(value)


def optimizer_updates() -> dict:
    """runtime.sgd_momentum and runtime.adam applied for three steps to one variable, with gradients
    from 1e-9 to 1 (Adam's epsilon form shows on the small ones), and the weights they end at."""
    import keras
    import numpy as np

    from workloads.runtime import keras as runtime

    rng = np.random.default_rng(0)
    start = rng.normal(size=(6,)).astype(np.float32)
    scale = np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0], dtype=np.float32)
    gradients = [(rng.normal(size=(6,)) * scale).astype(np.float32) for _ in range(3)]
    out = {"start": start.tolist(), "gradients": [g.tolist() for g in gradients]}
    for name, optimizer in (("sgd", runtime.sgd_momentum(learning_rate=0.01, momentum=0.9)),
                            ("adam", runtime.adam(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8))):
        variable = keras.Variable(start.copy())
        optimizer.build([variable])
        for gradient in gradients:
            optimizer.apply([keras.ops.convert_to_tensor(gradient)], [variable])
        out[name] = {"weights": keras_numpy(variable).tolist(), "description": runtime.describe_optimizer(optimizer)}
    if runtime.BACKEND == "tensorflow":  # an embedding's gradient: IndexedSlices, a token repeated
        import tensorflow as tf
        table = keras.Variable(start.reshape(3, 2).copy())
        optimizer = runtime.adam(learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8)
        optimizer.build([table])
        slices = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1, 1]), tf.constant([3, 2]))
        optimizer.apply([slices], [table])
        out["adam_indexed_slices"] = keras_numpy(table).tolist()
    return out


def torch_cudnn_fallback(runtime) -> dict:
    """Keras' torch gru falls back to its Python loop when its cuDNN call raises: the watch must say
    so. No GPU here, so the cuDNN call is made to raise by hand, as Keras' gru would see it."""
    import importlib

    import keras
    import torch

    rnn = importlib.import_module("keras.src.backend.torch.rnn")  # the module (its package exports a function rnn)

    run = make_run("gru")
    runtime.watch_gru_kernel(run)
    inputs = torch.zeros(2, 5, 3)
    try:
        rnn._cudnn_gru(inputs, torch.zeros(2, 4), None, None, None, return_sequences=False, device=inputs.device)
    except Exception:  # noqa: BLE001 - raising is the point
        pass
    kernel, recurrent = torch.zeros(3, 12), torch.zeros(4, 12)
    rnn._fallback_gru(inputs, torch.zeros(2, 4), kernel, recurrent, torch.zeros(2, 12), keras.activations.tanh,
                      keras.activations.sigmoid, False)
    return {"gru_kernel": run.result.provenance.extras.get("gru_kernel")}


def torch_compiled(runtime) -> dict:
    """The compiled mode on torch (jit_compile=True: torch.compile) through the runtime's own training
    loop, on a small model (CIFAR batches, flattened into one dense layer: seconds to compile) in
    both modes from the same start, TRAIN_STEPS steps and an evaluation; and the GRU's refusal."""
    import keras

    found = {}
    for mode in ("eager", "compiled"):
        run = make_run("cnn", mode=mode, max_train_batches=TRAIN_STEPS, **SMALL)
        policy = runtime.select_device(run)  # seeds Keras: the same start in both modes
        images = keras.Input(shape=run.settings.image_shape)
        model = keras.Model(images, keras.layers.Dense(run.settings.classes)(keras.layers.Flatten()(images)))
        model.compile(optimizer=runtime.sgd_momentum(learning_rate=0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=policy.jit_compile)
        runtime.train_and_evaluate(run, policy, model, run.load_cifar10())
        found[mode] = summary(run)
    try:
        runtime.select_device(make_run("gru", mode="compiled"), recurrent=True)
        found["gru"] = None
    except Unsupported as reason:
        found["gru"] = str(reason)
    return found


# --- on the host: run this file in a framework's cached environment -----------------------------------

_FACTS = {}


def facts(framework: str, timeout: float = 1200) -> dict:
    """This file's facts for ``framework``, from its cached CPU environment (built by the local
    backend on first use: `python -m orchestrator run-matrix --backend local ...`); the calling test
    skips where it has not been built. Run once per test session and framework."""
    import subprocess
    import tempfile

    if framework not in _FACTS:
        from support.framework_cells import framework_python

        python = framework_python(framework)  # the cached environment, or the test skips
        with tempfile.TemporaryDirectory(prefix="rosetta-probe-") as scratch:  # as a backend gives a cell
            environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": scratch}
            completed = subprocess.run([python, __file__, framework], capture_output=True, text=True,
                                       timeout=timeout, env=environment, check=False)
        lines = [line for line in completed.stdout.splitlines() if line.startswith("FACTS ")]
        assert completed.returncode == 0 and lines, f"the {framework} probe failed:\n{completed.stderr[-4000:]}"
        _FACTS[framework] = json.loads(lines[-1][len("FACTS "):])
    return _FACTS[framework]


if __name__ == "__main__":
    os.environ.update(naming.environment(FRAMEWORK))  # KERAS_BACKEND, before any Keras import
    os.environ.update(naming.precision_environment("fp32"))
    found = pytorch_facts() if FRAMEWORK == "pytorch" else keras_facts()
    print("FACTS " + json.dumps(found, default=str))
