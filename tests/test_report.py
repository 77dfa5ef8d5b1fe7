"""The comparison report: summary statistics, Markdown tables, a safe self-contained HTML page."""
from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from orchestrator.report import REFERENCE_LABEL, render, summarise
from orchestrator.results import cell_path, to_frame
from workloads.common.result import Cell, Metrics, Provenance, Result
from support.records import measured

SCRIPT_REASON = "<script>alert(1)</script> | exploded"


def cell_result(framework, workload, *, precision="fp32", repeat=0, status="ok", reason=None,
                seconds=None, rate=None, accuracy=None, variant="cuda12") -> Result:
    """A result; training ranks its steady samples/s (`rate`), ResNet-50 its images/s (1000 / `seconds`)."""
    metrics = Metrics()
    if status == "ok" and workload == "resnet50":
        metrics = Metrics(seconds_per_1000_images=seconds, images_per_s=1000 / seconds,
                          parameter_count=23_508_032)
    elif status == "ok":
        metrics = Metrics(train_time_s=49_920 / rate + 0.5, samples_per_s=49_984 / (49_920 / rate + 0.5),
                          steady_samples_per_s=rate, test_accuracy=accuracy, parameter_count=3_441_592)
    return measured(Result(
        cell=Cell(framework=framework, workload=workload, variant=variant, precision=precision,
                  profile="full", data="real", repeat=repeat),
        status=status, reason=reason, started_at=f"2026-12-02T10:0{repeat}:00+00:00", metrics=metrics,
        provenance=Provenance(framework_version="1.0", device="cuda", gpu_name="NVIDIA H200",
                              gpu_driver="570.1", hostname="gpu-host-1", cpu_model="Xeon",
                              backend="docker", git_revision="abc1234", data_source="real"),
    ))


@pytest.fixture
def results():
    made = []
    # cnn: pytorch 1400/1000/1200 steady samples/s (median 1200), tensorflow 500/700/600 (median 600 =
    # 2.00x), fp16 unsupported, jax failed with a reason that tries to inject a script.
    for repeat, rate in enumerate([1400.0, 1000.0, 1200.0]):
        made.append(cell_result("pytorch", "cnn", repeat=repeat, rate=rate, accuracy=0.77))
    for repeat, rate in enumerate([500.0, 700.0, 600.0]):
        made.append(cell_result("tensorflow", "cnn", repeat=repeat, rate=rate, accuracy=0.768))
    made.append(cell_result("pytorch", "cnn", precision="fp16", variant="cpu", status="unsupported",
                            reason="fp16 needs a CUDA GPU"))
    made.append(cell_result("jax", "cnn", status="failed", reason=SCRIPT_REASON))
    # resnet50: a single repeat each, so no spread
    made.append(cell_result("pytorch", "resnet50", seconds=1.6))
    made.append(cell_result("tensorflow", "resnet50", seconds=2.4))
    # gru: nothing succeeded
    made.append(cell_result("pytorch", "gru", status="timeout", reason="ran past 3600 s"))
    return made


@pytest.fixture
def results_dir(tmp_path, results):
    for result in results:
        result.write(cell_path(tmp_path, result.cell))
    return tmp_path


def row(summary, framework, precision="fp32"):
    rows = summary[(summary["framework"] == framework) & (summary["precision"] == precision)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_summary_medians_spread_and_relative_to_best(results):
    summaries = summarise(to_frame(results))
    assert list(summaries) == ["cnn", "resnet50", "gru"]
    cnn = summaries["cnn"]
    pytorch, tensorflow = row(cnn, "pytorch"), row(cnn, "tensorflow")
    assert pytorch["median"] == 1200.0 and pytorch["min"] == 1000.0 and pytorch["max"] == 1400.0
    assert pytorch["ok_repeats"] == 3
    assert pytorch["relative_spread"] == pytest.approx(400 / 1200)
    assert pytorch["relative_to_best"] == pytest.approx(1.0) and pytorch["rank"] == 1
    assert tensorflow["median"] == 600.0
    assert tensorflow["relative_to_best"] == pytest.approx(2.0) and tensorflow["rank"] == 2
    assert pytorch["test_accuracy"] == pytest.approx(0.77)
    assert pytorch["train_time_s"] == pytest.approx(49_920 / 1200 + 0.5)
    assert pytorch["parameter_count"] == 3_441_592
    assert pytorch["gpu_name"] == "NVIDIA H200"
    # fastest first, then the cells without numbers
    assert cnn["framework"].tolist()[:2] == ["pytorch", "tensorflow"]
    assert set(cnn["status"].tolist()[2:]) == {"unsupported", "failed"}


def test_cells_without_an_ok_repeat_keep_their_reason_and_no_numbers(results):
    cnn = summarise(to_frame(results))["cnn"]
    unsupported = row(cnn, "pytorch", "fp16")
    assert unsupported["status"] == "unsupported"
    assert unsupported["note"] == "unsupported: fp16 needs a CUDA GPU"
    assert unsupported["ok_repeats"] == 0
    assert math.isnan(unsupported["median"]) and math.isnan(unsupported["relative_to_best"])
    assert unsupported["rank"] is pd.NA


def test_single_repeat_has_no_spread_and_partly_failed_cells_say_so(results):
    results.append(cell_result("tensorflow", "resnet50", repeat=1, status="failed", reason="CUDA OOM"))
    summaries = summarise(to_frame(results))
    resnet = summaries["resnet50"]
    assert math.isnan(row(resnet, "pytorch")["relative_spread"])
    tensorflow = row(resnet, "tensorflow")
    assert tensorflow["status"] == "ok" and tensorflow["ok_repeats"] == 1 and tensorflow["runs"] == 2
    assert "1 of 2 repeats not ok" in tensorflow["note"] and "CUDA OOM" in tensorflow["note"]
    # shown with its figure, not ranked (FAIRNESS.md: all-repeats-ok)
    assert tensorflow["median"] == pytest.approx(1000 / 2.4) and math.isnan(tensorflow["relative_to_best"])
    assert not tensorflow["ranked"] and tensorflow["not_ranked"] == "repeats: 1 of 2 repeats ok"
    assert "test_accuracy" not in resnet.columns  # inference has no accuracy
    assert summaries["gru"]["status"].tolist() == ["timeout"]


def sections(markdown: str) -> dict[str, str]:
    """The Markdown report's "## " sections by heading (the ranking's "### CNN" stays inside its own)."""
    parts = re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_markdown_has_tables_per_workload_and_group_and_the_labelled_reference(results_dir):
    markdown_path, _ = render(results_dir)
    assert markdown_path == results_dir / "report.md"
    markdown = markdown_path.read_text()
    parts = sections(markdown)
    cnn_title, resnet_title, gru_title = "CNN — CIFAR-10 training", "ResNet-50 — feature extraction (inference)", \
        "GRU — IMDB sentiment training"
    assert {cnn_title, resnet_title, gru_title} <= set(parts)
    assert markdown.count(REFERENCE_LABEL) == 3
    cnn_section = parts[cnn_title]
    assert "### GPU NVIDIA H200 · fp32 · full profile · real data" in cnn_section
    table = table_lines(cnn_section.split("### Not ranked")[0])
    assert len(table) == 2 + 2  # header, separator, the two ok rows of the group
    assert table[0].startswith("| Framework | Variant | Precision | Repeats | Median steady samples/s | FLOP/s | "
                               "% of peak | Min–max | Spread | Relative | First step (s) | Total train time (s) | "
                               "Samples/s overall | Test accuracy | Parameters |")
    # these forged results record no FLOP/s (tests/test_report_ceiling.py forges some that do)
    assert table[2].startswith("| pytorch | cuda12 | fp32 | 3 | 1,200 | - | not counted | 1,000–1,400 | 33% | 1.00x |")
    assert table[3].startswith("| tensorflow | cuda12 | fp32 | 3 | 600 | - | not counted | 500–700 | 33% | 2.00x |")
    not_ranked = table_lines(cnn_section.split("### Not ranked")[1].split("### Fast paths")[0])
    # an unsupported cell is not a table row: it is listed under its reason
    assert not any(line.startswith("| pytorch | cpu | fp16 |") for line in not_ranked)
    assert "1 row(s) of this workload could not run" in cnn_section
    assert parts["Not run: unsupported and not applicable"].count("\n- ") == 1
    assert "- **unsupported: fp16 needs a CUDA GPU** (1 cell): cnn · pytorch · cpu · fp16" in markdown
    failed = next(line for line in not_ranked if line.startswith("| jax |"))
    # a pipe inside a reason is escaped, so the row keeps its column count
    assert "\\| exploded" in failed
    assert len(re.findall(r"(?<!\\)\|", failed)) == len(re.findall(r"(?<!\\)\|", not_ranked[0]))
    # the published numbers appear in their own table, headed by what they are (the study's train time)
    assert "| Framework | K80 (total train time, s) | P100 (total train time, s) |" in cnn_section
    assert "| pytorch | 169 | 51 |" in cnn_section
    pytorch_row = next(line for line in parts[resnet_title].splitlines() if line.startswith("| pytorch | cuda12"))
    assert "| 1 | 625 | - | not counted | - | - | 1.00x | 1.60 |" in pytorch_row  # single repeat: no spread
    assert "| tensorflow | cuda12 | fp32 | 1 | 417 | - | not counted | - | - | 1.50x | 2.40 |" in parts[resnet_title]
    assert "| Framework | K80 (s / 1000 images) |" in parts[resnet_title]
    assert "- **Git revision:** abc1234" in markdown
    assert "NVIDIA H200 (driver 570.1)" in markdown


def test_html_is_self_contained_escaped_and_has_charts(results_dir, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("report")
    markdown_path, html_path = render(results_dir, out_dir=out_dir)
    assert (markdown_path, html_path) == (out_dir / "report.md", out_dir / "report.html")
    html = html_path.read_text()
    assert html.count("<svg") == 2  # one group each in cnn and resnet50; gru has no ok cell to chart
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert not re.search(r"<link|<img|@import|src=", html)
    assert REFERENCE_LABEL in html
    assert "tensorflow" in html and "2.00x" in html


def test_report_survives_missing_workloads_and_missing_metrics(tmp_path):
    # Only a resnet50 result that is ok but carries no metrics at all, and a failed one.
    Result(cell=Cell(framework="mxnet", workload="resnet50")).write(
        cell_path(tmp_path, Cell(framework="mxnet", workload="resnet50")))
    failed = Result(cell=Cell(framework="chainer", workload="resnet50"), status="failed", reason=None)
    failed.write(cell_path(tmp_path, failed.cell))
    markdown_path, html_path = render(tmp_path)
    markdown = markdown_path.read_text()
    assert "**No results for:** cnn, gru" in markdown
    # an ok without its figures is no row: it is listed as unreadable, with why
    [listed] = [line for line in markdown.splitlines() if line.startswith("- mxnet\\_\\_cpu")]
    assert "status ok but it lacks its timed phases, its headline figure (images\\_per\\_s)" in listed
    assert "| mxnet |" not in markdown
    chainer = next(line for line in markdown.splitlines() if line.startswith("| chainer |"))
    assert chainer.startswith("| chainer | cpu | fp32 | device not recorded · fp32 · full profile · real data | 0/1 |")
    assert chainer.endswith("| failed |")
    assert "<svg" not in html_path.read_text()


def test_matched_section_and_parameter_count_flag(tmp_path):
    from orchestrator import report as report_module
    from workloads.common.result import Cell, Result

    good = Result(Cell("pytorch", "cnn"))
    good.metrics.train_time_s, good.metrics.parameter_count = 10.0, 3_441_592
    good.provenance.extras["matched"] = "gate order r, z, n | epsilon <after> sqrt"
    odd = Result(Cell("otherfw", "cnn"))
    odd.metrics.train_time_s, odd.metrics.parameter_count = 12.0, 3_441_600
    for result in (good, odd):
        measured(result)
        result.write(tmp_path / "cells" / f"{result.cell.key}.json")
    markdown_path, html_path = report_module.render(tmp_path)
    markdown, html = markdown_path.read_text(), html_path.read_text()
    assert "## What had to be matched" in markdown and "gate order r, z, n; epsilon &lt;after&gt; sqrt" in markdown  # HTML in Markdown is escaped too
    assert "epsilon &lt;after&gt; sqrt" in html
    assert "3,441,600 (differs from the reference 3,441,592: not the same model)" in markdown
    assert "3,441,592 (differs" not in markdown
