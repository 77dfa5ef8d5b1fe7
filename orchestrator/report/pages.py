"""The two pages: the context both templates print, and writing report.md and report.html.

The templates live in orchestrator/templates/ (package data): report.md.j2 and report.html.j2.
"""
from __future__ import annotations

import datetime
import os
from pathlib import Path

import jinja2
import pandas as pd

from orchestrator.report.chart import chart_svg
from orchestrator.report.formatting import markdown_cell
from orchestrator.report.frame import report_frame
from orchestrator.report.languages import overhead_table
from orchestrator.report.metadata import recorded_invocations, recorded_not_applicable, recorded_order, run_metadata
from orchestrator.report.summary import empty_summary, notes, summarise, undeclared, workload_order
from orchestrator.report.tables import (details_list, group_tables, matched_sections, not_applicable_row,
                                        not_ranked_table, ranking_tables, reference_table)
from orchestrator.results import Unreadable, load_cells, load_reference
from workloads.common import declaration, safe_files

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"

REFERENCE_LABEL = ("Published reference (original study, 2018 — other hardware: K80/P100, CUDA 8/cuDNN 6; "
                   "not comparable to this host)")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        # report.html.j2 is escaped by Jinja; report.md.j2 escapes every string from a result
        # itself, with md_cell (HTML and Markdown syntax alike).
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "htm", "xml", "html.j2"),
                                            default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["md_cell"] = markdown_cell
    return environment


def build_context(frame: pd.DataFrame, reference: pd.DataFrame, not_applicable: list[dict] = (),
                  unreadable: list[Unreadable] = (), invocations: list[dict] = (), *, charts: bool = True) -> dict:
    """Everything both templates print; the SVG charts are only used by the HTML one.

    `frame`: orchestrator.report.frame.report_frame's (plain to_frame's works too, without the
    checks and details that need the raw results). `not_applicable`: the (framework, workload)
    pairs the run asked for that a framework does not implement (run.json), each shown as a row
    with its reason. `unreadable`: the cell files that could not be used, each listed with its
    reason. `invocations`: run.json's records, for the cell order they may record. `charts`: draw
    the SVG charts (only the HTML page shows them)."""
    summaries = summarise(frame)
    inapplicable = {}
    for item in not_applicable:
        inapplicable.setdefault(item["workload"], {}).setdefault(item["framework"], item)
    profiles = set(frame["profile"].dropna())
    ranking, sections = [], []
    for name in workload_order(set(summaries) | set(inapplicable)):
        workload = declaration.get(name)
        summary = summaries.get(name, empty_summary(workload))
        headline = workload.headline_metric
        groups = []
        for number, group in enumerate(group_tables(summary, workload), start=1):
            anchor = f"{name}-group-{number}"
            groups.append({"label": group["label"], "anchor": anchor, "table": group["table"],
                           "chart_svg": chart_svg(group["rows"], workload, chart_id=f"chart-{anchor}") if charts
                           else None})
        not_ranked = not_ranked_table(summary, workload)
        for framework, item in inapplicable.get(name, {}).items():
            not_ranked["rows"].append(not_applicable_row(not_ranked["headers"], framework, item))
        ranking.append({
            "workload": name,
            "title": workload.title,
            "metric_label": headline.heading,
            "better": headline.better,
            "groups": ranking_tables(summary, workload),
            "not_ranked": len(not_ranked["rows"]),
        })
        sections.append({
            "workload": name,
            "title": workload.title,
            "metric_label": headline.heading,
            "better": headline.better,
            "groups": groups,
            "not_ranked": not_ranked if not_ranked["rows"] else None,
            "any_ok": bool((summary["status"] == "ok").any()),
            "only_not_applicable": summary.empty,
            "reference": reference_table(reference, workload),
            "details": details_list(summary),
        })
    metadata = run_metadata(frame) + recorded_order(list(invocations))
    unknown = undeclared(frame["workload"].dropna().unique())
    if unknown:
        metadata.append(("Not shown", f"results of undeclared workload(s) {', '.join(unknown)}"))
    return {
        "title": "Rosetta Bench report",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "metadata": metadata,
        "unreadable": [{"file": item.path.name, "reason": item.reason} for item in unreadable],
        "ranking": ranking,
        "sections": sections,
        "notes": notes(),
        # a row in another language over another row's engine (r-keras over keras-tf), against it
        "language_overhead": overhead_table(summaries),
        "matched": matched_sections(frame),
        "missing_workloads": [name for name in declaration.declared()
                              if name not in summaries and name not in inapplicable],
        "reference_label": REFERENCE_LABEL,
        # The study ran the full settings; a smoke run's times are not even on the same scale.
        "not_full_profile": bool(profiles - {"full"}),
    }


def _context(results_dir: Path, *, charts: bool = True) -> dict:
    loaded = load_cells(results_dir)
    frame = report_frame(loaded.results)
    invocations = recorded_invocations(results_dir)
    return build_context(frame, load_reference(), not_applicable=recorded_not_applicable(results_dir),
                         unreadable=loaded.unreadable, invocations=invocations, charts=charts)


def ranking_text(results_dir: str | os.PathLike) -> str:
    """The report's first screen as Markdown text, for a terminal: the like-for-like steady-state
    ranking of ``results_dir``, one table per group, fastest first (what report.md opens with)."""
    context = _context(Path(results_dir), charts=False)
    return _environment().get_template("ranking.md.j2").render(context)


def render(results_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Load ``results_dir/cells/*.json`` and write ``report.md`` and ``report.html``.

    The reports go into ``out_dir`` when given, else into ``results_dir``. Returns both paths.
    """
    results_dir = Path(results_dir)
    context = _context(results_dir)
    target = Path(out_dir) if out_dir is not None else results_dir
    safe_files.make_folder(target)
    environment = _environment()
    markdown_path, html_path = target / "report.md", target / "report.html"
    # both rendered before either is written; each written atomically, never through a link, so a
    # full disk leaves the previous report (or none), never a truncated one
    markdown = environment.get_template("report.md.j2").render(context)
    html = environment.get_template("report.html.j2").render(context)
    safe_files.write_text_atomic(markdown_path, markdown)
    safe_files.write_text_atomic(html_path, html)
    return markdown_path, html_path
