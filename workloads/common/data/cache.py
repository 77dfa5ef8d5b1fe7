"""The parsed-array cache: a dataset's arrays as .npy files, memory-mapped when read back.

Written with ``allow_pickle=False`` and read with it: a cache file holds plain numbers, so one
planted or altered in the data dir can at worst give wrong data, never run code.
"""
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Optional, Sequence

import numpy as np

from ..safe_files import remove_tree
from .files import make_shareable

# Bump when the layout of a parsed cache changes, so stale caches are rebuilt, never read.
# 2: IMDB's reviews are converted once, from the verified imdb.npz, into pickle-free arrays.
CACHE_FORMAT = 2
SPLITS = ("x_train", "y_train", "x_test", "y_test")


def read_cache(cache_dir: pathlib.Path, check: Callable[[dict], bool], names: Sequence[str] = SPLITS) -> Optional[dict]:
    """The cached arrays (memory-mapped, read lazily), or None when absent or unusable."""
    try:
        if (cache_dir / "format").read_text().strip() != str(CACHE_FORMAT):
            return None
        arrays = {name: np.load(cache_dir / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in names}
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return arrays if check(arrays) else None


def write_cache(cache_dir: pathlib.Path, arrays: dict) -> None:
    """Write into a temp folder, then rename it into place: a crash never leaves half a cache.

    A read-only data dir (as mounted in Docker) just means no cache: skipped silently.
    """
    temp_dir = None
    try:
        cache_dir.parent.mkdir(parents=True, exist_ok=True)
        temp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.part-", dir=cache_dir.parent))
        for name, array in arrays.items():
            np.save(temp_dir / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        (temp_dir / "format").write_text(f"{CACHE_FORMAT}\n")
        make_shareable(temp_dir)
        if os.path.lexists(str(cache_dir)):  # unusable (stale or damaged): replace it; a link is unlinked, never followed
            remove_tree(cache_dir)
        os.rename(temp_dir, cache_dir)
        temp_dir = None
    except OSError:
        pass  # read-only, full disk, or another process won the rename: loading still works
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
