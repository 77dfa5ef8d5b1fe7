"""The data loaders against small files in the real formats, served from a local HTTP server.

No dataset host is reachable from CI, so the tests build a real ``cifar-10-python.tar.gz``
(Python pickles in ``cifar-10-batches-py/``) and a real Keras-style ``imdb.npz`` (object arrays
of lists), serve them on 127.0.0.1 and drive download, checksum, parsing and caching end to end.
"""
from __future__ import annotations

import dataclasses
import hashlib
import http.server
import io
import os
import pickle
import shutil
import socket
import tarfile
import threading

import numpy as np
import pytest

from workloads.common import data, hyperparams

IMAGES_PER_BATCH = 20
CIFAR_BATCHES = [f"data_batch_{index}" for index in range(1, 6)] + ["test_batch"]
GRU = hyperparams.settings("gru", "full")


# --- a local HTTP server ---------------------------------------------------------------------


class FileServer:
    """Serves in-memory files; can cut a response short; counts requests."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.cut_short: set[str] = set()  # paths sent with the full Content-Length but half the body
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                # HTTP/1.0: the connection closes after this, so a short body is a truncated download.
                self.wfile.write(body[:len(body) // 2] if self.path in server.cut_short else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # A short poll interval keeps shutdown (every test's teardown) quick.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def remote(self, template: data.RemoteFile, body: bytes, *, digest: str | None = None) -> data.RemoteFile:
        """Serve ``body`` and describe it like ``template``, with its true digest unless told otherwise."""
        path = f"/files/{template.filename}"
        self.files[path] = body
        true_digest = hashlib.new(template.algorithm, body).hexdigest()
        return data.RemoteFile(template.name, template.filename, f"http://127.0.0.1:{self.port}{path}",
                               template.algorithm, digest or true_digest)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    file_server = FileServer()
    yield file_server
    file_server.stop()


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


def quiet(done, total):
    """A progress callback that keeps the test output clean."""


# --- files in the real formats ---------------------------------------------------------------


def cifar_tarball(*, seed: int = 0, extra_members: list | None = None, skip: tuple = ()) -> tuple[bytes, dict]:
    """A real-format cifar-10-python.tar.gz with IMAGES_PER_BATCH images per batch, and its arrays."""
    rng = np.random.default_rng(seed)
    arrays = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        folder = tarfile.TarInfo("cifar-10-batches-py")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name in CIFAR_BATCHES:
            images = rng.integers(0, 256, (IMAGES_PER_BATCH, 3072), dtype=np.uint8)
            labels = rng.integers(0, 10, IMAGES_PER_BATCH).tolist()
            arrays[name] = (images, labels)
            if name in skip:
                continue
            batch = {b"batch_label": name.encode(), b"labels": labels, b"data": images,
                     b"filenames": [f"{index}.png".encode() for index in range(IMAGES_PER_BATCH)]}
            add_bytes(tar, f"cifar-10-batches-py/{name}", pickle.dumps(batch, protocol=2))
        for member, payload in extra_members or []:
            tar.addfile(member, io.BytesIO(payload) if payload is not None else None)
    return buffer.getvalue(), arrays


def add_bytes(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(payload)
    tar.addfile(member, io.BytesIO(payload))


def expected_cifar(arrays: dict) -> tuple:
    train = [arrays[name] for name in CIFAR_BATCHES[:5]]
    x_train = np.concatenate([images for images, _ in train]).reshape(-1, 3, 32, 32)
    y_train = np.concatenate([labels for _, labels in train])
    x_test = arrays["test_batch"][0].reshape(-1, 3, 32, 32)
    return x_train, y_train, x_test, np.asarray(arrays["test_batch"][1])


def random_reviews(rng: np.random.Generator, count: int, max_length: int = 200, max_index: int = 40_000) -> list:
    """Reviews as lists of Python ints; lengths straddle the sequence length (150)."""
    return [rng.integers(1, max_index, rng.integers(0, max_length)).tolist() for _ in range(count)]


def object_array(items: list) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


def imdb_npz(*, seed: int = 0, train: int = 30, test: int = 20) -> tuple[bytes, dict]:
    """A real-format Keras imdb.npz: object arrays of lists, int64 labels sorted like the real file."""
    rng = np.random.default_rng(seed)
    raw = {"x_train": random_reviews(rng, train), "x_test": random_reviews(rng, test),
           "y_train": np.sort(rng.integers(0, 2, train)), "y_test": np.sort(rng.integers(0, 2, test))}
    buffer = io.BytesIO()
    np.savez(buffer, x_train=object_array(raw["x_train"]), y_train=raw["y_train"],
             x_test=object_array(raw["x_test"]), y_test=raw["y_test"])
    return buffer.getvalue(), raw


def reference_preprocess(reviews, *, vocabulary, sequence_length, start_char, oov_char, index_from) -> np.ndarray:
    """Keras' preprocessing written plainly, one review at a time."""
    rows = []
    for review in reviews:
        tokens = [start_char] + [word + index_from for word in review]
        tokens = [token if token < vocabulary else oov_char for token in tokens]
        tokens = tokens[-sequence_length:]
        rows.append(tokens + [0] * (sequence_length - len(tokens)))
    return np.array(rows, dtype=np.int32).reshape(len(reviews), sequence_length)


def gru_options(settings=GRU) -> dict:
    return dict(vocabulary=settings.vocabulary, sequence_length=settings.sequence_length,
                start_char=settings.start_char, oov_char=settings.oov_char, index_from=settings.index_from)


def files_in(folder) -> list:
    """Every file and folder under ``folder``, hidden ones included, relative to it."""
    if not folder.exists():
        return []
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# --- CIFAR-10 --------------------------------------------------------------------------------


def test_cifar10_downloads_verifies_and_loads(server, data_dir):
    body, arrays = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    seen = []
    data.fetch(remote, data_dir, progress=lambda done, total: seen.append((done, total)))
    dataset = data.load_cifar10(data_dir, remote=remote)

    x_train, y_train, x_test, y_test = expected_cifar(arrays)
    assert dataset.x_train.shape == (5 * IMAGES_PER_BATCH, 3, 32, 32)
    assert dataset.x_test.shape == (IMAGES_PER_BATCH, 3, 32, 32)
    assert dataset.x_train.dtype == dataset.x_test.dtype == np.float32
    assert dataset.y_train.dtype == dataset.y_test.dtype == np.int64
    assert 0.0 <= dataset.x_train.min() and dataset.x_train.max() <= 1.0
    np.testing.assert_allclose(dataset.x_train, x_train / 255.0, rtol=1e-6)
    np.testing.assert_allclose(dataset.x_test, x_test / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(dataset.y_train, y_train)
    np.testing.assert_array_equal(dataset.y_test, y_test)
    assert dataset.source == "real"
    assert dataset.checksum == f"md5:{remote.digest}"
    assert seen[-1] == (len(body), len(body))
    assert server.requests == [f"/files/{remote.filename}"]


def test_default_progress_bar_goes_to_stderr(server, data_dir, capsys):
    body, _ = cifar_tarball()
    data.fetch(server.remote(data.CIFAR10, body), data_dir)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "CIFAR-10" in captured.err and "100%" in captured.err


def test_second_load_uses_the_caches_and_no_network(server, data_dir, monkeypatch):
    body, arrays = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    first = data.load_cifar10(data_dir, remote=remote)
    assert (data_dir / f"{remote.filename}.md5").is_file()
    assert (data_dir / "cache" / f"cifar10-{remote.digest[:12]}" / "x_train.npy").is_file()
    server.stop()
    server.stop = lambda: None  # the fixture's teardown has nothing left to stop

    def must_not_run(*args, **kwargs):
        raise AssertionError("the cached load re-hashed or re-parsed the archive")

    monkeypatch.setattr(data.checksum, "file_digest", must_not_run)
    monkeypatch.setattr(data.cifar10, "_parse_cifar10_archive", must_not_run)
    second = data.load_cifar10(data_dir, remote=remote, offline=True)
    assert len(server.requests) == 1
    np.testing.assert_array_equal(first.x_train, second.x_train)
    np.testing.assert_array_equal(first.y_test, second.y_test)
    assert second.x_train.dtype == np.float32 and second.y_train.dtype == np.int64
    assert second.checksum == first.checksum


def test_prepared_files_are_readable_by_other_users(server, data_dir):
    """The host prepares the data dir; a container may read it (read-only) as another user."""
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    previous = os.umask(0o022)
    try:
        data.load_cifar10(data_dir, remote=remote)
    finally:
        os.umask(previous)
    cache = data_dir / "cache" / f"cifar10-{remote.digest[:12]}"
    for path in [data_dir / remote.filename, data_dir / f"{remote.filename}.md5", cache / "x_train.npy"]:
        assert path.stat().st_mode & 0o777 == 0o644, path
    assert cache.stat().st_mode & 0o777 == 0o755


def test_a_damaged_cache_is_rebuilt(server, data_dir):
    body, arrays = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data.load_cifar10(data_dir, remote=remote, offline=False)
    cache = data_dir / "cache" / f"cifar10-{remote.digest[:12]}"
    (cache / "x_train.npy").write_bytes(b"not an npy file")
    dataset = data.load_cifar10(data_dir, remote=remote, offline=True)
    np.testing.assert_allclose(dataset.x_train, expected_cifar(arrays)[0] / 255.0, rtol=1e-6)
    assert np.load(cache / "x_train.npy").shape == (5 * IMAGES_PER_BATCH, 3, 32, 32)


def test_an_unwritable_data_dir_skips_the_cache_silently(server, data_dir, monkeypatch):
    body, arrays = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data.fetch(remote, data_dir, progress=quiet)

    def read_only(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(data.cache.tempfile, "mkdtemp", read_only)
    dataset = data.load_cifar10(data_dir, remote=remote, offline=True)
    assert dataset.x_train.shape == (5 * IMAGES_PER_BATCH, 3, 32, 32)
    assert files_in(data_dir / "cache") == []


def test_a_crash_while_caching_leaves_no_half_cache(server, data_dir, monkeypatch):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data.fetch(remote, data_dir, progress=quiet)
    saved = []

    def disk_full_on_second_file(path, array, **kwargs):
        if saved:
            raise OSError(28, "No space left on device")
        saved.append(path)
        with open(path, "wb") as stream:
            np.lib.format.write_array(stream, array)

    monkeypatch.setattr(data.cache.np, "save", disk_full_on_second_file)
    dataset = data.load_cifar10(data_dir, remote=remote, offline=True)
    assert dataset.x_test.shape == (IMAGES_PER_BATCH, 3, 32, 32)
    assert saved, "the cache write was attempted"
    assert files_in(data_dir / "cache") == []


def test_checksum_mismatch_leaves_nothing_in_the_cache(server, data_dir):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body, digest="0" * 32)
    with pytest.raises(data.DataError) as error:
        data.load_cifar10(data_dir, remote=remote)
    message = str(error.value)
    assert "\n" not in message
    assert "0" * 32 in message and hashlib.md5(body).hexdigest() in message
    assert files_in(data_dir) == []


@pytest.mark.parametrize("how", ["fewer bytes than Content-Length", "a cut file"])
def test_truncated_download_leaves_nothing_in_the_cache(server, data_dir, how):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    if how == "a cut file":
        server.files[f"/files/{remote.filename}"] = body[:len(body) // 2]
    else:
        server.cut_short.add(f"/files/{remote.filename}")
    with pytest.raises(data.DataError) as error:
        data.load_cifar10(data_dir, remote=remote)
    message = str(error.value)
    assert remote.filename in message
    # A short body is named as such (newer Pythons raise IncompleteRead themselves); a cut file fails its checksum.
    assert ("cut short" in message or "IncompleteRead" in message) if how.startswith("fewer") else "corrupt" in message
    assert files_in(data_dir) == []


def test_a_corrupt_file_already_present_is_refused_and_kept(server, data_dir):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data_dir.mkdir()
    (data_dir / remote.filename).write_bytes(body[:-10])
    with pytest.raises(data.DataError, match="corrupt.*delete it"):
        data.load_cifar10(data_dir, remote=remote)
    assert server.requests == []  # the user's file is reported, never silently replaced
    assert (data_dir / remote.filename).read_bytes() == body[:-10]


def test_a_file_changed_after_verification_is_checked_again(server, data_dir):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data.fetch(remote, data_dir, progress=quiet)
    (data_dir / remote.filename).write_bytes(body[:-1] + bytes([body[-1] ^ 1]))  # stamp no longer matches
    with pytest.raises(data.DataError, match="corrupt"):
        data.fetch(remote, data_dir)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_offline_without_the_file_names_file_dir_and_fix(server, data_dir, monkeypatch, how):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    if how == "environment":
        monkeypatch.setenv("ROSETTA_OFFLINE", "1")
    with pytest.raises(data.DataError) as error:
        data.load_cifar10(data_dir, remote=remote, offline=how == "argument")
    message = str(error.value)
    assert remote.filename in message and str(data_dir) in message and "--data synthetic" in message
    assert remote.url in message and "\n" not in message
    assert server.requests == []


def test_http_error_and_unreachable_host_name_the_fix(server, data_dir):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    missing = data.RemoteFile(remote.name, remote.filename, remote.url + "-gone", remote.algorithm, remote.digest)
    with pytest.raises(data.DataError, match=r"HTTP 404.*--data synthetic"):
        data.fetch(missing, data_dir)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    unreachable = data.RemoteFile(remote.name, remote.filename, f"http://127.0.0.1:{closed_port}/x",
                                  remote.algorithm, remote.digest)
    with pytest.raises(data.DataError, match="--data synthetic"):
        data.fetch(unreachable, data_dir)
    assert files_in(data_dir) == []


def _member(name: str, kind: bytes, *, linkname: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = linkname
    return member


def unsafe_members(tmp_path) -> dict:
    evil = b"evil"
    absolute = tarfile.TarInfo(str(tmp_path / "absolute-evil"))
    absolute.size = len(evil)
    parent = tarfile.TarInfo("cifar-10-batches-py/../../evil")
    parent.size = len(evil)
    return {
        "parent": (parent, evil),
        "absolute": (absolute, evil),
        "symlink": (_member("cifar-10-batches-py/batches.meta", tarfile.SYMTYPE, linkname="/etc/passwd"), None),
        "hardlink": (_member("cifar-10-batches-py/readme", tarfile.LNKTYPE, linkname="../../evil"), None),
        "device": (_member("cifar-10-batches-py/null", tarfile.CHRTYPE), None),
    }


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink", "hardlink", "device"])
def test_unsafe_archive_members_are_refused_before_unpickling(server, tmp_path, data_dir, monkeypatch, kind):
    member, payload = unsafe_members(tmp_path)[kind]
    # The unsafe member comes last: every member must be checked before any pickle is read.
    body, _ = cifar_tarball(extra_members=[(member, payload)])
    remote = server.remote(data.CIFAR10, body)

    def must_not_unpickle(*args, **kwargs):
        raise AssertionError("unpickled a member of an unsafe archive")

    monkeypatch.setattr(data.cifar10.pickle, "loads", must_not_unpickle)
    outside_before = files_in(tmp_path)
    with pytest.raises(data.DataError, match="unsafe archive member") as error:
        data.load_cifar10(data_dir, remote=remote)
    assert member.name in str(error.value)
    # Nothing was extracted anywhere: only the verified archive and its stamp were written.
    assert sorted(set(files_in(tmp_path)) - set(outside_before)) == [
        "data", f"data/{remote.filename}", f"data/{remote.filename}.md5"]
    assert not (tmp_path / "evil").exists() and not (tmp_path / "absolute-evil").exists()


def test_an_archive_missing_a_batch_is_refused(server, data_dir):
    body, _ = cifar_tarball(skip=("data_batch_3",))
    with pytest.raises(data.DataError, match="lacks cifar-10-batches-py/data_batch_3"):
        data.load_cifar10(data_dir, remote=server.remote(data.CIFAR10, body))


# --- a tampered archive with its stamp's size and mtime: nothing it holds is ever unpickled ------


class WritesMarker:
    """Unpickling this runs code: it creates the marker file (the attack's visible effect)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def swap_keeping_the_stamp(archive, forged: bytes) -> None:
    """Replace ``archive`` with ``forged`` (padded to its size) and restore its mtime, as ``cp -p``,
    ``rsync -t`` or ``tar`` would: its stamp (digest, size, mtime) still matches."""
    status = archive.stat()
    assert len(forged) <= status.st_size, "the forged file must fit in the real one's size"
    archive.write_bytes(forged + bytes(status.st_size - len(forged)))
    os.utime(archive, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert archive.stat().st_size == status.st_size


def forged_cifar_tar(marker) -> bytes:
    """A plain tar of the CIFAR layout whose first batch's pickle runs a payload (zero padding is a valid tar end)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in CIFAR_BATCHES:
            add_bytes(tar, f"cifar-10-batches-py/{name}", pickle.dumps({b"payload": WritesMarker(marker)}, protocol=2))
    return buffer.getvalue()


def test_a_tampered_cifar_archive_with_the_stamps_size_and_mtime_is_never_unpickled(server, tmp_path, data_dir):
    body, _ = cifar_tarball()
    remote = server.remote(data.CIFAR10, body)
    data.load_cifar10(data_dir, remote=remote)
    archive = data_dir / remote.filename
    marker = tmp_path / "payload-ran"
    swap_keeping_the_stamp(archive, forged_cifar_tar(marker))
    assert data.checksum._stamp_matches(remote, archive)  # the stamp alone cannot tell
    shutil.rmtree(data_dir / "cache")  # no parsed cache: the archive must be read again
    with pytest.raises(data.DataError, match=r"is corrupt \(md5 expected .*delete it") as error:
        data.load_cifar10(data_dir, remote=remote, offline=True)
    assert "\n" not in str(error.value)
    assert not marker.exists(), "the forged archive's pickle ran"
    assert not data.checksum._stamp_matches(remote, archive)  # the next fetch hashes it in full


# --- IMDB ------------------------------------------------------------------------------------


def keras_order(count: int, shuffle: np.random.RandomState) -> np.ndarray:
    order = np.arange(count)
    shuffle.shuffle(order)
    return order


def test_imdb_downloads_verifies_and_loads_like_keras(server, data_dir):
    body, raw = imdb_npz()
    remote = server.remote(data.IMDB, body)
    dataset = data.load_imdb(data_dir, settings=GRU, remote=remote)

    # keras.datasets.imdb.load_data(seed=113): shuffle train, then test, with one RandomState.
    shuffle = np.random.RandomState(113)
    train_order = keras_order(len(raw["x_train"]), shuffle)
    test_order = keras_order(len(raw["x_test"]), shuffle)
    assert dataset.x_train.shape == (30, GRU.sequence_length) and dataset.x_test.shape == (20, GRU.sequence_length)
    assert dataset.x_train.dtype == dataset.x_test.dtype == np.int32
    assert dataset.y_train.dtype == dataset.y_test.dtype == np.int64
    np.testing.assert_array_equal(dataset.x_train, reference_preprocess(raw["x_train"], **gru_options())[train_order])
    np.testing.assert_array_equal(dataset.x_test, reference_preprocess(raw["x_test"], **gru_options())[test_order])
    np.testing.assert_array_equal(dataset.y_train, raw["y_train"][train_order])
    np.testing.assert_array_equal(dataset.y_test, raw["y_test"][test_order])
    assert dataset.source == "real" and dataset.checksum == f"sha256:{remote.digest}"


def test_imdb_second_load_uses_the_cache(server, data_dir, monkeypatch):
    body, _ = imdb_npz()
    remote = server.remote(data.IMDB, body)
    first = data.load_imdb(data_dir, settings=GRU, remote=remote)

    def must_not_run(*args, **kwargs):
        raise AssertionError("the cached load re-hashed or re-parsed the archive")

    monkeypatch.setattr(data.checksum, "file_digest", must_not_run)
    monkeypatch.setattr(data.imdb, "_convert_imdb_archive", must_not_run)
    monkeypatch.setattr(data.imdb, "read_verified", must_not_run)
    second = data.load_imdb(data_dir, settings=GRU, remote=remote, offline=True)
    np.testing.assert_array_equal(first.x_train, second.x_train)
    np.testing.assert_array_equal(first.y_test, second.y_test)
    assert len(server.requests) == 1


def test_imdb_cache_is_keyed_by_the_preprocessing_settings(server, data_dir):
    body, raw = imdb_npz()
    remote = server.remote(data.IMDB, body)
    data.load_imdb(data_dir, settings=GRU, remote=remote)
    shorter = dataclasses.replace(GRU, sequence_length=20, vocabulary=1000)
    dataset = data.load_imdb(data_dir, settings=shorter, remote=remote, offline=True)
    assert dataset.x_train.shape == (30, 20) and dataset.x_train.max() < 1000
    # The reviews converted once (six arrays and a format file), and two preprocessings (four and one).
    assert len(files_in(data_dir / "cache")) == 8 + 2 * 6


def test_imdb_checksum_mismatch_leaves_nothing(server, data_dir):
    body, _ = imdb_npz()
    remote = server.remote(data.IMDB, body, digest="f" * 64)
    with pytest.raises(data.DataError, match="sha256 expected f{64}, got"):
        data.load_imdb(data_dir, settings=GRU, remote=remote)
    assert files_in(data_dir) == []


def forged_imdb_npz(marker) -> bytes:
    """A Keras-shaped imdb.npz whose x_train object array unpickles a payload."""
    buffer = io.BytesIO()
    np.savez(buffer, x_train=object_array([WritesMarker(marker)]), y_train=np.zeros(1, np.int64),
             x_test=object_array([[1, 2]]), y_test=np.zeros(1, np.int64))
    return buffer.getvalue()


def test_a_tampered_imdb_npz_with_the_stamps_size_and_mtime_is_never_unpickled(server, tmp_path, data_dir):
    body, raw = imdb_npz(train=60, test=40)
    remote = server.remote(data.IMDB, body)
    first = data.load_imdb(data_dir, settings=GRU, remote=remote)
    archive = data_dir / remote.filename
    marker = tmp_path / "payload-ran"
    swap_keeping_the_stamp(archive, forged_imdb_npz(marker))
    assert data.checksum._stamp_matches(remote, archive)  # the stamp alone cannot tell

    # New settings: preprocessed afresh from the reviews converted when the file was verified.
    shorter = dataclasses.replace(GRU, sequence_length=20, vocabulary=1000)
    dataset = data.load_imdb(data_dir, settings=shorter, remote=remote, offline=True)
    train_order = keras_order(len(raw["x_train"]), np.random.RandomState(113))
    np.testing.assert_array_equal(dataset.x_train, reference_preprocess(raw["x_train"], **gru_options(shorter))[train_order])
    assert not marker.exists(), "the forged imdb.npz's pickle ran"

    # No cache at all: the archive must be read, and its full digest refuses it first.
    shutil.rmtree(data_dir / "cache")
    with pytest.raises(data.DataError, match=r"is corrupt \(sha256 expected .*delete it") as error:
        data.load_imdb(data_dir, settings=GRU, remote=remote, offline=True)
    assert "\n" not in str(error.value)
    assert not marker.exists(), "the forged imdb.npz's pickle ran"
    assert first.x_train.shape == (60, GRU.sequence_length)


def test_imdb_is_converted_once_to_arrays_that_load_without_pickle(server, data_dir, monkeypatch):
    body, raw = imdb_npz()
    remote = server.remote(data.IMDB, body)
    reviews = data.load_imdb_reviews(data_dir, remote=remote)
    for split in ("train", "test"):
        got = data.reviews_of(reviews[f"{split}_tokens"], reviews[f"{split}_offsets"])
        assert [review.tolist() for review in got] == raw[f"x_{split}"]  # the round trip: every review, in order
        np.testing.assert_array_equal(reviews[f"{split}_labels"], raw[f"y_{split}"])
        assert reviews[f"{split}_tokens"].dtype == np.int32
    # The cache is plain arrays: every file loads with allow_pickle=False, and later loads never unpickle.
    cache_files = sorted((data_dir / "cache").rglob("*.npy"))
    assert len(cache_files) == 6
    for path in cache_files:
        assert np.load(path, allow_pickle=False).dtype != object

    def must_not_unpickle(*args, **kwargs):
        raise AssertionError("a cached load unpickled something")

    monkeypatch.setattr(pickle, "load", must_not_unpickle)
    monkeypatch.setattr(pickle, "loads", must_not_unpickle)
    monkeypatch.setattr(data.imdb, "read_verified", must_not_unpickle)
    dataset = data.load_imdb(data_dir, settings=GRU, remote=remote, offline=True)
    train_order = keras_order(len(raw["x_train"]), np.random.RandomState(113))
    np.testing.assert_array_equal(dataset.x_train, reference_preprocess(raw["x_train"], **gru_options())[train_order])


def test_a_cache_of_the_old_format_is_rebuilt_not_trusted(server, data_dir):
    body, raw = imdb_npz()
    remote = server.remote(data.IMDB, body)
    data.load_imdb(data_dir, settings=GRU, remote=remote)
    # A cache written by the previous layout (format 1), well-formed but not what this version computes.
    preprocessed = next((data_dir / "cache").glob("imdb-*-v*"))
    for format_file in (data_dir / "cache").glob("*/format"):
        format_file.write_text("1\n")
    np.save(preprocessed / "x_train.npy", np.zeros((30, GRU.sequence_length), np.int32))
    dataset = data.load_imdb(data_dir, settings=GRU, remote=remote, offline=True)
    train_order = keras_order(len(raw["x_train"]), np.random.RandomState(113))
    np.testing.assert_array_equal(dataset.x_train, reference_preprocess(raw["x_train"], **gru_options())[train_order])
    assert {path.read_text() for path in (data_dir / "cache").glob("*/format")} == {f"{data.cache.CACHE_FORMAT}\n"}


def test_preprocess_imdb_hand_computed_example():
    reviews = [
        [5, 1, 9, 7],  # 9 + 3 = 12 >= vocabulary 12 → OOV; fits with its start char
        [1, 2, 3, 4, 5, 6],  # too long: the start char and the first words are cut
        [],  # only the start char
        [0, 1, 2, 3, 4],  # exactly sequence_length tokens with the start char
    ]
    got = data.preprocess_imdb(object_array(reviews), vocabulary=12, sequence_length=6, start_char=1,
                               oov_char=2, index_from=3)
    expected = np.array([
        [1, 8, 4, 2, 10, 0],
        [4, 5, 6, 7, 8, 9],
        [1, 0, 0, 0, 0, 0],
        [1, 3, 4, 5, 6, 7],
    ], dtype=np.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, reference_preprocess(reviews, vocabulary=12, sequence_length=6,
                                                            start_char=1, oov_char=2, index_from=3))


@pytest.mark.parametrize("seed", range(4))
def test_preprocess_imdb_matches_the_plain_python_reference(seed):
    rng = np.random.default_rng(seed)
    settings = dict(vocabulary=int(rng.integers(10, 500)), sequence_length=int(rng.integers(1, 40)),
                    start_char=1, oov_char=2, index_from=3)
    reviews = random_reviews(rng, 300, max_length=60, max_index=800)
    reviews += [[7] * (settings["sequence_length"] + delta) for delta in (-1, 0, 1) if settings["sequence_length"] + delta >= 0]
    expected = reference_preprocess(reviews, **settings)
    np.testing.assert_array_equal(data.preprocess_imdb(object_array(reviews), **settings), expected)
    np.testing.assert_array_equal(data.preprocess_imdb(reviews, **settings), expected)  # a plain list too
    as_arrays = [np.asarray(review, dtype=np.int64) for review in reviews]
    np.testing.assert_array_equal(data.preprocess_imdb(as_arrays, **settings), expected)


def test_preprocess_imdb_of_nothing():
    assert data.preprocess_imdb([], **gru_options()).shape == (0, GRU.sequence_length)


# --- synthetic and random data ---------------------------------------------------------------


def nearest_class_mean_accuracy(x_train, y_train, x_test, y_test) -> float:
    classes = np.unique(y_train)
    means = np.stack([x_train[y_train == label].mean(axis=0) for label in classes])
    distances = ((x_test[:, None, :] - means[None, :, :]) ** 2).sum(axis=2)
    return float((classes[distances.argmin(axis=1)] == y_test).mean())


def test_synthetic_cifar10_has_the_real_shapes_and_a_learnable_signal():
    dataset = data.synthetic_cifar10(500, 200, seed=0)
    assert dataset.x_train.shape == (500, 3, 32, 32) and dataset.x_test.shape == (200, 3, 32, 32)
    assert dataset.x_train.dtype == np.float32 and dataset.y_train.dtype == np.int64
    assert 0.0 <= dataset.x_train.min() and dataset.x_train.max() <= 1.0
    assert dataset.source == "synthetic" and dataset.checksum is None
    assert np.bincount(dataset.y_train, minlength=10).tolist() == [50] * 10
    assert np.bincount(dataset.y_test, minlength=10).tolist() == [20] * 10
    accuracy = nearest_class_mean_accuracy(dataset.x_train.reshape(500, -1), dataset.y_train,
                                           dataset.x_test.reshape(200, -1), dataset.y_test)
    assert accuracy > 0.5, accuracy  # chance is 0.1
    again = data.synthetic_cifar10(500, 200, seed=0)
    np.testing.assert_array_equal(dataset.x_train, again.x_train)
    assert not np.array_equal(dataset.x_train, data.synthetic_cifar10(500, 200, seed=1).x_train)


def bag_of_words(sequences: np.ndarray, vocabulary: int) -> np.ndarray:
    rows = np.repeat(np.arange(len(sequences)), sequences.shape[1])
    counts = np.bincount(rows * vocabulary + sequences.ravel(), minlength=len(sequences) * vocabulary)
    counts = counts.reshape(len(sequences), vocabulary).astype(np.float32)
    counts[:, :3] = 0  # padding, start and OOV say nothing about the class
    return counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)


def test_synthetic_imdb_has_the_real_shapes_padding_and_a_learnable_signal():
    dataset = data.synthetic_imdb(400, 200, settings=GRU, seed=0)
    assert dataset.x_train.shape == (400, GRU.sequence_length) and dataset.x_test.shape == (200, GRU.sequence_length)
    assert dataset.x_train.dtype == np.int32 and dataset.y_train.dtype == np.int64
    assert dataset.source == "synthetic" and dataset.checksum is None
    assert np.bincount(dataset.y_train).tolist() == [200, 200] and np.bincount(dataset.y_test).tolist() == [100, 100]
    x = dataset.x_train
    assert x.min() >= 0 and x.max() < GRU.vocabulary
    assert (x == GRU.oov_char).any(), "out-of-vocabulary words appear, as in the real data"
    # Padding only at the end, and a start char exactly on the reviews that fit whole.
    lengths = (x != 0).sum(axis=1)
    assert all((row[length:] == 0).all() for row, length in zip(x, lengths))
    padded = lengths < GRU.sequence_length
    assert padded.any() and (~padded).any()
    assert (x[padded, 0] == GRU.start_char).all()
    accuracy = nearest_class_mean_accuracy(bag_of_words(dataset.x_train, GRU.vocabulary), dataset.y_train,
                                           bag_of_words(dataset.x_test, GRU.vocabulary), dataset.y_test)
    assert accuracy > 0.7, accuracy  # chance is 0.5
    np.testing.assert_array_equal(x, data.synthetic_imdb(400, 200, settings=GRU, seed=0).x_train)


def test_random_images():
    images = data.random_images(4, (3, 8, 8), seed=0)
    assert images.shape == (4, 3, 8, 8) and images.dtype == np.float32
    assert 0.0 <= images.min() and images.max() < 1.0
    np.testing.assert_array_equal(images, np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))


# --- configuration and host preparation ------------------------------------------------------


def test_default_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ROSETTA_DATA_DIR", str(tmp_path / "elsewhere"))
    assert data.default_data_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("ROSETTA_DATA_DIR")
    assert str(data.default_data_dir()).endswith(os.path.join(".cache", "rosetta-bench", "data"))


def test_the_published_checksums():
    assert data.CIFAR10 == data.RemoteFile("CIFAR-10", "cifar-10-python.tar.gz",
                                           "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                                           "md5", "c58f30108f718f92721af3b95e74349a",
                                           "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                                           170_498_071)
    assert data.IMDB.algorithm == "sha256"
    assert data.IMDB.digest == "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"


def test_prepare_fetches_and_caches_for_offline_containers(server, data_dir, monkeypatch):
    cifar_body, _ = cifar_tarball()
    imdb_body, _ = imdb_npz()
    imdb = server.remote(data.IMDB, imdb_body)
    monkeypatch.setitem(data.DATASETS, "cifar10",
                        data.DATASETS["cifar10"]._replace(remote=server.remote(data.CIFAR10, cifar_body)))
    monkeypatch.setitem(data.DATASETS, "imdb", data.DATASETS["imdb"]._replace(remote=imdb))
    assert data.prepare("cifar10", data_dir, progress=quiet) == data_dir / "cifar-10-python.tar.gz"
    assert data.prepare("imdb", data_dir, progress=quiet) == data_dir / "imdb.npz"
    cache_folders = sorted(path.name for path in (data_dir / "cache").iterdir())
    assert cache_folders[0].startswith("cifar10-") and cache_folders[1].startswith("imdb-")
    # A container then finds everything ready, with no network.
    server.stop()
    server.stop = lambda: None
    dataset = data.load_imdb(data_dir, settings=GRU, remote=imdb, offline=True)
    assert dataset.x_train.shape == (30, GRU.sequence_length)
    with pytest.raises(data.DataError, match="unknown dataset 'mnist'; choose from cifar10, imdb"):
        data.prepare("mnist", data_dir)
