"""The fairness rules the shared harness enforces (docs/FAIRNESS.md), framework-free.

Framework options, the same start, the validity gate, JSON without NaN, the host copy inside the
timed ResNet-50 batch, trace counting and the machine provenance. What each framework records
(its optimizer, GRU kernel, trace counts) is checked on the real frameworks in tests/test_e2e.py
and in each framework's unit tests.
"""
import json
import math

import numpy as np
import pytest

import workloads.__main__ as workload_main
from workloads.common import canonical, loop, naming, options, precision, provenance
from workloads.common.cell import CellDocumentError, CellRequest, unsafe_name_problem
from workloads.common.harness import DIVERGED_LOSS_RATIO, Run, Unsupported, divergence
from workloads.common.result import EXIT_UNSUPPORTED, Cell, Result


def smoke_run(workload="cnn", framework="pytorch", **cell):
    return Run(Cell(framework, workload, profile="smoke", data="synthetic", **cell), data_dir="/nonexistent")


# --- framework options ------------------------------------------------------------------------------

def test_options_are_checked_against_the_framework_and_defaults_dropped():
    assert options.check("pytorch", {"channels_last": "on"}) == {"channels_last": "on"}
    assert options.check("pytorch", {"channels_last": "off"}) == {}  # the default spelled out is the same cell
    with pytest.raises(options.OptionError, match="pytorch has no option 'xla'"):
        options.check("pytorch", {"xla": "on"})  # XLA is the compiled mode, no option
    with pytest.raises(options.OptionError, match="choose from off, on"):
        options.check("pytorch", {"channels_last": "yes"})
    assert options.resolve("caffe2", {}) == {"executor": "async_scheduling"}
    assert options.label({"executor": "simple", "channels_last": "on"}) == "channels_last=on, executor=simple"


def test_options_mode_and_init_make_their_own_cell_key_and_travel_in_the_cell_document():
    plain = Cell("pytorch", "cnn")
    layout = Cell("pytorch", "cnn", options={"channels_last": "on"})
    own_init = Cell("pytorch", "cnn", init="framework")
    compiled = Cell("pytorch", "cnn", mode="compiled")
    assert len({plain.key, layout.key, own_init.key, compiled.key}) == 4
    assert plain.key == "pytorch__cpu__cnn__fp32__full__real__r0"  # no mode recorded: the default, unnamed
    assert compiled.key == "pytorch__cpu__cnn__fp32__compiled__full__real__r0"
    assert "__channels_last-on__" in layout.key and "__init-framework__" in own_init.key
    request = CellRequest(cell=Cell("pytorch", "cnn", init="framework", options={"channels_last": "on"},
                                    mode="compiled"))
    assert CellRequest.from_json(request.to_json()) == request
    with pytest.raises(CellDocumentError, match="options"):
        CellRequest.from_json(request.to_json().replace('"channels_last": "on"', '"channels_last": 1'))
    with pytest.raises(CellDocumentError, match="Cell.mode"):
        CellRequest.from_json(request.to_json().replace('"mode": "compiled"', '"mode": 1'))
    assert "option value" in unsafe_name_problem(Cell("pytorch", "cnn", options={"channels_last": "../x"}))
    assert "invalid mode" in unsafe_name_problem(Cell("pytorch", "cnn", mode="../x"))


def test_the_run_resolves_and_records_every_option_and_its_mode():
    run = smoke_run(options={"channels_last": "on"})
    assert run.option("channels_last") == "on" and run.result.provenance.extras["option.channels_last"] == "on"
    assert smoke_run().option("channels_last") == "off"
    assert smoke_run().mode == "eager" and smoke_run(framework="tensorflow").mode == "graph"  # each one's default
    compiled = smoke_run(mode="compiled")
    assert compiled.mode == "compiled" and compiled.result.provenance.extras["mode"].startswith(
        "compiled: torch.compile (inductor)")


def test_a_mode_the_framework_lacks_is_an_unsupported_result_with_the_reason(tmp_path):
    """modes.py: the harness refuses it before the framework is imported (a numpy-only stand-in
    here: the refusal never reaches the workload)."""
    out = tmp_path / "r.json"
    code = workload_main.main(["cnn", "--framework", "chainer", "--mode", "compiled", "--profile", "smoke",
                               "--data", "synthetic", "--out", str(out)],
                              load_workload=lambda cell: pytest.fail("the workload must not be loaded"))
    result = json.loads(out.read_text())
    assert code == EXIT_UNSUPPORTED and result["status"] == "unsupported"
    assert result["reason"].startswith("chainer has no compiled mode: its rows run eager (")
    assert result["cell"]["mode"] == "compiled"


def test_a_bad_option_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        workload_main.main(["cnn", "--framework", "pytorch", "--option", "xla=on", "--out", str(tmp_path / "r.json")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "pytorch has no option 'xla'" in error


# --- the same start ---------------------------------------------------------------------------------

def test_canonical_init_hands_out_the_parity_weights_and_framework_init_none():
    run = smoke_run("gru")
    weights = run.initial_weights()
    expected = canonical.parameters("gru")
    assert sorted(weights) == sorted(expected)
    assert all(np.array_equal(weights[name], expected[name]) for name in expected)
    assert run.result.provenance.extras["init"] == "canonical"
    own = smoke_run("gru", init="framework")
    assert own.initial_weights() is None and own.result.provenance.extras["init"] == "framework"


# --- the validity gate ------------------------------------------------------------------------------

@pytest.mark.parametrize("first, losses, diverged", [
    (2.3, [2.0, 1.5], None),
    (2.3, [float("nan")], "epoch 1 is not a finite number (nan)"),
    (float("inf"), [1.0], "after the first step is not a finite number (inf)"),
    (2.3, [2.0, 2.3 * DIVERGED_LOSS_RATIO + 0.1], "rose from 2.3"),
    (0.69, [None], "end of epoch 1 is not a finite number"),  # a NaN read back from JSON
    (None, [1.0], None),
])
def test_divergence(first, losses, diverged):
    problem = divergence(first, losses)
    if diverged is None:
        assert problem is None
    else:
        assert problem.startswith("diverged: ") and diverged in problem


def _fake_framework(monkeypatch, body):
    import types

    monkeypatch.setattr(workload_main.importlib, "import_module", lambda name: types.SimpleNamespace(run=body, MATCHED=()))


def _nan_training(run):
    x, y = np.zeros((1024, 3, 32, 32), np.float32), np.zeros(1024, np.int64)
    data = type("Data", (), {"x_train": x, "y_train": y})
    loop.train(run, data, lambda xb, yb: float("nan"))


def test_a_diverged_cell_fails_and_its_json_has_no_bare_nan(monkeypatch, tmp_path):
    _fake_framework(monkeypatch, _nan_training)
    out = tmp_path / "result.json"
    assert workload_main.main(["cnn", "--framework", "pytorch", "--profile", "smoke", "--out", str(out)]) == 1
    text = out.read_text()
    record = json.loads(text, parse_constant=lambda token: pytest.fail(f"bare {token} in the JSON"))
    assert record["status"] == "failed" and record["reason"].startswith("diverged: ")
    assert record["samples"]["first_loss"] is None and record["samples"]["epoch_losses"] == [None]
    assert Result.read(out).status == "failed"


def test_finite_only_reaches_every_depth():
    result = Result(cell=Cell("pytorch", "cnn"))
    result.metrics.final_loss = float("-inf")
    result.outputs = {"logits": [[1.0, float("nan")]]}
    data = result.to_dict()
    assert data["metrics"]["final_loss"] is None and data["outputs"]["logits"] == [[1.0, None]]
    json.dumps(data, allow_nan=False)


# --- ResNet-50: the host copy inside the timed batch, non-finite features -----------------------------

class _DeviceFeatures:
    """Stands for features on a device: only ``to_host`` turns them into numpy."""

    def __init__(self, array):
        self.array = array


def test_every_timed_batch_copies_its_features_to_the_host():
    run = smoke_run("resnet50")
    settings = run.settings
    copies = []
    in_timed_batch = []

    def to_host(features):
        copies.append(len(run.result.samples.batch_times_s))
        return features.array

    images = np.zeros((settings.batch_size * 3, 1), np.float32)
    loop.infer(run, images, lambda batch: _DeviceFeatures(np.ones((len(batch), settings.feature_size), np.float32)),
               to_host=to_host)
    warm, timed = copies[:settings.warmup_batches], copies[settings.warmup_batches:]
    # the k-th timed copy happens before the k-th sample is recorded: inside its timed batch
    assert timed == list(range(settings.batches)) and len(warm) == settings.warmup_batches
    assert run.finish().status == "ok" and not in_timed_batch


def test_non_finite_features_fail_the_cell():
    run = smoke_run("resnet50")
    size = run.settings.feature_size
    loop.infer(run, np.zeros((32 * 3, 1), np.float32), lambda batch: np.full((len(batch), size), np.nan, np.float32))
    result = run.finish()
    assert result.status == "failed" and result.reason.startswith("diverged: ")


# --- the first loss, trace counts -------------------------------------------------------------------

def test_training_reads_the_first_loss_once_and_counts_traces():
    run = smoke_run()
    losses = iter([3.0, 2.5, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5])

    def step(x, y):
        run.note_trace("train_step") if not run.result.samples.traces else None
        return next(losses)

    data = type("Data", (), {"x_train": np.zeros((512, 1), np.float32), "y_train": np.zeros(512)})
    loop.train(run, data, step)
    result = run.finish()
    assert result.samples.first_loss == 3.0 and result.samples.epoch_losses == [1.5]
    assert result.samples.traces == {"train_step": 1} and result.status == "ok"


# --- provenance ---------------------------------------------------------------------------------------

def test_cgroup_quota_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert provenance.cgroup_cpu_quota(str(tmp_path)) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert provenance.cgroup_cpu_quota(str(tmp_path)) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert provenance.cgroup_cpu_quota(str(v1)) == 2.0


def test_speed_variables_and_package_list_are_recorded():
    environment = provenance.speed_environment({"OMP_NUM_THREADS": "4", "XLA_FLAGS": "--x", "HOME": "/root",
                                                "NVIDIA_TF32_OVERRIDE": "0"})
    assert environment == {"NVIDIA_TF32_OVERRIDE": "0", "OMP_NUM_THREADS": "4", "XLA_FLAGS": "--x"}
    run = smoke_run()
    result = run.finish().provenance
    assert result.cpu_affinity and result.cpu_affinity >= 1 and result.process_threads >= 1
    assert any(line.lower().startswith("numpy==") for line in result.packages)
    assert result.packages == sorted(result.packages, key=lambda line: line.split("==")[0].lower())
    assert result.packages_sha256 == provenance.packages_digest(result.packages)
    assert result.packages_sha256.startswith("sha256:") and len(result.packages_sha256) == 7 + 64


def test_fp32_cells_refuse_tf32_before_the_import():
    assert naming.precision_environment("fp32") == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert naming.precision_environment("tf32") == {} and naming.precision_environment("bf16") == {}


# --- true-precision: one table of what each precision needs (workloads/common/precision.py) -----------

@pytest.mark.parametrize("runtime, cell_precision, device, capability, refused", [
    ("pytorch", "fp32", "cpu", None, None),
    ("pytorch", "bf16", "cpu", None, None),  # CPU bf16 kernels: allowed where the framework has them
    ("pytorch", "fp16", "cpu", None, "fp16 needs a CUDA GPU; this cell runs on the CPU"),
    ("jax", "tf32", "cpu", None, "tf32 needs a CUDA GPU; this cell runs on the CPU"),
    ("keras", "bf16", "cuda", (7, 5), "bf16 needs compute capability 8.0 or newer; this GPU has 7.5"),
    ("pytorch", "tf32", "cuda", (8, 6), None),
    ("tensorflow", "tf32", "cuda", (7, 0), "tf32 needs compute capability 8.0 or newer; this GPU has 7.0"),
    ("tensorflow", "bf16", "cuda", (9, 0), "bf16: these low-level TensorFlow rows run fp32 and tf32 only"),
    # a framework's own refusals come first, in their order: the CPU's, then the precision's own
    ("chainer", "bf16", "cpu", None, "bf16 needs a CUDA GPU; this cell runs on the CPU (NumPy)"),
    ("chainer", "tf32", "cuda", None, "Chainer 7.8.1 and CuPy 7.8 have no TF32 switch"),
    ("mxnet", "bf16", "cpu", None, "bf16 needs a CUDA GPU; this cell runs on the CPU"),
    ("mxnet", "tf32", "cuda", None, "MXNet 1.9.1 has no TF32 switch of its own"),
    ("mxnet", "fp16", "cuda", None, "fp16 is not implemented for MXNet (fp32 only)"),
    ("paddle", "bf16", "cpu", None, "bf16 needs a CUDA GPU with Paddle (its CPU kernels stay float32"),
    ("cntk", "fp16", "cuda", None, "fp16: the CNTK rows run fp32 only"),
    ("mindspore", "tf32", "cpu", None, "tf32 is not implemented for MindSpore (fp32 only)"),
    ("onnxruntime", "fp16", "cuda", None, "fp16: ONNX Runtime runs the graph in the precision it was exported in"),
    ("onnxruntime", "tf32", "cuda", None, None),  # no capability to read: declared, with its reason
])
def test_the_precision_table_refuses_what_a_device_or_framework_cannot_honour(runtime, cell_precision, device,
                                                                              capability, refused):
    if refused is None:
        precision.check(runtime, cell_precision, device, capability)
    else:
        with pytest.raises(Unsupported) as raised:
            precision.check(runtime, cell_precision, device, capability)
        assert str(raised.value).startswith(refused)


def test_the_precision_table_covers_every_precision_and_names_real_runtimes():
    from pathlib import Path

    from workloads.common import hyperparams

    assert set(precision.RULES) == set(hyperparams.PRECISIONS)
    runtimes = Path(workload_main.__file__).parent / "runtime"
    for name, exceptions in precision.EXCEPTIONS.items():
        assert (runtimes / f"{name}.py").is_file() or (runtimes / name / "__init__.py").is_file(), name
        for refusal in exceptions.refusals:
            assert set(refusal.precisions) <= set(precision.RULES) - {"fp32"}, (name, refusal)
            assert refusal.device in (precision.ANY_DEVICE, precision.CPU, precision.CUDA), (name, refusal)
    with pytest.raises(ValueError, match="pass its compute capability"):  # a GPU cell must say what the GPU is
        precision.check("pytorch", "tf32", "cuda")


def test_no_nan_anywhere_in_a_finished_smoke_record():
    run = smoke_run()
    run.result.samples.epoch_losses = [math.nan]
    assert "NaN" not in json.dumps(run.finish().to_dict(), allow_nan=False)
