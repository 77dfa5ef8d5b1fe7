"""How close to the limit: each result's achieved FLOP/s against its device's peak (its % of peak, MFU).

A result records its achieved FLOP/s (workloads/common/flops.py: the headline rate times the FLOPs
counted from the model). The peak it is divided by is the device's in the precision the cell ran:
a GPU's from the datasheet table (orchestrator/peaks.py), matched by the name NVML reports; a CPU's
from the run's own roofline probe (orchestrator/cpu_peak.py, run.json's cpu_peak), matched by the
CPU model. Where there is none, the row says "peak unknown" and its details say why: never a guess
(docs/MEASURED.md, FLOP/s and % of peak). The figures sit beside the headline, never rank a row.
"""
from __future__ import annotations

import math

import matplotlib
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from orchestrator import cpu_peak, peaks
from orchestrator.report.chart import figure_svg, prefixed_ids
from orchestrator.report.formatting import missing
from orchestrator.report.gate import ranked
from orchestrator.report.groups import CPU, GPU, device_identity, device_label

PEAK_UNKNOWN = "peak unknown"
NOT_COUNTED = "not counted"  # an ok result without an achieved FLOP/s (its language's harness records none)
COLUMNS = ("peak_flops_per_s", "peak_source", "pct_of_peak")  # per result, beside to_frame's figures
CHART_ID = "ceiling-chart"
PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def cpu_peaks(invocations: list[dict]) -> dict[str, dict]:
    """CPU model -> the last probe of it that run.json's invocations recorded (each checked by the
    one reader of run.json, run_folder.read_run_record, and again here)."""
    found = {}
    for invocation in invocations:
        record = invocation.get("cpu_peak")
        if record is not None and cpu_peak.record_problem(record) is None:
            found[record["cpu_model"]] = record
    return found


def probe_metadata(invocations: list[dict]) -> list[tuple[str, str]]:
    """The run's CPU probes for its metadata: ("CPU peak", what was measured, on how many threads, how)."""
    shown = []
    for model, probe in cpu_peaks(invocations).items():
        measured = [f"{precision} {format_flops(value)}" for precision, value in probe["flops_per_s"].items()]
        missed = [f"{precision} {why}" for precision, why in probe["not_measured"].items()]
        shown.append((f"CPU peak ({model})", f"{'; '.join(measured + missed)}. Method: {probe['method']}"))
    return shown


def device_peak(device_kind: str, device_model: str, precision: str, probes: dict[str, dict]) -> peaks.Peak:
    """The peak a row of this device and precision is measured against, or why there is none."""
    if device_kind == GPU:
        return peaks.gpu_peak(device_model, precision)
    if device_kind == CPU:
        probe = probes.get(device_model)
        if probe is None:
            return peaks.Peak(None, f"{PEAK_UNKNOWN}: run.json holds no CPU probe of {device_model[:80] or 'this CPU'}")
        flops = probe["flops_per_s"].get(precision)
        if flops is None:
            why = probe["not_measured"].get(precision) or f"the probe measured no {precision} peak"
            return peaks.Peak(None, f"{PEAK_UNKNOWN}: {precision} {why}")
        return peaks.Peak(flops, f"{device_model[:80]}, {precision}, measured by this run's probe: {probe['method']}")
    return peaks.Peak(None, f"{PEAK_UNKNOWN}: the device was not recorded")


def frame_columns(frame: pd.DataFrame, probes: dict[str, dict]) -> dict[str, list]:
    """COLUMNS for each result of to_frame's `frame`: its device's peak in its precision, where
    that comes from (or why there is none), and achieved / peak as a fraction (NaN without both)."""
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    gpu_models = frame["gpu_model"] if "gpu_model" in frame else [None] * len(frame)
    for device, gpu_name, gpu_model, cpu_model, precision, achieved in zip(
            frame["device"], frame["gpu_name"], gpu_models, frame["cpu_model"], frame["precision"],
            frame["achieved_flops_per_s"]):
        kind, model = device_identity(device, gpu_name if isinstance(gpu_name, str) and gpu_name else gpu_model,
                                      cpu_model)
        peak = device_peak(kind, model, str(precision), probes)
        columns["peak_flops_per_s"].append(math.nan if peak.flops_per_s is None else peak.flops_per_s)
        columns["peak_source"].append(peak.source)
        columns["pct_of_peak"].append(achieved / peak.flops_per_s if peak.flops_per_s and not missing(achieved)
                                      else math.nan)
    return columns


def format_flops(value) -> str:
    """"57.3 GFLOP/s", "1.21 TFLOP/s": three significant figures and an SI prefix; "-" for none."""
    if missing(value):
        return "-"
    for scale, prefix in PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}FLOP/s"
    return f"{value:.3g} FLOP/s"


def format_fraction_of_peak(fraction) -> str:
    """A % of peak: "41%", "7.2%", "0.031%" (two significant figures below 10%)."""
    percent = fraction * 100
    return f"{percent:.0f}%" if percent >= 10 else f"{percent:.2g}%"


def peak_text(row) -> str:
    """A summary row's % of peak cell: the percentage, "peak unknown", "not counted" (an ok row
    that records no FLOP/s), "-" for a row with no ok repeat."""
    if row["status"] != "ok":
        return "-"
    if missing(row["achieved_flops_per_s"]):
        return NOT_COUNTED
    if missing(row["pct_of_peak"]):
        return PEAK_UNKNOWN
    return format_fraction_of_peak(row["pct_of_peak"])


def peak_label(row) -> str:
    """peak_text said in a sentence: "41% of peak", "peak unknown", "not counted"."""
    text = peak_text(row)
    return text if text in (PEAK_UNKNOWN, NOT_COUNTED, "-") else f"{text} of peak"


def details(row) -> dict[str, str]:
    """A summary row's ceiling as details (label -> text): its FLOP/s, % of peak, and the peak's source."""
    if row["status"] != "ok":
        return {}
    return {"FLOP/s": f"{format_flops(row['achieved_flops_per_s'])}, {peak_label(row)}",
            "peak": row["peak_source"] or PEAK_UNKNOWN}


def chart_svg(summaries: dict[str, pd.DataFrame], *, chart_id: str = CHART_ID) -> str | None:
    """One chart of the report: every ranked row's achieved FLOP/s (a bar) against its device's peak
    in its precision (a tick), one band per device and precision, on a log scale (a CPU and a GPU
    are decades apart). None when no ranked row records FLOP/s."""
    rows = []
    for workload, summary in summaries.items():
        for _, row in summary[ranked(summary)].iterrows():
            if not missing(row["achieved_flops_per_s"]) and row["achieved_flops_per_s"] > 0:
                rows.append({"device": f"{device_label(row['device_kind'], row['device_model'])} · {row['precision']}",
                             "label": f"{workload} · {row['row_name']} · {row['variant']}",
                             "achieved": float(row["achieved_flops_per_s"]),
                             "peak": None if missing(row["peak_flops_per_s"]) else float(row["peak_flops_per_s"]),
                             "text": peak_text(row)})
    if not rows:
        return None
    rows.sort(key=lambda item: item["device"])
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        figure = Figure(figsize=(9, 1.8 + 0.32 * len(rows)), layout="constrained")
        axes = figure.add_subplot()
        positions = list(range(len(rows)))
        devices = list(dict.fromkeys(item["device"] for item in rows))
        colours = matplotlib.colormaps["tab10"]
        for number, device in enumerate(devices):
            mine = [(position, item) for position, item in zip(positions, rows) if item["device"] == device]
            axes.barh([position for position, _ in mine], [item["achieved"] for _, item in mine],
                      color=colours(number % 10), label=device)
            known = [(position, item["peak"]) for position, item in mine if item["peak"] is not None]
            if known:
                axes.scatter([peak for _, peak in known], [position for position, _ in known], marker="|", s=300,
                             color="#000000", zorder=3)
        for position, item in zip(positions, rows):
            axes.annotate(item["text"], (item["achieved"], position), xytext=(4, 0), textcoords="offset points",
                          va="center", fontsize=8)
        axes.set_yticks(positions, [item["label"] for item in rows], fontsize=8)
        axes.invert_yaxis()
        axes.set_xscale("log")
        # plain "10 GFLOP/s" tick labels: mathtext is off (labels come from results), so no 10^x
        axes.xaxis.set_major_locator(LogLocator(base=10))
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_flops(value)))
        axes.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
        axes.tick_params(axis="x", labelsize=8, labelrotation=30)
        axes.set_xlabel("achieved FLOP/s (bars, median over the ranked repeats); the device's peak in that "
                        "precision: black tick")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="device · precision",
                    title_fontsize=8)
        axes.spines[["top", "right"]].set_visible(False)
        svg = figure_svg(figure, chart_id)
    return prefixed_ids(svg, chart_id)
