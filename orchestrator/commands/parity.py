"""`parity`: every framework runs the same model on the canonical weights; its outputs are compared with PyTorch's."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.backends.options import BackendOptions
from orchestrator import frameworks as framework_registry, matrix as matrix_module
from orchestrator.backends import registry
from orchestrator.commands import common_args
from orchestrator.commands._shared import EXIT_CELLS_FAILED, console
from orchestrator.run_settings import RunSettings
from workloads.common import data as datasets
from workloads.common.hyperparams import WORKLOADS

HELP = "prove every framework runs the same model: canonical weights, outputs compared"
ORDER = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_cell_selection(parser, frameworks_help="comma-separated (default: all; pytorch, the reference, "
                                   "always runs)")
    common_args.add_cell_options(parser)  # no --init: parity always starts from the canonical weights
    common_args.add_run_options(parser, results_dir_help="default: results/parity-<run-id>/",
                                data_dir_help="where the canonical files are written (default: the data cache)")
    common_args.add_backend_options(parser)


def main(args: argparse.Namespace) -> int:
    return parity_check(common_args.backend_options(args), RunSettings.from_args(args),
                        frameworks=args.frameworks, workloads=args.workloads, options=args.option,
                        modes=args.modes)


def parity_check(backend: BackendOptions = BackendOptions(), settings: RunSettings = RunSettings(), *,
                 frameworks: list[str] | None = None, workloads: list[str] | None = None,
                 options: list[str] | None = None, modes: list[str] | None = None) -> int:
    """Run every framework on the canonical weights and compare its outputs with PyTorch's.

    `options` (--option NAME=VALUE[,VALUE]) go to every selected framework that declares them, one
    cell per value; `modes` (--modes) are the execution modes every framework runs (default: each
    one's own: parity holds in every mode). The reference always runs with its defaults and in its
    default mode too, so that an option or mode of its own is compared with the plain reference."""
    from orchestrator import parity, run_folder
    from workloads.common import modes as framework_modes
    from workloads.common.result import Cell

    known = framework_registry.discover()
    names = frameworks or list(known)
    matrix_module.check_names(names, list(known), "frameworks", "command line")
    workloads = matrix_module.check_names(workloads or list(WORKLOADS), WORKLOADS, "workloads", "command line")
    selection = matrix_module.narrow(
        matrix_module.Matrix(profile="full", data="synthetic", repeat=1,
                             frameworks=[matrix_module.FrameworkEntry(name, [known[name].default_variant])
                                         for name in names]), known, options=options, modes=modes)
    option_sets = {entry.name: entry.option_sets() for entry in selection.frameworks}
    option_sets[parity.REFERENCE] = [{}] + [chosen for chosen in option_sets.get(parity.REFERENCE, []) if chosen]
    mode_lists = {entry.name: selection.modes_of(entry) for entry in selection.frameworks}
    plain = framework_modes.default(parity.REFERENCE)
    mode_lists[parity.REFERENCE] = [plain] + [mode for mode in mode_lists.get(parity.REFERENCE, []) if mode != plain]
    names = [parity.REFERENCE] + [name for name in names if name != parity.REFERENCE]  # the reference always runs
    cells = [Cell(name, workload, variant=known[name].default_variant, precision="fp32", profile="full",
                  data="synthetic", options=dict(chosen), mode=mode)
             for workload in workloads for name in names if workload in known[name].workloads
             for mode in mode_lists[name] for chosen in option_sets[name]]
    settings = settings.but(data_dir=common_args.data_folder(settings.data_dir))  # before the backend starts
    engine = registry.start(backend, known, log=console.print)
    results_dir = settings.results_dir or run_folder.new_results_dir(prefix=run_folder.PARITY_PREFIX)
    comparisons = run_parity(cells, engine, known, settings.but(results_dir=results_dir))
    Console(width=200).print(_table(comparisons))
    console.print(f"parity table: {results_dir / 'parity.md'}")
    return EXIT_CELLS_FAILED if parity.failures(comparisons) else 0  # an unsupported cell fails nothing


def run_parity(cells: list, engine, known: dict, settings: RunSettings) -> list:
    """Run the parity `cells` into `settings.results_dir` (a run folder of their own), compare
    their outputs with the reference's and write parity.md and parity.json there; `parity` and
    run-matrix's parity check (FAIRNESS.md: parity-gate) both run it."""
    from orchestrator import parity, run_folder, runner

    data_dir = Path(settings.data_dir) if settings.data_dir else datasets.default_data_dir()
    parity.write_canonical(data_dir, list(dict.fromkeys(cell.workload for cell in cells)))
    results_dir = Path(settings.results_dir)
    console.print(f"parity: {len(cells)} cell(s) on canonical weights -> {results_dir}")
    settings = settings.but(data_dir=data_dir, parity=True, record={"mode": run_folder.MODE_PARITY})
    summary = runner.run_cells(cells, engine, known, settings, console=console)
    comparisons = parity.compare(summary.results)
    try:  # atomically, never through a link
        parity.write_files(comparisons, results_dir)
    except OSError as error:
        raise run_folder.write_failed(Path(error.filename or results_dir), error, results_dir,
                                      then="free space, then run parity again") from None
    return comparisons


def _table(comparisons: list) -> Table:
    from orchestrator import parity

    table = Table(title=f"Parity against {parity.REFERENCE} (max |a - b| / max |ref| <= "
                        f"{parity.canonical.PARITY_TOLERANCE:.0e})")
    for column in ("workload", "framework", "variant", "parameters", "output", "max abs", "max rel", "result"):
        table.add_column(column)
    for item in comparisons:
        for name, difference in (item.differences.items() or [("-", None)]):
            table.add_row(item.workload, escape(item.framework), escape(item.variant),
                          f"{item.parameter_count:,}" if item.parameter_count else "-",
                          name, f"{difference[0]:.1e}" if difference else "-",
                          f"{difference[1]:.1e}" if difference else "-",
                          escape(item.status + (f": {item.note}" if item.note else "")))
    return table
