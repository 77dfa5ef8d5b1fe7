"""`list`: the frameworks this checkout has, one short line each; `list FRAMEWORK`: everything about one.

The table fits an 80-column terminal and a pipe: names are never cut, variants, workloads and
options are named, and the long notes go to `list FRAMEWORK` (or `list --verbose`, every
framework in full).
"""
from __future__ import annotations

import argparse
import json

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from orchestrator import frameworks as framework_registry, images
from orchestrator.errors import UserError
from workloads.common import modes as framework_modes, options as framework_options

HELP = "frameworks, variants, workloads, modes and options (list FRAMEWORK: everything about one)"
ORDER = 80
WIDTH = 80  # what the table is laid out for when the output is a pipe or a file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("framework", nargs="?", help="one framework: its variants, options and notes in full")
    parser.add_argument("--verbose", action="store_true", help="every framework in full, as `list FRAMEWORK` shows one")
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="json: one object per image (framework, variant, device, tag), e.g. for a CI matrix")


def main(args: argparse.Namespace) -> int:
    known = framework_registry.discover()
    if args.format == "json":
        print(json.dumps(list_images()))
        return 0
    console = Console(width=WIDTH) if not Console().is_terminal else Console()
    if args.framework:
        if args.framework not in known:
            raise UserError(f"no framework {args.framework!r}; choose from {', '.join(known)}")
        console.print(describe(args.framework, known[args.framework]))
    elif args.verbose:
        for name, framework in known.items():
            console.print(describe(name, framework))
            console.print()
    else:
        console.print(list_frameworks(known))
        console.print("`list FRAMEWORK` shows one framework in full (variants, options, notes); "
                      "`list --verbose` all of them.", highlight=False)
    return 0


def list_images() -> list[dict]:
    """Every framework variant's image: what the release workflow's matrix runs over."""
    return [{"framework": name, "variant": variant.name, "device": variant.device,
             "tag": images.image_tag(framework, variant)}
            for name, framework in framework_registry.discover().items() for variant in framework.variants.values()]


def list_frameworks(known: dict | None = None) -> Table:
    """One line per framework: its name (never cut) and language where it is not Python, its variants,
    workloads, execution modes (the default first) and option names."""
    known = known if known is not None else framework_registry.discover()
    table = Table(title="Frameworks (images/<name>/ + workloads/<workload>/<name>.py)", box=box.SIMPLE_HEAD,
                  title_justify="left", pad_edge=False)
    # a name is never cut: each column is at least as wide as its longest single name
    longest = {"workloads": max(len(" ".join(f.workloads)) for f in known.values()),
               "options": max((len(option) for n in known for option in framework_options.declared(n)), default=1),
               "variants": max(len(variant) for f in known.values() for variant in f.variants)}
    table.add_column("framework", no_wrap=True, style="bold")
    table.add_column("variants", min_width=longest["variants"])
    table.add_column("workloads", no_wrap=True, min_width=longest["workloads"])
    table.add_column("modes", min_width=max(len(mode) for mode in framework_modes.KINDS))
    table.add_column("options", min_width=longest["options"], no_wrap=True)
    for name, framework in known.items():
        language = "" if framework.language is framework_registry.PYTHON else f" ({framework.language.name})"
        table.add_row(name + language, " ".join(framework.variants),
                      " ".join(framework.workloads) or "-", " ".join(framework_modes.declared(name)) or "-",
                      " ".join(framework_options.declared(name)) or "-")
    return table


def describe(name: str, framework) -> Group:
    """Everything `list` knows about one framework."""
    heading = Text.assemble((name, "bold"), f": {framework.display_name} ({framework.language.name})")
    variants = [Text("variants:")]
    for variant in framework.variants.values():
        device = f"{variant.device} {variant.cuda}" if variant.cuda else variant.device
        default = " (default)" if variant.name == framework.default_variant else ""
        facts = [device, f"Python {variant.python or framework.python or '-'}",
                 f"base {variant.base_image or '-'}"] + ([f"GPUs {variant.gpus}"] if variant.gpus else [])
        variants.append(Text(f"  {variant.name}{default}: {'; '.join(facts)}"))
    parts = [heading, *variants, Text(f"workloads: {', '.join(framework.workloads) or '-'}")]
    parts.append(Text("modes (--modes; the first is the default):"))
    parts += [Text(f"  {mode.name}: {mode.meaning}") for mode in framework_modes.declared(name).values()] or [
        Text("  - (none declared in workloads/common/modes.py)")]
    declared = framework_options.declared(name)
    if declared:
        parts.append(Text("options (--option NAME=VALUE):"))
        parts += [Text(f"  {option.name}: {'|'.join(option.values)} (default {option.default}): {option.help}")
                  for option in declared.values()]
    if framework.notes:
        parts.append(Text.from_markup(f"notes: {escape(framework.notes)}"))
    return Group(*parts)


def describe_options(framework: str) -> str:
    """"channels_last: off|on (default off)", one line per option the framework declares; "-" for none."""
    return "\n".join(f"{option.name}: {'|'.join(option.values)} (default {option.default})"
                     for option in framework_options.declared(framework).values()) or "-"
