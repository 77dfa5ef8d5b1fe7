"""The report's first screen: a framework x workload grid of each workload's headline figure.

One grid per like-for-like group of devices and precisions (profile, data, device kind and
model, precision: groups.GROUP_KEY), a row per (framework and how it ran, variant), a column per
workload. A framework's modes share its row: each cell shows the best of its modes there, naming
that mode (FAIRNESS.md: modes-compared; the ranking tables list every mode as a row of its own). A cell is the row's median over its ok repeats of the workload's declared headline
metric (summary.summarise), coloured by how it compares with the column's best (the same
"relative" the ranking tables show); the best of each column is marked. Only a row the gate ranks
shows a figure (FAIRNESS.md: ranking-gate); any other cell says why in a word or two (not ranked,
failed, unsupported, n/a, ...), and a GRU cell names the kernel that ran (gru-kernel-named).

Rows are ordered by the first column's figure, then the next column's for rows without one (the
grid's caption says which column: FAIRNESS.md: grid-order); a row with no ok cell at all is not in
a grid: the "Not run" list and the workloads' "Not ranked" tables hold it (FAIRNESS.md: grid-ran-rows).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestrator.report import ceiling
from orchestrator.report.formatting import format_relative, formatter, missing
from orchestrator.report.groups import GROUP_KEY, group_label, group_order
from orchestrator.row_names import row_name
from workloads.common import declaration

# The colour scale: green at the column's best, red at WORST_SHOWN times worse or beyond (on a
# log scale, so 2x worse is as far from 1x as 4x is from 2x).
WORST_SHOWN = 8.0
BEST_HUE, WORST_HUE = 120.0, 0.0  # HSL hues: green, red
NOT_APPLICABLE = "n/a"


def grids(summaries: dict[str, pd.DataFrame], not_applicable: list[dict] = ()) -> list[dict]:
    """Per group, in the ranking's order (GPUs, then CPUs; fp32 first): its label, a stable
    anchor, one column per workload with results in it, one row per (row name, variant) with an
    ok cell, a cell per column, and the caption's ``order`` (which column orders the rows).
    ``not_applicable``: run.json's pairs, shown as "n/a" in a row whose framework and variant
    they name."""
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
            # one grid row per configuration across workloads and modes: the GRU's kernel and the
            # best mode are in its cell
            name = row_name(row["framework"], row["options"], row["init"])
            cells = group["rows"].setdefault((name, row["variant"]), {"framework": row["framework"], "ran": False})
            cell = _cell(row, workload)
            if workload_name not in cells or _preference(cell) < _preference(cells[workload_name]):
                cells[workload_name] = cell
            cells["ran"] = cells["ran"] or row["status"] == "ok"
    shown = []
    for key in sorted(groups, key=group_order):
        group = groups[key]
        ran = {name: cells for name, cells in group["rows"].items() if cells["ran"]}
        workloads = [name for name in declaration.declared()
                     if name in group["workloads"] and any(name in cells for cells in ran.values())]
        if not ran:
            continue  # nothing in it ran: its rows are in "Not run" or "Not ranked" (FAIRNESS.md: grid-ran-rows)
        columns = [{"workload": name, "title": declaration.get(name).title,
                    "metric": declaration.get(name).headline_metric.heading,
                    "better": declaration.get(name).headline_metric.better} for name in workloads]
        rows = []
        ordered = sorted(ran.items(), key=lambda item: (_row_order(item[1], workloads), item[0]))
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
        shown.append({"label": group_label(*key), "id": f"grid-{len(shown) + 1}", "columns": columns, "rows": rows,
                      "order": order_caption(columns)})
    return shown


def order_caption(columns: list[dict]) -> str:
    """Which figure orders a grid's rows, said the same way for every grid (FAIRNESS.md: grid-order)."""
    if not columns:
        return ""
    first = columns[0]["title"]
    if len(columns) == 1:
        return f"Rows are ordered by {first}, best first; rows without a ranked figure last."
    return (f"Rows are ordered by the first column, {first} (how many times worse than its best, best first); "
            f"rows without a ranked figure there follow, ordered the same way by the next column.")


def cell_colour(relative: float) -> str:
    """The background of a cell ``relative`` times worse than its column's best: an HSL colour
    from green (1x) to red (WORST_SHOWN x and worse)."""
    position = min(max(math.log(max(relative, 1.0)) / math.log(WORST_SHOWN), 0.0), 1.0)
    hue = BEST_HUE + (WORST_HUE - BEST_HUE) * position
    return f"hsl({hue:.0f}, 65%, 82%)"


def _preference(cell: dict) -> tuple:
    """Which of a framework's modes its grid cell shows: a ranked figure before an unranked one,
    the better relative first; then an ok row the gate kept out; then the rest."""
    relative = cell["relative_value"]
    return (0 if cell["ranked"] else 1 if cell["ok"] else 2, math.inf if relative is None else relative)


def _cell(row: pd.Series, workload: declaration.Workload) -> dict:
    cell = _status_cell(row, workload)
    cell["mode"] = str(row.get("mode") or "") or None
    cell["ok"] = row["status"] == "ok"
    if cell["mode"]:
        cell["title"] = f"{cell['mode']} mode (the best of this row's modes here); {cell['title']}"
    return cell


def _status_cell(row: pd.Series, workload: declaration.Workload) -> dict:
    kernel = f"gru={row['kernel']}" if row["kernel"] else None
    if row["ranked"]:  # the gate let it through (FAIRNESS.md: ranking-gate)
        relative = row["relative_to_best"]
        repeats = f"median of {row['ok_repeats']} ok repeat{'s' if row['ok_repeats'] != 1 else ''}"
        peak = ceiling.peak_label(row)
        return {"text": formatter(workload.headline_metric)(row["median"]),
                "relative": None if missing(relative) else format_relative(relative),
                "best": bool(row["rank"] == 1),
                "colour": None if missing(relative) else cell_colour(float(relative)),
                # how close to the device's limit, beside the figure (ceiling.py); a result that records
                # no FLOP/s (an older schema, a language without the harness) says so in the tables only
                "peak": None if peak == ceiling.NOT_COUNTED else peak,
                "title": f"{repeats}; {format_relative(relative)} the column's best; "
                         f"{ceiling.format_flops(row['achieved_flops_per_s'])}, {peak}"
                         + (f"; {kernel}" if kernel else "") + ("; " + "; ".join(row["flags"]) if row["flags"] else ""),
                "flagged": bool(row["flags"]),
                "ranked": True,
                "kernel": kernel,
                "relative_value": None if missing(relative) else float(relative)}
    if row["status"] == "ok":
        return _plain_cell("not ranked", row["not_ranked"], kernel=kernel)
    word = "diverged" if row["diverged"] else row["status"]
    return _plain_cell(word, row["note"] or word)


def _plain_cell(text: str, title: str, *, kernel: str | None = None) -> dict:
    return {"text": text, "relative": None, "best": False, "colour": None, "title": title, "flagged": False,
            "ranked": False, "kernel": kernel, "relative_value": None, "peak": None, "mode": None, "ok": False}


def _row_order(cells: dict, workloads: list[str]) -> tuple:
    """The same figure for every row (FAIRNESS.md: grid-order): its relative in the first column,
    then in the next for rows without one there, and so on (missing: after every figure)."""
    return tuple(math.inf if cells.get(name, {}).get("relative_value") is None else cells[name]["relative_value"]
                 for name in workloads) + (cells["framework"],)
