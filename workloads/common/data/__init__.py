"""Datasets for the workloads: download once, verify the checksum, parse safely, cache as .npy.

Nothing is unpickled unless its full digest was checked in this process on the bytes parsed; the
caches hold plain arrays, read with allow_pickle=False.

Standard library and numpy only: this package runs inside every framework image. The host calls
``prepare`` before containers start (they have no network and mount the data directory read-only);
inside a container the loaders then find the verified archive and the parsed cache ready.

Every expected failure raises ``DataError`` with one line naming the file and the fix.

    published    the archives (RemoteFile, CIFAR10, IMDB) and their published checksums
    download     fetch: the verified copy in the data dir, else download and verify it
    checksum     hashing; the stamp that spares re-hashing an unchanged file; the full check on the
                 bytes read that comes before anything is unpickled
    safe_tar     one streaming pass over a tarball, refusing unsafe members, extracting nothing
    cache        the parsed arrays as .npy files, written atomically, read memory-mapped
    cifar10      load_cifar10
    imdb         load_imdb, the pickle-free reviews cache (load_imdb_reviews), Keras's preprocessing
    synthetic    synthetic_cifar10, synthetic_imdb, random_images
    preparation  DATASETS, the published datasets registered once; prepare: the host's step
                 before containers start
"""
from .cifar10 import load_cifar10
from .dataset import Dataset, default_data_dir
from .download import fetch
from .errors import DataError
from .imdb import load_imdb, load_imdb_reviews, preprocess_imdb, reviews_of
from .preparation import DATASETS, PublishedDataset, prepare, published_dataset
from .progress import ProgressCallback
from .published import CIFAR10, IMDB, RemoteFile
from .synthetic import random_images, synthetic_cifar10, synthetic_imdb

__all__ = ["CIFAR10", "DATASETS", "IMDB", "DataError", "PublishedDataset", "published_dataset", "Dataset", "ProgressCallback", "RemoteFile", "default_data_dir",
           "fetch", "load_cifar10", "load_imdb", "load_imdb_reviews", "prepare", "preprocess_imdb", "random_images",
           "reviews_of", "synthetic_cifar10", "synthetic_imdb"]
