"""`check-pins`: can pip install each variant's pinned requirements on that variant's Python and base?"""
from __future__ import annotations

import argparse

from rich.markup import escape

from orchestrator.commands import common_args
from orchestrator.commands._shared import EXIT_CELLS_FAILED, console

HELP = ("are the pinned requirements installable on each variant's Python and base? (pip resolves them on this host; "
        "no image is built)")
ORDER = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser, variant_help="repeatable (default: all variants)")


def main(args: argparse.Namespace) -> int:
    return check_pins(frameworks=args.frameworks, variants=args.variants)


def check_pins(*, frameworks: list[str] | None = None, variants: list[str] | None = None) -> int:
    """pip finds every pin for each variant's Python and base, and the pins agree with each other."""
    from orchestrator import pins

    counts = {"ok": 0, "not installable": 0, "not checked": 0}
    for framework, variant in common_args.selected_variants(frameworks, variants or ["all"]):
        check = pins.check_variant(framework, variant)
        verdict = "ok" if check.ok else "not checked" if check.unchecked else "not installable"
        counts[verdict] += 1
        verdict = {"ok": "[green]ok[/green]", "not installable": "[red]not installable[/red]"}.get(verdict, verdict)
        console.print(f"{framework.name} {variant.name}: {verdict} ({check.pins} pins from {variant.requirements.name} "
                      f"for Python {check.python} on glibc {check.glibc[0]}.{check.glibc[1]})")
        for line in check.problems:
            console.print(f"  [red]problem:[/red] {escape(line)}")
        for line in check.warnings:
            console.print(f"  warning: {escape(line)}")
        if check.unchecked:
            console.print(f"  not checked: {escape(check.unchecked)}")
    console.print(", ".join(f"{count} {verdict}" for verdict, count in counts.items()))
    # an index out of reach proves nothing either way: only pins pip refused fail the command
    return EXIT_CELLS_FAILED if counts["not installable"] else 0
