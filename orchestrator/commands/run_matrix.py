"""`run-matrix`: run the benchmark matrix (matrix.toml, narrowed by the command line) and render the report."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends.options import BackendOptions
from orchestrator import frameworks as framework_registry, matrix as matrix_module, numerals, telemetry
from orchestrator.backends import registry
from orchestrator.commands import common_args
from orchestrator.commands._shared import EXIT_CELLS_FAILED, console, left_out
from orchestrator.errors import UserError
from orchestrator.run_settings import RunSettings
from workloads.common.hyperparams import DATA_SOURCES, PRECISIONS, PROFILES
from workloads.common.result import INITS

HELP = "run the benchmark matrix and render the report"
ORDER = 10


@dataclass(frozen=True)
class Selection:
    """What the command line narrows the matrix file to; None keeps the file's choice."""

    frameworks: list[str] | None = None
    variants: list[str] | None = None
    workloads: list[str] | None = None
    precisions: list[str] | None = None
    profile: str | None = None
    data: str | None = None
    repeat: int | None = None
    init: str | None = None
    options: list[str] | None = None  # NAME=VALUE[,VALUE...], as given
    modes: list[str] | None = None  # execution modes asked of every framework; None: each one's own
    seed: int | None = None  # the run order's; None: a fresh one (--resume: the run's own)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    common_args.add_cell_selection(parser, frameworks_help="comma-separated framework names (see `list`)")
    parser.add_argument("--variants", type=common_args.comma_list, help="comma-separated variants, e.g. cpu")
    parser.add_argument("--precisions", type=common_args.comma_list,
                        help=f"comma-separated: {','.join(PRECISIONS)}")
    parser.add_argument("--profile", choices=PROFILES, help="full = the study's settings; smoke = a few batches")
    parser.add_argument("--data", choices=DATA_SOURCES, help="real datasets or synthetic data of the same shapes")
    parser.add_argument("--repeat", type=common_args.repeat_count,
                        help=f"runs per cell (1 to {matrix_module.MAX_REPEAT}; default: the matrix file's, else "
                        f"{matrix_module.DEFAULT_REPEATS['full']} in the full profile and "
                        f"{matrix_module.DEFAULT_REPEATS['smoke']} in smoke): every cell runs once before any "
                        "runs again, in a shuffled order recorded in run.json")
    parser.add_argument("--seed", type=common_args.seed_number,
                        help="the seed of the shuffled cell order (default: a fresh one; with --resume the run's own)")
    common_args.add_cell_options(parser)
    parser.add_argument("--init", choices=INITS, help="how models start: canonical = the same weights in every "
                        "framework (default), framework = each framework's own initialisers")
    common_args.add_run_options(parser, results_dir_help="default: results/<run-id>/",
                                data_dir_help="dataset cache (default: $ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data)")
    parser.add_argument("--resume", action="store_true", help="skip cells already ok (default dir: the latest run)")
    parser.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    parser.add_argument("--no-parity", action="store_true",
                        help="skip the parity check (each framework, variant and options on the canonical weights, "
                        "outputs compared with PyTorch's, a few seconds a cell) that the report's ranking is gated "
                        "by; rows then say \"parity: not checked\"")
    parser.add_argument("--idle-window", type=idle_seconds, default=telemetry.IDLE_WINDOW_S, metavar="SECONDS",
                        help=f"idle power is measured over this window before each cell whose energy this host "
                        f"measures (default {telemetry.IDLE_WINDOW_S:g}; 0: no idle power, no net energy)")
    common_args.add_backend_options(parser)


LONGEST_IDLE_WINDOW_S = 60.0


def idle_seconds(value: str) -> float:
    """--idle-window: seconds, 0 to LONGEST_IDLE_WINDOW_S."""
    seconds = numerals.decimal_number(value)
    if seconds is None or not 0 <= seconds <= LONGEST_IDLE_WINDOW_S:
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to {LONGEST_IDLE_WINDOW_S:g}, "
                                         f"not {value!r:.40}")
    return seconds


def main(args: argparse.Namespace) -> int:
    selection = Selection(frameworks=args.frameworks, variants=args.variants, workloads=args.workloads,
                          precisions=args.precisions, profile=args.profile, data=args.data, repeat=args.repeat,
                          init=args.init, options=args.option, modes=args.modes, seed=args.seed)
    settings = RunSettings.from_args(args, resume=args.resume, render_report=not args.no_report,
                                     check_parity=not args.no_parity, idle_window_s=args.idle_window)
    return run_matrix(selection, common_args.backend_options(args), settings, matrix_file=args.matrix)


def run_matrix(selection: Selection = Selection(), backend: BackendOptions = BackendOptions(),
               settings: RunSettings = RunSettings(), *, matrix_file: Path | None = None) -> int:
    """Run the selected cells on the chosen backend; exit code 1 when a cell failed or timed out."""
    from orchestrator import run_folder, runner  # rich progress and the report are only needed here

    known = framework_registry.discover()
    matrix = matrix_module.load(matrix_file, known)
    matrix = matrix_module.narrow(matrix, known, names=selection.frameworks, variants=selection.variants,
                                  workloads=selection.workloads, precisions=selection.precisions,
                                  profile=selection.profile, data=selection.data, repeat=selection.repeat,
                                  init=selection.init, options=selection.options, modes=selection.modes)
    cells = matrix.cells(known)
    if not cells:
        raise UserError("the matrix selects no cell: check --frameworks / --workloads / --variants "
                        "against `python -m orchestrator list`")
    settings = settings.but(data_dir=common_args.data_folder(settings.data_dir))  # before a backend starts or a folder is made
    engine = registry.start(backend, known, log=console.print)
    results_dir = settings.results_dir or (run_folder.latest_results_dir() if settings.resume
                                           else run_folder.new_results_dir())
    seed = selection.seed
    if seed is None and settings.resume:
        seed = recorded_seed(results_dir)  # the remaining cells keep the order the run drew
    if seed is None:
        seed = matrix_module.new_seed()
    cells = matrix_module.run_order(cells, seed)
    console.print(f"{len(cells)} cell(s) ({matrix.profile} profile, {matrix.data} data, {matrix.repeats} repeat(s), "
                  f"{matrix.init} init, order seed {seed}) -> {results_dir}")
    settings = settings.but(
        results_dir=results_dir, accelerator_types=matrix.accelerator_types(),
        record={"matrix": matrix.source, "profile": matrix.profile, "data": matrix.data, "repeat": matrix.repeats,
                "init": matrix.init, "seed": seed, "threads": settings.threads,
                "options": {entry.name: entry.options for entry in matrix.frameworks if entry.options},
                "modes": {entry.name: matrix.modes_of(entry) for entry in matrix.frameworks},
                "argv": sys.argv[1:], "not_applicable": matrix.not_applicable(known)})
    summary = runner.run_cells(cells, engine, known, settings, console=console)
    if settings.check_parity:
        check_parity(cells, engine, known, settings)
    left_out_code = 0
    if settings.render_report:
        from orchestrator.commands.report import render

        left_out_code = left_out(render(results_dir).unreadable)
    failed = summary.count("failed") + summary.count("timeout")
    console.print(f"{summary.count('ok')} ok, {summary.count('unsupported')} unsupported, {failed} failed"
                  + (f", {summary.skipped} already done" if summary.skipped else ""))
    return EXIT_CELLS_FAILED if failed else left_out_code


def check_parity(cells: list, engine, known: dict, settings: RunSettings) -> None:
    """The parity check of the run's frameworks, variants and options (a forward pass and two
    optimizer steps each on the canonical weights) into the run folder's parity/ folder, a run
    folder of its own (orchestrator/run_folder.py); the report ranks no row that failed it
    (FAIRNESS.md: parity-gate). Its verdicts do not change the exit status: `parity` alone does."""
    from orchestrator import parity, run_folder
    from orchestrator.commands.parity import run_parity
    from orchestrator.errors import ClusterLost, Interrupted

    results_dir = Path(settings.results_dir)
    parity_cells = parity.cells_for(cells, {name: framework.default_variant for name, framework in known.items()})
    if not parity_cells:
        return
    try:
        comparisons = run_parity(parity_cells, engine, known, settings.but(results_dir=results_dir /
                                                                           run_folder.PARITY_FOLDER))
    except (Interrupted, ClusterLost) as error:  # resumed as the run it belongs to, not as a run of its own
        raise type(error)(f"{str(error).split(';')[0]} during the parity check; the finished cells are kept in "
                          f"{results_dir}; continue with: run-matrix --resume --results-dir {results_dir}") from None
    console.print(f"parity check: {parity.counts(comparisons)} -> "
                  f"{results_dir / run_folder.PARITY_FOLDER / parity.FILES[0]}", markup=False)


def recorded_seed(results_dir: Path) -> int | None:
    """The order seed the latest invocation recorded in `results_dir`'s run.json, or None; a
    run.json that cannot be read is refused in one line (run_folder.read_run_record)."""
    from orchestrator import run_folder

    seeds = [item["seed"] for item in run_folder.read_run_record(Path(results_dir))["invocations"] if "seed" in item]
    return seeds[-1] if seeds else None
