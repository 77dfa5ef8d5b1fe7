"""`list`: the frameworks this checkout has, with their variants, workloads and options."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from orchestrator import frameworks as framework_registry
from workloads.common import options as framework_options

HELP = "frameworks, variants, workloads and options"
ORDER = 80


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options."""


def main(args: argparse.Namespace) -> int:
    Console().print(list_frameworks())
    return 0


def list_frameworks() -> Table:
    table = Table(title="Frameworks (images/<name>/ + workloads/<workload>/<name>.py)")
    for column in ("framework", "name", "variants (device)", "workloads", "options (--option NAME=VALUE)", "notes"):
        table.add_column(column)
    for name, framework in framework_registry.discover().items():
        variants = ", ".join(f"{v.name} ({v.device}{' ' + v.cuda if v.cuda else ''})" for v in framework.variants.values())
        table.add_row(name, framework.display_name, variants, ", ".join(framework.workloads) or "-",
                      describe_options(name), framework.notes)
    return table


def describe_options(framework: str) -> str:
    """"xla: off|on (default off)", one line per option the framework declares; "-" for none."""
    return "\n".join(f"{option.name}: {'|'.join(option.values)} (default {option.default})"
                     for option in framework_options.declared(framework).values()) or "-"
