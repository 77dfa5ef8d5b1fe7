"""Writing into the data dir so that nothing is ever half-written and a container can read it."""
import os
import pathlib
import tempfile


def write_atomically(path: pathlib.Path, content: bytes) -> None:
    """Write to a temp name beside ``path``, then rename it into place."""
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.part-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        make_shareable(pathlib.Path(temp_name))
        os.replace(temp_name, path)
    except BaseException:
        remove_quietly(pathlib.Path(temp_name))
        raise


def make_shareable(path: pathlib.Path) -> None:
    """Give a temp file or folder (created 0600/0700) the usual umask permissions.

    The host prepares the data dir; a container may read it as another user.
    """
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def remove_quietly(path: pathlib.Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        pass
