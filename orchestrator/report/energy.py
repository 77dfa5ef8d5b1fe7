"""The report's energy figures: per-result columns for the frame, one table per workload (joules
per sample, samples per joule, mean watts, how each was measured) and one chart, throughput
against energy per sample (orchestrator/telemetry/ measures them on the host around each cell).

A run in which nothing was measured (no NVML driver, RAPL hidden) gets one line saying why,
instead of a table of dashes.
"""
from __future__ import annotations

import io

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from orchestrator.report.chart import _prefixed_ids
from orchestrator.report.formatting import format_rate, format_seconds, missing
from orchestrator.report.summary import row_name, workload_order
from workloads.common import declaration
from workloads.common.result import Result

# The frame's energy columns (report_frame adds them), one value per result.
COLUMNS = ("energy_j_per_sample", "energy_net_j_per_sample", "energy_samples_per_j", "energy_gpu_mean_w",
           "energy_cpu_mean_w", "energy_kwh", "energy_method", "energy_reason", "energy_throughput")
# One energy row per cell whatever its repeat: the figures are the repeats' medians.
ROW_KEYS = ("workload", "framework", "variant", "options", "init", "precision", "profile", "data")
MARKERS = "osD^v<>p"
CHART_ID = "chart-energy"


def frame_columns(results: list[Result]) -> dict[str, list]:
    """The energy columns of `results`, in their order (None where a result has no figure)."""
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    for result in results:
        energy = result.energy
        values = dict.fromkeys(COLUMNS)
        values["energy_throughput"] = steady_throughput(result)
        if energy is not None:
            values.update(energy_j_per_sample=energy.joules_per_sample,
                          energy_net_j_per_sample=energy.net_joules_per_sample,
                          energy_samples_per_j=energy.samples_per_joule, energy_gpu_mean_w=energy.gpu.mean_w,
                          energy_cpu_mean_w=energy.cpu.mean_w, energy_kwh=energy.kwh,
                          energy_method=method_label(result), energy_reason=why_not_measured(result))
        for name in COLUMNS:
            columns[name].append(values[name])
    return columns


def steady_throughput(result: Result) -> float | None:
    """The steady rate the workload declares (training: after the first step; ResNet-50: images/s)."""
    if result.status != "ok":
        return None
    try:
        workload = declaration.get(result.cell.workload)
    except ValueError:
        return None
    return workload.metric(workload.steady or workload.throughput or workload.headline).value(result)


def method_label(result: Result) -> str:
    """"GPU counter, CPU none": how each device kind's energy was measured."""
    energy = result.energy
    return f"GPU {energy.gpu.method}, CPU {energy.cpu.method}" if energy is not None else "not sampled"


def why_not_measured(result: Result) -> str | None:
    """The reasons of the device kinds that were not measured, "GPU: ...; CPU: ..."."""
    energy = result.energy
    parts = [f"{label}: {device.reason}" for label, device in (("GPU", energy.gpu), ("CPU", energy.cpu))
             if device.method == "none" and device.reason]
    return "; ".join(parts) or None


def details_text(result: Result) -> str | None:
    """The per-cell details line: methods, the devices measured, what throttled the GPU; None when
    nothing was measured (the energy section says why, once for the run)."""
    energy = result.energy
    if energy is None or (energy.gpu.method == "none" and energy.cpu.method == "none"):
        return None
    parts = []
    for label, device in (("GPU", energy.gpu), ("CPU", energy.cpu)):
        if device.method == "none":
            parts.append(f"{label}: none ({device.reason or 'no reason recorded'})")
            continue
        text = f"{label}: {device.method} over {', '.join(device.devices) or 'its devices'}"
        if label == "GPU" and device.throttle_reasons:
            text += f"; clock events seen: {', '.join(device.throttle_reasons)}"
        parts.append(text)
    return "; ".join(parts)


def energy_section(frame: pd.DataFrame, *, charts: bool = True) -> dict | None:
    """The report's energy section: a table per workload, the chart, or the one line saying why
    nothing was measured; None when no result carries an energy record (an older run)."""
    if frame.empty or "energy_method" not in frame.columns or frame["energy_method"].isna().all():
        return None
    rows = _rows(frame[frame["status"] == "ok"])
    measured = rows[rows["energy_j_per_sample"].notna()] if not rows.empty else rows
    if measured.empty:
        reasons = [str(reason) for reason in frame["energy_reason"].dropna().unique()]
        return {"tables": [], "chart_svg": None,
                "not_measured": "; ".join(reasons) or "no cell's steady phase could be attributed its energy"}
    tables = []
    for workload in workload_order(set(measured["workload"])):
        tables.append({"workload": workload, "title": declaration.get(workload).title,
                       "table": _table(measured[measured["workload"] == workload], workload)})
    return {"tables": tables, "chart_svg": chart_svg(measured) if charts else None, "not_measured": None}


def _rows(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (its repeats' medians), named as the result tables name it."""
    if ok.empty:
        return pd.DataFrame(columns=[*ROW_KEYS, *COLUMNS, "row_name", "repeats"])
    numbers = ["energy_j_per_sample", "energy_net_j_per_sample", "energy_samples_per_j", "energy_gpu_mean_w",
               "energy_cpu_mean_w", "energy_kwh", "energy_throughput"]
    keys = [key for key in ROW_KEYS if key in ok.columns]
    keyed = ok.assign(**{key: ok[key].fillna("") for key in keys})
    aggregations = {name: lambda values: pd.to_numeric(values, errors="coerce").median() for name in numbers}
    aggregations["energy_method"] = lambda values: " | ".join(dict.fromkeys(str(v) for v in values.dropna()))
    aggregations["key"] = "size"
    rows = keyed.groupby(keys, sort=True).agg(aggregations).reset_index().rename(columns={"key": "repeats"})
    rows["row_name"] = [row_name(row["framework"], row.get("options", ""), row.get("init", ""))
                        for _, row in rows.iterrows()]
    return rows


def _table(rows: pd.DataFrame, workload: str) -> dict:
    declared = declaration.get(workload)
    unit = "image" if declared.kind != declaration.TRAINING else "sample"
    rate = declared.metric(declared.steady or declared.throughput or declared.headline)
    headers = ["Framework", "Variant", "Precision", "Repeats", rate.heading[:1].upper() + rate.heading[1:],
               f"J/{unit}", f"Net J/{unit}", f"{unit.capitalize()}s/J", "Mean GPU W", "Mean CPU W", "kWh", "Method"]
    numeric = [False, False, False, True, True, True, True, True, True, True, True, False]
    table_rows = []
    for _, row in rows.sort_values("energy_j_per_sample").iterrows():
        cells = [row["row_name"], row["variant"], row["precision"], str(row["repeats"]),
                 format_rate(row["energy_throughput"]), format_seconds(row["energy_j_per_sample"]),
                 format_seconds(row["energy_net_j_per_sample"]), format_rate(row["energy_samples_per_j"]),
                 format_rate(row["energy_gpu_mean_w"]), format_rate(row["energy_cpu_mean_w"]),
                 "-" if missing(row["energy_kwh"]) else f"{row['energy_kwh']:.3g}", row["energy_method"]]
        table_rows.append({"cells": cells, "css": ""})
    return {"headers": headers, "rows": table_rows, "numeric": numeric}


def chart_svg(rows: pd.DataFrame) -> str | None:
    """Throughput (x) against joules per sample (y), one point per cell, one marker per workload:
    down and to the right is fast and frugal. None when no cell has both figures."""
    points = rows[rows["energy_throughput"].notna() & rows["energy_j_per_sample"].notna()]
    if points.empty:
        return None
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        figure = Figure(figsize=(7, 4.5), layout="constrained")
        axes = figure.add_subplot()
        for number, workload in enumerate(workload_order(set(points["workload"]))):
            subset = points[points["workload"] == workload]
            axes.scatter(subset["energy_throughput"].astype(float), subset["energy_j_per_sample"].astype(float),
                         marker=MARKERS[number % len(MARKERS)], label=declaration.get(workload).title)
            for _, row in subset.iterrows():
                axes.annotate(f"{row['row_name']} · {row['variant']} {row['precision']}",
                              (float(row["energy_throughput"]), float(row["energy_j_per_sample"])),
                              xytext=(5, 3), textcoords="offset points", fontsize=8)
        values = points[["energy_throughput", "energy_j_per_sample"]].astype(float)
        if (values > 0).all().all():  # rates and joules span decades across frameworks and devices
            axes.set_xscale("log")
            axes.set_yscale("log")
        axes.set_xlabel("steady throughput (samples or images per second; higher is better)")
        axes.set_ylabel("joules per sample or image (lower is better)")
        axes.legend(fontsize=8)
        axes.spines[["top", "right"]].set_visible(False)
        buffer = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"rosetta-{CHART_ID}"}):
            figure.savefig(buffer, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    return _prefixed_ids(svg[svg.index("<svg"):], CHART_ID)
