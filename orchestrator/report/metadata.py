"""What a run recorded about itself: where, with what and when (from the results), and the
not-applicable pairs each run-matrix invocation wrote to run.json."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from workloads.common import safe_files
from workloads.common.result import SCHEMA_VERSION

LONGEST_RUN_FILE = 16 * 1024 * 1024  # bytes: run.json may come from elsewhere, as the cells do


def _distinct_values(frame: pd.DataFrame, *columns: str) -> str:
    values = []
    for column in columns:
        values += [str(value) for value in frame[column].dropna().unique() if str(value)]
    return ", ".join(dict.fromkeys(values)) or "-"


def run_metadata(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """What was seen across all results: where, with what, when."""
    started = frame["started_at"].dropna().sort_values()
    when = "-" if started.empty else (started.iloc[0] if started.iloc[0] == started.iloc[-1]
                                      else f"{started.iloc[0]} to {started.iloc[-1]}")
    counts = frame["status"].value_counts()
    statuses = ", ".join(f"{counts[name]} {name}" for name in counts.index)
    gpus = frame[frame["gpu_name"].notna()]
    gpu_text = ", ".join(dict.fromkeys(
        f"{name} (driver {driver})" if isinstance(driver, str) and driver else str(name)
        for name, driver in zip(gpus["gpu_name"], gpus["gpu_driver"]))) or "none seen"
    return [
        ("Git revision", _distinct_values(frame, "git_revision")),
        ("Hosts", _distinct_values(frame, "hostname")),
        ("GPUs", gpu_text),
        ("CPU model", _distinct_values(frame, "cpu_model")),
        ("Backend", _distinct_values(frame, "backend")),
        ("Profile", _distinct_values(frame, "profile")),
        ("Data", _distinct_values(frame, "data", "data_source")),
        ("Measured", when),
        ("Results", f"{len(frame)} ({statuses})"),
        ("Schema version", str(SCHEMA_VERSION)),
    ]


def recorded_not_applicable(results_dir: Path) -> list[dict]:
    """The not-applicable pairs every run-matrix invocation into this folder recorded (run.json)."""
    try:
        data = safe_files.read_bytes_bounded(Path(results_dir) / "run.json", LONGEST_RUN_FILE)
        invocations = json.loads(data.decode("utf-8")).get("invocations", [])
    except (OSError, ValueError, AttributeError, RecursionError):  # UnicodeDecodeError is a ValueError
        return []
    if not isinstance(invocations, list):
        return []
    pairs = [item for invocation in invocations if isinstance(invocation, dict)
             for item in _list(invocation.get("not_applicable")) if _is_pair(item)]
    return pairs


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _is_pair(item) -> bool:
    """A not-applicable record of the shape run-matrix writes; anything else is left out."""
    return (isinstance(item, dict) and isinstance(item.get("framework"), str) and isinstance(item.get("workload"), str)
            and all(isinstance(variant, str) for variant in _list(item.get("variants")))
            and isinstance(item.get("variants", []), list) and isinstance(item.get("reason", ""), (str, type(None))))
