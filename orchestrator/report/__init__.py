"""Comparison tables: per workload, median / spread / relative-to-best, in Markdown and HTML.

``summarise`` (summary.py) turns the flat result frame into one row per (framework, variant,
non-default options, init) in each like-for-like group (profile, data, device kind and model,
precision) of each workload, the way hyperfine reports a command: median, min-max, and "relative"
to the group's best, for the rows every check let through (gate.py). ``write_report`` (pages.py)
writes ``report.md`` and a self-contained ``report.html`` (inline CSS and SVG charts, no external
resources) next to the results, and the Rosetta view ``code.html`` beside them. Both reports open with a framework x workload grid of the
headline figure per device and precision, then the like-for-like ranking, one table per group,
fastest first; then the sweep view (a framework's variants and precisions side by side) and the
cells that could not run, one list per reason.
A report never crashes on partial data: missing workloads, cells that never succeeded, single
repeats and absent metrics all render as "-".

What a table shows for a workload comes from its declaration (`workloads/<workload>/__init__.py`):
its title, its headline metric (ranked: median, min-max, spread, relative), then one column per
other declared metric, each headed by its label and unit and formatted by its unit.

    frame.py       to_frame plus what only the report reads (init, options, GRU kernel, step times, details)
    groups.py      the like-for-like groups and the rows in them (GROUP_KEY); rows' names: orchestrator/row_names.py
    summary.py     statistics per row and the ranking, of the rows the gate lets through
    gate.py        the ranking gate: every check's verdict per row (repeats, parameters, accuracy, parity)
    parity_verdicts.py  a run's parity verdicts, from its parity/ folder's cells
    checks.py      the flags that do not gate: slow steps, traces, initialisers, CPU shares
    formatting.py  one figure or cell as text
    grid.py        the first screen: framework x workload grids, coloured by relative speed
    sweep.py       one framework's variants and precisions side by side, with the versions it saw
    tables.py      the ranking, result, not-ranked, reference and details tables, the not-run lists,
                   "what had to be matched"
    chart.py       the SVG bar chart of a group's headline metric
    ceiling.py     each row's FLOP/s against its device's peak (% of peak), and its chart
    energy.py      the energy columns, a table and throughput-vs-energy chart per workload and group
    steps.py       the small SVG plot of a row's per-step times (warm-up and compilation visible)
    code_view.py   code.html: each workload's implementations side by side, sections aligned
    metadata.py    what the run recorded about itself (run.json, provenance)
    pages.py       the templates' context and writing report.md / report.html / code.html
"""
from orchestrator.report.frame import report_frame
from orchestrator.report.pages import REFERENCE_LABEL, WrittenReport, build_context, ranking_text, render, write_report
from orchestrator.report.summary import summarise, workload_order

__all__ = ["REFERENCE_LABEL", "WrittenReport", "build_context", "ranking_text", "render", "report_frame", "summarise",
           "workload_order", "write_report"]
