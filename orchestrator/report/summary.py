"""Statistics per configuration: one row per (framework, variant, precision[, profile, data]).

The headline metric of a workload's declaration ranks its rows: median, min, max and spread over
the ok repeats, and "relative" to the best median (1.00x is the best, 2.00x half as good, whichever
direction the metric's better). Every other declared metric gets a column with its median.
"""
from __future__ import annotations

import math

import pandas as pd

from workloads.common import declaration
from workloads.common.declaration import LOWER, Workload

# A row of the summary: the results of one configuration, whatever its repeat.
SUMMARY_KEY = ["framework", "variant", "precision", "profile", "data"]
# Relative-to-best only compares like with like: a smoke run is never "faster" than a full one.
COMPARABLE_KEY = ["profile", "data"]
# The headline metric's statistics, then (in the middle) the other declared metrics, then these.
STATISTICS = ["status", "note", "ok_repeats", "runs", "median", "min", "max", "relative_spread",
              "relative_to_best"]
DETAILS = ["parameter_count", "device", "gpu_name", "framework_version"]
LONGEST_NOTE = 300  # characters; a stderr tail belongs in the JSON, not in a table cell


def other_metrics(workload: Workload) -> list[declaration.Metric]:
    """The declared metrics after the headline, in declared order: one column each."""
    return [metric for metric in workload.metrics if metric.name != workload.headline]


def summary_columns(workload: Workload) -> list[str]:
    return SUMMARY_KEY + STATISTICS + [metric.name for metric in other_metrics(workload)] + DETAILS


def workload_order(workloads) -> list[str]:
    """The declared workloads among ``workloads``, in declared order (the study's first)."""
    present = set(workloads)
    return [name for name in declaration.declared() if name in present]


def undeclared(workloads) -> list[str]:
    """Workloads that results name but no declaration describes (e.g. one removed since)."""
    return sorted(set(workloads) - set(declaration.declared()))


def summarise(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per declared workload, one row per (framework, variant, precision[, profile, data]).

    Numbers come from the ``ok`` repeats only. A configuration without any ok repeat still gets a
    row, with its status and reason and no numbers. Rows are ordered best first, then the
    configurations without a headline figure. ``attrs`` of each frame name the workload and its
    headline metric.
    """
    summaries = {}
    for workload in workload_order(frame["workload"].dropna().unique()):
        summaries[workload] = _summarise_workload(declaration.get(workload), frame[frame["workload"] == workload])
    return summaries


def empty_summary(workload: Workload) -> pd.DataFrame:
    return pd.DataFrame(columns=summary_columns(workload))


def _summarise_workload(workload: Workload, rows: pd.DataFrame) -> pd.DataFrame:
    headline = workload.headline
    records = []
    for key, group in rows.groupby(SUMMARY_KEY, dropna=False, sort=True):
        ok = group[group["status"] == "ok"]
        values = ok[headline].dropna() if headline in ok else pd.Series(dtype=float)
        shown = ok if len(ok) else group
        record = dict(zip(SUMMARY_KEY, key))
        record.update(
            status=_overall_status(group),
            note=_note(group),
            ok_repeats=len(ok),
            runs=len(group),
            median=values.median() if len(values) else math.nan,
            min=values.min() if len(values) else math.nan,
            max=values.max() if len(values) else math.nan,
            relative_spread=_relative_spread(values),
            relative_to_best=math.nan,  # filled in once every median is known
        )
        record.update({metric.name: _median(ok, metric.name) for metric in other_metrics(workload)})
        record.update(
            parameter_count=_first(ok, "parameter_count"),
            device=distinct(shown, "device"),
            gpu_name=distinct(shown, "gpu_name"),
            framework_version=distinct(shown, "framework_version"),
        )
        records.append(record)
    summary = pd.DataFrame(records, columns=summary_columns(workload))
    summary["parameter_count"] = summary["parameter_count"].astype("Int64")
    lower_is_better = workload.headline_metric.better == LOWER
    summary = _add_relative_to_best(summary, lower_is_better)
    summary = _order(summary, lower_is_better)
    summary.attrs.update(workload=workload.name, headline=headline)
    return summary


def _overall_status(group: pd.DataFrame) -> str:
    statuses = group["status"].tolist()
    if "ok" in statuses:
        return "ok"
    # Several kinds of failure across repeats: the most frequent one describes the cell best.
    return max(dict.fromkeys(statuses), key=statuses.count)


def _note(group: pd.DataFrame) -> str:
    """Why a configuration has no (or fewer) numbers: the reasons of its non-ok repeats."""
    bad = group[group["status"] != "ok"]
    if bad.empty:
        return ""
    reasons = []
    for status, reason in zip(bad["status"], bad["reason"]):
        text = f"{status}: {reason}" if isinstance(reason, str) and reason.strip() else str(status)
        if text not in reasons:
            reasons.append(text)
    note = "; ".join(reasons)
    if len(bad) < len(group):
        note = f"{len(bad)} of {len(group)} repeats not ok ({note})"
    note = " ".join(note.split())  # keep tables on one line per row
    if len(note) > LONGEST_NOTE:
        note = note[:LONGEST_NOTE - 1] + "…"
    return note


def _relative_spread(values: pd.Series) -> float:
    """(max - min) / median; undefined for a single repeat."""
    if len(values) < 2:
        return math.nan
    median = values.median()
    return (values.max() - values.min()) / median if median > 0 else math.nan


def _median(rows: pd.DataFrame, column: str) -> float:
    if rows.empty or column not in rows:
        return math.nan
    values = rows[column].dropna()
    return float(values.median()) if len(values) else math.nan


def _first(rows: pd.DataFrame, column: str):
    values = rows[column].dropna()
    return values.iloc[0] if len(values) else pd.NA


def distinct(rows: pd.DataFrame, column: str) -> str:
    """The column's distinct non-empty values, comma-separated, in order of appearance."""
    values = [str(value) for value in rows[column].dropna().unique() if str(value)]
    return ", ".join(values)


def _add_relative_to_best(summary: pd.DataFrame, lower_is_better: bool) -> pd.DataFrame:
    """How many times worse than the best median of comparable rows: 1.00x is the best."""
    summary = summary.copy()
    for _, group in summary.groupby(COMPARABLE_KEY, dropna=False):
        medians = group["median"]  # NaN medians (no ok repeat) are skipped
        best = medians.min() if lower_is_better else medians.max()
        if pd.notna(best) and best > 0:
            summary.loc[group.index, "relative_to_best"] = medians / best if lower_is_better else best / medians
    return summary


def _order(summary: pd.DataFrame, lower_is_better: bool) -> pd.DataFrame:
    """Best first; then ok rows without a headline figure; then unsupported / failed / timeout."""
    rank = summary["median"].notna().map({True: 0, False: 1})
    rank[summary["status"] != "ok"] = 2
    worse = summary["median"] if lower_is_better else -summary["median"]
    ordered = summary.assign(_rank=rank, _worse=worse).sort_values(
        ["_rank"] + COMPARABLE_KEY + ["_worse", "framework", "variant", "precision"],
        na_position="last", kind="stable")
    return ordered.drop(columns=["_rank", "_worse"]).reset_index(drop=True)
