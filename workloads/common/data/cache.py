"""The parsed-array cache: a dataset's arrays as .npy files, memory-mapped when read back.

Written with ``allow_pickle=False`` and read as plain numbers only: a cache file holds plain
numbers, so one planted or altered in the data dir can at worst give wrong data, never run code.
A cache that is anything else (a link, a FIFO, a folder, a truncated or garbled file) is no
cache: it is rebuilt from the verified archive, never followed, never waited on
(docs/RUN-GUARANTEES.md, bad input).
"""
import functools
import mmap
import operator
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Optional, Sequence

import numpy as np

from .. import safe_files
from ..safe_files import remove_tree
from .files import make_shareable

# Bump when the layout of a parsed cache changes, so stale caches are rebuilt, never read.
# 2: IMDB's reviews are converted once, from the verified imdb.npz, into pickle-free arrays.
CACHE_FORMAT = 2
SPLITS = ("x_train", "y_train", "x_test", "y_test")


# What reading a damaged .npy file may raise (numpy's header parser, the buffer checks), and a check
# of arrays of unexpected shapes (an empty offsets array indexed).
_UNUSABLE = (OSError, ValueError, TypeError, OverflowError, EOFError, SyntaxError, UnicodeDecodeError, MemoryError,
             IndexError, KeyError)


def read_cache(data_dir: pathlib.Path, cache_dir: pathlib.Path, check: Callable[[dict], bool],
               names: Sequence[str] = SPLITS) -> Optional[dict]:
    """The cached arrays (memory-mapped, read lazily), or None when absent or unusable.

    `cache_dir` lies in `data_dir`; no folder between them may be a link."""
    try:
        safe_files.refuse_links(cache_dir, below=data_dir)
        if safe_files.read_bytes_bounded(cache_dir / "format", 64).decode("ascii").strip() != str(CACHE_FORMAT):
            return None
        arrays = {name: _mapped_array(cache_dir / "{}.npy".format(name)) for name in names}
        return arrays if check(arrays) else None
    except _UNUSABLE:
        return None


def _mapped_array(path: pathlib.Path) -> np.ndarray:
    """A .npy file of plain numbers, memory-mapped read-only; never through a link, never a FIFO.

    Opened once (safe_files.open_for_reading) and mapped from that descriptor, not by name:
    ``np.load(mmap_mode=...)`` opens the name again, and older numpy cannot map an open file."""
    with safe_files.open_for_reading(path) as stream:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError("npy format {} is not one this cache writes".format(version))
        if dtype.hasobject:
            raise ValueError("an object array is never read from a cache (it would be unpickled)")
        offset = stream.tell()
        if functools.reduce(operator.mul, shape, 1) == 0:
            return np.empty(shape, dtype=dtype)
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    return np.ndarray(shape, dtype=dtype, buffer=mapped, offset=offset, order="F" if fortran_order else "C")


def write_cache(data_dir: pathlib.Path, cache_dir: pathlib.Path, arrays: dict) -> None:
    """Write into a temp folder, then rename it into place: a crash never leaves half a cache.

    A read-only data dir (as mounted in Docker) just means no cache: skipped silently; so does a
    cache folder that is a link or a file (safe_files.make_folder): nothing is written through it.
    """
    temp_dir = None
    try:
        safe_files.make_folder(cache_dir.parent, below=data_dir)
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
