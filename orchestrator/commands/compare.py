"""`compare`: did NEW get slower than BASE? Per cell both runs have, the headline figure's and the
accuracy's change, with significance from the raw repeats (orchestrator/compare.py); writes
compare.md and compare.html and exits 1 when a cell got significantly worse (usable in CI)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator import numerals
from orchestrator.commands._shared import EXIT_CELLS_FAILED, console, left_out
from orchestrator.errors import UserError

HELP = "compare two runs cell by cell: exit 1 when NEW got significantly worse than BASE"
ORDER = 72  # after report: it reads two runs' results

# A CI log has no width of its own: wide enough that a row stays on one line there.
LOG_WIDTH = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from orchestrator.compare import DEFAULT_FACTOR

    parser.add_argument("base", type=Path, metavar="BASE", help="the run folder to compare against (results/<run-id>)")
    parser.add_argument("new", type=Path, metavar="NEW", help="the run folder that may have got slower")
    parser.add_argument("--factor", type=factor_number, default=DEFAULT_FACTOR,
                        help=f"how many times worse a cell's median must be to count, if the change is also "
                        f"significant; at least 1 (default: {DEFAULT_FACTOR:g})")
    parser.add_argument("--out", type=Path, help="folder for compare.md and compare.html (default: NEW)")


def factor_number(value: str) -> float:
    """--factor: a finite number of at least 1 (below 1, an unchanged cell would count as worse)."""
    factor = numerals.decimal_number(value)
    if factor is None or factor < 1:
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 1, e.g. 1.1 (more than 10% worse "
                                         f"counts), not {value!r:.40}")
    return factor


def main(args: argparse.Namespace) -> int:
    return run_compare(args.base, args.new, factor=args.factor, out_dir=args.out)


def run_compare(base: Path, new: Path, *, factor: float, out_dir: Path | None = None) -> int:
    """Compare, print the table, write the pages; 1 when a cell got worse, else 0."""
    from orchestrator import compare, compare_pages

    comparison = compare.compare(base, new, factor)
    target = Path(out_dir) if out_dir is not None else Path(new)
    try:
        markdown, html = compare_pages.write_pages(comparison, target)
    except OSError as error:  # a file where the folder belongs, a linked folder, a full disk
        problem = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        raise UserError(f"cannot write compare.md and compare.html into {target} ({problem}); pass --out DIR "
                        f"on a writable disk") from None
    _print_table(comparison)
    for side, cells in (("BASE", comparison.only_base), ("NEW", comparison.only_new)):
        if cells:
            console.print(f"only in {side} ({len(cells)}): " + "; ".join(
                f"{cell['name']} ({cell['status']}; {cell['why']})" for cell in cells), markup=False)
    worse = comparison.worse
    console.print(f"{len(worse)} of {len(comparison.rows)} matched cells worse (factor {comparison.factor:g}); "
                  f"compare: {markdown} and {html}", markup=False)
    return EXIT_CELLS_FAILED if worse else left_out(comparison.left_out)


def _print_table(comparison) -> None:
    from orchestrator.compare_pages import TABLE_HEADERS, TERMINAL_HEADERS, table_rows

    shown = [TABLE_HEADERS.index(header) for header in TERMINAL_HEADERS]
    table = Table(*TERMINAL_HEADERS, title="BASE → NEW (every column and note: compare.md)", title_justify="left")
    for row in table_rows(comparison):
        # Text, not markup: a framework's or option's name in brackets is not a style
        table.add_row(*(Text(row["cells"][index]) for index in shown), style="bold red" if row["worse"] else None)
    Console(highlight=False, width=None if sys.stdout.isatty() else LOG_WIDTH).print(table)
