"""What a language adds: a row written in another language over another row's engine, against it.

A framework whose metadata.toml runs it in another language on another framework's Python
environment (`[language]` and `environment`: r-keras is R over keras-tf's Keras 3 and TensorFlow)
runs the same engine, the same step and the same loops as that framework: the difference between
the two rows in one group is what the language and its bridge add. One line per such pair and
group: both medians of the workload's headline metric and the difference in time per unit of work
(a throughput's inverse, or the time itself), positive when the language is slower.
"""
from __future__ import annotations

import math

import pandas as pd

from orchestrator.frameworks import discover
from orchestrator.report.formatting import format_percent, formatter
from orchestrator.report.gate import ranked
from workloads.common import declaration
from workloads.common.declaration import LOWER

HEADERS = ["Workload", "Group", "Language row", "Engine row", "Language median", "Engine median",
           "Time added by the language"]


def language_pairs() -> dict[str, tuple[str, str]]:
    """Language row -> (its language, the Python row whose engine and environment it shares)."""
    return {framework.name: (framework.language.name, framework.environment)
            for framework in discover().values()
            if framework.environment and framework.language.program}


def overhead_rows(summaries: dict[str, pd.DataFrame], pairs: dict[str, tuple[str, str]]) -> list[dict]:
    """One line per (workload, group, variant, options, init) where both rows of a pair are ranked."""
    lines = []
    for name, summary in summaries.items():
        if summary.empty:
            continue
        workload = declaration.get(name)
        metric = workload.headline_metric
        usable = summary[ranked(summary)]
        for language_row, (language, engine) in sorted(pairs.items()):
            for _, row in usable[usable["framework"] == language_row].iterrows():
                match = usable[(usable["framework"] == engine) & (usable["group"] == row["group"])
                               & (usable["variant"] == row["variant"]) & (usable["options"] == row["options"])
                               & (usable["init"] == row["init"])]
                if match.empty:
                    continue
                engine_median, language_median = float(match.iloc[0]["median"]), float(row["median"])
                lines.append({
                    "workload": workload.title,
                    "group": row["group_label"],
                    "language": language,
                    "language_row": row["row_name"],
                    "engine_row": match.iloc[0]["row_name"],
                    "language_median": language_median,
                    "engine_median": engine_median,
                    "metric": metric,
                    "added": time_added(language_median, engine_median, lower_is_better=metric.better == LOWER),
                })
    return lines


def time_added(language: float, engine: float, *, lower_is_better: bool) -> float:
    """The language row's time per unit of work over the engine row's, minus one: 0.05 = 5 % slower."""
    if not (language > 0 and engine > 0):
        return math.nan
    return language / engine - 1.0 if lower_is_better else engine / language - 1.0


def overhead_table(summaries: dict[str, pd.DataFrame], pairs: dict[str, tuple[str, str]] | None = None) -> dict | None:
    """The report's table (headers, rows of formatted cells), or None when no pair ran side by side."""
    lines = overhead_rows(summaries, language_pairs() if pairs is None else pairs)
    if not lines:
        return None
    rows = [{"css": "", "cells": [line["workload"], line["group"], line["language_row"], line["engine_row"],
                       f"{formatter(line['metric'])(line['language_median'])} {line['metric'].heading}",
                       f"{formatter(line['metric'])(line['engine_median'])} {line['metric'].heading}",
                       ("+" if line["added"] > 0 else "") + format_percent(line["added"])]}
            for line in lines]
    return {"headers": HEADERS, "numeric": [False, False, False, False, True, True, True], "rows": rows}
