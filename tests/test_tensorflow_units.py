"""The layout facts the TensorFlow workloads rely on, checked on tiny arrays with numpy only.

TensorFlow itself is not needed: each test states, in numpy, what a TensorFlow op computes in the
layout the workload file uses, and compares it with the canonical (NCHW / OIHW) computation.
"""
import numpy as np

from numpy_reference import conv_nchw_oihw, conv_nhwc_hwio, gru_step, sigmoid, to_nhwc
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
