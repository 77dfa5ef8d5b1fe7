"""What a cell's container is: the user it runs as, what it sees (no network, a read-only root,
the datasets read-only, one writable folder) and what bounds it (memory, processes, tmpfs and log
sizes, its own deadline), as the Docker SDK's create options."""
from __future__ import annotations

import os
from pathlib import Path

import docker

from orchestrator.backends import CellJob, inherited_speed_variables
from orchestrator.backends.container_lifetime import CELL_LABEL, SESSION_LABEL, lifetime_labels

# The images' non-root user (images/Dockerfile.j2: useradd --uid 10001, HOME=/home/rosetta).
CONTAINER_UID = 10001
CONTAINER_USER_NAME = "rosetta"
CONTAINER_HOME = "/home/rosetta"
DATA_MOUNT = "/data"
RESULTS_MOUNT = "/results"
RESULT_FILE = f"{RESULTS_MOUNT}/result.json"
EXPORT_MOUNT = "/export"  # an ONNX export's writable folder (orchestrator/onnx_export.py)

TMPFS_SIZE = "4g"  # each of /tmp and HOME: compilers' caches fit, a runaway cell's writes stop there
LOG_ROTATION = {"max-size": "32m", "max-file": "2"}  # the most of a cell's output the engine keeps: 64 MiB


def container_user() -> tuple[int, int]:
    """The uid:gid cell containers run as. As root: the images' own unprivileged user, and
    `give_to_container_user` hands it the folders it writes. Otherwise we cannot hand a folder to
    another uid (chown needs root), so the container runs as the invoking user, who owns them
    already: no folder ever needs to be writable by anyone else."""
    if os.geteuid() == 0:
        return CONTAINER_UID, CONTAINER_UID
    return os.geteuid(), os.getegid()


def give_to_container_user(folder: Path) -> None:
    """Make a folder we created (mode 0700) the cell container's to write: chown when we are
    root; otherwise the container runs as us (`container_user`), so there is nothing to do."""
    if os.geteuid() == 0:
        os.chown(folder, *container_user())


def container_options(job: CellJob, out_dir: Path, *, session: str, memory_limit: str | None, pids_limit: int | None,
                      gpu_ids: list[str] | None, engine_host: str | None) -> dict:
    """The Docker SDK's create options for a cell's container: who it runs as, what it sees, what
    bounds it (docs/RUN-GUARANTEES.md: processes and containers)."""
    uid, gid = container_user()
    # USER and LOGNAME: getpass.getuser() (PyTorch's compile caches use it) reads them first, and
    # the invoking user's uid has no entry in the image's /etc/passwd
    environment = {"PYTHONUNBUFFERED": "1", "USER": CONTAINER_USER_NAME, "LOGNAME": CONTAINER_USER_NAME}
    environment.update(inherited_speed_variables())  # as the local backend passes them (OMP_NUM_THREADS, ...)
    if job.git_revision:
        environment["ROSETTA_GIT_REVISION"] = job.git_revision
    options = dict(
        detach=True,
        user=f"{uid}:{gid}",
        init=True,  # Docker's init as PID 1 reaps what the cell leaves running and forwards signals
        environment=environment,
        labels={CELL_LABEL: job.cell.key, SESSION_LABEL: session, **lifetime_labels(job.timeout)},
        network_mode="none",  # datasets are fetched on the host before any cell starts
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        privileged=False,
        read_only=True,
        # Docker mounts tmpfs noexec by default; compilers (torch.compile, XLA, Triton) write
        # shared objects to /tmp or HOME and load them, so both must allow exec. Each is capped.
        tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={TMPFS_SIZE},mode=1777",
               CONTAINER_HOME: f"rw,exec,nosuid,nodev,size={TMPFS_SIZE},uid={uid},gid={gid},mode=0700"},
        # The engine keeps a container's output until it is removed: capped, as the disk is shared.
        log_config=docker.types.LogConfig(type="json-file", config=LOG_ROTATION),
        mounts=[docker.types.Mount(target=DATA_MOUNT, source=str(job.data_dir), type="bind", read_only=True),
                docker.types.Mount(target=RESULTS_MOUNT, source=str(out_dir), type="bind", read_only=False)],
    )
    if memory_limit:  # swap included: the limit is real, and swapping would skew the timings
        options.update(mem_limit=memory_limit, memswap_limit=memory_limit)
    if pids_limit:
        options["pids_limit"] = pids_limit
    if job.export_dir:  # writable by the container's user: the caller gave it to that user
        options["mounts"].append(docker.types.Mount(target=EXPORT_MOUNT, source=str(job.export_dir),
                                                    type="bind", read_only=False))
    if engine_host:
        # the workload records its hostname; the engine's host says more than a container ID
        options["hostname"] = engine_host
    if job.device == "cuda":
        if gpu_ids:
            request = docker.types.DeviceRequest(device_ids=gpu_ids, capabilities=[["gpu"]])
        else:
            request = docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
        options["device_requests"] = [request]
    return options
