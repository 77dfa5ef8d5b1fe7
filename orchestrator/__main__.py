"""Rosetta Bench command line: `python -m orchestrator <command> ...`.

Arguments are parsed here and handed to plain functions that do the work (tests call those).
Expected failures raise UserError, caught once in `main`: one line naming the fix, exit 2.
"""
from __future__ import annotations

import argparse
import os
import platform
import signal
import sys
import traceback
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator import __version__, frameworks as framework_registry, host
from orchestrator import images, matrix as matrix_module
from orchestrator.backends import BACKENDS
from orchestrator.backends.local import LocalBackend, READY_MARKER, default_cache_dir
from orchestrator.errors import UserError
from workloads.common import data
from workloads.common.hyperparams import DATA_SOURCES, PROFILES

console = Console(stderr=True, highlight=False, soft_wrap=True)
EXIT_USER_ERROR = 2
EXIT_CELLS_FAILED = 1
EXIT_INTERRUPTED = 130


def _split(value: str | None) -> list[str] | None:
    return [item.strip() for item in value.split(",") if item.strip()] if value else None


# --- run-matrix ---------------------------------------------------------------------------------

def choose_backend(requested: str) -> str:
    """`auto` picks Docker when an engine answers, else the local backend, and says which in one line."""
    if requested != "auto":
        return requested
    engine = host.docker_engine()
    if engine.available:
        console.print(f"{engine.detail} answered; using the Docker backend (one container per cell).")
        return "docker"
    console.print("No Docker engine answered; using the local backend (per-framework virtual environments).")
    return "local"


def make_backend(name: str, known: dict, *, python: str | None, cache_dir: Path | None, gpus: str | None,
                 build_options: "images.BuildOptions", pull: bool):
    if name == "local":
        return LocalBackend(known, cache_dir=cache_dir, python=python, gpus=gpus, log=console.print)
    from orchestrator.backends import docker as docker_backend

    if python:
        raise UserError("--python runs cells with a host interpreter: it needs --backend local")
    client = docker_backend.connect()

    failures: dict[str, UserError] = {}  # one failed build or pull is not retried for every cell

    def image_for(cell) -> str:
        framework = known[cell.framework]
        variant = framework.variant(cell.variant)
        tag = images.image_tag(framework, variant, build_options.registry)
        if tag not in failures:
            try:
                return images.ensure_image(client, framework, variant, build_options, pull=pull, log=console.print)
            except UserError as error:
                failures[tag] = error
                console.print(f"[red]error:[/red] {escape(str(error))}")
        raise failures[tag]

    return docker_backend.DockerBackend(known, client=client, image_for=image_for, gpus=gpus, log=console.print)


def run_matrix(*, matrix_file: Path | None = None, backend: str = "auto", frameworks: list[str] | None = None,
               variants: list[str] | None = None, workloads: list[str] | None = None,
               precisions: list[str] | None = None, profile: str | None = None, data_source: str | None = None,
               results_dir: Path | None = None, resume: bool = False, repeat: int | None = None,
               timeout: float | None = None, python: str | None = None, data_dir: Path | None = None,
               cache_dir: Path | None = None, gpus: str | None = None, render_report: bool = True,
               registry: str | None = None, pull: bool = False, base_image: str | None = None,
               ca_bundle: Path | None = None, wheelhouse: Path | None = None) -> int:
    from orchestrator import runner  # rich progress and the report are only needed here

    known = framework_registry.discover()
    matrix = matrix_module.load(matrix_file, known)
    matrix = matrix_module.narrow(matrix, known, names=frameworks, variants=variants, workloads=workloads,
                                  precisions=precisions, profile=profile, data=data_source, repeat=repeat)
    cells = matrix.cells(known)
    if not cells:
        raise UserError("the matrix selects no cell: check --frameworks / --workloads / --variants "
                        "against `python -m orchestrator list`")
    if timeout is not None and timeout <= 0:
        raise UserError(f"--timeout must be a positive number of seconds, not {timeout:g}")
    build_options = images.BuildOptions.from_environment(registry=registry, base_image=base_image,
                                                         ca_bundle=ca_bundle, wheelhouse=wheelhouse)
    engine = make_backend(choose_backend(backend), known, python=python, cache_dir=cache_dir, gpus=gpus,
                          build_options=build_options, pull=pull)
    if results_dir is None:
        results_dir = runner.latest_results_dir() if resume else runner.new_results_dir()
    data_dir = Path(data_dir) if data_dir else data.default_data_dir()
    console.print(f"{len(cells)} cell(s) ({matrix.profile} profile, {matrix.data} data, {matrix.repeat} repeat(s)) "
                  f"-> {results_dir}")
    summary = runner.run_cells(cells, engine, known, results_dir=results_dir, data_dir=data_dir,
                               resume=resume, timeout=timeout, console=console,
                               metadata={"matrix": matrix.source, "profile": matrix.profile, "data": matrix.data,
                                         "repeat": matrix.repeat, "argv": sys.argv[1:],
                                         "not_applicable": matrix.not_applicable(known)})
    if render_report:
        render(results_dir)
    failed = summary.count("failed") + summary.count("timeout")
    console.print(f"{summary.count('ok')} ok, {summary.count('unsupported')} unsupported, {failed} failed"
                  + (f", {summary.skipped} already done" if summary.skipped else ""))
    return EXIT_CELLS_FAILED if failed else 0


# --- parity -------------------------------------------------------------------------------------

def parity_check(*, frameworks: list[str] | None = None, workloads: list[str] | None = None, backend: str = "auto",
                 results_dir: Path | None = None, python: str | None = None, data_dir: Path | None = None,
                 cache_dir: Path | None = None, timeout: float | None = None, gpus: str | None = None,
                 registry: str | None = None, pull: bool = False, base_image: str | None = None,
                 ca_bundle: Path | None = None, wheelhouse: Path | None = None) -> int:
    """Run every framework on the canonical weights and compare its outputs with PyTorch's."""
    import json

    from orchestrator import parity, runner
    from workloads.common.hyperparams import WORKLOADS
    from workloads.common.result import Cell

    known = framework_registry.discover()
    names = frameworks or list(known)
    matrix_module.check_names(names, list(known), "frameworks", "command line")
    workloads = matrix_module.check_names(workloads or list(WORKLOADS), WORKLOADS, "workloads", "command line")
    names = [parity.REFERENCE] + [name for name in names if name != parity.REFERENCE]  # the reference always runs
    cells = [Cell(name, workload, variant=known[name].default_variant, precision="fp32", profile="full",
                  data="synthetic") for workload in workloads for name in names if workload in known[name].workloads]
    build_options = images.BuildOptions.from_environment(registry=registry, base_image=base_image,
                                                         ca_bundle=ca_bundle, wheelhouse=wheelhouse)
    engine = make_backend(choose_backend(backend), known, python=python, cache_dir=cache_dir, gpus=gpus,
                          build_options=build_options, pull=pull)
    data_dir = Path(data_dir) if data_dir else data.default_data_dir()
    parity.write_canonical(data_dir, workloads)
    results_dir = results_dir or runner.new_results_dir(prefix="parity-")
    console.print(f"parity: {len(cells)} cell(s) on canonical weights -> {results_dir}")
    summary = runner.run_cells(cells, engine, known, results_dir=results_dir, data_dir=data_dir, timeout=timeout,
                               console=console, metadata={"mode": "parity"}, parity=True)
    comparisons = parity.compare(summary.results)
    report = parity.markdown(comparisons)
    (results_dir / "parity.md").write_text(report + "\n")
    (results_dir / "parity.json").write_text(json.dumps([vars(c) for c in comparisons], indent=2) + "\n")
    table = Table(title=f"Parity against {parity.REFERENCE} (max |a - b| / max |ref| <= {parity.canonical.PARITY_TOLERANCE:.0e})")
    for column in ("workload", "framework", "parameters", "output", "max abs", "max rel", "result"):
        table.add_column(column)
    for item in comparisons:
        for name, difference in (item.differences.items() or [("-", None)]):
            table.add_row(item.workload, item.framework, f"{item.parameter_count:,}" if item.parameter_count else "-",
                          name, f"{difference[0]:.1e}" if difference else "-", f"{difference[1]:.1e}" if difference else "-",
                          escape(item.status + (f": {item.note}" if item.note else "")))
    Console(width=200).print(table)
    console.print(f"parity table: {results_dir / 'parity.md'}")
    return 0 if all(item.passed for item in comparisons) else EXIT_CELLS_FAILED


# --- images: build, push, pull ----------------------------------------------------------------

def _selected_variants(names: list[str] | None, variants: list[str] | None) -> list:
    """(framework, variant) pairs: each framework's default variant, the named ones, or `all`."""
    known = framework_registry.discover()
    selected = []
    for name in names or list(known):
        if name not in known:
            raise UserError(f"unknown framework {name!r}; choose from {', '.join(known)}")
        framework = known[name]
        chosen = list(framework.variants) if variants == ["all"] else (variants or [framework.default_variant])
        selected += [(framework, framework.variant(variant)) for variant in chosen]
    return selected


def build_images(*, frameworks: list[str] | None = None, variants: list[str] | None = None,
                 registry: str | None = None, base_image: str | None = None, ca_bundle: Path | None = None,
                 wheelhouse: Path | None = None, dry_run: bool = False) -> list[str]:
    """Build one framework/variant, or all; with dry_run print what would be sent instead."""
    options = images.BuildOptions.from_environment(registry=registry, base_image=base_image,
                                                   ca_bundle=ca_bundle, wheelhouse=wheelhouse)
    selected = _selected_variants(frameworks, variants)
    if dry_run:
        for framework, variant in selected:
            print(images.dry_run(framework, variant, options))
        return []
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    return [images.build(client, framework, variant, options, log=console.print).id for framework, variant in selected]


def check_pins(*, frameworks: list[str] | None = None, variants: list[str] | None = None) -> int:
    """pip finds every pin for each variant's Python and base, and the pins agree with each other."""
    from orchestrator import pins

    counts = {"ok": 0, "not installable": 0, "not checked": 0}
    for framework, variant in _selected_variants(frameworks, variants or ["all"]):
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


def push_images(*, frameworks: list[str], variants: list[str] | None, registry: str) -> list[str]:
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    return [images.push_image(client, images.image_tag(framework, variant), images.image_tag(framework, variant, registry),
                              log=console.print)
            for framework, variant in _selected_variants(frameworks, variants)]


def pull_images(*, frameworks: list[str], variants: list[str] | None, registry: str) -> list[str]:
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    pulled = []
    for framework, variant in _selected_variants(frameworks, variants):
        image = images.pull_image(client, images.image_tag(framework, variant, registry), log=console.print)
        console.print(f"pulled {images.image_digest(image) or image.id}")
        pulled.append(image.id)
    return pulled


# --- report, list, doctor -----------------------------------------------------------------------

def render(results_dir: Path) -> tuple[Path, Path]:
    from orchestrator import report

    if not Path(results_dir).is_dir():
        raise UserError(f"{results_dir} is not a results directory; pass the folder run-matrix wrote (results/<run-id>)")
    markdown, html = report.render(Path(results_dir))
    console.print(f"report: {markdown} and {html}")
    return markdown, html


def list_frameworks() -> Table:
    table = Table(title="Frameworks (images/<name>/ + workloads/<workload>/<name>.py)")
    for column in ("framework", "name", "variants (device)", "workloads", "notes"):
        table.add_column(column)
    for name, framework in framework_registry.discover().items():
        variants = ", ".join(f"{v.name} ({v.device}{' ' + v.cuda if v.cuda else ''})" for v in framework.variants.values())
        table.add_row(name, framework.display_name, variants, ", ".join(framework.workloads) or "-", framework.notes)
    return table


def doctor(cache_dir: Path | None = None, data_dir: Path | None = None) -> Table:
    """What this host can run."""
    table = Table(title="What this host can run", show_header=False)
    table.add_column("what")
    table.add_column("status")
    table.add_row("Rosetta Bench", f"{__version__} (git {host.git_revision() or 'unknown'})")
    table.add_row("Python", f"{platform.python_version()} at {sys.executable}")
    engine = host.docker_engine()
    table.add_row("Docker engine", engine.detail + ("" if engine.available else "  -> run-matrix uses the local backend"))
    if engine.available:
        table.add_row("leftover cell containers", _leftover_containers())
    gpus = host.gpus()
    table.add_row("GPUs", "\n".join(gpus) if gpus else "none (CUDA variants will be recorded as unsupported)")
    venvs = (Path(cache_dir) if cache_dir else default_cache_dir()) / "venvs"
    built = sorted(p.name for p in venvs.glob("*") if (p / READY_MARKER).is_file()) if venvs.is_dir() else []
    table.add_row("environments built", "\n".join(built) if built else f"none yet (built on first use in {venvs})")
    folder = Path(data_dir) if data_dir else data.default_data_dir()
    present = [remote.filename for remote in (data.CIFAR10, data.IMDB) if (folder / remote.filename).is_file()]
    table.add_row("datasets cached", f"{', '.join(present) or 'none'} in {folder}")
    return table


def _leftover_containers() -> str:
    """Cell containers that a killed run left on the engine (a finished run leaves none)."""
    from orchestrator.backends.docker import CELL_LABEL, connect

    try:
        found = connect().containers.list(all=True, filters={"label": CELL_LABEL})
    except Exception as error:  # noqa: BLE001 - doctor reports, it does not fail
        return f"could not list them ({str(error).splitlines()[0][:120]})"
    if not found:
        return "none"
    ids = " ".join(container.short_id for container in found)
    return f"{len(found)} (remove them with `docker rm -f {ids}`)"


# --- argument parsing ---------------------------------------------------------------------------

def _add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", help="image name prefix, e.g. 127.0.0.1:5000 (default: local names)")
    parser.add_argument("--base-image", help="override the variant's base image (e.g. one made by "
                        "images/base/make-local-base.sh)")
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle for pip inside builds (default: $PIP_CERT, "
                        "$SSL_CERT_FILE or $REQUESTS_CA_BUNDLE)")
    parser.add_argument("--wheelhouse", type=Path, help="folder of local wheels for builds (default: $PIP_FIND_LINKS)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m orchestrator",
                                     description="Rosetta Bench: the same models in every framework, measured alike.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run-matrix", help="run the benchmark matrix and render the report")
    run.add_argument("--matrix", type=Path, default=None, help="matrix file (default: matrix.toml)")
    run.add_argument("--backend", choices=BACKENDS, default="auto",
                     help="auto: Docker when an engine answers, else local")
    run.add_argument("--frameworks", help="comma-separated framework names (see `list`)")
    run.add_argument("--variants", help="comma-separated variants, e.g. cpu")
    run.add_argument("--workloads", help="comma-separated: cnn,resnet50,gru")
    run.add_argument("--precisions", help="comma-separated: fp32,tf32,fp16,bf16")
    run.add_argument("--profile", choices=PROFILES, help="full = the study's settings; smoke = a few batches")
    run.add_argument("--data", choices=DATA_SOURCES, help="real datasets or synthetic data of the same shapes")
    run.add_argument("--results-dir", type=Path, help="default: results/<run-id>/")
    run.add_argument("--resume", action="store_true", help="skip cells already ok (default dir: the latest run)")
    run.add_argument("--repeat", type=int, help="runs per cell, interleaved across frameworks")
    run.add_argument("--timeout", type=float, help="seconds per cell before it is killed")
    run.add_argument("--python", help="run cells with this interpreter instead of built environments")
    run.add_argument("--data-dir", type=Path, help="dataset cache (default: $ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data)")
    run.add_argument("--cache-dir", type=Path, help="environment cache (default: $ROSETTA_CACHE_DIR or ~/.cache/rosetta-bench)")
    run.add_argument("--gpus", help="GPU indices for the cells, e.g. 0 or 0,1 (CUDA_VISIBLE_DEVICES)")
    run.add_argument("--no-report", action="store_true", help="do not render the report at the end")
    run.add_argument("--pull", action="store_true", help="docker: pull missing images from --registry instead of building")
    _add_build_options(run)

    build = commands.add_parser("build", help="build framework images (default variant, or --variant V / all)")
    build.add_argument("frameworks", nargs="*", help="default: every framework")
    build.add_argument("--variant", action="append", dest="variants", help="repeatable; `all` for every variant")
    build.add_argument("--dry-run", action="store_true", help="print the rendered Dockerfile and the context's files")
    _add_build_options(build)

    for verb, text in (("push", "tag and push images to --registry"), ("pull", "pull images from --registry")):
        command = commands.add_parser(verb, help=text)
        command.add_argument("frameworks", nargs="+")
        command.add_argument("--variant", action="append", dest="variants", help="repeatable; `all` for every variant")
        command.add_argument("--registry", required=True, help="e.g. 127.0.0.1:5000 or ghcr.io/you")

    check = commands.add_parser("parity", help="prove every framework runs the same model: canonical weights, outputs compared")
    check.add_argument("--frameworks", help="comma-separated (default: all; pytorch, the reference, always runs)")
    check.add_argument("--workloads", help="comma-separated: cnn,resnet50,gru")
    check.add_argument("--backend", choices=BACKENDS, default="auto")
    check.add_argument("--results-dir", type=Path, help="default: results/parity-<run-id>/")
    check.add_argument("--python", help="run cells with this interpreter instead of built environments")
    check.add_argument("--data-dir", type=Path, help="where the canonical files are written (default: the data cache)")
    check.add_argument("--cache-dir", type=Path)
    check.add_argument("--timeout", type=float)
    check.add_argument("--gpus")
    check.add_argument("--pull", action="store_true")
    _add_build_options(check)

    pins_parser = commands.add_parser("check-pins", help="are the pinned requirements installable on each variant's "
                                      "Python and base? (pip resolves them on this host; no image is built)")
    pins_parser.add_argument("frameworks", nargs="*", help="default: every framework")
    pins_parser.add_argument("--variant", action="append", dest="variants", help="repeatable (default: all variants)")

    report = commands.add_parser("report", help="re-render the report of a results directory")
    report.add_argument("results_dir", type=Path)

    commands.add_parser("list", help="frameworks, variants and workloads")

    doctor_parser = commands.add_parser("doctor", help="what this host can run")
    doctor_parser.add_argument("--cache-dir", type=Path)
    doctor_parser.add_argument("--data-dir", type=Path)
    return parser


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "run-matrix":
        return run_matrix(matrix_file=args.matrix, backend=args.backend, frameworks=_split(args.frameworks),
                          variants=_split(args.variants), workloads=_split(args.workloads),
                          precisions=_split(args.precisions), profile=args.profile, data_source=args.data,
                          results_dir=args.results_dir, resume=args.resume, repeat=args.repeat,
                          timeout=args.timeout, python=args.python, data_dir=args.data_dir,
                          cache_dir=args.cache_dir, gpus=args.gpus, render_report=not args.no_report,
                          registry=args.registry, pull=args.pull, base_image=args.base_image,
                          ca_bundle=args.ca_bundle, wheelhouse=args.wheelhouse)
    if args.command == "build":
        build_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry,
                     base_image=args.base_image, ca_bundle=args.ca_bundle, wheelhouse=args.wheelhouse,
                     dry_run=args.dry_run)
        return 0
    if args.command == "push":
        push_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry)
        return 0
    if args.command == "pull":
        pull_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry)
        return 0
    if args.command == "parity":
        return parity_check(frameworks=_split(args.frameworks), workloads=_split(args.workloads), backend=args.backend,
                            results_dir=args.results_dir, python=args.python, data_dir=args.data_dir,
                            cache_dir=args.cache_dir, timeout=args.timeout, gpus=args.gpus, registry=args.registry,
                            pull=args.pull, base_image=args.base_image, ca_bundle=args.ca_bundle,
                            wheelhouse=args.wheelhouse)
    if args.command == "check-pins":
        return check_pins(frameworks=args.frameworks, variants=args.variants)
    if args.command == "report":
        render(args.results_dir)
        return 0
    if args.command == "list":
        Console().print(list_frameworks())
        return 0
    if args.command == "doctor":
        Console().print(doctor(args.cache_dir, args.data_dir))
        return 0
    raise AssertionError(args.command)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except UserError as error:
        from orchestrator.runner import Interrupted

        if args.verbose:
            traceback.print_exc()
        console.print(f"[red]error:[/red] {escape(str(error))}")
        return EXIT_INTERRUPTED if isinstance(error, Interrupted) else EXIT_USER_ERROR
    except KeyboardInterrupt:
        console.print("interrupted")
        return EXIT_INTERRUPTED


def _interrupt_on_sigterm(signum, frame) -> None:
    """`kill` (or a CI job's time limit) ends a run as Ctrl-C does, so the running cell's process or
    container is removed and finished cells stay on disk for --resume."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    sys.exit(main())
