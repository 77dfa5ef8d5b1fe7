"""Connecting to a Ray cluster: the registry's factory for `--backend ray`, on the driver.

Everything here runs before any cell is dispatched: importing Ray (an optional extra, so a missing
one is one line), checking `--ray-address` (a head that does not answer would have Ray wait long),
the token-mode rule (decided before Ray is first imported: it reads the mode once), and starting a
local instance on the loopback interface or connecting to a cluster. The dispatch itself is
driver.py; what runs on a node is node.py.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Callable

from orchestrator.backends.ray.driver import RayBackend
from orchestrator.backends.ray.nodes import alive_nodes
from orchestrator import numerals
from orchestrator.errors import UserError, first_line

RAY_EXTRA = 'pip install -e ".[ray]"'
NODE_BACKENDS = ("docker", "local")
CONNECT_TIMEOUT_S = 10.0
_STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def import_ray():
    """Ray, or one line naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--backend ray needs Ray, which is not installed: install the extra with "
                        f"{RAY_EXTRA} (on the driver and on every node)") from None
    return ray


def check_address(address: str) -> tuple[str, int]:
    """HOST:PORT, answering on TCP now: else one line (an unreachable head would have Ray wait long)."""
    parsed = numerals.host_and_port(address)
    if parsed is None:
        raise UserError(f"--ray-address {address!r:.80}: give the head node's HOST:PORT, e.g. 10.0.0.5:6379")
    host, port = parsed
    try:
        socket.create_connection((host.strip("[]"), port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise UserError(f"--ray-address {address}: no Ray head answers there ({error.strerror or error}); "
                        f"start one with `ray start --head --node-ip-address=HOST --port={port}` or check the "
                        f"address") from None
    return host, port


def start(frameworks: dict, options, log: Callable[[str], None]) -> RayBackend:
    """The registry's factory: connect to (or start) the cluster."""
    if options.python and options.node_backend != "local":
        raise UserError("--python runs cells with an interpreter of the node: it needs --node-backend local")
    if options.node_backend not in NODE_BACKENDS:
        raise UserError(f"--node-backend {options.node_backend!r}: choose from {', '.join(NODE_BACKENDS)}")
    if options.gpus:
        raise UserError("--gpus picks this host's GPUs; on --backend ray every CUDA cell gets one GPU of the "
                        "node it runs on (use --accelerator-type to choose the GPU model)")
    if options.ray_address:
        check_address(options.ray_address)
        use_token_when_there_is_one()  # before Ray is imported: it reads the mode once
    ray = import_ray()
    # Ray's core installs its own SIGTERM handler (it logs and exits): keep ours, which stops a run
    # as Ctrl-C does (the tasks cancelled, the nodes' containers removed, finished cells kept).
    handlers = {number: signal.getsignal(number) for number in _STOPPING_SIGNALS}
    try:
        if options.ray_address:
            ray.init(address=options.ray_address, logging_level="WARNING", log_to_driver=False)
        else:  # a fresh local instance, on the loopback interface only
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                     logging_level="WARNING", log_to_driver=False)
    except Exception as error:  # Ray raises ConnectionError, RuntimeError, its own AuthenticationError...
        where = options.ray_address or "a local Ray instance"
        raise UserError(f"could not connect to {where}: {first_line(error)}") from None
    finally:
        if threading.current_thread() is threading.main_thread():  # elsewhere Python keeps no handlers
            for number, handler in handlers.items():
                if handler is not None:
                    signal.signal(number, handler)
    where = options.ray_address or "a local Ray instance on 127.0.0.1"
    log(f"Ray {ray.__version__}: {where}, {len(alive_nodes(ray))} node(s); cells run with the "
        f"{options.node_backend} backend on each node")
    return RayBackend(frameworks, options, log, ray=ray)


def use_token_when_there_is_one() -> None:
    """Current Ray turns token authentication on for the clusters `ray start` makes, but a driver
    that connects presents the token only in token mode: turn it on when a token is at hand
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and RAY_AUTH_MODE says nothing.
    The token is never read here, nor recorded anywhere."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"
