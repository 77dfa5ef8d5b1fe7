"""A workload is declared once (workloads/<workload>/__init__.py) and everything else reads it."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from orchestrator import report, runner
from orchestrator.results import cell_path, load_results, to_frame
from workloads.common import canonical, data, declaration, hyperparams
from workloads.common.declaration import HIGHER, IMAGES, INFERENCE, LOWER, TRAINING, Metric, Workload
from workloads.common.result import Cell, Metrics, Result

ROOT = Path(__file__).resolve().parent.parent


def test_every_workload_folder_declares_itself():
    folders = {path.parent.name for path in (ROOT / "workloads").glob("*/__init__.py")} - {"common", "runtime"}
    assert folders == set(declaration.declared())
    assert hyperparams.WORKLOADS == tuple(declaration.declared())


@pytest.mark.parametrize("workload", list(declaration.declared().values()), ids=lambda w: w.name)
def test_a_declaration_is_consistent(workload):
    names = [metric.name for metric in workload.metrics]
    assert workload.headline in names and workload.throughput in names
    assert workload.steady is None or workload.steady in names
    recorded = {field.name for field in dataclasses.fields(Metrics)}
    assert all(metric.name in recorded or metric.derive is not None for metric in workload.metrics)
    assert workload.accuracy == ("test_accuracy" in names)
    assert workload.parity_labels == (workload.kind == TRAINING)
    assert workload.canonical_layers is not None
    assert workload.dataset is None or workload.dataset in data.DATASETS  # registered once, where prepare finds it
    full, smoke = workload.settings_for("full"), workload.settings_for("smoke")
    assert full == workload.settings() and dataclasses.replace(full, **workload.smoke) == smoke
    batch = canonical.parity_batch(workload.name)
    assert len(batch["x"]) == workload.parity_batch and ("y" in batch) == workload.parity_labels
    if workload.parity_input == IMAGES:
        assert batch["x"].shape[1:] == tuple(full.image_shape) and batch["x"].dtype == np.float32


def test_a_declaration_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="not a field of the result's metrics record"):
        Metric("made_up_s", "made up", "s", LOWER)
    with pytest.raises(ValueError, match="needs a name of its own"):
        Metric("train_time_s", "train time", "s", LOWER, derive=lambda result: 1.0)
    with pytest.raises(ValueError, match="better must be"):
        Metric("train_time_s", "train time", "s", "faster")
    with pytest.raises(ValueError, match="headline 'images_per_s' is not one of its metrics"):
        _toy(headline="images_per_s", metrics=(declaration.TRAIN_TIME,), throughput="train_time_s")
    with pytest.raises(ValueError, match="parity_input"):
        _toy(parity_input="sounds")


def test_headings_name_the_unit_once():
    assert declaration.TRAIN_TIME.heading == "total train time (s)"
    assert declaration.SAMPLES_PER_S.heading == "samples/s overall"
    assert declaration.FIRST_STEP.heading == "first step (s)"
    assert declaration.TEST_ACCURACY.heading == "test accuracy"
    assert declaration.get("resnet50").headline_metric.heading == "images/s"
    assert declaration.get("resnet50").metric("batch_p90_ms").heading == "batch p90 (ms)"


def test_every_headline_is_a_steady_state_throughput():
    """FAIRNESS.md: steady-headline. Compilation and the first step never decide the ranking."""
    for workload in declaration.declared().values():
        headline = workload.headline_metric
        assert headline.better == declaration.HIGHER and headline.name in (workload.steady or workload.throughput,)
    assert declaration.get("cnn").accuracy_target == 0.77 and declaration.get("gru").accuracy_target == 0.86


# --- nothing else restates a workload ---------------------------------------------------------------

HOST_MODULES = ["workloads/common/canonical.py", "orchestrator/results.py", "orchestrator/runner.py",
                "orchestrator/onnx_export.py", "orchestrator/frameworks.py", "orchestrator/parity.py",
                *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "orchestrator" / "matrix").glob("*.py")), *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "orchestrator" / "report").glob("*.py"))]


@pytest.mark.parametrize("module", HOST_MODULES)
def test_no_module_names_a_workload(module):
    """A workload's name as a literal would be a branch or a table keyed by it: those live in its declaration."""
    tree = ast.parse((ROOT / module).read_text())
    names = set(declaration.declared())
    literals = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in names]
    assert literals == []


def test_canonical_parameters_follow_the_declared_layers():
    calls = []

    class Recorder(canonical.Layers):
        def __getattribute__(self, name):
            if name in ("conv", "dense", "batch_norm", "embedding", "gru"):
                calls.append(name)
            return super().__getattribute__(name)

    gru = declaration.get("gru")
    layers = Recorder(np.random.default_rng(hyperparams.SEED))
    gru.canonical_layers(layers, gru.settings_for("full"))
    assert calls == ["embedding", "gru", "dense"]
    assert all(np.array_equal(layers.arrays[k], v) for k, v in canonical.parameters("gru").items())


# --- a made-up workload, declared and nothing else ------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ToySettings:
    batch_size: int = 4
    batches: int = 3
    parameter_count: int = 10


def _toy(**changes) -> Workload:
    fields = dict(
        name="toy", title="Toy — a made-up inference workload", kind=INFERENCE, order=9, settings=ToySettings,
        smoke=dict(batches=1),
        metrics=(Metric("images_per_s", "images/s", "images/s", HIGHER),
                 Metric("ms_per_batch", "time per batch", "ms", LOWER,
                        derive=lambda result: 1000 * sum(result.samples.batch_times_s) / len(result.samples.batch_times_s))),
        headline="images_per_s", throughput="images_per_s", parity_batch=2, parity_input=IMAGES)
    fields.update(changes)
    return Workload(**fields)


@pytest.fixture
def toy_declared(monkeypatch):
    toy = _toy()
    monkeypatch.setattr(declaration, "_cache", [{**declaration.declared(), "toy": toy}])
    return toy


def test_a_made_up_workload_reaches_the_report_from_its_declaration(tmp_path, toy_declared):
    for framework, rate, batch_s in (("slowfw", 100.0, 0.04), ("fastfw", 200.0, 0.02)):
        result = Result(Cell(framework, "toy"), phases={"inference": 1.0})
        result.metrics.images_per_s, result.metrics.parameter_count = rate, 10
        result.provenance.framework_version = "0.0-stand-in"
        result.samples.batch_times_s = [batch_s] * 3
        result.write(cell_path(tmp_path, result.cell))
    summary = report.summarise(to_frame(load_results(tmp_path)))["toy"]
    assert summary["framework"].tolist() == ["fastfw", "slowfw"]  # higher is better: most images/s first
    assert summary["relative_to_best"].tolist() == pytest.approx([1.0, 2.0])
    assert summary["ms_per_batch"].tolist() == pytest.approx([20.0, 40.0])  # derived from the raw samples

    markdown = report.render(tmp_path)[0].read_text()
    assert "## Toy — a made-up inference workload" in markdown
    # FLOP/s and % of peak beside the headline: the toy declares no flop_model, so none is counted
    assert ("| Median images/s | FLOP/s | % of peak | Min–max | Spread | Relative | Time per batch (ms) | Parameters |"
            in markdown)
    assert "| fastfw | cpu | fp32 | 1 | 200 | - | not counted | - | - | 1.00x | 20 | 10 |" in markdown
    assert "No results for:** cnn, resnet50, gru" in markdown
    assert "its chart says whether lower or higher is better" in markdown

    line = runner._describe(Result.read(cell_path(tmp_path, Cell("fastfw", "toy"))))
    assert "200.000 images/s" in line
