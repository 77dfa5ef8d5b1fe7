"""What runs on a node, inside a Ray task: one cell, a dataset's installation, the clean-up.

Nothing here runs on the driver (it only names these functions when it submits tasks), and nothing
here imports the driver's modules: a node imports this module, answer.py and the node's own backend
(docker or local, from the registry). The task hands back only what answer.py allows.

Data: the driver prepares and verifies the datasets as ever; each verified archive goes into the
object store once, and a node writes it into its own data cache only after checking the published
checksum on the very bytes received (install_dataset), or verifies the copy its cache holds.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from orchestrator.backends import SPEED_VARIABLES, Backend, CellJob
from orchestrator.backends.ray import answer as node_answer
from orchestrator.errors import UserError
from workloads.common.result import Result

CLEANUP_TIMEOUT_S = 60.0  # the driver waits this long for every node's clean-up; a node's own wait is half


def node_scratch(session: str) -> Path:
    """This run's scratch folder on a node (its cells' work folders and logs until shipped back)."""
    return Path(os.environ.get("ROSETTA_NODE_SCRATCH") or tempfile.gettempdir()) / f"rosetta-ray-{session}"


def install_dataset(remote, content_ref, data_dir: Path, get: Callable) -> None:
    """The node's copy of a published archive, verified: the one in its cache when it checks out,
    else the driver's bytes (fetched from the object store only then), checked against the
    published digest before they are written. Nothing unverified is ever written or read."""
    from workloads.common.data import checksum
    from workloads.common.data.files import write_atomically

    target = Path(data_dir) / remote.filename
    if target.is_file():
        try:
            checksum.verify_present_file(remote, target)
            return
        except Exception:
            pass  # corrupt: replaced by the verified bytes below
    content = get(content_ref)
    hasher = checksum.new_hasher(remote.algorithm)
    hasher.update(content)
    if hasher.hexdigest() != remote.digest.lower():
        raise UserError(f"{remote.name}: the bytes received do not match the published {remote.algorithm}; "
                        f"not written")
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, content)
    checksum.write_stamp(remote, target)


def _node_backend(options, frameworks: dict, gpus: str | None, session: str) -> Backend:
    """The node's own backend (docker or local), labelling what it starts with this run's session
    (the Docker backend's containers, which the clean-up finds by it)."""
    node_options = replace(options, backend=options.node_backend, gpus=gpus)
    if options.node_backend == "docker":
        from orchestrator.backends import docker as chosen  # the Docker SDK, only on a Docker node
    else:
        from orchestrator.backends import local as chosen
    backend = chosen.start(frameworks, node_options, lambda line: None)
    backend.use_session(session)
    return backend


def run_on_node(job: CellJob, options, session: str, datasets: dict, speed_variables: dict | None = None) -> dict:
    """The Ray task: run one cell with this node's backend; its answer (answer.make): the result's
    JSON, the log, where it ran and the git revision of the checkout it ran (this node's own, which
    the cell records too: the driver's may differ).

    ``speed_variables``: the thread and math-library variables the driver's host sets
    (backends.SPEED_VARIABLES). Ray sets OMP_NUM_THREADS=1 in a task that asks for no CPU, which
    the node backend would hand on: the cell would run single-threaded. The cell gets exactly the
    driver's, as it would on one host."""
    import ray

    for name in SPEED_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(speed_variables or {})
    from orchestrator import frameworks as framework_registry, host
    from workloads.common import data

    started = time.perf_counter()
    hostname = socket.gethostname()
    revision = host.git_revision()
    cuda = job.device == "cuda"
    gpus = ",".join(str(index) for index in ray.get_gpu_ids()) if cuda else None
    scratch = node_scratch(session)
    log_path = scratch / "logs" / f"{job.cell.key}.log"
    data_dir = data.default_data_dir()
    node_job = replace(job, work_dir=scratch / "work" / job.cell.key, log_path=log_path, data_dir=data_dir,
                       export_dir=None, git_revision=revision)
    try:
        try:
            for name, (remote, ref) in datasets.items():
                install_dataset(remote, ref, data_dir, ray.get)
                data.prepare(name, data_dir, offline=True)  # parses into the node's cache, verified again
            if job.parity:
                from orchestrator import parity

                parity.write_canonical(data_dir, [job.cell.workload])
            frameworks = framework_registry.discover()
            backend = _node_backend(options, frameworks, gpus, session)
            variant = frameworks[job.cell.framework].variant(job.cell.variant)
            reason = backend.unsupported_reason(job.cell, variant)
            if reason:
                result = Result(cell=job.cell, status="unsupported", reason=reason)
            else:
                result = backend.run_cell(node_job)
        except (UserError, data.DataError) as error:
            result = Result(cell=job.cell, status="failed", reason=f"on {hostname}: {error}")
        log = node_answer.log_tail(log_path)
    finally:
        try:
            log_path.unlink()
        except OSError:
            pass
    return node_answer.make(result, log, time.perf_counter() - started, hostname=hostname, gpus=gpus or None,
                            git_revision=revision)


def clean_node(session: str, node_backend: str) -> int:
    """After a cancelled run: remove this run's containers and scratch on this node; how many containers."""
    removed = 0
    if node_backend == "docker":
        from orchestrator.backends import container_lifetime
        from orchestrator.backends import docker as docker_backend

        import docker

        label = f"{container_lifetime.SESSION_LABEL}={session}"
        try:
            client = docker_backend.connect()
        except UserError:
            client = None  # no engine here: no container either
        deadline = time.monotonic() + CLEANUP_TIMEOUT_S / 2
        while client is not None:
            try:
                removed += container_lifetime.remove_leftover_containers(client, session=session)
            except docker.errors.APIError:
                pass  # a removal the cancelled task started is still under way (409): wait for it
            if not client.containers.list(all=True, filters={"label": label}) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    shutil.rmtree(node_scratch(session), ignore_errors=True)
    return removed
