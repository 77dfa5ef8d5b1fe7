"""The layout and optimizer facts the TensorFlow workloads rely on, and the rules their compiled steps keep.

Most tests need no TensorFlow: each states, in numpy, what a TensorFlow op computes in the layout
the workload file uses, and compares it with the canonical (NCHW / OIHW) computation. The tests
marked e2e run real cells in TensorFlow's cached CPU environment (tests/support/compiled_step_checks.py):
trace counts after 20 training steps, the compiled (XLA) mode, the fused optimizers, the canonical start.
"""
from pathlib import Path

import numpy as np
import pytest

from support.compiled_step_checks import assert_each_step_traced_once, run_checks
from support.framework_cells import expected_first_loss
from support.numpy_reference import assert_pytorchs_momentum, conv_nchw_oihw, conv_nhwc_hwio, gru_step, sigmoid, to_nhwc
from workloads.common import canonical

rng = np.random.default_rng(0)


def test_hwio_kernel_on_nhwc_input_equals_the_canonical_convolution():
    x, kernel = rng.normal(size=(2, 3, 5, 6)), rng.normal(size=(4, 3, 3, 3))
    expected = conv_nchw_oihw(x, kernel, pad=1)
    got = conv_nhwc_hwio(to_nhwc(x), canonical.oihw_to_hwio(kernel), pads=((1, 1), (1, 1)))
    np.testing.assert_allclose(got, to_nhwc(expected), rtol=1e-12, atol=1e-12)


def test_strided_same_padding_is_asymmetric_so_resnet_pads_explicitly():
    """TF's "SAME" for a 3x3 stride-2 conv on an even size pads (0, 1); PyTorch's padding=1 pads (1, 1)."""
    x, kernel = rng.normal(size=(1, 2, 8, 8)), rng.normal(size=(3, 2, 3, 3))
    canonical_out = to_nhwc(conv_nchw_oihw(x, kernel, stride=2, pad=1))
    hwio = canonical.oihw_to_hwio(kernel)
    size, stride, k = 8, 2, 3
    total = max((-(-size // stride) - 1) * stride + k - size, 0)  # TF's SAME rule
    same = ((total // 2, total - total // 2),) * 2
    assert same == ((0, 1), (0, 1))
    tf_same = conv_nhwc_hwio(to_nhwc(x), hwio, stride=2, pads=same)
    explicit = conv_nhwc_hwio(to_nhwc(x), hwio, stride=2, pads=((1, 1), (1, 1)))
    assert tf_same.shape == canonical_out.shape
    assert not np.allclose(tf_same, canonical_out)
    np.testing.assert_allclose(explicit, canonical_out, rtol=1e-12, atol=1e-12)


def test_nhwc_maps_transposed_to_nchw_before_the_flatten_keep_the_canonical_dense_rows():
    features, kernel = rng.normal(size=(2, 4, 3, 3)), rng.normal(size=(4 * 3 * 3, 5))
    expected = features.reshape(2, -1) @ kernel  # canonical: flatten (channels, height, width)
    nhwc = to_nhwc(features)
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2).reshape(2, -1) @ kernel, expected, rtol=1e-12)
    # the alternative, flattening NHWC as is, needs dense1's rows permuted
    permuted = canonical.nchw_rows_to_nhwc_rows(kernel, 4, 3, 3)
    np.testing.assert_allclose(nhwc.reshape(2, -1) @ permuted, expected, rtol=1e-12)
    assert not np.allclose(nhwc.reshape(2, -1) @ kernel, expected)


def gru_step_tensorflow_file(x, h, params):
    """The TensorFlow workload's step: one input projection for all gates, split r, z, n."""
    x_r, x_z, x_n = np.split(x @ params["gru.kernel"] + params["gru.input_bias"], 3, axis=1)
    h_r, h_z, h_n = np.split(h @ params["gru.recurrent_kernel"] + params["gru.recurrent_bias"], 3, axis=1)
    r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
    n = np.tanh(x_n + r * h_n)
    return (1 - z) * n + z * h


def tiny_gru(inputs=4, hidden=3):
    return {"gru.kernel": rng.normal(size=(inputs, 3 * hidden)),
            "gru.recurrent_kernel": rng.normal(size=(hidden, 3 * hidden)),
            "gru.input_bias": rng.normal(size=3 * hidden), "gru.recurrent_bias": rng.normal(size=3 * hidden)}


def test_gru_step_as_written_in_the_tensorflow_file_equals_the_canonical_step():
    params, x, h = tiny_gru(), rng.normal(size=(2, 4)), rng.normal(size=(2, 3))
    np.testing.assert_allclose(gru_step_tensorflow_file(x, h, params), gru_step(x, h, params),
                               rtol=1e-12)


def test_keras_layout_gru_with_reordered_gates_equals_the_canonical_step():
    """Keras' [z, r, n] order with biases stacked (2, 3*hidden), from gru_gates_rzn_to_zrn."""
    params, x, h = tiny_gru(), rng.normal(size=(2, 4)), rng.normal(size=(2, 3))
    kernel = canonical.gru_gates_rzn_to_zrn(params["gru.kernel"])
    recurrent = canonical.gru_gates_rzn_to_zrn(params["gru.recurrent_kernel"])
    bias = np.stack([canonical.gru_gates_rzn_to_zrn(params["gru.input_bias"]),
                     canonical.gru_gates_rzn_to_zrn(params["gru.recurrent_bias"])])
    x_z, x_r, x_n = np.split(x @ kernel + bias[0], 3, axis=1)
    h_z, h_r, h_n = np.split(h @ recurrent + bias[1], 3, axis=1)
    z, r = sigmoid(x_z + h_z), sigmoid(x_r + h_r)
    keras = (1 - z) * np.tanh(x_n + r * h_n) + z * h
    np.testing.assert_allclose(keras, gru_step(x, h, params), rtol=1e-12)


def test_adam_written_out_adds_epsilon_after_the_square_root():
    """The TensorFlow file's update equals PyTorch's form: lr/c1 * m / (sqrt(v)/sqrt(c2) + eps)."""
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    w = rng.normal(size=5)
    ours, torch_form = w.copy(), w.copy()
    m = v = np.zeros(5)
    for step in (1, 2, 3):
        g = rng.normal(size=5) * 1e-6  # tiny gradients: where the placement of eps matters
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        c1, c2 = 1 - b1 ** step, 1 - b2 ** step
        ours -= lr * (m / c1) / (np.sqrt(v / c2) + eps)
        torch_form -= lr / c1 * m / (np.sqrt(v) / np.sqrt(c2) + eps)
    np.testing.assert_allclose(ours, torch_form, rtol=1e-12)


# --- the fused optimizer ops (tf.raw_ops), as TensorFlow documents them -------------------------

def resource_apply_adam(w, m, v, g, lr, b1, b2, epsilon, step):
    """tf.raw_ops.ResourceApplyAdam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t);
    w -= lr_t * m / (sqrt(v) + epsilon), the "epsilon hat" form."""
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return w - lr * np.sqrt(1 - b2 ** step) / (1 - b1 ** step) * m / (np.sqrt(v) + epsilon), m, v


def torch_adam(w, m, v, g, lr, b1, b2, eps, step):
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return w - lr / (1 - b1 ** step) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** step) + eps), m, v


def test_resource_apply_adam_equals_pytorchs_adam_only_with_epsilon_scaled_each_step():
    """gru/tensorflow.py passes epsilon = eps * sqrt(1 - beta2^t): then the fused op is PyTorch's Adam.
    Passing eps as is puts it before the bias correction: different updates where gradients are tiny."""
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    gradients = rng.normal(size=(4, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])
    start = rng.normal(size=6)
    fused, plain, reference = [(start.copy(), np.zeros(6), np.zeros(6)) for _ in range(3)]
    for step, g in enumerate(gradients, start=1):
        fused = resource_apply_adam(*fused, g, lr, b1, b2, eps * np.sqrt(1 - b2 ** step), step)
        plain = resource_apply_adam(*plain, g, lr, b1, b2, eps, step)
        reference = torch_adam(*reference, g, lr, b1, b2, eps, step)
    np.testing.assert_allclose(fused[0] - start, reference[0] - start, rtol=1e-10)
    assert not np.allclose(plain[0] - start, reference[0] - start, rtol=1e-2)


def test_resource_apply_momentum_is_pytorchs_plain_momentum():
    def resource_apply_momentum(weights, accum, gradient, lr, momentum):
        """tf.raw_ops.ResourceApplyMomentum: accum = accum * momentum + grad; var -= lr * accum (no unit gain)."""
        accum = accum * momentum + gradient
        return weights - lr * accum, accum

    assert_pytorchs_momentum(resource_apply_momentum)


# --- the real thing, in TensorFlow's cached CPU environment --------------------------------------

def test_no_rosetta_xla_environment_switch_is_left():
    """XLA is the cell's mode (--modes compiled), never an environment variable the backends may drop."""
    root = Path(__file__).resolve().parents[2]
    readers = [str(path.relative_to(root)) for folder in ("workloads", "images", "orchestrator")
               for path in (root / folder).rglob("*") if path.is_file() and path.suffix in (".py", ".toml")
               and "ROSETTA_XLA" in path.read_text(errors="replace")]
    assert readers == []


@pytest.fixture(scope="module")
def tensorflow_checks():
    """One TensorFlow process for every check below. ROSETTA_XLA=1 is set to show it is ignored."""
    return run_checks("tensorflow", ["training:cnn", "training:gru", "training:cnn:mode=compiled", "inference",
                                     "inference:mode=compiled", "optimizers", "first_loss:canonical",
                                     "first_loss:framework"], environment={"ROSETTA_XLA": "1"})


@pytest.mark.e2e
@pytest.mark.parametrize("check", ["training:cnn", "training:gru", "training:cnn:mode=compiled"])
def test_every_compiled_step_traces_once_in_20_training_steps(tensorflow_checks, check):
    """The train step, and the evaluation step over a test set ending in a partial batch (padded to
    the one shape), each trace exactly once: nothing retraces."""
    assert_each_step_traced_once(tensorflow_checks[check])


@pytest.mark.e2e
@pytest.mark.parametrize("check", ["inference", "inference:mode=compiled"])
def test_the_inference_forward_traces_once_and_copies_features_to_the_host(tensorflow_checks, check):
    found = tensorflow_checks[check]
    assert found["status"] == "ok", found["reason"]
    assert found["traces"] == {"forward": 1} and found["timed_batches"] == 4


@pytest.mark.e2e
def test_the_compiled_mode_is_read_per_cell_and_the_environment_variable_is_not(tensorflow_checks):
    for check in ("training:cnn", "training:gru", "inference"):  # run with ROSETTA_XLA=1 in the environment
        extras = tensorflow_checks[check]["extras"]
        assert extras["mode"].startswith("graph: tf.function graphs") and extras["xla"].startswith("off"), extras
    for check in ("training:cnn:mode=compiled", "inference:mode=compiled"):
        extras = tensorflow_checks[check]["extras"]
        assert extras["mode"].startswith("compiled: tf.function with XLA"), extras
        assert extras["xla"].startswith("on: tf.function(jit_compile=True)"), extras


@pytest.mark.e2e
def test_what_ran_is_recorded(tensorflow_checks):
    cnn, gru = tensorflow_checks["training:cnn"]["extras"], tensorflow_checks["training:gru"]["extras"]
    assert cnn["optimizer"].startswith("tf.raw_ops.ResourceApplyMomentum (fused")
    assert gru["optimizer"].startswith("tf.raw_ops.ResourceApplyAdam (fused")
    assert gru["gru_kernel"].startswith("scan: tf.scan") and "no fused CPU GRU kernel" in gru["gru_kernel"]
    assert "gru_kernel" not in cnn
    assert cnn["tf32"] == gru["tf32"] == "n/a (CPU)"
    assert cnn["init"] == "canonical"


@pytest.mark.e2e
@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_the_fused_ops_compute_pytorchs_update(tensorflow_checks, optimizer):
    """The workload files' optimizers on one variable, tiny gradients included, against PyTorch's
    update in float64: the updates agree to float32 rounding."""
    found = tensorflow_checks["optimizers"][optimizer]
    start = np.asarray(found["start"])
    np.testing.assert_allclose(np.asarray(found["tensorflow"]) - start, np.asarray(found["pytorch_form"]) - start,
                               rtol=2e-3, atol=1e-7)


@pytest.mark.e2e
def test_training_starts_from_the_canonical_weights_unless_told_otherwise(tensorflow_checks):
    """The GRU has no dropout: its first loss is the canonical model's on the first batch, in numpy."""
    canonical_start = tensorflow_checks["first_loss:canonical"]
    framework_start = tensorflow_checks["first_loss:framework"]
    assert canonical_start["status"] == framework_start["status"] == "ok"
    assert canonical_start["extras"]["init"] == "canonical" and framework_start["extras"]["init"] == "framework"
    expected = expected_first_loss("gru")
    assert canonical_start["first_loss"] == pytest.approx(expected, rel=1e-5)
    assert framework_start["first_loss"] != pytest.approx(expected, rel=1e-3)
