"""The tables both templates print, as headers and already formatted cells, so that the Markdown
and the HTML tables cannot drift apart.

A result table's columns come from the workload's declaration: the headline metric's median,
min-max, spread and relative, then one column per other declared metric, then the row's parity
verdict, what the gate decided ("Gate": passed, or which check failed), the flags ("Checks") and
the status. The ranking tables (the report's first screen) show a group's ranked rows only,
fastest first (FAIRNESS.md: ranking-gate). Whether the accuracy target applies is said once per
table (its note), never per row.
"""
from __future__ import annotations

import math
from typing import Callable

import pandas as pd

from orchestrator.report import ceiling
from orchestrator.report.formatting import (column_heading, format_count, format_percent, format_published,
                                            format_relative, formatter, missing)
from orchestrator.report.gate import accuracy_rule, gate_text, parity_text, ranked, reference_parameter_count
from orchestrator.report.summary import distinct, other_metrics, workload_order
from workloads.common import declaration
from workloads.common.declaration import Workload


RANKING_HEADERS = ("#", "Framework", "Variant")
# Beside every headline: its achieved FLOP/s and % of the device's peak (ceiling.py), never ranked.
CEILING_COLUMNS: list[tuple[str, Callable, bool]] = [
    ("FLOP/s", lambda row: ceiling.format_flops(row["achieved_flops_per_s"]), True),
    ("% of peak", ceiling.peak_text, True),
]
UNSUPPORTED = "unsupported"


def ranking_tables(summary: pd.DataFrame, workload: Workload) -> list[dict]:
    """The first screen: per group, its ranked rows, fastest first (rank, name, the headline
    figure's median, min-max and spread, relative, the checks). Groups without a ranked row are
    left out (their rows are in the workload's own section)."""
    headline = workload.headline_metric
    write = formatter(headline)
    columns: list[tuple[str, Callable, bool]] = [
        ("#", lambda row: str(row["rank"]), True),
        ("Framework", lambda row: row["row_name"], False),
        ("Variant", lambda row: row["variant"], False),
        (f"Median {headline.heading}", lambda row: write(row["median"]), True),
        *CEILING_COLUMNS,
        ("Min–max", lambda row: _format_range(row, write), True),
        ("Spread", lambda row: format_percent(row["relative_spread"]), True),
        ("Repeats", _format_repeats, True),
        ("Relative", lambda row: format_relative(row["relative_to_best"]), True),
        ("Parity", parity_text, False),
        ("Checks", _format_checks, False),
    ]
    tables = []
    for label, rows in _groups(summary[ranked(summary)]):
        tables.append({"label": label, "table": _table(rows, columns), "note": _accuracy_note(rows, workload)})
    return tables


def group_tables(summary: pd.DataFrame, workload: Workload) -> list[dict]:
    """Per group (profile, data, device, precision), its ok rows with every declared figure: the
    ranked ones first, then those the gate kept out, each saying why."""
    columns = _result_columns(workload)
    return [{"label": label, "rows": rows, "table": _table(rows, columns), "note": _accuracy_note(rows, workload)}
            for label, rows in _groups(summary[summary["status"] == "ok"])]


def not_ranked_table(summary: pd.DataFrame, workload: Workload) -> dict:
    """Every row that ran and is not ranked (failed, diverged, timed out, invalid, or kept out by
    the gate), with its group and which check failed. Unsupported rows are not here: they are
    listed by reason (not_run_lists)."""
    columns: list[tuple[str, Callable, bool]] = [
        ("Framework", lambda row: row["row_name"], False),
        ("Variant", lambda row: row["variant"], False),
        ("Precision", lambda row: row["precision"], False),
        ("Group", lambda row: row["group_label"], False),
        ("Repeats", _format_repeats, True),
        ("Device", _format_device, False),
        ("Version", lambda row: row["framework_version"] or "-", False),
        ("Parity", parity_text, False),
        ("Gate", gate_text, False),
        ("Status", _format_status, False),
    ]
    return _table(summary[~ranked(summary) & (summary["status"] != UNSUPPORTED)], columns)


def _accuracy_note(rows: pd.DataFrame, workload: Workload) -> str | None:
    """The table's one line on the accuracy target (its rows share a profile and data)."""
    return accuracy_rule(workload, rows["profile"].iloc[0], rows["data"].iloc[0]) if len(rows) else None


def _result_columns(workload: Workload, *, group: bool = False) -> list[tuple[str, Callable, bool]]:
    headline = workload.headline_metric
    format_headline = formatter(headline)
    # (header, formatter, right-aligned number?)
    columns: list[tuple[str, Callable, bool]] = [
        ("Framework", lambda row: row["row_name"], False),
        ("Variant", lambda row: row["variant"], False),
        ("Precision", lambda row: row["precision"], False),
    ]
    if group:
        columns.append(("Group", lambda row: row["group_label"], False))
    columns += [
        ("Repeats", _format_repeats, True),
        (f"Median {headline.heading}", lambda row: format_headline(row["median"]), True),
        *CEILING_COLUMNS,
        ("Min–max", lambda row: _format_range(row, format_headline), True),
        ("Spread", lambda row: format_percent(row["relative_spread"]), True),
        ("Relative", lambda row: format_relative(row["relative_to_best"]), True),
    ]
    for metric in other_metrics(workload):
        columns.append((column_heading(metric),
                        lambda row, name=metric.name, write=formatter(metric): write(row[name]), True))
    expected = reference_parameter_count(workload)
    columns += [
        ("Parameters", lambda row: _format_parameters(row, expected), True),
        ("Device", _format_device, False),
        ("Version", lambda row: row["framework_version"] or "-", False),
        ("Parity", parity_text, False),
        ("Gate", gate_text, False),
        ("Checks", _format_checks, False),
        ("Status", _format_status, False),
    ]
    return columns


def _table(rows: pd.DataFrame, columns: list[tuple[str, Callable, bool]]) -> dict:
    """Headers, already formatted cells and which columns are numbers."""
    table_rows = [table_row([str(render_cell(row)) for _, render_cell, _ in columns],
                            ok=row["status"] == "ok", flagged=bool(row["flags"]), ranked=bool(row["ranked"]))
                  for _, row in rows.iterrows()]
    return {"headers": [header for header, _, _ in columns], "rows": table_rows,
            "numeric": [number for _, _, number in columns]}


def _groups(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows of each group, in the summary's order (groups as they first appear)."""
    return [(group["group_label"].iloc[0], group) for _, group in rows.groupby("group", sort=False)]


def details_list(summary: pd.DataFrame) -> list[dict]:
    """Per row, the fast paths and provenance it recorded (frame.details), as (label, value) pairs,
    and its ok repeats' per-step times (for the HTML page's step plot)."""
    return [{"row": f"{row['row_name']} · {row['variant']}", "group": row["group_label"],
             "items": list((row["details"] or {}).items()) + list(ceiling.details(row).items()),
             "step_series": list(row["step_series"] or [])}
            for _, row in summary.iterrows() if row["details"] or row["step_series"]]


def reference_table(reference: pd.DataFrame, workload: Workload) -> dict | None:
    """The study's numbers for one workload (the figure it published: a total train time, seconds
    per 1000 images), a row per framework (and API), a column per GPU; lowest first."""
    rows = reference[reference["workload"] == workload.name]
    if rows.empty:
        return None
    gpus = list(dict.fromkeys(rows["gpu"]))
    unit = _published_heading(workload, distinct(rows, "metric"), distinct(rows, "unit"))
    show_rnn = rows["uses_cudnn_rnn"].notna().any()
    table_rows = []
    for (framework, api), group in rows.groupby(["framework", "api"], sort=False):
        by_gpu = dict(zip(group["gpu"], group["value"]))
        cells = [f"{framework} ({api})" if api else framework]
        cells += [format_published(by_gpu.get(gpu)) for gpu in gpus]
        if show_rnn:
            cells.append(distinct(group, "uses_cudnn_rnn") or "-")
        # fastest on the newest GPU first, as in the result tables
        table_rows.append((by_gpu.get(gpus[-1], math.inf), table_row(cells)))
    table_rows.sort(key=lambda pair: (math.isnan(pair[0]), pair[0]))
    headers = ["Framework"] + [f"{gpu} ({unit})" for gpu in gpus] + (["cuDNN GRU"] if show_rnn else [])
    numeric = [False] + [True] * len(gpus) + ([False] if show_rnn else [])
    return {"headers": headers, "rows": [row for _, row in table_rows], "numeric": numeric}


def _published_heading(workload: Workload, metric: str, unit: str) -> str:
    """What the study's figure is, in the workload's own words where it declares the same metric
    ("total train time, s"), else in the reference's ("train time, s")."""
    for declared in workload.metrics:
        if declared.name in (metric, f"{metric}_{unit}"):
            return declared.label if declared.heading == declared.label and declared.unit else \
                f"{declared.label}, {declared.unit}"
    return ", ".join(part for part in (metric.replace("_", " "), unit) if part) or "-"


def not_run_lists(summaries: dict[str, pd.DataFrame], not_applicable: list[dict] = ()) -> list[dict]:
    """The cells that could not run here, one list per reason (not one table row each): every
    unsupported row (its recorded reason) and every pair run.json says is not applicable (the
    framework does not implement the workload). [{"reason", "cells": [names]}], the reasons in
    order of first appearance (workloads in declared order), not-applicable ones last."""
    lists: dict[str, list[str]] = {}
    for workload in workload_order(summaries):
        summary = summaries[workload]
        for _, row in summary[summary["status"] == UNSUPPORTED].iterrows():
            reason = row["note"] or UNSUPPORTED
            name = f"{workload} · {row['row_name']} · {row['variant']} · {row['precision']}"
            lists.setdefault(reason, []).append(name)
    seen = set()
    for item in sorted(not_applicable, key=lambda item: (_declared_index(item["workload"]), item["framework"])):
        variants = ", ".join(item.get("variants") or [])
        name = f"{item['workload']} · {item['framework']}" + (f" ({variants})" if variants else "")
        if name in seen:  # several invocations into one folder record the same pair
            continue
        seen.add(name)
        lists.setdefault(f"not applicable: {item.get('reason') or 'not implemented'}", []).append(name)
    return [{"reason": reason, "cells": cells} for reason, cells in lists.items()]


def _declared_index(workload: str) -> int:
    declared = list(declaration.declared())
    return declared.index(workload) if workload in declared else len(declared)


def table_row(cells: list[str], *, ok: bool = True, flagged: bool = False, ranked: bool = True) -> dict:
    """One table row: its cells, and its HTML class ("not-ok", "not-ranked", "flagged": greyed out,
    kept out by the gate, checks marked)."""
    classes = ([] if ok else ["not-ok"]) + (["not-ranked"] if ok and not ranked else []) + \
        (["flagged"] if flagged else [])
    return {"ok": ok, "flagged": flagged, "css": " ".join(classes), "cells": cells}


def matched_sections(frame: pd.DataFrame) -> list[dict]:
    """Per framework, what its implementations had to match, as they record it themselves."""
    sections = []
    known = frame.dropna(subset=["matched"])
    for framework, rows in known.groupby("framework", sort=True):
        items = []
        for workload in workload_order(rows["workload"].unique()):
            text = rows[rows["workload"] == workload]["matched"].iloc[0]
            items.append({"workload": declaration.get(workload).title, "points": matched_points(text)})
        sections.append({"framework": framework, "workloads": items})
    return sections


def matched_points(text: str) -> list[str]:
    """A recorded "matched" extra (the module's MATCHED, joined with " | ") as its points."""
    return [point.strip() for point in str(text).split(" | ") if point.strip()]


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


def _format_checks(row) -> str:
    """What the validity checks found on the row ("-": nothing)."""
    return "; ".join(row["flags"]) if row["flags"] else "-"
