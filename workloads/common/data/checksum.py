"""Checking an archive against its published checksum, and the stamp that spares re-hashing it."""
import hashlib
import pathlib

from .errors import DataError
from .files import write_atomically
from .published import RemoteFile

CHUNK_BYTES = 1 << 20


def verify_present_file(remote: RemoteFile, target: pathlib.Path) -> None:
    """Check a file already in the data dir; a stamp spares re-hashing an unchanged file."""
    if _stamp_matches(remote, target):
        return
    got = file_digest(target, remote.algorithm)
    if got != remote.digest.lower():
        raise DataError(f"{remote.name}: {target} is corrupt ({remote.algorithm} expected {remote.digest}, "
                        f"got {got}); delete it and run again to download it afresh")
    write_stamp(remote, target)


def file_digest(path: pathlib.Path, algorithm: str) -> str:
    hasher = new_hasher(algorithm)
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def new_hasher(algorithm: str):
    if algorithm not in ("md5", "sha256"):
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use md5 or sha256")
    try:
        # md5 here checks integrity, not security; this keeps it usable on FIPS hosts.
        return hashlib.new(algorithm, usedforsecurity=False)  # novermin (Python 3.8 takes the except)
    except TypeError:  # Python < 3.9
        return hashlib.new(algorithm)


def write_stamp(remote: RemoteFile, target: pathlib.Path) -> None:
    """Record digest + size + mtime of a verified file; skipped silently on a read-only dir."""
    stamp = _stamp_path(remote, target)
    try:
        write_atomically(stamp, _stamp_text(remote, target).encode())
    except OSError:
        pass


def _stamp_path(remote: RemoteFile, target: pathlib.Path) -> pathlib.Path:
    return target.with_name(f"{target.name}.{remote.algorithm}")


def _stamp_text(remote: RemoteFile, target: pathlib.Path) -> str:
    status = target.stat()
    return f"{remote.digest.lower()} {status.st_size} {status.st_mtime_ns}\n"


def _stamp_matches(remote: RemoteFile, target: pathlib.Path) -> bool:
    try:
        return _stamp_path(remote, target).read_text() == _stamp_text(remote, target)
    except (OSError, UnicodeDecodeError):
        return False
