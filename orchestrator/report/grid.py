"""The report's first screen: a framework x workload grid of each workload's headline figure.

One grid per like-for-like group of devices and precisions (profile, data, device kind and
model, precision: summary.GROUP_KEY), a row per (framework and how it ran, variant), a column per
workload. A cell is the row's median over its ok repeats of the workload's declared headline
metric (summary.summarise), coloured by how it compares with the column's best (the same
"relative" the ranking tables show); the best of each column is marked. A row without a figure
says why in one word (failed, unsupported, n/a, ...).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestrator.report.formatting import format_relative, formatter, missing
from orchestrator.report.summary import CPU, GPU, GROUP_KEY, PRECISION_ORDER, group_label
from workloads.common import declaration

# The colour scale: green at the column's best, red at WORST_SHOWN times worse or beyond (on a
# log scale, so 2x worse is as far from 1x as 4x is from 2x).
WORST_SHOWN = 8.0
BEST_HUE, WORST_HUE = 120.0, 0.0  # HSL hues: green, red
NOT_APPLICABLE = "n/a"


def grids(summaries: dict[str, pd.DataFrame], not_applicable: list[dict] = ()) -> list[dict]:
    """Per group, in the ranking's order (GPUs, then CPUs; fp32 first): its label, a stable
    anchor, one column per workload with results in it, and one row per (row name, variant) with
    a cell per column. ``not_applicable``: run.json's pairs, shown as "n/a" in a row whose
    framework and variant they name."""
    skipped: dict[tuple[str, str], set[str]] = {}
    for item in not_applicable:
        skipped.setdefault((item["framework"], item["workload"]), set()).update(item.get("variants") or [""])
    groups: dict[tuple, dict] = {}
    for workload_name, summary in summaries.items():
        workload = declaration.get(workload_name)
        for _, row in summary.iterrows():
            key = tuple(row[name] for name in GROUP_KEY)
            group = groups.setdefault(key, {"workloads": [], "rows": {}})
            if workload_name not in group["workloads"]:
                group["workloads"].append(workload_name)
            cells = group["rows"].setdefault((row["row_name"], row["variant"]), {"framework": row["framework"]})
            cells[workload_name] = _cell(row, workload)
    shown = []
    for number, key in enumerate(sorted(groups, key=_group_order), start=1):
        group = groups[key]
        workloads = [name for name in declaration.declared() if name in group["workloads"]]
        columns = [{"workload": name, "title": declaration.get(name).title,
                    "metric": declaration.get(name).headline_metric.heading,
                    "better": declaration.get(name).headline_metric.better} for name in workloads]
        rows = []
        ordered = sorted(group["rows"].items(), key=lambda item: (_row_order(item[1], workloads), item[0]))
        for (name, variant), cells in ordered:
            row_cells = []
            for workload_name in workloads:
                cell = cells.get(workload_name)
                if cell is None:
                    variants = skipped.get((cells["framework"], workload_name))
                    cell = (_plain_cell(NOT_APPLICABLE, "not applicable: this framework does not implement it")
                            if variants is not None and (variant in variants or "" in variants)
                            else _plain_cell("-", "not run in this group"))
                row_cells.append(cell)
            rows.append({"name": name, "variant": variant, "cells": row_cells})
        shown.append({"label": group_label(*key), "id": f"grid-{number}", "columns": columns, "rows": rows})
    return shown


def cell_colour(relative: float) -> str:
    """The background of a cell ``relative`` times worse than its column's best: an HSL colour
    from green (1x) to red (WORST_SHOWN x and worse)."""
    position = min(max(math.log(max(relative, 1.0)) / math.log(WORST_SHOWN), 0.0), 1.0)
    hue = BEST_HUE + (WORST_HUE - BEST_HUE) * position
    return f"hsl({hue:.0f}, 65%, 82%)"


def _cell(row: pd.Series, workload: declaration.Workload) -> dict:
    if row["status"] == "ok" and not missing(row["median"]):  # summary.ranked, for one row
        relative = row["relative_to_best"]
        best = row["rank"] == 1
        repeats = f"median of {row['ok_repeats']} ok repeat{'s' if row['ok_repeats'] != 1 else ''}"
        return {"text": formatter(workload.headline_metric)(row["median"]),
                "relative": None if missing(relative) else format_relative(relative),
                "best": bool(best),
                "colour": None if missing(relative) else cell_colour(float(relative)),
                "title": f"{repeats}; {format_relative(relative)} the column's best"
                         + ("; " + "; ".join(row["flags"]) if row["flags"] else ""),
                "flagged": bool(row["flags"]),
                "ranked": True,
                "relative_value": None if missing(relative) else float(relative)}
    if row["status"] == "ok":
        return _plain_cell("no figure", row["note"] or "ok, but no headline figure was recorded")
    word = "diverged" if row["diverged"] else row["status"]
    return _plain_cell(word, row["note"] or word)


def _plain_cell(text: str, title: str) -> dict:
    return {"text": text, "relative": None, "best": False, "colour": None, "title": title, "flagged": False,
            "ranked": False, "relative_value": None}


def _group_order(key: tuple) -> tuple:
    profile, data, kind, model, precision = (str(value) for value in key)
    kind_order = {GPU: 0, CPU: 1}.get(kind, 2 if kind else 3)
    precision_order = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return profile, data, kind_order, model, precision_order, precision


def _row_order(cells: dict, workloads: list[str]) -> tuple:
    """Fastest rows first: by the mean of log(relative) over the row's ranked cells (its typical
    distance from each column's best), rows without a ranked cell last, then by name."""
    relatives = [cells[name]["relative_value"] for name in workloads
                 if name in cells and cells[name]["relative_value"] is not None]
    typical = sum(math.log(value) for value in relatives) / len(relatives) if relatives else math.inf
    return (not relatives, typical, cells["framework"])
