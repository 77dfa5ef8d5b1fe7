"""Comparison tables: per workload, median / spread / relative-to-fastest, in Markdown and HTML.

``summarise`` turns the flat result frame into one row per (framework, variant, precision) for each
workload, the way hyperfine reports a command: median, min-max, and "relative" to the fastest.
``render`` writes ``report.md`` and a self-contained ``report.html`` (inline CSS and SVG charts, no
external resources) next to the results. A report never crashes on partial data: missing
workloads, cells that never succeeded, single repeats and absent metrics all render as "-".
"""
from __future__ import annotations

import datetime
import io
import json
import math
import os
from pathlib import Path
from typing import Callable

import jinja2
import matplotlib
import pandas as pd

from workloads.common import hyperparams
from matplotlib.figure import Figure

from orchestrator.results import PRIMARY_METRIC, load_reference, load_results, to_frame
from workloads.common.hyperparams import WORKLOADS
from workloads.common.result import SCHEMA_VERSION

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

WORKLOAD_TITLES = {
    "cnn": "CNN — CIFAR-10 training",
    "resnet50": "ResNet-50 — feature extraction (inference)",
    "gru": "GRU — IMDB sentiment training",
}
PRIMARY_LABELS = {"train_time_s": "train time (s)", "seconds_per_1000_images": "s / 1000 images"}
THROUGHPUT_METRIC = {"cnn": "samples_per_s", "resnet50": "images_per_s", "gru": "samples_per_s"}
# Inference has no warm-up step inside its timed pass, so "steady" applies to training only.
STEADY_METRIC = {"cnn": "steady_samples_per_s", "gru": "steady_samples_per_s"}
ACCURACY_WORKLOADS = {"cnn", "gru"}

# A row of the summary: the results of one configuration, whatever its repeat.
SUMMARY_KEY = ["framework", "variant", "precision", "profile", "data"]
# Relative-to-fastest only compares like with like: a smoke run is never "faster" than a full one.
COMPARABLE_KEY = ["profile", "data"]
SUMMARY_COLUMNS = SUMMARY_KEY + [
    "status", "note", "ok_repeats", "runs", "median_s", "min_s", "max_s", "relative_spread",
    "relative_to_fastest", "throughput", "steady_throughput", "test_accuracy", "parameter_count",
    "device", "gpu_name", "framework_version"]

REFERENCE_LABEL = ("Published reference (original study, 2018 — other hardware: K80/P100, CUDA 8/cuDNN 6; "
                   "not comparable to this host)")
REFERENCE_METRIC_LABELS = {"train_time": "s", "seconds_per_1000_images": "s / 1000 images"}
LONGEST_NOTE = 300  # characters; a stderr tail belongs in the JSON, not in a table cell


# --- summary --------------------------------------------------------------------------------------

def primary_metric(workload: str) -> str:
    return PRIMARY_METRIC.get(workload, "train_time_s")


def workload_order(workloads) -> list[str]:
    """The study's order first (cnn, resnet50, gru), then anything newer alphabetically."""
    present = set(workloads)
    return [name for name in WORKLOADS if name in present] + sorted(present - set(WORKLOADS))


def summarise(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per workload, one row per (framework, variant, precision[, profile, data]).

    Numbers come from the ``ok`` repeats only. A configuration without any ok repeat still gets a
    row, with its status and reason and no numbers. Rows are ordered fastest first, then the
    configurations without a time. ``attrs`` of each frame name the metrics used.
    """
    summaries = {}
    for workload in workload_order(frame["workload"].dropna().unique()):
        summaries[workload] = _summarise_workload(workload, frame[frame["workload"] == workload])
    return summaries


def _summarise_workload(workload: str, rows: pd.DataFrame) -> pd.DataFrame:
    metric = primary_metric(workload)
    throughput = THROUGHPUT_METRIC.get(workload, "samples_per_s")
    steady = STEADY_METRIC.get(workload)
    records = []
    for key, group in rows.groupby(SUMMARY_KEY, dropna=False, sort=True):
        ok = group[group["status"] == "ok"]
        times = ok[metric].dropna()
        record = dict(zip(SUMMARY_KEY, key))
        record.update(
            status=_overall_status(group),
            note=_note(group),
            ok_repeats=len(ok),
            runs=len(group),
            median_s=times.median() if len(times) else math.nan,
            min_s=times.min() if len(times) else math.nan,
            max_s=times.max() if len(times) else math.nan,
            relative_spread=_relative_spread(times),
            relative_to_fastest=math.nan,  # filled in once every median is known
            throughput=_median(ok, throughput),
            steady_throughput=_median(ok, steady),
            test_accuracy=_median(ok, "test_accuracy") if workload in ACCURACY_WORKLOADS else math.nan,
            parameter_count=_first(ok, "parameter_count"),
            device=_distinct(ok if len(ok) else group, "device"),
            gpu_name=_distinct(ok if len(ok) else group, "gpu_name"),
            framework_version=_distinct(ok if len(ok) else group, "framework_version"),
        )
        records.append(record)
    summary = pd.DataFrame(records, columns=SUMMARY_COLUMNS)
    summary["parameter_count"] = summary["parameter_count"].astype("Int64")
    summary = _add_relative_to_fastest(summary)
    summary = _order(summary)
    summary.attrs.update(workload=workload, primary_metric=metric, throughput_metric=throughput,
                         steady_metric=steady)
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


def _relative_spread(times: pd.Series) -> float:
    """(max - min) / median; undefined for a single repeat."""
    if len(times) < 2:
        return math.nan
    median = times.median()
    return (times.max() - times.min()) / median if median > 0 else math.nan


def _median(rows: pd.DataFrame, column: str | None) -> float:
    if column is None or rows.empty:
        return math.nan
    values = rows[column].dropna()
    return float(values.median()) if len(values) else math.nan


def _first(rows: pd.DataFrame, column: str):
    values = rows[column].dropna()
    return values.iloc[0] if len(values) else pd.NA


def _distinct(rows: pd.DataFrame, column: str) -> str:
    values = [str(value) for value in rows[column].dropna().unique() if str(value)]
    return ", ".join(values)


def _add_relative_to_fastest(summary: pd.DataFrame) -> pd.DataFrame:
    summary = summary.copy()
    for _, group in summary.groupby(COMPARABLE_KEY, dropna=False):
        fastest = group["median_s"].min()  # NaN medians (no ok repeat) are skipped
        if pd.notna(fastest) and fastest > 0:
            summary.loc[group.index, "relative_to_fastest"] = group["median_s"] / fastest
    return summary


def _order(summary: pd.DataFrame) -> pd.DataFrame:
    """Fastest first; then ok rows without a time; then unsupported / failed / timeout."""
    rank = summary["median_s"].notna().map({True: 0, False: 1})
    rank[summary["status"] != "ok"] = 2
    ordered = summary.assign(_rank=rank).sort_values(
        ["_rank"] + COMPARABLE_KEY + ["median_s", "framework", "variant", "precision"],
        na_position="last", kind="stable")
    return ordered.drop(columns="_rank").reset_index(drop=True)


# --- formatting -------------------------------------------------------------------------------------

def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def format_seconds(value) -> str:
    """Three significant figures, never scientific notation for ordinary timings."""
    if _missing(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_published(value) -> str:
    """A published figure exactly as printed in the study (148, 14.1), no invented precision."""
    return "-" if _missing(value) else f"{value:g}"


def format_rate(value) -> str:
    return "-" if _missing(value) else (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}")


def format_percent(value) -> str:
    if _missing(value):
        return "-"
    percent = value * 100
    return f"{percent:.1f}%" if abs(percent) < 10 else f"{percent:.0f}%"


def format_accuracy(value) -> str:
    return "-" if _missing(value) else f"{value * 100:.1f}%"


def format_relative(value) -> str:
    return "-" if _missing(value) else f"{value:.2f}x"


def format_count(value) -> str:
    return "-" if _missing(value) else f"{int(value):,}"


def _format_parameters(row, workload: str) -> str:
    """The count, flagged when it is not the reference model's: then it is not the same model."""
    count = row["parameter_count"]
    expected = hyperparams.settings(workload, "full").parameter_count
    if _missing(count) or int(count) == expected:
        return format_count(count)
    return f"{int(count):,} (differs from the reference {expected:,}: not the same model)"


def matched_sections(frame: pd.DataFrame) -> list[dict]:
    """Per framework, what its implementations had to match, as they record it themselves."""
    sections = []
    known = frame.dropna(subset=["matched"])
    for framework, rows in known.groupby("framework", sort=True):
        items = []
        for workload in workload_order(rows["workload"].unique()):
            text = rows[rows["workload"] == workload]["matched"].iloc[0]
            items.append({"workload": WORKLOAD_TITLES.get(workload, workload),
                          "points": [point.strip() for point in text.split(" | ") if point.strip()]})
        sections.append({"framework": framework, "workloads": items})
    return sections


def _format_range(row) -> str:
    if row["ok_repeats"] < 2 or _missing(row["min_s"]):
        return "-"
    return f"{format_seconds(row['min_s'])}–{format_seconds(row['max_s'])}"


def _format_repeats(row) -> str:
    return str(row["ok_repeats"]) if row["ok_repeats"] == row["runs"] else f"{row['ok_repeats']}/{row['runs']}"


def _format_device(row) -> str:
    device, gpu = row["device"] or "-", row["gpu_name"]
    return f"{device} ({gpu})" if gpu else device


def _format_status(row) -> str:
    if row["status"] == "ok":
        return f"ok; {row['note']}" if row["note"] else "ok"
    return row["note"] or row["status"]


# --- the tables the templates print -----------------------------------------------------------------

def result_table(summary: pd.DataFrame, workload: str, *, show_profile: bool) -> dict:
    """Headers and already formatted cells, so the Markdown and HTML tables cannot drift apart."""
    metric_label = PRIMARY_LABELS.get(primary_metric(workload), primary_metric(workload))
    rate_label = "images/s" if THROUGHPUT_METRIC.get(workload) == "images_per_s" else "samples/s"
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
        (f"Median {metric_label}", lambda row: format_seconds(row["median_s"]), True),
        ("Min–max", _format_range, True),
        ("Spread", lambda row: format_percent(row["relative_spread"]), True),
        ("Relative", lambda row: format_relative(row["relative_to_fastest"]), True),
        (rate_label.capitalize(), lambda row: format_rate(row["throughput"]), True),
    ]
    if workload in STEADY_METRIC:
        columns.append((f"Steady {rate_label}", lambda row: format_rate(row["steady_throughput"]), True))
    if workload in ACCURACY_WORKLOADS:
        columns.append(("Test accuracy", lambda row: format_accuracy(row["test_accuracy"]), True))
    columns += [
        ("Parameters", lambda row: _format_parameters(row, workload), True),
        ("Device", _format_device, False),
        ("Version", lambda row: row["framework_version"] or "-", False),
        ("Status", _format_status, False),
    ]
    rows = [{"ok": row["status"] == "ok", "cells": [str(render_cell(row)) for _, render_cell, _ in columns]}
            for _, row in summary.iterrows()]
    return {"headers": [header for header, _, _ in columns], "rows": rows,
            "numeric": [number for _, _, number in columns]}


def reference_table(reference: pd.DataFrame, workload: str) -> dict | None:
    """The study's numbers for one workload: a row per framework (and API), a column per GPU."""
    rows = reference[reference["workload"] == workload]
    if rows.empty:
        return None
    gpus = list(dict.fromkeys(rows["gpu"]))
    unit = REFERENCE_METRIC_LABELS.get(rows["metric"].iloc[0], rows["unit"].iloc[0])
    show_rnn = rows["uses_cudnn_rnn"].notna().any()
    table_rows = []
    for (framework, api), group in rows.groupby(["framework", "api"], sort=False):
        by_gpu = dict(zip(group["gpu"], group["value"]))
        cells = [f"{framework} ({api})" if api else framework]
        cells += [format_published(by_gpu.get(gpu)) for gpu in gpus]
        if show_rnn:
            cells.append(_distinct(group, "uses_cudnn_rnn") or "-")
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


def recorded_not_applicable(results_dir: Path) -> list[dict]:
    """The not-applicable pairs every run-matrix invocation into this folder recorded (run.json)."""
    try:
        invocations = json.loads((Path(results_dir) / "run.json").read_text()).get("invocations", [])
    except (OSError, ValueError, AttributeError):
        return []
    pairs = [item for invocation in invocations if isinstance(invocation, dict)
             for item in invocation.get("not_applicable") or [] if isinstance(item, dict)
             and {"framework", "workload"} <= set(item)]
    return pairs


# --- chart --------------------------------------------------------------------------------------------

def chart_svg(summary: pd.DataFrame, workload: str, *, show_profile: bool) -> str | None:
    """An inline SVG bar chart of the median primary metric with min-max error bars, or None.

    Built on a bare ``Figure`` (no pyplot), so no global backend or figure registry is touched.
    """
    timed = summary[(summary["status"] == "ok") & summary["median_s"].notna()]
    if timed.empty:
        return None
    labels = [" · ".join(str(row[name]) for name in (SUMMARY_KEY if show_profile else SUMMARY_KEY[:3]))
              for _, row in timed.iterrows()]
    medians = timed["median_s"].to_numpy(dtype=float)
    below = (timed["median_s"] - timed["min_s"]).fillna(0).clip(lower=0).to_numpy(dtype=float)
    above = (timed["max_s"] - timed["median_s"]).fillna(0).clip(lower=0).to_numpy(dtype=float)
    metric_label = PRIMARY_LABELS.get(primary_metric(workload), primary_metric(workload))

    figure = Figure(figsize=(7, 1.2 + 0.4 * len(timed)), layout="constrained")
    axes = figure.add_subplot()
    positions = list(range(len(timed)))
    axes.barh(positions, medians, xerr=[below, above], color="#4c78a8", ecolor="#333333", capsize=3)
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()  # fastest on top, as in the table
    # labels sit past the whisker's end so that they never overlap it
    for position, median, end, relative in zip(positions, medians, medians + above,
                                               timed["relative_to_fastest"]):
        axes.annotate(f"{format_seconds(median)} ({format_relative(relative)})", (end, position),
                      xytext=(6, 0), textcoords="offset points", va="center", fontsize=9)
    axes.set_xlabel(f"median {metric_label}, bars: min–max over repeats (lower is better)")
    axes.margins(x=0.25)
    axes.spines[["top", "right"]].set_visible(False)

    buffer = io.StringIO()
    # Real <text> elements (smaller, searchable); fixed ids and no date, so reports are reproducible;
    # no metadata, so the SVG carries no external URIs beyond its namespaces.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"rosetta-{workload}"}):
        figure.savefig(buffer, format="svg",
                       metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE, invalid inside HTML


# --- rendering ------------------------------------------------------------------------------------------

def _markdown_cell(text) -> str:
    """A table cell must stay on one line and must not close the cell early."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        # report.html.j2 is escaped; report.md.j2 is not (Markdown has no HTML escaping to do).
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "htm", "xml", "html.j2"),
                                            default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["md_cell"] = _markdown_cell
    return environment


def _distinct_values(frame: pd.DataFrame, *columns: str) -> str:
    values = []
    for column in columns:
        values += [str(value) for value in frame[column].dropna().unique() if str(value)]
    return ", ".join(dict.fromkeys(values)) or "-"


def run_metadata(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """What was seen across all results: where, with what, when."""
    started = frame["started_at"].dropna().sort_values()
    when = "-" if started.empty else (started.iloc[0] if started.iloc[0] == started.iloc[-1]
                                      else f"{started.iloc[0]} to {started.iloc[-1]}")
    counts = frame["status"].value_counts()
    statuses = ", ".join(f"{counts[name]} {name}" for name in counts.index)
    gpus = frame[frame["gpu_name"].notna()]
    gpu_text = ", ".join(dict.fromkeys(
        f"{name} (driver {driver})" if isinstance(driver, str) and driver else str(name)
        for name, driver in zip(gpus["gpu_name"], gpus["gpu_driver"]))) or "none seen"
    return [
        ("Git revision", _distinct_values(frame, "git_revision")),
        ("Hosts", _distinct_values(frame, "hostname")),
        ("GPUs", gpu_text),
        ("CPU model", _distinct_values(frame, "cpu_model")),
        ("Backend", _distinct_values(frame, "backend")),
        ("Profile", _distinct_values(frame, "profile")),
        ("Data", _distinct_values(frame, "data", "data_source")),
        ("Measured", when),
        ("Results", f"{len(frame)} ({statuses})"),
        ("Schema version", str(SCHEMA_VERSION)),
    ]


def build_context(frame: pd.DataFrame, reference: pd.DataFrame, not_applicable: list[dict] = ()) -> dict:
    """Everything both templates print; the SVG charts are only used by the HTML one.

    `not_applicable`: the (framework, workload) pairs the run asked for that a framework does not
    implement (run.json), each shown as a row with its reason."""
    summaries = summarise(frame)
    inapplicable = {}
    for item in not_applicable:
        inapplicable.setdefault(item["workload"], {}).setdefault(item["framework"], item)
    profiles = set(frame["profile"].dropna())
    show_profile = frame[COMPARABLE_KEY].drop_duplicates().shape[0] > 1
    sections = []
    for workload in workload_order(set(summaries) | set(inapplicable)):
        summary = summaries.get(workload, pd.DataFrame(columns=SUMMARY_COLUMNS))
        table = result_table(summary, workload, show_profile=show_profile)
        for framework, item in inapplicable.get(workload, {}).items():
            table["rows"].append(not_applicable_row(table["headers"], framework, item))
        sections.append({
            "workload": workload,
            "title": WORKLOAD_TITLES.get(workload, workload),
            "metric_label": PRIMARY_LABELS.get(primary_metric(workload), primary_metric(workload)),
            "table": table,
            "any_ok": bool((summary["status"] == "ok").any()),
            "only_not_applicable": summary.empty,
            "reference": reference_table(reference, workload),
            "chart_svg": chart_svg(summary, workload, show_profile=show_profile),
        })
    return {
        "title": "Rosetta Bench report",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "metadata": run_metadata(frame),
        "sections": sections,
        "matched": matched_sections(frame),
        "missing_workloads": [name for name in WORKLOADS if name not in summaries and name not in inapplicable],
        "reference_label": REFERENCE_LABEL,
        # The study ran the full settings; a smoke run's times are not even on the same scale.
        "not_full_profile": bool(profiles - {"full"}),
    }


def render(results_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Load ``results_dir/cells/*.json`` and write ``report.md`` and ``report.html``.

    The reports go into ``out_dir`` when given, else into ``results_dir``. Returns both paths.
    """
    results_dir = Path(results_dir)
    frame = to_frame(load_results(results_dir))
    context = build_context(frame, load_reference(), not_applicable=recorded_not_applicable(results_dir))
    target = Path(out_dir) if out_dir is not None else results_dir
    target.mkdir(parents=True, exist_ok=True)
    environment = _environment()
    markdown_path, html_path = target / "report.md", target / "report.html"
    markdown_path.write_text(environment.get_template("report.md.j2").render(context), encoding="utf-8")
    html_path.write_text(environment.get_template("report.html.j2").render(context), encoding="utf-8")
    return markdown_path, html_path
