"""Statistics per row, ranked only against like rows.

A row is one (framework, variant, mode, non-default options, init) in one group; a group is one
(profile, data, device kind and model, precision): a CPU, an fp16 cell or another GPU is never
ranked against this one (groups.py; FAIRNESS.md: like-for-like). The headline metric of the
workload's declaration ranks a group's rows: median, min, max and spread over the ok repeats, and
"relative" to the group's best median (1.00x is the best, 2.00x half as good, whichever direction
the metric's better). Every other declared metric gets a column with its median.

Only the rows the gate lets through are ranked (gate.py; FAIRNESS.md: ranking-gate): every repeat
ok and none diverged, the reference model's parameter count, the accuracy target where it applies,
parity passed. Steps much slower than the median step, repeated traces, a framework's own
initialisers and unequal CPU shares are flagged on the row without keeping it out (checks.py).
"""
from __future__ import annotations

import math

import pandas as pd

from orchestrator.report import checks, gate
from orchestrator.report.gate import DIVERGED, ParityRecord, ranked
from orchestrator.report.groups import (GROUP_KEY, SUMMARY_KEY, group_label, kernel_kind, kind_order,
                                        precision_order, with_devices)
from orchestrator.row_names import row_name
from workloads.common import declaration
from workloads.common.declaration import LOWER, Workload
from workloads.common.result import CANONICAL_INIT

# The headline metric's statistics, then (in the middle) the other declared metrics, then these.
STATISTICS = ["row_name", "kernel", "group", "group_label", "status", "diverged", "note", "ok_repeats", "runs",
              "median", "min", "max", "relative_spread", "relative_to_best", "rank"]
CHECK_COLUMNS = ["checks", "ranked", "not_ranked", "flags", "slow_steps", "traces", "details", "step_series",
          "repeat_keys"]
# cuda_version and cudnn_version as the framework saw them, gpu_driver as the cell recorded it: the
# sweep view's columns.
# How close to the device's limit (ceiling.py): medians over the ok repeats, and the peak's source.
CEILING = ["achieved_flops_per_s", "peak_flops_per_s", "pct_of_peak", "peak_source"]
DETAILS = ["parameter_count", "device", "gpu_name", "framework_version", "cuda_version", "cudnn_version",
           "gpu_driver"]
LONGEST_NOTE = 300  # characters; a stderr tail belongs in the JSON, not in a table cell


def other_metrics(workload: Workload) -> list[declaration.Metric]:
    """The declared metrics after the headline, in declared order: one column each."""
    return [metric for metric in workload.metrics if metric.name != workload.headline]


def summary_columns(workload: Workload) -> list[str]:
    return (SUMMARY_KEY + STATISTICS + [metric.name for metric in other_metrics(workload)] + CEILING + CHECK_COLUMNS
            + DETAILS)


def workload_order(workloads) -> list[str]:
    """The declared workloads among ``workloads``, in declared order (the study's first)."""
    present = set(workloads)
    return [name for name in declaration.declared() if name in present]


def undeclared(workloads) -> list[str]:
    """Workloads that results name but no declaration describes (e.g. one removed since)."""
    return sorted(set(workloads) - set(declaration.declared()))


def notes() -> list[str]:
    """The rules the report applies, as its notes say them."""
    return [
        "Ranked: each workload's declared headline figure (steady-state throughput: every training step after "
        "the first, whose compilation, tracing and autotuning is the \"first step\" column), median over the ok "
        "repeats. Only like is ranked with like: one table per profile, data, device (GPU or CPU model) and "
        "precision, each with its own fastest row; \"Relative\" is how many times worse than that row's median "
        "a row is (its chart says whether lower or higher is better).",
        "The gate: a row is ranked (in the grid, the rankings, the charts and the energy tables) only when every "
        "check that applies to it has passed: every repeat ok (one diverged repeat, a NaN or infinite loss or a "
        "loss far above its start, fails it, and so does one failed or timed-out repeat); the parameter count of "
        "the reference model the workload declares; the workload's accuracy target, in the full profile on real "
        "data only (elsewhere it does not apply, and each table says so once); the parity check against "
        "PyTorch on the same canonical weights, which run-matrix runs beside the cells (\"not checked\" where "
        "the run has none: that does not keep a row out, a failure does). Each row that is not ranked says "
        "which check failed (its Gate column, and \"Not ranked\").",
        f"Slow steps: a training step after the first that took more than {checks.SLOW_STEP_FACTOR:g}x the median "
        f"step and at least {checks.SLOW_STEP_EXTRA_S * 1000:g} ms more than it (each epoch's last step, which "
        f"waits for the device, left out) flags the row \"slow steps\", with what its trace counts say of "
        f"the cause (a function traced again: a retrace suspected; each traced once: not a retrace); "
        f"a compiled function traced more than once is shown with its count. Flags do not keep a row out of the "
        f"ranking.",
        "A GRU row's name says which kernel ran (gru=cudnn, scan, fused-cpu, python-loop, compiled-step, as the "
        "framework recorded it): rows with different kernels share a ranking, and their names say so.",
        "Rows of one group that could use different shares of the machine (CPU affinity, cgroup CPU quota) "
        "say so: the same device model, not the same resources.",
        "Rows run with --init framework start from each framework's own initialisers: their accuracies are "
        "not from the same start as the others' (canonical weights).",
    ]


def summarise(frame: pd.DataFrame, parity: ParityRecord | None = None) -> dict[str, pd.DataFrame]:
    """Per declared workload, one row per (group, framework, variant, mode, options, init).

    ``frame`` is orchestrator.report.frame.report_frame's (or plain to_frame's: the report's own
    columns then take their defaults). Numbers come from the ``ok`` repeats only. A row without
    any ok repeat still gets a row, with its status and reason and no numbers. ``parity``: the
    run's parity verdicts (orchestrator/parity.py), None for a run without a parity check. Rows
    are ordered group by group, ranked rows best first, then the ok rows the gate kept out, then
    the failed ones. ``attrs`` of each frame name the workload and its headline metric.
    """
    frame = _prepared(frame)
    summaries = {}
    for workload in workload_order(frame["workload"].dropna().unique()):
        summaries[workload] = _summarise_workload(declaration.get(workload), frame[frame["workload"] == workload],
                                                  parity)
    return summaries


def empty_summary(workload: Workload) -> pd.DataFrame:
    summary = pd.DataFrame(columns=summary_columns(workload))
    summary["ranked"] = summary["ranked"].astype(bool)
    return summary


def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    """The report's own columns, defaulted where plain to_frame's frame lacks them, and the devices."""
    frame = frame.copy()
    defaults = {"init": CANONICAL_INIT, "mode": "", "options": "", "gpu_model": None, "gru_kernel": "", "warmup_batches": None,
                "peak_flops_per_s": math.nan, "pct_of_peak": math.nan, "peak_source": "", "threads_problem": ""}
    for column, value in defaults.items():
        if column not in frame:
            frame[column] = value
    for column in ("step_times", "epoch_steps"):
        if column not in frame:
            frame[column] = [[] for _ in range(len(frame))]
    for column in ("traces", "details"):
        if column not in frame:
            frame[column] = [{} for _ in range(len(frame))]
    if "key" not in frame:
        frame["key"] = [str(index) for index in range(len(frame))]
    frame["init"] = frame["init"].fillna(CANONICAL_INIT)
    frame["options"] = frame["options"].fillna("")
    frame["mode"] = frame["mode"].fillna("")
    return with_devices(frame)


# --- one workload ------------------------------------------------------------------------------------

def _summarise_workload(workload: Workload, rows: pd.DataFrame, parity: ParityRecord | None) -> pd.DataFrame:
    headline = workload.headline
    records = []
    keyed = rows.assign(**{column: rows[column].fillna("").astype(str) for column in SUMMARY_KEY})
    for key, group in keyed.groupby(SUMMARY_KEY, dropna=False, sort=False):
        ok = group[group["status"] == "ok"]
        diverged = group[(group["status"] == "failed") & group["reason"].fillna("").astype(str)
                         .str.strip().str.startswith(DIVERGED)]
        usable = ok if diverged.empty else ok.iloc[0:0]
        values = usable[headline].dropna() if headline in usable else pd.Series(dtype=float)
        shown = usable if len(usable) else group
        record = dict(zip(SUMMARY_KEY, key))
        kernel = "+".join(dict.fromkeys(kind for kind in map(kernel_kind, shown["gru_kernel"]) if kind))
        record.update(
            row_name=row_name(record["framework"], record["options"], record["init"], kernel, record["mode"]),
            kernel=kernel,
            group="|".join(record[name] for name in GROUP_KEY),
            group_label=group_label(*(record[name] for name in GROUP_KEY)),
            status="failed" if len(diverged) else _overall_status(group),
            diverged=bool(len(diverged)),
            note=_note(group, diverged),
            ok_repeats=len(usable),
            runs=len(group),
            median=values.median() if len(values) else math.nan,
            min=values.min() if len(values) else math.nan,
            max=values.max() if len(values) else math.nan,
            relative_spread=_relative_spread(values),
            relative_to_best=math.nan,  # filled in once every median of the group is known
            rank=pd.NA,
        )
        record.update({metric.name: _median(usable, metric.name) for metric in other_metrics(workload)})
        record.update({name: _median(usable, name) for name in CEILING[:-1]},
                      peak_source=distinct(shown, "peak_source"))
        slow, traced = checks.slow_steps(usable, workload), checks.traces(usable)
        record.update(
            flags=checks.row_flags(record["init"], slow, traced, checks.thread_flags(usable)),
            slow_steps=slow["count"],
            traces=traced,
            details=_merged_details(shown),
            parameter_count=_first(usable, "parameter_count"),
            device=distinct(shown, "device"),
            gpu_name=distinct(shown, "gpu_name"),
            framework_version=distinct(shown, "framework_version"),
            cuda_version=distinct(shown, "cuda_version"),
            cudnn_version=distinct(shown, "cudnn_version"),
            gpu_driver=distinct(shown, "gpu_driver"),
            step_series=_step_series(usable),
            repeat_keys=[str(key) for key in usable["key"]],
        )
        record["checks"] = gate.verdicts(record, workload, parity, usable=len(usable), diverged=len(diverged))
        records.append(record)
    summary = pd.DataFrame(records, columns=summary_columns(workload))
    summary["parameter_count"] = summary["parameter_count"].astype("Int64")
    summary["rank"] = summary["rank"].astype("Int64")
    summary = gate.apply(summary)
    lower_is_better = workload.headline_metric.better == LOWER
    summary = _add_relative_to_best(summary, lower_is_better)
    summary = checks.flag_unequal_cpus(summary)
    summary = _order(summary, lower_is_better)
    summary.attrs.update(workload=workload.name, headline=headline)
    return summary


def _overall_status(group: pd.DataFrame) -> str:
    statuses = group["status"].tolist()
    if "ok" in statuses:
        return "ok"
    # Several kinds of failure across repeats: the most frequent one describes the cell best.
    return max(dict.fromkeys(statuses), key=statuses.count)


def _note(group: pd.DataFrame, diverged: pd.DataFrame) -> str:
    """Why a row has no (or fewer) numbers: the reasons of its non-ok repeats. A row with a diverged
    repeat says "failed: diverged" first: it is never ranked, whatever its other repeats did."""
    bad = group[group["status"] != "ok"]
    if bad.empty:
        return ""
    reasons, why_diverged = [], []
    for status, reason in zip(bad["status"], bad["reason"]):
        reason = reason.strip() if isinstance(reason, str) else ""
        if status == "failed" and reason.startswith(DIVERGED):
            text = reason[len(DIVERGED):].lstrip(" :")
            if text and text not in why_diverged:
                why_diverged.append(text)
            continue
        text = f"{status}: {reason}" if reason else str(status)
        if text not in reasons:
            reasons.append(text)
    if len(diverged):
        repeats = f" in {len(diverged)} of {len(group)} repeats" if len(group) > 1 else ""
        because = f" ({'; '.join(why_diverged)})" if why_diverged else ""
        note = f"failed: diverged{repeats}{because}, never ranked"
        if reasons:
            note += f"; other repeats: {'; '.join(reasons)}"
    else:
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


def _merged_details(rows: pd.DataFrame) -> dict[str, str]:
    """Each detail's distinct values over the repeats (" | " between them when they differ)."""
    merged: dict[str, list[str]] = {}
    for details in rows["details"]:
        for label, value in (details or {}).items():
            values = merged.setdefault(label, [])
            if value not in values:
                values.append(value)
    return {label: " | ".join(values) for label, values in merged.items()}


def _step_series(usable: pd.DataFrame) -> list[dict]:
    """Each ok repeat's per-step times, for the row's step plot (orchestrator/report/steps.py)."""
    return [{"repeat": int(repeat) if not _missing(repeat) else index, "times": list(times or []),
             "epoch_steps": list(epoch_steps or []), "warmup_batches": None if _missing(warmup) else int(warmup)}
            for index, (repeat, times, epoch_steps, warmup)
            in enumerate(zip(usable["repeat"], usable["step_times"], usable["epoch_steps"], usable["warmup_batches"]))
            if times]



# --- ranking -------------------------------------------------------------------------------------

def _add_relative_to_best(summary: pd.DataFrame, lower_is_better: bool) -> pd.DataFrame:
    """How many times worse than the best median of its group: 1.00x is the best; and the rank."""
    summary = summary.copy()
    mask = ranked(summary)
    for _, group in summary[mask].groupby("group", sort=False):
        medians = group["median"]
        best = medians.min() if lower_is_better else medians.max()
        if pd.notna(best) and best > 0:
            summary.loc[group.index, "relative_to_best"] = medians / best if lower_is_better else best / medians
        order = medians.rank(method="min", ascending=lower_is_better).astype(int)
        summary.loc[group.index, "rank"] = order
    return summary


def _order(summary: pd.DataFrame, lower_is_better: bool) -> pd.DataFrame:
    """Group by group (GPUs, then CPUs; fp32 first); in each, ranked rows best first; then the ok
    rows the gate kept out; then unsupported / failed / timeout."""
    rank = summary["ranked"].map({True: 0, False: 1})
    rank[summary["status"] != "ok"] = 2
    worse = summary["median"] if lower_is_better else -summary["median"]
    ordered = summary.assign(_rank=rank, _worse=worse, _kind=summary["device_kind"].map(kind_order),
                             _precision=summary["precision"].map(precision_order)).sort_values(
        ["profile", "data", "_kind", "device_model", "_precision", "precision", "_rank", "_worse", "framework",
         "variant", "mode", "options", "init"],
        na_position="last", kind="stable")
    return ordered.drop(columns=["_rank", "_worse", "_kind", "_precision"]).reset_index(drop=True)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
