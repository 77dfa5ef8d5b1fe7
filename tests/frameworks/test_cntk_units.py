"""The CNTK and Keras-on-CNTK rows (Python 3.6 only), checked from this host's Python without CNTK.

CNTK 2.7 has wheels for Python <= 3.6, so the host's tests cannot import it. What they can check:
- every cntk / keras-cntk module imports over stand-in `cntk` and `keras` modules that refuse any
  use, so nothing touches the framework at import time and everything the tests call is numpy;
- the layout conversions (canonical_arrays, pack_cudnn_gru) against numpy definitions of what CNTK,
  cuDNN and Keras 2.2 compute (written out here from their documented formulas);
- what the runtimes detect and count (the GRU kernel, Keras' function builds, the host copy of the
  features) on stand-ins;
- the files those images hold parse as Python 3.6.
With the local backend's cached Python 3.6 environments (or ROSETTA_CNTK_PYTHON /
ROSETTA_KERAS_CNTK_PYTHON) and a host OpenMPI runtime (linked under CNTK's names here, as
images/cntk/openmpi-compat.sh does), real cells check the same start, the trace count over 20 steps
and what each result records (tests/support/framework_cells.py); the last test runs the parity check.
"""
import ast
import os
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

from support.framework_cells import assert_workload_files_keep_the_model, cross_entropy, first_batch, framework_python, run_cell
from support.numpy_reference import assert_training_parity_in, cnn_logits, gru_logits, sigmoid
from support.stand_ins import Refuses, imported_over
from workloads.common import canonical, hyperparams
from workloads.common.harness import Run
from workloads.common.result import Cell

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)
MODULES = [f"workloads.{w}.{m}" for m in ("cntk", "keras_cntk") for w in ("cnn", "resnet50", "gru")]


# --- importing without the framework --------------------------------------------------------------

@pytest.fixture(scope="module")
def modules():
    """The six workload modules and two runtimes, imported over stand-ins for cntk and keras.

    Keras 2.2's Adam is subclassed at import (gru/keras_cntk.py), so the keras stand-in offers that
    one class; everything else in both stand-ins refuses to be used."""
    keras = Refuses("keras")
    keras.layers, keras.backend = Refuses("keras.layers"), Refuses("keras.backend")
    keras.optimizers = types.SimpleNamespace(Adam=type("Adam", (), {}))
    stand_ins = {"cntk": Refuses("cntk"), "keras": keras, "keras.layers": keras.layers,
                 "keras.backend": keras.backend}
    names = MODULES + ["workloads.runtime.cntk", "workloads.runtime.keras_cntk"]
    with imported_over(stand_ins, names) as imported:
        yield imported


def test_cntk_workloads_keep_the_model_and_call_their_loops_in_the_runtime(modules):
    """The loops are written once, in workloads/runtime/cntk.py; the workload files keep the model."""
    runtime = modules["workloads.runtime.cntk"]
    assert_workload_files_keep_the_model({name: modules[name] for name in MODULES[:3]}, runtime)
    assert_workload_files_keep_the_model({name: modules[name] for name in MODULES[3:]},
                                         modules["workloads.runtime.keras_cntk"], loops=())
    for workload in ("cnn", "gru", "resnet50"):
        module = modules[f"workloads.{workload}.cntk"]
        assert not hasattr(module, "make_trainer"), workload


# --- CNTK's layouts ---------------------------------------------------------------------------------

def cudnn_gru_step(x, h, packed, inputs, hidden):
    """cuDNN's GRU (CUDNN_GRU) read straight from its packed buffer: matrices W_r, W_z, W_n (hidden x
    inputs), R_r, R_z, R_n (hidden x hidden), then biases b_W r, z, n and b_R r, z, n.
        r = sigma(W_r x + b_Wr + R_r h + b_Rr);  z likewise;
        n = tanh(W_n x + b_Wn + r * (R_n h + b_Rn));  h' = (1 - z) n + z h"""
    flat = packed.ravel()
    offset = 0

    def take(rows, columns):
        nonlocal offset
        block = flat[offset:offset + rows * columns].reshape(rows, columns)
        offset += rows * columns
        return block

    W = [take(hidden, inputs) for _ in range(3)]
    R = [take(hidden, hidden) for _ in range(3)]
    bW = [take(1, hidden)[0] for _ in range(3)]
    bR = [take(1, hidden)[0] for _ in range(3)]
    assert offset == flat.size
    r = sigmoid(x @ W[0].T + bW[0] + h @ R[0].T + bR[0])
    z = sigmoid(x @ W[1].T + bW[1] + h @ R[1].T + bR[1])
    n = np.tanh(x @ W[2].T + bW[2] + r * (h @ R[2].T + bR[2]))
    return (1 - z) * n + z * h


def test_pack_cudnn_gru_round_trips_and_has_the_size_cntk_infers(modules):
    runtime = modules["workloads.runtime.cntk"]
    s = hyperparams.settings("gru", "full")
    params = canonical.parameters("gru")
    names = ("gru.kernel", "gru.recurrent_kernel", "gru.input_bias", "gru.recurrent_bias")
    packed = runtime.pack_cudnn_gru(*(params[n] for n in names))
    # optimized_rnnstack's weight, as CNTK infers it for input 125 / hidden 100: (681, 100)
    assert packed.shape == (runtime.cudnn_gru_size(s.embedding_size, s.hidden_size) // s.hidden_size, s.hidden_size)
    assert packed.shape == (681, 100) and packed.dtype == np.float32
    for got, name in zip(runtime.unpack_cudnn_gru(packed, s.embedding_size, s.hidden_size), names):
        np.testing.assert_array_equal(got, params[name])


def test_a_gru_run_on_the_packed_buffer_gives_the_canonical_logits(modules):
    runtime = modules["workloads.runtime.cntk"]
    params, batch = canonical.parameters("gru"), canonical.parity_batch("gru")
    inputs, hidden = params["gru.kernel"].shape[0], params["gru.recurrent_kernel"].shape[0]
    packed = modules["workloads.gru.cntk"].canonical_arrays(params, fused=True)["gru.packed"]
    embedded = params["embedding.embeddings"][batch["x"]].astype(np.float64)
    h = np.zeros((len(batch["x"]), hidden))
    for step in range(batch["x"].shape[1]):
        h = cudnn_gru_step(embedded[:, step], h, packed.astype(np.float64), inputs, hidden)
    logits = h @ params["dense.kernel"] + params["dense.bias"]
    expected = gru_logits(params, batch["x"])
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)
    # the gate order matters: swapping r and z in the buffer gives another model
    kernel = canonical.gru_gates_rzn_to_zrn(params["gru.kernel"])
    wrong = runtime.pack_cudnn_gru(kernel, params["gru.recurrent_kernel"], params["gru.input_bias"],
                                   params["gru.recurrent_bias"])
    h_wrong = cudnn_gru_step(embedded[:, 0], np.zeros_like(h), wrong.astype(np.float64), inputs, hidden)
    h_right = cudnn_gru_step(embedded[:, 0], np.zeros_like(h), packed.astype(np.float64), inputs, hidden)
    assert not np.allclose(h_wrong, h_right, atol=1e-4)


def test_cntk_cpu_gru_keeps_the_canonical_arrays(modules):
    params = canonical.parameters("gru")
    arrays = modules["workloads.gru.cntk"].canonical_arrays(params, fused=False)
    assert set(arrays) == set(params)
    for name, value in arrays.items():
        np.testing.assert_array_equal(value, params[name])
    assert canonical.parameter_count(arrays) == hyperparams.settings("gru", "full").parameter_count


def test_cntk_cnn_layouts_compute_the_canonical_logits(modules):
    """CNTK: kernels (out, in, h, w) = OIHW, conv biases (out, 1, 1), dense (in, out), NCHW flatten."""
    params, batch = canonical.parameters("cnn"), canonical.parity_batch("cnn")
    arrays = modules["workloads.cnn.cntk"].canonical_arrays(params)
    assert arrays["conv1.b"].shape == (50, 1, 1) and arrays["conv1.W"].shape == (50, 3, 3, 3)
    assert arrays["dense1.W"].shape == (6400, 512)
    as_canonical = {}
    for key, value in arrays.items():
        layer, weight = key.split(".")
        as_canonical[layer + (".kernel" if weight == "W" else ".bias")] = value.reshape(-1) if weight == "b" else value
    np.testing.assert_allclose(cnn_logits(as_canonical, batch["x"]), cnn_logits(params, batch["x"]), rtol=1e-6)
    assert canonical.parameter_count(arrays) == hyperparams.settings("cnn", "full").parameter_count


@pytest.mark.parametrize("module", ["workloads.resnet50.cntk", "workloads.resnet50.keras_cntk"])
def test_resnet50_maps_every_canonical_array(modules, module):
    params = canonical.parameters("resnet50")
    arrays = modules[module].canonical_arrays(params)
    if module.endswith(".cntk"):  # "<layer>.<CNTK attribute>", arrays as they are
        attributes = {key.rpartition(".")[2] for key in arrays}
        assert attributes == {"W", "scale", "bias", "aggregate_mean", "aggregate_variance"}
        assert sum(a.size for a in arrays.values()) == sum(a.size for a in params.values())
        assert arrays["stem.conv.W"] is params["stem.conv.kernel"]  # OIHW, CNTK's own layout
    else:  # Keras layer names, kernels HWIO, batch norm's four arrays in Keras' order
        assert sum(a.size for weights in arrays.values() for a in weights) == sum(a.size for a in params.values())
        np.testing.assert_array_equal(arrays["stem_conv"][0], canonical.oihw_to_hwio(params["stem.conv.kernel"]))
        np.testing.assert_array_equal(arrays["stage1_block0_shortcut_bn"][3],
                                      params["stage1.block0.shortcut.bn.moving_variance"])
        assert len(arrays) == 53 + 53  # 53 convolutions, 53 batch norms


# --- Keras 2.2's layouts ------------------------------------------------------------------------------

def test_keras2_flatten_of_channels_first_maps_needs_permuted_dense_rows(modules):
    """keras/layers/core.py (2.2.5) Flatten.call: channels_first maps are permuted to channels_last,
    then flattened; dense1's canonical (C, H, W) rows are permuted to match."""
    params = canonical.parameters("cnn")
    arrays = modules["workloads.cnn.keras_cntk"].canonical_arrays(params)
    maps = RNG.normal(size=(2, 100, 8, 8))
    keras_flatten = maps.transpose(0, 2, 3, 1).reshape(2, -1)
    expected = maps.reshape(2, -1) @ params["dense1.kernel"]
    np.testing.assert_allclose(keras_flatten @ arrays["dense1"][0], expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(keras_flatten @ params["dense1.kernel"], expected, atol=1e-3)
    np.testing.assert_array_equal(arrays["conv2"][0], canonical.oihw_to_hwio(params["conv2.kernel"]))


def test_keras2_gru_weights_give_the_canonical_step(modules):
    """keras/layers/recurrent.py (2.2.5) GRUCell.call, reset_after=True, sigmoid gates: kernel columns
    z, r, h; bias row 0 for the input, row 1 for the recurrent projection."""
    params = canonical.parameters("gru")
    kernel, recurrent_kernel, bias = modules["workloads.gru.keras_cntk"].canonical_arrays(params)["gru"]
    assert bias.shape == (2, 300)
    x, h = RNG.normal(size=(3, 125)), RNG.normal(size=(3, 100))
    x_z, x_r, x_h = np.split(x @ kernel + bias[0], 3, axis=-1)
    h_z, h_r, h_h = np.split(h @ recurrent_kernel + bias[1], 3, axis=-1)
    z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
    keras_h = z * h + (1 - z) * np.tanh(x_h + r * h_h)
    xr, xz, xn = np.split(x @ params["gru.kernel"] + params["gru.input_bias"], 3, axis=-1)
    hr, hz, hn = np.split(h @ params["gru.recurrent_kernel"] + params["gru.recurrent_bias"], 3, axis=-1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    canonical_h = (1 - z) * np.tanh(xn + r * hn) + z * h
    np.testing.assert_allclose(keras_h, canonical_h, rtol=1e-6, atol=1e-6)


# --- optimizers, as the workload files write them ---------------------------------------------------

def test_dividing_the_summed_gradient_by_the_batch_gives_pytorchs_adam():
    """C.universal hands the update the gradient summed over the batch: Adam is blind to the scale
    except through epsilon, which the parity run caught (3.9e-5 before the division, 6.8e-6 after)."""
    lr, b1, b2, eps, batch = 1e-3, 0.9, 0.999, 1e-8, 8
    mean = RNG.normal(size=(2, 5)) * np.array([1e-10, 1e-9, 1e-8, 1e-6, 1.0])

    def adam(gradients):
        w, m, v = np.zeros(5), np.zeros(5), np.zeros(5)
        for t, g in enumerate(gradients, start=1):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            w = w - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        return w

    np.testing.assert_allclose(adam((mean * batch) / batch), adam(mean), rtol=1e-12)
    assert not np.allclose(adam(mean * batch), adam(mean), rtol=1e-3)  # undivided: epsilon 8x too small


def test_cntk_plain_momentum_is_pytorchs():
    """momentum_sgd(unit_gain=False): v = m*v + lr*g, w -= v; unit gain would use (1 - m)*lr*g."""
    lr, momentum = 0.01, 0.9
    gradients = RNG.normal(size=(6, 4))
    w_cntk = w_torch = np.ones(4)
    v_cntk = v_torch = np.zeros(4)
    for g in gradients:
        v_cntk = momentum * v_cntk + lr * g
        w_cntk = w_cntk - v_cntk
        v_torch = momentum * v_torch + g
        w_torch = w_torch - lr * v_torch
    np.testing.assert_allclose(w_cntk, w_torch, rtol=1e-12)


# --- what the runtimes detect and count, on stand-ins ----------------------------------------------------

def smoke_run(framework, workload):
    return Run(Cell(framework, workload, profile="smoke", data="synthetic"), data_dir="/nonexistent")


def test_cntk_probes_the_cudnn_gru_and_checks_the_graph_it_built(modules, monkeypatch):
    """FAIRNESS.md, fused-rnn: optimized_rnnstack where it runs on this device (probed, not assumed from
    the device name), else the written-out cell, with CNTK's own refusal in gru_kernel."""
    runtime = modules["workloads.runtime.cntk"]
    policy = types.SimpleNamespace(device="cpu")
    monkeypatch.setattr(runtime, "cudnn_gru_problem", lambda: None)
    fused, kernel = runtime.choose_gru(policy)
    assert fused and kernel.startswith("cudnn: ")
    monkeypatch.setattr(runtime, "cudnn_gru_problem", lambda: "RNNForward -> Feature Not Implemented.")
    fused, kernel = runtime.choose_gru(policy)
    assert not fused and kernel.startswith("scan: ") and kernel.endswith("Feature Not Implemented.")
    for ops, fused, right in (({"OptimizedRNNStack", "Times"}, True, True), ({"PastValue", "Times"}, False, True),
                              ({"PastValue", "OptimizedRNNStack"}, False, False), ({"PastValue"}, True, False),
                              ({"Times"}, False, False)):
        monkeypatch.setattr(runtime, "graph_ops", lambda logits, ops=ops: ops)
        if right:
            runtime.check_gru_graph("logits", fused)
        else:
            with pytest.raises(AssertionError):
                runtime.check_gru_graph("logits", fused)


def test_keras_cntk_gru_kernel_is_read_from_the_graph(modules, monkeypatch):
    runtime = modules["workloads.runtime.keras_cntk"]
    model = types.SimpleNamespace(output="output")
    monkeypatch.setattr(runtime, "graph_ops", lambda tensor: {"PastValue", "Times", "StableSigmoid"})
    assert runtime.gru_kernel(model, 150).startswith("scan: Keras 2.2's K.rnn as CNTK's recurrent loop")
    monkeypatch.setattr(runtime, "graph_ops", lambda tensor: {"Times", "StableSigmoid", "Slice"})  # unrolled
    assert runtime.gru_kernel(model, 150).startswith("python-loop: ") and "150 times" in runtime.gru_kernel(model, 150)


class FakeKerasModel:
    """Keras 2.2's lazy functions: _make_*_function builds one when there is none, and keeps it."""

    def __init__(self):
        self.train_function = self.predict_function = None
        self.trainable_weights = []

    def _make_train_function(self):
        if self.train_function is None:
            self.train_function = object()

    def _make_predict_function(self):
        if self.predict_function is None:
            self.predict_function = object()

    def predict_on_batch(self, batch):
        self._make_predict_function()
        return np.zeros((len(batch), 2048), np.float32)


def test_keras_cntk_counts_each_build_of_its_train_and_predict_functions(modules):
    """FAIRNESS.md, trace-once: Keras 2.2 keeps its functions; a second build would be counted."""
    runtime = modules["workloads.runtime.keras_cntk"]
    run, model = smoke_run("keras-cntk", "gru"), FakeKerasModel()
    runtime.count_function_builds(run, model)
    for _ in range(20):
        model._make_train_function()
    model._make_predict_function()
    assert run.result.samples.traces == {"train_function": 1, "predict_function": 1}
    model.train_function = None  # what a recompile does: the next step builds it again
    model._make_train_function()
    assert run.result.samples.traces["train_function"] == 2


def test_resnet50_features_reach_the_host_inside_every_timed_batch(modules):
    """FAIRNESS.md, host-copy: both runtimes hand loop.infer a to_host that insists on a numpy array
    (CNTK's eval and Keras' predict_on_batch return one, copied from the device)."""
    cntk_runtime, keras_runtime = modules["workloads.runtime.cntk"], modules["workloads.runtime.keras_cntk"]
    features = types.SimpleNamespace(arguments=("images",), parameters=[],
                                     eval=lambda feed: np.zeros((len(feed["images"]), 2048), np.float32))
    for framework, call in (("cntk", lambda run, images: cntk_runtime.extract_features(run, None, features, images)),
                            ("keras-cntk", lambda run, images: keras_runtime.extract_features(
                                run, None, FakeKerasModel(), images))):
        run = smoke_run(framework, "resnet50")
        s = run.settings
        call(run, np.zeros((s.batch_size * max(s.batches, s.warmup_batches), *s.image_shape), np.float32))
        assert len(run.result.samples.batch_times_s) == s.batches and run.result.status == "ok", framework
    assert keras_runtime.host_array(np.zeros(2)).shape == (2,)
    for host_array in (cntk_runtime.host_array, keras_runtime.host_array):
        with pytest.raises(AssertionError):
            host_array([np.zeros(2)])  # not a numpy array: not on the host as one


def test_cntk_rows_say_fp32_has_no_tf32_to_refuse(modules):
    for name in ("workloads.runtime.cntk", "workloads.runtime.keras_cntk"):
        runtime = modules[name]
        assert runtime.TF32_ON_CPU == "n/a (CPU)" and runtime.TF32_ON_GPU.startswith("n/a (") and "CUDA 10.0" in \
            runtime.TF32_ON_GPU, name


# --- the real thing: the cached Python 3.6 environments ----------------------------------------------------

@pytest.fixture(scope="module")
def openmpi(tmp_path_factory):
    """LD_LIBRARY_PATH with this host's OpenMPI under the names CNTK 2.7 loads (images/cntk/openmpi-compat.sh)."""
    folder = tmp_path_factory.mktemp("openmpi")
    completed = subprocess.run([str(ROOT / "images" / "cntk" / "openmpi-compat.sh"), str(folder)],
                               capture_output=True, text=True)
    if completed.returncode != 0:
        pytest.skip("no OpenMPI runtime on this host for CNTK 2.7: " + completed.stderr.strip())
    return {"LD_LIBRARY_PATH": ":".join(filter(None, [str(folder), os.environ.get("LD_LIBRARY_PATH")]))}


TRAIN_FUNCTIONS = {"cntk": {"train_graph": 1}, "keras-cntk": {"train_function": 1, "predict_function": 1}}


@pytest.mark.parametrize("framework", ["cntk", "keras-cntk"])
def test_twenty_gru_steps_from_the_canonical_start_build_once(framework, tmp_path, openmpi, monkeypatch):
    """FAIRNESS.md, same-start, trace-once, fused-optimizers, fused-rnn, true-precision, on the real
    framework: the first loss is the canonical weights' loss on the first batch (numpy), the graph or
    Keras function is built once in 20 steps, and the result says which Adam and which GRU ran."""
    python = framework_python(framework)
    steps = {"max_train_batches": 20, "batch_size": 16}  # one shape is all trace-once needs; small is cheaper
    result, _, _ = run_cell(python, "gru", framework, tmp_path, overrides=steps, env=openmpi)
    extras, samples = result["provenance"]["extras"], result["samples"]
    assert extras["init"] == "canonical" and samples["epoch_steps"] == [20] and len(samples["batch_times_s"]) == 20
    x, y = first_batch("gru", steps)
    expected = cross_entropy(gru_logits(canonical.parameters("gru"), x), y)
    assert samples["first_loss"] == pytest.approx(expected, rel=1e-4)
    assert samples["traces"] == TRAIN_FUNCTIONS[framework]
    assert extras["optimizer"].startswith("written out: ") and "epsilon" in extras["optimizer"]
    assert extras["tf32"] == "n/a (CPU)" and extras["graph"]
    if framework == "cntk":  # the probe ran optimized_rnnstack on the CPU, and CNTK refused it
        assert extras["gru_kernel"].startswith("scan: the canonical cell in layers.Recurrence")
        assert "Feature Not Implemented" in extras["gru_kernel"]
        assert extras["optimizer"].startswith("written out: PyTorch's Adam as ") and " CNTK ops for 7 parameters" in \
            extras["optimizer"]
    else:
        assert extras["gru_kernel"].startswith("scan: Keras 2.2's K.rnn as CNTK's recurrent loop")


@pytest.mark.parametrize("framework", ["cntk", "keras-cntk"])
def test_init_framework_keeps_the_framework_start_and_the_cnn_names_its_sgd(framework, tmp_path, openmpi):
    python = framework_python(framework)
    result, _, _ = run_cell(python, "cnn", framework, tmp_path, arguments=["--init", "framework"], env=openmpi)
    extras = result["provenance"]["extras"]
    assert result["cell"]["init"] == "framework" and extras["init"] == "framework"
    assert result["samples"]["traces"] == TRAIN_FUNCTIONS[framework]
    if framework == "cntk":
        assert extras["optimizer"].startswith("built-in: C.momentum_sgd(unit_gain=False)")
    else:
        assert extras["optimizer"].startswith("written out: Keras 2.2's SGD(momentum)")


# --- Python 3.6 ------------------------------------------------------------------------------------------

def image_python_files(name):
    from orchestrator import frameworks, images

    framework = frameworks.discover()[name]
    variant = framework.variants[framework.default_variant]
    files = images.context_files(framework, variant, images.BuildOptions())
    assert variant.python == "3.6"
    return [Path(files[n]) for n in files if n.startswith("workloads/") and n.endswith(".py")]


@pytest.mark.parametrize("name", ["cntk", "keras-cntk"])
def test_the_files_a_python36_image_holds_parse_as_python36(name):
    """Python 3.6 grammar (ast feature_version) and no `from __future__ import annotations` (3.7+),
    which the grammar check lets through; vermin's library check runs in tests/test_images.py."""
    paths = image_python_files(name)
    assert any(p.name == "harness.py" for p in paths) and any(p.parent.name == "runtime" for p in paths)
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))
        futures = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and node.module == "__future__" for alias in node.names]
        assert "annotations" not in futures, path


# --- the real thing, where a Python 3.6 with CNTK is at hand --------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("framework", ["cntk", "keras-cntk"])
def test_parity_in_a_python36_cntk_environment(tmp_path, framework, openmpi):
    """The CNTK rows' parity outputs held to the numpy definitions, in their Python 3.6 environments."""
    assert_training_parity_in(framework_python(framework), framework, tmp_path, env=openmpi)
