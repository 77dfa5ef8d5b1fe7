"""Statistics per row, ranked only against like rows.

A row is one (framework, variant, non-default options, init) in one group; a group is one
(profile, data, device kind and model, precision): a CPU, an fp16 cell or another GPU is never
ranked against this one. The headline metric of the workload's declaration ranks a group's rows:
median, min, max and spread over the ok repeats, and "relative" to the group's best median (1.00x
is the best, 2.00x half as good, whichever direction the metric's better). Every other declared
metric gets a column with its median.

The validity gate: a row with a diverged repeat (status failed, reason "diverged: ...") is failed
and never ranked; an accuracy outside the workload's target (full profile, real data) or far from
the other rows' (any profile and data), steps much slower than the median step (a retrace or
recompilation), more than one trace of a compiled function and a framework's own initialisers are
flagged on the row (its ``flags``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from workloads.common import declaration
from workloads.common.declaration import LOWER, TRAINING, Workload
from workloads.common.result import CANONICAL_INIT, FRAMEWORK_INIT

# What is ranked together: one table, one fastest row, one chart per group.
GROUP_KEY = ["profile", "data", "device_kind", "device_model", "precision"]
# A row of a group: the results of one configuration, whatever its repeat.
ROW_KEY = ["framework", "variant", "options", "init"]
SUMMARY_KEY = GROUP_KEY + ROW_KEY
# Accuracy agreement is judged across devices (the accuracy does not depend on the GPU's speed).
ACCURACY_KEY = ["profile", "data", "precision"]
GPU, CPU = "GPU", "CPU"
# The headline metric's statistics, then (in the middle) the other declared metrics, then these.
STATISTICS = ["row_name", "group", "group_label", "status", "diverged", "note", "ok_repeats", "runs",
              "median", "min", "max", "relative_spread", "relative_to_best", "rank"]
CHECKS = ["flags", "slow_steps", "traces", "details", "step_series"]
# cuda_version and cudnn_version as the framework saw them, gpu_driver as the cell recorded it: the
# sweep view's columns.
DETAILS = ["parameter_count", "device", "gpu_name", "framework_version", "cuda_version", "cudnn_version",
           "gpu_driver"]
LONGEST_NOTE = 300  # characters; a stderr tail belongs in the JSON, not in a table cell

# The accuracy outlier rule: farther than max(OUTLIER_FLOOR, OUTLIER_MADS x MAD) from the median
# accuracy of the rows of the same workload, profile, data and precision (MAD: the median absolute
# deviation from that median). Two rows can never be told apart this way: it needs three or more.
OUTLIER_FLOOR = 0.05
OUTLIER_MADS = 3.0
# The slow-step rule: a training step after the first that takes more than SLOW_STEP_FACTOR times the
# median step, and SLOW_STEP_EXTRA_S more than it (a step the host only queues for the GPU takes a
# fraction of a millisecond: a pause of a few milliseconds is not a recompilation). Each epoch's
# last step is left out: it carries the wait for the device.
SLOW_STEP_FACTOR = 10.0
SLOW_STEP_EXTRA_S = 0.05
DIVERGED = "diverged"
CPU_SHARE = ("CPU affinity", "CPU quota")  # labels of orchestrator.report.frame.details
PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16")


def other_metrics(workload: Workload) -> list[declaration.Metric]:
    """The declared metrics after the headline, in declared order: one column each."""
    return [metric for metric in workload.metrics if metric.name != workload.headline]


def summary_columns(workload: Workload) -> list[str]:
    return SUMMARY_KEY + STATISTICS + [metric.name for metric in other_metrics(workload)] + CHECKS + DETAILS


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
        "A row with a diverged repeat (a NaN or infinite loss, or a loss far above its start) is failed: "
        "diverged, and never ranked.",
        f"Accuracy: in the full profile on real data a row outside the workload's target (± its tolerance) is "
        f"flagged; everywhere, a row whose median accuracy is farther than max({OUTLIER_FLOOR * 100:g} points, "
        f"{OUTLIER_MADS:g} × MAD) from the median of the rows of the same workload, profile, data and precision "
        f"(MAD: their median absolute deviation; three rows or more) is flagged as an outlier.",
        f"Slow steps: a training step after the first that took more than {SLOW_STEP_FACTOR:g}x the median step "
        f"and at least {SLOW_STEP_EXTRA_S * 1000:g} ms more than it (each epoch's last step, which waits for the "
        f"device, left out) flags the row \"retrace/recompile "
        f"suspected\"; a compiled function traced more than once is shown with its count.",
        "Rows of one group that could use different shares of the machine (CPU affinity, cgroup CPU quota) "
        "say so: the same device model, not the same resources.",
        "Rows run with --init framework start from each framework's own initialisers: their accuracies are "
        "not from the same start as the others' (canonical weights).",
    ]


def summarise(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per declared workload, one row per (group, framework, variant, options, init).

    ``frame`` is orchestrator.report.frame.report_frame's (or plain to_frame's: the report's own
    columns then take their defaults). Numbers come from the ``ok`` repeats only. A row without
    any ok repeat still gets a row, with its status and reason and no numbers. Rows are ordered
    group by group, best first, then the rows without a headline figure, then the failed ones.
    ``attrs`` of each frame name the workload and its headline metric.
    """
    frame = _prepared(frame)
    summaries = {}
    for workload in workload_order(frame["workload"].dropna().unique()):
        summaries[workload] = _summarise_workload(declaration.get(workload), frame[frame["workload"] == workload])
    return summaries


def empty_summary(workload: Workload) -> pd.DataFrame:
    return pd.DataFrame(columns=summary_columns(workload))


# --- the frame's own columns ----------------------------------------------------------------------

def _prepared(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    defaults = {"init": CANONICAL_INIT, "options": "", "gpu_model": None}
    for column, value in defaults.items():
        if column not in frame:
            frame[column] = value
    for column in ("step_times", "epoch_steps"):
        if column not in frame:
            frame[column] = [[] for _ in range(len(frame))]
    for column in ("traces", "details"):
        if column not in frame:
            frame[column] = [{} for _ in range(len(frame))]
    if "warmup_batches" not in frame:
        frame["warmup_batches"] = None
    frame["init"] = frame["init"].fillna(CANONICAL_INIT)
    frame["options"] = frame["options"].fillna("")
    kinds, models = [], []
    for device, gpu_name, gpu_model, cpu_model in zip(frame["device"], frame["gpu_name"], frame["gpu_model"],
                                                      frame["cpu_model"]):
        kind, model = device_identity(device, gpu_name if _text(gpu_name) else gpu_model, cpu_model)
        kinds.append(kind)
        models.append(model)
    frame["device_kind"], frame["device_model"] = kinds, models
    return _fill_unknown_devices(frame)


def device_identity(device, gpu_name, cpu_model) -> tuple[str, str]:
    """(kind, model): ("GPU", its name) for a CUDA result, ("CPU", its model) for a CPU one;
    "" where the result does not say (a cell that failed before it recorded its device)."""
    device = str(device).strip().lower() if _text(device) else ""
    if device.startswith(("cuda", "gpu")):
        return GPU, str(gpu_name).strip() if _text(gpu_name) else ""
    if device == "cpu":
        return CPU, str(cpu_model).strip() if _text(cpu_model) else ""
    return (device.upper() if device else ""), ""


def _fill_unknown_devices(frame: pd.DataFrame) -> pd.DataFrame:
    """A repeat that recorded no device, or no device model (it failed first), joins its
    configuration's other repeats when they all ran on one device, so that its failure is counted
    in their row."""
    config = ["workload", "framework", "variant", "precision", "profile", "data", "options", "init"]
    known = frame[frame["device_model"] != ""]
    for key, group in frame[frame["device_model"] == ""].groupby(config + ["device_kind"], dropna=False, sort=False):
        match = known
        for column, value in zip(config, key):
            match = match[match[column] == value] if not _missing(value) else match[match[column].isna()]
        if key[-1]:  # the kind is known: only its model is missing
            match = match[match["device_kind"] == key[-1]]
        identities = match[["device_kind", "device_model"]].drop_duplicates()
        if len(identities) == 1:
            frame.loc[group.index, "device_kind"] = identities.iloc[0]["device_kind"]
            frame.loc[group.index, "device_model"] = identities.iloc[0]["device_model"]
    return frame


def group_label(profile, data, device_kind, device_model, precision) -> str:
    """"GPU NVIDIA H200 · fp32 · full profile · real data"."""
    return f"{device_label(device_kind, device_model)} · {precision} · {profile} profile · {data} data"


def device_label(device_kind, device_model) -> str:
    """"GPU NVIDIA H200", "CPU (model not recorded)", "device not recorded"."""
    if device_kind and device_model:
        return f"{device_kind} {device_model}"
    if device_kind:
        return f"{device_kind} (model not recorded)"
    return "device not recorded"


def row_name(framework, options, init) -> str:
    """"tensorflow [xla=on]", "pytorch [init=framework]": a row's name says how it ran."""
    how = [options] if options else []
    if init and init != CANONICAL_INIT:
        how.append(f"init={init}")
    return f"{framework} [{', '.join(how)}]" if how else str(framework)


# --- one workload ------------------------------------------------------------------------------------

def _summarise_workload(workload: Workload, rows: pd.DataFrame) -> pd.DataFrame:
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
        record.update(
            row_name=row_name(record["framework"], record["options"], record["init"]),
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
        slow, traces = _slow_steps(usable, workload), _traces(usable)
        record.update(
            flags=_row_flags(record, slow, traces),
            slow_steps=slow["count"],
            traces=traces,
            details=_merged_details(shown),
            parameter_count=_first(usable, "parameter_count"),
            device=distinct(shown, "device"),
            gpu_name=distinct(shown, "gpu_name"),
            framework_version=distinct(shown, "framework_version"),
            cuda_version=distinct(shown, "cuda_version"),
            cudnn_version=distinct(shown, "cudnn_version"),
            gpu_driver=distinct(shown, "gpu_driver"),
            step_series=_step_series(usable),
        )
        records.append(record)
    summary = pd.DataFrame(records, columns=summary_columns(workload))
    summary["parameter_count"] = summary["parameter_count"].astype("Int64")
    summary["rank"] = summary["rank"].astype("Int64")
    lower_is_better = workload.headline_metric.better == LOWER
    summary = _add_relative_to_best(summary, lower_is_better)
    summary = _flag_accuracy(summary, workload)
    summary = _flag_unequal_cpus(summary)
    summary = _order(summary, lower_is_better)
    summary.attrs.update(workload=workload.name, headline=headline)
    return summary


def ranked(summary: pd.DataFrame) -> pd.Series:
    """Which rows are ranked: ok, not diverged, with a headline figure."""
    return (summary["status"] == "ok") & summary["median"].notna()


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


# --- the checks ------------------------------------------------------------------------------------

def slow_step_count(step_times, epoch_steps) -> tuple[int, float, float]:
    """(how many steps after the first took more than SLOW_STEP_FACTOR x the median step and
    SLOW_STEP_EXTRA_S more than it, the slowest of them, that median) in one training result. Each epoch's last step (it waits for the
    device) and the run's first step (compilation) are left out."""
    times = [float(value) for value in step_times or [] if value is not None and math.isfinite(value)]
    if len(times) != len(step_times or []):
        return 0, math.nan, math.nan
    skip = {0}
    ends = np.cumsum([int(steps) for steps in epoch_steps or []]) - 1
    if len(ends) and ends[-1] == len(times) - 1:
        skip.update(int(end) for end in ends)
    else:  # steps not split into epochs as recorded: leave out the last one at least
        skip.add(len(times) - 1)
    steady = [value for index, value in enumerate(times) if index not in skip]
    if len(steady) < 3:
        return 0, math.nan, math.nan
    median = float(np.median(steady))
    slow = [value for value in steady
            if median > 0 and value > SLOW_STEP_FACTOR * median and value - median > SLOW_STEP_EXTRA_S]
    return len(slow), (max(slow) if slow else math.nan), median


def _slow_steps(usable: pd.DataFrame, workload: Workload) -> dict:
    found = {"count": 0, "slowest": math.nan, "median": math.nan, "repeats": 0}
    if workload.kind != TRAINING:
        return found
    for step_times, epoch_steps in zip(usable["step_times"], usable["epoch_steps"]):
        count, slowest, median = slow_step_count(step_times, epoch_steps)
        if count:
            found["count"] += count
            found["repeats"] += 1
            if not found["slowest"] >= slowest:  # NaN-safe max
                found["slowest"], found["median"] = slowest, median
    return found


def _step_series(usable: pd.DataFrame) -> list[dict]:
    """Each ok repeat's per-step times, for the row's step plot (orchestrator/report/steps.py)."""
    return [{"repeat": int(repeat) if not _missing(repeat) else index, "times": list(times or []),
             "epoch_steps": list(epoch_steps or []), "warmup_batches": None if _missing(warmup) else int(warmup)}
            for index, (repeat, times, epoch_steps, warmup)
            in enumerate(zip(usable["repeat"], usable["step_times"], usable["epoch_steps"], usable["warmup_batches"]))
            if times]


def _traces(usable: pd.DataFrame) -> dict[str, int]:
    """Each compiled function's largest trace count over the repeats."""
    counts: dict[str, int] = {}
    for traces in usable["traces"]:
        for function, count in (traces or {}).items():
            if isinstance(count, (int, float)) and not isinstance(count, bool):
                counts[str(function)] = max(counts.get(str(function), 0), int(count))
    return counts


def _row_flags(record: dict, slow: dict, traces: dict[str, int]) -> list[str]:
    flags = []
    if record["init"] == FRAMEWORK_INIT:
        flags.append("init=framework: accuracy not from the same start (each framework's own initialisers)")
    if slow["count"]:
        flags.append(f"retrace/recompile suspected: {slow['count']} step(s) over {SLOW_STEP_FACTOR:g}x the median "
                     f"step (slowest {slow['slowest'] * 1000:.3g} ms, median {slow['median'] * 1000:.3g} ms)")
    retraced = {function: count for function, count in sorted(traces.items()) if count > 1}
    if retraced:
        flags.append("traces: " + ", ".join(f"{function} {count}x" for function, count in retraced.items()))
    return flags


def _flag_accuracy(summary: pd.DataFrame, workload: Workload) -> pd.DataFrame:
    """The accuracy target (full profile, real data) and the outlier rule (everywhere)."""
    if not workload.accuracy or summary.empty:
        return summary
    name = declaration.TEST_ACCURACY.name
    summary = summary.copy()
    summary["flags"] = [list(flags) for flags in summary["flags"]]
    target, tolerance = workload.accuracy_target, workload.accuracy_tolerance
    measured = (summary["status"] == "ok") & summary[name].notna()
    for index in summary.index[measured]:
        accuracy, row = summary.at[index, name], summary.loc[index]
        if target is not None and row["profile"] == "full" and row["data"] == "real":
            if accuracy < target - tolerance:
                summary.at[index, "flags"].append(
                    f"below target {_percent(target)} ± {_percent(tolerance)} (median {_percent(accuracy, 1)})")
            elif accuracy > target + tolerance:
                summary.at[index, "flags"].append(
                    f"above target {_percent(target)} ± {_percent(tolerance)} (median {_percent(accuracy, 1)})")
    for _, group in summary[measured].groupby(ACCURACY_KEY, dropna=False):
        accuracies = group[name].to_numpy(dtype=float)
        if len(accuracies) < 3:
            continue
        centre = float(np.median(accuracies))
        threshold = max(OUTLIER_FLOOR, OUTLIER_MADS * float(np.median(np.abs(accuracies - centre))))
        for index, accuracy in zip(group.index, accuracies):
            if abs(accuracy - centre) > threshold:
                summary.at[index, "flags"].append(
                    f"accuracy outlier: {_percent(accuracy, 1)} against a median of {_percent(centre, 1)} over "
                    f"{len(accuracies)} rows (limit ± {_percent(threshold, 1)})")
    return summary


def _flag_unequal_cpus(summary: pd.DataFrame) -> pd.DataFrame:
    """Ranked rows of one group that ran on different shares of the machine (CPUs they could use,
    cgroup quota) are the same device model, but not alike: each says what it had."""
    summary = summary.copy()
    summary["flags"] = [list(flags) for flags in summary["flags"]]
    for _, group in summary[ranked(summary)].groupby("group", sort=False):
        shares = {index: ", ".join(f"{label} {details[label]}" for label in CPU_SHARE if label in details)
                  for index, details in zip(group.index, group["details"])}
        if len(set(shares.values())) > 1:
            for index, share in shares.items():
                summary.at[index, "flags"].append(
                    f"CPU share differs within this group: {share or 'not recorded'}")
    return summary


def _percent(value: float, decimals: int = 0) -> str:
    return f"{value * 100:.{decimals}f}%"


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
    """Group by group (GPUs, then CPUs; fp32 first); in each, best first; then ok rows without a
    headline figure; then unsupported / failed / timeout."""
    rank = summary["median"].notna().map({True: 0, False: 1})
    rank[summary["status"] != "ok"] = 2
    worse = summary["median"] if lower_is_better else -summary["median"]
    kind_order = summary["device_kind"].map(lambda kind: {GPU: 0, CPU: 1}.get(kind, 2 if kind else 3))
    precision_order = summary["precision"].map(
        lambda name: PRECISION_ORDER.index(name) if name in PRECISION_ORDER else len(PRECISION_ORDER))
    ordered = summary.assign(_rank=rank, _worse=worse, _kind=kind_order, _precision=precision_order).sort_values(
        ["profile", "data", "_kind", "device_model", "_precision", "precision", "_rank", "_worse", "framework",
         "variant", "options", "init"],
        na_position="last", kind="stable")
    return ordered.drop(columns=["_rank", "_worse", "_kind", "_precision"]).reset_index(drop=True)


def _text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
