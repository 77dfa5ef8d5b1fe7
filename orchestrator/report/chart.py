"""An inline SVG bar chart of one group's headline metric: median per row, min-max whiskers."""
from __future__ import annotations

import io
import re

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from orchestrator.report.formatting import format_relative, formatter
from orchestrator.report.gate import ranked
from workloads.common.declaration import Workload


def chart_svg(summary: pd.DataFrame, workload: Workload, *, chart_id: str) -> str | None:
    """The chart of one group's rows as an ``<svg>`` element, or None when none is ranked.

    ``chart_id`` prefixes every id inside the SVG, so that several charts in one page never share
    an id (the page stays valid HTML, and a clip path never refers to another chart's).

    Built on a bare ``Figure`` (no pyplot), so no global backend or figure registry is touched.
    Labels come from results (framework and variant names): mathtext is off, so that a `$` in one
    is a dollar sign, never a formula for matplotlib to parse (or fail on).
    """
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        svg = _chart_svg(summary, workload, chart_id=chart_id)
    return None if svg is None else prefixed_ids(svg, chart_id)


def _chart_svg(summary: pd.DataFrame, workload: Workload, *, chart_id: str) -> str | None:
    timed = summary[ranked(summary)]
    if timed.empty:
        return None
    headline = workload.headline_metric
    write = formatter(headline)
    labels = [f"{row['row_name']} · {row['variant']}" for _, row in timed.iterrows()]
    medians = timed["median"].to_numpy(dtype=float)
    below = (timed["median"] - timed["min"]).fillna(0).clip(lower=0).to_numpy(dtype=float)
    above = (timed["max"] - timed["median"]).fillna(0).clip(lower=0).to_numpy(dtype=float)

    figure = Figure(figsize=(7, 1.2 + 0.4 * len(timed)), layout="constrained")
    axes = figure.add_subplot()
    positions = list(range(len(timed)))
    axes.barh(positions, medians, xerr=[below, above], color="#4c78a8", ecolor="#333333", capsize=3)
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()  # best on top, as in the table
    # labels sit past the whisker's end so that they never overlap it
    for position, median, end, relative in zip(positions, medians, medians + above, timed["relative_to_best"]):
        axes.annotate(f"{write(median)} ({format_relative(relative)})", (end, position),
                      xytext=(6, 0), textcoords="offset points", va="center", fontsize=9)
    axes.set_xlabel(f"median {headline.heading}, bars: min–max over repeats ({headline.better} is better)")
    axes.margins(x=0.25)
    axes.spines[["top", "right"]].set_visible(False)

    return figure_svg(figure, chart_id)


def figure_svg(figure: Figure, chart_id: str) -> str:
    """A figure as an ``<svg>`` element for inline HTML (its ids not yet prefixed)."""
    buffer = io.StringIO()
    # Real <text> elements (smaller, searchable); fixed ids and no date, so reports are reproducible;
    # no metadata, so the SVG carries no external URIs beyond its namespaces.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"rosetta-{chart_id}"}):
        figure.savefig(buffer, format="svg",
                       metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML declaration and DOCTYPE, invalid inside HTML


_ID = re.compile(r'\bid="([^"]+)"')


def prefixed_ids(svg: str, prefix: str) -> str:
    """Every ``id`` in the SVG and every reference to one (``url(#id)``, ``href="#id"``) prefixed."""
    ids = set(_ID.findall(svg))
    if not ids:
        return svg
    svg = _ID.sub(lambda match: f'id="{prefix}-{match.group(1)}"', svg)
    pattern = re.compile(r'(url\(#|href="#)(' + "|".join(map(re.escape, sorted(ids, key=len, reverse=True)))
                         + r')(?=[)"])')
    return pattern.sub(lambda match: f"{match.group(1)}{prefix}-{match.group(2)}", svg)
