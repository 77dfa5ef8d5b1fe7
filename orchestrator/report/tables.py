"""The tables both templates print, as headers and already formatted cells, so that the Markdown
and the HTML tables cannot drift apart.

A result table's columns come from the workload's declaration: the headline metric's median,
min-max, spread and relative, then one column per other declared metric.
"""
from __future__ import annotations

import math
from typing import Callable

import pandas as pd

from orchestrator.report.formatting import (column_heading, format_count, format_percent, format_published,
                                            format_relative, formatter, missing, unit_heading)
from orchestrator.report.summary import distinct, other_metrics, workload_order
from workloads.common import declaration
from workloads.common.declaration import Workload


def result_table(summary: pd.DataFrame, workload: Workload, *, show_profile: bool) -> dict:
    """Headers, cells and which columns are numbers, for one workload's summary."""
    headline = workload.headline_metric
    format_headline = formatter(headline)
    # (header, formatter, right-aligned number?)
    columns: list[tuple[str, Callable, bool]] = [
        ("Framework", lambda row: row["framework"], False),
        ("Variant", lambda row: row["variant"], False),
        ("Precision", lambda row: row["precision"], False),
    ]
    if show_profile:
        columns += [("Profile", lambda row: row["profile"], False), ("Data", lambda row: row["data"], False)]
    columns += [
        ("Repeats", _format_repeats, True),
        (f"Median {headline.heading}", lambda row: format_headline(row["median"]), True),
        ("Min–max", lambda row: _format_range(row, format_headline), True),
        ("Spread", lambda row: format_percent(row["relative_spread"]), True),
        ("Relative", lambda row: format_relative(row["relative_to_best"]), True),
    ]
    for metric in other_metrics(workload):
        columns.append((column_heading(metric),
                        lambda row, name=metric.name, write=formatter(metric): write(row[name]), True))
    expected = getattr(workload.settings_for("full"), "parameter_count", None)
    columns += [
        ("Parameters", lambda row: _format_parameters(row, expected), True),
        ("Device", _format_device, False),
        ("Version", lambda row: row["framework_version"] or "-", False),
        ("Status", _format_status, False),
    ]
    rows = [{"ok": row["status"] == "ok", "cells": [str(render_cell(row)) for _, render_cell, _ in columns]}
            for _, row in summary.iterrows()]
    return {"headers": [header for header, _, _ in columns], "rows": rows,
            "numeric": [number for _, _, number in columns]}


def reference_table(reference: pd.DataFrame, workload: Workload) -> dict | None:
    """The study's numbers for one workload (its headline figure): a row per framework (and API),
    a column per GPU."""
    rows = reference[reference["workload"] == workload.name]
    if rows.empty:
        return None
    gpus = list(dict.fromkeys(rows["gpu"]))
    unit = unit_heading(workload.headline_metric)
    show_rnn = rows["uses_cudnn_rnn"].notna().any()
    table_rows = []
    for (framework, api), group in rows.groupby(["framework", "api"], sort=False):
        by_gpu = dict(zip(group["gpu"], group["value"]))
        cells = [f"{framework} ({api})" if api else framework]
        cells += [format_published(by_gpu.get(gpu)) for gpu in gpus]
        if show_rnn:
            cells.append(distinct(group, "uses_cudnn_rnn") or "-")
        # fastest on the newest GPU first, as in the result tables
        table_rows.append((by_gpu.get(gpus[-1], math.inf), {"ok": True, "cells": cells}))
    table_rows.sort(key=lambda pair: (math.isnan(pair[0]), pair[0]))
    headers = ["Framework"] + [f"{gpu} ({unit})" for gpu in gpus] + (["cuDNN GRU"] if show_rnn else [])
    numeric = [False] + [True] * len(gpus) + ([False] if show_rnn else [])
    return {"headers": headers, "rows": [row for _, row in table_rows], "numeric": numeric}


def not_applicable_row(headers: list[str], framework: str, item: dict) -> dict:
    """A framework that does not implement the workload: its name, its variants and the reason."""
    cells = {"Framework": framework, "Variant": ", ".join(item.get("variants") or []) or "-",
             "Status": f"not applicable: {item.get('reason') or 'not implemented'}"}
    return {"ok": False, "cells": [cells.get(header, "-") for header in headers]}


def matched_sections(frame: pd.DataFrame) -> list[dict]:
    """Per framework, what its implementations had to match, as they record it themselves."""
    sections = []
    known = frame.dropna(subset=["matched"])
    for framework, rows in known.groupby("framework", sort=True):
        items = []
        for workload in workload_order(rows["workload"].unique()):
            text = rows[rows["workload"] == workload]["matched"].iloc[0]
            items.append({"workload": declaration.get(workload).title,
                          "points": [point.strip() for point in text.split(" | ") if point.strip()]})
        sections.append({"framework": framework, "workloads": items})
    return sections


def _format_parameters(row, expected: int | None) -> str:
    """The count, flagged when it is not the reference model's: then it is not the same model."""
    count = row["parameter_count"]
    if missing(count) or expected is None or int(count) == expected:
        return format_count(count)
    return f"{int(count):,} (differs from the reference {expected:,}: not the same model)"


def _format_range(row, write: Callable[[object], str]) -> str:
    if row["ok_repeats"] < 2 or missing(row["min"]):
        return "-"
    return f"{write(row['min'])}–{write(row['max'])}"


def _format_repeats(row) -> str:
    return str(row["ok_repeats"]) if row["ok_repeats"] == row["runs"] else f"{row['ok_repeats']}/{row['runs']}"


def _format_device(row) -> str:
    device, gpu = row["device"] or "-", row["gpu_name"]
    return f"{device} ({gpu})" if gpu else device


def _format_status(row) -> str:
    if row["status"] == "ok":
        return f"ok; {row['note']}" if row["note"] else "ok"
    return row["note"] or row["status"]
