"""The backends `--backend` offers. Registering one is one entry in REGISTRY.

An entry says how to start the backend (a factory given the frameworks, the BackendOptions and a
log function), whether `--backend auto` may pick it and how it finds out (a probe, tried in
`auto_rank` order), and the words `auto` uses to say which one it picked and why. `--backend`'s
choices, its help and `auto` are all read from here.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.markup import escape

from orchestrator import host, images
from orchestrator.errors import CannotRunHere, UserError

AUTO = "auto"
# Each cell container's limits unless --container-memory / --container-pids say otherwise: enough
# for every workload here, and a runaway cell (a leak, a fork bomb) stops at them, not the host.
DEFAULT_CONTAINER_MEMORY = "16g"
DEFAULT_CONTAINER_PIDS = 4096

Log = Callable[[str], None]


@dataclass(frozen=True)
class BackendOptions:
    """How the cells run, as the command line chose it: one object from the parser to the factory."""

    backend: str = AUTO  # a REGISTRY name, or auto
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


@dataclass(frozen=True)
class Registration:
    factory: Callable[[dict, BackendOptions, Log], object]  # (frameworks, options, log) -> a Backend
    title: str  # "using the <title> backend"
    description: str  # what a cell runs in, said when auto picks it
    # (usable here?, why: e.g. "no Docker engine answered"); None: always usable
    probe: Callable[[], tuple[bool, str]] | None = None
    auto_rank: int | None = None  # auto tries backends from the lowest rank; None: only when named
    auto_note: str = ""  # this backend in --backend's help, e.g. "Docker when an engine answers"


def interpreter_path(python: str) -> str:
    """--python as an absolute path to an executable file, or one line saying what is wrong with it.

    Cells run in their own working directory, so a relative path would name another file (or
    none) there; a bare name (python3.8) is looked up on PATH now, once."""
    if os.sep not in python:
        found = shutil.which(python)
        if not found:
            raise UserError(f"--python {python}: no such interpreter on PATH; give the absolute path of a Python "
                            f"that has the framework installed")
        return os.path.abspath(found)
    path = Path(python)
    if not path.is_absolute():
        raise UserError(f"--python {python}: a relative path; cells run in another working directory, so give "
                        f"the absolute path ({Path.cwd() / path})")
    if not path.exists():
        raise UserError(f"--python {python}: no such interpreter; give the path of a Python that has the "
                        f"framework installed")
    if path.is_dir():
        raise UserError(f"--python {python}: a folder, not an interpreter; give the Python inside it "
                        f"(e.g. {path / 'bin' / 'python'})")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UserError(f"--python {python}: not an executable file; give the path of a Python interpreter "
                        f"(or make it executable: chmod +x)")
    return python


def _start_local(frameworks: dict, options: BackendOptions, log: Log):
    from orchestrator.backends.local import LocalBackend

    python = interpreter_path(options.python) if options.python else None
    return LocalBackend(frameworks, cache_dir=options.cache_dir, python=python, gpus=options.gpus, log=log)


def _start_docker(frameworks: dict, options: BackendOptions, log: Log):
    if options.python:
        raise UserError("--python runs cells with a host interpreter: it needs --backend local")
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    _remove_containers_of_ended_runs(client, log)
    failures: dict[str, UserError] = {}  # one failed build or pull is not retried for every cell
    # tag -> the reference to run (the tag, or repository@digest when pulled by images.lock): checked
    # (sources digest, lock entry) or built once in this run, not again per cell
    ready: dict[str, str] = {}

    def image_for(cell) -> str:
        framework = frameworks[cell.framework]
        variant = framework.variant(cell.variant)
        tag = images.image_tag(framework, variant, options.build.registry)
        if tag in ready:
            return ready[tag]
        if tag not in failures:
            try:
                ready[tag] = images.ensure_image(client, framework, variant, options.build, pull=options.pull, log=log)
                return ready[tag]
            except UserError as error:
                failures[tag] = error
                said = "not run here:" if isinstance(error, CannotRunHere) else "[red]error:[/red]"
                log(f"{said} {escape(str(error))}")
        raise failures[tag]

    return docker_backend.DockerBackend(frameworks, client=client, image_for=image_for, gpus=options.gpus,
                                        memory_limit=options.container_memory, pids_limit=options.container_pids,
                                        log=log)


def _remove_containers_of_ended_runs(client, log: Log) -> None:
    """Before the first cell: what runs killed outright left on the engine goes, a live run's stays
    (orchestrator/backends/container_lifetime.py). A refusal is said in one line; the run goes on."""
    import docker
    import requests

    from orchestrator.backends.container_lifetime import remove_containers_of_ended_runs

    try:
        removed = remove_containers_of_ended_runs(client)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        said = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        log(f"could not look for containers of ended runs on the Docker engine ({said}); the run goes on")
        return
    if removed:
        log(f"Removed {removed} cell container{'' if removed == 1 else 's'} of runs that have ended (their owner "
            f"gone, or past their deadline) from the Docker engine.")


def _start_ray(frameworks: dict, options: BackendOptions, log: Log):
    from orchestrator.backends.ray import connect  # imports Ray, an optional extra, only when asked for

    return connect.start(frameworks, options, log)


def _docker_engine_answers() -> tuple[bool, str]:
    engine = host.docker_engine()
    return (True, f"{engine.detail} answered") if engine.available else (False, "no Docker engine answered")


# In the order `--backend` lists them.
REGISTRY: dict[str, Registration] = {
    "local": Registration(_start_local, "local", "per-framework virtual environments", auto_rank=1, auto_note="local"),
    "docker": Registration(_start_docker, "Docker", "one container per cell", probe=_docker_engine_answers,
                           auto_rank=0, auto_note="Docker when an engine answers"),
    "ray": Registration(_start_ray, "Ray", "each cell a Ray task on a cluster node, run there by its Docker "
                        "or local backend"),
}


def _auto_order() -> list[tuple[str, Registration]]:
    ranked = [(name, entry) for name, entry in REGISTRY.items() if entry.auto_rank is not None]
    return sorted(ranked, key=lambda item: item[1].auto_rank)


def choices() -> tuple[str, ...]:
    return (AUTO, *REGISTRY)


def auto_help() -> str:
    return "auto: " + ", else ".join(entry.auto_note for _, entry in _auto_order())


def choose(requested: str, log: Log = print) -> str:
    """`auto` picks the first usable backend in auto_rank order and says which, and why, in one line."""
    if requested != AUTO:
        if requested not in REGISTRY:
            raise UserError(f"unknown backend {requested!r}; choose from {', '.join(choices())}")
        return requested
    reasons = []
    for name, entry in _auto_order():
        usable, why = entry.probe() if entry.probe else (True, "")
        reasons += [why] if why else []
        if usable:
            line = "; ".join([*reasons, f"using the {entry.title} backend ({entry.description})."])
            log(line[0].upper() + line[1:])
            return name
    raise UserError(f"no backend is usable here ({'; '.join(reasons)}); name one with --backend")


def start(options: BackendOptions, frameworks: dict, log: Log = print):
    """The backend the options name (auto: the first usable one), ready to run cells."""
    name = choose(options.backend, log)
    return REGISTRY[name].factory(frameworks, options, log)
