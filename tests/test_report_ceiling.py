"""% of peak beside every headline (orchestrator/report/ceiling.py; docs/MEASURED.md, FLOP/s and %
of peak): from forged results whose FLOP/s and devices are known, the report's tables, its grid and
details, the CSV export and benchmarks/gpu_check.py's table say each row's FLOP/s and % of peak, or
"peak unknown" (an unlisted GPU, a CPU precision the probe did not measure, a CPU without a probe),
or "not counted" (an ok result that records no FLOP/s)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import report
from orchestrator.commands.export import tidy_frame
from orchestrator.report import ceiling
from test_report_views import inference, training, write

ROOT = Path(__file__).resolve().parent.parent
H200_FP32, H200_BF16 = 67e12, 989.5e12  # results/reference/gpu-peak-flops.toml
PROBE = {"cpu_model": "Xeon Probe", "threads": 8, "measured_at": "2026-01-01T00:00:00+00:00",
         "method": "numpy matmul of two 2048x2048 fp32 matrices on 8 threads",
         "flops_per_s": {"fp32": 400e9}, "not_measured": {"bf16": "not measured: numpy has no bfloat16 type"}}


def counted(result, achieved, **provenance):
    result.metrics.achieved_flops_per_s, result.metrics.flops_per_sample = achieved, 1e6
    for name, value in provenance.items():
        setattr(result.provenance, name, value)
    return result


def cpu(framework, achieved, precision="fp32", model="Xeon Probe"):
    return counted(training(framework, 100.0, variant="cpu", precision=precision), achieved, device="cpu",
                   gpu_name=None, cpu_model=model)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    results = [counted(training("pytorch", 1000.0), 0.25 * H200_FP32),  # 25% of the H200's fp32 peak
               counted(training("jax", 900.0, precision="bf16"), 0.031 * H200_BF16),
               counted(training("tensorflow", 800.0), 1e12, gpu_name="NVIDIA RTX A6000"),  # not in the table
               training("mxnet", 700.0),  # records no FLOP/s (its language's harness counts none)
               cpu("pytorch", 100e9), cpu("jax", 50e9, precision="bf16"), cpu("paddle", 10e9, model="Other CPU"),
               cpu("chainer", 440e9),  # faster than the probe's BLAS product: over 100%, said, not clipped
               counted(inference("pytorch", 400.0), 0.5 * H200_FP32)]
    write(folder, results)
    (folder / "run.json").write_text(json.dumps({"invocations": [{"cpu_peak": PROBE}]}))
    return folder, report.write_report(folder)


def table_rows(markdown: str, header: str) -> dict[str, dict[str, str]]:
    """Every Markdown table with `header` among its headings: its rows, by framework and variant, as
    heading -> cell."""
    rows, headings = {}, None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            headings = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if header in cells:
            headings = cells
        elif headings and not set(line) <= set("|-: "):
            row = dict(zip(headings, cells))
            rows.setdefault(f"{row['Framework']} {row['Variant']} {row.get('Precision', '')}".strip(), row)
    return rows


def test_every_ok_row_shows_its_flops_and_percent_of_peak_beside_its_headline(run):
    _, written = run
    markdown = written.markdown.read_text()
    rows = table_rows(markdown, "% of peak")
    assert rows["pytorch cu126 fp32"]["FLOP/s"] == "16.8 TFLOP/s" and rows["pytorch cu126 fp32"]["% of peak"] == "25%"
    assert rows["jax cu126 bf16"]["% of peak"] == "3.1%"  # against the bf16 Tensor Core peak, not fp32's
    assert rows["tensorflow cu126 fp32"]["% of peak"] == ceiling.PEAK_UNKNOWN
    assert rows["mxnet cu126 fp32"]["% of peak"] == ceiling.NOT_COUNTED
    assert rows["pytorch cpu fp32"]["% of peak"] == "25%"  # the run's own probe: 100 of 400 GFLOP/s
    assert rows["jax cpu bf16"]["% of peak"] == ceiling.PEAK_UNKNOWN  # the probe measured no bf16
    assert rows["paddle cpu fp32"]["% of peak"] == ceiling.PEAK_UNKNOWN  # no probe of that CPU
    assert rows["chainer cpu fp32"]["% of peak"] == "110%"
    headings = next(line for line in markdown.splitlines() if "% of peak" in line and "Median" in line)
    assert headings.index("Median") < headings.index("FLOP/s") < headings.index("% of peak")
    # the details say where each peak comes from, or why there is none
    assert "peak: H200 SXM, fp32: NVIDIA H200 Tensor Core GPU datasheet" in markdown
    assert "peak: peak unknown: NVIDIA RTX A6000 is not in gpu-peak-flops.toml" in markdown
    assert "peak: peak unknown: bf16 not measured: numpy has no bfloat16 type" in markdown
    assert "peak: peak unknown: run.json holds no CPU probe of Other CPU" in markdown
    assert "Xeon Probe, fp32, measured by this run's probe: numpy matmul" in markdown
    assert "CPU peak (Xeon Probe):** fp32 400 GFLOP/s; bf16 not measured" in markdown  # the run's metadata


def test_the_grid_shows_the_percent_of_peak_and_the_html_its_chart(run):
    _, written = run
    markdown, html = written.markdown.read_text(), written.html.read_text()
    grid = markdown.split("## At a glance")[1].split("## Steady-state ranking")[0]
    assert "· 25% of peak" in grid and "· peak unknown" in grid and "not counted" not in grid
    # a CPU's peak is a measured product, not the hardware's: the legend says a row can pass it
    over = "a CPU's measured by this run's BLAS probe, which a framework's own kernels can pass: over 100%"
    assert over in " ".join(grid.split()) and over in " ".join(html.split())
    assert '<span class="peak">25% of peak</span>' in html and "16.8 TFLOP/s, 25% of peak" in html  # its title
    chart = html.split('<section id="ceiling">')[1].split("</section>")[0]
    assert '<figure class="chart ceiling">' in chart and "<svg" in chart and "<script" not in chart
    # one bar per ranked row with FLOP/s, labelled; the GPU's and CPU's peaks as ticks on one log scale
    assert "cnn · pytorch · cu126" in chart and "resnet50 · pytorch · cu126" in chart and "GPU NVIDIA H200 · bf16" in chart


def test_the_csv_export_has_each_cells_flops_and_percent_of_peak(run):
    folder, _ = run
    frame = tidy_frame(folder).set_index(["workload", "framework", "variant", "precision"])
    pytorch = frame.loc[("cnn", "pytorch", "cu126", "fp32")]
    assert pytorch["achieved_flops_per_s"] == pytest.approx(0.25 * H200_FP32)
    assert pytorch["pct_of_peak"] == pytest.approx(0.25) and pytorch["peak_flops_per_s"] == H200_FP32
    assert frame.loc[("cnn", "pytorch", "cpu", "fp32")]["pct_of_peak"] == pytest.approx(0.25)
    unknown = frame.loc[("cnn", "tensorflow", "cu126", "fp32")]
    assert pd.isna(unknown["pct_of_peak"]) and unknown["peak_source"].startswith("peak unknown")
    columns = list(frame.reset_index().columns)
    assert columns.index("headline") < columns.index("pct_of_peak")


def test_gpu_check_prints_flops_and_percent_of_peak_per_cell():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    results = [counted(training("pytorch", 1000.0, precision="bf16"), 0.4 * H200_BF16),
               counted(training("jax", 900.0), 1e12, gpu_name="NVIDIA RTX A6000"),
               training("tensorflow", 0, status="unsupported", reason="no GPU")]
    lines = gpu_check.table(results)
    headings = [cell.strip() for cell in lines[0].split("|")]
    rows = {line.split("|")[0].strip(): dict(zip(headings, (cell.strip() for cell in line.split("|"))))
            for line in lines[2:]}
    assert rows["pytorch/cu126 cnn bf16"]["FLOP/s"] == "396 TFLOP/s"
    assert rows["pytorch/cu126 cnn bf16"]["% of peak"] == "40%"
    assert rows["jax/cu126 cnn fp32"]["% of peak"].startswith("peak unknown: NVIDIA RTX A6000")
    assert rows["tensorflow/cu126 cnn fp32"]["% of peak"] == "-"


def test_the_html_renders_the_ceiling_in_chromium(run):
    from support.browser import open_page, require_chromium

    require_chromium()
    _, written = run
    page = open_page(written.html)
    assert page.console_errors == []
    assert '<section id="ceiling">' in page.dom and "25% of peak" in page.dom
