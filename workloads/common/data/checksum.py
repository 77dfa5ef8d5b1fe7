"""Checking an archive against its published checksum, and the stamp that spares re-hashing it.

The stamp (digest, size, mtime) only spares re-hashing before a file is used by code that cannot
be subverted by its content. Anything that unpickles an archive first verifies its full digest
in this process, on the very bytes it then parses: ``read_verified`` and ``VerifyingReader``.
"""
import hashlib
import pathlib

from .errors import DataError
from .files import remove_quietly, write_atomically
from .published import RemoteFile

CHUNK_BYTES = 1 << 20


def verify_present_file(remote: RemoteFile, target: pathlib.Path) -> None:
    """Check a file already in the data dir; a stamp spares re-hashing an unchanged file."""
    if _stamp_matches(remote, target):
        return
    got = file_digest(target, remote.algorithm)
    if got != remote.digest.lower():
        raise corrupt_file(remote, target, got)
    write_stamp(remote, target)


def corrupt_file(remote: RemoteFile, target: pathlib.Path, got: str) -> DataError:
    """The error for a file whose digest is not the published one; its stamp goes, so it is re-hashed."""
    remove_quietly(_stamp_path(remote, target))
    return DataError(f"{remote.name}: {target} is corrupt ({remote.algorithm} expected {remote.digest}, "
                     f"got {got}); delete it and run again to download it afresh")


def read_verified(remote: RemoteFile, target: pathlib.Path) -> bytes:
    """The whole file, read once and checked against the published digest: parse these bytes, not the file.

    Hashing the bytes that are then parsed leaves no window in which the file could change.
    """
    with open(target, "rb") as stream:
        content = stream.read()
    hasher = new_hasher(remote.algorithm)
    hasher.update(content)
    got = hasher.hexdigest()
    if got != remote.digest.lower():
        raise corrupt_file(remote, target, got)
    return content


class VerifyingReader:
    """A read-only stream over a file that hashes every byte read; ``verify`` reads to the end and
    raises DataError unless the digest is the published one.

    For archives too large to hold twice in memory: parse from this stream, keep the raw bytes
    needed, call ``verify``, and only then unpickle anything.
    """

    def __init__(self, remote: RemoteFile, target: pathlib.Path):
        self.remote = remote
        self.target = target
        self._stream = open(target, "rb")
        self._hasher = new_hasher(remote.algorithm)

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._hasher.update(chunk)
        return chunk

    def verify(self) -> None:
        for chunk in iter(lambda: self.read(CHUNK_BYTES), b""):
            pass
        got = self._hasher.hexdigest()
        if got != self.remote.digest.lower():
            raise corrupt_file(self.remote, self.target, got)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> "VerifyingReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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
