"""The layout and optimizer conversions the Chainer rows rely on, checked in numpy on tiny tensors,
then the rules the Chainer cells keep, checked on real cells in Chainer's own environment.

The first part imports no Chainer: Chainer's formulas are written out here as its source (chainer
7.8.1) computes them, so these tests run in the host environment; the parity check runs the real
thing. The last part runs smoke cells with Chainer's cached CPU environment
(tests/support/framework_cells.py; skipped where there is none): the same start (--init canonical) and what
the result records about what ran.
"""
import json
import math

import numpy as np
import pytest

from support.framework_cells import (assert_init_framework_keeps_its_initialisers, expected_first_loss, framework_python,
                                     run_cell, run_snippet)
from support.numpy_reference import gru_step_canonical, sigmoid
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


# --- the real thing, in Chainer's own environment -------------------------------------------------------

# A few steps are enough (nothing is compiled, so there is no retrace to catch): Chainer on NumPy is slow.
GRU_CELL = {"max_train_batches": 2, "max_eval_batches": 1}
CNN_CELL = {"max_train_batches": 4, "max_eval_batches": 1,
            "dropout_conv": 0.0, "dropout_dense": 0.0}  # no dropout: the first loss is numpy's
ONE_STEP = {"max_train_batches": 1, "max_eval_batches": 1}


def test_gru_cell_starts_canonical_and_records_the_kernel_it_ran(tmp_path):
    result, _, _ = run_cell(framework_python("chainer"), "gru", "chainer", tmp_path, overrides=GRU_CELL)
    samples, extras = result["samples"], result["provenance"]["extras"]
    assert result["status"] == "ok" and samples["epoch_steps"] == [GRU_CELL["max_train_batches"]]
    assert extras["init"] == "canonical"
    assert samples["first_loss"] == pytest.approx(expected_first_loss("gru", GRU_CELL), rel=1e-5)
    # read from the graph the first step built: no cuDNN on the CPU, so Chainer's per-step loop
    assert extras["gru_kernel"] == "python-loop: Chainer's n_step_rnn_impl, one step at a time in NumPy (no cuDNN)"
    assert extras["optimizer"] == ("chainer.optimizers.Adam (PaperAdam): written out in NumPy, several array "
                                   "operations per parameter (its CPU update rule)")
    assert extras["tf32"] == "n/a (CPU)"
    assert samples["traces"] == {}  # define-by-run: nothing is traced or compiled


def test_cnn_cell_starts_canonical_and_records_its_update_rule(tmp_path):
    result, _, _ = run_cell(framework_python("chainer"), "cnn", "chainer", tmp_path, overrides=CNN_CELL)
    samples, extras = result["samples"], result["provenance"]["extras"]
    assert result["status"] == "ok" and extras["init"] == "canonical"
    assert samples["first_loss"] == pytest.approx(expected_first_loss("cnn", CNN_CELL), rel=1e-5)
    assert math.isfinite(samples["epoch_losses"][-1])  # sane (status ok: the validity gate passed it too)
    assert extras["optimizer"].startswith("chainer.optimizers.MomentumSGD: written out in NumPy")
    assert "gru_kernel" not in extras


def test_init_framework_keeps_chainers_initialisers(tmp_path):
    assert_init_framework_keeps_its_initialisers("chainer", tmp_path, ONE_STEP)


def test_gru_kernel_is_read_from_the_graph_and_tf32_must_be_off_before_import():
    code = """
import json
import chainer, chainer.functions as F, numpy as np
from chainer.functions.rnn import n_step_rnn
from workloads.runtime import chainer as runtime

class CudnnLike(n_step_rnn.BaseNStepRNN):  # a stand-in for cuDNN's NStepGRU node (no GPU here)
    def __init__(self):
        pass
    def check_type_forward(self, in_types):
        pass
    def forward(self, inputs):
        return inputs[0] * 1,
    def backward(self, inputs, grads):
        return grads

facts = {}
hidden = chainer.Variable(np.ones((1, 3, 4), np.float32))
through_link = F.permutate(CudnnLike()(hidden), np.array([2, 0, 1], np.int32), axis=1, inv=True)
facts["cudnn"] = runtime.gru_kernel_of(through_link)
facts["loop"] = runtime.gru_kernel_of(F.permutate(F.stack([hidden[0] * 2]), np.array([0], np.int32), axis=0))
with chainer.no_backprop_mode():
    facts["no_graph"] = runtime.gru_kernel_of(F.permutate(hidden, np.array([0], np.int32), axis=0))
try:
    runtime.tf32_report()
    facts["without_override"] = "ran"
except RuntimeError as error:
    facts["without_override"] = str(error)
print(json.dumps(facts))
"""
    facts = json.loads(run_snippet(framework_python("chainer"), code).splitlines()[-1])
    assert facts["cudnn"] == "cudnn: chainer.functions CudnnLike (cuDNN's fused RNN)"
    assert facts["loop"].startswith("python-loop: ")
    assert facts["no_graph"] is None
    assert "NVIDIA_TF32_OVERRIDE=0 set before Chainer is imported" in facts["without_override"]
    with_override = run_snippet(framework_python("chainer"), "from workloads.runtime import chainer as runtime\n"
                                "print(runtime.tf32_report())", env={"NVIDIA_TF32_OVERRIDE": "0"})
    assert with_override.strip().startswith("off: NVIDIA_TF32_OVERRIDE=0 in the process environment")
