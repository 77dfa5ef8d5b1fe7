"""A ranking that can be published (docs/FAIRNESS.md: ranking-gate and the rules beside it): only
rows that passed every check that applies are ranked, in the grid, the tables, the charts and the
energy section; the report says which check failed for each row that is not; run-matrix runs the
parity check into the run folder; GRU rows name their kernel; the grid's order is one figure for
every row and holds only rows that ran.

The report's tests fabricate cell files (workloads.common.result.Result) in a tmp folder, as the
other report tests do; the run-matrix tests run the real command line over a backend that only
pretends to run cells; one runs real PyTorch cells (and their parity check) on the local backend."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import run_folder
from orchestrator.__main__ import main
from orchestrator.backends import registry
from orchestrator.backends.contract import Backend
from orchestrator.report import build_context, render, report_frame
from orchestrator.report.pages import write_report
from orchestrator.results import load_cells, load_reference
from workloads.common import declaration
from workloads.common.result import Cell, DeviceEnergy, Energy, Metrics, Provenance, Result
from support.records import measured
from test_report_fairness import A100, H200, RANKING, XEON, only, sections, summary_of, training, write

CNN = declaration.get("cnn")
PARITY = "parity"  # where run-matrix keeps its parity check in a run folder (run_folder.PARITY_FOLDER)
GRID = "At a glance: each workload's headline figure, per framework"


def ranked_names(summary) -> list[str]:
    return summary[summary["rank"].notna()].sort_values("rank")["row_name"].tolist()


def not_ranked_lines(markdown: str, title: str = "CNN — CIFAR-10 training") -> list[str]:
    section = sections(markdown)[title]
    return [line for line in section.split("### Not ranked")[1].split("###")[0].splitlines() if line.startswith("|")]


# --- the gate: repeats, parameters, accuracy -------------------------------------------------------------

def test_a_row_with_a_repeat_that_is_not_ok_is_shown_not_ranked_and_says_why(tmp_path):
    flaky = [training("pytorch", 2000, repeat=0),
             training("pytorch", 0, repeat=1, status="failed", reason="CUDA error: out of memory"),
             training("pytorch", 0, repeat=2, status="timeout", reason="ran past 3600 s")]
    write(tmp_path, flaky + [training("jax", 900, repeat=repeat) for repeat in range(3)])
    summary = summary_of(tmp_path)
    pytorch = only(summary, framework="pytorch")
    assert pytorch["status"] == "ok" and pytorch["median"] == 2000  # shown with its figure...
    assert pd.isna(pytorch["rank"]) and pd.isna(pytorch["relative_to_best"])
    assert not pytorch["ranked"] and pytorch["not_ranked"] == "repeats: 1 of 3 repeats ok"  # ...not ranked, with why
    assert ranked_names(summary) == ["jax"] and only(summary, framework="jax")["relative_to_best"] == 1.0
    markdown, html = (path.read_text() for path in render(tmp_path))
    assert "| 1 | jax |" in sections(markdown)[RANKING] and "pytorch" not in sections(markdown)[RANKING].split(
        "row(s) not ranked")[0]
    [line] = [line for line in not_ranked_lines(markdown) if line.startswith("| pytorch |")]
    assert "not ranked: repeats: 1 of 3 repeats ok" in line
    grid = sections(markdown)[GRID]
    assert "| pytorch · cuda12 | not ranked |" in grid and "| jax · cuda12 | **900** |" in grid
    assert html.count('<figure class="chart">') == 1  # the chart follows the gate too


def test_another_parameter_count_than_the_reference_keeps_a_row_out(tmp_path):
    other = training("mxnet", 5000)
    other.metrics.parameter_count = CNN.settings().parameter_count + 8
    unrecorded = training("chainer", 4000)
    unrecorded.metrics.parameter_count = None
    write(tmp_path, [training("pytorch", 1000), other, unrecorded])
    summary = summary_of(tmp_path)
    assert ranked_names(summary) == ["pytorch"]
    assert only(summary, framework="mxnet")["not_ranked"] == "parameters: 3,441,600, not the reference model's 3,441,592"
    assert only(summary, framework="chainer")["not_ranked"] == "parameters: no parameter count recorded"
    assert only(summary, framework="pytorch")["checks"]["parameters"].state == "passed"


def test_an_accuracy_outside_the_target_keeps_a_row_out_in_the_full_profile_on_real_data(tmp_path):
    low = CNN.accuracy_target - CNN.accuracy_tolerance - 0.01
    write(tmp_path, [training("pytorch", 1000), training("jax", 3000, accuracy=low)])
    summary = summary_of(tmp_path)
    assert ranked_names(summary) == ["pytorch"]
    assert only(summary, framework="jax")["not_ranked"] == "accuracy: below target 77% ± 3% (median 73.0%)"
    markdown = render(tmp_path)[0].read_text()
    assert "Accuracy target: 77% ± 3%; a row outside it is not ranked." in sections(markdown)[RANKING]


def test_outside_the_full_profile_on_real_data_accuracy_is_not_applicable_said_once_per_table(tmp_path):
    """A smoke run on synthetic data: accuracies are noise, so no row carries an accuracy flag and
    no row is kept out by its accuracy; each table says once that the target does not apply."""
    accuracies = {"pytorch": 0.101, "jax": 0.104, "tensorflow": 0.099, "mxnet": 0.100, "chainer": 0.31}
    write(tmp_path, [training(name, 1000 - index, accuracy=accuracy, data="synthetic", profile="smoke")
                     for index, (name, accuracy) in enumerate(accuracies.items())])
    summary = summary_of(tmp_path)
    assert all(flags == [] for flags in summary["flags"])
    assert all(checks["accuracy"].state == "not applicable" for checks in summary["checks"])
    assert summary["ranked"].all()
    markdown = render(tmp_path)[0].read_text()
    assert "outlier" not in markdown
    rule = "Accuracy target (77% ± 3%): not applicable here"
    assert sections(markdown)[RANKING].count(rule) == 1  # one table: said once
    assert sections(markdown)["CNN — CIFAR-10 training"].count(rule) == 1


# --- parity --------------------------------------------------------------------------------------------

LOGITS = [[0.5, -1.25, 2.0], [1.0, 0.0, -0.5]]


def parity_result(framework, *, variant="cuda12", workload="cnn", logits=LOGITS, status="ok", reason=None,
                  options=None) -> Result:
    """A parity cell's result, as run-matrix files it under the run folder's parity/."""
    count = declaration.get(workload).settings().parameter_count
    outputs = {"logits": logits, "logits_after_training": logits} if status == "ok" else {}
    return measured(Result(cell=Cell(framework, workload, variant=variant, precision="fp32", profile="full",
                                     data="synthetic", options=dict(options or {})),
                           status=status, reason=reason, outputs=outputs,
                           metrics=Metrics(parameter_count=count if status == "ok" else None),
                           provenance=Provenance(framework_version="1.0", device="cuda", gpu_name=H200)))


def test_a_row_that_failed_parity_is_never_ranked_and_each_row_shows_its_verdict(tmp_path):
    write(tmp_path, [training("pytorch", 1000), training("jax", 3000), training("tensorflow", 800),
                     training("mxnet", 700)])
    write(tmp_path / PARITY, [parity_result("pytorch"), parity_result("jax", logits=[[0.5, -1.25, 2.5], [1.0, 0.0, -0.5]]),
                       parity_result("mxnet", status="failed", reason="MXNetError: no kernel")])
    markdown, html = (path.read_text() for path in render(tmp_path))
    ranking = sections(markdown)[RANKING].split("row(s) not ranked")[0]
    assert "| 1 | pytorch |" in ranking and "| 2 | tensorflow |" in ranking and "jax" not in ranking
    assert "mxnet" not in ranking
    header = next(line for line in ranking.splitlines() if line.startswith("| # |"))
    assert "| Parity |" in header
    assert "| passed |" in next(line for line in ranking.splitlines() if line.startswith("| 1 | pytorch |"))
    tensorflow = next(line for line in ranking.splitlines() if line.startswith("| 2 | tensorflow |"))
    assert "not checked: no parity result for this framework" in tensorflow
    lines = not_ranked_lines(markdown)
    jax = next(line for line in lines if line.startswith("| jax |"))
    assert "failed: logits: relative difference 2.5e-01 &gt; 1e-04" in jax and "not ranked: parity: logits" in jax
    mxnet = next(line for line in lines if line.startswith("| mxnet |"))
    assert "its parity cell failed: MXNetError: no kernel" in mxnet
    assert "<th>Parity</th>" in html and "<th>Gate</th>" in html
    assert "- **Parity check:** 1 passed, 2 failed, 0 not checked (parity/parity.md)" in markdown


def test_a_run_without_a_parity_check_says_not_checked_and_still_ranks(tmp_path):
    write(tmp_path, [training("pytorch", 1000), training("jax", 900)])
    summary = summary_of(tmp_path)
    assert ranked_names(summary) == ["pytorch", "jax"]
    assert {str(checks["parity"]) for checks in summary["checks"]} == {
        "not checked: this run has no parity check (run-matrix --no-parity, or a run from before run-matrix ran one)"}


class PretendParityBackend(Backend):
    """Pretends to run cells: a benchmark cell is ok; a parity cell returns outputs, which are
    PyTorch's for every framework but jax (whose logits differ)."""

    name = "pretend-parity"
    ran: list = []

    def run_cell(self, job):
        PretendParityBackend.ran.append((job.cell, job.parity))
        result = Result(cell=job.cell, status="ok", provenance=Provenance(device="cpu", cpu_model=XEON))
        if job.parity:
            logits = [[9.0, 9.0, 9.0], [9.0, 9.0, 9.0]] if job.cell.framework == "jax" else LOGITS
            result.outputs = {"logits": logits}
            result.metrics.parameter_count = declaration.get(job.cell.workload).settings().parameter_count
        else:
            result.metrics = Metrics(steady_samples_per_s=100.0 if job.cell.framework == "pytorch" else 300.0,
                                     test_accuracy=0.1, parameter_count=CNN.settings().parameter_count)
        return measured(result)


@pytest.fixture
def pretend_parity(tmp_path, monkeypatch):
    from orchestrator import parity

    monkeypatch.setitem(registry.REGISTRY, "pretend-parity", registry.Registration(
        lambda known, options, log: PretendParityBackend(), "pretend-parity", "cells pretend to run"))
    monkeypatch.setattr(parity, "write_canonical", lambda data_dir, workloads: None)
    PretendParityBackend.ran = []
    return tmp_path


def run_matrix(folder: Path, *extra: str) -> int:
    return main(["run-matrix", "--backend", "pretend-parity", "--frameworks", "pytorch,jax", "--variants", "cpu",
                 "--workloads", "cnn", "--profile", "smoke", "--data", "synthetic", "--results-dir", str(folder),
                 "--data-dir", str(folder.parent / "data"), *extra])


def test_run_matrix_runs_the_parity_check_into_the_run_folder_and_the_report_gates_on_it(pretend_parity, capsys):
    folder = pretend_parity / "run"
    assert run_matrix(folder) == 0  # a failed parity check gates the ranking, not the exit status
    parity_cells = [cell for cell, parity in PretendParityBackend.ran if parity]
    assert [(cell.framework, cell.variant, cell.mode, cell.profile, cell.data) for cell in parity_cells] == [
        ("pytorch", "cpu", "eager", "full", "synthetic"), ("pytorch", "cpu", "compiled", "full", "synthetic"),
        ("jax", "cpu", "compiled", "full", "synthetic")]  # parity holds in every mode each framework runs
    parity_dir = folder / run_folder.PARITY_FOLDER
    assert parity_dir == folder / PARITY
    assert sorted(path.name for path in (parity_dir / "cells").iterdir()) == [
        "jax__cpu__cnn__fp32__compiled__full__synthetic__r0.json",
        "pytorch__cpu__cnn__fp32__compiled__full__synthetic__r0.json",
        "pytorch__cpu__cnn__fp32__eager__full__synthetic__r0.json"]
    assert (parity_dir / "parity.json").is_file() and (parity_dir / "parity.md").is_file()
    assert run_folder.run_mode(parity_dir) == run_folder.MODE_PARITY
    assert not (folder / "cells" / "jax__cpu__cnn__fp32__compiled__full__synthetic__r0.json").exists()
    assert "parity check: 2 passed, 1 failed, 0 not checked" in capsys.readouterr().err
    markdown = (folder / "report.md").read_text()
    ranking = sections(markdown)[RANKING].split("row(s) not ranked")[0]
    assert "| 1 | pytorch \\[compiled\\] |" in ranking and "| 1 | pytorch \\[eager\\] |" in ranking
    assert "| passed |" in ranking and "jax" not in ranking
    assert "not ranked: parity: logits: relative difference" in markdown
    html = (folder / "report.html").read_text()
    assert "<th>Parity</th>" in html and "<th>Gate</th>" in html
    # --resume keeps the parity check's ok cells too
    PretendParityBackend.ran = []
    assert run_matrix(folder, "--resume") == 0
    assert PretendParityBackend.ran == []


def test_the_parity_cells_of_a_run_always_hold_the_plain_reference():
    """One parity cell per workload and framework, variant and options the run has, whatever its
    precisions, profile and repeats; PyTorch at its defaults is added where the run lacks it."""
    from orchestrator import parity

    run = [Cell("jax", "cnn", variant="cpu", precision=precision, profile="smoke", data="synthetic", repeat=repeat)
           for precision in ("fp32", "bf16") for repeat in range(3)]
    run += [Cell("pytorch", "gru", variant="cu130", options={"channels_last": "on"})]
    cells = parity.cells_for(run, {"pytorch": "cpu", "jax": "cpu"})
    assert [(cell.workload, cell.framework, cell.variant, cell.options) for cell in cells] == [
        ("cnn", "pytorch", "cpu", {}), ("cnn", "jax", "cpu", {}),
        ("gru", "pytorch", "cpu", {}), ("gru", "pytorch", "cu130", {"channels_last": "on"})]
    assert {(cell.precision, cell.profile, cell.data, cell.repeat) for cell in cells} == {("fp32", "full", "synthetic", 0)}


def test_no_parity_skips_the_check_and_the_report_says_not_checked(pretend_parity):
    folder = pretend_parity / "run"
    assert run_matrix(folder, "--no-parity") == 0
    assert not any(parity for _, parity in PretendParityBackend.ran)
    assert not (folder / run_folder.PARITY_FOLDER).exists()
    markdown = (folder / "report.md").read_text()
    assert "| 1 | jax \\[compiled\\] |" in sections(markdown)[RANKING]
    assert "not checked: this run has no parity check" in markdown


def test_a_link_at_the_parity_folder_is_refused_and_never_read(pretend_parity, capsys):
    elsewhere = pretend_parity / "elsewhere"
    write(elsewhere, [parity_result("pytorch", variant="cpu")])
    folder = pretend_parity / "run"
    folder.mkdir()
    (folder / PARITY).symlink_to(elsewhere, target_is_directory=True)
    assert run_matrix(folder, "--force") == 2
    assert "parity is a symbolic link" in capsys.readouterr().err
    write(folder, [training("pytorch", 1000)])
    assert "not checked: this run has no parity check" in render(folder)[0].read_text()


def test_the_real_parity_check_runs_beside_real_cells(tmp_path):
    """run-matrix on the local backend with PyTorch's own environment: its CNN cell and its parity
    cell run for real, and the report shows the verdict beside the ranked row."""
    from support.framework_cells import framework_python

    python = framework_python("pytorch")
    folder = tmp_path / "run"
    code = main(["run-matrix", "--backend", "local", "--python", python, "--frameworks", "pytorch", "--variants",
                 "cpu", "--workloads", "cnn", "--modes", "eager", "--profile", "smoke", "--data", "synthetic",
                 "--results-dir", str(folder), "--data-dir", str(tmp_path / "data")])
    assert code == 0
    [verdict] = json.loads((folder / run_folder.PARITY_FOLDER / "parity.json").read_text())
    assert (verdict["framework"], verdict["status"]) == ("pytorch [eager]", "pass")
    ranking = sections((folder / "report.md").read_text())[RANKING]
    assert re.search(r"\| 1 \| pytorch \\\[eager\\\] \| cpu \|.*\| passed \|", ranking)


# --- energy: grouped as ranked, behind the gate ----------------------------------------------------------

def with_energy(result: Result, joules: float) -> Result:
    result.energy = Energy(gpu=DeviceEnergy(method="counter", devices=["0"], gross_j=joules * 100, mean_w=250.0),
                           cpu=DeviceEnergy(method="none", reason="no RAPL package zone"), basis_phase="steady",
                           basis_samples=100, basis_devices=["gpu"], joules_per_sample=joules,
                           net_joules_per_sample=joules / 2, samples_per_joule=1 / joules, kwh=joules * 100 / 3.6e6)
    return result


def test_energy_is_grouped_exactly_as_the_rankings_and_behind_the_same_gate(tmp_path):
    results = [with_energy(training("pytorch", 1000, repeat=repeat), 0.2) for repeat in range(2)]
    results += [with_energy(training("pytorch", 1000, repeat=repeat, gpu_model=A100), 0.9) for repeat in (2, 3)]
    results += [with_energy(training("jax", 100, device="cpu"), 0.05),
                with_energy(training("jax", 3000, precision="fp16"), 0.01),
                with_energy(training("mxnet", 1200), 0.1),  # diverged in its other repeat: never ranked
                training("mxnet", 0, repeat=1, status="failed", reason="diverged: the loss is nan")]
    write(tmp_path, results)
    context = build_context(report_frame(load_cells(tmp_path).results), load_reference(), charts=False)
    tables = {item["label"]: [row["cells"][0] for row in item["table"]["rows"]] for item in context["energy"]["tables"]}
    assert tables == {
        "GPU NVIDIA A100-SXM4-80GB · fp32 · full profile · real data": ["pytorch"],
        "GPU NVIDIA H200 · fp32 · full profile · real data": ["pytorch"],
        "GPU NVIDIA H200 · fp16 · full profile · real data": ["jax"],
        f"CPU {XEON} · fp32 · full profile · real data": ["jax"],
    }
    h200 = next(item for item in context["energy"]["tables"] if item["label"].startswith("GPU NVIDIA H200 · fp32"))
    assert h200["table"]["rows"][0]["cells"][2:5] == ["2", "1,000", "0.2"]  # two H200 repeats, the A100's apart
    html = render(tmp_path)[1].read_text()
    assert html.count('id="chart-energy-') >= 4 and "mxnet" not in html.split('<section id="energy">')[1]


# --- the grid ---------------------------------------------------------------------------------------------

def inference(framework, images_per_s, *, device="cuda", mode="") -> Result:
    return measured(Result(
        cell=Cell(framework, "resnet50", variant="cuda12" if device == "cuda" else "cpu", profile="full", data="real",
                  mode=mode),
        metrics=Metrics(images_per_s=images_per_s, seconds_per_1000_images=1000 / images_per_s,
                        parameter_count=declaration.get("resnet50").settings().parameter_count),
        provenance=Provenance(framework_version="1.0", device=device, gpu_name=H200 if device == "cuda" else None,
                              cpu_model=XEON)))


def test_grid_rows_are_ordered_by_one_figure_defined_the_same_for_every_row(tmp_path):
    """ONNX Runtime has ResNet-50 only: it is ordered by the first column like every row, so it
    follows the rows that have a CNN figure, however fast its only cell is."""
    write(tmp_path, [training("pytorch", 1000), training("jax", 500), inference("pytorch", 100),
                     inference("jax", 400), inference("onnxruntime", 450)])
    context = build_context(report_frame(load_cells(tmp_path).results), load_reference(), charts=False)
    [grid] = context["grids"]
    assert [row["name"] for row in grid["rows"]] == ["pytorch", "jax", "onnxruntime"]
    assert grid["order"].startswith("Rows are ordered by the first column, CNN — CIFAR-10 training")
    markdown, html = (path.read_text() for path in render(tmp_path))
    assert grid["order"] in " ".join(sections(markdown)[GRID].split()) and grid["order"] in html


def test_modes_are_ranked_side_by_side_and_the_grid_shows_each_frameworks_best_mode_by_name(tmp_path):
    """FAIRNESS.md, modes-compared: one device and precision ranks every mode of every framework as
    a row of its own, named by its mode; the grid has one row per framework, each cell the best of
    its modes there, naming that mode (which may differ from workload to workload)."""
    write(tmp_path, [training("pytorch", 1000, mode="eager"), training("pytorch", 1500, mode="compiled"),
                     training("tensorflow", 1200, mode="graph"), training("tensorflow", 900, mode="compiled"),
                     inference("pytorch", 100, mode="eager"), inference("pytorch", 80, mode="compiled"),
                     inference("tensorflow", 90, mode="compiled")])
    summary = summary_of(tmp_path)
    assert summary["row_name"].tolist() == ["pytorch [compiled]", "tensorflow [graph]", "pytorch [eager]",
                                            "tensorflow [compiled]"]
    assert summary["rank"].tolist() == [1, 2, 3, 4] and summary["group"].nunique() == 1
    context = build_context(report_frame(load_cells(tmp_path).results), load_reference(), charts=False)
    [grid] = context["grids"]
    shown = {row["name"]: [(cell["text"], cell["mode"], cell["best"]) for cell in row["cells"]] for row in grid["rows"]}
    assert shown == {"pytorch": [("1,500", "compiled", True), ("100", "eager", True)],
                     "tensorflow": [("1,200", "graph", False), ("90", "compiled", False)]}
    markdown, html = (path.read_text() for path in render(tmp_path))
    assert "| pytorch · cuda12 | **1,500** \\[compiled\\] | **100** \\[eager\\] |" in sections(markdown)[GRID]
    assert '<span class="mode">compiled</span>' in html and '<span class="mode">graph</span>' in html
    assert "pytorch \\[compiled\\]" in sections(markdown)[RANKING]


def test_a_group_whose_rows_have_no_ok_cell_is_no_grid(tmp_path):
    """On a machine without a GPU the CUDA variants are unsupported and record no device: they are
    listed under "Not run", not shown as a grid headed "device not recorded"."""
    unsupported = [measured(Result(cell=Cell(framework, workload, variant=variant, profile="smoke", data="synthetic"),
                                   status="unsupported", reason="no GPU runtime on this host"))
                   for framework, variant in (("pytorch", "cu130"), ("jax", "cu129")) for workload in ("cnn", "gru")]
    write(tmp_path, [training("pytorch", 30, device="cpu", profile="smoke", data="synthetic"),
                     training("jax", 0, device="cpu", profile="smoke", data="synthetic", status="failed",
                              reason="killed"), *unsupported])
    context = build_context(report_frame(load_cells(tmp_path).results), load_reference(), charts=False)
    assert [grid["label"] for grid in context["grids"]] == [f"CPU {XEON} · fp32 · smoke profile · synthetic data"]
    assert [row["name"] for row in context["grids"][0]["rows"]] == ["pytorch"]  # jax failed: in "Not ranked"
    markdown = render(tmp_path)[0].read_text()
    assert "device not recorded" not in sections(markdown)[GRID]
    assert "no GPU runtime on this host** (4 cells)" in markdown


# --- GRU kernels ------------------------------------------------------------------------------------------

def test_a_gru_rows_name_says_which_kernel_ran(tmp_path):
    kernels = {"pytorch": "cudnn: cuDNN's fused GRU through torch.nn.GRU",
               "jax": "scan: lax.scan over 100 time steps",
               "keras-torch": "cudnn: torch._VF.gru | then: python-loop: Keras' torch gru fallback",
               "mxnet": "<b>bold</b>: not a kind"}
    write(tmp_path, [training(name, 1000 - 100 * index, workload="gru", accuracy=0.86, extras={"gru_kernel": kernel})
                     for index, (name, kernel) in enumerate(kernels.items())] + [training("pytorch", 900)])
    summary = summary_of(tmp_path, "gru")
    assert summary["row_name"].tolist() == ["pytorch [gru=cudnn]", "jax [gru=scan]",
                                            "keras-torch [gru=cudnn+python-loop]", "mxnet"]
    assert summary_of(tmp_path)["row_name"].tolist() == ["pytorch"]  # the CNN has no GRU kernel
    markdown = render(tmp_path)[0].read_text()
    gru = sections(markdown)[RANKING].split("### GRU")[1]
    assert "| 1 | pytorch \\[gru=cudnn\\] |" in gru and "| 2 | jax \\[gru=scan\\] |" in gru
    # the grid keeps one row per framework across workloads: the GRU cell names its kernel
    assert "\\[gru=cudnn\\]" in sections(markdown)[GRID] and "| pytorch · cuda12 |" in sections(markdown)[GRID]


# --- the page shows the gate ------------------------------------------------------------------------------

def test_the_gates_columns_are_in_both_pages(tmp_path):
    write(tmp_path, [training("pytorch", 30, device="cpu", profile="smoke", data="synthetic")])
    written = write_report(tmp_path)
    markdown, html = written.markdown.read_text(), written.html.read_text()
    table = next(line for line in sections(markdown)["CNN — CIFAR-10 training"].splitlines() if line.startswith("| Fr"))
    assert "| Parity | Gate |" in table
    assert "| Parity |" in next(line for line in sections(markdown)[RANKING].splitlines() if line.startswith("| # |"))
    assert "<th>Parity</th><th>Gate</th>" in html
