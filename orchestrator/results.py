"""Result storage on the host: where each cell's JSON lives, loading it back, flattening to pandas.

The record itself (``Result`` and its parts) is defined once in ``workloads.common.result``, which
uses the standard library only, so the host reads exactly what the images write.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd

from orchestrator.errors import UserError
from workloads.common import declaration
from workloads.common.result import STATUSES, Cell, Metrics, Provenance, Result, Samples, SchemaError

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
FRAME_COLUMNS = (CELL_COLUMNS + ("status", "reason") + METRIC_COLUMNS + PROVENANCE_COLUMNS
                 + ("started_at", "wall_time_s", "key", "matched"))


def cell_path(results_dir: str | os.PathLike, cell: Cell) -> Path:
    """Where one cell's (and one repeat's) result is stored."""
    return Path(results_dir) / CELLS_FOLDER / f"{cell.key}.json"


def load_results(results_dir: str | os.PathLike) -> list[Result]:
    """Read every ``cells/*.json`` under ``results_dir``, in file-name order.

    Raises UserError when there is nothing to read, or when a file cannot be read by this version:
    a report silently built without some cells would mislead more than a refusal.
    """
    cells_dir = Path(results_dir) / CELLS_FOLDER
    paths = sorted(cells_dir.glob("*.json")) if cells_dir.is_dir() else []
    if not paths:
        raise UserError(f"no results in {cells_dir}; run `python -m orchestrator run-matrix` first")
    return [_read_one(path, cells_dir) for path in paths]


def _read_one(path: Path, cells_dir: Path) -> Result:
    try:
        result = Result.read(path)
        _check_shape(result, path)
    except SchemaError as error:
        message = str(error)
        # The schema-version refusal already names its fix; other defects need one added.
        if "re-run" not in message:
            message += (f"; re-run that cell (`python -m orchestrator run-matrix`) or move the file "
                        f"out of {cells_dir}")
        raise UserError(message) from error
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: cannot be read ({error}); check its permissions and encoding, or "
                        f"move it out of {cells_dir}") from error
    return result


def _check_shape(result: Result, path: Path) -> None:
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


def to_frame(results: list[Result]) -> pd.DataFrame:
    """One row per result (one repeat of one cell), nested record flattened into columns.

    A declared metric that is derived (workloads/common/declaration.py: ``Metric.derive``) gets a
    column of its own, filled in for the ok results of its workload."""
    derived = derived_metrics()
    derived_columns = list(dict.fromkeys(name for metrics in derived.values() for name in metrics))
    rows = []
    for result in results:
        row = {name: getattr(result.cell, name) for name in CELL_COLUMNS}
        row["status"] = result.status
        row["reason"] = result.reason
        row.update(dataclasses.asdict(result.metrics))
        row.update({name: getattr(result.provenance, name) for name in PROVENANCE_COLUMNS})
        row["started_at"] = result.started_at
        row["wall_time_s"] = result.wall_time_s
        row["key"] = result.cell.key
        row["matched"] = result.provenance.extras.get("matched") or None
        if result.status == "ok":
            row.update({name: metric.value(result) for name, metric in derived.get(result.cell.workload, {}).items()})
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
