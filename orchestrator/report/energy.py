"""The report's energy figures: per-result columns for the frame, one table per workload and
like-for-like group (joules per sample, samples per joule, mean watts, how each was measured) and
one chart per table, throughput against energy per sample (orchestrator/telemetry/ measures them
on the host around each cell).

Energy is grouped exactly as the rankings are (groups.GROUP_KEY: profile, data, device kind and
model, precision) and shows the ranked rows only, each the median over the repeats its ranking
used (FAIRNESS.md: energy-like-for-like, ranking-gate): a CPU row never shares a table with a GPU
row, nor fp16 with fp32, nor one GPU model's repeats with another's. A run in which nothing was
measured (no NVML driver, RAPL hidden) gets one line saying why, instead of a table of dashes.
"""
from __future__ import annotations

import io

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from orchestrator.report.chart import prefixed_ids
from orchestrator.report.formatting import format_rate, format_seconds, missing
from orchestrator.report.gate import ranked
from orchestrator.report.summary import workload_order
from workloads.common import declaration
from workloads.common.result import Result

# The frame's energy columns (report_frame adds them), one value per result.
COLUMNS = ("energy_j_per_sample", "energy_net_j_per_sample", "energy_samples_per_j", "energy_gpu_mean_w",
           "energy_cpu_mean_w", "energy_kwh", "energy_method", "energy_reason", "energy_throughput")
NUMBERS = ("energy_j_per_sample", "energy_net_j_per_sample", "energy_samples_per_j", "energy_gpu_mean_w",
           "energy_cpu_mean_w", "energy_kwh", "energy_throughput")
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


def energy_section(frame: pd.DataFrame, summaries: dict[str, pd.DataFrame], *, charts: bool = True) -> dict | None:
    """The report's energy section: per workload and group (as ranked), a table of its ranked rows
    and their chart, or the one line saying why nothing was measured; None when no result carries
    an energy record (an older run). ``summaries``: summary.summarise's, from the same frame."""
    if frame.empty or "energy_method" not in frame.columns or frame["energy_method"].isna().all():
        return None
    ok = frame[frame["status"] == "ok"]
    if ok.empty or pd.to_numeric(ok["energy_j_per_sample"], errors="coerce").isna().all():
        reasons = [str(reason) for reason in frame["energy_reason"].dropna().unique()]
        return {"tables": [], "not_measured": "; ".join(reasons) or "no cell's steady phase could be attributed its energy"}
    by_key = frame.set_index(frame["key"].astype(str)) if "key" in frame else frame
    tables = []
    for workload in workload_order(summaries):
        summary = summaries[workload]
        for _, rows in summary[ranked(summary)].groupby("group", sort=False):
            measured = _rows(rows, by_key)
            if measured.empty:
                continue
            number = len(tables) + 1
            tables.append({"workload": workload, "title": declaration.get(workload).title,
                           "label": rows["group_label"].iloc[0], "anchor": f"energy-{number}",
                           "table": _table(measured, workload),
                           "chart_svg": chart_svg(measured, chart_id=f"{CHART_ID}-{number}") if charts else None})
    left_out = sum(int((~ranked(summary) & (summary["status"] == "ok")).sum()) for summary in summaries.values())
    return {"tables": tables, "not_measured": None, "left_out": left_out}


def _rows(ranked_rows: pd.DataFrame, by_key: pd.DataFrame) -> pd.DataFrame:
    """One row per ranked summary row with an energy figure: the medians over the repeats its
    ranking used (its repeat_keys), named as the ranking names it."""
    rows = []
    for _, row in ranked_rows.iterrows():
        repeats = by_key.loc[by_key.index.intersection(row["repeat_keys"])]
        figures = {name: pd.to_numeric(repeats[name], errors="coerce").median() for name in NUMBERS}
        if missing(figures["energy_j_per_sample"]):
            continue
        rows.append({"row_name": row["row_name"], "variant": row["variant"], "repeats": len(repeats), **figures,
                     "energy_method": " | ".join(dict.fromkeys(str(value) for value in repeats["energy_method"].dropna()))})
    return pd.DataFrame(rows)


def _table(rows: pd.DataFrame, workload: str) -> dict:
    declared = declaration.get(workload)
    unit = "image" if declared.kind != declaration.TRAINING else "sample"
    rate = declared.metric(declared.steady or declared.throughput or declared.headline)
    headers = ["Framework", "Variant", "Repeats", rate.heading[:1].upper() + rate.heading[1:],
               f"J/{unit}", f"Net J/{unit}", f"{unit.capitalize()}s/J", "Mean GPU W", "Mean CPU W", "kWh", "Method"]
    numeric = [False, False, True, True, True, True, True, True, True, True, False]
    table_rows = []
    for _, row in rows.sort_values("energy_j_per_sample", kind="stable").iterrows():
        cells = [row["row_name"], row["variant"], str(row["repeats"]),
                 format_rate(row["energy_throughput"]), format_seconds(row["energy_j_per_sample"]),
                 format_seconds(row["energy_net_j_per_sample"]), format_rate(row["energy_samples_per_j"]),
                 format_rate(row["energy_gpu_mean_w"]), format_rate(row["energy_cpu_mean_w"]),
                 "-" if missing(row["energy_kwh"]) else f"{row['energy_kwh']:.3g}", row["energy_method"]]
        table_rows.append({"cells": cells, "css": ""})
    return {"headers": headers, "rows": table_rows, "numeric": numeric}


def chart_svg(rows: pd.DataFrame, *, chart_id: str = CHART_ID) -> str | None:
    """Throughput (x) against joules per sample (y) of one table's rows (one workload, one group),
    one point per row: down and to the right is fast and frugal. None when no row has both figures."""
    points = rows[rows["energy_throughput"].notna() & rows["energy_j_per_sample"].notna()]
    if points.empty:
        return None
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        figure = Figure(figsize=(7, 4.5), layout="constrained")
        axes = figure.add_subplot()
        axes.scatter(points["energy_throughput"].astype(float), points["energy_j_per_sample"].astype(float))
        for _, row in points.iterrows():
            axes.annotate(f"{row['row_name']} · {row['variant']}",
                          (float(row["energy_throughput"]), float(row["energy_j_per_sample"])),
                          xytext=(5, 3), textcoords="offset points", fontsize=8)
        values = points[["energy_throughput", "energy_j_per_sample"]].astype(float)
        if (values > 0).all().all():  # rates and joules span decades across frameworks
            axes.set_xscale("log")
            axes.set_yscale("log")
        axes.set_xlabel("steady throughput (samples or images per second; higher is better)")
        axes.set_ylabel("joules per sample or image (lower is better)")
        axes.spines[["top", "right"]].set_visible(False)
        buffer = io.StringIO()
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"rosetta-{chart_id}"}):
            figure.savefig(buffer, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    return prefixed_ids(svg[svg.index("<svg"):], chart_id)
