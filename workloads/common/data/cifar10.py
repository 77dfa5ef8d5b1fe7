"""CIFAR-10 from the published python tarball: verified, read without extracting, cached as uint8."""
import os
import pathlib
import pickle
from typing import Union

import numpy as np

from .cache import read_cache, write_cache
from .dataset import Dataset
from .download import fetch
from .errors import DataError, describe
from .published import CIFAR10, RemoteFile
from .safe_tar import read_tar_members

_CIFAR10_FOLDER = "cifar-10-batches-py"
_CIFAR10_TRAIN_MEMBERS = tuple(f"{_CIFAR10_FOLDER}/data_batch_{index}" for index in range(1, 6))
_CIFAR10_TEST_MEMBER = f"{_CIFAR10_FOLDER}/test_batch"


def load_cifar10(data_dir: Union[str, os.PathLike], *, remote: RemoteFile = CIFAR10, offline: bool = False) -> Dataset:
    """CIFAR-10: x float32 (N, 3, 32, 32) scaled to [0, 1], y int64; 50k train / 10k test."""
    data_dir = pathlib.Path(data_dir)
    archive = fetch(remote, data_dir, offline=offline)
    cache_dir = data_dir / "cache" / f"cifar10-{remote.digest.lower()[:12]}"
    arrays = read_cache(data_dir, cache_dir, _check_cifar10_arrays)
    if arrays is None:
        arrays = _parse_cifar10_archive(remote, archive)
        write_cache(data_dir, cache_dir, arrays)
    return Dataset(x_train=_to_unit_float(arrays["x_train"]), y_train=np.array(arrays["y_train"], dtype=np.int64),
                   x_test=_to_unit_float(arrays["x_test"]), y_test=np.array(arrays["y_test"], dtype=np.int64),
                   source="real", checksum=f"{remote.algorithm}:{remote.digest.lower()}")


def _to_unit_float(images_uint8: np.ndarray) -> np.ndarray:
    """uint8 0-255 → float32 0-1 in one vectorised pass (dividing keeps 255 → exactly 1.0)."""
    return np.divide(images_uint8, np.float32(255.0), dtype=np.float32)


def _parse_cifar10_archive(remote: RemoteFile, archive: pathlib.Path) -> dict:
    """Read the batches straight from the tarball: nothing is extracted to disk."""
    wanted = set(_CIFAR10_TRAIN_MEMBERS) | {_CIFAR10_TEST_MEMBER}
    raw_members = read_tar_members(remote, archive, wanted)
    # Every member has been validated and the whole archive's digest checked on the very bytes read
    # (not trusted from the stamp): only now is anything unpickled (raw bytes freed as we go).
    train = [_cifar10_batch(remote, name, raw_members.pop(name)) for name in _CIFAR10_TRAIN_MEMBERS]
    test_images, test_labels = _cifar10_batch(remote, _CIFAR10_TEST_MEMBER, raw_members.pop(_CIFAR10_TEST_MEMBER))
    return {
        "x_train": np.concatenate([images for images, _ in train]),
        "y_train": np.concatenate([labels for _, labels in train]),
        "x_test": test_images,
        "y_test": test_labels,
    }


def _cifar10_batch(remote: RemoteFile, member: str, raw: bytes) -> tuple:
    try:
        batch = pickle.loads(raw, encoding="bytes")
        images = np.asarray(_pick(batch, "data"), dtype=np.uint8)
        labels = np.asarray(_pick(batch, "labels"), dtype=np.int64)
    except Exception as error:  # a verified archive should never get here; name the member if it does
        raise DataError(f"{remote.name}: cannot parse {member} ({describe(error)}); "
                        f"delete the archive and run again to download it afresh") from None
    if images.ndim != 2 or images.shape[1] != 3 * 32 * 32 or len(labels) != len(images):
        raise DataError(f"{remote.name}: {member} holds images of shape {images.shape} and {len(labels)} labels, "
                        f"not N x 3072 and N; delete the archive and run again to download it afresh")
    return images.reshape(-1, 3, 32, 32), labels


def _pick(batch: dict, key: str):
    """CIFAR pickles were written by Python 2: their keys come back as bytes."""
    return batch[key.encode()] if key.encode() in batch else batch[key]


def _check_cifar10_arrays(arrays: dict) -> bool:
    return (arrays["x_train"].dtype == np.uint8 and arrays["x_train"].shape[1:] == (3, 32, 32)
            and arrays["x_test"].dtype == np.uint8 and arrays["x_test"].shape[1:] == (3, 32, 32)
            and arrays["y_train"].shape == arrays["x_train"].shape[:1]
            and arrays["y_test"].shape == arrays["x_test"].shape[:1])
