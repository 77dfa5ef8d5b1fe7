"""Option groups that more than one command takes, each defined once, and the objects they become.

A command adds a group with `add_<group>(parser)` and reads it back with the function of the
group's name (`backend_options(args)`, `build_options(args)`), so the plain functions receive one
options object per group instead of one keyword argument per option.
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from orchestrator.backends.options import AUTO, DEFAULT_CONTAINER_MEMORY, DEFAULT_CONTAINER_PIDS, BackendOptions
from orchestrator import frameworks as framework_registry, images, matrix, numerals
from orchestrator.backends import LONGEST_TIMEOUT_S, registry
from orchestrator.errors import UserError
from workloads.common.cell import MOST_THREADS
from workloads.common.hyperparams import WORKLOADS



def comma_list(value: str) -> list[str]:
    """`a, b,c` -> ["a", "b", "c"]. An option given with no name at all (`""`, `","`) is refused:
    run-matrix would otherwise read it as "not narrowed" and run the whole matrix."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"names nothing ({value!r}); give comma-separated names, or leave "
                                         f"the option out to keep every one")
    return items


def repeat_count(value: str) -> int:
    """--repeat: a whole number from 1 to matrix.MAX_REPEAT."""
    repeat = numerals.whole_number(value, 1, matrix.MAX_REPEAT)
    if repeat is None:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {matrix.MAX_REPEAT}, not {value!r:.40}")
    return repeat


def seed_number(value: str) -> int:
    """--seed: a whole number from 0 to 2**32 - 1."""
    seed = numerals.whole_number(value, 0, 2 ** 32 - 1)
    if seed is None:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {2 ** 32 - 1}, not {value!r:.40}")
    return seed


def timeout_seconds(value: str) -> float:
    """--timeout: seconds, more than 0 and at most LONGEST_TIMEOUT_S (nan and inf are refused)."""
    seconds = numerals.decimal_number(value)
    if seconds is None or not 0 < seconds <= LONGEST_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be a number of seconds more than 0 and at most "
                                         f"{LONGEST_TIMEOUT_S} (a week), not {value!r:.40}")
    return seconds


def thread_count(value: str) -> int:
    """--threads: a whole number of threads, 1 to MOST_THREADS."""
    if not value.strip().isdigit() or not 1 <= int(value) <= MOST_THREADS:
        raise argparse.ArgumentTypeError(f"must be a whole number of threads from 1 to {MOST_THREADS}, "
                                         f"not {value!r:.40}")
    return int(value)


# --- which cells: run-matrix, parity ------------------------------------------------------------

def add_cell_selection(parser: argparse.ArgumentParser, *, frameworks_help: str) -> None:
    parser.add_argument("--frameworks", type=comma_list, help=frameworks_help)
    parser.add_argument("--workloads", type=comma_list, help=f"comma-separated: {','.join(WORKLOADS)}")


def add_cell_options(parser: argparse.ArgumentParser) -> None:
    """--option NAME=VALUE: a framework option (workloads/common/options.py) for every selected
    framework that declares it; --modes: the execution modes (workloads/common/modes.py) every
    selected framework runs."""
    from workloads.common import modes, options

    parser.add_argument("--option", action="append", metavar="NAME=VALUE",
                        help="a framework option for every selected framework that declares it, repeatable; "
                        "VALUE may be comma-separated (one cell per value, e.g. channels_last=off,on); options: "
                        f"{', '.join(options.every_name())} (see `list`)")
    parser.add_argument("--modes", type=comma_list,
                        help=f"comma-separated execution modes every selected framework runs ({','.join(modes.CHOICES)}; "
                        f"{modes.DEFAULT}: each framework's default mode; unset: each framework's default mode and "
                        "its compiled one; a mode a framework lacks is an unsupported cell; see `list`)")


def add_run_options(parser: argparse.ArgumentParser, *, results_dir_help: str, data_dir_help: str) -> None:
    """Where a run's cells write, where they read, how long each may take."""
    parser.add_argument("--results-dir", type=Path, help=results_dir_help)
    parser.add_argument("--data-dir", type=Path, help=data_dir_help)
    parser.add_argument("--timeout", type=timeout_seconds,
                        help=f"seconds per cell before it is killed (more than 0, at most {LONGEST_TIMEOUT_S})")
    parser.add_argument("--force", action="store_true", help="run into a --results-dir that already holds "
                        "files (cells that run replace their own results; nothing is deleted)")
    parser.add_argument("--threads", type=thread_count, metavar="N",
                        help="the intra-op and inter-op CPU threads every framework is given, through its own "
                        f"switches (1 to {MOST_THREADS}; default: the CPUs each cell may use: its CPU affinity, "
                        "capped by its container's CPU limit)")


def data_folder(explicit: Path | None) -> Path:
    """--data-dir, else $ROSETTA_DATA_DIR, else the default cache: a folder, or not there yet (the
    datasets are fetched into it). One that exists and is no folder (a file, a link to nothing) is
    refused before anything runs; the folder itself may be a link to one, the user's choice."""
    from workloads.common import data as datasets

    folder = Path(explicit) if explicit else datasets.default_data_dir()
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise UserError(f"--data-dir {folder}: not a folder (a file, or a link to nothing); pass --data-dir a "
                        "folder for the datasets, or set ROSETTA_DATA_DIR to one")
    return folder


# --- which images: build, push, pull, check-pins ------------------------------------------------

def add_image_selection(parser: argparse.ArgumentParser, *, required: bool = False,
                        variant_help: str = "repeatable; `all` for every variant") -> None:
    """Framework names as positional arguments, and `--variant V` (repeatable) for each one's variants."""
    if required:
        parser.add_argument("frameworks", nargs="+")
    else:
        parser.add_argument("frameworks", nargs="*", help="default: every framework")
    parser.add_argument("--variant", action="append", dest="variants", help=variant_help)


def selected_variants(names: list[str] | None, variants: list[str] | None) -> list:
    """(framework, variant) pairs: each framework's default variant, the named ones, or `all`."""
    known = framework_registry.discover()
    selected = []
    for name in names or known:
        if name not in known:
            raise UserError(f"unknown framework {name!r}; choose from {', '.join(known)}")
        framework = known[name]
        chosen = framework.variants if variants == ["all"] else (variants or [framework.default_variant])
        selected += [(framework, framework.variant(variant)) for variant in chosen]
    return selected


def add_registry_target(parser: argparse.ArgumentParser) -> None:
    """push: the registry is what the command is about, so it is required."""
    parser.add_argument("--registry", required=True, help="e.g. 127.0.0.1:5000 or ghcr.io/you")


def add_lock_registry(parser: argparse.ArgumentParser, *, verb: str) -> None:
    """pull and publish: the registry (default: the project's, image_lock.DEFAULT_REGISTRY) and the lock file."""
    from orchestrator.images import lock as image_lock

    parser.add_argument("--registry", help=f"the registry to {verb} (default: ${image_lock.REGISTRY_VARIABLE}, else "
                        f"{image_lock.DEFAULT_REGISTRY})")
    parser.add_argument("--lock", type=Path, help=f"the lock file (default: ${image_lock.LOCK_VARIABLE}, else this "
                        "checkout's images.lock)")


# --- how images are built: build, and the Docker backend of run-matrix and parity ---------------

def add_build_options(parser: argparse.ArgumentParser, *, registry: bool = True) -> None:
    """`registry`: whether --registry is the image name prefix here (publish has its own --registry)."""
    if registry:
        parser.add_argument("--registry", help="image name prefix, e.g. 127.0.0.1:5000 (default: local names; "
                            "with --pull: $ROSETTA_REGISTRY, else the project's registry)")
    parser.add_argument("--base-image", help="override the variant's base image (e.g. one made by "
                        "images/base/make-local-base.sh)")
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle for pip inside builds (default: $PIP_CERT, "
                        "$SSL_CERT_FILE or $REQUESTS_CA_BUNDLE)")
    parser.add_argument("--wheelhouse", type=Path, help="folder of local wheels for builds (default: $PIP_FIND_LINKS)")


def build_options(args: argparse.Namespace) -> images.BuildOptions:
    registry_name = getattr(args, "registry", None)
    if getattr(args, "pull", False):  # pulled images come from the project's registry unless told otherwise
        from orchestrator.images import lock as image_lock

        registry_name = image_lock.registry(registry_name)
    return images.BuildOptions.from_environment(registry=registry_name, base_image=args.base_image,
                                                ca_bundle=args.ca_bundle, wheelhouse=args.wheelhouse)


# --- where cells run: run-matrix, parity (the build options above included) ---------------------

def add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=registry.choices(), default=AUTO, help=registry.auto_help())
    parser.add_argument("--python", help="run cells with this interpreter instead of built environments")
    parser.add_argument("--cache-dir", type=Path, help="environment cache (default: $ROSETTA_CACHE_DIR or "
                        "~/.cache/rosetta-bench)")
    parser.add_argument("--gpus", type=gpu_selection, help="GPU indices for the cells, e.g. 0 or 0,1 (CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--pull", action="store_true", help="docker: pull missing images from --registry instead "
                        "of building")
    parser.add_argument("--container-memory", default=DEFAULT_CONTAINER_MEMORY,
                        help="docker: each cell container's memory limit, swap included, e.g. 16g or 512m; none "
                        f"for no limit (default: {DEFAULT_CONTAINER_MEMORY})")
    parser.add_argument("--container-pids", default=str(DEFAULT_CONTAINER_PIDS),
                        help="docker: how many processes and threads each cell container may run; none for no "
                        f"limit (default: {DEFAULT_CONTAINER_PIDS})")
    parser.add_argument("--ray-address", type=head_address, metavar="HOST:PORT", help="ray: the cluster's head node (default: start "
                        "a local Ray instance bound to 127.0.0.1)")
    parser.add_argument("--node-backend", choices=("docker", "local"), default="docker",
                        help="ray: what runs each cell on the node it lands on (default: docker, the node's own "
                        "engine; images by tag and digest from --registry with --pull)")
    parser.add_argument("--accelerator-type", metavar="NAME", help="ray: CUDA cells only on nodes with this GPU "
                        "model, e.g. H100 (node label accelerator-type=NAME, or Ray's accelerator_type resource)")
    parser.add_argument("--cpu-cells-per-node", type=positive_count, default=1, metavar="N",
                        help="ray: CPU cells one node runs at once (default: 1; more share the node's cores, "
                        "which distorts every one of their numbers)")
    parser.add_argument("--max-retries", type=retry_count, default=2, metavar="N",
                        help="ray: how often a cell lost to a node's death is tried again on another node "
                        "(infrastructure failures only; a failed workload is never retried; default: 2)")
    add_build_options(parser)


def backend_options(args: argparse.Namespace) -> BackendOptions:
    return BackendOptions(backend=args.backend, python=args.python, cache_dir=args.cache_dir,
                                   gpus=args.gpus, pull=args.pull, build=build_options(args),
                                   container_memory=container_memory(args.container_memory),
                                   container_pids=container_pids(args.container_pids),
                                   ray_address=args.ray_address, node_backend=args.node_backend,
                                   accelerator_type=args.accelerator_type,
                                   cpu_cells_per_node=args.cpu_cells_per_node, max_retries=args.max_retries)


def positive_count(value: str) -> int:
    """--cpu-cells-per-node: a whole number from 1 to 1024."""
    count = numerals.whole_number(value, 1, 1024)
    if count is None:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 1024, not {value!r:.40}")
    return count


def retry_count(value: str) -> int:
    """--max-retries: a whole number from 0 to 100."""
    count = numerals.whole_number(value, 0, 100)
    if count is None:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 100, not {value!r:.40}")
    return count


# A GPU as CUDA_VISIBLE_DEVICES and Docker's --gpus name one: its index, or its UUID (a MIG
# instance's too). Anything else would reach the cell's environment or the engine's device request.
_GPU = re.compile(r"[0-9]{1,4}|(?:GPU|MIG)-[A-Za-z0-9-]{1,80}(?:/[0-9]{1,4}/[0-9]{1,4})?", re.ASCII)


def gpu_selection(value: str) -> str:
    """--gpus: comma-separated GPU indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them ("0,1")."""
    items = [item.strip() for item in value.split(",")]
    if not all(_GPU.fullmatch(item) for item in items):
        raise argparse.ArgumentTypeError(f"must be comma-separated GPU indices (e.g. 0 or 0,1) or GPU UUIDs "
                                         f"(GPU-..., MIG-...), not {value!r:.40}; leave it out for every GPU")
    return ",".join(items)


def head_address(value: str) -> str:
    """--ray-address: HOST:PORT, the port a whole number from 1 to 65535 (whether a head answers
    there is the Ray backend's to find out, when it starts)."""
    parsed = numerals.host_and_port(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"must be the head node's HOST:PORT, e.g. 10.0.0.5:6379, the port from 1 "
                                         f"to {numerals.LARGEST_PORT}, not {value!r:.40}")
    return f"{parsed[0]}:{parsed[1]}"


_MEMORY = re.compile(r"\s*([0-9]+)([bkmg]?)b?\s*", re.ASCII | re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DOCKER_MINIMUM_MEMORY = 6 << 20  # the engine refuses less


def container_memory(text: str) -> str | None:
    """--container-memory: "16g" (as Docker's --memory takes it) or None for "none"."""
    if text.strip().lower() == "none":
        return None
    match = _MEMORY.fullmatch(text)
    if not match or len(match[1].lstrip("0")) > numerals.MOST_DIGITS or \
            not _DOCKER_MINIMUM_MEMORY <= int(match[1]) * _UNIT[match[2].lower()] < 1 << 62:
        raise UserError(f"--container-memory {text!r:.40}: give a size of at least 6m, e.g. 16g or 512m, or none")
    return f"{int(match[1])}{match[2].lower()}"


def container_pids(text: str) -> int | None:
    """--container-pids: a positive count, or None for "none"."""
    if text.strip().lower() == "none":
        return None
    count = numerals.whole_number(text, 1, 4_194_304)  # Linux's highest pid_max
    if count is None:
        raise UserError(f"--container-pids {text!r:.40}: give a number of processes from 1 to 4194304, e.g. 4096, "
                        "or none")
    return count
