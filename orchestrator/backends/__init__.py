"""Backends run one cell each and hand back its Result; they share the cell contract's host half here
(the Backend base class and the Dispatch are in contract.py).

A backend writes the cell document (`cell_request`, workloads/common/cell.py) into the cell's work
folder, runs the framework's cell command with `--cell FILE` somewhere (`python -m workloads` in a
virtual environment or a container, or another language's: metadata.toml's [language]), then
`collect` turns the exit code and the JSON file it wrote into the final Result: exit 0 = ok,
EXIT_UNSUPPORTED = unsupported, anything else or no file = failed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from orchestrator import numerals, results
from orchestrator.backends.contract import (Backend, CellJob, ConcurrentDispatch, Dispatch,  # noqa: F401 (the contract, re-exported)
                                           SerialDispatch)
from workloads.common.cell import CellRequest
from workloads.common import safe_files
from workloads.common.result import EXIT_OK, EXIT_UNSUPPORTED, Cell, Result, SchemaError

STDERR_TAIL_CHARS = 4000

# The longest a cell may be given: a week. An infinite or astronomically long timeout is none at
# all, and overflows the clocks that enforce it (the orchestrator's, and the container's own
# deadline: container_lifetime.py).
LONGEST_TIMEOUT_S = 7 * 24 * 3600

# The variables that change how fast a cell runs which a cell inherits from the host, in every
# backend alike (the local backend's subprocess, the Docker backend's container): thread pools,
# their placement and the CPU math libraries' code paths. A host that sets OMP_NUM_THREADS means
# every cell to run so, whichever backend runs it; the cell records what it saw
# (provenance.environment). Deliberately not inherited: a framework's compiler switches (XLA_FLAGS,
# TF_*: a switch is a framework option, workloads/common/options.py, so that it is part of the
# cell), NVIDIA_TF32_OVERRIDE (the precision decides it, workloads/common/naming.py), and GPU
# selection (--gpus: CUDA_VISIBLE_DEVICES locally, a device request in Docker, where the host's
# numbering would name the wrong device).
SPEED_VARIABLES = (
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_DYNAMIC", "OMP_WAIT_POLICY", "OMP_SCHEDULE",
    "OMP_MAX_ACTIVE_LEVELS", "OMP_THREAD_LIMIT", "KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_HW_SUBSET",
    "MKL_NUM_THREADS", "MKL_DYNAMIC", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "MKL_DEBUG_CPU_TYPE",
    "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "GOTO_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS",
)


def inherited_speed_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The SPEED_VARIABLES the host sets, as every backend hands them to its cells."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SPEED_VARIABLES if name in environ}


CELL_DOCUMENT = "cell.json"  # the cell document's name in the cell's work folder


def cell_request(cell: Cell, *, device: str, data_dir: str, out: str, parity: str | None = None,
                 export_onnx: str | None = None, onnx_model: str | None = None,
                 threads: int | None = None) -> CellRequest:
    """The cell document every backend hands to the cell command (`... --cell FILE`), its paths as the
    workload sees them: `data_dir`, the dataset folder; `parity` and `onnx_model`, folders relative
    to it; `export_onnx`, the export's folder; `out`, the result file; `threads`, the run's --threads
    (None: the cell takes the CPUs it may use, docs/FAIRNESS.md: same-threads)."""
    root = data_dir.rstrip("/")
    return CellRequest(cell=cell, device=device, data_dir=data_dir, out=out,
                       parity=f"{root}/{parity}" if parity else None, export_onnx=export_onnx or None,
                       onnx_model=f"{root}/{onnx_model}" if onnx_model else None, threads=threads)


def write_cell_document(request: CellRequest, folder: Path) -> Path:
    """Write the document into the cell's work folder, readable by a container's user (not us)."""
    path = folder / CELL_DOCUMENT
    request.write(path)
    path.chmod(0o644)
    return path


def tail(path: Path, chars: int = STDERR_TAIL_CHARS) -> str | None:
    try:
        with open(path, "rb") as stream:
            stream.seek(0, 2)
            size = stream.tell()
            stream.seek(max(0, size - chars))
            return stream.read().decode("utf-8", errors="replace") or None
    except OSError:
        return None


def collect(cell: Cell, *, exit_code: int | None, result_file: Path, log_path: Path,
            timed_out_after: float | None = None) -> Result:
    """Turn what a finished (or killed) workload left behind into its final Result, filed under the
    job's own `cell`. What the cell wrote is untrusted (docs/RUN-GUARANTEES.md, the trust model):
    read bounded, never through a link, type-checked (results.read_cell_file); a result that names
    another cell, or says ok without what an ok result carries, is that cell failed, with why."""
    if timed_out_after is not None:
        result = Result(cell=cell, status="timeout",
                        reason=f"timed out after {timed_out_after:g} s; the cell was killed")
    elif not os.path.lexists(result_file):
        result = Result(cell=cell, status="failed", reason=f"exit code {exit_code}; no result written")
    else:
        try:
            result = results.read_cell_file(result_file)
        except SchemaError as error:
            result = Result(cell=cell, status="failed", reason=f"unreadable result: {error}")
        if exit_code == EXIT_UNSUPPORTED:
            result.status = "unsupported"
            result.reason = result.reason or f"exit code {exit_code} (unsupported) with no reason given"
        elif exit_code != EXIT_OK:
            result.status = "failed"
            result.reason = result.reason or f"exit code {exit_code}"
        elif result.status != "ok":
            result.reason = result.reason or f"status {result.status} with exit code 0"
        result = results.adopt(cell, result)
    if result.status != "ok":
        result.stderr_tail = tail(log_path)
    return result


def remove_work(log, work: Path) -> None:
    """Remove a cell's work folder (never through a link) once the cell has ended, however it
    ended; a failure is said in one line and never hides the cell's own outcome or an interrupt."""
    try:
        safe_files.remove_tree(work)
    except OSError as error:
        log(f"could not remove the work folder {work} ({error}); remove it by hand")


def unsupported(cell: Cell, reason: str) -> Result:
    """A cell that cannot run on this host, decided before anything starts."""
    return Result(cell=cell, status="unsupported", reason=reason)


def _capability(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def gpu_mismatch(variant, gpus: list[tuple[str, str]], selected: str | None = None) -> str | None:
    """Why a CUDA build cannot target this host's GPU (decided before the workload starts), or None.

    `gpus` is [(name, compute capability)]; `selected` the --gpus indices, when given."""
    limit = getattr(variant, "max_compute_capability", None)
    if not limit or not gpus:
        return None
    if selected:
        indices = {numerals.whole_number(index, 0, 9999) for index in selected.split(",")} - {None}  # UUIDs aside
        gpus = [gpu for number, gpu in enumerate(gpus) if number in indices] or gpus
    for name, capability in gpus:
        try:
            too_new = _capability(capability) > _capability(limit)
        except ValueError:
            continue
        if too_new:
            build = f"CUDA {variant.cuda}" if variant.cuda else f"the {variant.name} build"
            return (f"unsupported on this GPU: {name} has compute capability {capability}; {build} "
                    f"targets up to {limit}, so it needs a build for {capability} or newer")
    return None
