"""FLOPs per sample are counted from each workload's model definition (workloads/common/flops.py),
and held to an independent count: PyTorch's FlopCounterMode over the PyTorch row's real models, in
the PyTorch environment (docs/FAIRNESS.md: counted-flops). The peak table's entries are checked for
what a % of peak divides by (results/reference/gpu-peak-flops.toml)."""
import json
import textwrap

import pytest

from support.framework_cells import framework_python, run_snippet
from orchestrator import cpu_peak, peaks, run_folder
from orchestrator.errors import UserError
from workloads.common import declaration, flops


def test_a_convolution_and_a_product_count_two_flops_per_multiply_accumulate():
    trace = flops.FlopTrace((3, 8, 8))
    trace.conv(4, 3)  # "same": 8x8 out, 3*3*3 inputs per output element
    assert trace.forward == 2 * (4 * 8 * 8) * (3 * 3 * 3) and trace.shape == (4, 8, 8)
    assert trace.input_gradients == 0  # the images need no gradient
    trace.pool(2, 2)
    trace.flatten()
    trace.dense(5)
    assert trace.shape == (5,) and trace.forward == 2 * 4 * 8 * 8 * 27 + 2 * 64 * 5
    assert trace.training == 3 * trace.forward - 2 * 4 * 8 * 8 * 27  # the first layer's input gradient is skipped


def test_a_strided_convolution_and_a_gru_follow_their_shapes():
    trace = flops.FlopTrace((3, 224, 224))
    trace.conv(64, 7, stride=2, padding=3)
    trace.pool(3, 2, padding=1)
    assert trace.shape == (64, 56, 56)
    sequence = flops.FlopTrace((10,))
    sequence.embedding(6)
    sequence.gru(4)
    assert sequence.shape == (4,)
    assert sequence.forward == 10 * 2 * 6 * 12 + 10 * 2 * 4 * 12
    # every step's input projection needs its input's gradient (the embedding is trained); the
    # recurrent product at step 0 reads h0 = 0, which needs none
    assert sequence.input_gradients == 10 * 2 * 6 * 12 + 9 * 2 * 4 * 12


@pytest.mark.parametrize("workload", list(declaration.declared()))
def test_every_workload_declares_its_flops(workload):
    declared = declaration.get(workload)
    trace = flops.per_sample(declared)
    assert trace.forward > 0 and trace.training > 2 * trace.forward
    settings = declared.settings()
    assert trace.shape == (settings.feature_size if workload == "resnet50" else settings.classes,)  # the model's output


@pytest.mark.e2e
def test_the_counts_match_pytorchs_flop_counter_on_the_real_models():
    """FlopCounterMode (torch.utils.flop_counter) over the PyTorch row's models, forward and (for
    the training workloads) forward + backward, per sample: the same figures to the FLOP."""
    code = textwrap.dedent("""
        import json, torch
        from torch.utils.flop_counter import FlopCounterMode
        from workloads.common import declaration
        from workloads.cnn.pytorch import VGGStyleCNN
        from workloads.gru.pytorch import GRUClassifier
        from workloads.resnet50.pytorch import ResNet50Features
        from workloads.runtime.pytorch import TorchPolicy
        eager = TorchPolicy(torch.device("cpu"), "fp32")  # the eager model: nn.GRU
        counted = {}
        for name, model in (("cnn", VGGStyleCNN(declaration.get("cnn").settings())),
                            ("gru", GRUClassifier(declaration.get("gru").settings(), eager)),
                            ("resnet50", ResNet50Features())):
            s, batch = declaration.get(name).settings(), 2
            x = (torch.randint(0, s.vocabulary, (batch, s.sequence_length)) if name == "gru"
                 else torch.randn(batch, *s.image_shape))
            model.eval()
            with FlopCounterMode(display=False) as counter:
                model(x)
            figures = {"forward": counter.get_total_flops() / batch}
            if declaration.get(name).kind == "training":
                with FlopCounterMode(display=False) as counter:
                    model(x).sum().backward()
                figures["training"] = counter.get_total_flops() / batch
            counted[name] = figures
        print(json.dumps(counted))
    """)
    counted = json.loads(run_snippet(framework_python("pytorch"), code).strip().splitlines()[-1])
    for name, figures in counted.items():
        ours = flops.per_sample(declaration.get(name))
        assert figures["forward"] == ours.forward, name
        if "training" in figures:
            assert figures["training"] == ours.training, name


def test_the_peak_table_matches_by_the_name_nvml_reports():
    peak = peaks.gpu_peak("NVIDIA  H100 80GB hbm3", "bf16")  # case and spacing aside
    assert peak.flops_per_s == 989.5e12 and "datasheet" in peak.source
    assert peaks.gpu_peak("Tesla T4", "bf16").flops_per_s is None  # no BF16 path on Turing: never a guess
    unknown = peaks.gpu_peak("NVIDIA RTX A6000", "fp32")
    assert unknown.flops_per_s is None and unknown.source.startswith("peak unknown")
    listed = {gpu.model for gpu in peaks.load().values()}
    for model in ("V100 SXM2", "T4", "A10", "L4", "A100 40GB / 80GB", "H100 SXM", "H100 PCIe", "H200 SXM", "B200 (HGX)",
                  "GeForce RTX 4090", "GeForce RTX 5090"):
        assert model in listed
    for gpu in peaks.load().values():  # dense figures: a Tensor Core rate is at least the FP32 rate
        assert all(value >= gpu.flops_per_s["fp32"] for value in gpu.flops_per_s.values()), gpu.model


def test_a_malformed_peak_table_is_refused_in_one_line(tmp_path):
    path = tmp_path / "peaks.toml"
    path.write_text('[[gpu]]\nmodel = "X"\nnvml_names = ["X"]\nfp32_tflops = "fast"\nsource = "s"\n')
    with pytest.raises(UserError, match="fp32_tflops must be a positive number") as caught:
        peaks.load(path)
    assert "\n" not in str(caught.value)


def test_a_cpu_probe_that_fails_is_recorded_as_not_measured(monkeypatch):
    """The probe's subprocess exits non-zero (here: an interpreter that is not one): the run goes
    on, and run.json says fp32 was not measured and why, never a figure."""
    monkeypatch.setattr(cpu_peak.sys, "executable", "/bin/false")
    record = cpu_peak.probe(2)
    assert record["flops_per_s"] == {} and record["not_measured"]["fp32"].startswith("not measured: the probe exited 1")
    assert cpu_peak.record_problem(record) is None


@pytest.mark.parametrize("forged, problem", [
    ({"flops_per_s": {"fp32": -1.0}}, "flops_per_s"),
    ({"flops_per_s": {"fp64": 1e9}}, "flops_per_s"),
    ({"threads": True}, "threads"),
    ({"method": "x" * 10_000}, "method"),
    ({"not_measured": {"bf16": 3}}, "not_measured"),
])
def test_a_forged_cpu_peak_in_run_json_is_refused_in_one_line(tmp_path, forged, problem):
    """run.json may come from elsewhere: its cpu_peak is read typed and bounded (run_folder.read_run_record)."""
    record = {"cpu_model": "CPU", "threads": 4, "measured_at": "2026-01-01T00:00:00+00:00", "method": "numpy",
              "flops_per_s": {"fp32": 1e11}, "not_measured": {}}
    (tmp_path / "run.json").write_text(json.dumps({"invocations": [{"cpu_peak": record}]}))
    assert run_folder.read_run_record(tmp_path)["invocations"][0]["cpu_peak"] == record
    (tmp_path / "run.json").write_text(json.dumps({"invocations": [{"cpu_peak": {**record, **forged}}]}))
    with pytest.raises(UserError, match=f"invocation 1: its cpu_peak's {problem}") as caught:
        run_folder.read_run_record(tmp_path)
    assert "\n" not in str(caught.value)
