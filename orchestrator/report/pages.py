"""The pages: the context the templates print, and writing report.md, report.html and code.html.

The templates live in orchestrator/templates/ (package data): report.md.j2, report.html.j2 (the
report), ranking.md.j2 (its ranking alone, for a terminal) and code.html.j2 (the Rosetta view).
The cell files are read once per report: one context serves every page and the terminal's text.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path

import jinja2
import pandas as pd

from orchestrator.report import ceiling
from orchestrator.report.chart import chart_svg
from orchestrator.report.code_view import code_context
from orchestrator.report.energy import energy_section
from orchestrator.report.formatting import LONGEST_LINE, markdown_cell
from orchestrator.report.frame import report_frame
from orchestrator.report.gate import NO_PARITY_RUN, ParityRecord
from orchestrator.report.grid import grids
from orchestrator.report.languages import overhead_table
from orchestrator.report.parity_verdicts import run_record
from orchestrator.report.metadata import recorded_invocations, recorded_not_applicable, recorded_order, run_metadata
from orchestrator.report.steps import step_plot
from orchestrator.report.summary import empty_summary, notes, summarise, undeclared, workload_order
from orchestrator.report.sweep import sweep_tables
from orchestrator.report.tables import (details_list, group_tables, matched_sections, not_ranked_table, not_run_lists,
                                        ranking_tables, reference_table)
from orchestrator.results import Unreadable, load_cells, load_reference
from orchestrator.run_folder import CODE_PAGE  # the Rosetta view, written beside report.html and linked from it
from workloads.common import declaration, safe_files
from workloads.common.declaration import TRAINING

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"

CEILING_NOTE = ("Every ranked row's achieved FLOP/s (its headline rate times the FLOPs per sample counted from the "
                "model: forward and backward for training, forward for ResNet-50), against the dense peak of its "
                "device in the precision it ran (a black tick): a GPU's from its datasheet, a CPU's measured by this "
                "run's probe (run.json); beside each bar its % of peak, or \"peak unknown\". Log scale.")
REFERENCE_LABEL = ("Published reference (original study, 2018 — other hardware: K80/P100, CUDA 8/cuDNN 6; "
                   "not comparable to this host)")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        # report.html.j2 is escaped by Jinja; report.md.j2 escapes every string from a result
        # itself, with md_cell (HTML and Markdown syntax alike, autolinks, the length of a cell).
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "htm", "xml", "html.j2"),
                                            default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters["md_cell"] = markdown_cell
    environment.globals["longest_line"] = LONGEST_LINE  # md_cell(longest_line): a list's line, not a table cell
    return environment


def build_context(frame: pd.DataFrame, reference: pd.DataFrame, not_applicable: list[dict] = (),
                  unreadable: list[Unreadable] = (), invocations: list[dict] = (), *, charts: bool = True,
                  variant_order: dict[str, list[str]] | None = None, parity: ParityRecord | None = None) -> dict:
    """Everything the report's templates print; the SVG charts and step plots only by the HTML one.

    `frame`: orchestrator.report.frame.report_frame's (plain to_frame's works too, without the
    checks and details that need the raw results). `not_applicable`: the (framework, workload)
    pairs the run asked for that a framework does not implement (run.json), listed by reason with
    the unsupported cells. `unreadable`: the cell files that could not be used, each listed with
    its reason. `invocations`: run.json's records, for the cell order they may record. `charts`:
    draw the SVG charts and step plots (only the HTML page shows them). `variant_order`: each
    framework's variants in declared order (the sweep view's "first variant"). `parity`: the run's
    parity verdicts (orchestrator.parity.run_record), None for a run without a parity check."""
    summaries = summarise(frame, parity)
    not_applicable = list(not_applicable)
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
            groups.append({"label": group["label"], "anchor": anchor, "table": group["table"], "note": group["note"],
                           "chart_svg": chart_svg(group["rows"], workload, chart_id=f"chart-{anchor}") if charts
                           else None})
        not_ranked = not_ranked_table(summary, workload)
        not_run = int((summary["status"] == "unsupported").sum()) + len(inapplicable.get(name, {}))
        ranking.append({
            "workload": name,
            "title": workload.title,
            "metric_label": headline.heading,
            "better": headline.better,
            "groups": ranking_tables(summary, workload),
            "not_ranked": len(not_ranked["rows"]),
            "not_run": not_run,
        })
        details = details_list(summary)
        for item in details:
            plot = step_plot(item["step_series"], training=workload.kind == TRAINING) if charts else None
            item["steps_svg"], item["steps_caption"] = (plot["svg"], plot["caption"]) if plot else (None, None)
        sections.append({
            "workload": name,
            "title": workload.title,
            "metric_label": headline.heading,
            "better": headline.better,
            "groups": groups,
            "not_ranked": not_ranked if not_ranked["rows"] else None,
            "not_run": not_run,
            "any_ok": bool((summary["status"] == "ok").any()),
            "only_not_applicable": summary.empty,
            "reference": reference_table(reference, workload),
            "details": details,
        })
    metadata = run_metadata(frame) + recorded_order(list(invocations)) + ceiling.probe_metadata(list(invocations))
    metadata.append(("Parity check", parity.summary if parity is not None else NO_PARITY_RUN))
    unknown = undeclared(frame["workload"].dropna().unique())
    if unknown:
        metadata.append(("Not shown", f"results of undeclared workload(s) {', '.join(unknown)}"))
    return {
        "title": "Rosetta Bench report",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "metadata": metadata,
        "unreadable": [{"file": item.path.name, "reason": item.reason} for item in unreadable],
        "grids": grids(summaries, not_applicable),
        "ranking": ranking,
        "sweeps": sweep_tables(summaries, variant_order),
        "not_run": not_run_lists(summaries, not_applicable),
        "sections": sections,
        "notes": notes(),
        # a row in another language over another row's engine (r-keras over keras-tf), against it
        "language_overhead": overhead_table(summaries),
        "matched": matched_sections(frame),
        "energy": energy_section(frame, summaries, charts=charts),
        "ceiling_chart": ceiling.chart_svg(summaries) if charts else None,
        "ceiling_note": CEILING_NOTE,
        "missing_workloads": [name for name in declaration.declared()
                              if name not in summaries and name not in inapplicable],
        "reference_label": REFERENCE_LABEL,
        # The study ran the full settings; a smoke run's times are not even on the same scale.
        "not_full_profile": bool(profiles - {"full"}),
        "code_page": CODE_PAGE,
        # code.html's context (code_view.code_context) needs these; kept out of the templates' way
        "_summaries": summaries,
        "_frame": frame,
    }


@dataclasses.dataclass
class WrittenReport:
    """What ``write_report`` wrote (its three pages), and the ranking as text for a terminal."""

    markdown: Path
    html: Path
    code: Path
    ranking: str
    unreadable: list[Unreadable] = dataclasses.field(default_factory=list)  # the cell files left out, with why


def _context(results_dir: Path, *, charts: bool = True) -> dict:
    loaded = load_cells(results_dir)
    invocations = recorded_invocations(results_dir)
    frame = report_frame(loaded.results, ceiling.cpu_peaks(invocations))
    context = build_context(frame, load_reference(), not_applicable=recorded_not_applicable(results_dir),
                            unreadable=loaded.unreadable, invocations=invocations, charts=charts,
                            variant_order=_variant_order(), parity=run_record(results_dir))
    context["_unreadable"] = loaded.unreadable
    return context


def _variant_order() -> dict[str, list[str]]:
    """Each registered framework's variants in the order its metadata.toml declares them; nothing
    for a checkout whose images/ cannot be read (the sweep view then orders variants by name)."""
    from orchestrator import frameworks
    from orchestrator.errors import UserError

    try:
        return {name: list(framework.variants) for name, framework in frameworks.discover().items()}
    except (OSError, UserError):
        return {}


def ranking_text(results_dir: str | os.PathLike) -> str:
    """The report's first screen as Markdown text, for a terminal: the like-for-like steady-state
    ranking of ``results_dir``, one table per group, fastest first (what report.md opens with after
    its grid). ``write_report`` returns the same text without reading the cells again."""
    return _ranking(_context(Path(results_dir), charts=False))


def _ranking(context: dict) -> str:
    return _environment().get_template("ranking.md.j2").render(context)


def write_report(results_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None) -> WrittenReport:
    """Load ``results_dir/cells/*.json`` once and write ``report.md``, ``report.html`` and the
    Rosetta view ``code.html`` (into ``out_dir`` when given, else into ``results_dir``); returns
    their paths and the ranking as terminal text."""
    results_dir = Path(results_dir)
    context = _context(results_dir)
    target = Path(out_dir) if out_dir is not None else results_dir
    safe_files.make_folder(target)
    environment = _environment()
    markdown_path, html_path, code_path = target / "report.md", target / "report.html", target / CODE_PAGE
    code = code_context(context["_summaries"], context["_frame"])
    code.update(title=f"{context['title']}: the implementations side by side", generated_at=context["generated_at"],
                metadata=context["metadata"])
    # every page rendered before any is written; each written atomically, never through a link, so
    # a full disk leaves the previous report (or none), never a truncated one
    pages = {html_path: environment.get_template("report.html.j2").render(context),
             markdown_path: environment.get_template("report.md.j2").render(context),
             code_path: environment.get_template("code.html.j2").render(code)}
    for path, text in pages.items():
        safe_files.write_text_atomic(path, text)
    return WrittenReport(markdown_path, html_path, code_path, ranking=_ranking(context),
                         unreadable=context["_unreadable"])


def render(results_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Write the report (``write_report``) and return the paths of ``report.md`` and ``report.html``."""
    written = write_report(results_dir, out_dir=out_dir)
    return written.markdown, written.html
