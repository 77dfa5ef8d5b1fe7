"""A run's results folder: created exclusively, checked before use, locked for the whole run.

What the run writes there and what it may remove (docs/RUN-GUARANTEES.md):

    run.json            what the run recorded about itself, one entry per invocation (read and
                        appended to here only: read_run_record, append_invocation)
    cells/<key>.json    one result per cell (and repeat)
    packages/<hex>.txt  each distinct package list the cells ran with, named by its sha256
    logs/<key>.log      each cell's stdout and stderr
    .work/<key>/        each cell's scratch folder, removed after the cell (the only thing removed)
    report.md, .html    the report; parity.md, parity.json for `parity`
    parity/             run-matrix's parity check: a run folder of its own, by these same rules
    .run.lock           held (flock) by the run using the folder

Nothing the run creates or removes is reached through a link (workloads/common/safe_files.py).
"""
from __future__ import annotations

import datetime
import errno
import fcntl
import os
import stat
from pathlib import Path

from orchestrator import cpu_peak
from orchestrator.errors import UserError
from workloads.common import safe_files, strict_json
from workloads.common.result import write_json_atomic
from workloads.common.strict_json import json_kind

RESULTS_ROOT = Path("results")
PARITY_PREFIX = "parity-"
LOCK_FILE = ".run.lock"
WORK_FOLDER = ".work"
LOGS_FOLDER = "logs"
PACKAGES_FOLDER = "packages"
PARITY_FOLDER = "parity"  # run-matrix's parity check, beside the cells (orchestrator/parity.py)
# What the run writes: folders, then files. A link at any of them, or the wrong kind, is refused.
FOLDERS = ("cells", LOGS_FOLDER, WORK_FOLDER, PACKAGES_FOLDER, PARITY_FOLDER)
CODE_PAGE = "code.html"                         # the Rosetta view, written beside report.html
COMPARE_PAGES = ("compare.md", "compare.html")  # `compare BASE NEW` writes them into NEW's folder
CELLS_CSV = "cells.csv"                         # `export`'s default file
FILES = ("run.json", "report.md", "report.html", CODE_PAGE, "parity.md", "parity.json", "onnx-export.json",
         *COMPARE_PAGES, CELLS_CSV, LOCK_FILE)
MODE_BENCHMARK, MODE_PARITY = "benchmark", "parity"
RUN_RECORD = "run.json"
# run.json may come from elsewhere (a folder copied from another machine) like the cells: read
# bounded, nesting capped (an invocation nests five levels), every field the host reads back typed.
LONGEST_RUN_RECORD = 16 << 20  # bytes
DEEPEST_RUN_RECORD = 32  # levels of lists and objects
LARGEST_SEED = 2 ** 32 - 1  # matrix.new_seed's range


def new_results_dir(root: Path = RESULTS_ROOT, prefix: str = "") -> Path:
    """Create and return a fresh run folder, `root/<prefix><YYYYmmdd-HHMMSS>`; a name already
    taken (another run in the same second) gets a suffix, -2, -3, ... (an exclusive mkdir)."""
    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True)  # the root itself (and above) are the user's business
        name = prefix + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        for number in range(1, 1000):
            candidate = root / (name if number == 1 else f"{name}-{number}")
            try:
                candidate.mkdir(mode=safe_files.FOLDER_MODE)
                return candidate
            except FileExistsError:
                continue
    except OSError as error:
        raise UserError(f"cannot create a run folder under {root}/ ({error.strerror or error}); "
                        f"pass --results-dir DIR on a writable disk") from None
    raise UserError(f"{root}/: 999 run folders named {name}; pass --results-dir DIR")


def read_run_record(folder: Path) -> dict:
    """`folder`'s run.json, {"invocations": [object, ...]} ({"invocations": []} when it has none),
    each invocation's `mode` and `seed`, where given, of their type and range. Anything else is
    refused in one UserError line, never read past LONGEST_RUN_RECORD bytes, through a link, from
    a FIFO, nor with NaN or Infinity: the one reader of run.json for every command that resumes
    or adds to a run (docs/RUN-GUARANTEES.md, the trust model), so that none drops its history."""
    path = Path(folder) / RUN_RECORD
    fix = "move it away (it holds the run's history) or pass another --results-dir"
    try:
        data = safe_files.read_bytes_bounded(path, LONGEST_RUN_RECORD)
    except (FileNotFoundError, NotADirectoryError):  # no run here yet (claim() refuses a folder that is a file)
        return {"invocations": []}
    except safe_files.UnsafePath as error:
        if os.path.isdir(path) and not os.path.islink(path):  # as check_kinds says it
            raise UserError(f"{path} is a folder where the run writes a file; {fix}") from None
        raise UserError(f"{error}; {fix}") from None
    except OSError as error:
        raise UserError(f"{path}: cannot be read ({error.strerror or error}); {fix}") from None
    try:
        record = strict_json.loads(data, DEEPEST_RUN_RECORD)
    except strict_json.JSONRefused as error:
        raise UserError(f"{path}: {error}; {fix}") from None
    problem = _run_record_problem(record)
    if problem:
        raise UserError(f"{path}: {problem}; {fix}")
    return record


def append_invocation(folder: Path, invocation: dict) -> None:
    """One more entry under run.json's `invocations`, written atomically; an unreadable run.json is
    refused (read_run_record), never overwritten: it holds the run's history."""
    history = read_run_record(folder)["invocations"]
    write_json_atomic(Path(folder) / RUN_RECORD, {"invocations": [*history, invocation]})


def _run_record_problem(record) -> str | None:
    if not isinstance(record, dict):
        return f"not a run record (a JSON object), but {json_kind(record)}"
    invocations = record.get("invocations")
    if not isinstance(invocations, list):
        return f"its invocations are {json_kind(invocations)}, not a list"
    for number, invocation in enumerate(invocations, 1):
        if not isinstance(invocation, dict):
            return f"invocation {number} is {json_kind(invocation)}, not an object"
        if "mode" in invocation and invocation["mode"] not in (MODE_BENCHMARK, MODE_PARITY):
            return (f"invocation {number}'s mode is {str(invocation['mode'])[:40]!r}, not {MODE_BENCHMARK} or "
                    f"{MODE_PARITY}")
        seed = invocation.get("seed", 0)
        if type(seed) is not int or not 0 <= seed <= LARGEST_SEED:
            return f"invocation {number}'s seed is {str(seed)[:40]!r}, not a whole number from 0 to {LARGEST_SEED}"
        if "cpu_peak" in invocation and (problem := cpu_peak.record_problem(invocation["cpu_peak"])):
            return f"invocation {number}: {problem}"
    return None


def run_mode(folder: Path) -> str:
    """parity for a folder named parity-*, else what run.json's last invocation says (benchmark
    without one); a run.json that cannot be read is refused (read_run_record)."""
    if folder.name.startswith(PARITY_PREFIX):
        return MODE_PARITY
    invocations = read_run_record(folder)["invocations"]
    return MODE_PARITY if invocations and invocations[-1].get("mode") == MODE_PARITY else MODE_BENCHMARK


def latest_results_dir(root: Path = RESULTS_ROOT) -> Path:
    """The newest benchmark run under `root` (by its run.json), for `run-matrix --resume`.
    Parity folders and linked run folders are not candidates; one whose run.json cannot be read
    is refused rather than passed over (the run it holds may be the one meant)."""
    runs = []
    for record in Path(root).glob("*/run.json"):
        folder = record.parent
        if folder.is_symlink() or record.is_symlink() or run_mode(folder) != MODE_BENCHMARK:
            continue
        try:
            runs.append((record.lstat().st_mtime, folder))
        except OSError:
            continue
    if not runs:
        raise UserError(f"--resume: no earlier run under {root}/; pass --results-dir DIR of the run to continue")
    return max(runs)[1]


class RunLock:
    """The results folder, checked and locked; `close()` (or the with-block's end) releases it."""

    def __init__(self, folder: Path, descriptor: int):
        self.folder = folder
        self._descriptor = descriptor

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # releases the flock
            self._descriptor = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def claim(folder: Path, *, resume: bool = False, force: bool = False) -> RunLock:
    """Make `folder` the results folder of this run: create it if missing, refuse it when it is
    unusable (a file, under a file, not writable, a link or the wrong kind where the run writes),
    when it already holds something and neither --resume nor --force says to go on, or when
    another run holds its lock. Every refusal is one UserError line."""
    folder = Path(folder)
    _make_results_folder(folder)
    check_kinds(folder)
    lock_path = folder / LOCK_FILE
    present = sorted(name for name in os.listdir(folder) if name != LOCK_FILE)
    if present and not (resume or force):
        if os.path.lexists(lock_path):
            _lock(lock_path, folder).close()  # a busy folder says so first
        raise UserError(f"{folder} already holds results ({', '.join(present[:3])}"
                        f"{', ...' if len(present) > 3 else ''}); pass --resume to continue that run, "
                        f"--force to run into it anyway, or a new --results-dir")
    return _lock(lock_path, folder)


def _make_results_folder(folder: Path) -> None:
    try:
        if os.path.lexists(folder) and not folder.is_dir():
            raise UserError(f"--results-dir {folder} is a file, not a folder; pass a folder (it is created "
                            f"when missing)")
        folder.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise UserError(f"--results-dir {folder}: a part of that path is a file; pass a folder that can be "
                        f"created") from None
    except OSError as error:
        raise UserError(f"--results-dir {folder}: cannot create it ({error.strerror or error}); pass a "
                        f"writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--results-dir {folder} is not writable; fix its permissions or pass another folder")


def check_kinds(folder: Path) -> None:
    """Refuse (UserError) a link, or the wrong kind, at any path below `folder` the run writes."""
    expected = [(name, True) for name in FOLDERS] + [(name, False) for name in FILES]
    for name, is_folder in expected:
        path = folder / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            raise UserError(f"{path}: cannot be read ({error.strerror or error}); fix its permissions") from None
        if stat.S_ISLNK(mode):
            raise UserError(f"{path} is a symbolic link; a run never writes or deletes through links: "
                            f"remove the link or pass another --results-dir")
        if is_folder and not stat.S_ISDIR(mode):
            raise UserError(f"{path} is a file where the run keeps a folder; move it away or pass another "
                            f"--results-dir")
        if not is_folder and not stat.S_ISREG(mode):
            raise UserError(f"{path} is {'a folder' if stat.S_ISDIR(mode) else 'not a regular file'} where "
                            f"the run writes a file; move it away or pass another --results-dir")


def _lock(lock_path: Path, folder: Path) -> RunLock:
    try:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             safe_files.FILE_MODE)
    except OSError as error:
        raise UserError(f"{lock_path}: cannot open the run's lock ({error.strerror or error}); "
                        f"pass another --results-dir") from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(descriptor, 64).decode("ascii", errors="replace").strip()
        os.close(descriptor)
        raise UserError(f"another run{f' (process {holder})' if holder else ''} is writing into {folder}; "
                        f"wait for it to end or pass another --results-dir") from None
    os.fchmod(descriptor, safe_files.FILE_MODE)
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    return RunLock(folder, descriptor)


def clear_work(folder: Path) -> None:
    """Remove `.work/` (what an interrupted or killed run left behind); never follows a link.
    Only called with the folder's lock held, so no other run is using it."""
    safe_files.remove_tree(Path(folder) / WORK_FOLDER, ignore_errors=True)


def cell_paths(folder: Path, key: str) -> tuple[Path, Path]:
    """A cell's scratch folder (`.work/<key>`, not created) and its log (`logs/<key>.log`, created
    fresh and empty): absolute, for the cell runs in another working directory, but never resolved
    through a link; `.work` and `logs` themselves are refused if they are links."""
    folder = Path(os.path.abspath(folder))
    work_root = safe_files.make_folder(folder / WORK_FOLDER, below=folder)
    key = safe_files.safe_name(key)  # never a path (docs/RUN-GUARANTEES.md, the trust model)
    log_path = folder / LOGS_FOLDER / f"{key}.log"
    safe_files.create_fresh_file(log_path, below=folder)
    return work_root / key, log_path


def write_failed(path: Path, error: OSError, folder: Path, *, finished: int | None = None,
                 then: str = "") -> UserError:
    """The one line for a write that failed (a full disk, a file limit, a folder gone)."""
    reason = "no space left on the disk" if error.errno == errno.ENOSPC else (error.strerror or str(error))
    kept = (f"the {finished} cell(s) finished are kept in {folder}" if finished is not None
            else f"the finished cells in {folder} are kept")
    return UserError(f"cannot write {path}: {reason}; {kept}{'; ' + then if then else ''}")
