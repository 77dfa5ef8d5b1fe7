"""`phrasebook`: each concept of the Rosetta phrasebook in every framework, from the marked code.

`phrasebook [CONCEPT ...] [--frameworks a,b]` prints the snippets in the terminal, highlighted and
wrapped to its width (80 columns in a pipe); `--markdown FILE` writes the whole phrasebook as
Markdown (docs/PHRASEBOOK.md is that page; tests/test_phrasebook.py keeps it current).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from orchestrator.commands.common_args import comma_list
from orchestrator.errors import UserError

HELP = "each concept (a 3x3 'same' convolution, Adam, seeding...) as every framework writes it"
ORDER = 76  # after export: it reads the workloads, not a run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("concepts", nargs="*", metavar="CONCEPT", help="default: every concept")
    parser.add_argument("--frameworks", type=comma_list, help="comma-separated; default: every framework")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="write the whole phrasebook as Markdown (docs/PHRASEBOOK.md)")


def main(args: argparse.Namespace) -> int:
    from orchestrator import phrasebook
    from orchestrator.phrasebook import render

    book = phrasebook.build()
    if args.markdown is not None:
        if args.concepts or args.frameworks:
            raise UserError("--markdown writes the whole phrasebook: drop the concepts and --frameworks")
        write_markdown(book, args.markdown)
        return 0
    # the terminal's width; in a pipe or a file, COLUMNS or else 80 (rich's own rule)
    render.terminal(render.select(book, args.concepts, args.frameworks), Console(highlight=False))
    return 0


def write_markdown(book, path: Path) -> None:
    """Write the Markdown page atomically (never through a link); a folder that is missing or
    unwritable is a UserError naming the path."""
    from orchestrator.phrasebook import render
    from workloads.common import safe_files

    try:
        safe_files.write_text_atomic(path, render.markdown(book))
    except OSError as error:
        raise UserError(f"cannot write {path} ({error.strerror or error}); pass a file in a folder that exists") from None
    print(f"phrasebook: {path}")
