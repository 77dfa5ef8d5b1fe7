"""`report`: render (again) the Markdown and HTML report of a results directory."""
from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.commands._shared import console, left_out
from orchestrator.errors import UserError

HELP = "re-render the report of a results directory"
ORDER = 70


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path)


def main(args: argparse.Namespace) -> int:
    return left_out(render(args.results_dir).unreadable)


def render(results_dir: Path):
    """Write report.md, report.html and code.html into `results_dir`; returns what was written
    (report.WrittenReport: the pages' paths, and the cell files left out, each with why)."""
    from orchestrator import report

    if not Path(results_dir).is_dir():
        raise UserError(f"{results_dir} is not a results directory; pass the folder run-matrix wrote (results/<run-id>)")
    try:
        written = report.write_report(Path(results_dir))
    except OSError as error:  # a full disk, a folder where report.md belongs, a linked folder
        problem = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        raise UserError(f"cannot write the report ({problem}); the results in {Path(results_dir) / 'cells'} "
                        f"are kept: fix that, then run `python -m orchestrator report {results_dir}`") from None
    # the like-for-like steady-state ranking, as report.md shows it (from the same reading of the cells)
    console.print(written.ranking, markup=False, highlight=False)
    console.print(f"report: {written.markdown} and {written.html}; the implementations side by side, and the phrasebook: {written.code}")
    return written
