"""The layout, model and optimizer facts the MindSpore rows rely on, checked in numpy on tiny arrays.

No MindSpore import: what the MindSpore files compute (and what mindspore 2.10.0 computes, as its
source and operator documentation write it) is restated here in numpy and compared with the
canonical (PyTorch) computation, so these tests run in the host environment; the parity check
runs the real thing. The fairness rules (the same start, trace counts in each mode, the oneDNN option, the
built-in Adam, the records) are checked in the cached MindSpore environment the local backend built
(skipped where there is none).
"""
import math
import re
from pathlib import Path

import numpy as np
import pytest

from support.framework_cells import expected_first_loss, run_script
from support.numpy_reference import assert_pytorchs_momentum, conv_nchw_oihw, gru_step_canonical, same_padding, sigmoid
from workloads.common import canonical, hyperparams

RNG = np.random.default_rng(0)
ROOT = Path(__file__).resolve().parents[2]


# --- convolutions and pooling: explicit symmetric padding ---------------------------------------

@pytest.mark.parametrize("size, kernel, stride", [(224, 7, 2), (56, 3, 2), (112, 3, 2), (8, 3, 2)])
def test_strided_same_padding_is_not_pytorchs_so_the_files_pad_explicitly(size, kernel, stride):
    """resnet50/mindspore.py uses pad_mode='pad', padding=k//2; 'same' with stride 2 pads one less before."""
    assert same_padding(size, kernel, stride) != (kernel // 2, kernel // 2)
    x, weights = RNG.normal(size=(1, 2, 8, 8)), RNG.normal(size=(3, 2, 3, 3))
    explicit = conv_nchw_oihw(x, weights, stride=2, pad=1)
    same = conv_nchw_oihw(x, weights, stride=2, pads=(same_padding(8, 3, 2),) * 2)
    assert same.shape == explicit.shape and not np.allclose(same, explicit)


def test_stride_one_same_padding_equals_padding_one():
    """For the CNN's 3x3 stride-1 convolutions 'same' would match too; the file pads explicitly all the same."""
    assert same_padding(32, 3, 1) == (1, 1)


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
    def apply_momentum(weights, accumulation, gradient, lr, momentum):
        """nn.Momentum (ApplyMomentum): v = v*u + g, p -= lr*v."""
        accumulation = accumulation * momentum + gradient
        return weights - lr * accumulation, accumulation

    assert_pytorchs_momentum(apply_momentum)


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
        else:  # ops.Adam (ApplyAdam), behind nn.Adam and experimental.optim.Adam (its documented formula)
            epsilon = eps * math.sqrt(bias_correction2) if form == "ops, epsilon rescaled" else eps  # runtime.Adam's
            m = m + (g - m) * (1 - b1)
            v = v + (g * g - v) * (1 - b2)
            w = w - lr * math.sqrt(bias_correction2) / bias_correction1 * m / (np.sqrt(v) + epsilon)
    return w


def test_ops_adam_with_rescaled_epsilon_is_pytorchs_and_with_plain_epsilon_is_not():
    """gru/mindspore.py uses runtime.Adam: ops.Adam handed eps * sqrt(1 - beta2^t), which is PyTorch's
    epsilon-after-sqrt(v-hat); ops.Adam with the plain epsilon (nn.Adam) adds it to sqrt(v)."""
    s = hyperparams.settings("gru", "full")
    gradients = RNG.normal(size=(3, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])
    torch_form = adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, "torch")
    for form in ("mint", "ops, epsilon rescaled"):
        np.testing.assert_allclose(adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, form),
                                   torch_form, rtol=1e-10)
    ops_form = adam_steps(gradients, s.learning_rate, s.beta1, s.beta2, s.epsilon, "ops")
    assert not np.allclose(ops_form[:3], torch_form[:3], rtol=1e-3)  # tiny gradients: epsilon dominates
    source = (ROOT / "workloads" / "gru" / "mindspore.py").read_text()
    assert "runtime.Adam(" in source and "nn.Adam(" not in source
    runtime_source = (ROOT / "workloads" / "runtime" / "mindspore" / "__init__.py").read_text()
    assert "epsilon = self.eps * ops.sqrt(1.0 - beta2_power)" in runtime_source


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
        assert sections == ["model", "canonical weights", "run"], (workload, sections)
        assert "MATCHED = (" in source and "def load_canonical(" in source
        # run and parity are the scaffold's (workloads/common/scaffold.py), filled in by the run section's class
        assert "run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity" in source


def test_the_runtime_sets_onednn_from_the_option_not_with_setdefault():
    """An inherited ONEDNN_MAX_CPU_ISA must not win over the option (it did with os.environ.setdefault)."""
    assert "setdefault" not in (ROOT / "workloads" / "runtime" / "mindspore" / "__init__.py").read_text()
    source = (ROOT / "workloads" / "runtime" / "mindspore" / "onednn.py").read_text()
    assert "setdefault" not in source
    assert 'os.environ["ONEDNN_MAX_CPU_ISA"] = ONEDNN_ISA[chosen]' in source
    assert 'ONEDNN_ISA = {"avx2": "AVX2", "all": "ALL"}' in source
    from workloads.common import options

    assert options.declared("mindspore")["onednn_max_cpu_isa"].values == ("avx2", "all")


# --- fairness rules, run in the cached MindSpore environment (the local backend's; never built here) --

def in_mindspore(script: str, **environment) -> tuple:
    """Run a script in MindSpore's environment (support.framework_cells.run_script)."""
    return run_script("mindspore", script, environment)


# per mode: what mindspore.jit compiles (the functions handed to it), what is counted while compiling,
# and the execution mode MindSpore reports back
COMPILED = {"graph": (["step", "correct_in"], {"train_step": 1, "eval_step": 1}, "GRAPH_MODE"),
            "eager": ([], {}, "PYNATIVE_MODE")}


@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_twenty_steps_compile_each_step_once_from_the_canonical_start(mode):
    """The trace-once rule: in graph mode 2 epochs x 10 training steps and 2 evaluation batches of one
    shape compile the training step and the evaluation step once each (samples.traces, counted while
    MindSpore compiles); in PyNative mode (eager) no step is handed to mindspore.jit and nothing is
    counted. Either way the cell starts from the canonical weights (run() loads them as parity() does:
    without dropout, the first loss is numpy's on the first batch) and records init, the optimizer,
    the mode and oneDNN's instruction set."""
    found, _ = in_mindspore(f"""
import mindspore as ms
jitted = []
real_jit = ms.jit
ms.jit = lambda function, *arguments, **keywords: jitted.append(function.__name__) or real_jit(function, *arguments, **keywords)
module = importlib.import_module("workloads.cnn.mindspore")
loaded = []
original = module.load_canonical
def spy(network, params):
    loaded.append(float(np.abs(params["dense1.kernel"]).sum()))
    return original(network, params)
module.load_canonical = spy
run = cell_run("cnn", mode="{mode}", epochs=2, max_train_batches=10, max_eval_batches=2, dropout_conv=0.0,
               dropout_dense=0.0, batch_size=16)
module.run(run)
result = run.finish()
say({{"traces": result.samples.traces, "steps": result.samples.epoch_steps, "status": result.status,
     "loaded": loaded, "canonical": float(np.abs(canonical.parameters("cnn")["dense1.kernel"]).sum()),
     "extras": result.provenance.extras, "jitted": jitted, "first_loss": result.samples.first_loss}})
""")
    jitted, traces, execution = COMPILED[mode]
    assert found["status"] == "ok" and found["steps"] == [10, 10]
    assert found["jitted"] == jitted and found["traces"] == traces
    assert found["loaded"] == [found["canonical"]]
    no_dropout = {"epochs": 2, "max_train_batches": 10, "max_eval_batches": 2, "dropout_conv": 0.0, "dropout_dense": 0.0,
                  "batch_size": 16}  # one shape is all the trace-once rule needs; a small batch is cheaper
    assert found["first_loss"] == pytest.approx(expected_first_loss("cnn", no_dropout), rel=1e-5)
    extras = found["extras"]
    assert extras["init"] == "canonical" and "ApplyMomentum" in extras["optimizer"]
    assert extras["mode"].startswith(f"{mode}: ") and extras["execution"].startswith(execution + " ")
    assert extras["tf32"] == "n/a (CPU)" and extras["option.onednn_max_cpu_isa"] == "avx2"


def test_pynative_mode_hands_mindspore_jit_nothing_and_runs_the_gru_loop_from_python():
    """Eager is PyNative mode: the policy passes every step through as it is (graph mode wraps it in
    mindspore.jit), the trace counter counts nothing (a constexpr runs on every PyNative call), ResNet-50's
    forward is never compiled, and the GRU's kernel record says its cell loop runs from Python."""
    found, _ = in_mindspore("""
import mindspore as ms
from workloads.runtime import mindspore as runtime
graph_policy = runtime.select_device(cell_run("cnn", mode="graph"))
def step(x):
    return x * 2
graph_wraps = graph_policy.compiled(step) is not step
run = cell_run("cnn", mode="eager")
policy = runtime.select_device(run)
note_trace = runtime.trace_counter(run, policy)
for _ in range(3):
    policy.compiled(step)(ms.Tensor(np.ones(2, np.float32))).asnumpy()
    note_trace("step")
module = importlib.import_module("workloads.resnet50.mindspore")
resnet = cell_run("resnet50", mode="eager", batch_size=2, batches=2, warmup_batches=1)
module.run(resnet)
result = resnet.finish()
say({"graph wraps": graph_wraps, "eager passes": policy.compiled(step) is step, "traces": run.result.samples.traces,
     "context": ms.get_context("mode") == ms.PYNATIVE_MODE, "kernel": runtime.describe_gru_kernel(ms.nn.GRU(4, 3)),
     "resnet": [result.status, result.samples.traces, result.provenance.extras["execution"]]})
""")
    assert found["graph wraps"] and found["eager passes"] and found["context"]
    assert found["traces"] == {}
    assert found["resnet"][:2] == ["ok", {}] and found["resnet"][2].startswith("PYNATIVE_MODE ")
    assert found["kernel"].startswith("python-loop: ") and "run op by op from Python (PyNative)" in found["kernel"]


def test_a_new_input_shape_compiles_again_and_the_counter_sees_it():
    """The counter counts compilations, not calls: a second batch shape is a second trace (so a retrace
    would show), ResNet-50's forward compiles once for its one batch shape, and --init framework
    leaves MindSpore's initialisers (no canonical load)."""
    found, _ = in_mindspore("""
import mindspore as ms
from workloads.runtime import mindspore as runtime
run = cell_run("cnn", init="framework")
policy = runtime.select_device(run)
note_trace = runtime.trace_counter(run, policy)

@ms.jit
def double(x):
    note_trace("double")
    return x * 2

for rows in (4, 4, 4, 3, 3, 4):
    double(ms.Tensor(np.ones((rows, 2), np.float32))).asnumpy()
traces = dict(run.result.samples.traces)

module = importlib.import_module("workloads.resnet50.mindspore")
loaded = []
module.load_canonical = lambda *arguments: loaded.append(1)
resnet = cell_run("resnet50", init="framework", batch_size=2, batches=3, warmup_batches=2)
module.run(resnet)
result = resnet.finish()
say({"traces": traces, "resnet traces": result.samples.traces, "status": result.status, "loaded": loaded,
     "init": result.provenance.extras["init"], "batches": len(result.samples.batch_times_s)})
""")
    assert found["traces"] == {"double": 2}
    assert found["resnet traces"] == {"forward": 1} and found["status"] == "ok" and found["batches"] == 3
    assert found["loaded"] == [] and found["init"] == "framework"


@pytest.mark.parametrize("option, expected", [("avx2", "AVX2"), ("all", "ALL")])
def test_the_onednn_option_beats_an_inherited_value_and_oneDNN_reports_it(option, expected):
    """ONEDNN_MAX_CPU_ISA=SSE41 inherited from the environment: the option's value is set all the same,
    before the first oneDNN primitive, and oneDNN itself (its verbose log, and the effective instruction
    set read back from its library) runs what the option says."""
    found, stdout = in_mindspore(f"""
import mindspore as ms
from mindspore import nn
from workloads.runtime import mindspore as runtime
run = cell_run("cnn", options={{"onednn_max_cpu_isa": "{option}"}})
runtime.select_device(run)
convolution = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1)
convolution(ms.Tensor(np.ones((1, 3, 8, 8), np.float32))).asnumpy()
say(run.result.provenance.extras)
""", ONEDNN_MAX_CPU_ISA="SSE41", ONEDNN_VERBOSE="1")
    assert found["onednn_max_cpu_isa"].startswith(expected)
    assert found["onednn_max_cpu_isa_inherited"] == "SSE41 (overridden by the option)"
    [isa] = [line.split("isa:", 1)[1] for line in stdout.splitlines() if "info,cpu,isa:" in line]
    assert "SSE4.1" not in isa and not found["onednn_effective_isa"].startswith("SSE41")
    if option == "avx2":
        assert isa == "Intel AVX2" and found["onednn_effective_isa"] == "AVX2 (0x7)"


def test_built_in_adam_is_pytorchs_adam_on_the_real_ops_and_the_records_say_what_ran():
    """runtime.Adam (ops.Adam, epsilon rescaled) against PyTorch's formula in float64 on gradients from
    1e-9 to 1, in a compiled step; nn.GRU's kernel on the CPU is the unrolled cell loop; to_host hands
    numpy over and leaves run.sync nothing to wait for."""
    found, _ = in_mindspore("""
import mindspore as ms
from workloads.runtime import mindspore as runtime
run = cell_run("gru")
runtime.select_device(run)
TINY = np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0], np.float32)
weights = [ms.Parameter(ms.Tensor(np.full(6, 0.5, np.float32)), name=f"w{i}") for i in range(2)]
adam = runtime.Adam(weights, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

@ms.jit
def step(g0, g1):
    adam((g0, g1))
    return g0

for sign in (1.0, -0.5, 2.0, 1.0):
    step(ms.Tensor(TINY * sign), ms.Tensor(TINY * sign * 2)).asnumpy()
tracked = runtime.track(ms.Tensor(np.ones(3, np.float32)))
array = runtime.to_host(tracked)
say({"weights": [w.asnumpy().tolist() for w in weights],
     "kernel": runtime.describe_gru_kernel(ms.nn.GRU(4, 3)), "optimizer": runtime.describe_optimizer(adam),
     "host": type(array).__name__, "tracked after": runtime._last_output[0] is None})
""")
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    for scale, weights in zip((1.0, 2.0), found["weights"]):
        w, m, v = np.full(6, 0.5), np.zeros(6), np.zeros(6)
        for step, sign in enumerate((1.0, -0.5, 2.0, 1.0), start=1):
            g = np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0]) * sign * scale
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            w = w - lr / (1 - b1 ** step) * m / (np.sqrt(v) / math.sqrt(1 - b2 ** step) + eps)
        np.testing.assert_allclose(weights, w, rtol=0, atol=1e-7)
    assert found["kernel"].startswith("python-loop: ") and "ApplyAdam" in found["optimizer"]
    assert found["host"] == "ndarray" and found["tracked after"]
