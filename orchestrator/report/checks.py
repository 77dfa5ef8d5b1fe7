"""What the report flags on a row without keeping it out of the ranking: steps much slower than the
median step (with what the trace counts say of their cause), a compiled function traced more than
once, a framework's own initialisers, and rows of one group that had different shares of the machine.

What keeps a row out of the ranking is the gate's (gate.py, FAIRNESS.md: ranking-gate); these are
the row's ``flags``, shown in its Checks column.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from orchestrator.report.gate import ranked
from workloads.common.declaration import TRAINING, Workload
from workloads.common.result import FRAMEWORK_INIT

# The slow-step rule: a training step after the first that takes more than SLOW_STEP_FACTOR times the
# median step, and SLOW_STEP_EXTRA_S more than it (a step the host only queues for the GPU takes a
# fraction of a millisecond: a pause of a few milliseconds is not a recompilation). Each epoch's
# last step is left out: it carries the wait for the device.
SLOW_STEP_FACTOR = 10.0
SLOW_STEP_EXTRA_S = 0.05
CPU_SHARE = ("CPU affinity", "CPU quota")  # labels of orchestrator.report.frame.details


def slow_step_count(step_times, epoch_steps) -> tuple[int, float, float]:
    """(how many steps after the first took more than SLOW_STEP_FACTOR x the median step and
    SLOW_STEP_EXTRA_S more than it, the slowest of them, that median) in one training result. Each
    epoch's last step (it waits for the device) and the run's first step (compilation) are left out."""
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


def slow_steps(usable: pd.DataFrame, workload: Workload) -> dict:
    """The slow steps over a row's usable repeats: their count, the slowest and its repeat's median."""
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


def traces(usable: pd.DataFrame) -> dict[str, int]:
    """Each compiled function's largest trace count over the repeats."""
    counts: dict[str, int] = {}
    for recorded in usable["traces"]:
        for function, count in (recorded or {}).items():
            if isinstance(count, (int, float)) and not isinstance(count, bool):
                counts[str(function)] = max(counts.get(str(function), 0), int(count))
    return counts


def thread_flags(usable: pd.DataFrame) -> list[str]:
    """A row whose framework reports other thread counts than the run asked, or cannot set or report
    them (FAIRNESS.md: same-threads), each distinct problem over its repeats once."""
    return [f"threads: {problem}" for problem in sorted(set(usable["threads_problem"])) if problem]


def row_flags(init: str, slow: dict, traced: dict[str, int], threads: list[str] = ()) -> list[str]:
    """The flags of one row: its initialisers, slow steps, repeated traces and thread counts."""
    flags = list(threads)
    if init == FRAMEWORK_INIT:
        flags.append("init=framework: accuracy not from the same start (each framework's own initialisers)")
    if slow["count"]:
        flags.append(slow_step_flag(slow, traced))
    retraced = {function: count for function, count in sorted(traced.items()) if count > 1}
    if retraced:
        flags.append("traces: " + ", ".join(f"{function} {count}x" for function, count in retraced.items()))
    return flags


def slow_step_flag(slow: dict, traced: dict[str, int]) -> str:
    """The slow steps' figures, and what the row's trace counts say of their cause (FAIRNESS.md:
    per-step-times): a function traced again points to a retrace; every compiled function traced
    once rules one out (a stall of the host or the framework's threads, or work outside those
    functions, such as an eager op compiled on first use); with no count recorded (an eager row, or
    a framework that cannot count) it stays open."""
    figures = (f"slow steps: {slow['count']} step(s) over {SLOW_STEP_FACTOR:g}x the median step "
               f"(slowest {slow['slowest'] * 1000:.3g} ms, median {slow['median'] * 1000:.3g} ms)")
    if any(count > 1 for count in traced.values()):
        return f"{figures}; retrace/recompile suspected: a function was traced again"
    if traced:
        return f"{figures}; each compiled function traced once: not a retrace (a stall, or work outside them)"
    return f"{figures}; no trace count recorded: a recompilation or a stall"


def flag_unequal_cpus(summary: pd.DataFrame) -> pd.DataFrame:
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
