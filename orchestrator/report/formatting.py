"""One figure or cell as text: "-" for anything missing, never scientific notation for timings.

A declared metric is formatted by its unit (``formatter``): seconds to three significant figures,
a fraction as a percentage, any rate as a whole number once it reaches 100.
"""
from __future__ import annotations

import math
import re
from typing import Callable

import pandas as pd

from workloads.common.declaration import Metric


def missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def format_seconds(value) -> str:
    """Three significant figures, never scientific notation for ordinary timings."""
    if missing(value):
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
    return "-" if missing(value) else f"{value:g}"


def format_rate(value) -> str:
    return "-" if missing(value) else (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}")


def format_percent(value) -> str:
    if missing(value):
        return "-"
    percent = value * 100
    return f"{percent:.1f}%" if abs(percent) < 10 else f"{percent:.0f}%"


def format_fraction(value) -> str:
    """A fraction such as a test accuracy, as a percentage with one decimal."""
    return "-" if missing(value) else f"{value * 100:.1f}%"


def format_relative(value) -> str:
    return "-" if missing(value) else f"{value:.2f}x"


def format_count(value) -> str:
    return "-" if missing(value) else f"{int(value):,}"


def formatter(metric: Metric) -> Callable[[object], str]:
    """How a declared metric's figures are written, chosen by its unit."""
    if metric.unit == "s":
        return format_seconds
    if not metric.unit:
        return format_fraction
    return format_rate


def column_heading(metric: Metric) -> str:
    """A metric's column heading: its label with its unit, capitalised ("Steady samples/s")."""
    heading = metric.heading
    return heading[:1].upper() + heading[1:]


def unit_heading(metric: Metric) -> str:
    """What one figure of the metric is measured in: "s", or a label that names its unit
    ("s / 1000 images")."""
    return metric.label if metric.heading == metric.label and metric.unit else metric.unit


# The Markdown pages are read on GitHub and in editors, and their strings come from cells, which are
# untrusted (docs/RUN-GUARANTEES.md, the trust model): none of them may become markup, a live link
# or a cell without end.
#
# Characters that would make text from a result into HTML (<script>, &entities;, a <...> autolink)
# or Markdown syntax (a link, emphasis, code, a table cell's end): HTML's as entities, the rest
# backslash-escaped, which CommonMark allows for any ASCII punctuation. An "@" is followed by a word
# joiner (invisible, no line break): GitHub finds a bare e-mail address in the text as rendered,
# after escapes, and only a character that is not part of an address stops it.
WORD_JOINER = "\u2060"
_MARKDOWN_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "@" + WORD_JOINER,
                                   **{mark: "\\" + mark for mark in "\\`*_[]|"}})
# Where GitHub's extended autolinks start, found in the source: "scheme://", "www.", "mailto:" and
# "xmpp:". An escaped ":" or "." starts none, and reads the same.
_AUTOLINK_MARKS = re.compile(r"(?i):(?=//)|(?<=mailto):|(?<=xmpp):|(?<=www)\.")
LONGEST_CELL = 300  # characters a reader sees in one table cell or heading, the ellipsis included
LONGEST_LINE = 2000  # ... in one line of a list (the run's metadata, a row's details, the notes)
ELLIPSIS = "…"


def markdown_cell(text, limit: int | None = LONGEST_CELL) -> str:
    """Text from a result, safe in a Markdown table cell or line: on one line, at most `limit`
    characters as a reader sees them (cut with an ellipsis), HTML and Markdown syntax escaped (a `|`
    cannot close the cell, `<script>` stays text) and no autolink live (a URL, "www.", an e-mail
    address reads as text). The one escaping of every Markdown page: report, ranking and compare."""
    text = " ".join(str(text).split())
    if limit is not None and len(text) > limit:
        text = text[:limit - len(ELLIPSIS)] + ELLIPSIS  # cut before escaping: no escape is cut in two
    return _AUTOLINK_MARKS.sub(lambda mark: "\\" + mark.group(), text.translate(_MARKDOWN_ESCAPES))
