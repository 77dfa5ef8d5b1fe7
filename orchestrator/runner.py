"""Run a list of cells on a backend: resume, data pre-fetch, progress, one result file per cell.

One failing, hanging or unsupported cell never stops the matrix; Ctrl-C stops it and keeps every
finished result, so `--resume` continues where it left off.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator import host, onnx_export
from orchestrator.backends import Backend, CellJob, unsupported
from orchestrator.errors import UserError
from orchestrator.frameworks import Framework
from orchestrator.results import cell_path
from workloads.common import data, declaration
from workloads.common.result import Cell, Result, write_json_atomic

RESULTS_ROOT = Path("results")


class Interrupted(UserError):
    pass


@dataclass
class RunSummary:
    results_dir: Path
    results: list[Result] = field(default_factory=list)
    skipped: int = 0

    def count(self, status: str) -> int:
        return sum(result.status == status for result in self.results)


def new_results_dir(root: Path = RESULTS_ROOT, prefix: str = "") -> Path:
    return root / (prefix + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))


def latest_results_dir(root: Path = RESULTS_ROOT) -> Path:
    runs = sorted((p for p in root.glob("*/run.json")), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise UserError(f"--resume: no earlier run under {root}/; pass --results-dir DIR of the run to continue")
    return runs[-1].parent


def run_cells(cells: list[Cell], backend: Backend, frameworks: dict[str, Framework], *, results_dir: Path,
              data_dir: Path, resume: bool = False, timeout: float | None = None,
              console: Console | None = None, metadata: dict | None = None, parity: bool = False) -> RunSummary:
    console = console or Console(stderr=True, highlight=False, soft_wrap=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    summary = RunSummary(results_dir)
    revision = host.git_revision()
    _write_run_metadata(results_dir, backend, cells, revision, metadata or {})

    pending = []
    for cell in cells:
        if resume and _finished(cell_path(results_dir, cell)):
            summary.skipped += 1
        else:
            pending.append(cell)
    if summary.skipped:
        console.print(f"resuming {results_dir}: {summary.skipped} cell(s) already ok, {len(pending)} to run")

    data_errors = {} if parity else _prefetch(pending, data_dir, console)
    # an inference engine's model (PyTorch's, exported to ONNX once), before its cells
    models = onnx_export.prepare(pending, backend, frameworks, data_dir=data_dir, results_dir=results_dir,
                                 timeout=timeout, git_revision=revision, log=console.print)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("matrix", total=len(pending))
        try:
            for cell in pending:
                progress.update(task, description=f"{cell.framework}/{cell.variant} {cell.workload} {cell.precision}")
                variant = frameworks[cell.framework].variant(cell.variant)
                start = time.perf_counter()
                if cell.workload in data_errors:
                    result = Result(cell=cell, status="failed", reason=data_errors[cell.workload])
                elif reason := backend.unsupported_reason(cell, variant):
                    result = unsupported(cell, reason)
                elif problem := models.problem(cell):
                    result = Result(cell=cell, status="failed", reason=problem)
                else:
                    # absolute paths: the cell runs in its own working directory
                    job = CellJob(cell=cell, device=variant.device,
                                  work_dir=(results_dir / ".work" / cell.key).resolve(),
                                  log_path=(results_dir / "logs" / f"{cell.key}.log").resolve(),
                                  data_dir=Path(data_dir).resolve(),
                                  timeout=timeout, git_revision=revision,
                                  parity=f"parity/{cell.workload}" if parity else None,
                                  onnx_model=models.folder(cell))
                    result = backend.run_cell(job)
                result.wall_time_s = time.perf_counter() - start
                result.provenance.backend = result.provenance.backend or backend.name
                result.provenance.git_revision = result.provenance.git_revision or revision
                result.write(cell_path(results_dir, cell))
                summary.results.append(result)
                console.print(_describe(result))
                progress.advance(task)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: {len(summary.results)} finished cell(s) kept in {results_dir}; "
                              f"continue with: run-matrix --resume --results-dir {results_dir}") from None
    return summary


def _finished(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("status") == "ok"
    except (OSError, ValueError):
        return False


def _prefetch(cells: list[Cell], data_dir: Path, console: Console) -> dict[str, str]:
    """Download and cache each real dataset once, before any cell starts (containers have no
    network). A dataset that cannot be had fails its cells with the reason; the rest still run."""
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
                data.prepare(declared.dataset, data_dir, settings=settings, progress=report)
            except data.DataError as error:
                errors[workload] = str(error)
                console.print(f"[red]error:[/red] {escape(str(error))}")
    return errors


def _describe(result: Result) -> str:
    cell = result.cell
    name = f"{cell.framework}/{cell.variant} {cell.workload} {cell.precision} r{cell.repeat}"
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
                        metadata: dict) -> None:
    record = {"started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "backend": backend.name, "git_revision": revision, "host": platform.node(),
              "platform": platform.platform(), "cpu_count": os.cpu_count(), "gpus": host.gpus(),
              "cells": len(cells), **metadata}
    path = results_dir / "run.json"
    history = []
    if path.is_file():
        try:
            history = json.loads(path.read_text()).get("invocations", [])
        except ValueError:
            history = []
    write_json_atomic(path, {"invocations": [*history, record]})
