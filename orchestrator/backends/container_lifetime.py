"""How long a cell container may live, whose it is, and the clean-up of those whose run has ended.

A cell container must not outlive its run (docs/RUN-GUARANTEES.md): the orchestrator removes it
however the cell ends, but an orchestrator killed outright (SIGKILL, the out-of-memory killer, a
lost machine) removes nothing. So each container carries

- a deadline of its own: its command runs under coreutils' `timeout -s KILL`, which ends the
  container from inside at its time limit plus a grace, with no orchestrator alive to do it (every
  image's base is Debian or Ubuntu, whose coreutils has `timeout`); the deadline is a label too;
- labels naming its owner: the orchestrator's pid, that process's start time and its host.

At the start of a run the containers of runs that have ended are removed
(`remove_containers_of_ended_runs`): those whose deadline has passed, and those whose owner was on
this host and is no longer alive. A live run's containers are never touched; a container whose
owner cannot be judged (another host, labels missing or malformed) is kept until its deadline.
The labels are read as untrusted text: bounded, parsed strictly, never a pid of 0 or below.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import socket
import threading
import time
from typing import Iterator, Mapping

import docker

from orchestrator.backends import LONGEST_TIMEOUT_S

CELL_LABEL = "io.rosetta-bench.cell"  # value: the cell's key
SESSION_LABEL = "io.rosetta-bench.session"  # value: one id per DockerBackend, to tell runs apart
OWNER_PID_LABEL = "io.rosetta-bench.owner-pid"  # the orchestrator process that created the container
OWNER_STARTED_LABEL = "io.rosetta-bench.owner-started"  # that process's start (clock ticks after boot)
OWNER_HOST_LABEL = "io.rosetta-bench.owner-host"  # the host that pid belongs to
DEADLINE_LABEL = "io.rosetta-bench.deadline"  # Unix time by which the container has ended itself

# The container's own deadline comes this long after the cell's time limit, so that the
# orchestrator's kill (a "timeout" result, its logs read) comes first whenever it is alive.
DEADLINE_GRACE_S = 60
# The most a pid can be on Linux (PID_MAX_LIMIT): a larger label is malformed, never a pid.
_PID_MAX = 1 << 22
_PID = re.compile(r"[1-9][0-9]{0,6}")
_TICKS = re.compile(r"[0-9]{1,20}")
_DEADLINE = re.compile(r"[0-9]{1,12}")


def container_lifetime_s(timeout: float | None) -> int:
    """Whole seconds a cell container may run: its time limit (a cell without one gets the longest
    a cell may be given) plus DEADLINE_GRACE_S."""
    limit = LONGEST_TIMEOUT_S if timeout is None else min(timeout, LONGEST_TIMEOUT_S)
    return math.ceil(limit) + DEADLINE_GRACE_S


def deadline_entrypoint(image_attrs: dict, timeout: float | None) -> list[str] | None:
    """The image's ENTRYPOINT run under `timeout -s KILL`: killed with its whole process group at
    the deadline, the container ends with it (Docker's init exits when its child does). None when
    the image's ENTRYPOINT is not an exec-form list of strings (images/Dockerfile.j2 writes one)."""
    entrypoint = ((image_attrs or {}).get("Config") or {}).get("Entrypoint")
    if not (isinstance(entrypoint, list) and entrypoint and all(isinstance(part, str) for part in entrypoint)):
        return None
    return ["timeout", "-s", "KILL", str(container_lifetime_s(timeout)), *entrypoint]


def lifetime_labels(timeout: float | None, *, now: float | None = None) -> dict[str, str]:
    """The owner and deadline labels of a cell container that this process creates now."""
    now = time.time() if now is None else now
    labels = {OWNER_PID_LABEL: str(os.getpid()), OWNER_HOST_LABEL: socket.gethostname(),
              DEADLINE_LABEL: str(math.ceil(now + container_lifetime_s(timeout)))}
    started = process_start_ticks(os.getpid())
    if started is not None:
        labels[OWNER_STARTED_LABEL] = str(started)
    return labels


def process_start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks after boot, /proc/PID/stat's 22nd field), which tells a
    reused pid from the process that had it; None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            text = stream.read(4096).decode("ascii", errors="replace")
        return int(text[text.rindex(")") + 2:].split()[19])  # fields after the command name start at 3
    except (OSError, ValueError, IndexError):
        return None


def _label(labels: Mapping[str, str], name: str, pattern: re.Pattern) -> int | None:
    value = labels.get(name)
    if isinstance(value, str) and pattern.fullmatch(value):
        return int(value)
    return None


def _alive(pid: int, started: int | None) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: sends nothing, says whether the pid exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, as another user's
    if started is not None:
        now_started = process_start_ticks(pid)
        if now_started is not None and now_started != started:
            return False  # the pid has been given to another process since
    return True


def run_has_ended(labels: Mapping[str, str], *, now: float | None = None, host: str | None = None) -> bool:
    """Whether a cell container's labels say its run has ended: its deadline has passed, or its
    owner was a process on this host that is gone. Anything else (another host's owner, labels
    missing or malformed) counts as a live run's."""
    now = time.time() if now is None else now
    deadline = _label(labels, DEADLINE_LABEL, _DEADLINE)
    if deadline is not None and now > deadline:
        return True
    pid = _label(labels, OWNER_PID_LABEL, _PID)
    if pid is None or pid > _PID_MAX or labels.get(OWNER_HOST_LABEL) != (host or socket.gethostname()):
        return False
    return not _alive(pid, _label(labels, OWNER_STARTED_LABEL, _TICKS))


def remove_containers_of_ended_runs(client: docker.DockerClient) -> int:
    """Remove the cell containers of runs that have ended (`run_has_ended`); how many were removed."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": CELL_LABEL}):
        if not run_has_ended(container.labels):
            continue
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass  # it went while we looked
        except docker.errors.APIError as error:
            if error.status_code != 409:  # 409: its removal is under way already
                raise
    return removed


def remove_leftover_containers(client: docker.DockerClient, *, session: str | None = None) -> int:
    """Remove containers labelled as Rosetta Bench cells, live or not (after Ctrl-C, or a crash of an
    earlier run); only one backend's when `session` is given. Returns how many were removed."""
    label = f"{SESSION_LABEL}={session}" if session else CELL_LABEL
    removed = 0
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass  # it went while we looked
    return removed


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Ctrl-C (SIGINT) inside the block waits for its end, then raises KeyboardInterrupt: a second
    Ctrl-C cannot cut a clean-up short and leave a container behind. Only the main thread receives
    signals in Python, so elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not received or previous == signal.SIG_IGN:
        return
    if callable(previous):
        previous(signal.SIGINT, None)  # Python's own handler raises KeyboardInterrupt
    else:
        raise KeyboardInterrupt  # SIG_DFL (or one set outside Python) would end the process


class CellsStopped(Exception):
    """The backend's cells were stopped (a concurrent dispatch's cancel): no new container starts."""


class StartedContainers:
    """The cell containers a backend has created and not yet removed, by name, so that another
    thread can kill them all (DockerBackend.stop_cells: a concurrent dispatch's cancel). A container
    is created and started under the lock, so the kill finds every container that exists and never
    runs between a create and its start; once stopped, no cell's container is created again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._stopped = False

    @contextlib.contextmanager
    def starting(self, name: str) -> Iterator[None]:
        """Hold the lock while the container named `name` is created and started; CellsStopped
        instead when the cells were stopped."""
        with self._lock:
            if self._stopped:
                raise CellsStopped
            self._names.add(name)
            yield

    def removed(self, name: str) -> None:
        with self._lock:
            self._names.discard(name)

    def stop_all(self) -> list[str]:
        """Refuse every later start and hand back the names of the containers there are now."""
        with self._lock:
            self._stopped = True
            return sorted(self._names)
