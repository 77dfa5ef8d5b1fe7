"""Host-side preparation: fetch, verify and cache a dataset before any container starts.

Containers have no network and mount the data dir read-only, so they rely on this having run.
"""
import os
import pathlib
from typing import Optional, Union

from . import published
from .cifar10 import load_cifar10
from .download import fetch
from .imdb import load_imdb
from .progress import ProgressCallback


def prepare(name: str, data_dir: Union[str, os.PathLike], *, settings=None, offline: bool = False,
            progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """Fetch, verify and cache a dataset ("cifar10" or "imdb") on the host, before containers start.

    Returns the archive's path.
    """
    data_dir = pathlib.Path(data_dir)
    if name == "cifar10":
        archive = fetch(published.CIFAR10, data_dir, offline=offline, progress=progress)
        load_cifar10(data_dir, remote=published.CIFAR10, offline=True)
        return archive
    if name == "imdb":
        if settings is None:
            from workloads.common import hyperparams  # standard library only, like this package

            settings = hyperparams.settings("gru", "full")
        archive = fetch(published.IMDB, data_dir, offline=offline, progress=progress)
        load_imdb(data_dir, settings=settings, remote=published.IMDB, offline=True)
        return archive
    raise ValueError(f"unknown dataset {name!r}; choose from cifar10, imdb")
