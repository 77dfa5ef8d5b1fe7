"""The report's views (docs/MEASURED.md, reading the report): the framework x workload grid first, the sweep view of a
framework's variants and precisions, the not-run cells listed by reason, the per-row step plots,
and code.html (each workload's implementations side by side, sections aligned).

Fake run folders are built from Result objects, as the other report tests do; code.html reads this
checkout's real workloads/ files."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import report
from orchestrator.report.code_view import aligned, read_matched, split_sections
from orchestrator.report.grid import cell_colour
from orchestrator.report.steps import MAX_COLUMNS, step_plot
from orchestrator.report.sweep import speed_ratio, sweep_tables
from orchestrator.results import cell_path, load_cells, load_reference
from workloads.common import declaration
from workloads.common.result import Cell, Metrics, Provenance, Result, Samples
from support.records import measured

ROOT = Path(__file__).resolve().parent.parent
H200 = "NVIDIA H200"
GRID = "At a glance: each workload's headline figure, per framework"
NOT_RUN = "Not run: unsupported and not applicable"
SWEEP = "Variants and precisions side by side"


def training(framework, rate, *, variant="cu126", precision="fp32", repeat=0, status="ok", reason=None,
             steps=None, epoch_steps=None, cuda="12.6", cudnn="9.1", driver="570.1", matched=None,
             workload="cnn") -> Result:
    steps = list(steps if steps is not None else [0.8] + [0.02] * 9 + [0.05] + [0.02] * 9)
    metrics = Metrics()
    if status == "ok":
        metrics = Metrics(train_time_s=sum(steps), steady_samples_per_s=rate, samples_per_s=rate / 2,
                          test_accuracy=0.77, parameter_count=declaration.get(workload).settings().parameter_count)
    extras = {"layout": "NCHW", "tf32": "off", "optimizer": "SGD"}
    if matched:
        extras["matched"] = matched
    return measured(Result(
        cell=Cell(framework, workload, variant=variant, precision=precision, profile="full", data="real",
                  repeat=repeat),
        status=status, reason=reason, metrics=metrics,
        samples=Samples(first_step_s=steps[0], epoch_times_s=[sum(steps)], epoch_steps=epoch_steps or [len(steps)],
                        batch_times_s=steps if status == "ok" else []),
        provenance=Provenance(framework_version="1.0", device="cuda", gpu_name=H200, gpu_driver=driver,
                              cuda_version=cuda, cudnn_version=cudnn, cpu_model="Xeon", hostname="host-1",
                              extras=extras)))


def inference(framework, images_per_s, *, variant="cu126", warmup=5) -> Result:
    return measured(Result(
        cell=Cell(framework, "resnet50", variant=variant, profile="full", data="real"),
        metrics=Metrics(images_per_s=images_per_s, seconds_per_1000_images=1000 / images_per_s,
                        parameter_count=23_508_032),
        samples=Samples(batch_times_s=[32 / images_per_s] * 40),
        settings={"batch_size": 32, "warmup_batches": warmup},
        provenance=Provenance(framework_version="1.0", device="cuda", gpu_name=H200, cpu_model="Xeon")))


def write(folder: Path, results, not_applicable=()) -> Path:
    for result in results:
        result.write(cell_path(folder, result.cell))
    if not_applicable:
        invocations = [{"not_applicable": list(not_applicable)}] * 2  # two invocations record the same pairs
        (folder / "run.json").write_text(json.dumps({"invocations": invocations}))
    return folder


def sections(markdown: str) -> dict[str, str]:
    parts = re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


ONNX_NOT_APPLICABLE = {"framework": "onnxruntime", "workload": "cnn", "variants": ["cu126"],
                       "reason": "an inference engine: it does not train"}


@pytest.fixture
def run(tmp_path) -> Path:
    """pytorch 1000/1200/1400 steady samples/s (median 1200), tensorflow 600, in two CUDA variants and
    two precisions for pytorch; ResNet-50 for pytorch, onnxruntime; unsupported cells."""
    results = [training("pytorch", rate, repeat=repeat, matched="dense kernels (out, in) | epsilon <after> sqrt")
               for repeat, rate in enumerate([1000.0, 1400.0, 1200.0])]
    results += [training("pytorch", 1000.0, variant="cu118", cuda="11.8", cudnn="8.9"),
                training("pytorch", 2400.0, precision="fp16"),
                training("pytorch", 1500.0, variant="cu118", precision="fp16", cuda="11.8", cudnn="8.9"),
                training("tensorflow", 600.0),
                training("tensorflow", 0, variant="cpu", precision="fp16", status="unsupported",
                         reason="fp16 needs a CUDA GPU"),
                training("jax", 0, variant="cpu", precision="fp16", status="unsupported",
                         reason="fp16 needs a CUDA GPU"),
                training("chainer", 0, status="failed", reason="out of memory"),
                inference("pytorch", 400.0), inference("onnxruntime", 800.0)]
    return write(tmp_path, results, [ONNX_NOT_APPLICABLE])


def context_of(folder: Path, **options) -> dict:
    from orchestrator.report.frame import report_frame
    from orchestrator.report.metadata import recorded_not_applicable

    return report.build_context(report_frame(load_cells(folder).results), load_reference(),
                                not_applicable=recorded_not_applicable(folder), **options)


# --- the grid --------------------------------------------------------------------------------------

def test_the_grid_has_a_row_per_framework_and_a_column_per_workload_per_group(run):
    grids = context_of(run)["grids"]
    assert [grid["label"] for grid in grids] == ["GPU NVIDIA H200 · fp32 · full profile · real data",
                                                 "GPU NVIDIA H200 · fp16 · full profile · real data"]
    assert [grid["id"] for grid in grids] == ["grid-1", "grid-2"]
    fp32 = grids[0]
    assert [column["workload"] for column in fp32["columns"]] == ["cnn", "resnet50"]
    cells = {(row["name"], row["variant"]): row["cells"] for row in fp32["rows"]}
    pytorch = cells[("pytorch", "cu126")]
    # the median of the ok repeats, the column's best
    assert pytorch[0]["text"] == "1,200" and pytorch[0]["best"] and pytorch[0]["relative"] == "1.00x"
    tensorflow = cells[("tensorflow", "cu126")][0]
    assert tensorflow["text"] == "600" and not tensorflow["best"] and tensorflow["relative"] == "2.00x"
    assert tensorflow["colour"] != pytorch[0]["colour"]
    # ResNet-50: onnxruntime is the column's best; its CNN cell is not applicable (run.json), not "not run"
    onnx = cells[("onnxruntime", "cu126")]
    assert onnx[1]["best"] and onnx[1]["text"] == "800" and not pytorch[1]["best"]
    assert onnx[0]["text"] == "n/a" and "does not train" not in onnx[0]["text"]
    assert cells[("tensorflow", "cu126")][1]["text"] == "-"
    assert ("chainer", "cu126") not in cells  # no ok cell: in "Not ranked", not in a grid (grid-ran-rows)
    # ordered by the first column (CNN), best first; onnxruntime has none: after every row that has one
    assert list(cells) == [("pytorch", "cu126"), ("pytorch", "cu118"), ("tensorflow", "cu126"),
                           ("onnxruntime", "cu126")]


def test_cell_colours_run_from_green_at_the_best_to_red_far_behind():
    hues = [int(re.match(r"hsl\((\d+),", cell_colour(relative)).group(1)) for relative in (1.0, 1.5, 2.0, 4.0, 8.0, 50)]
    assert hues[0] == 120 and hues[-2] == hues[-1] == 0
    assert hues == sorted(hues, reverse=True) and len(set(hues[:5])) == 5


def test_the_grid_is_the_first_thing_on_both_pages(run):
    markdown_path, html_path = report.render(run)
    markdown, html = markdown_path.read_text(), html_path.read_text()
    assert list(sections(markdown))[0] == GRID
    grid = sections(markdown)[GRID]
    first_table = [line for line in grid.split("### GPU NVIDIA H200 · fp16")[0].splitlines() if line.startswith("|")]
    assert first_table[0].startswith("| Framework · variant | CNN — CIFAR-10 training (median steady samples/s")
    assert "| pytorch · cu126 | **1,200** | 400 (2.00x) |" in first_table
    assert "| onnxruntime · cu126 | n/a | **800** |" in first_table
    assert "| tensorflow · cu126 | 600 (2.00x) | - |" in first_table
    body = html.split("<body>", 1)[1]
    assert body.index("<h1>") < body.index('<section id="grids">') < body.index("<table") \
        == body.index('<table class="grid" id="grid-1">')
    assert body.index('<table class="grid" id="grid-2">') < body.index('<section id="ranking">')
    best = re.findall(r'<td class="figure best"[^>]*>([^<]*)', body)
    assert sorted(text.strip() for text in best) == ["1,200 ★", "2,400 ★", "800 ★"]
    assert 'href="code.html"' in body


# --- the sweep view ----------------------------------------------------------------------------------

def test_the_sweep_view_compares_variants_and_precisions_with_the_versions_each_saw(run):
    markdown = report.render(run)[0].read_text()
    sweep = sections(markdown)[SWEEP]
    assert sweep.count("### ") == 1  # only pytorch ran more than one variant or precision
    assert "### CNN — CIFAR-10 training: pytorch on GPU NVIDIA H200 · full profile · real data" in sweep
    rows = [line for line in sweep.splitlines() if line.startswith("|")]
    assert rows[0].startswith("| Variant | Precision | Repeats | Median steady samples/s | Speed vs cu118 | "
                              "Speed vs fp32 | CUDA (as the framework saw it) | cuDNN | Driver |")
    # no declared order given here (the registered pytorch's variants would be): cu118 before cu126
    assert rows[2].startswith("| cu118 | fp32 | 1 | 1,000 | 1.00x | 1.00x | 11.8 | 8.9 | 570.1 |")
    assert rows[3].startswith("| cu118 | fp16 | 1 | 1,500 | 1.00x | 1.50x | 11.8 | 8.9 | 570.1 |")
    assert rows[4].startswith("| cu126 | fp32 | 3 | 1,200 | 1.20x | 1.00x | 12.6 | 9.1 | 570.1 |")
    assert rows[5].startswith("| cu126 | fp16 | 1 | 2,400 | 1.60x | 2.00x | 12.6 | 9.1 | 570.1 |")


def test_the_first_variant_is_the_declared_one_and_a_single_configuration_has_no_sweep(run):
    context = context_of(run, variant_order={"pytorch": ["cu126", "cu118"]})
    [table] = context["sweeps"]
    assert table["table"]["headers"][4] == "Speed vs cu126"
    cells = [row["cells"][:6] for row in table["table"]["rows"]]
    assert cells[2] == ["cu118", "fp32", "1", "1,000", "0.83x", "1.00x"]
    from orchestrator.report.frame import report_frame
    from orchestrator.report.summary import summarise

    single = summarise(report_frame([training("jax", 900.0)]))
    assert sweep_tables(single) == []


def test_speed_ratios_read_the_same_way_whichever_direction_is_better():
    assert speed_ratio(1200.0, 1000.0, lower_is_better=False) == pytest.approx(1.2)
    assert speed_ratio(5.0, 10.0, lower_is_better=True) == pytest.approx(2.0)  # half the time: twice as fast
    assert speed_ratio(float("nan"), 10.0, lower_is_better=True) != speed_ratio(1.0, 1.0, lower_is_better=True)


# --- unsupported and not applicable, by reason -------------------------------------------------------

def test_unsupported_and_not_applicable_cells_collapse_into_one_list_per_reason(run):
    context = context_of(run)
    assert context["not_run"] == [
        {"reason": "unsupported: fp16 needs a CUDA GPU",
         "cells": ["cnn · jax · cpu · fp16", "cnn · tensorflow · cpu · fp16"]},
        {"reason": "not applicable: an inference engine: it does not train", "cells": ["cnn · onnxruntime (cu126)"]},
    ]
    markdown = report.render(run)[0].read_text()
    listed = sections(markdown)[NOT_RUN]
    assert ("- **unsupported: fp16 needs a CUDA GPU** (2 cells): cnn · jax · cpu · fp16; "
            "cnn · tensorflow · cpu · fp16") in listed
    cnn = sections(markdown)["CNN — CIFAR-10 training"]
    not_ranked = [line for line in cnn.split("### Not ranked")[1].split("###")[0].splitlines() if line.startswith("|")]
    assert len(not_ranked) == 3 and not_ranked[2].startswith("| chainer |")  # only what ran and failed
    assert "3 row(s) of this workload could not run" in cnn


# --- the step plots ----------------------------------------------------------------------------------

def test_a_training_step_plot_marks_the_first_step_and_each_epochs_end():
    steps = [0.9] + [0.02] * 9 + [0.06] + [0.02] * 9
    plot = step_plot([{"repeat": 0, "times": steps, "epoch_steps": [10, 10], "warmup_batches": None},
                      {"repeat": 1, "times": steps, "epoch_steps": [10, 10], "warmup_batches": None}], training=True)
    svg = plot["svg"]
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<polyline") == 2 and svg.count('fill="#d62728"') == 3  # two first-step marks and their label
    assert "first step 900 ms" in svg and "median 20 ms" in svg
    assert svg.count('stroke-dasharray="3,3"') == 1  # one epoch boundary between two epochs
    assert "r0, r1" in plot["caption"] and "first step" in plot["caption"]


def test_an_inference_plot_says_warm_up_ran_before_and_long_runs_stay_small():
    plot = step_plot([{"repeat": 0, "times": [0.05] * 40, "epoch_steps": [], "warmup_batches": 5}], training=False)
    assert "<circle" not in plot["svg"] and "after 5 untimed warm-up batches" in plot["caption"]
    long = [0.01] * 20_000
    long[12_345] = 0.5  # a retrace: still visible once binned
    plot = step_plot([{"repeat": 0, "times": long, "epoch_steps": [10_000, 10_000], "warmup_batches": None}],
                     training=True)
    assert plot["svg"].count("M") == MAX_COLUMNS and len(plot["svg"]) < 30_000
    assert "500 ms" in plot["svg"]
    assert step_plot([{"repeat": 0, "times": [], "epoch_steps": [], "warmup_batches": None}], training=True) is None


def test_each_rows_details_hold_its_step_plot_in_the_html_only(run):
    markdown_path, html_path = report.render(run)
    html = html_path.read_text()
    details = html.split("<details>")[1:]
    with_steps = [part for part in details if '<figure class="steps">' in part.split("</details>")[0]]
    # every row with an ok repeat: pytorch x4, tensorflow and the two ResNet-50 rows
    assert len(with_steps) == 7
    assert "<svg" not in markdown_path.read_text()


# --- code.html: the Rosetta view ---------------------------------------------------------------------

def test_sections_are_split_at_their_markers_and_aligned_across_files():
    text = (ROOT / "workloads" / "cnn" / "pytorch.py").read_text()
    parts = split_sections(text)
    assert list(parts) == ["header", "model", "canonical weights", "run"]
    first_line, code = parts["model"]
    assert text.splitlines()[first_line - 1] == code.splitlines()[0] and code.startswith("# --- model")
    # every line of the file is in exactly one section (blank lines between sections aside)
    assert [line for _, code in parts.values() for line in code.splitlines() if line.strip()] == \
        [line for line in text.splitlines() if line.strip()]
    assert aligned([["header", "model", "run", "parity"], ["header", "model", "loss and optimizer", "run"],
                    ["header", "run", "parity", "export"]]) == \
        ["header", "model", "loss and optimizer", "run", "parity", "export"]


def test_matched_is_read_from_the_source_without_importing_it():
    assert read_matched('import torch\nMATCHED = ("a", "b " "c")\n') == ["a", "b c"]
    assert read_matched("MATCHED = compute()\n") == [] and read_matched("def (:\n") == []
    assert len(read_matched((ROOT / "workloads" / "gru" / "jax.py").read_text())) >= 2


def test_code_html_shows_every_implementation_side_by_side_with_the_runs_figures(run):
    written = report.write_report(run)
    assert written.code == run / "code.html"
    html = written.code.read_text()
    for workload in ("cnn", "gru", "resnet50"):
        assert f'<section class="workload" id="code-{workload}">' in html
    options = re.findall(r'<select id="left">(.*?)</select>', html, flags=re.S)[0]
    keys = re.findall(r'<option value="([^"]+)"', options)
    assert {"pytorch", "tensorflow", "jax", "keras", "mxnet-module", "onnxruntime"} <= set(keys)
    assert 'data-serves="keras-jax keras-tf keras-torch"' in options
    assert '<body data-pair="pytorch,tensorflow">' in html
    cnn = html.split('id="code-cnn"')[1].split('<section class="workload"')[0]
    model_row = cnn.split('<div class="row" data-section="model">')[1].split('<div class="row"')[0]
    assert model_row.count('<div class="pane" data-framework=') >= 12
    assert 'class="highlight"' in model_row and "VGGStyleCNN" in model_row  # PyTorch's model, highlighted
    # pytorch's figures of this run and what it had to match, as the run recorded it (escaped)
    def head(key):
        return re.split(f'<div class="pane" data-framework="{key}"[^>]*>', cnn)[1].split("</div>\n<div")[0]

    pytorch_head = head("pytorch")
    assert "pytorch · cu126 · fp32 · GPU NVIDIA H200: 1,200 steady samples/s (1.00x the group" in pytorch_head
    assert "epsilon &lt;after&gt; sqrt" in pytorch_head and "as this run recorded it" in pytorch_head
    jax_head = head("jax")
    assert "from the file" in jax_head and "<li>" in jax_head  # jax recorded nothing here: its MATCHED
    # onnxruntime has no CNN: a pane that says so, so that the chosen pair always has two columns
    assert "No implementation of this workload." in head("onnxruntime")
    assert cnn.count('data-framework="onnxruntime"') == 1 + len(re.findall(r'<div class="row" data-section=', cnn))
    # self-contained: works from file://, nothing fetched
    assert not re.search(r"<link|<img|@import|src=|https?://", html)
    assert "<script>" in html and written.ranking.startswith("## Steady-state ranking")


def test_the_report_reads_the_cells_once_and_imports_no_framework(run, monkeypatch):
    from orchestrator.report import pages

    calls = []
    original = pages.load_cells
    monkeypatch.setattr(pages, "load_cells", lambda folder: calls.append(folder) or original(folder))
    written = report.write_report(run)
    assert len(calls) == 1 and written.ranking == report.ranking_text(run)
    script = ("import sys; from orchestrator.report import write_report; write_report(sys.argv[1]); "
              "print(sorted({'torch', 'tensorflow', 'jax', 'mxnet', 'paddle', 'keras'} & set(sys.modules)))")
    completed = subprocess.run([sys.executable, "-c", script, str(run)], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


def test_code_html_is_well_formed_with_unique_ids(run):
    from test_report_fairness import _Structure

    structure = _Structure()
    structure.feed(report.write_report(run).code.read_text())
    structure.close()
    assert structure.problems == [] and structure.stack == []
    assert [name for name, count in structure.ids.items() if count > 1] == []
