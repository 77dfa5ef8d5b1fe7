"""`doctor`: what this host can run (Docker engine, GPUs, built environments, cached datasets)."""
from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orchestrator import __version__, host
from orchestrator.errors import UserError
from workloads.common import data as datasets

HELP = "what this host can run"
ORDER = 90


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--data-dir", type=Path)


def main(args: argparse.Namespace) -> int:
    problems: list[str] = []
    Console().print(doctor(args.cache_dir, args.data_dir, problems=problems))
    if problems:  # everything else is still reported above; the fix comes as one line, exit 2
        raise UserError("; ".join(problems))
    return 0


def doctor(cache_dir: Path | None = None, data_dir: Path | None = None, *, problems: list[str] | None = None) -> Table:
    """What this host can run; a folder it cannot read is named in its row and added to ``problems``."""
    from orchestrator.backends.local import READY_MARKER, default_cache_dir

    problems = [] if problems is None else problems
    table = Table(title="What this host can run", show_header=False)
    table.add_column("what")
    table.add_column("status")
    table.add_row("Rosetta Bench", f"{__version__} (git {host.git_revision() or 'unknown'})")
    table.add_row("Python", f"{platform.python_version()} at {sys.executable}")
    engine = host.docker_engine()
    table.add_row("Docker engine", engine.detail + ("" if engine.available else "  -> run-matrix uses the local backend"))
    if engine.available:
        table.add_row("leftover cell containers", leftover_containers())
    gpus = host.gpu_facts()  # what run.json records about them
    table.add_row("GPUs", "\n".join(describe_gpu(gpu) for gpu in gpus) if gpus
                  else "none (CUDA variants will be recorded as unsupported)")
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    venvs = cache_root / "venvs"
    try:
        _refuse_non_folder(cache_root)
        built = sorted(p.name for p in venvs.glob("*") if (p / READY_MARKER).is_file()) if venvs.is_dir() else []
    except OSError as error:
        built = None
        problems.append(_unreadable(venvs, error, "--cache-dir DIR (or $ROSETTA_CACHE_DIR)"))
    table.add_row("environments built", "unreadable: " + problems[-1] if built is None
                  else "\n".join(built) if built else f"none yet (built on first use in {venvs})")
    folder = Path(data_dir) if data_dir else datasets.default_data_dir()
    try:
        _refuse_non_folder(folder)
        present = [remote.filename for remote in (datasets.CIFAR10, datasets.IMDB) if (folder / remote.filename).is_file()]
        table.add_row("datasets cached", f"{', '.join(present) or 'none'} in {folder}")
    except OSError as error:
        problems.append(_unreadable(folder, error, "--data-dir DIR (or $ROSETTA_DATA_DIR)"))
        table.add_row("datasets cached", "unreadable: " + problems[-1])
    return table


def _refuse_non_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(20, "it is not a folder", str(folder))


def _unreadable(folder: Path, error: OSError, option: str) -> str:
    """One line: which folder, why (no errno tuple), and the fix."""
    reason = error.strerror or type(error).__name__
    if isinstance(error, NotADirectoryError):
        return f"cannot use {error.filename or folder} ({reason}); point {option} at a folder"
    return (f"cannot read {folder} ({reason}); give your user read and search permission on it "
            f"(chmod u+rx), or point {option} elsewhere")


def leftover_containers() -> str:
    """Cell containers that a killed run left on the engine (a finished run leaves none)."""
    from orchestrator.backends.container_lifetime import CELL_LABEL
    from orchestrator.backends.docker import connect

    try:
        found = connect().containers.list(all=True, filters={"label": CELL_LABEL})
    except Exception as error:  # noqa: BLE001 - doctor reports, it does not fail
        return f"could not list them ({str(error).splitlines()[0][:120]})"
    if not found:
        return "none"
    ids = " ".join(container.short_id for container in found)
    return f"{len(found)} (remove them with `docker rm -f {ids}`)"


def describe_gpu(gpu: dict) -> str:
    """One line per GPU: "GPU 0: NVIDIA H200, 143771 MiB, 700.0 W limit, persistence Enabled, ECC Enabled,
    MIG Disabled, driver 570.124.06 (nvml)"; what the driver did not report is left out."""
    if "listing" in gpu:
        return gpu["listing"]
    parts = [f"GPU {gpu.get('index', '?')}: {gpu.get('name', 'unnamed')}"]
    for key, text in (("memory_total_mib", "{} MiB"), ("compute_capability", "compute capability {}"),
                      ("power_limit_w", "{} W limit"), ("persistence_mode", "persistence {}"),
                      ("ecc_mode", "ECC {}"), ("mig_mode", "MIG {}"), ("driver", "driver {}")):
        if key in gpu:
            parts.append(text.format(gpu[key]))
    return ", ".join(parts) + f" ({gpu.get('source', '?')})"
