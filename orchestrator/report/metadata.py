"""What a run recorded about itself: where, with what and when (from the results), and the
not-applicable pairs each run-matrix invocation wrote to run.json."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from orchestrator import run_folder
from orchestrator.errors import UserError
from workloads.common.result import SCHEMA_VERSION


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
    nodes = [("Cluster nodes", _distinct_values(frame, "cluster_node"))] \
        if "cluster_node" in frame and frame["cluster_node"].notna().any() else []
    return [
        ("Git revision", _distinct_values(frame, "git_revision")),
        ("Hosts", _distinct_values(frame, "hostname")),
        *nodes,
        ("GPUs", gpu_text),
        ("CPU model", _distinct_values(frame, "cpu_model")),
        ("Backend", _distinct_values(frame, "backend")),
        ("Profile", _distinct_values(frame, "profile")),
        ("Data", _distinct_values(frame, "data", "data_source")),
        ("Measured", when),
        ("Results", f"{len(frame)} ({statuses})"),
        ("Schema version", str(SCHEMA_VERSION)),
    ]


def recorded_invocations(results_dir: Path) -> list[dict]:
    """Every run-matrix invocation into this folder, as run.json records them, read by its one
    reader (run_folder.read_run_record); [] without one, or for one that cannot be read: a report
    renders the cells whatever run.json holds."""
    try:
        return run_folder.read_run_record(Path(results_dir))["invocations"]
    except UserError:
        return []


def recorded_not_applicable(results_dir: Path) -> list[dict]:
    """The not-applicable pairs every run-matrix invocation into this folder recorded (run.json)."""
    return [item for invocation in recorded_invocations(results_dir)
            for item in _list(invocation.get("not_applicable")) if _is_pair(item)]


SHOWN_ORDER = 12  # cells of a recorded order named in the metadata; the rest are counted


def recorded_order(invocations: list[dict]) -> list[tuple[str, str]]:
    """The order each invocation ran its cells in, and the seed that shuffled it, where run.json
    records them ("order", "seed"); nothing for an invocation that does not."""
    shown = []
    numbered = len([item for item in invocations if "order" in item or "seed" in item]) > 1
    for number, invocation in enumerate(invocations, start=1):
        order, seed = invocation.get("order"), invocation.get("seed")
        if order is None and seed is None:
            continue
        parts = [] if seed is None else [f"shuffled with seed {_plain(seed)}"]
        if isinstance(order, list):
            names = [_cell_name(item) for item in order]
            listed = ", ".join(names[:SHOWN_ORDER])
            more = (f", … ({len(names) - SHOWN_ORDER} more; the full order is in run.json)"
                    if len(names) > SHOWN_ORDER else "")
            parts.append(f"{len(names)} cells: {listed}{more}" if names else "no cells")
        elif order is not None:
            parts.append(_plain(order))
        label = f"Cell order (invocation {number})" if numbered else "Cell order"
        shown.append((label, "; ".join(parts) or "-"))
    return shown


def _cell_name(item) -> str:
    """A cell of a recorded order: its key as written, or the key built from a cell record."""
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        if isinstance(item.get("key"), str):
            return item["key"]
        parts = [str(item[name]) for name in ("framework", "variant", "workload", "precision", "profile", "data")
                 if name in item]
        if "repeat" in item:
            parts.append(f"r{item['repeat']}")
        if parts:
            return "__".join(parts)
    return _plain(item)


def _plain(value, longest: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= longest else text[:longest - 1] + "…"


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _is_pair(item) -> bool:
    """A not-applicable record of the shape run-matrix writes; anything else is left out."""
    return (isinstance(item, dict) and isinstance(item.get("framework"), str) and isinstance(item.get("workload"), str)
            and all(isinstance(variant, str) for variant in _list(item.get("variants")))
            and isinstance(item.get("variants", []), list) and isinstance(item.get("reason", ""), (str, type(None))))
