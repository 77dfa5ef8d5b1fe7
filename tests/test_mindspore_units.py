"""The layout, model and optimizer facts the MindSpore rows rely on, checked in numpy on tiny arrays.

No MindSpore import: what the MindSpore files compute (and what mindspore 2.10.0 computes, as its
source and operator documentation write it) is restated here in numpy and compared with the
canonical (PyTorch) computation, so these tests run in the host environment; the parity check
runs the real thing.
"""
import math
import re
from pathlib import Path

import numpy as np
import pytest

from numpy_reference import conv_nchw_oihw, gru_step_canonical, sigmoid
from workloads.common import canonical, hyperparams

RNG = np.random.default_rng(0)
ROOT = Path(__file__).resolve().parent.parent


# --- convolutions and pooling: explicit symmetric padding ---------------------------------------

def mindspore_same_padding(size, kernel, stride):
    """nn.Conv2d(pad_mode='same'), its default: the padding the output size needs, the odd one after."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("size, kernel, stride", [(224, 7, 2), (56, 3, 2), (112, 3, 2), (8, 3, 2)])
def test_strided_same_padding_is_not_pytorchs_so_the_files_pad_explicitly(size, kernel, stride):
    """resnet50/mindspore.py uses pad_mode='pad', padding=k//2; 'same' with stride 2 pads one less before."""
    assert mindspore_same_padding(size, kernel, stride) != (kernel // 2, kernel // 2)
    x, weights = RNG.normal(size=(1, 2, 8, 8)), RNG.normal(size=(3, 2, 3, 3))
    explicit = conv_nchw_oihw(x, weights, stride=2, pad=1)
    same = conv_nchw_oihw(x, weights, stride=2, pads=(mindspore_same_padding(8, 3, 2),) * 2)
    assert same.shape == explicit.shape and not np.allclose(same, explicit)


def test_stride_one_same_padding_equals_padding_one():
    """For the CNN's 3x3 stride-1 convolutions 'same' would match too; the file pads explicitly all the same."""
    assert mindspore_same_padding(32, 3, 1) == (1, 1)


def test_max_pool_padding_after_a_relu_is_invisible():
    """The stem's max pool (3x3/2, padding 1) follows a ReLU: a zero pad and PyTorch's -inf pad agree."""
    x = np.maximum(RNG.normal(size=(7, 7)), 0.0)
    pool = lambda padded: np.array([[padded[i:i + 3, j:j + 3].max() for j in range(0, 7, 2)]  # noqa: E731
                                    for i in range(0, 7, 2)])
    np.testing.assert_array_equal(pool(np.pad(x, 1, constant_values=0.0)), pool(np.pad(x, 1, constant_values=-np.inf)))


def test_nchw_flatten_keeps_dense1_canonical_and_dense_weights_are_out_in():
    """nn.Flatten on NCHW is the canonical (C, H, W) order; nn.Dense computes x @ W.T with W (out, in)."""
    features, kernel, bias = RNG.normal(size=(2, 4, 3, 3)), RNG.normal(size=(4 * 3 * 3, 5)), RNG.normal(size=5)
    expected = features.reshape(2, -1) @ kernel + bias
    weight = canonical.dense_to_out_in(kernel)
    assert weight.shape == (5, 36)
    np.testing.assert_allclose(features.reshape(2, -1) @ weight.T + bias, expected, rtol=1e-12)


# --- batch norm ---------------------------------------------------------------------------------

def test_mindspore_batch_norm_momentum_is_one_minus_pytorchs():
    """nn.BatchNorm2d: moving = moving*momentum + batch*(1-momentum); PyTorch: (1-m)*moving + m*batch."""
    moving, batch_statistic = RNG.normal(size=4), RNG.normal(size=4)
    mindspore_form = moving * 0.9 + batch_statistic * (1 - 0.9)
    pytorch_form = (1 - 0.1) * moving + 0.1 * batch_statistic
    np.testing.assert_allclose(mindspore_form, pytorch_form, rtol=1e-12)
    source = (ROOT / "workloads" / "resnet50" / "mindspore.py").read_text()
    assert "momentum=0.9" in source and "eps=canonical.BN_EPSILON" in source


def test_batch_norm_inference_with_moving_statistics():
    """set_train(False): (x - moving_mean) / sqrt(moving_variance + eps) * gamma + beta, per channel."""
    x = RNG.normal(size=(2, 3, 4, 4))
    gamma, beta, mean, var = RNG.uniform(0.5, 1.5, 3), RNG.normal(size=3), RNG.normal(size=3), RNG.uniform(0.5, 1.5, 3)
    per_channel = lambda a: a.reshape(1, 3, 1, 1)  # noqa: E731
    expected = (x - per_channel(mean)) / np.sqrt(per_channel(var) + canonical.BN_EPSILON) * per_channel(gamma) \
        + per_channel(beta)
    folded = x * per_channel(gamma / np.sqrt(var + canonical.BN_EPSILON)) \
        + per_channel(beta - mean * gamma / np.sqrt(var + canonical.BN_EPSILON))
    np.testing.assert_allclose(folded, expected, rtol=1e-10, atol=1e-12)


# --- GRU ------------------------------------------------------------------------------------------

def gru_cell_mindspore(inputs, hidden, w_ih, w_hh, b_ih, b_hh):
    """mindspore/nn/layer/rnn_cells.py::_gru_cell (what nn.GRU loops over on the CPU), weights (3H, in)."""
    gi = inputs @ w_ih.T + b_ih
    gh = hidden @ w_hh.T + b_hh
    i_r, i_i, i_n = np.split(gi, 3, axis=1)
    h_r, h_i, h_n = np.split(gh, 3, axis=1)
    resetgate = sigmoid(i_r + h_r)
    inputgate = sigmoid(i_i + h_i)
    newgate = np.tanh(i_n + resetgate * h_n)
    return newgate + inputgate * (hidden - newgate)


def test_mindspore_gru_cell_with_transposed_canonical_weights_is_the_canonical_step():
    features, hidden, batch = 5, 4, 3
    kernel, recurrent_kernel = RNG.normal(size=(features, 3 * hidden)), RNG.normal(size=(hidden, 3 * hidden))
    input_bias, recurrent_bias = RNG.normal(size=(2, 3 * hidden))
    x, h = RNG.normal(size=(batch, features)), RNG.normal(size=(batch, hidden))
    w_ih, w_hh = canonical.dense_to_out_in(kernel), canonical.dense_to_out_in(recurrent_kernel)  # load_canonical
    assert w_ih.shape == (3 * hidden, features) and w_hh.shape == (3 * hidden, hidden)
    np.testing.assert_allclose(gru_cell_mindspore(x, h, w_ih, w_hh, input_bias, recurrent_bias),
                               gru_step_canonical(x, h, kernel, recurrent_kernel, input_bias, recurrent_bias),
                               rtol=1e-12, atol=1e-12)


def test_time_major_tokens_last_step_is_the_batch_major_last_step():
    """The embedding of tokens.T is the batch-major embedding transposed to (time, batch, features)."""
    table, tokens = RNG.normal(size=(10, 3)), RNG.integers(0, 10, size=(2, 5))
    np.testing.assert_array_equal(table[tokens.T], table[tokens].transpose(1, 0, 2))
    np.testing.assert_array_equal(table[tokens.T][-1], table[tokens][:, -1])


def test_gru_parameter_count_has_two_bias_vectors_per_gate():
    """nn.GRU(has_bias=True) holds weight_ih, weight_hh, bias_ih, bias_hh: the reference model's count."""
    s = hyperparams.settings("gru", "full")
    gru = 3 * s.hidden_size * (s.embedding_size + s.hidden_size) + 2 * 3 * s.hidden_size
    total = s.vocabulary * s.embedding_size + gru + s.hidden_size * s.classes + s.classes
    assert total == s.parameter_count


# --- optimizers (mindspore 2.10.0 as its source computes) -----------------------------------------

def test_nn_momentum_is_pytorchs_plain_momentum():
    """nn.Momentum (ApplyMomentum): v = v*u + g, p -= lr*v; PyTorch: v = m*v + g, w -= lr*v."""
    lr, momentum = 0.01, 0.9
    w_mindspore = w_torch = RNG.normal(size=5)
    accumulation = v = np.zeros(5)
    for g in RNG.normal(size=(6, 5)):
        accumulation = accumulation * momentum + g
        w_mindspore = w_mindspore - lr * accumulation
        v = momentum * v + g
        w_torch = w_torch - lr * v
    np.testing.assert_allclose(w_mindspore, w_torch, rtol=1e-12)


def adam_steps(gradients, lr, b1, b2, eps, form):
    """Adam as three sources write it, over a sequence of gradients."""
    w = m = v = np.zeros(gradients.shape[1])
    for step, g in enumerate(gradients, start=1):
        bias_correction1, bias_correction2 = 1 - b1 ** step, 1 - b2 ** step
        if form == "torch":  # torch.optim.adam._single_tensor_adam
            m = m * b1 + g * (1 - b1)
            v = v * b2 + g * g * (1 - b2)
            w = w - lr / bias_correction1 * m / (np.sqrt(v) / math.sqrt(bias_correction2) + eps)
        elif form == "mint":  # mindspore/mint/optim/adam.py::_run_optim_adamw_opt
            m = m * b1 + (1 - b1) * g
            v = v * b2 + g * g * (1 - b2)
            denominator = np.sqrt(v) / math.sqrt(bias_correction2) + eps
            w = w + (-(lr / bias_correction1)) * (m / denominator)
        else:  # ops.Adam, behind nn.Adam and experimental.optim.Adam (its documented formula)
            m = m + (g - m) * (1 - b1)
            v = v + (g * g - v) * (1 - b2)
            w = w - lr * math.sqrt(bias_correction2) / bias_correction1 * m / (np.sqrt(v) + eps)
    return w


def test_mint_adam_is_pytorchs_and_ops_adam_is_not():
    """gru/mindspore.py uses mint.optim.Adam: epsilon after sqrt(v-hat). ops.Adam adds it to sqrt(v)."""
    s = hyperparams.settings("gru", "full")
    gradients = RNG.normal(size=(3, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])
    torch_form = adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, "torch")
    np.testing.assert_allclose(adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, "mint"),
                               torch_form, rtol=1e-10)
    ops_form = adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, "ops")
    assert not np.allclose(ops_form[:3], torch_form[:3], rtol=1e-3)  # tiny gradients: epsilon dominates
    source = (ROOT / "workloads" / "gru" / "mindspore.py").read_text()
    assert "mint.optim.Adam(" in source and "nn.Adam(" not in source


def test_mean_softmax_cross_entropy_with_integer_labels():
    """nn.CrossEntropyLoss() (reduction 'mean') on int32 labels = PyTorch's CrossEntropyLoss."""
    logits, labels = RNG.normal(size=(4, 10)) * 5, np.array([0, 3, 9, 3], dtype=np.int32)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(-log_softmax[np.arange(4), labels].mean(),
                               -np.log(probabilities[np.arange(4), labels]).mean(), rtol=1e-12)


def test_int64_labels_and_tokens_become_int32_without_changing_them():
    s = hyperparams.settings("gru", "full")
    tokens = np.arange(s.vocabulary, dtype=np.int64)
    np.testing.assert_array_equal(tokens.astype(np.int32), tokens)


# --- the files themselves -------------------------------------------------------------------------

def test_workload_files_keep_the_common_sections_and_a_matched_list():
    for workload in hyperparams.WORKLOADS:
        source = (ROOT / "workloads" / workload / "mindspore.py").read_text()
        sections = re.findall(r"^# --- (\w[\w ]*?) -*$", source, flags=re.MULTILINE)
        assert sections == ["model", "canonical weights", "run", "parity"], (workload, sections)
        assert "MATCHED = (" in source and "def load_canonical(" in source and "def parity(" in source


def test_cpu_runs_cap_onednn_at_avx2_unless_told_otherwise():
    """runtime/mindspore.py: oneDNN's reference convolution is avoided with setdefault, so a user's value wins."""
    source = (ROOT / "workloads" / "runtime" / "mindspore.py").read_text()
    assert 'ONEDNN_ISA_CAP = "AVX2"' in source
    assert 'os.environ.setdefault("ONEDNN_MAX_CPU_ISA", ONEDNN_ISA_CAP)' in source
