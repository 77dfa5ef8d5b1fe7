"""The backends `--backend` offers. Registering one is one entry in REGISTRY.

An entry says how to start the backend (a factory given the frameworks, the BackendOptions of
options.py and a log function; each backend's module has its own `start`), whether `--backend auto` may pick it and how it finds out (a probe, tried in
`auto_rank` order), and the words `auto` uses to say which one it picked and why. `--backend`'s
choices, its help and `auto` are all read from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from orchestrator import host
from orchestrator.backends.options import AUTO, BackendOptions, Log
from orchestrator.errors import UserError


@dataclass(frozen=True)
class Registration:
    factory: Callable[[dict, BackendOptions, Log], object]  # (frameworks, options, log) -> a Backend
    title: str  # "using the <title> backend"
    description: str  # what a cell runs in, said when auto picks it
    # (usable here?, why: e.g. "no Docker engine answered"); None: always usable
    probe: Callable[[], tuple[bool, str]] | None = None
    auto_rank: int | None = None  # auto tries backends from the lowest rank; None: only when named
    auto_note: str = ""  # this backend in --backend's help, e.g. "Docker when an engine answers"


def _start_local(frameworks: dict, options: BackendOptions, log: Log):
    from orchestrator.backends import local

    return local.start(frameworks, options, log)


def _start_docker(frameworks: dict, options: BackendOptions, log: Log):
    from orchestrator.backends import docker  # the Docker SDK, only when asked for

    return docker.start(frameworks, options, log)


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
