"""A node's answer: what the Ray task on a node hands back to the driver for one cell.

Made on the node (node.py: `make`), read on the driver (driver.py: `read`); this module is the one
place that says what an answer holds, so the two sides cannot drift apart.
"""
from __future__ import annotations

from pathlib import Path

LOG_LIMIT_BYTES = 64 << 20  # a cell's log shipped back to the driver: its last 64 MiB


def log_tail(path: Path) -> bytes:
    """The last LOG_LIMIT_BYTES of the cell's log on the node; nothing when it wrote none."""
    if not path.is_file():
        return b""
    with open(path, "rb") as stream:
        stream.seek(max(0, path.stat().st_size - LOG_LIMIT_BYTES))
        return stream.read()


def make(result, log: bytes, wall_time_s: float, **facts) -> dict:
    """On the node: the answer for one cell (its result, its log, how long the task took, where it ran)."""
    return {"result": result, "log": log, "wall_time_s": wall_time_s, **facts}
