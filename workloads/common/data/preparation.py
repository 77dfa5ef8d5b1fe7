"""The published datasets, registered once, and the host's step before any container starts.

A workload's declaration names its dataset (`dataset = "cifar10"`); DATASETS says what that name
is: the published archive (its checksums) and the loader that parses it into the cache. The host's
`prepare` (and a Ray node's) reads the table; nothing else lists the datasets. Containers have no
network and mount the data dir read-only, so they rely on this having run.
"""
import os
import pathlib
from typing import Callable, NamedTuple, Optional, Union

from . import published
from .cifar10 import load_cifar10
from .download import fetch
from .errors import DataError
from .imdb import load_imdb
from .progress import ProgressCallback


class PublishedDataset(NamedTuple):
    """A downloadable dataset: its archive and how it is parsed into the data dir's cache."""

    remote: published.RemoteFile
    # (data_dir, settings, remote) -> the parsed Dataset, read offline from the verified archive
    parse: Callable
    # the workload whose full-profile settings shape the parsed arrays (IMDB: the GRU's vocabulary
    # and review length), or None when the parse needs none
    settings_from: Optional[str] = None


DATASETS = {
    "cifar10": PublishedDataset(published.CIFAR10,
                                lambda data_dir, settings, remote: load_cifar10(data_dir, remote=remote, offline=True)),
    "imdb": PublishedDataset(published.IMDB,
                             lambda data_dir, settings, remote: load_imdb(data_dir, settings=settings, remote=remote,
                                                                          offline=True),
                             settings_from="gru"),
}


def published_dataset(name: str) -> PublishedDataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError("unknown dataset {!r}; choose from {}".format(name, ", ".join(DATASETS))) from None


def prepare(name: str, data_dir: Union[str, os.PathLike], *, settings=None, offline: bool = False,
            progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """Fetch, verify and cache a dataset (a DATASETS name) on the host, before containers start.

    Returns the archive's path.
    """
    dataset = published_dataset(name)
    data_dir = pathlib.Path(data_dir)
    if settings is None and dataset.settings_from:
        from workloads.common import hyperparams  # standard library only, like this package

        settings = hyperparams.settings(dataset.settings_from, "full")
    archive = fetch(dataset.remote, data_dir, offline=offline, progress=progress)
    dataset.parse(data_dir, settings, dataset.remote)
    return archive
