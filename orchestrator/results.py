"""Result storage on the host: where each cell's JSON lives, loading it back, flattening to pandas.

The record itself (``Result`` and its parts) is defined once in ``workloads.common.result``, which
uses the standard library only, so the host reads exactly what the images write.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from pathlib import Path

import pandas as pd

from orchestrator.errors import UserError, printable
from workloads.common import declaration, options as framework_options, safe_files
from workloads.common.cell import unsafe_name_problem
from workloads.common.result import (READABLE_SCHEMA_VERSIONS, STATUSES, Cell, Metrics, Provenance, Result, Samples,
                                     SchemaError)
from workloads.common.strict_json import json_kind, nesting_depth

CELLS_FOLDER = "cells"

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "results" / "reference"
REFERENCE_CSV = REFERENCE_DIR / "original-study-2018.csv"
REFERENCE_COLUMNS = ("workload", "framework", "api", "gpu", "cuda", "cudnn", "metric", "value", "unit",
                     "uses_cudnn_rnn")

CELL_COLUMNS = ("framework", "variant", "workload", "precision", "profile", "data", "repeat")
METRIC_COLUMNS = tuple(item.name for item in dataclasses.fields(Metrics))
PROVENANCE_COLUMNS = ("device", "gpu_name", "framework_version", "cuda_version", "cudnn_version",
                      "gpu_driver", "backend", "image_digest", "git_revision", "hostname",
                      "cpu_model", "data_source")
# init: canonical or framework; options: the non-default framework options as one label ("channels_last=on"),
# "" for none; mode: eager, graph or compiled ("" in a result from before modes were declared); all
# three are part of what a row is (a compiled cell is another row than an eager one).
FRAME_COLUMNS = (CELL_COLUMNS + ("init", "mode", "options", "status", "reason") + METRIC_COLUMNS + PROVENANCE_COLUMNS
                 + ("started_at", "wall_time_s", "key", "matched"))

# Result files may come from another machine: bounds on what reading one may cost. A parity run's
# outputs are the largest records (tens of kilobytes); nothing the harness writes nests deeper
# than a few levels.
LONGEST_CELL_FILE = 64 * 1024 * 1024  # bytes
DEEPEST_NESTING = 32
LARGEST_INTEGER = 2 ** 63 - 1  # what pandas' Int64 holds

# A frame status of the host's own, beside the recorded ones (STATUSES): an "ok" result whose
# figures cannot be measurements (a time that is infinite, negative or NaN). Never ranked.
INVALID = "invalid"
# Measured figures that must be finite and >= 0 in an ok result. Losses are left out (final_loss,
# samples.first_loss, samples.epoch_losses, whose entries are null where a loss was not a finite
# number): a training that diverged is a finding the validity gate reports (status failed:
# diverged), not a broken measurement. Training results (schema 2) carry one host time per step in
# batch_times_s and a trace count per compiled function in traces; both are checked.
_UNCHECKED_METRICS = ("final_loss",)
_CHECKED_SAMPLES = ("first_step_s", "epoch_times_s", "epoch_steps", "batch_times_s", "traces")


@dataclasses.dataclass
class Unreadable:
    """A cell file the report cannot use, and why: listed in the report instead of crashing it."""

    path: Path
    reason: str


@dataclasses.dataclass
class LoadedResults:
    results: list[Result]
    unreadable: list[Unreadable]


def cell_path(results_dir: str | os.PathLike, cell: Cell) -> Path:
    """Where one cell's (and one repeat's) result is stored. Every name in the cell is checked
    by the workloads' own rule (cell.unsafe_name_problem), so its key is one plain file name: a
    cell never names a path (docs/RUN-GUARANTEES.md, the trust model). Raises UnsafePath otherwise."""
    problem = unsafe_name_problem(cell)
    if problem:
        raise safe_files.UnsafePath(f"{problem}; it is not a plain file name")
    return Path(results_dir) / CELLS_FOLDER / f"{safe_files.safe_name(cell.key)}.json"


def ok_result_problem(result: Result) -> str | None:
    """Why a result that says ok is not one, or None: an ok result carries its timed phases, its
    headline figure (a parity run its outputs instead) and the framework version it measured.
    Also for any status: a workload this version does not declare (docs/RUN-GUARANTEES.md)."""
    workloads = declaration.declared()
    if result.cell.workload not in workloads:
        return (f"unknown workload {result.cell.workload[:80]!r} (this version declares "
                f"{', '.join(workloads)})")
    if result.status != "ok":
        return None
    lacking = []
    if not result.phases:
        lacking.append("its timed phases")
    if not result.outputs and workloads[result.cell.workload].headline_metric.value(result) is None:
        lacking.append(f"its headline figure ({workloads[result.cell.workload].headline_metric.name})")
    if not result.provenance.framework_version:
        lacking.append("the framework version (provenance.framework_version)")
    if lacking:
        return f"status ok but it lacks {', '.join(lacking)}: not a finished measurement"
    return None


def adopt(cell: Cell, result: Result) -> Result:
    """The result a cell handed back for the job `cell`, filed under the job's own cell: one that
    names another cell, or says ok without what an ok result carries, is that cell failed, with
    why (docs/RUN-GUARANTEES.md, the trust model)."""
    if result.cell != cell:
        return Result(cell=cell, status="failed",
                      reason=f"its result names another cell ({result.cell.key[:200]!r}); refused")
    problem = ok_result_problem(result)
    if problem:
        return Result(cell=cell, status="failed", reason=f"its result is refused: {problem}")
    return result


def load_results(results_dir: str | os.PathLike) -> list[Result]:
    """Read every ``cells/*.json`` under ``results_dir``, in file-name order.

    Raises UserError when there is nothing to read, or when a file cannot be read by this version
    (the report uses ``load_cells`` instead, which lists such files and goes on).
    """
    cells_dir = Path(results_dir) / CELLS_FOLDER
    return [_read_one(path, cells_dir) for path in _cell_files(cells_dir)]


def load_cells(results_dir: str | os.PathLike) -> LoadedResults:
    """Every readable ``cells/*.json`` under ``results_dir``, and every unreadable one with its reason.

    A report lists the unreadable files rather than leaving them out silently; it refuses (UserError)
    only when no file at all can be read."""
    cells_dir = Path(results_dir) / CELLS_FOLDER
    loaded = LoadedResults([], [])
    for path in _cell_files(cells_dir):
        try:
            result = read_cell_file(path)
        except SchemaError as error:
            loaded.unreadable.append(Unreadable(path, str(error).removeprefix(f"{path}: ")))
            continue
        problem = ok_result_problem(result)
        if problem:
            loaded.unreadable.append(Unreadable(path, problem))
        else:
            loaded.results.append(result)
    if not loaded.results:
        first = loaded.unreadable[0]
        raise UserError(f"no readable result in {cells_dir}: {len(loaded.unreadable)} unreadable file(s), e.g. "
                        f"{first.path.name}: {first.reason}; re-run those cells or move the files out")
    return loaded


def _cell_files(cells_dir: Path) -> list[Path]:
    paths = sorted(cells_dir.glob("*.json")) if cells_dir.is_dir() else []
    if not paths:
        raise UserError(f"no results in {cells_dir}; run `python -m orchestrator run-matrix` first")
    return paths


def read_cell_file(path: Path) -> Result:
    """One result file, checked field by field; SchemaError (naming the file) for anything else.

    Never hangs on a FIFO, never follows a link, never reads more than LONGEST_CELL_FILE bytes."""
    try:
        content = safe_files.read_bytes_bounded(path, LONGEST_CELL_FILE)
    except safe_files.UnsafePath as error:
        raise SchemaError(f"{path}: {str(error).removeprefix(f'{path} ')}") from error
    except OSError as error:
        raise SchemaError(f"{path}: cannot be read ({error.strerror or error})") from error
    return parse_cell_bytes(content, str(path))


def parse_cell_bytes(content: bytes, name: str) -> Result:
    """See `_parse_cell_bytes`; the reason of a refusal is one printable line, whatever the record
    held (a field named with a line break, a control character)."""
    try:
        return _parse_cell_bytes(content, name)
    except SchemaError as error:
        raise SchemaError(printable(str(error))) from error


def _parse_cell_bytes(content: bytes, name: str) -> Result:
    """A result record from bytes a cell handed back (a file's, or a Ray node's answer), checked as
    `read_cell_file` checks a file: bounded, UTF-8, JSON, nesting capped, every field of its type.
    SchemaError, its message starting with `name`, for anything else (docs/RUN-GUARANTEES.md,
    the trust model)."""
    if not isinstance(content, bytes):
        raise SchemaError(f"{name}: a result must be bytes of JSON, not {type(content).__name__}")
    if len(content) > LONGEST_CELL_FILE:
        raise SchemaError(f"{name}: larger than {LONGEST_CELL_FILE} bytes")
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SchemaError(f"{name}: not UTF-8 text (byte {error.start})") from error
    except RecursionError as error:
        raise SchemaError(f"{name}: JSON nested too deeply") from error
    except ValueError as error:  # not JSON, or an integer of thousands of digits
        raise SchemaError(f"{name}: not valid JSON ({str(error)[:120]})") from error
    if nesting_depth(data, DEEPEST_NESTING) > DEEPEST_NESTING:
        raise SchemaError(f"{name}: JSON nested more than {DEEPEST_NESTING} levels deep")
    # Version 1 lacks only fields that have defaults now: its fields are checked the same way.
    if isinstance(data, dict) and data.get("schema_version") in READABLE_SCHEMA_VERSIONS:
        problem = _type_problem(Result, data, "")
        if problem:
            raise SchemaError(f"{name}: malformed result record: {problem}")
    try:
        result = Result.from_dict(data)
    except SchemaError as error:
        raise SchemaError(f"{name}: {error}") from error
    except (TypeError, ValueError, KeyError, AttributeError) as error:  # a shape from_dict did not foresee
        raise SchemaError(f"{name}: malformed result record ({type(error).__name__}: {str(error)[:120]})") from error
    _check_shape(result, name)
    return result


def _type_problem(hint, value, where: str) -> str | None:
    """What is wrong with `value` as a `hint` (the result dataclasses' type hints), or None."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    name = where or "the record"
    if hint is typing.Any:
        return None
    if origin is typing.Union:
        if value is None and type(None) in arguments:
            return None
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return _type_problem(inner, value, where)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return f"{name} must be an object, not {json_kind(value)}"
        hints = typing.get_type_hints(hint)
        for field in dataclasses.fields(hint):
            if field.name in value:
                problem = _type_problem(hints[field.name], value[field.name], f"{where}.{field.name}".lstrip("."))
                if problem:
                    return problem
        return None
    if origin is list:
        if not isinstance(value, list):
            return f"{name} must be a list, not {json_kind(value)}"
        return next(filter(None, (_type_problem(arguments[0], item, f"{where}[{index}]")
                                  for index, item in enumerate(value))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return f"{name} must be an object, not {json_kind(value)}"
        return next(filter(None, (_type_problem(arguments[1], item, f"{where}.{key}")
                                  for key, item in value.items())), None)
    if hint is int:
        if type(value) is not int:
            return f"{name} must be an integer, not {json_kind(value)}"
        if abs(value) > LARGEST_INTEGER:
            return f"{name} is out of range ({len(str(abs(value)))} digits)"
        return None
    if hint is float:
        if type(value) not in (int, float):
            return f"{name} must be a number, not {json_kind(value)}"
        if type(value) is int and abs(value) > LARGEST_INTEGER:
            return f"{name} is out of range ({len(str(abs(value)))} digits)"
        return None
    if hint in (str, bool) and type(value) is not hint:
        return f"{name} must be {json_kind(hint())}, not {json_kind(value)}"
    return None


def _read_one(path: Path, cells_dir: Path) -> Result:
    try:
        result = read_cell_file(path)
    except SchemaError as error:
        message = str(error)
        # The schema-version refusal already names its fix; other defects need one added.
        if "re-run" not in message:
            message += (f"; re-run that cell (`python -m orchestrator run-matrix`) or move the file "
                        f"out of {cells_dir}")
        raise UserError(message) from error
    return result


def _check_shape(result: Result, path: Path | str) -> None:
    """Catch well-formed JSON of the wrong shape (e.g. ``"metrics": 5``) before pandas trips on it."""
    parts = {"cell": Cell, "metrics": Metrics, "samples": Samples, "provenance": Provenance}
    for name, kind in parts.items():
        if not isinstance(getattr(result, name), kind):
            raise SchemaError(f"{path}: malformed result record: {name!r} must be an object")
    if result.status not in STATUSES:
        raise SchemaError(f"{path}: malformed result record: status {result.status!r} is not one of "
                          f"{', '.join(STATUSES)}")


def derived_metrics() -> dict[str, dict[str, declaration.Metric]]:
    """Per workload, its declared metrics that are derived from the record rather than stored in it."""
    return {name: {metric.name: metric for metric in workload.metrics if metric.derive is not None}
            for name, workload in declaration.declared().items()}


def invalid_measurement(result: Result) -> str | None:
    """Why an ok result's figures cannot be measurements, or None: a time, rate, count or size
    that is NaN, infinite or negative. Such a result is shown as invalid, never ranked."""
    figures = [(f"metrics.{name}", value) for name, value in dataclasses.asdict(result.metrics).items()
               if name not in _UNCHECKED_METRICS]
    for name in _CHECKED_SAMPLES:
        value = getattr(result.samples, name)
        if isinstance(value, dict):
            figures += [(f"samples.{name}.{key}", item) for key, item in value.items()]
        elif isinstance(value, list):
            figures += [(f"samples.{name}[{index}]", item) for index, item in enumerate(value)]
        else:
            figures.append((f"samples.{name}", value))
    figures.append(("wall_time_s", result.wall_time_s))
    for name, value in figures:
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{name} is {value!r}: not a finite, non-negative number, so not a measurement"
    return None


def _derived_values(result: Result, metrics: dict[str, declaration.Metric]) -> dict[str, float]:
    """The derived metrics of an ok result; a derivation that fails on odd figures leaves NaN."""
    values = {}
    for name, metric in metrics.items():
        try:
            value = metric.value(result)
            values[name] = math.nan if value is None else float(value)
        except (ArithmeticError, TypeError, ValueError):
            values[name] = math.nan
        if not (math.isfinite(values[name]) and values[name] >= 0):
            values[name] = math.nan  # never ranked
    return values


def to_frame(results: list[Result]) -> pd.DataFrame:
    """One row per result (one repeat of one cell), nested record flattened into columns.

    A declared metric that is derived (workloads/common/declaration.py: ``Metric.derive``) gets a
    column of its own, filled in for the ok results of its workload. An ok result whose figures
    are not measurements (``invalid_measurement``) gets the status INVALID and the reason."""
    derived = derived_metrics()
    derived_columns = list(dict.fromkeys(name for metrics in derived.values() for name in metrics))
    rows = []
    for result in results:
        row = {name: getattr(result.cell, name) for name in CELL_COLUMNS}
        row["init"] = result.cell.init
        row["mode"] = result.cell.mode
        row["options"] = framework_options.label(result.cell.options)
        row["status"] = result.status
        row["reason"] = result.reason
        invalid = invalid_measurement(result) if result.status == "ok" else None
        if invalid:
            row["status"], row["reason"] = INVALID, invalid
        row.update(dataclasses.asdict(result.metrics))
        row.update({name: getattr(result.provenance, name) for name in PROVENANCE_COLUMNS})
        row["started_at"] = result.started_at
        row["wall_time_s"] = result.wall_time_s
        row["key"] = result.cell.key
        row["matched"] = result.provenance.extras.get("matched") or None
        if row["status"] == "ok":
            row.update(_derived_values(result, derived.get(result.cell.workload, {})))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS) + derived_columns)
    # Columns that are None in every row would otherwise stay "object" and break the medians.
    numeric = [name for name in METRIC_COLUMNS if name != "parameter_count"] + ["wall_time_s"] + derived_columns
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce").astype("float64")
    frame["parameter_count"] = pd.to_numeric(frame["parameter_count"], errors="coerce").astype("Int64")
    frame["repeat"] = pd.to_numeric(frame["repeat"], errors="coerce").astype("Int64")
    return frame


def load_reference(path: str | os.PathLike = REFERENCE_CSV) -> pd.DataFrame:
    """The published 2018 numbers (K80/P100, CUDA 8 / cuDNN 6): other hardware, for orientation only."""
    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype={"api": "string", "cuda": "string", "cudnn": "string",
                                         "uses_cudnn_rnn": "string"})
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise UserError(f"{path}: cannot read the reference numbers ({error}); restore it from git "
                        f"(`git checkout -- {path.name}` in {path.parent})") from error
    missing = [name for name in REFERENCE_COLUMNS if name not in frame.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; expected "
                        f"{', '.join(REFERENCE_COLUMNS)}")
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    frame["api"] = frame["api"].fillna("")
    return frame
