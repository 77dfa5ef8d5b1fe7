"""`list`: the frameworks this checkout has, with their variants and workloads."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from orchestrator import frameworks as framework_registry

HELP = "frameworks, variants and workloads"
ORDER = 80


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def main(args: argparse.Namespace) -> int:
    Console().print(list_frameworks())
    return 0


def list_frameworks() -> Table:
    table = Table(title="Frameworks (images/<name>/ + workloads/<workload>/<name>.py)")
    for column in ("framework", "name", "variants (device)", "workloads", "notes"):
        table.add_column(column)
    for name, framework in framework_registry.discover().items():
        variants = ", ".join(f"{v.name} ({v.device}{' ' + v.cuda if v.cuda else ''})" for v in framework.variants.values())
        table.add_row(name, framework.display_name, variants, ", ".join(framework.workloads) or "-", framework.notes)
    return table
