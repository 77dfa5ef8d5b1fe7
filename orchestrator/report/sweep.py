"""The sweep view: one framework run in several variants (CUDA versions) or precisions, side by side.

For each framework (and how it ran: options, init) on one device model, profile and data, that
has more than one (variant, precision) in a workload: one table of them, with the headline
figure, its speed against the framework's first variant (same precision) and against fp32 (same
variant), and the CUDA, cuDNN and driver versions the framework saw in each row, so that a CUDA,
driver or precision effect reads at a glance. "Speed" is always "times as fast": above 1 is
faster, whichever direction the metric's better.
"""
from __future__ import annotations

import math
import re

import pandas as pd

from orchestrator.report.formatting import formatter, missing
from orchestrator.report.groups import PRECISION_ORDER, device_label
from orchestrator.report.tables import table_row
from workloads.common import declaration
from workloads.common.declaration import LOWER

REFERENCE_PRECISION = "fp32"
SWEEP_KEY = ["profile", "data", "device_kind", "device_model", "framework", "options", "init", "row_name"]


def sweep_tables(summaries: dict[str, pd.DataFrame], variant_order: dict[str, list[str]] | None = None) -> list[dict]:
    """Per workload (declared order), per framework and device with several variants or precisions:
    {"workload", "title", "label", "table"}. ``variant_order``: each framework's variants in their
    declared order (images/<framework>/metadata.toml), which says which is "first"; a variant it
    does not list comes after, in natural order (cuda11 before cuda12)."""
    variant_order = variant_order or {}
    tables = []
    for workload_name, summary in summaries.items():
        workload = declaration.get(workload_name)
        if summary.empty:
            continue
        for key, rows in summary.groupby(SWEEP_KEY, sort=False, dropna=False):
            ran = rows[rows["status"] != "unsupported"]  # an unsupported pair is shown, but is no sweep alone
            if len(ran[["variant", "precision"]].drop_duplicates()) < 2:
                continue
            record = dict(zip(SWEEP_KEY, key))
            declared = variant_order.get(record["framework"], [])
            rows = rows.assign(_variant=rows["variant"].map(lambda name: _variant_key(name, declared)),
                               _precision=rows["precision"].map(_precision_key))
            rows = rows.sort_values(["_variant", "_precision"], kind="stable")
            device = (f"{device_label(record['device_kind'], record['device_model'])} · {record['profile']} profile"
                      f" · {record['data']} data")
            tables.append({"workload": workload_name, "title": workload.title,
                           "label": f"{record['row_name']} on {device}",
                           "table": _table(rows, workload)})
    return tables


def speed_ratio(value, reference, lower_is_better: bool) -> float:
    """How many times as fast ``value`` is as ``reference`` (NaN when either is missing)."""
    if missing(value) or missing(reference) or value <= 0 or reference <= 0:
        return math.nan
    return reference / value if lower_is_better else value / reference


def _table(rows: pd.DataFrame, workload: declaration.Workload) -> dict:
    headline = workload.headline_metric
    write = formatter(headline)
    lower = headline.better == LOWER
    ok = rows[(rows["status"] == "ok") & rows["median"].notna()]
    first_variant = rows["variant"].iloc[0]
    by_pair = {(variant, precision): median for variant, precision, median
               in zip(ok["variant"], ok["precision"], ok["median"])}
    headers = ["Variant", "Precision", "Repeats", f"Median {headline.heading}", f"Speed vs {first_variant}",
               f"Speed vs {REFERENCE_PRECISION}", "CUDA (as the framework saw it)", "cuDNN", "Driver",
               "Framework version", "Status"]
    numeric = [False, False, True, True, True, True, False, False, False, False, False]
    table_rows = []
    for _, row in rows.iterrows():
        usable = row["status"] == "ok" and not missing(row["median"])
        median = row["median"] if usable else math.nan
        versus_first = speed_ratio(median, by_pair.get((first_variant, row["precision"])), lower)
        versus_fp32 = speed_ratio(median, by_pair.get((row["variant"], REFERENCE_PRECISION)), lower)
        status = "ok" if row["status"] == "ok" and not row["note"] else (row["note"] or row["status"])
        cells = [row["variant"], row["precision"],
                 str(row["ok_repeats"]) if row["ok_repeats"] == row["runs"] else f"{row['ok_repeats']}/{row['runs']}",
                 write(median), _ratio(versus_first), _ratio(versus_fp32),
                 row["cuda_version"] or "-", row["cudnn_version"] or "-", row["gpu_driver"] or "-",
                 row["framework_version"] or "-", status]
        table_rows.append(table_row([str(cell) for cell in cells], ok=row["status"] == "ok",
                                    flagged=bool(row["flags"])))
    return {"headers": headers, "rows": table_rows, "numeric": numeric}


def _ratio(value: float) -> str:
    return "-" if missing(value) else f"{value:.2f}x"


def _variant_key(name: str, declared: list[str]) -> tuple:
    if name in declared:
        return (0, declared.index(name), ())
    return (1, 0, tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                        for part in re.split(r"(\d+)", str(name)) if part))


def _precision_key(name: str) -> int:
    return PRECISION_ORDER.index(name) if name in PRECISION_ORDER else len(PRECISION_ORDER)
