"""The layout and optimizer conversions the Keras 3 rows rely on, checked in numpy on tiny tensors.

No Keras import in the first part: Keras' formulas are written out here as its source (keras
3.15.1) computes them, so these tests run in the host environment; the parity check runs the real
thing. The last part checks the fairness rules on the real Keras, per backend, in each
backend's CPU environment (tests/support/fairness_probes.py; built once per test session).
"""
import numpy as np
import pytest

from support.numpy_reference import conv_nchw_oihw, conv_nhwc_hwio, gru_step_canonical, sigmoid
from workloads.common import canonical

RNG = np.random.default_rng(0)


# --- GRU: canonical [r, z, n] with two bias vectors vs Keras [z, r, n] with a (2, 3h) bias -------

def gru_step_keras(x, h, kernel, recurrent_kernel, bias):
    """keras/src/backend/jax/rnn.py::gru's step (reset_after=True): gates z, r, h; bias[0] input, bias[1] recurrent."""
    x_z, x_r, x_h = np.split(x @ kernel + bias[0], 3, axis=-1)
    h_z, h_r, h_h = np.split(h @ recurrent_kernel + bias[1], 3, axis=-1)
    z = sigmoid(x_z + h_z)
    r = sigmoid(x_r + h_r)
    hh = np.tanh(x_h + r * h_h)
    return z * h + (1 - z) * hh


def test_gru_gate_reorder_and_stacked_biases_give_the_canonical_step():
    inputs, hidden, batch = 5, 4, 3
    kernel = RNG.normal(size=(inputs, 3 * hidden)).astype(np.float32)
    recurrent_kernel = RNG.normal(size=(hidden, 3 * hidden)).astype(np.float32)
    input_bias, recurrent_bias = RNG.normal(size=(2, 3 * hidden)).astype(np.float32)
    x, h = RNG.normal(size=(batch, inputs)), RNG.normal(size=(batch, hidden))
    expected = gru_step_canonical(x, h, kernel, recurrent_kernel, input_bias, recurrent_bias)
    reorder = canonical.gru_gates_rzn_to_zrn
    bias = np.stack([reorder(input_bias), reorder(recurrent_bias)])  # as gru/keras.py loads it
    assert bias.shape == (2, 3 * hidden)
    got = gru_step_keras(x, h, reorder(kernel), reorder(recurrent_kernel), bias)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # without the reorder the two layouts disagree: the test can fail
    wrong = gru_step_keras(x, h, kernel, recurrent_kernel, np.stack([input_bias, recurrent_bias]))
    assert not np.allclose(wrong, expected, atol=1e-3)


# --- CNN: flatten order --------------------------------------------------------------------------

def test_nhwc_feature_map_permuted_before_flatten_keeps_the_canonical_rows():
    batch, channels, height, width, out = 2, 3, 4, 5, 6
    nchw = RNG.normal(size=(batch, channels, height, width))
    nhwc = nchw.transpose(0, 2, 3, 1)
    kernel = RNG.normal(size=(channels * height * width, out))
    expected = nchw.reshape(batch, -1) @ kernel  # canonical: flatten (C, H, W)
    # cnn/keras.py, channels_last: Permute((3, 1, 2)) then Flatten
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2).reshape(batch, -1) @ kernel, expected, rtol=1e-12)
    # the alternative the canonical module offers: flatten NHWC, permute dense1's rows
    rows = canonical.nchw_rows_to_nhwc_rows(kernel, channels, height, width)
    np.testing.assert_allclose(nhwc.reshape(batch, -1) @ rows, expected, rtol=1e-12)
    assert not np.allclose(nhwc.reshape(batch, -1) @ kernel, expected)


# --- convolution kernels -------------------------------------------------------------------------

def test_oihw_to_hwio_gives_the_same_convolution_in_nhwc():
    x = RNG.normal(size=(2, 3, 6, 5))
    kernel = RNG.normal(size=(4, 3, 3, 2))  # non-square: height and width cannot be swapped unnoticed
    expected = conv_nchw_oihw(x, kernel)
    got = conv_nhwc_hwio(x.transpose(0, 2, 3, 1), canonical.oihw_to_hwio(kernel))
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), expected, rtol=1e-12)


# --- padding of strided convolutions (resnet50/keras.py) -----------------------------------------

def keras_same_padding(size, kernel, stride):
    """(before, after) that Keras/TensorFlow's padding='same' adds: the extra pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("size, kernel, stride", [(224, 7, 2), (56, 3, 2), (28, 3, 2), (14, 3, 2)])
def test_strided_same_padding_is_asymmetric_so_resnet_pads_explicitly(size, kernel, stride):
    pytorch = (kernel // 2, kernel // 2)  # padding=k//2 on both sides
    assert keras_same_padding(size, kernel, stride) != pytorch
    # ZeroPadding2D(k//2) + 'valid' is PyTorch's padding, with the same output size as 'same'
    assert (size + 2 * (kernel // 2) - kernel) // stride + 1 == -(-size // stride)


@pytest.mark.parametrize("size", [32, 16, 56])
def test_stride_one_same_padding_is_pytorchs_padding_one(size):
    assert keras_same_padding(size, 3, 1) == (1, 1)


def test_zero_padding_before_max_pool_equals_minus_infinity_after_relu():
    x = np.maximum(RNG.normal(size=(7, 7)), 0.0)  # post-ReLU
    zero, neg = np.pad(x, 1, constant_values=0.0), np.pad(x, 1, constant_values=-np.inf)
    pool = lambda a: np.array([[a[i:i + 3, j:j + 3].max() for j in range(0, a.shape[1] - 2, 2)]  # noqa: E731
                               for i in range(0, a.shape[0] - 2, 2)])
    np.testing.assert_array_equal(pool(zero), pool(neg))


# --- optimizers ----------------------------------------------------------------------------------

def test_keras_sgd_momentum_equals_pytorchs_plain_momentum_at_a_constant_rate():
    lr, momentum, steps = 0.01, 0.9, 6
    gradients = RNG.normal(size=(steps, 5))
    w_keras = w_torch = RNG.normal(size=5)
    v_keras = v_torch = np.zeros(5)
    for g in gradients:
        v_keras = momentum * v_keras - lr * g  # keras/src/optimizers/sgd.py
        w_keras = w_keras + v_keras
        v_torch = momentum * v_torch + g  # torch.optim.SGD, dampening 0
        w_torch = w_torch - lr * v_torch
    np.testing.assert_allclose(w_keras, w_torch, rtol=1e-12)


def adam(gradients, w, lr, b1, b2, eps, form):
    m = v = np.zeros_like(w)
    for t, g in enumerate(gradients, start=1):
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        if form == "keras":  # keras/src/optimizers/adam.py: epsilon added to sqrt(v)
            w = w - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
        else:  # PyTorch and the paper's Algorithm 1 (runtime.adam): epsilon added to sqrt(v-hat)
            w = w - lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    return w


def test_keras_adam_epsilon_is_pytorchs_scaled_by_sqrt_one_minus_beta2_power():
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    gradients = RNG.normal(size=(1, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])
    w = np.zeros(6)
    # at step t Keras' epsilon acts as eps / sqrt(1 - b2^t) would in PyTorch's form
    np.testing.assert_allclose(adam(gradients, w, lr, b1, b2, eps, "keras"),
                               adam(gradients, w, lr, b1, b2, eps / np.sqrt(1 - b2), "pytorch"), rtol=1e-10)
    # which matters for small gradients (an embedding's), hence runtime.adam's PyTorch form (workloads/runtime/keras/optimizers.py)
    keras, pytorch = adam(gradients, w, lr, b1, b2, eps, "keras"), adam(gradients, w, lr, b1, b2, eps, "pytorch")
    assert abs(keras[1] - pytorch[1]) > 0.1 * abs(pytorch[1])
    np.testing.assert_allclose(keras[4:], pytorch[4:], rtol=1e-5)


# --- on the real Keras, per backend (tests/support/fairness_probes.py in each cached CPU environment) --------

KERAS_FRAMEWORKS = ["keras-tf", "keras-jax", "keras-torch"]
COMPILED = {"keras-tf": True, "keras-jax": True, "keras-torch": False}  # torch: eager, nothing traced


@pytest.fixture(scope="module", params=KERAS_FRAMEWORKS)
def keras_row(request):
    from support.fairness_probes import facts
    return request.param, facts(request.param)


@pytest.mark.e2e  # the real Keras, in its cached environment
@pytest.mark.parametrize("workload", ["cnn", "gru"])
def test_compiled_train_step_traces_once_per_shape_over_twenty_steps(keras_row, workload):
    """The benchmark's own step (TrainStep over Keras' train_function), 20 steps of one shape: one
    trace on TensorFlow and JAX. Before the optimizer was built ahead of the first step, TensorFlow
    traced twice (a tf.function that creates variables while tracing traces again)."""
    framework, found = keras_row
    run = found[f"{workload}_run"]
    assert run["status"] == "ok", run["reason"]
    assert run["steps"] >= 20
    if COMPILED[framework]:
        assert run["traces"] == {"train_step": 1}
        assert "traced once per input shape" in run["extras"]["train_step"]
    else:
        assert run["traces"] == {} and run["extras"]["train_step"].endswith("nothing is traced")


@pytest.mark.e2e  # the real Keras, in its cached environment
@pytest.mark.parametrize("workload", ["cnn", "gru"])
def test_on_jax_no_xla_compilation_lands_in_a_timed_training_step(keras_row, workload):
    """Keras on JAX: the loss sum's eager add is compiled in the first step, timed apart (its
    loss is a device scalar from the first step on); it once landed in the second, which the report
    then flagged as a slow step. docs/FAIRNESS.md: every-step-finite."""
    framework, found = keras_row
    run = found[f"{workload}_run"]
    assert run["status"] == "ok", run["reason"]
    assert run["timed_step_compiles"] == (0 if framework == "keras-jax" else None)


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_compiled_predict_step_traces_once_over_the_resnet50_batches(keras_row):
    """ResNet-50's warm and timed batches, one shape: one trace of Keras' predict function."""
    framework, found = keras_row
    run = found["resnet50_run"]
    assert run["status"] == "ok", run["reason"]
    assert run["traces"] == ({"predict_step": 1} if COMPILED[framework] else {})
    assert run["extras"]["init"] == "canonical"


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_the_run_starts_from_the_canonical_weights_unless_told_otherwise(keras_row):
    _, found = keras_row
    assert found["cnn_init_canonical"] == {"equals_canonical": True, "extra": "canonical"}
    assert found["cnn_init_framework"] == {"equals_canonical": False, "extra": "framework"}


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_xla_follows_the_mode_on_tensorflow_always_on_jax_never_on_torch(keras_row):
    framework, found = keras_row
    xla = found["xla"]
    if framework == "keras-tf":
        assert xla["graph"]["jit_compile"] is False and xla["graph"]["extra"].startswith("off:")
        assert xla["compiled"]["jit_compile"] is True and xla["compiled"]["extra"].startswith("on:")
    elif framework == "keras-jax":
        assert xla["default"]["jit_compile"] is True and xla["default"]["extra"].startswith("always:")
    else:
        assert xla["default"]["jit_compile"] is False and "torch.compile" in xla["default"]["extra"]


GRU_KERNELS_ON_CPU = {"keras-tf": "scan: tf.while_loop over 20 steps",
                      "keras-jax": "scan: Keras' JAX gru, a lax.scan over 20 steps",
                      "keras-torch": "python-loop: Keras' torch gru fallback, a Python loop over 20 steps"}


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_gru_kernel_records_what_ran_on_the_cpu(keras_row):
    framework, found = keras_row
    kernel = found["gru_run"]["extras"]["gru_kernel"]
    assert kernel.startswith(GRU_KERNELS_ON_CPU[framework]) and " | then: " not in kernel


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_keras_torch_gru_falling_back_from_a_raising_cudnn_call_is_recorded():
    """Keras' torch backend alone falls back silently from a cuDNN call that raises."""
    from support.fairness_probes import facts

    found = facts("keras-torch")
    kernel = found["torch_cudnn_fallback"]["gru_kernel"]
    assert kernel.startswith("python-loop:") and "cuDNN path raised TypeError" in kernel


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_keras_torch_compiled_mode_compiles_each_graph_once_and_trains_as_eager_does():
    """The compiled mode on torch (jit_compile=True: Keras hands its steps to torch.compile, docs/FAIRNESS.md:
    modes-compared), through the runtime's training loop over 20 steps: every graph inductor compiles is
    counted once (the train step's several, split where TorchDynamo breaks: backward() and the fused
    optimizer, which the record names; the evaluation's predict step), compilation in the first step
    (inductor's own setup timed apart before it), inductor's caches in the cell's folder; the losses are
    the eager mode's from the same start. The GRU is refused, saying why."""
    from support.fairness_probes import facts

    found = facts("keras-torch")["torch_compiled"]
    eager, compiled = found["eager"], found["compiled"]
    assert eager["status"] == compiled["status"] == "ok" and compiled["steps"] >= 20
    assert eager["traces"] == {} and compiled["traces"] and set(compiled["traces"].values()) == {1}
    assert {name.rsplit(" ", 1)[0] for name in compiled["traces"]} == {"train_step graph", "predict_step graph"}
    extras = compiled["extras"]
    assert extras["jit_compile"] == "true" and extras["mode"].startswith("compiled: jit_compile=True")
    assert extras["compiler"].startswith("inductor: C++/OpenMP kernels built by ") and "/home" not in extras["compiler"]
    assert "compiled by torch.compile in the first step" in extras["train_step"]
    assert extras["torch_compile"].startswith("TorchDynamo compiled ") and "Tensor.backward()" in extras["torch_compile"]
    assert "compiler" not in eager["extras"] and eager["extras"]["jit_compile"] == "false"
    assert "compiler_setup" in compiled["phases"] and "compiler_setup" not in eager["phases"]  # inductor.set_up
    np.testing.assert_allclose(compiled["epoch_losses"], eager["epoch_losses"], rtol=1e-4)
    assert compiled["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-5)
    assert found["gru"].startswith("torch.compile does not compile this model in reasonable time")


def reference_updates(start, gradients, rule):
    """PyTorch's updates (the reference row) in float64: plain-momentum SGD, Adam in its epsilon form."""
    w, m, v = np.array(start, dtype=np.float64), 0.0, 0.0
    for t, g in enumerate(np.array(gradients, dtype=np.float64), start=1):
        if rule == "sgd":
            m = 0.9 * m + g
            w = w - 0.01 * m
        else:
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            w = w - 1e-3 / (1 - 0.9 ** t) * m / (np.sqrt(v) / np.sqrt(1 - 0.999 ** t) + 1e-8)
    return w


@pytest.mark.e2e  # the real Keras, in its cached environment
@pytest.mark.parametrize("rule", ["sgd", "adam"])
def test_backend_optimizer_computes_pytorchs_update(keras_row, rule):
    """runtime.sgd_momentum and runtime.adam (ResourceApplyKerasMomentum / ResourceApplyAdam with a
    scaled epsilon on TensorFlow, PyTorch's fused kernels on torch, Keras ops on JAX) end where
    PyTorch's updates end, gradients from 1e-9 to 1 (Keras' own Adam misses the small ones by 1e-4)."""
    framework, found = keras_row
    optimizers = found["optimizers"]
    expected = reference_updates(optimizers["start"], optimizers["gradients"], rule)
    np.testing.assert_allclose(optimizers[rule]["weights"], expected, rtol=0, atol=1e-6)
    keras_form = adam(np.array(optimizers["gradients"]), np.array(optimizers["start"]), 1e-3, 0.9, 0.999, 1e-8, "keras")
    assert np.abs(keras_form - expected).max() > 1e-5  # the tolerance tells the two epsilon forms apart
    description = optimizers[rule]["description"]
    assert {"keras-tf": "tf.raw_ops.ResourceApply", "keras-torch": "torch.optim.",
            "keras-jax": "Keras" if rule == "sgd" else "written out"}[framework] in description
    if framework == "keras-torch":
        assert "fused=True" in description


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_tensorflow_adam_sums_an_embeddings_repeated_rows_first():
    """IndexedSlices (TensorFlow's) with token 1 twice: one dense row gradient (4, 6), whose first
    Adam step moves each of its entries by lr; the untouched rows stay."""
    from support.fairness_probes import facts

    found = facts("keras-tf")
    start = np.array(found["optimizers"]["start"]).reshape(3, 2)
    expected, summed = start.copy(), np.array([1.0 + 3.0, 2.0 + 4.0])
    expected[1] -= 1e-3 * summed / (np.abs(summed) + 1e-8)  # PyTorch's first Adam step: lr * g / (|g| + eps)
    np.testing.assert_allclose(found["optimizers"]["adam_indexed_slices"], expected, rtol=0, atol=1e-6)


@pytest.mark.e2e  # the real Keras, in its cached environment
def test_tf32_is_not_applicable_on_the_cpu_on_every_backend(keras_row):
    _, found = keras_row
    assert found["cnn_run"]["extras"]["tf32"] == "n/a (CPU)"
