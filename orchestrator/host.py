"""What this host offers: GPUs, a Docker engine, the project's git revision. Cheap probes only."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from orchestrator.frameworks import PROJECT_ROOT


def gpus() -> list[str]:
    """NVIDIA GPUs as `nvidia-smi -L` lists them; empty without a driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.startswith("GPU ")]


def gpu_compute_capabilities() -> list[tuple[str, str]]:
    """(name, compute capability) per GPU, e.g. ("NVIDIA H200", "9.0"); empty without a driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [line.rsplit(",", 1) for line in query.stdout.splitlines() if "," in line]
    return [(name.strip(), capability.strip()) for name, capability in rows]


@dataclass
class DockerStatus:
    available: bool
    detail: str  # engine version, or why it did not answer


def docker_engine(timeout: float = 3.0) -> DockerStatus:
    """Whether a Docker engine answers, asked through the Docker SDK for Python."""
    try:
        import docker  # the SDK, not a framework: optional on hosts that only use the local backend
    except ImportError:
        return DockerStatus(False, "the Docker SDK for Python is not installed (pip install docker)")
    try:
        client = docker.from_env(timeout=timeout)
        version = client.version().get("Version", "?")
        client.close()
        return DockerStatus(True, f"Docker Engine {version}")
    except docker.errors.DockerException as error:
        return DockerStatus(False, f"no Docker engine answered ({str(error).splitlines()[0][:160]})")


def git_revision() -> str | None:
    """HEAD of the project checkout, with `-dirty` when it has uncommitted changes."""
    if not shutil.which("git"):
        return None
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, check=False)
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")
