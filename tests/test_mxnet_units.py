"""The layout and optimizer facts the MXNet workloads rely on, checked with numpy only.

MXNet itself is not needed (workloads.runtime.mxnet imports without it; only its numpy helpers are
used here). Each test states, in numpy, what an MXNet operator computes in the layout the workload
files use, and compares it with the canonical computation.
"""
import math

import numpy as np
import numpy_reference

from workloads.common import canonical
from workloads.runtime import mxnet as mxnet_runtime

rng = np.random.default_rng(0)


def tiny_gru_params(input_size=5, hidden=4, vocabulary=11, classes=2):
    return {
        "embedding.embeddings": rng.normal(size=(vocabulary, input_size)).astype(np.float32),
        "gru.kernel": rng.normal(size=(input_size, 3 * hidden)).astype(np.float32),
        "gru.recurrent_kernel": rng.normal(size=(hidden, 3 * hidden)).astype(np.float32),
        "gru.input_bias": rng.normal(size=3 * hidden).astype(np.float32),
        "gru.recurrent_bias": rng.normal(size=3 * hidden).astype(np.float32),
        "dense.kernel": rng.normal(size=(hidden, classes)).astype(np.float32),
        "dense.bias": rng.normal(size=classes).astype(np.float32),
    }


def mxnet_rnn_gru(packed, inputs, hidden):
    """What mx.sym.RNN(mode="gru", num_layers=1) computes from its packed vector, TNC input, h0 = 0.

    MXNet's documented layout: every weight, then every bias; W_i2h (3H, in) then W_h2h (3H, H),
    then b_i2h (3H,) and b_h2h (3H,); the three gate blocks of each in the order r, z, n; the
    reset gate multiplies (h W_hn^T + b_hn), after the recurrent matmul (cuDNN's form).
    """
    sigmoid = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    steps, batch, input_size = inputs.shape
    offsets = np.cumsum([0, 3 * hidden * input_size, 3 * hidden * hidden, 3 * hidden, 3 * hidden])
    w_i2h = packed[offsets[0]:offsets[1]].reshape(3 * hidden, input_size)
    w_h2h = packed[offsets[1]:offsets[2]].reshape(3 * hidden, hidden)
    b_i2h, b_h2h = packed[offsets[2]:offsets[3]], packed[offsets[3]:offsets[4]]
    h = np.zeros((batch, hidden))
    outputs = []
    for t in range(steps):
        x_r, x_z, x_n = np.split(inputs[t] @ w_i2h.T + b_i2h, 3, axis=-1)
        h_r, h_z, h_n = np.split(h @ w_h2h.T + b_h2h, 3, axis=-1)
        r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        h = (1 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs)  # (time, batch, hidden)


def test_gru_packed_vector_has_the_rnn_operators_size_and_round_trips():
    params = tiny_gru_params()
    packed = mxnet_runtime.gru_packed_parameters(params)
    hidden, input_size = 4, 5
    assert packed.dtype == np.float32 and packed.ndim == 1
    assert packed.size == 3 * hidden * (input_size + hidden) + 2 * 3 * hidden
    back = mxnet_runtime.gru_unpack_parameters(packed, input_size, hidden)
    for name, value in back.items():
        np.testing.assert_array_equal(value, params[name])


def test_gru_packed_vector_size_matches_the_workloads_parameter_count():
    params = canonical.parameters("gru")
    packed = mxnet_runtime.gru_packed_parameters(params)
    other = sum(params[n].size for n in ("embedding.embeddings", "dense.kernel", "dense.bias"))
    assert packed.size + other == canonical.parameter_count(params) == 3_818_302


def test_gru_through_the_packed_vector_matches_the_canonical_gru():
    params = tiny_gru_params()
    tokens = rng.integers(0, 11, size=(3, 7))
    packed = mxnet_runtime.gru_packed_parameters(params).astype(np.float64)
    embedded = params["embedding.embeddings"][tokens.T]  # transpose to time-major (TNC), as the workloads do
    outputs = mxnet_rnn_gru(packed, embedded, hidden=4)
    logits = outputs[-1] @ canonical.dense_to_out_in(params["dense.kernel"]).T + params["dense.bias"]
    np.testing.assert_allclose(logits, numpy_reference.gru_logits(params, tokens), rtol=1e-5, atol=1e-6)


def test_scaled_epsilon_makes_mxnets_adam_pytorchs():
    """PyTorchAdam = MXNet's adam_update with lr*sqrt(c2)/c1 and epsilon*sqrt(c2)."""
    lr, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
    w_torch = w_mx = w_stock = rng.normal(size=50) * 1e-3
    m = v = np.zeros(50)
    for t in range(1, 4):
        grad = rng.normal(size=50) * 10.0 ** rng.integers(-9, -3, size=50)  # tiny gradients show epsilon
        m, v = beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad ** 2
        c1, c2 = 1 - beta1 ** t, 1 - beta2 ** t
        # PyTorch: w -= lr * m_hat / (sqrt(v_hat) + eps)
        w_torch = w_torch - lr * (m / c1) / (np.sqrt(v / c2) + epsilon)
        # MXNet's adam_update kernel: w -= lr_t * m / (sqrt(v) + eps_t)
        w_mx = w_mx - lr * math.sqrt(c2) / c1 * m / (np.sqrt(v) + epsilon * math.sqrt(c2))
        w_stock = w_stock - lr * math.sqrt(c2) / c1 * m / (np.sqrt(v) + epsilon)
    np.testing.assert_allclose(w_mx, w_torch, rtol=1e-12, atol=1e-15)
    assert np.abs(w_stock - w_torch).max() > 1e-9  # stock MXNet differs where gradients are tiny


def test_mxnet_momentum_equals_plain_momentum_at_constant_lr():
    """MXNet sgd_mom_update: v = m*v - lr*g; w += v. PyTorch: b = m*b + g; w -= lr*b."""
    lr, momentum = 0.01, 0.9
    w_mx = w_torch = rng.normal(size=20)
    v, b = np.zeros(20), np.zeros(20)
    for _ in range(3):
        grad = rng.normal(size=20)
        v = momentum * v - lr * grad
        w_mx = w_mx + v
        b = momentum * b + grad
        w_torch = w_torch - lr * b
    np.testing.assert_allclose(w_mx, w_torch, rtol=1e-12)
