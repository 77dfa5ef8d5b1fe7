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
from orchestrator.report.metadata import recorded_not_applicable, run_metadata
from orchestrator.report.summary import COMPARABLE_KEY, empty_summary, summarise, undeclared, workload_order
from orchestrator.report.tables import matched_sections, not_applicable_row, reference_table, result_table
from orchestrator.results import Unreadable, load_cells, load_reference, to_frame
from workloads.common import declaration, safe_files
from workloads.common.declaration import LOWER

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
                  unreadable: list[Unreadable] = ()) -> dict:
    """Everything both templates print; the SVG charts are only used by the HTML one.

    `not_applicable`: the (framework, workload) pairs the run asked for that a framework does not
    implement (run.json), each shown as a row with its reason. `unreadable`: the cell files that
    could not be used, each listed with its reason."""
    summaries = summarise(frame)
    inapplicable = {}
    for item in not_applicable:
        inapplicable.setdefault(item["workload"], {}).setdefault(item["framework"], item)
    profiles = set(frame["profile"].dropna())
    show_profile = frame[COMPARABLE_KEY].drop_duplicates().shape[0] > 1
    sections = []
    for name in workload_order(set(summaries) | set(inapplicable)):
        workload = declaration.get(name)
        summary = summaries.get(name, empty_summary(workload))
        table = result_table(summary, workload, show_profile=show_profile)
        for framework, item in inapplicable.get(name, {}).items():
            table["rows"].append(not_applicable_row(table["headers"], framework, item))
        sections.append({
            "workload": name,
            "title": workload.title,
            "metric_label": workload.headline_metric.heading,
            "better": workload.headline_metric.better,
            "table": table,
            "any_ok": bool((summary["status"] == "ok").any()),
            "only_not_applicable": summary.empty,
            "reference": reference_table(reference, workload),
            "chart_svg": chart_svg(summary, workload, show_profile=show_profile),
        })
    metadata = run_metadata(frame)
    unknown = undeclared(frame["workload"].dropna().unique())
    if unknown:
        metadata.append(("Not shown", f"results of undeclared workload(s) {', '.join(unknown)}"))
    return {
        "title": "Rosetta Bench report",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "metadata": metadata,
        "unreadable": [{"file": item.path.name, "reason": item.reason} for item in unreadable],
        "sections": sections,
        "matched": matched_sections(frame),
        "missing_workloads": [name for name in declaration.declared()
                              if name not in summaries and name not in inapplicable],
        # whether every table ranks lower-is-better figures (times), as the pages' introduction says
        "all_lower_is_better": all(section["better"] == LOWER for section in sections),
        "reference_label": REFERENCE_LABEL,
        # The study ran the full settings; a smoke run's times are not even on the same scale.
        "not_full_profile": bool(profiles - {"full"}),
    }


def render(results_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Load ``results_dir/cells/*.json`` and write ``report.md`` and ``report.html``.

    The reports go into ``out_dir`` when given, else into ``results_dir``. Returns both paths.
    """
    results_dir = Path(results_dir)
    loaded = load_cells(results_dir)
    frame = to_frame(loaded.results)
    context = build_context(frame, load_reference(), not_applicable=recorded_not_applicable(results_dir),
                            unreadable=loaded.unreadable)
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
