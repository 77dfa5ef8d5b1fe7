"""Datasets for the workloads: download once, verify the checksum, parse safely, cache as .npy.

Standard library and numpy only: this module runs inside every framework image. The host calls
``prepare`` before containers start (they have no network and mount the data directory read-only);
inside a container the loaders then find the verified archive and the parsed cache ready.

Every expected failure raises ``DataError`` with one line naming the file and the fix.
"""
import hashlib
import http.client
import itertools
import os
import pathlib
import pickle
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass  # novermin (Python 3.6 images install the dataclasses backport)
from typing import Callable, Iterable, Optional, Sequence, Union

import numpy as np

ProgressCallback = Callable[[int, Optional[int]], None]

_CHUNK_BYTES = 1 << 20
_DOWNLOAD_TIMEOUT_S = 60
# Bump when the layout of a parsed cache changes, so stale caches are never read.
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class RemoteFile:
    """A published archive: where it lives and the checksum its publisher gives."""

    name: str
    filename: str
    url: str
    algorithm: str  # "md5" or "sha256"
    digest: str


CIFAR10 = RemoteFile("CIFAR-10", "cifar-10-python.tar.gz",
                     "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                     "md5", "c58f30108f718f92721af3b95e74349a")
# The sha256 that keras.datasets.imdb.load_data passes to get_file.
IMDB = RemoteFile("IMDB", "imdb.npz", "https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz",
                  "sha256", "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f")

_CIFAR10_FOLDER = "cifar-10-batches-py"
_CIFAR10_TRAIN_MEMBERS = tuple(f"{_CIFAR10_FOLDER}/data_batch_{index}" for index in range(1, 6))
_CIFAR10_TEST_MEMBER = f"{_CIFAR10_FOLDER}/test_batch"
# keras.datasets.imdb.load_data shuffles train, then test, with one RandomState(113).
_KERAS_IMDB_SHUFFLE_SEED = 113


class DataError(Exception):
    """An expected data problem (missing, corrupt, unsafe); the one-line message names the fix."""


@dataclass
class Dataset:
    """Train and test arrays, and where they came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str  # "real" or "synthetic"
    checksum: Optional[str] = None  # "md5:<hex>" / "sha256:<hex>" of the archive for real data


def default_data_dir() -> pathlib.Path:
    """``$ROSETTA_DATA_DIR`` if set, else ``~/.cache/rosetta-bench/data``."""
    configured = os.environ.get("ROSETTA_DATA_DIR")
    if configured:
        return pathlib.Path(configured).expanduser()
    return pathlib.Path.home() / ".cache" / "rosetta-bench" / "data"


# --- download and verification -----------------------------------------------------------------


def fetch(remote: RemoteFile, data_dir: Union[str, os.PathLike], *, offline: bool = False,
          progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """Return ``data_dir/remote.filename``, verified against its checksum, downloading it if absent."""
    data_dir = pathlib.Path(data_dir)
    target = data_dir / remote.filename
    if target.is_file():
        _verify_present_file(remote, target)
        return target
    offline = offline or os.environ.get("ROSETTA_OFFLINE", "").strip().lower() in ("1", "true", "yes")
    if offline:
        raise _cannot_download(remote, data_dir, "offline mode")
    _download(remote, data_dir, target, progress)
    return target


def _cannot_download(remote: RemoteFile, data_dir: pathlib.Path, reason: str) -> DataError:
    return DataError(f"{remote.name}: {remote.filename} is not in {data_dir} and cannot be downloaded from "
                     f"{remote.url} ({_one_line(reason)}); put the file there, or run with --data synthetic")


def _download(remote: RemoteFile, data_dir: pathlib.Path, target: pathlib.Path,
              progress: Optional[ProgressCallback]) -> None:
    """Stream the file to a temp name beside the target, hashing as it comes, then rename it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle, temp_name = tempfile.mkstemp(prefix=f".{remote.filename}.part-", dir=data_dir)
    except OSError as error:
        raise _cannot_download(remote, data_dir, f"cannot write there: {error}") from None
    temp_path = pathlib.Path(temp_name)
    report = progress or _TextProgressBar(f"{remote.name}: downloading {remote.filename}")
    hasher = _new_hasher(remote.algorithm)
    received = 0
    try:
        with os.fdopen(handle, "wb") as output:
            try:
                with urllib.request.urlopen(remote.url, timeout=_DOWNLOAD_TIMEOUT_S) as response:
                    total = _content_length(response)
                    report(0, total)
                    while True:
                        chunk = response.read(_CHUNK_BYTES)
                        if not chunk:
                            break
                        output.write(chunk)
                        hasher.update(chunk)
                        received += len(chunk)
                        report(received, total)
            except (OSError, http.client.HTTPException, ValueError) as error:
                # URLError and HTTPError are OSErrors; a bad URL is a ValueError.
                raise _cannot_download(remote, data_dir, _describe(error)) from None
        if total is not None and received != total:
            raise DataError(f"{remote.name}: the download of {remote.filename} from {remote.url} was cut short "
                            f"({received} of {total} bytes); run again to retry, or put the file in {data_dir}")
        got = hasher.hexdigest()
        if got != remote.digest.lower():
            raise DataError(f"{remote.name}: the download of {remote.filename} from {remote.url} is corrupt "
                            f"({remote.algorithm} expected {remote.digest}, got {got}); run again to retry, "
                            f"or put a good copy in {data_dir}")
        _make_shareable(temp_path)
        os.replace(temp_path, target)
    except BaseException:
        # Whatever went wrong (Ctrl-C included), leave nothing half-written in the cache.
        _remove_quietly(temp_path)
        raise
    _write_stamp(remote, target)


def _content_length(response) -> Optional[int]:
    value = response.headers.get("Content-Length") if getattr(response, "headers", None) is not None else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _verify_present_file(remote: RemoteFile, target: pathlib.Path) -> None:
    """Check a file already in the data dir; a stamp spares re-hashing an unchanged file."""
    if _stamp_matches(remote, target):
        return
    got = _file_digest(target, remote.algorithm)
    if got != remote.digest.lower():
        raise DataError(f"{remote.name}: {target} is corrupt ({remote.algorithm} expected {remote.digest}, "
                        f"got {got}); delete it and run again to download it afresh")
    _write_stamp(remote, target)


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


def _write_stamp(remote: RemoteFile, target: pathlib.Path) -> None:
    """Record digest + size + mtime of a verified file; skipped silently on a read-only dir."""
    stamp = _stamp_path(remote, target)
    try:
        _write_atomically(stamp, _stamp_text(remote, target).encode())
    except OSError:
        pass


def _file_digest(path: pathlib.Path, algorithm: str) -> str:
    hasher = _new_hasher(algorithm)
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(_CHUNK_BYTES), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def _new_hasher(algorithm: str):
    if algorithm not in ("md5", "sha256"):
        raise ValueError(f"unknown checksum algorithm {algorithm!r}; use md5 or sha256")
    try:
        # md5 here checks integrity, not security; this keeps it usable on FIPS hosts.
        return hashlib.new(algorithm, usedforsecurity=False)  # novermin (Python 3.8 takes the except)
    except TypeError:  # Python < 3.9
        return hashlib.new(algorithm)


class _TextProgressBar:
    """A plain stderr progress bar, redrawn at most a few times a second."""

    def __init__(self, label: str, width: int = 30):
        self.label = label
        self.width = width
        self.last_draw = 0.0

    def __call__(self, done: int, total: Optional[int]) -> None:
        finished = total is not None and done >= total
        now = time.monotonic()
        if not finished and now - self.last_draw < 0.2:
            return
        self.last_draw = now
        if total:
            filled = int(self.width * min(done, total) / total)
            line = (f"\r{self.label} [{'#' * filled}{' ' * (self.width - filled)}] "
                    f"{100 * done / total:3.0f}% {done / 1e6:.1f}/{total / 1e6:.1f} MB")
        else:
            line = f"\r{self.label} {done / 1e6:.1f} MB"
        sys.stderr.write(line + ("\n" if finished else ""))
        sys.stderr.flush()


# --- CIFAR-10 ----------------------------------------------------------------------------------


def load_cifar10(data_dir: Union[str, os.PathLike], *, remote: RemoteFile = CIFAR10, offline: bool = False) -> Dataset:
    """CIFAR-10: x float32 (N, 3, 32, 32) scaled to [0, 1], y int64; 50k train / 10k test."""
    data_dir = pathlib.Path(data_dir)
    archive = fetch(remote, data_dir, offline=offline)
    cache_dir = data_dir / "cache" / f"cifar10-{remote.digest.lower()[:12]}"
    arrays = _read_cache(cache_dir, _check_cifar10_arrays)
    if arrays is None:
        arrays = _parse_cifar10_archive(remote, archive)
        _write_cache(cache_dir, arrays)
    return Dataset(x_train=_to_unit_float(arrays["x_train"]), y_train=np.array(arrays["y_train"], dtype=np.int64),
                   x_test=_to_unit_float(arrays["x_test"]), y_test=np.array(arrays["y_test"], dtype=np.int64),
                   source="real", checksum=f"{remote.algorithm}:{remote.digest.lower()}")


def _to_unit_float(images_uint8: np.ndarray) -> np.ndarray:
    """uint8 0-255 → float32 0-1 in one vectorised pass (dividing keeps 255 → exactly 1.0)."""
    return np.divide(images_uint8, np.float32(255.0), dtype=np.float32)


def _parse_cifar10_archive(remote: RemoteFile, archive: pathlib.Path) -> dict:
    """Read the batches straight from the tarball: nothing is extracted to disk."""
    wanted = set(_CIFAR10_TRAIN_MEMBERS) | {_CIFAR10_TEST_MEMBER}
    raw_members = _read_tar_members(remote, archive, wanted)
    # Every member has been validated; only now is anything unpickled (raw bytes freed as we go).
    train = [_cifar10_batch(remote, name, raw_members.pop(name)) for name in _CIFAR10_TRAIN_MEMBERS]
    test_images, test_labels = _cifar10_batch(remote, _CIFAR10_TEST_MEMBER, raw_members.pop(_CIFAR10_TEST_MEMBER))
    return {
        "x_train": np.concatenate([images for images, _ in train]),
        "y_train": np.concatenate([labels for _, labels in train]),
        "x_test": test_images,
        "y_test": test_labels,
    }


def _read_tar_members(remote: RemoteFile, archive: pathlib.Path, wanted: set) -> dict:
    """One streaming pass over the archive: validate every member, keep the bytes of the wanted ones."""
    contents = {}
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for member in tar:
                _check_member_is_safe(remote, archive, member)
                if member.isfile() and _normalised_member_name(member.name) in wanted:
                    contents[_normalised_member_name(member.name)] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise DataError(f"{remote.name}: {archive} is not a readable tar archive ({_describe(error)}); "
                        f"delete it and run again to download it afresh") from None
    missing = sorted(wanted - set(contents))
    if missing:
        raise DataError(f"{remote.name}: {archive} lacks {', '.join(missing)}; "
                        f"delete it and run again to download it afresh")
    return contents


def _normalised_member_name(name: str) -> str:
    return name[2:] if name.startswith("./") else name


def _check_member_is_safe(remote: RemoteFile, archive: pathlib.Path, member: tarfile.TarInfo) -> None:
    """Refuse anything that could escape a folder or is not a plain file or folder."""
    name = member.name
    parts = name.replace("\\", "/").split("/")
    problem = None
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        problem = "absolute path"
    elif ".." in parts:
        problem = "'..' in its path"
    elif member.issym() or member.islnk():
        problem = "link"
    elif member.ischr() or member.isblk() or member.isfifo():
        problem = "device or pipe"
    elif not (member.isfile() or member.isdir()):
        problem = "not a regular file or folder"
    if problem:
        raise DataError(f"{remote.name}: unsafe archive member {name!r} ({problem}) in {archive}; "
                        f"refusing to read it: delete the file and download the original archive")


def _cifar10_batch(remote: RemoteFile, member: str, raw: bytes) -> tuple:
    try:
        batch = pickle.loads(raw, encoding="bytes")
        images = np.asarray(_pick(batch, "data"), dtype=np.uint8)
        labels = np.asarray(_pick(batch, "labels"), dtype=np.int64)
    except Exception as error:  # a verified archive should never get here; name the member if it does
        raise DataError(f"{remote.name}: cannot parse {member} ({_describe(error)}); "
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


# --- IMDB --------------------------------------------------------------------------------------


def load_imdb(data_dir: Union[str, os.PathLike], *, settings, remote: RemoteFile = IMDB, offline: bool = False) -> Dataset:
    """IMDB as Keras preprocesses it: x int32 (N, sequence_length), y int64; 25k train / 25k test.

    Rows come in the order of ``keras.datasets.imdb.load_data`` (seed 113), so the file's
    sorted-by-label order never reaches a capped evaluation.
    """
    data_dir = pathlib.Path(data_dir)
    archive = fetch(remote, data_dir, offline=offline)
    options = _imdb_options(settings)
    cache_dir = data_dir / "cache" / ("imdb-{}-v{vocabulary}-len{sequence_length}-start{start_char}-oov{oov_char}"
                                      "-from{index_from}".format(remote.digest.lower()[:12], **options))
    arrays = _read_cache(cache_dir, lambda found: _check_imdb_arrays(found, options["sequence_length"]))
    if arrays is None:
        arrays = _parse_imdb_archive(remote, archive, options)
        _write_cache(cache_dir, arrays)
    return Dataset(x_train=np.array(arrays["x_train"]), y_train=np.array(arrays["y_train"]),
                   x_test=np.array(arrays["x_test"]), y_test=np.array(arrays["y_test"]),
                   source="real", checksum=f"{remote.algorithm}:{remote.digest.lower()}")


def _imdb_options(settings) -> dict:
    return {name: getattr(settings, name)
            for name in ("vocabulary", "sequence_length", "start_char", "oov_char", "index_from")}


def _parse_imdb_archive(remote: RemoteFile, archive: pathlib.Path, options: dict) -> dict:
    # allow_pickle is safe here only because fetch() has verified the published checksum.
    try:
        with np.load(archive, allow_pickle=True) as npz:
            raw = {name: npz[name] for name in ("x_train", "y_train", "x_test", "y_test")}
    except (KeyError, ValueError, OSError, EOFError, pickle.UnpicklingError, zlib.error) as error:
        raise DataError(f"{remote.name}: cannot read {archive} as a Keras imdb.npz ({_describe(error)}); "
                        f"delete it and run again to download it afresh") from None
    shuffle = np.random.RandomState(_KERAS_IMDB_SHUFFLE_SEED)
    arrays = {}
    for split in ("train", "test"):
        order = np.arange(len(raw[f"x_{split}"]))
        shuffle.shuffle(order)
        arrays[f"x_{split}"] = preprocess_imdb(raw[f"x_{split}"], **options)[order]
        arrays[f"y_{split}"] = np.asarray(raw[f"y_{split}"], dtype=np.int64)[order]
    return arrays


def preprocess_imdb(sequences: Sequence[Sequence[int]], *, vocabulary: int, sequence_length: int,
                    start_char: Optional[int], oov_char: int, index_from: int) -> np.ndarray:
    """Keras preprocessing, vectorised: ``[start_char] + [w + index_from ...]``, indices
    ``>= vocabulary`` → ``oov_char``, keep the last ``sequence_length`` tokens, zero-pad at the end.

    Returns int32 (len(sequences), sequence_length).
    """
    lengths = np.fromiter((len(review) for review in sequences), dtype=np.int64, count=len(sequences))
    # Only a review's last sequence_length words can survive truncation, so only those are flattened:
    # this halves the Python-level work on real IMDB, whose reviews average ~230 words.
    kept_lengths = np.minimum(lengths, sequence_length)
    tails = (review[len(review) - sequence_length:] if len(review) > sequence_length else review
             for review in sequences)
    if len(sequences) and all(isinstance(review, np.ndarray) for review in sequences):
        flat_words = np.concatenate([np.asarray(tail, dtype=np.int64) for tail in tails] or [np.zeros(0, np.int64)])
    else:
        flat_words = np.fromiter(itertools.chain.from_iterable(tails), dtype=np.int64, count=int(kept_lengths.sum()))
    return _pad_flat_reviews(flat_words, kept_lengths, lengths, vocabulary=vocabulary,
                             sequence_length=sequence_length, start_char=start_char, oov_char=oov_char,
                             index_from=index_from)


def _pad_flat_reviews(flat_words: np.ndarray, flat_lengths: np.ndarray, full_lengths: np.ndarray, *,
                      vocabulary: int, sequence_length: int, start_char: Optional[int], oov_char: int,
                      index_from: int) -> np.ndarray:
    """Scatter concatenated reviews into padded rows without a per-review loop.

    ``flat_words`` holds each review's last ``flat_lengths[i]`` raw words back to back;
    ``full_lengths[i]`` is the review's length before that cut (it decides whether the start
    character survives truncation).
    """
    reviews = len(full_lengths)
    output = np.zeros((reviews, sequence_length), dtype=np.int32)
    if reviews == 0 or sequence_length == 0:
        return output
    has_start = start_char is not None
    token_counts = full_lengths + (1 if has_start else 0)  # tokens before truncation
    # The start character survives only when the whole review fits after it.
    start_kept = token_counts <= sequence_length if has_start else np.zeros(reviews, dtype=bool)
    words_kept = np.minimum(full_lengths, sequence_length - start_kept.astype(np.int64))
    # Within each review's flattened tail, the kept words are its last words_kept ones.
    tail_ends = np.cumsum(flat_lengths)
    total_kept = int(words_kept.sum())
    row_of_word = np.repeat(np.arange(reviews), words_kept)
    first_column = start_kept.astype(np.int64)
    # Rank of each kept word within its review: a running index minus where its review's run began.
    run_starts = np.cumsum(words_kept) - words_kept
    rank = np.arange(total_kept) - np.repeat(run_starts, words_kept)
    source = np.repeat(tail_ends - words_kept, words_kept) + rank
    words = flat_words[source] + index_from
    words[words >= vocabulary] = oov_char
    output[row_of_word, np.repeat(first_column, words_kept) + rank] = words
    if has_start:
        output[start_kept, 0] = start_char if start_char < vocabulary else oov_char
    return output


def _check_imdb_arrays(arrays: dict, sequence_length: int) -> bool:
    return (arrays["x_train"].dtype == np.int32 and arrays["x_train"].ndim == 2
            and arrays["x_train"].shape[1] == sequence_length
            and arrays["x_test"].dtype == np.int32 and arrays["x_test"].ndim == 2
            and arrays["x_test"].shape[1] == sequence_length
            and arrays["y_train"].dtype == np.int64 and arrays["y_train"].shape == arrays["x_train"].shape[:1]
            and arrays["y_test"].dtype == np.int64 and arrays["y_test"].shape == arrays["x_test"].shape[:1])


# --- the parsed-array cache --------------------------------------------------------------------

_SPLITS = ("x_train", "y_train", "x_test", "y_test")


def _read_cache(cache_dir: pathlib.Path, check: Callable[[dict], bool]) -> Optional[dict]:
    """The cached arrays (memory-mapped, read lazily), or None when absent or unusable."""
    try:
        if (cache_dir / "format").read_text().strip() != str(_CACHE_FORMAT):
            return None
        arrays = {name: np.load(cache_dir / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in _SPLITS}
    except (OSError, ValueError):
        return None
    return arrays if check(arrays) else None


def _write_cache(cache_dir: pathlib.Path, arrays: dict) -> None:
    """Write into a temp folder, then rename it into place: a crash never leaves half a cache.

    A read-only data dir (as mounted in Docker) just means no cache: skipped silently.
    """
    temp_dir = None
    try:
        cache_dir.parent.mkdir(parents=True, exist_ok=True)
        temp_dir = pathlib.Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.part-", dir=cache_dir.parent))
        for name in _SPLITS:
            np.save(temp_dir / f"{name}.npy", np.ascontiguousarray(arrays[name]), allow_pickle=False)
        (temp_dir / "format").write_text(f"{_CACHE_FORMAT}\n")
        _make_shareable(temp_dir)
        if cache_dir.exists():  # unusable (stale or damaged): replace it
            shutil.rmtree(cache_dir)
        os.rename(temp_dir, cache_dir)
        temp_dir = None
    except OSError:
        pass  # read-only, full disk, or another process won the rename: loading still works
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def _write_atomically(path: pathlib.Path, content: bytes) -> None:
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.part-", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        _make_shareable(pathlib.Path(temp_name))
        os.replace(temp_name, path)
    except BaseException:
        _remove_quietly(pathlib.Path(temp_name))
        raise


# --- synthetic and random data -----------------------------------------------------------------


_SYNTHETIC_BLOCK = 2048


def synthetic_cifar10(n_train: int, n_test: int, *, seed: int) -> Dataset:
    """CIFAR-10-shaped data with a learnable signal: a smooth per-class colour/spatial pattern in noise."""
    rng = np.random.default_rng(seed)
    classes = 10
    # 4x4 blocks of colour per class, upsampled to 32x32: coarse enough for any CNN to pick up.
    coarse = rng.random((classes, 3, 4, 4), dtype=np.float32)
    patterns = coarse.repeat(8, axis=2).repeat(8, axis=3)

    def split(count: int):
        labels = _balanced_labels(rng, count, classes)
        images = np.empty((count, 3, 32, 32), dtype=np.float32)
        # In blocks, so the full-size set (600 MB) needs no full-size temporaries.
        for start in range(0, count, _SYNTHETIC_BLOCK):
            block = images[start:start + _SYNTHETIC_BLOCK]
            rng.random(dtype=np.float32, out=block)
            block *= np.float32(0.6)
            block += np.float32(0.4) * patterns[labels[start:start + _SYNTHETIC_BLOCK]]
            np.clip(block, 0.0, 1.0, out=block)
        return images, labels

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(x_train, y_train, x_test, y_test, source="synthetic", checksum=None)


def synthetic_imdb(n_train: int, n_test: int, *, settings, seed: int) -> Dataset:
    """IMDB-shaped data with a learnable signal: shared Zipf-like words plus class "sentiment" words.

    Reviews of random length go through the same truncation/padding as the real data.
    """
    options = _imdb_options(settings)
    rng = np.random.default_rng(seed)
    # Raw (unshifted) word ids, as in imdb.npz: 1 is the most frequent word. Some exceed the
    # vocabulary so that out-of-vocabulary tokens appear too.
    raw_vocabulary = max(int(options["vocabulary"] * 1.5), 10)
    in_vocabulary = max(options["vocabulary"] - options["index_from"], 2)
    sentiment_words = rng.choice(np.arange(1, in_vocabulary), size=(2, 40), replace=False)

    def split(count: int):
        labels = _balanced_labels(rng, count, 2)
        # Lengths spread like real reviews: median ~175 words, a long tail, at least 10.
        lengths = np.clip(rng.lognormal(mean=5.15, sigma=0.7, size=count), 10, 2500).astype(np.int64)
        total = int(lengths.sum())
        # Log-uniform ids: P(id) ~ 1/id, Zipf's law for word frequencies, and fast to draw.
        words = np.exp(rng.random(total) * np.log(raw_vocabulary)).astype(np.int64)
        review_of_word = np.repeat(np.arange(count), lengths)
        sentiment = rng.random(total) < 0.08
        choices = rng.integers(0, sentiment_words.shape[1], size=int(sentiment.sum()))
        words[sentiment] = sentiment_words[labels[review_of_word[sentiment]], choices]
        # A review's tail is what survives truncation; cut it out of the flat array without a loop.
        kept = np.minimum(lengths, options["sequence_length"])
        ends = np.cumsum(lengths)
        keep = np.arange(total) >= np.repeat(ends - kept, lengths)
        images = _pad_flat_reviews(words[keep], kept, lengths, **options)
        return images, labels

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(x_train, y_train, x_test, y_test, source="synthetic", checksum=None)


def _balanced_labels(rng: np.random.Generator, count: int, classes: int) -> np.ndarray:
    """Every class equally often (±1), in random order."""
    return rng.permutation(np.arange(count, dtype=np.int64) % classes)


def random_images(count: int, shape: Iterable[int], *, seed: int) -> np.ndarray:
    """float32 (count, *shape), uniform in [0, 1), from ``np.random.default_rng(seed)``."""
    return np.random.default_rng(seed).random((count, *tuple(shape)), dtype=np.float32)


# --- host-side preparation ---------------------------------------------------------------------


def prepare(name: str, data_dir: Union[str, os.PathLike], *, settings=None, offline: bool = False,
            progress: Optional[ProgressCallback] = None) -> pathlib.Path:
    """Fetch, verify and cache a dataset ("cifar10" or "imdb") on the host, before containers start.

    Returns the archive's path.
    """
    data_dir = pathlib.Path(data_dir)
    if name == "cifar10":
        archive = fetch(CIFAR10, data_dir, offline=offline, progress=progress)
        load_cifar10(data_dir, remote=CIFAR10, offline=True)
        return archive
    if name == "imdb":
        if settings is None:
            from workloads.common import hyperparams  # standard library only, like this module

            settings = hyperparams.settings("gru", "full")
        archive = fetch(IMDB, data_dir, offline=offline, progress=progress)
        load_imdb(data_dir, settings=settings, remote=IMDB, offline=True)
        return archive
    raise ValueError(f"unknown dataset {name!r}; choose from cifar10, imdb")


# --- helpers -----------------------------------------------------------------------------------


def _describe(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return _one_line(str(error.reason))
    return _one_line(f"{type(error).__name__}: {error}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _make_shareable(path: pathlib.Path) -> None:
    """Give a temp file or folder (created 0600/0700) the usual umask permissions.

    The host prepares the data dir; a container may read it as another user.
    """
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def _remove_quietly(path: pathlib.Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        pass
