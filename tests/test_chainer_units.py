"""The layout and optimizer conversions the Chainer rows rely on, checked in numpy on tiny tensors.

No Chainer import: Chainer's formulas are written out here as its source (chainer 7.8.1) computes
them, so these tests run in the host environment; the parity check runs the real thing.
"""
import math

import numpy as np

from numpy_reference import gru_step_canonical, sigmoid
from workloads.common import canonical

RNG = np.random.default_rng(0)


# --- GRU: canonical [r, z, n] blocks vs NStepGRU's per-gate (hidden, in) matrices w0..w5, b0..b5 --

def gru_step_chainer(x, h, w, b):
    """chainer/functions/rnn/n_step_gru.py::_gru: w[0..2] input, w[3..5] recurrent, each (hidden, in)."""
    gru_x = x @ np.concatenate(w[0:3], axis=0).T + np.concatenate(b[0:3])
    gru_h = h @ np.concatenate(w[3:6], axis=0).T + np.concatenate(b[3:6])
    w_r_x, w_z_x, w_x = np.split(gru_x, 3, axis=1)
    u_r_h, u_z_h, u_x = np.split(gru_h, 3, axis=1)
    r = sigmoid(w_r_x + u_r_h)
    z = sigmoid(w_z_x + u_z_h)
    h_bar = np.tanh(w_x + r * u_x)
    return (1 - z) * h_bar + z * h


def split_like_gru_chainer(kernel, recurrent_kernel, input_bias, recurrent_bias):
    """What gru/chainer.py's load_canonical does, in numpy."""
    w, b = [], []
    for matrix, bias in ((kernel, input_bias), (recurrent_kernel, recurrent_bias)):
        w += [canonical.dense_to_out_in(block) for block in np.split(matrix, 3, axis=1)]
        b += list(np.split(bias, 3))
    return w, b


def test_gru_per_gate_split_gives_the_canonical_step():
    inputs, hidden, batch = 5, 4, 3
    kernel = RNG.normal(size=(inputs, 3 * hidden))
    recurrent_kernel = RNG.normal(size=(hidden, 3 * hidden))
    input_bias, recurrent_bias = RNG.normal(size=(2, 3 * hidden))
    x, h = RNG.normal(size=(batch, inputs)), RNG.normal(size=(batch, hidden))
    expected = gru_step_canonical(x, h, kernel, recurrent_kernel, input_bias, recurrent_bias)
    w, b = split_like_gru_chainer(kernel, recurrent_kernel, input_bias, recurrent_bias)
    assert [m.shape for m in w] == [(hidden, inputs)] * 3 + [(hidden, hidden)] * 3
    np.testing.assert_allclose(gru_step_chainer(x, h, w, b), expected, rtol=1e-12, atol=1e-12)
    # swapping the input and recurrent biases (b0-b2 vs b3-b5) breaks it: the test can fail
    swapped_biases = gru_step_chainer(x, h, w, b[3:] + b[:3])
    assert not np.allclose(swapped_biases, expected, atol=1e-3)


def test_gru_parameter_count_is_the_cudnn_form():
    inputs, hidden = 125, 100
    assert 3 * hidden * inputs + 3 * hidden * hidden + 6 * hidden == 68_100


# --- Adam: Chainer's epsilon outside the bias correction, rescaled per step ------------------------

def adam_pytorch(params, grads, lr, beta1, beta2, eps):
    m = np.zeros_like(params)
    v = np.zeros_like(params)
    for t, g in enumerate(grads, start=1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        params = params - lr * m_hat / (np.sqrt(v_hat) + eps)
    return params


def adam_chainer(params, grads, alpha, beta1, beta2, eps_of_step):
    """chainer/optimizers/adam.py::AdamRule.update_core_cpu with alpha_t = _learning_rate(hp, t)."""
    m = np.zeros_like(params)
    v = np.zeros_like(params)
    for t, g in enumerate(grads, start=1):
        m += (1 - beta1) * (g - m)
        v += (1 - beta2) * (g * g - v)
        alpha_t = alpha * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        params = params - alpha_t / (np.sqrt(v) + eps_of_step(t)) * m
    return params


def test_rescaled_epsilon_gives_pytorchs_adam():
    lr, beta1, beta2, eps = 1e-3, 0.9, 0.999, 1e-8
    params = RNG.normal(size=50)
    # tiny gradients, so that epsilon matters
    grads = [RNG.normal(size=50) * 10.0 ** RNG.uniform(-9, -6, size=50) for _ in range(3)]
    expected = adam_pytorch(params, grads, lr, beta1, beta2, eps)
    paper = adam_chainer(params, grads, lr, beta1, beta2, lambda t: eps * math.sqrt(1 - beta2 ** t))
    np.testing.assert_allclose(paper, expected, rtol=1e-12, atol=1e-15)
    stock = adam_chainer(params, grads, lr, beta1, beta2, lambda t: eps)
    assert not np.allclose(stock - params, expected - params, rtol=1e-3, atol=0)


# --- SGD momentum: Chainer's v = m*v - lr*g; w += v vs PyTorch's v = m*v + g; w -= lr*v -----------

def test_chainer_momentum_equals_plain_momentum_for_a_constant_lr():
    lr, momentum = 0.01, 0.9
    w0 = RNG.normal(size=10)
    grads = [RNG.normal(size=10) for _ in range(4)]
    w_torch, v_torch = w0.copy(), np.zeros(10)
    w_chainer, v_chainer = w0.copy(), np.zeros(10)
    for g in grads:
        v_torch = momentum * v_torch + g
        w_torch = w_torch - lr * v_torch
        v_chainer = momentum * v_chainer - lr * g
        w_chainer = w_chainer + v_chainer
    np.testing.assert_allclose(w_chainer, w_torch, rtol=1e-12, atol=1e-12)


# --- pooling: cover_all=False is floor division, as the other frameworks -------------------------

def pooled_size(size, kernel, stride, pad, cover_all):
    """chainer.utils.conv.get_conv_outsize."""
    if cover_all:
        return (size + pad * 2 - kernel + stride - 1) // stride + 1
    return (size + pad * 2 - kernel) // stride + 1


def test_resnet_stem_pool_needs_cover_all_false():
    assert pooled_size(112, 3, 2, 1, cover_all=False) == 56
    assert pooled_size(112, 3, 2, 1, cover_all=True) == 57
    assert pooled_size(32, 2, 2, 0, cover_all=False) == 16
