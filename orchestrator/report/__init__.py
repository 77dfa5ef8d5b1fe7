"""Comparison tables: per workload, median / spread / relative-to-best, in Markdown and HTML.

``summarise`` (summary.py) turns the flat result frame into one row per (framework, variant,
precision) for each workload, the way hyperfine reports a command: median, min-max, and "relative"
to the best. ``render`` (pages.py) writes ``report.md`` and a self-contained ``report.html`` (inline
CSS and SVG charts, no external resources) next to the results. A report never crashes on partial
data: missing workloads, cells that never succeeded, single repeats and absent metrics all render
as "-".

What a table shows for a workload comes from its declaration (`workloads/<workload>/__init__.py`):
its title, its headline metric (ranked: median, min-max, spread, relative), then one column per
other declared metric, each headed by its label and unit and formatted by its unit.

    summary.py     statistics per configuration, the ranking
    formatting.py  one figure or cell as text
    tables.py      the result, reference and not-applicable tables, "what had to be matched"
    chart.py       the SVG bar chart of the headline metric
    metadata.py    what the run recorded about itself (run.json, provenance)
    pages.py       the templates' context and writing report.md / report.html
"""
from orchestrator.report.pages import REFERENCE_LABEL, build_context, render
from orchestrator.report.summary import summarise, workload_order

__all__ = ["REFERENCE_LABEL", "build_context", "render", "summarise", "workload_order"]
