"""`list`: the frameworks this checkout has, with their variants, workloads and options."""
from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from orchestrator import frameworks as framework_registry, images
from workloads.common import options as framework_options

HELP = "frameworks, variants, workloads and options"
ORDER = 80


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="json: one object per image (framework, variant, device, tag), e.g. for a CI matrix")


def main(args: argparse.Namespace) -> int:
    if args.format == "json":
        print(json.dumps(list_images()))
    else:
        Console().print(list_frameworks())
    return 0


def list_images() -> list[dict]:
    """Every framework variant's image: what the release workflow's matrix runs over."""
    return [{"framework": name, "variant": variant.name, "device": variant.device,
             "tag": images.image_tag(framework, variant)}
            for name, framework in framework_registry.discover().items() for variant in framework.variants.values()]


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
