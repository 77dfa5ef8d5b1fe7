"""The layout and optimizer facts the MXNet workloads rely on, checked with numpy, then the rules the
MXNet cells keep, checked on real cells in MXNet's own environment.

The first part needs no MXNet (workloads.runtime.mxnet imports without it; only its numpy helpers
are used): each test states, in numpy, what an MXNet operator computes in the layout the workload
files use, and compares it with the canonical computation. The last part runs smoke cells of the
Gluon (mxnet) and Module (mxnet-module) rows with MXNet's cached CPU environment
(tests/support/framework_cells.py; skipped where there is none): the same start (--init canonical), one
graph build over 20 training steps (none in the eager mode), and what the result records about what ran.
"""
import json
import math
from pathlib import Path

import numpy as np
from support import numpy_reference
import pytest
from support.framework_cells import (assert_init_framework_keeps_its_initialisers, expected_first_loss, framework_python,
                                     run_cell, run_snippet)

from workloads.common import canonical
from workloads.runtime import mxnet as mxnet_runtime

ROOT = Path(__file__).resolve().parents[2]
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


# --- the real thing, in MXNet's own environment ---------------------------------------------------------

STEPS = 20  # at least 20 training steps: a graph rebuilt after the first would show in samples.traces
GRU_CELL = {"max_train_batches": STEPS, "max_eval_batches": 1}
# no dropout, so that the first step's loss is numpy's on the canonical weights (Dropout(0) is the identity)
CNN_CELL = {"max_train_batches": STEPS, "max_eval_batches": 1, "dropout_conv": 0.0, "dropout_dense": 0.0}
ONE_STEP = {"max_train_batches": 1, "max_eval_batches": 1}
# what each row counts in samples.traces: Gluon's graph builds, the Module's bound executors
TRACED = {"mxnet": "hybrid_forward", "mxnet-module": "train_step"}
SGD_OPERATORS = ["mxnet.optimizer.optimizer:multi_sgd_mom_update", "mxnet.optimizer.optimizer:sgd_mom_update"]


@pytest.mark.parametrize("framework", ["mxnet", "mxnet-module"])
def test_gru_cell_starts_canonical_builds_its_graph_once_and_records_what_ran(tmp_path, framework):
    result, counts, stdout = run_cell(framework_python(framework), "gru", framework, tmp_path, overrides=GRU_CELL,
                                      count=["mxnet.ndarray:adam_update"], env={"DNNL_VERBOSE": "1"})
    samples, extras = result["samples"], result["provenance"]["extras"]
    assert result["status"] == "ok" and samples["epoch_steps"] == [STEPS]
    assert samples["traces"] == {TRACED[framework]: 1}  # one graph for every step: nothing retraced
    # the same start: the first step's loss is numpy's on the canonical weights and the same first batch
    assert extras["init"] == "canonical"
    assert samples["first_loss"] == pytest.approx(expected_first_loss("gru", GRU_CELL), rel=1e-5)
    # the optimizer named is the operator that ran: one adam_update per parameter per step
    assert extras["optimizer"].startswith("mx.nd.adam_update (built-in fused op")
    parameters = 7 if framework == "mxnet" else 4  # Gluon splits the GRU's weights; mx.sym.RNN packs them in one
    assert counts["mxnet.ndarray:adam_update"] == STEPS * parameters
    # the GRU kernel named is the one oneDNN itself reports running (DNNL_VERBOSE traces each primitive)
    assert extras["gru_kernel"].startswith("fused-cpu: oneDNN GRU primitive")
    assert "dnnl_verbose,exec,cpu,rnn," in stdout
    assert extras["tf32"] == "n/a (CPU)"


def test_gru_kernel_record_follows_mxnet_when_onednns_rnn_is_off(tmp_path):
    result, _, stdout = run_cell(framework_python("mxnet"), "gru", "mxnet", tmp_path, overrides=ONE_STEP,
                                 env={"DNNL_VERBOSE": "1", "MXNET_USE_MKLDNN_RNN": "0"})
    assert result["status"] == "ok"
    assert result["provenance"]["extras"]["gru_kernel"].startswith("fused-cpu: MXNet's own C++ GRU kernel")
    assert "dnnl_verbose,exec,cpu,rnn," not in stdout


@pytest.mark.parametrize("framework", ["mxnet", "mxnet-module"])
def test_cnn_cell_starts_canonical_builds_its_graph_once_and_records_its_fused_sgd(tmp_path, framework):
    result, counts, _ = run_cell(framework_python(framework), "cnn", framework, tmp_path, overrides=CNN_CELL,
                                 count=SGD_OPERATORS)
    samples, extras = result["samples"], result["provenance"]["extras"]
    assert result["status"] == "ok" and samples["epoch_steps"] == [STEPS]
    assert samples["traces"] == {TRACED[framework]: 1}
    assert extras["init"] == "canonical"
    assert samples["first_loss"] == pytest.approx(expected_first_loss("cnn", CNN_CELL), rel=1e-5)
    assert extras["optimizer"].startswith("mx.nd.multi_sgd_mom_update (built-in fused multi-tensor op, 4 parameters")
    # 12 parameters, 4 per call: 3 multi-tensor calls a step, and never the one-parameter operator
    assert counts == {SGD_OPERATORS[0]: 3 * STEPS, SGD_OPERATORS[1]: 0}
    assert math.isfinite(samples["epoch_losses"][-1])  # sane (status ok: the validity gate passed it too)


def test_eager_gluon_builds_no_graph_and_runs_what_the_hybridized_rows_run(tmp_path):
    """The eager mode is imperative Gluon: the same blocks never hybridized, so hybrid_forward runs on
    NDArrays every step and no graph is built (samples.traces stays empty, FAIRNESS.md: trace-once),
    from the same canonical start and with the same fused update operator as the graph mode."""
    result, counts, _ = run_cell(framework_python("mxnet"), "cnn", "mxnet", tmp_path, overrides=CNN_CELL,
                                 count=SGD_OPERATORS, arguments=["--mode", "eager"])
    samples, extras = result["samples"], result["provenance"]["extras"]
    assert result["status"] == "ok" and result["cell"]["mode"] == "eager" and samples["epoch_steps"] == [STEPS]
    assert samples["traces"] == {}
    assert extras["mode"].startswith("eager: imperative Gluon (Gluon's default, no hybridize)")
    assert samples["first_loss"] == pytest.approx(expected_first_loss("cnn", CNN_CELL), rel=1e-5)
    assert counts == {SGD_OPERATORS[0]: 3 * STEPS, SGD_OPERATORS[1]: 0}


def test_the_runtime_hybridizes_in_graph_mode_only_and_the_graph_is_built_once():
    """The workload files build the blocks; the runtime's policy alone hybridizes them (graph mode,
    traced once over many calls) or leaves them imperative (eager mode, nothing traced)."""
    code = """
import json
import numpy as np
from mxnet.gluon import nn
from workloads.common.harness import Run
from workloads.common.result import Cell
from workloads.runtime import mxnet as runtime
found = {}
for mode in ("graph", "eager"):
    run = Run(Cell(framework="mxnet", workload="cnn", profile="smoke", mode=mode), device="cpu")
    policy = runtime.select_device(run)
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=4))
    net.initialize(ctx=policy.device)
    net = policy.hybridized(net)
    runtime.note_traces(run, net)
    for _ in range(5):
        net(runtime.to_device(np.ones((2, 4), np.float32), policy)).asnumpy()
    found[mode] = {"active": net._active, "traces": run.result.samples.traces, "mode": run.result.provenance.extras["mode"]}
print(json.dumps(found))
"""
    found = json.loads(run_snippet(framework_python("mxnet"), code).splitlines()[-1])
    assert found["graph"]["active"] and found["graph"]["traces"] == {"hybrid_forward": 1}
    assert not found["eager"]["active"] and found["eager"]["traces"] == {}
    assert found["graph"]["mode"].startswith("graph: hybridized") and found["eager"]["mode"].startswith("eager: ")
    for workload in ("cnn", "gru", "resnet50"):  # the mode's decision is the runtime's, not a workload file's
        assert "hybridize(" not in (ROOT / "workloads" / workload / "mxnet.py").read_text(), workload


def test_init_framework_keeps_mxnets_initialisers(tmp_path):
    assert_init_framework_keeps_its_initialisers("mxnet", tmp_path, ONE_STEP)


def test_tf32_is_kept_out_before_import_and_the_cuda_facts_are_read_from_the_loaded_libraries():
    code = """
import json, os
from workloads.common.harness import Run, Unsupported
from workloads.common.result import Cell
from workloads.runtime import mxnet as runtime
facts = {}
run = Run(Cell(framework="mxnet", workload="cnn", profile="smoke"), device="cpu")
runtime.select_device(run)
facts["tf32_cpu"] = run.result.provenance.extras["tf32"]
facts["gpu_name_cpu"] = run.result.provenance.gpu_name
facts["override_after_select"] = os.environ.get("NVIDIA_TF32_OVERRIDE")  # select_device no longer sets it
try:
    runtime.tf32_report(on_gpu=True)
    facts["gpu_without_override"] = "ran"
except RuntimeError as error:
    facts["gpu_without_override"] = str(error)
try:
    runtime.select_device(Run(Cell(framework="mxnet", workload="cnn", profile="smoke", precision="tf32"), device="cpu"))
except Unsupported as reason:
    facts["tf32_cell"] = str(reason)
runtime.mx.context.num_gpus = lambda: 1  # as if on a GPU: the refusals come before any GPU work
try:
    runtime.select_device(Run(Cell(framework="mxnet", workload="cnn", profile="smoke", precision="tf32")))
except Unsupported as reason:
    facts["tf32_gpu_cell"] = str(reason)
try:
    runtime.select_device(Run(Cell(framework="mxnet", workload="cnn", profile="smoke")))
except RuntimeError as error:
    facts["fp32_gpu_cell"] = str(error)
facts["libmxnet_mapped"] = runtime._loaded_library("libmxnet") is not None
facts["cudnn"], facts["cudart"] = runtime._cudnn_version(), runtime._cuda_runtime_version()
facts["device_name"] = runtime._cuda_device_name(0)
print(json.dumps(facts))
"""
    facts = json.loads(run_snippet(framework_python("mxnet"), code).splitlines()[-1])
    assert facts["tf32_cpu"] == "n/a (CPU)" and facts["gpu_name_cpu"] is None
    assert facts["override_after_select"] is None
    assert "NVIDIA_TF32_OVERRIDE=0 set before MXNet is imported" in facts["gpu_without_override"]
    assert facts["tf32_cell"].startswith("tf32 needs a CUDA GPU")
    assert facts["tf32_gpu_cell"].startswith("MXNet 1.9.1 has no TF32 switch")  # unsupported, never fp32 relabelled
    assert "NVIDIA_TF32_OVERRIDE=0 set before MXNet is imported" in facts["fp32_gpu_cell"]
    assert facts["libmxnet_mapped"]  # the /proc/self/maps reader finds what is loaded
    assert facts["cudnn"] is None and facts["cudart"] is None  # the CPU build loads neither
    assert facts["device_name"] is None or isinstance(facts["device_name"], str)
    with_override = run_snippet(framework_python("mxnet"), "from workloads.runtime import mxnet as runtime\n"
                                "print(runtime.tf32_report(on_gpu=True))", env={"NVIDIA_TF32_OVERRIDE": "0"})
    assert with_override.strip().startswith("off: NVIDIA_TF32_OVERRIDE=0 in MXNet's C environment")
