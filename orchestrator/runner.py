"""Run a list of cells on a backend: resume, data pre-fetch, progress, one result file per cell.

One failing, hanging or unsupported cell never stops the matrix; Ctrl-C stops it and keeps every
finished result, so `--resume` continues where it left off.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator import cpu_peak, host, onnx_export, run_folder, telemetry
from orchestrator.backends import Backend, CellJob, unsupported
from orchestrator.errors import ClusterLost, Interrupted, UserError
from orchestrator.frameworks import Framework
from orchestrator.results import adopt, cell_path, read_cell_file
from orchestrator.run_settings import RunSettings
from workloads.common import data, declaration, options as framework_options, safe_files
from workloads.common.cell import unsafe_name_problem
from workloads.common.result import CANONICAL_INIT, Cell, Result, SchemaError


@dataclass
class RunSummary:
    results_dir: Path
    results: list[Result] = field(default_factory=list)
    skipped: int = 0

    def count(self, status: str) -> int:
        return sum(result.status == status for result in self.results)


def run_cells(cells: list[Cell], backend: Backend, frameworks: dict[str, Framework], settings: RunSettings, *,
              console: Console | None = None) -> RunSummary:
    """Run `cells` into `settings.results_dir`, holding its lock throughout (orchestrator/run_folder.py):
    refused when the folder is unusable, or holds results and neither `resume` nor `force` is set."""
    console = console or Console(stderr=True, highlight=False, soft_wrap=True)
    results_dir = Path(settings.results_dir)
    with run_folder.claim(results_dir, resume=settings.resume, force=settings.force):
        run_folder.clear_work(results_dir)  # an interrupted or killed run's scratch folders
        try:
            return _run_locked(cells, backend, frameworks, settings, results_dir, console)
        finally:
            run_folder.clear_work(results_dir)


def _run_locked(cells: list[Cell], backend: Backend, frameworks: dict[str, Framework], settings: RunSettings,
                results_dir: Path, console: Console) -> RunSummary:
    data_dir = Path(settings.data_dir) if settings.data_dir else data.default_data_dir()
    resume, timeout, parity = settings.resume, settings.timeout, settings.parity
    summary = RunSummary(results_dir)
    _check_names(cells)
    revision = host.git_revision()
    pending = []
    for cell in cells:
        if resume and _finished(cell_path(results_dir, cell), cell):
            summary.skipped += 1
        else:
            pending.append(cell)
    record = dict(settings.record)
    probe = None if parity else _probe_cpu(results_dir, pending, frameworks, console)
    if probe is not None:
        record["cpu_peak"] = probe
    try:
        _write_run_metadata(results_dir, backend, cells, revision, record, order=pending)
    except OSError as error:
        raise run_folder.write_failed(results_dir / "run.json", error, results_dir) from None
    if summary.skipped:
        console.print(f"resuming {results_dir}: {summary.skipped} cell(s) already ok, {len(pending)} to run")

    datasets: dict[str, Path] = {}  # dataset name -> its verified archive on this host
    data_errors = {} if parity else _prefetch(pending, data_dir, console, datasets)
    # an inference engine's model (PyTorch's, exported to ONNX once), before its cells
    models = onnx_export.prepare(pending, backend, frameworks, data_dir=data_dir, results_dir=results_dir,
                                 timeout=timeout, git_revision=revision, log=console.print)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("matrix", total=len(pending))

        def started(job: CellJob) -> None:
            cell = job.cell
            progress.update(task, description=f"{cell.framework}/{cell.variant} {cell.workload} {cell.precision}")

        # parity cells measure nothing: the backend may run several at once, unmetered
        dispatch = backend.dispatcher(started=started, progress=progress, task=task,
                                      telemetry=telemetry.Telemetry(idle_window_s=settings.idle_window_s),
                                      measured=not parity)

        def finish(cell: Cell, result: Result) -> None:
            """File `result` under the cell the host asked for, whatever the result claims
            (docs/RUN-GUARANTEES.md, the trust model)."""
            result = adopt(cell, result)
            result.provenance.backend = result.provenance.backend or backend.name
            result.provenance.git_revision = result.provenance.git_revision or revision
            _write_packages(result, results_dir, finished=len(summary.results))
            _write_result(result, cell_path(results_dir, cell), results_dir, finished=len(summary.results))
            summary.results.append(result)
            console.print(_describe(result))
            progress.advance(task)

        try:
            # decided on the host (a dataset missing, a cell this backend cannot run): no job
            steps: list[Result | CellJob] = []
            for cell in pending:
                variant = frameworks[cell.framework].variant(cell.variant)
                if cell.workload in data_errors:
                    steps.append(Result(cell=cell, status="failed", reason=data_errors[cell.workload]))
                elif reason := backend.unsupported_reason(cell, variant):
                    steps.append(unsupported(cell, reason))
                elif problem := models.problem(cell):
                    steps.append(Result(cell=cell, status="failed", reason=problem))
                else:
                    # absolute, never resolved through a link; the log created fresh, never through one
                    work_dir, log_path = _cell_paths(results_dir, cell.key)
                    steps.append(CellJob(cell=cell, device=variant.device, work_dir=work_dir, log_path=log_path,
                                         data_dir=Path(data_dir).resolve(),
                                         timeout=timeout, git_revision=revision, threads=settings.threads,
                                         parity=f"parity/{cell.workload}" if parity else None,
                                         onnx_model=models.folder(cell),
                                         accelerator_type=settings.accelerator_types.get((cell.framework, cell.variant))))
            dispatch.prepare([step for step in steps if isinstance(step, CellJob)], datasets)
            for step in steps:  # in the run order; a serial backend runs each job as it is gathered
                if isinstance(step, Result):
                    step.wall_time_s = 0.0
                    finish(step.cell, step)
                    continue
                dispatch.submit(step)
                for job, result in dispatch.gather(wait=False):
                    finish(job.cell, result)
            for job, result in dispatch.gather(wait=True):
                finish(job.cell, result)
        except KeyboardInterrupt:
            dispatch.cancel()
            raise Interrupted(f"interrupted: {len(summary.results)} finished cell(s) kept in {results_dir}; "
                              f"continue with: run-matrix --resume --results-dir {results_dir}") from None
        except ClusterLost as error:
            dispatch.cancel()
            raise ClusterLost(f"{error}; {len(summary.results)} finished cell(s) kept in {results_dir}; "
                              f"continue with: run-matrix --resume --results-dir {results_dir}") from None
        finally:
            dispatch.close()
    return summary


def _probe_cpu(results_dir: Path, cells: list[Cell], frameworks: dict[str, Framework],
               console: Console) -> dict | None:
    """The CPU's measured peak (orchestrator/cpu_peak.py), once per host and run: when a CPU cell is
    to run and no earlier invocation into this folder measured this CPU on as many threads."""
    if not any(frameworks[cell.framework].variant(cell.variant).device == "cpu" for cell in cells):
        return None
    threads, model = cpu_peak.cell_threads(), cpu_peak.cpu_model()
    for invocation in run_folder.read_run_record(results_dir)["invocations"]:
        earlier = invocation.get("cpu_peak")
        if earlier and earlier["cpu_model"] == model and earlier["threads"] == threads:
            return None
    console.print(f"measuring the CPU's peak ({threads} threads) for the % of peak of its rows")
    return cpu_peak.probe(threads)


def _cell_paths(results_dir: Path, key: str) -> tuple[Path, Path]:
    try:
        return run_folder.cell_paths(results_dir, key)
    except OSError as error:  # a link or a file planted meanwhile, a full disk
        problem = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        raise UserError(f"{problem}; the finished cells in {results_dir} are kept") from None


def _write_result(result: Result, path: Path, results_dir: Path, *, finished: int) -> None:
    try:
        result.write(path)
    except OSError as error:
        raise run_folder.write_failed(path, error, results_dir, finished=finished,
                                      then=f"free space, then continue with: run-matrix --resume "
                                           f"--results-dir {results_dir}") from None


def packages_path(results_dir: Path, digest: str) -> Path:
    """Where a package list with this digest ("sha256:<hex>" or "<hex>") is kept: packages/<hex>.txt."""
    return Path(results_dir) / run_folder.PACKAGES_FOLDER / f"{digest.removeprefix('sha256:')}.txt"


def _write_packages(result: Result, results_dir: Path, *, finished: int) -> None:
    """Keep the cell's package list once per distinct list, as packages/<sha256 hex>.txt (one
    "name==version" per line, the text its digest is of): two results with the same digest ran in
    the same environment, and the list stays readable when the cell files are summarised. The list
    stays in the cell's JSON too. The digest is recomputed here, never taken on trust as a file name."""
    packages = result.provenance.packages
    if not packages or not all(isinstance(line, str) and "\n" not in line for line in packages):
        return
    text = "\n".join(packages) + "\n"
    digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if result.provenance.packages_sha256 != digest:
        result.provenance.extras["packages_sha256_recorded"] = str(result.provenance.packages_sha256)
        result.provenance.packages_sha256 = digest  # what the file holds
    path = packages_path(results_dir, digest)
    if path.is_file() and not path.is_symlink():
        return  # written by an earlier cell (atomically: never half a list)
    try:
        safe_files.write_text_atomic(path, text, below=results_dir)
    except OSError as error:
        raise run_folder.write_failed(path, error, results_dir, finished=finished,
                                      then=f"free space, then continue with: run-matrix --resume "
                                           f"--results-dir {results_dir}") from None


def _finished(path: Path, cell: Cell) -> bool:
    """An ok result of this very cell is on disk: read as `report` reads it (a link, FIFO, device,
    malformed record, another cell's record or an ok without its figures is never a finished cell)."""
    try:
        result = read_cell_file(path)
    except (OSError, SchemaError):
        return False
    return result.status == "ok" and adopt(cell, result) is result


def _check_names(cells: list[Cell]) -> None:
    """Every name in every cell follows the workloads' rule (cell.unsafe_name_problem) before
    anything is made of it: a name from a matrix or a framework's metadata never names a path."""
    for cell in cells:
        problem = unsafe_name_problem(cell)
        if problem:
            raise UserError(f"cell {cell.framework[:80]!r}: {problem}; it is not a plain file name: rename "
                            f"the framework, variant or option value")


def _prefetch(cells: list[Cell], data_dir: Path, console: Console,
              archives: dict[str, Path] | None = None) -> dict[str, str]:
    """Download and cache each real dataset once, before any cell starts (containers have no
    network). A dataset that cannot be had fails its cells with the reason; the rest still run.
    `archives` receives each prepared dataset's verified archive (a cluster ships it to its nodes)."""
    errors = {}
    needed = sorted({cell.workload for cell in cells
                     if cell.data == "real" and declaration.get(cell.workload).dataset is not None})
    for workload in needed:
        declared = declaration.get(workload)
        settings = declared.settings_for("full")
        with Progress(TextColumn(f"fetching {declared.dataset}"), BarColumn(), DownloadColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task("download", total=None)

            def report(done: int, total: int | None) -> None:
                progress.update(task, completed=done, total=total)

            try:
                archive = data.prepare(declared.dataset, data_dir, settings=settings, progress=report)
                if archives is not None:
                    archives[declared.dataset] = Path(archive)
            except data.DataError as error:
                errors[workload] = str(error)
                console.print(f"[red]error:[/red] {escape(str(error))}")
    return errors


def _describe(result: Result) -> str:
    cell = result.cell
    settings = [f"init={cell.init}"] if cell.init != CANONICAL_INIT else []
    settings += [framework_options.label(cell.options)] if cell.options else []
    name = (f"{cell.framework}/{cell.variant} {cell.workload} {cell.precision}"
            + (f" [{', '.join(settings)}]" if settings else "") + f" r{cell.repeat}")
    if result.status != "ok":
        colour = "yellow" if result.status == "unsupported" else "red"
        return f"[{colour}]{result.status:>11}[/{colour}]  {escape(name)}: {escape(str(result.reason))}"
    if result.outputs:
        return f"[green]{'ok':>11}[/green]  {escape(name)}: outputs {', '.join(result.outputs)} recorded"
    headline = declaration.get(cell.workload).headline_metric
    value, accuracy = headline.value(result), result.metrics.test_accuracy
    figures = [_quantity(value, headline) if value is not None else f"no {headline.label}"]
    if accuracy is not None:
        figures.append(f"accuracy {accuracy:.3f}")
    return f"[green]{'ok':>11}[/green]  {escape(name)}: {', '.join(figures)}"


def _quantity(value: float, metric: declaration.Metric) -> str:
    """"12.345 s train time", "1.234 s / 1000 images": the unit once, whether or not the label names it."""
    if metric.heading == metric.label:  # the label names its unit, or there is none
        return f"{value:.3f} {metric.label}"
    return f"{value:.3f} {metric.unit} {metric.label}"


def _write_run_metadata(results_dir: Path, backend: Backend, cells: list[Cell], revision: str | None,
                        metadata: dict, *, order: list[Cell]) -> None:
    """One more entry under run.json's `invocations`: the host (its GPUs' facts included), the
    backend, what was asked (`metadata`), and `order`: the keys of the cells this invocation runs,
    in the order it runs them (cells a --resume skips are left out)."""
    record = {"started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "mode": run_folder.MODE_BENCHMARK, "backend": backend.name, "git_revision": revision, "host": platform.node(),
              "platform": platform.platform(), "cpu_count": os.cpu_count(), "gpus": host.gpu_facts(),
              "cells": len(cells), **metadata, "order": [cell.key for cell in order]}
    run_folder.append_invocation(results_dir, record)
