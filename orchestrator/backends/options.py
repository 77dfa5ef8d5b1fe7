"""How the cells run, as the command line chose it: one object from the parser to a backend's factory."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orchestrator import images

AUTO = "auto"  # --backend auto: the first usable backend (orchestrator/backends/registry.py)

# Each cell container's limits unless --container-memory / --container-pids say otherwise: enough
# for every workload here, and a runaway cell (a leak, a fork bomb) stops at them, not the host.
DEFAULT_CONTAINER_MEMORY = "16g"
DEFAULT_CONTAINER_PIDS = 4096

Log = Callable[[str], None]


@dataclass(frozen=True)
class BackendOptions:
    """Every backend's options; each backend's factory reads the ones that concern it."""

    backend: str = AUTO  # a registered backend's name, or auto
    python: str | None = None  # local: run cells with this interpreter instead of built environments
    cache_dir: Path | None = None  # local: where environments are built
    gpus: str | None = None  # GPU indices for the cells, e.g. "0,1"
    pull: bool = False  # docker: pull missing images from the registry instead of building them
    build: images.BuildOptions = field(default_factory=images.BuildOptions)  # docker: how images are built
    container_memory: str | None = DEFAULT_CONTAINER_MEMORY  # docker: each cell's memory limit ("16g"); None: none
    container_pids: int | None = DEFAULT_CONTAINER_PIDS  # docker: each cell's process limit; None: none
    ray_address: str | None = None  # ray: the head's HOST:PORT; None: start a local instance on 127.0.0.1
    node_backend: str = "docker"  # ray: what runs a cell on its node (docker or local)
    accelerator_type: str | None = None  # ray: CUDA cells only on nodes of this GPU model (e.g. H100)
    cpu_cells_per_node: int = 1  # ray: CPU cells at once on one node
    max_retries: int = 2  # ray: tries again of a cell lost to a node's death (not of a failed workload)
