"""Writing and removing the files a run produces without ever following a link.

Standard library only (Python 3.6 and newer: the images use it too). Every file the project
produces is written atomically (a temporary file in the same folder, flushed and fsynced, then
renamed over the target, and the folder fsynced), so a crash, a power cut or a full disk leaves the
previous good file or the new one, never a truncated one. Renaming replaces a link planted at the target instead of writing through it,
and the folders on the way are refused if they are links. Removal never descends into a link.
"""
import errno
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Union

FILE_MODE = 0o644  # results and reports: one mode for every file a run produces
FOLDER_MODE = 0o755

PathLike = Union[str, "os.PathLike[str]"]


class UnsafePath(OSError):
    """A path the run would create, write or remove is a link, or not the kind of thing expected."""


def refuse_links(path: PathLike, *, below: PathLike = None) -> None:
    """Raise UnsafePath if `path` is a symbolic link, or any folder between `below` and it is.

    `below` is the folder the caller trusts (e.g. the results folder); components from it upwards
    are the user's business (a results folder may well live under a linked home folder). Without
    `below`, only `path` itself is checked."""
    path = Path(path)
    candidates = [path] + (list(path.parents) if below is not None else [])
    for candidate in candidates:
        if below is not None and candidate == Path(below):
            break
        if candidate.is_symlink():
            raise UnsafePath("{} is a symbolic link; Rosetta Bench never writes or deletes through "
                             "links".format(candidate))


def make_folder(path: PathLike, *, below: PathLike = None, mode: int = FOLDER_MODE) -> Path:
    """Create `path` (and missing parents) as real folders; an existing link or file is refused."""
    path = Path(path)
    refuse_links(path, below=below)
    if path.exists() and not path.is_dir():
        raise UnsafePath("{} exists and is not a folder".format(path))
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    refuse_links(path, below=below)  # a link swapped in meanwhile
    return path


def write_atomic(path: PathLike, write: Callable[[BinaryIO], object], *, mode: int = FILE_MODE,
                 below: PathLike = None) -> Path:
    """Write `path` atomically and durably: `write(stream)` fills a temporary file beside it, which
    is fsynced, renamed over `path`, and the folder fsynced (docs/RUN-GUARANTEES.md: a finished
    cell's result survives a power cut). Never through a link. For a writer that streams (numpy's
    savez) as well as for bytes at hand."""
    path = Path(path)
    make_folder(path.parent, below=below)
    if os.path.isdir(str(path)) and not os.path.islink(str(path)):
        raise UnsafePath("{} is a folder; expected a file".format(path))
    handle, temporary = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())  # the bytes on disk before the name points at them
        os.chmod(temporary, mode)
        os.replace(temporary, str(path))  # replaces a link at `path` itself, never writes through it
        sync_folder(path.parent)  # the rename itself on disk
    except BaseException as error:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        if isinstance(error, OSError) and error.filename is None:
            error.filename = str(path)  # a full disk's error names the file it was writing
        raise
    return path


def write_bytes_atomic(path: PathLike, data: bytes, *, mode: int = FILE_MODE, below: PathLike = None) -> Path:
    """Write `data` to `path` atomically and durably (see write_atomic). Never through a link."""
    return write_atomic(path, lambda stream: stream.write(data), mode=mode, below=below)


# What fsync on a folder answers on a file system that cannot sync one (some network and FUSE
# file systems): the rename stands, as durable as that file system makes it.
_FOLDER_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def sync_folder(folder: PathLike) -> None:
    """fsync `folder` itself: a file's name is an entry of its folder, which POSIX makes durable
    apart from the file's bytes, so a rename or a new file survives a power cut only after this."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(str(folder), flags)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _FOLDER_SYNC_UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)


def write_text_atomic(path: PathLike, text: str, *, mode: int = FILE_MODE, below: PathLike = None) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"), mode=mode, below=below)


def create_fresh_file(path: PathLike, *, mode: int = FILE_MODE, below: PathLike = None) -> Path:
    """Make `path` a new, empty regular file for a subprocess to append to (a cell's log).

    Whatever was there is unlinked first (a link is removed, never its target truncated); a folder
    there is refused. The file is created with O_EXCL|O_NOFOLLOW, so a link swapped in meanwhile
    makes this fail instead of writing through it."""
    path = Path(path)
    make_folder(path.parent, below=below)
    try:
        info = os.lstat(str(path))
    except FileNotFoundError:
        info = None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise UnsafePath("{} is a folder; expected a file".format(path))
        os.unlink(str(path))
    descriptor = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(descriptor, mode)  # the umask does not decide the mode of what a run produces
    finally:
        os.close(descriptor)
    return path


def open_no_follow(path: PathLike, *, append: bool = False):
    """A binary file to write (truncated, or appended to), opened with O_NOFOLLOW: a link planted at
    `path` makes this fail instead of writing through it. For files written as they grow (logs)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    descriptor = os.open(str(path), flags, FILE_MODE)
    return os.fdopen(descriptor, "ab" if append else "wb")


def remove_tree(path: PathLike, *, ignore_errors: bool = False) -> None:
    """Remove `path` if it exists: a link is unlinked (its target is left alone), a folder is
    removed without following any link inside it, a file is unlinked. With `ignore_errors`, what
    cannot be removed is left (clean-up that must not hide the error that brought us here)."""
    path = str(path)
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            os.unlink(path)
            return
        # shutil.rmtree does not follow links inside the tree (it unlinks them) and, where the
        # platform allows, guards against a folder swapped for a link while it works (fd-based).
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError:
        if not ignore_errors:
            raise


def open_for_reading(path: PathLike) -> BinaryIO:
    """The regular file `path`, opened to read in binary; never through a link, never blocking.

    For files that come from elsewhere (results copied from another machine, a data folder): a
    FIFO or a device planted in their place must not hang the reader. The file is opened without
    following a link and without blocking (a FIFO with no writer would block an ordinary open),
    then checked to be a regular file before anything is read. Raises UnsafePath for a link or
    anything that is not a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = os.open(str(path), flags)
    except OSError as error:
        if os.path.islink(str(path)):
            raise UnsafePath("{} is a symbolic link; links are never followed here".format(path))
        raise error
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise UnsafePath("{} is not a regular file".format(path))
        return os.fdopen(handle, "rb")
    except BaseException:
        os.close(handle)
        raise


def read_bytes_bounded(path: PathLike, limit: int) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them; never through a link, never
    from a FIFO or device (see open_for_reading). Raises UnsafePath for those and for a file larger
    than `limit`, so that nothing planted fills the reader's memory."""
    with open_for_reading(path) as stream:
        if os.fstat(stream.fileno()).st_size > limit:
            raise UnsafePath("{} is larger than {} bytes".format(path, limit))
        content = stream.read(limit + 1)  # the size may have grown since fstat: still bounded
    if len(content) > limit:
        raise UnsafePath("{} is larger than {} bytes".format(path, limit))
    return content


# What a name the host joins into a path may hold: letters, digits and ``_.+-``, never ``..``
# alone, at most 200 characters. A cell's key (framework, variant, options...) is such a name; a
# cell that claims another is refused before any path is made of it.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,200}")


def safe_name(name: str) -> str:
    """`name` itself when it is one plain file name (see _SAFE_NAME), else UnsafePath."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or name in (".", ".."):
        raise UnsafePath("{!r} is not a plain file name (letters, digits and _.+- only, at most 200 "
                         "characters)".format(str(name)[:80]))
    return name
