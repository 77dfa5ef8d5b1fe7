"""Fetching a published archive: use the verified copy in the data dir, else download and verify it."""
import http.client
import os
import pathlib
import stat
import tempfile
import urllib.request
from typing import Optional, Union

from .checksum import CHUNK_BYTES, ArchiveHasher, verify_present_file, write_stamp
from .errors import DataError, describe, one_line
from .files import make_shareable, remove_quietly
from .progress import ProgressCallback, TextProgressBar
from .published import RemoteFile

DOWNLOAD_TIMEOUT_S = 60


def fetch(remote: RemoteFile, data_dir: Union[str, os.PathLike], *, offline: bool = False,
          progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """Return ``data_dir/remote.filename``, verified against its checksum, downloading it if absent.

    The data folder may hold anything (docs/RUN-GUARANTEES.md, bad input): an archive that is a
    link (never followed), a folder, a FIFO or a device, or that cannot be read, is a DataError, as
    is a data folder that is no folder; the data folder itself may be a link to one."""
    data_dir = pathlib.Path(data_dir)
    target = data_dir / remote.filename
    fix = "delete it and run again to download it afresh, or put the archive itself there"
    try:
        kind = os.lstat(str(target)).st_mode
    except FileNotFoundError:
        kind = None
    except NotADirectoryError:
        raise _not_a_folder(remote, data_dir) from None
    except OSError as error:
        raise DataError(f"{remote.name}: cannot read {target} ({describe(error)}); {fix}") from None
    if kind is not None:
        if stat.S_ISLNK(kind):
            raise DataError(f"{remote.name}: {target} is a symbolic link, which is never followed in the data "
                            f"folder; {fix}")
        if not stat.S_ISREG(kind):
            what = "a folder" if stat.S_ISDIR(kind) else "a FIFO or a device"
            raise DataError(f"{remote.name}: {target} is {what}, not the archive; {fix}")
        try:
            verify_present_file(remote, target)
        except OSError as error:  # unreadable, or swapped for a link or a FIFO since
            raise DataError(f"{remote.name}: cannot read {target} ({describe(error)}); {fix}") from None
        return target
    if os.path.lexists(str(data_dir)) and not os.path.isdir(str(data_dir)):
        raise _not_a_folder(remote, data_dir)
    offline = offline or os.environ.get("ROSETTA_OFFLINE", "").strip().lower() in ("1", "true", "yes")
    if offline:
        raise _cannot_download(remote, data_dir, "offline mode")
    _download(remote, data_dir, target, progress)
    return target


def _not_a_folder(remote: RemoteFile, data_dir: pathlib.Path) -> DataError:
    return DataError(f"{remote.name}: the data folder {data_dir} is not a folder (a file, or a link to nothing); "
                     f"pass --data-dir a folder, or set ROSETTA_DATA_DIR to one")


def _cannot_download(remote: RemoteFile, data_dir: pathlib.Path, reason: str) -> DataError:
    return DataError(f"{remote.name}: {remote.filename} is not in {data_dir} and cannot be downloaded from "
                     f"{remote.url} ({one_line(reason)}); put the file there, or run with --data synthetic")


def _too_large(remote: RemoteFile, data_dir: pathlib.Path, how_much: str) -> DataError:
    return DataError(f"{remote.name}: the download of {remote.filename} from {remote.url} is larger than "
                     f"{remote.max_bytes} bytes, the most the archive can be ({how_much}); stopped, nothing kept: "
                     f"put a good copy in {data_dir}")


def _download(remote: RemoteFile, data_dir: pathlib.Path, target: pathlib.Path,
              progress: Optional[ProgressCallback]) -> None:
    """Stream the file to a temp name beside the target, hashing as it comes, then rename it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(prefix=f".{remote.filename}.part-", dir=data_dir)
    except OSError as error:
        raise _cannot_download(remote, data_dir, f"cannot write there: {error}") from None
    temp_path = pathlib.Path(temp_name)
    report = progress or TextProgressBar(f"{remote.name}: downloading {remote.filename}")
    hasher = ArchiveHasher(remote)
    received = 0
    try:
        with os.fdopen(handle, "wb") as output:
            try:
                with urllib.request.urlopen(remote.url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                    total = _content_length(response)
                    if total is not None and total > remote.max_bytes:
                        raise _too_large(remote, data_dir, f"{total} bytes announced")
                    report(0, total)
                    while True:
                        chunk = response.read(CHUNK_BYTES)
                        if not chunk:
                            break
                        output.write(chunk)
                        hasher.update(chunk)
                        received += len(chunk)
                        if received > remote.max_bytes:  # a server that sends more than it announced
                            raise _too_large(remote, data_dir, f"{received} bytes received so far")
                        report(received, total)
            except (OSError, http.client.HTTPException, ValueError) as error:
                # URLError and HTTPError are OSErrors; a bad URL is a ValueError.
                raise _cannot_download(remote, data_dir, describe(error)) from None
        if total is not None and received != total:
            raise DataError(f"{remote.name}: the download of {remote.filename} from {remote.url} was cut short "
                            f"({received} of {total} bytes); run again to retry, or put the file in {data_dir}")
        mismatch = hasher.mismatch()
        if mismatch:
            algorithm, expected, got = mismatch
            raise DataError(f"{remote.name}: the download of {remote.filename} from {remote.url} is corrupt "
                            f"({algorithm} expected {expected}, got {got}); run again to retry, "
                            f"or put a good copy in {data_dir}")
        make_shareable(temp_path)
        os.replace(temp_path, target)
    except BaseException:
        # Whatever went wrong (Ctrl-C included), leave nothing half-written in the cache.
        remove_quietly(temp_path)
        raise
    write_stamp(remote, target)


def _content_length(response) -> Optional[int]:
    value = response.headers.get("Content-Length") if getattr(response, "headers", None) is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
