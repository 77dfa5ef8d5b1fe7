"""Checking an archive against its published checksum, and the stamp that spares re-hashing it.

Every check is against every digest the archive's declaration gives (RemoteFile.expected_digests:
the published one, and its SHA-256 beside a published MD5). The stamp (digests, size, mtime) only
spares re-hashing before a file is used by code that cannot be subverted by its content. Anything
that unpickles an archive first verifies its full digests in this process, on the very bytes it
then parses: ``read_verified`` and ``VerifyingReader``.
"""
import hashlib
import os
import pathlib
from typing import Optional, Tuple

from .. import safe_files
from .errors import DataError
from .files import remove_quietly, write_atomically
from .published import RemoteFile

CHUNK_BYTES = 1 << 20


def verify_present_file(remote: RemoteFile, target: pathlib.Path) -> None:
    """Check a file already in the data dir; a stamp spares re-hashing an unchanged file. Raises
    OSError when it cannot be read (safe_files.UnsafePath for a link, a FIFO, a folder)."""
    with open_archive(target) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > remote.max_bytes:
            raise too_large(remote, target, size)
        if _stamp_matches(remote, target):
            return
        hasher = ArchiveHasher(remote)
        for chunk in iter(lambda: stream.read(CHUNK_BYTES), b""):
            hasher.update(chunk)
    mismatch = hasher.mismatch()
    if mismatch:
        raise corrupt_file(remote, target, mismatch)
    write_stamp(remote, target)


def open_archive(target: pathlib.Path):
    """The archive opened to read: never through a link, never a FIFO or a device (a data folder
    may hold anything; docs/RUN-GUARANTEES.md, bad input)."""
    return safe_files.open_for_reading(target)


# A digest the bytes do not have: (algorithm, expected, got).
Mismatch = Tuple[str, str, str]


class ArchiveHasher:
    """Hashes bytes with every algorithm the archive is checked by (RemoteFile.expected_digests)."""

    def __init__(self, remote: RemoteFile):
        self._expected = remote.expected_digests()
        self._hashers = {algorithm: new_hasher(algorithm) for algorithm in self._expected}

    def update(self, chunk: bytes) -> None:
        for hasher in self._hashers.values():
            hasher.update(chunk)

    def mismatch(self) -> Optional[Mismatch]:
        """The first digest the bytes hashed so far do not have; None when they have them all."""
        for algorithm, expected in self._expected.items():
            got = self._hashers[algorithm].hexdigest()
            if got != expected:
                return algorithm, expected, got
        return None


def too_large(remote: RemoteFile, target: pathlib.Path, size: int) -> DataError:
    """The error for a file larger than its archive can be (RemoteFile.max_bytes): never read."""
    return DataError(f"{remote.name}: {target} is {size} bytes, larger than {remote.max_bytes} bytes, the most "
                     f"{remote.filename} can be; delete it and run again to download it afresh")


def corrupt_file(remote: RemoteFile, target: pathlib.Path, mismatch: Mismatch) -> DataError:
    """The error for a file without a declared digest; its stamp goes, so it is re-hashed."""
    algorithm, expected, got = mismatch
    remove_quietly(_stamp_path(remote, target))
    return DataError(f"{remote.name}: {target} is corrupt ({algorithm} expected {expected}, "
                     f"got {got}); delete it and run again to download it afresh")


def read_verified(remote: RemoteFile, target: pathlib.Path) -> bytes:
    """The whole file, read once and checked against the published digest: parse these bytes, not the file.

    Hashing the bytes that are then parsed leaves no window in which the file could change.
    """
    with open_archive(target) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > remote.max_bytes:
            raise too_large(remote, target, size)
        content = stream.read(remote.max_bytes + 1)  # the file may have grown since: still bounded
    if len(content) > remote.max_bytes:
        raise too_large(remote, target, len(content))
    hasher = ArchiveHasher(remote)
    hasher.update(content)
    mismatch = hasher.mismatch()
    if mismatch:
        raise corrupt_file(remote, target, mismatch)
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
        self._stream = open_archive(target)
        self._hasher = ArchiveHasher(remote)

    def read(self, size: int = -1) -> bytes:
        chunk = self._stream.read(size)
        self._hasher.update(chunk)
        return chunk

    def verify(self) -> None:
        for chunk in iter(lambda: self.read(CHUNK_BYTES), b""):
            pass
        mismatch = self._hasher.mismatch()
        if mismatch:
            raise corrupt_file(self.remote, self.target, mismatch)

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> "VerifyingReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def file_digest(path: pathlib.Path, algorithm: str) -> str:
    hasher = new_hasher(algorithm)
    with open_archive(path) as stream:
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
    # every digest checked: a stamp from before a SHA-256 was declared spares no check of it
    return f"{' '.join(remote.expected_digests().values())} {status.st_size} {status.st_mtime_ns}\n"


# A stamp is one line of digests, a size and a time; anything longer is not one.
LONGEST_STAMP = 1024


def _stamp_matches(remote: RemoteFile, target: pathlib.Path) -> bool:
    """Whether the stamp beside `target` says it is unchanged since verified; a stamp that is a
    link, a FIFO, a folder or no text is no stamp (read bounded: safe_files.read_bytes_bounded)."""
    try:
        stamp = safe_files.read_bytes_bounded(_stamp_path(remote, target), LONGEST_STAMP)
        return stamp.decode("utf-8") == _stamp_text(remote, target)
    except (OSError, UnicodeDecodeError):
        return False
