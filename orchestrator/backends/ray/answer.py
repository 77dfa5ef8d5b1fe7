"""A node's answer: what the Ray task on a node hands back for one cell, and the driver's check of it.

Made on the node (`make`, called by node.py), checked on the driver (`check`, and `error_outcome`
for a task that ended in one of Ray's errors instead, both called by driver.py); this module is the
one place that says what an answer holds, so the two sides cannot drift apart.

An answer is plain values only (docs/RUN-GUARANTEES.md, "What a Ray node can do"): the result as the
JSON bytes its file holds, the cell's log as bytes, and a few short facts. The driver treats it as
untrusted data: a dict with exactly FIELDS, each of its type and bounded; the result read by the
bounded reader (results.parse_cell_bytes) and filed under the job's own cell (results.adopt).
Anything else is that cell failed with a one-line reason; nothing a node sends ever names a path.
(Ray unpickles what a task returns, so this cannot stop a hostile member of the cluster from
running code on the driver: cluster membership is full trust. It keeps a node that runs other code
than ours, or a broken one, from putting anything but checked values into the results.)
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from orchestrator import results
from orchestrator.backends import LONGEST_TIMEOUT_S
from orchestrator.errors import first_line, printable
from workloads.common.result import Cell, Result, SchemaError

LOG_LIMIT_BYTES = 64 << 20  # a cell's log shipped back to the driver: its last 64 MiB
# A task runs one cell (at most a week: LONGEST_TIMEOUT_S) and installs its dataset first.
LONGEST_TASK_S = 2 * LONGEST_TIMEOUT_S
LONGEST_HOSTNAME = 253  # a DNS name's longest
# Ray's GPU ids for the task: indices, or device UUIDs (GPU-...) where CUDA_VISIBLE_DEVICES names them.
GPU_IDS = re.compile(r"[A-Za-z0-9-]{1,64}(,[A-Za-z0-9-]{1,64}){0,63}")
GIT_REVISION = re.compile(r"[0-9a-f]{7,64}(-dirty)?")  # host.git_revision(): HEAD, -dirty when changed
UNKNOWN_REVISION = "unknown"  # provenance.git_revision of a node whose checkout has no git revision


def log_tail(path: Path) -> bytes:
    """The last LOG_LIMIT_BYTES of the cell's log on the node; nothing when it wrote none."""
    if not path.is_file():
        return b""
    with open(path, "rb") as stream:
        stream.seek(max(0, path.stat().st_size - LOG_LIMIT_BYTES))
        return stream.read(LOG_LIMIT_BYTES)  # never more, even if it grew meanwhile


def make(result: Result, log: bytes, wall_time_s: float, *, hostname: str, gpus: str | None,
         git_revision: str | None) -> dict:
    """On the node: the answer for one cell, plain values only (FIELDS). `git_revision`: the
    revision of the checkout this node ran (host.git_revision() there), never the driver's."""
    return {"result": result.to_json().encode("utf-8"), "log": log, "wall_time_s": wall_time_s,
            "hostname": hostname, "gpus": gpus, "git_revision": git_revision}


@dataclass(frozen=True)
class CheckedAnswer:
    result: Result  # filed under the job's own cell: failed when the node's named another, or was hollow
    log: bytes
    wall_time_s: float
    hostname: str
    gpus: str | None
    git_revision: str | None


class Refused(Exception):
    """Why an answer is not one, in one printable line."""


def _bytes_problem(value, limit: int) -> str | None:
    if type(value) is not bytes:
        return f"must be bytes, not {type(value).__name__}"
    return f"larger than {limit} bytes" if len(value) > limit else None


def _time_problem(value) -> str | None:
    if type(value) not in (int, float):
        return f"must be a number, not {type(value).__name__}"
    if not (math.isfinite(value) and 0 <= value <= LONGEST_TASK_S):
        return f"{value!r} is not a number of seconds from 0 to {LONGEST_TASK_S}"
    return None


def _hostname_problem(value) -> str | None:
    if type(value) is not str:
        return f"must be a string, not {type(value).__name__}"
    if not 0 < len(value) <= LONGEST_HOSTNAME or not all("!" <= character <= "~" for character in value):
        return f"must be 1 to {LONGEST_HOSTNAME} printable ASCII characters without spaces"
    return None


def _pattern_problem(pattern: re.Pattern, what: str):
    def problem(value) -> str | None:
        if value is None:
            return None
        if type(value) is not str:
            return f"must be a string or null, not {type(value).__name__}"
        return None if pattern.fullmatch(value) else f"not {what}"
    return problem


# Each field of an answer and what is wrong with a value for it (None: nothing).
FIELDS = {
    "result": lambda value: _bytes_problem(value, results.LONGEST_CELL_FILE),
    "log": lambda value: _bytes_problem(value, LOG_LIMIT_BYTES),
    "wall_time_s": _time_problem,
    "hostname": _hostname_problem,
    "gpus": _pattern_problem(GPU_IDS, "a list of GPU ids (0,1 or GPU-<uuid>)"),
    "git_revision": _pattern_problem(GIT_REVISION, "a git revision (hex, -dirty when changed)"),
}


def _named(keys) -> str:
    shown = [printable(repr(key))[:40] for key in list(keys)[:3]]
    return ", ".join(shown) + (", ..." if len(keys) > 3 else "")


def check(answer: object, cell: Cell, node: str) -> CheckedAnswer:
    """On the driver: `answer` (what ray.get gave back for `cell`'s task on `node`) as checked
    values, or Refused with why. The result is filed under `cell` (results.adopt): one naming
    another cell, or saying ok without what an ok result carries, comes back as that cell failed."""
    if type(answer) is not dict:
        raise Refused(f"node {node} answered with a {type(answer).__name__[:60]}, not a dict of plain values")
    unknown = [key for key in answer if key not in FIELDS]
    missing = [key for key in FIELDS if key not in answer]
    if unknown or missing:
        said = "; ".join(part for part in (f"unknown field(s) {_named(unknown)}" if unknown else "",
                                           f"missing {', '.join(missing)}" if missing else "") if part)
        raise Refused(f"node {node} answered with other fields than an answer's ({said})")
    for name, problem_of in FIELDS.items():
        problem = problem_of(answer[name])
        if problem:
            raise Refused(f"node {node} answered with a bad {name} ({problem})")
    try:
        result = results.parse_cell_bytes(answer["result"], f"the result from node {node}")
    except SchemaError as error:
        raise Refused(str(error)) from None
    return CheckedAnswer(results.adopt(cell, result), answer["log"], float(answer["wall_time_s"]),
                         answer["hostname"], answer["gpus"], answer["git_revision"])


# What a Ray error from fetching a cell's answer means to the driver (error_outcome):
LOST = "lost"  # the node or its worker went away mid-task: tried again on another node
FAILED = "failed"  # that cell failed: the task broke, or Ray says it cannot finish there, or was cancelled


def error_outcome(error: BaseException, exceptions, node: str) -> tuple[str, str]:
    """(LOST or FAILED, one printable line saying why) for what ray.get raised for a cell's task on
    `node`. `exceptions`: Ray's own (ray.exceptions), whose hierarchy decides; Ray wraps an error
    the task itself raised in RayTaskError (a subclass of the error's class too, where it can be),
    so the losses, which Ray raises as they are, are tested first. A task cancelled is one someone
    else cancelled (`ray cancel`, the cluster): a stopping run's tasks end in the driver's cancel(),
    not here."""
    said = first_line(error)
    lost = (exceptions.WorkerCrashedError, exceptions.NodeDiedError, exceptions.ObjectLostError,
            exceptions.TaskUnschedulableError, exceptions.LocalRayletDiedError, exceptions.RaySystemError)
    if isinstance(error, exceptions.OutOfMemoryError):  # Ray's memory monitor killed the task's worker
        return LOST, f"lost on node {node}: OutOfMemoryError (the node ran low on memory)"
    if isinstance(error, lost):
        return LOST, f"lost on node {node}: {type(error).__name__}"
    if isinstance(error, exceptions.TaskCancelledError):
        return FAILED, (f"its task was cancelled on node {node}, not by this run (`ray cancel`, or the "
                        f"cluster cancelled it); run it again with --resume")
    if isinstance(error, exceptions.RayTaskError):  # the node side itself broke: not retried
        return FAILED, f"on node {node}: {first_line(error.cause or error)}"
    if isinstance(error, exceptions.RuntimeEnvSetupError):  # its first line is only "Failed to set up ..."
        said = first_line(getattr(error, "error_message", None) or error)
        return FAILED, (f"node {node} could not set up the task's runtime environment ({said}); fix that "
                        f"node's Ray, then run it again with --resume")
    if isinstance(error, (exceptions.ObjectStoreFullError, exceptions.OutOfDiskError)):
        return FAILED, (f"node {node} had no room for the cell's answer ({type(error).__name__}: {said}); "
                        f"free its object store or disk, then run it again with --resume")
    if isinstance(error, exceptions.RayError):
        return FAILED, f"Ray failed the task on node {node} ({type(error).__name__}: {said})"
    return FAILED, f"the answer from node {node} could not be read ({type(error).__name__}: {said})"
