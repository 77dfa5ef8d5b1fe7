"""`run-matrix`: run the benchmark matrix (matrix.toml, narrowed by the command line) and render the report."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator import frameworks as framework_registry, matrix as matrix_module, numerals, telemetry
from orchestrator.backends import registry
from orchestrator.commands import common_args
from orchestrator.commands._shared import EXIT_CELLS_FAILED, console, left_out
from orchestrator.errors import UserError
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
                          init=args.init, options=args.option, seed=args.seed)
    return run_matrix(selection, common_args.backend_options(args), matrix_file=args.matrix,
                      results_dir=args.results_dir, data_dir=args.data_dir, timeout=args.timeout,
                      resume=args.resume, force=args.force, render_report=not args.no_report,
                      idle_window_s=args.idle_window)


def run_matrix(selection: Selection = Selection(), backend: registry.BackendOptions = registry.BackendOptions(), *,
               matrix_file: Path | None = None, results_dir: Path | None = None, data_dir: Path | None = None,
               timeout: float | None = None, resume: bool = False, force: bool = False,
               render_report: bool = True, idle_window_s: float = telemetry.IDLE_WINDOW_S) -> int:
    """Run the selected cells on the chosen backend; exit code 1 when a cell failed or timed out."""
    from orchestrator import run_folder, runner  # rich progress and the report are only needed here

    known = framework_registry.discover()
    matrix = matrix_module.load(matrix_file, known)
    matrix = matrix_module.narrow(matrix, known, names=selection.frameworks, variants=selection.variants,
                                  workloads=selection.workloads, precisions=selection.precisions,
                                  profile=selection.profile, data=selection.data, repeat=selection.repeat,
                                  init=selection.init, options=selection.options)
    cells = matrix.cells(known)
    if not cells:
        raise UserError("the matrix selects no cell: check --frameworks / --workloads / --variants "
                        "against `python -m orchestrator list`")
    if timeout is not None and timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout:g}")
    data_dir = common_args.data_folder(data_dir)  # before a backend starts or a folder is made
    engine = registry.start(backend, known, log=console.print)
    if results_dir is None:
        results_dir = run_folder.latest_results_dir() if resume else run_folder.new_results_dir()
    seed = selection.seed
    if seed is None and resume:
        seed = recorded_seed(results_dir)  # the remaining cells keep the order the run drew
    if seed is None:
        seed = matrix_module.new_seed()
    cells = matrix_module.run_order(cells, seed)
    console.print(f"{len(cells)} cell(s) ({matrix.profile} profile, {matrix.data} data, {matrix.repeats} repeat(s), "
                  f"{matrix.init} init, order seed {seed}) -> {results_dir}")
    summary = runner.run_cells(cells, engine, known, results_dir=results_dir, data_dir=data_dir,
                               resume=resume, force=force, timeout=timeout, console=console,
                               accelerator_types=matrix.accelerator_types(), idle_window_s=idle_window_s,
                               metadata={"matrix": matrix.source, "profile": matrix.profile, "data": matrix.data,
                                         "repeat": matrix.repeats, "init": matrix.init, "seed": seed,
                                         "options": {entry.name: entry.options for entry in matrix.frameworks
                                                     if entry.options},
                                         "argv": sys.argv[1:], "not_applicable": matrix.not_applicable(known)})
    left_out_code = 0
    if render_report:
        from orchestrator.commands.report import render

        left_out_code = left_out(render(results_dir).unreadable)
    failed = summary.count("failed") + summary.count("timeout")
    console.print(f"{summary.count('ok')} ok, {summary.count('unsupported')} unsupported, {failed} failed"
                  + (f", {summary.skipped} already done" if summary.skipped else ""))
    return EXIT_CELLS_FAILED if failed else left_out_code


def recorded_seed(results_dir: Path) -> int | None:
    """The order seed the latest invocation recorded in `results_dir`'s run.json, or None; a
    run.json that cannot be read is refused in one line (run_folder.read_run_record)."""
    from orchestrator import run_folder

    seeds = [item["seed"] for item in run_folder.read_run_record(Path(results_dir))["invocations"] if "seed" in item]
    return seeds[-1] if seeds else None
