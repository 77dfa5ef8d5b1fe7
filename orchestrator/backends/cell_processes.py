"""A local cell's processes: started in a session of their own, waited on without reaping, and the
whole group killed however the cell ends, so that nothing a cell started outlives it (the local
backend's rule, docs/RUN-GUARANTEES.md); `RunningCells` lets another thread kill them all."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable


class RunningCells:
    """The cells' process groups running now, so that another thread can kill them all
    (LocalBackend.stop_cells: a concurrent dispatch's cancel). A group leaves the set, under the
    lock, before its leader is reaped: a group id killed from here is never one handed on to
    another process. Once stopped, a cell started later is killed as it starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen] = set()
        self._stopped = False

    def add(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._processes.add(process)
            if self._stopped:
                _signal_group(process)

    def discard(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._processes.discard(process)

    def kill_all(self) -> None:
        with self._lock:
            self._stopped = True
            for process in self._processes:
                _signal_group(process)


def run_in_own_process_group(command: list[str], *, timeout: float | None, running: RunningCells | None = None,
                             **popen_options) -> int | None:
    """Run `command` in a new session (so a new process group) and wait for it; its exit code, or
    None when it ran past `timeout` seconds. However it ends (exit, timeout, an exception such as
    KeyboardInterrupt, `running.kill_all()` from another thread), the whole group is killed before
    this returns: a cell's children (a data loader's workers, a compiler daemon, anything it
    started in the background) never outlive it and never skew the next cell's measurement. A
    child that starts its own session leaves the group; nothing short of a container (the Docker
    backend) can hold on to that one."""
    process = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent_hook(),
                               **popen_options)
    try:
        if running is not None:
            running.add(process)
        ended = _wait_without_reaping(process, timeout)
    finally:
        if running is not None:
            running.discard(process)
        _kill_group(process)
    return process.returncode if ended else None


def _wait_without_reaping(process: subprocess.Popen, timeout: float | None) -> bool:
    """Wait until the group's leader exits (True) or `timeout` passes (False), leaving it a zombie:
    while it is not reaped its process-group id cannot be handed to another process, so killing
    the group afterwards can only reach the cell's own processes."""
    if not hasattr(os, "waitid"):  # not on every platform: reap it; killpg's tiny race remains there
        try:
            process.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.001
    while True:
        flags = os.WEXITED | os.WNOWAIT | (os.WNOHANG if deadline is not None else 0)
        if os.waitid(os.P_PID, process.pid, flags) is not None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)  # the same back-off subprocess.Popen.wait uses


def _signal_group(process: subprocess.Popen) -> None:
    """SIGKILL every process in the cell's group (its leader not yet reaped, so the id is the cell's)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL every process in the cell's group, then reap the leader."""
    _signal_group(process)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass  # stuck in the kernel (uninterruptible I/O); it dies when that returns


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent_hook() -> Callable[[], None] | None:
    """Linux: a hook subprocess runs in the child between fork and exec, asking the kernel to
    SIGKILL the cell when the orchestrator dies, SIGKILL included: otherwise a killed orchestrator
    leaves the cell running unsupervised, its timeout never enforced. The setting survives exec,
    is not inherited by the cell's own children (the orchestrator's signal handlers kill the
    group; an orchestrator killed with SIGKILL cannot, so a grandchild may survive it) and fires
    when the thread that started the cell ends: each cell is started by the thread that waits on
    it (the main thread, or one of ConcurrentDispatch's, which outlives its cells).

    Elsewhere there is no such call: best effort, the group is still killed on every ending the
    orchestrator lives to see (exit, timeout, Ctrl-C, SIGTERM, SIGHUP)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up now, not after fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the orchestrator died before the call took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return die_with_parent
