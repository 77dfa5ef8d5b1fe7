"""The Caffe2 row (torch 1.10.2's caffe2.python, Python <= 3.9), checked from this host's Python without it.

- every caffe2 module imports over a stand-in `caffe2` package that refuses any use, so nothing
  touches Caffe2 at import time and what the tests call is numpy;
- the canonical -> Caffe2 layouts against numpy definitions of what Caffe2 computes (FC is
  x @ W.T + b; gru_cell's GRUCell with linear_before_reset=True feeding the GRUUnit operator);
- the recorded wheel listing says what images/caffe2/FINDING.md says;
- what the runtime sets, detects and counts (the executor option on every net, each net created
  once, the GRU kernel read from the net, the features fetched inside every timed batch) on stand-ins;
- with the local backend's cached cpu environment (or ROSETTA_CAFFE2_PYTHON), real cells with both
  executors (the same start, 20 steps, what the result records: tests/support/framework_cells.py), and the
  real parity.
"""
import types
from pathlib import Path

import numpy as np
import pytest

from support.framework_cells import assert_workload_files_keep_the_model, cross_entropy, first_batch, framework_python, run_cell
from support.numpy_reference import assert_training_parity_in, cnn_logits, gru_logits, sigmoid
from support.stand_ins import imported_over, refusing_package
from workloads.common import canonical, hyperparams, options
from workloads.common.harness import Run
from workloads.common.result import Cell

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["workloads.cnn.caffe2", "workloads.resnet50.caffe2", "workloads.gru.caffe2", "workloads.runtime.caffe2"]
STAND_INS = ["caffe2", "caffe2.proto", "caffe2.proto.caffe2_pb2", "caffe2.python", "caffe2.python.brew",
             "caffe2.python.core", "caffe2.python.gru_cell", "caffe2.python.model_helper", "caffe2.python.optimizer",
             "caffe2.python.workspace", "caffe2.python.modeling", "caffe2.python.modeling.initializers"]


@pytest.fixture(scope="module")
def modules():
    stand_ins = refusing_package(STAND_INS)
    stand_ins["caffe2.python.modeling.initializers"].Initializer = type("Initializer", (), {})
    with imported_over(stand_ins, MODULES) as imported:
        yield imported


def test_caffe2_workloads_keep_the_model_and_call_their_loops_in_the_runtime(modules):
    """The loops are written once, in workloads/runtime/caffe2.py; the workload files keep the model."""
    runtime = modules["workloads.runtime.caffe2"]
    assert_workload_files_keep_the_model({name: modules[name] for name in MODULES[:3]}, runtime)
    policy = runtime.Caffe2Policy("device option", "fp32", "cuda")  # cuDNN's algorithm search on a GPU
    assert policy.operator_arguments == {"engine": "CUDNN", "cudnn_exhaustive_search": True}
    assert runtime.Caffe2Policy("device option", "fp32", "cpu").operator_arguments == {}


def test_cnn_blobs_compute_the_canonical_logits(modules):
    """Caffe2: conv weights (out, in, h, w) = OIHW; FC weights (out, in): y = x @ W.T + b."""
    params, batch = canonical.parameters("cnn"), canonical.parity_batch("cnn")
    arrays = modules["workloads.cnn.caffe2"].canonical_arrays(params)
    assert arrays["dense1_w"].shape == (512, 6400) and arrays["logits_w"].shape == (10, 512)
    as_canonical = {}
    for name, layer in (("conv1", "conv1"), ("conv2", "conv2"), ("conv3", "conv3"), ("conv4", "conv4"),
                        ("dense1", "dense1"), ("logits", "dense2")):
        weight = arrays[name + "_w"]
        as_canonical[layer + ".kernel"] = weight.T if weight.ndim == 2 else weight
        as_canonical[layer + ".bias"] = arrays[name + "_b"]
    np.testing.assert_allclose(cnn_logits(as_canonical, batch["x"]), cnn_logits(params, batch["x"]),
                               rtol=1e-5, atol=1e-6)  # float32: only the summation order differs
    assert canonical.parameter_count(arrays) == hyperparams.settings("cnn", "full").parameter_count


def test_resnet50_blobs_cover_every_canonical_array(modules):
    params = canonical.parameters("resnet50")
    arrays = modules["workloads.resnet50.caffe2"].canonical_arrays(params)
    assert len(arrays) == len(params)
    assert {name.rpartition("_")[2] for name in arrays} == {"w", "s", "b", "rm", "riv"}
    assert arrays["stage2_block0_shortcut_conv_w"] is params["stage2.block0.shortcut.conv.kernel"]  # OIHW as is
    assert arrays["stem_bn_riv"] is params["stem.bn.moving_variance"]  # brew's "_riv" blob holds the variance


def caffe2_gru_step(x, h, arrays, hidden):
    """caffe2/python/gru_cell.py (GRUCell._apply, linear_before_reset=True) and the GRUUnit operator:
    the input FC i2h projects x for the three gates [reset, update, output]; one FC per gate on h;
        r = sigma(i2h_r + fc_r(h));  u = i2h_u + fc_u(h);  o = i2h_o + r * fc_o(h)
        h' = h * sigma(u) + tanh(o) * (1 - sigma(u))           (GRUUnit)"""
    def fc(v, name):
        return v @ arrays[name + "_w"].T + arrays[name + "_b"]

    i2h = fc(x, "gru/i2h")
    reset = sigmoid(i2h[:, :hidden] + fc(h, "gru/reset_gate_t"))
    update = i2h[:, hidden:2 * hidden] + fc(h, "gru/update_gate_t")
    output = i2h[:, 2 * hidden:] + reset * fc(h, "gru/output_gate_t")
    return h * sigmoid(update) + np.tanh(output) * (1 - sigmoid(update))


def test_gru_blobs_in_caffe2s_cell_give_the_canonical_logits(modules):
    params, batch = canonical.parameters("gru"), canonical.parity_batch("gru")
    arrays = modules["workloads.gru.caffe2"].canonical_arrays(params)
    assert canonical.parameter_count(arrays) == hyperparams.settings("gru", "full").parameter_count
    hidden = params["gru.recurrent_kernel"].shape[0]
    tokens = batch["x"]
    embedded = arrays["embeddings"][tokens].astype(np.float64)
    h = np.zeros((len(tokens), hidden))
    for step in range(tokens.shape[1]):
        h = caffe2_gru_step(embedded[:, step], h, arrays, hidden)
    logits = h @ arrays["logits_w"].T + arrays["logits_b"]
    np.testing.assert_allclose(logits, gru_logits(params, tokens), rtol=1e-6, atol=1e-6)
    # the update and reset FCs are not interchangeable: swapping them gives another model
    swapped = dict(arrays, **{"gru/reset_gate_t_w": arrays["gru/update_gate_t_w"],
                              "gru/update_gate_t_w": arrays["gru/reset_gate_t_w"]})
    one = caffe2_gru_step(embedded[:, 0], np.ones((len(tokens), hidden)) * 0.5, arrays, hidden)
    other = caffe2_gru_step(embedded[:, 0], np.ones((len(tokens), hidden)) * 0.5, swapped, hidden)
    assert not np.allclose(one, other, atol=1e-4)


def test_the_recorded_wheel_listing_backs_the_finding():
    """images/caffe2/wheel-evidence.txt (wheel_evidence.py's output): the compiled binding is in every
    Linux wheel up to torch 1.10.2, for Python 3.6-3.9, and in none after it."""
    rows = [line.split(" | ") for line in (ROOT / "images" / "caffe2" / "wheel-evidence.txt").read_text().splitlines()
            if line and not line.startswith(("#", "version"))]
    version = lambda text: tuple(int(part) for part in text.split("."))  # noqa: E731
    with_binding = {(row[0], row[2]) for row in rows if "caffe2_pybind11_state." in row[7]}
    assert with_binding and all(version(v) <= (1, 10, 2) for v, _ in with_binding)
    assert {tag for v, tag in with_binding if v == "1.10.2"} == {"cp36", "cp37", "cp38", "cp39"}
    assert all("caffe2_pybind11_state" not in row[7] for row in rows if version(row[0]) > (1, 10, 2))
    assert all(row[4] == "0" for row in rows if version(row[0]) >= (1, 13, 0))  # no caffe2/python at all
    assert any(row[2] == "cp310" for row in rows if version(row[0]) == (1, 11, 0))  # the first cp310 wheels: none


# --- what the runtime sets, detects and counts, on stand-ins ------------------------------------------------

class FakeNet:
    def __init__(self, name, ops=()):
        self.name, self.proto = name, types.SimpleNamespace(type="", num_workers=0, op=list(ops))

    def Name(self):  # noqa: N802 - Caffe2's spelling
        return self.name

    def Proto(self):  # noqa: N802
        return self.proto


def smoke_run(workload, **cell):
    return Run(Cell("caffe2", workload, profile="smoke", data="synthetic", **cell), data_dir="/nonexistent")


def test_every_net_gets_the_executor_option_and_is_created_once(modules, monkeypatch):
    """FAIRNESS.md, explicit-options and trace-once: the option "executor" sets each net's type (and
    async_scheduling's worker count) before CreateNet, and each CreateNet is counted per net."""
    runtime = modules["workloads.runtime.caffe2"]
    created = []
    monkeypatch.setattr(runtime, "workspace", types.SimpleNamespace(CreateNet=lambda net: created.append(
        (net.Name(), net.Proto().type, net.Proto().num_workers))))
    run = smoke_run("cnn")
    policy = runtime.Caffe2Policy("device option", "fp32", "cpu", executor="async_scheduling", workers=3)
    runtime.create_net(run, policy, FakeNet("cnn_train"))
    runtime.create_net(run, policy, FakeNet("cnn_test"))
    simple = runtime.Caffe2Policy("device option", "fp32", "cpu", executor="simple")
    runtime.create_net(run, simple, FakeNet("other"))
    assert created == [("cnn_train", "async_scheduling", 3), ("cnn_test", "async_scheduling", 3),
                       ("other", "simple", 0)]
    assert run.result.samples.traces == {"cnn_train": 1, "cnn_test": 1, "other": 1}
    assert runtime.describe_executor("async_scheduling", 3).startswith("async_scheduling (3 worker threads")
    assert runtime.describe_executor("simple", 3).startswith("simple (")
    with pytest.raises(ValueError):
        runtime.describe_executor("dag", 3)
    assert runtime.Caffe2Policy("d", "fp32", "cuda").workers == runtime.WORKERS_PER_DEVICE == 4
    assert options.resolve("caffe2", {})["executor"] == runtime.ASYNC_SCHEDULING  # the option's default


def op(kind, device_type=0, **arguments):
    return types.SimpleNamespace(type=kind, device_option=types.SimpleNamespace(device_type=device_type),
                                 arg=[types.SimpleNamespace(name=k, n=v) for k, v in arguments.items()])


def test_the_gru_kernel_is_read_from_the_training_net(modules, monkeypatch):
    """FAIRNESS.md, fused-rnn: what runs the recurrence, from the net's operators (and their device)."""
    runtime = modules["workloads.runtime.caffe2"]
    monkeypatch.setattr(runtime, "caffe2_pb2", types.SimpleNamespace(CUDA=1, CPU=0))
    step_net = types.SimpleNamespace(op=[op("FC"), op("Sum"), op("GRUUnit")])
    net = FakeNet("gru_train", [op("Gather"), op("RecurrentNetwork", step_net=step_net), op("FC")])
    assert runtime.recurrent_kernel(net, 150) == ("scan: Caffe2's RecurrentNetwork operator runs its step net "
                                                  "(FC, Sum, GRUUnit) for each of the 150 steps, on the CPU")
    on_gpu = FakeNet("gru_train", [op("RecurrentNetwork", device_type=1, step_net=step_net)])
    assert runtime.recurrent_kernel(on_gpu, 150).endswith("on CUDA")
    assert runtime.recurrent_kernel(FakeNet("x", [op("Recurrent", device_type=1)]), 150).startswith("cudnn: ")
    with pytest.raises(ValueError):
        runtime.recurrent_kernel(FakeNet("x", [op("FC")]), 150)


def test_resnet50_features_are_fetched_inside_every_timed_batch(modules, monkeypatch):
    """FAIRNESS.md, host-copy: the features blob is fetched (FetchBlob: a numpy copy) in every batch,
    warm and timed, not once at the end."""
    runtime = modules["workloads.runtime.caffe2"]
    calls = []
    fake = types.SimpleNamespace(FeedBlob=lambda name, array, device_option=None: calls.append("feed"),
                                 RunNet=lambda net: calls.append("run"),
                                 FetchBlob=lambda name: calls.append("fetch " + name) or np.zeros((8, 2048)))
    monkeypatch.setattr(runtime, "workspace", fake)
    run = smoke_run("resnet50")
    s = run.settings
    assert s.batch_size == 8  # the smoke profile's
    model = types.SimpleNamespace(params=[], net="resnet50_features")
    images = np.zeros((s.batch_size * max(s.batches, s.warmup_batches), *s.image_shape), np.float32)
    runtime.extract_features(run, runtime.Caffe2Policy("d", "fp32", "cpu"), model, images)
    assert calls == ["feed", "run", "fetch features"] * (s.warmup_batches + s.batches)
    assert len(run.result.samples.batch_times_s) == s.batches


def test_caffe2_says_fp32_has_no_tf32_to_refuse(modules):
    runtime = modules["workloads.runtime.caffe2"]
    assert runtime.TF32_ON_CPU == "n/a (CPU)" and runtime.TF32_ON_GPU.startswith("n/a (") and "CUDA 10.2" in \
        runtime.TF32_ON_GPU


# --- the real thing: the cached Caffe2 environment ---------------------------------------------------------

@pytest.mark.parametrize("executor", ["async_scheduling", "simple"])
def test_both_executors_train_twenty_gru_steps_from_the_canonical_start(executor, tmp_path, monkeypatch):
    """FAIRNESS.md, explicit-options, same-start, trace-once, fused-optimizers, fused-rnn on the real
    framework: either executor trains; the first loss is the canonical weights' loss on the first
    batch (numpy); each net is created once in 20 steps; the result says what ran."""
    python = framework_python("caffe2")
    steps = {"max_train_batches": 20, "batch_size": 16}  # one shape is all trace-once needs; small is cheaper
    result, _, _ = run_cell(python, "gru", "caffe2", tmp_path, overrides=steps,
                            arguments=["--option", "executor=" + executor])
    extras, samples = result["provenance"]["extras"], result["samples"]
    assert extras["option.executor"] == executor and extras["executor"].startswith(executor + " (")
    assert extras["init"] == "canonical" and samples["epoch_steps"] == [20] and len(samples["batch_times_s"]) == 20
    x, y = first_batch("gru", steps)
    expected = cross_entropy(gru_logits(canonical.parameters("gru"), x), y)
    assert samples["first_loss"] == pytest.approx(expected, rel=1e-4)
    assert samples["traces"] == {"gru_train": 1, "gru_test": 1}
    assert extras["gru_kernel"].startswith("scan: Caffe2's RecurrentNetwork operator runs its step net (")
    assert "GRUUnit) for each of the 150 steps, on the CPU" in extras["gru_kernel"]
    assert extras["optimizer"].startswith("written out: PyTorch's Adam as ")
    assert "Caffe2 operators per step for 11 parameters" in extras["optimizer"]
    assert extras["tf32"] == "n/a (CPU)"


def test_init_framework_keeps_caffe2s_start_and_the_cnn_uses_momentum_sgd_update(tmp_path):
    python = framework_python("caffe2")
    result, _, _ = run_cell(python, "cnn", "caffe2", tmp_path, arguments=["--init", "framework", "--option", "executor=simple"])
    extras = result["provenance"]["extras"]
    assert result["cell"]["init"] == "framework" and extras["init"] == "framework"
    assert result["cell"]["options"] == {"executor": "simple"}
    assert extras["optimizer"].startswith("built-in op: MomentumSGDUpdate, one per parameter (12 of ")
    assert result["samples"]["traces"] == {"cnn_train": 1, "cnn_test": 1}


@pytest.mark.e2e
def test_parity_in_a_caffe2_environment(tmp_path):
    """Caffe2's parity outputs held to the numpy definitions, in its Python 3.9 environment."""
    assert_training_parity_in(framework_python("caffe2"), "caffe2", tmp_path)
