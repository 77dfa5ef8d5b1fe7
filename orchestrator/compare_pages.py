"""`compare`'s pages and terminal table: one row per matched cell (orchestrator/compare.py judges
them), the cells that could not be compared with why, and the rules the verdicts follow."""
from __future__ import annotations

import math
import os
from pathlib import Path

from orchestrator.compare import (ALPHA, BETTER, BROKEN, COMPARE_HTML, COMPARE_MD, MANN_WHITNEY,
                                  MANN_WHITNEY_MIN, NOT_COMPARED, WELCH, WELCH_MIN, WORSE, Comparison, Side)
from orchestrator.report.formatting import format_fraction, formatter, missing
from workloads.common import declaration, safe_files
from workloads.common.declaration import HIGHER

TABLE_HEADERS = ["Cell", "Headline", "BASE median", "NEW median", "NEW/BASE", "Worse by", "Method", "p",
                 "Verdict", "Accuracy BASE", "Accuracy NEW", "Accuracy change", "Notes"]
# The terminal's table: what fits a line; the pages show every column.
TERMINAL_HEADERS = ["Cell", "BASE median", "NEW median", "Worse by", "Method", "p", "Verdict", "Accuracy change"]


def format_p(value: float) -> str:
    return "-" if missing(value) else (f"{value:.3f}" if value >= 0.001 else "<0.001")


def _side_text(side: Side, metric: declaration.Metric) -> str:
    return formatter(metric)(side.median) if side.usable else side.status


def table_rows(comparison: Comparison) -> list[dict]:
    """One dict per matched cell: ``cells`` as the table shows them (TABLE_HEADERS), and its verdicts."""
    rows = []
    for row in comparison.rows:
        compared = row.verdict not in (NOT_COMPARED, BROKEN)
        accuracy = row.accuracy_tolerance is not None
        change = "-"
        if not missing(row.accuracy_change):
            change = f"{row.accuracy_change * 100:+.1f} points" + (
                f" (more than the {row.accuracy_tolerance * 100:g} allowed)" if row.accuracy_verdict == WORSE else "")
        verdict = row.verdict + (" · accuracy worse" if row.accuracy_verdict == WORSE else "")
        rows.append({
            "worse": row.counts_as_worse,
            "css": "worse" if row.counts_as_worse else {BETTER: "better", NOT_COMPARED: "not-compared"}.get(row.verdict, ""),
            "cells": [
                row.name,
                row.metric.heading + (" (higher is better)" if row.metric.better == HIGHER else " (lower is better)"),
                _side_text(row.base, row.metric),
                _side_text(row.new, row.metric),
                f"{row.ratio:.3f}" if compared and not missing(row.ratio) else "-",
                f"{row.worse_by:.3f}x" if compared and math.isfinite(row.worse_by) else "-",
                row.method or "-",
                format_p(row.p_value),
                verdict,
                format_fraction(row.base.accuracy) if accuracy else "-",
                format_fraction(row.new.accuracy) if accuracy else "-",
                change,
                "; ".join(row.notes),
            ],
        })
    return rows


def rules(factor: float) -> list[str]:
    """What the verdicts mean, as compare.md and compare.html say it."""
    return [
        f"A cell is worse when NEW's median headline figure is more than {factor:g}x worse than BASE's "
        f"(--factor) and the change is significant (one-sided, p < {ALPHA:g}), or its median test accuracy "
        f"fell by more than the workload's declared tolerance, or it was ok in BASE and failed, timed out or "
        f"gave invalid figures in NEW.",
        f"Significance from the ok repeats: {MANN_WHITNEY} where both runs have at least {MANN_WHITNEY_MIN}; "
        f"{WELCH} where both have at least {WELCH_MIN} (with 3 against 3, {MANN_WHITNEY}'s smallest p-value is "
        f"0.05); the factor alone otherwise, or where neither run's repeats spread at all.",
        "Worse by: how many times worse NEW's median is than BASE's, whichever way the figure is better "
        "(1.25x: a quarter slower; below 1: faster). p: the one-sided p-value of the change in its direction "
        "(worse, or better for a row that got better).",
        "A cell without an ok repeat on either side is listed with its status, never compared as numbers.",
        "A cell is matched on the device it ran on too (kind and model): a cell only one run has on that device "
        "is listed with why (the other ran it elsewhere, or not at all); two runs from different devices are "
        "refused in one line, never compared.",
    ]


def page_context(comparison: Comparison) -> dict:
    rows = table_rows(comparison)
    return {
        "title": "Rosetta Bench compare",
        "base": str(comparison.base_dir),
        "new": str(comparison.new_dir),
        "factor": f"{comparison.factor:g}",
        "headers": TABLE_HEADERS,
        "rows": rows,
        "worse": len(comparison.worse),
        "compared": sum(row.verdict not in (NOT_COMPARED, BROKEN) for row in comparison.rows),
        "matched": len(comparison.rows),
        "only_base": comparison.only_base,
        "only_new": comparison.only_new,
        "unreadable": {side: count for side, count in comparison.unreadable.items() if count},
        "rules": rules(comparison.factor),
    }


def write_pages(comparison: Comparison, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write compare.md and compare.html into ``out_dir`` (atomically, never through a link)."""
    from orchestrator.report.pages import _environment  # the report's templates, with the same escaping

    target = Path(out_dir)
    context = page_context(comparison)
    environment = _environment()
    markdown = environment.get_template("compare.md.j2").render(context)
    html = environment.get_template("compare.html.j2").render(context)
    safe_files.make_folder(target)
    markdown_path, html_path = target / COMPARE_MD, target / COMPARE_HTML
    safe_files.write_text_atomic(markdown_path, markdown)
    safe_files.write_text_atomic(html_path, html)
    return markdown_path, html_path
