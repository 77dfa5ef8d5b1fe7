"""What a run writes survives a crash or a power cut, and two writers never leave half a file
(docs/RUN-GUARANTEES.md): the atomic writers sync the file before the rename and its folder after
it, and the parity check's canonical arrays are written the same way. Real files in tmp_path; only
the syncing itself is recorded (a power cut cannot be had in a test)."""
from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from workloads.common import canonical, data, safe_files
from workloads.common.data import checksum, download, safe_tar


class SyncRecorder:
    """Stands in for os.fsync and os.replace: records, in order, what was synced (a file or a
    folder, by its path) and what was renamed, then does the real thing."""

    def __init__(self, monkeypatch):
        self.events: list[tuple[str, str, str]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(descriptor):
            kind = "folder" if stat.S_ISDIR(os.fstat(descriptor).st_mode) else "file"
            self.events.append(("fsync", kind, os.readlink(f"/proc/self/fd/{descriptor}")))
            real_fsync(descriptor)

        def replace(source, target, **kwargs):
            self.events.append(("replace", str(source), str(target)))
            real_replace(source, target, **kwargs)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def check_durable(self, target) -> None:
        """The file's bytes synced before the rename onto `target`, and its folder synced after it."""
        renames = [index for index, event in enumerate(self.events) if event[0] == "replace" and event[2] == str(target)]
        assert len(renames) == 1, self.events
        (rename,) = renames
        temporary = self.events[rename][1]
        assert ("fsync", "file", temporary) in self.events[:rename], self.events
        assert ("fsync", "folder", str(target.parent)) in self.events[rename + 1:], self.events


def test_an_atomic_write_syncs_the_file_before_the_rename_and_the_folder_after_it(tmp_path, monkeypatch):
    recorder = SyncRecorder(monkeypatch)
    target = tmp_path / "cells" / "pytorch__cpu__cnn__r0.json"
    safe_files.write_text_atomic(target, "{}")
    recorder.check_durable(target)
    assert target.read_text() == "{}"


def test_a_durable_write_still_never_follows_a_link(tmp_path, monkeypatch):
    recorder = SyncRecorder(monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out" / "report.md"
    target.parent.mkdir()
    target.symlink_to(victim)
    safe_files.write_bytes_atomic(target, b"report")
    recorder.check_durable(target)
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == "report"
    # a linked folder on the way is refused, synced or not
    (tmp_path / "linked").symlink_to(tmp_path / "out")
    with pytest.raises(safe_files.UnsafePath):
        safe_files.write_bytes_atomic(tmp_path / "linked" / "report.md", b"x", below=tmp_path)
    assert (tmp_path / "out" / "report.md").read_text() == "report"


# --- the parity check's canonical arrays: concurrent parity runs and Ray tasks share the folder --

def complete_arrays(path) -> set[str] | None:
    """The array names of the .npz at `path`, None when there is none; fails on half a file."""
    if not os.path.lexists(path):
        return None
    with np.load(path, allow_pickle=False) as loaded:
        for name in loaded.files:
            loaded[name]  # every array read whole
        return set(loaded.files)


def test_the_canonical_files_are_never_seen_half_written(tmp_path, monkeypatch):
    canonical.write(tmp_path, "cnn")
    weights = set(canonical.parameters("cnn"))
    seen = []
    real_write_array = np.lib.format.write_array

    def write_array(*args, **kwargs):  # numpy's savez writes the arrays one by one
        seen.append(complete_arrays(tmp_path / canonical.WEIGHTS_FILE))
        real_write_array(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    canonical.write(tmp_path, "cnn")
    assert len(seen) > len(weights) and all(names in (weights, {"x", "y"}) for names in seen), seen
    recorder = SyncRecorder(monkeypatch)
    canonical.write(tmp_path, "cnn")
    recorder.check_durable(tmp_path / canonical.WEIGHTS_FILE)
    recorder.check_durable(tmp_path / canonical.BATCH_FILE)


def test_a_link_planted_at_a_canonical_file_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.npz"
    victim.write_bytes(b"precious")
    folder = tmp_path / "parity" / "gru"
    folder.mkdir(parents=True)
    (folder / canonical.WEIGHTS_FILE).symlink_to(victim)
    canonical.write(folder, "gru")
    assert victim.read_bytes() == b"precious"
    assert not (folder / canonical.WEIGHTS_FILE).is_symlink()
    weights, batch = canonical.load(folder)
    assert np.array_equal(weights["gru.kernel"], canonical.parameters("gru")["gru.kernel"])


def test_two_writers_at_once_both_leave_complete_files(tmp_path):
    start, errors = threading.Barrier(2), []

    def writer():
        start.wait()
        try:
            canonical.write(tmp_path, "cnn")
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert complete_arrays(tmp_path / canonical.WEIGHTS_FILE) == set(canonical.parameters("cnn"))
    assert complete_arrays(tmp_path / canonical.BATCH_FILE) == set(canonical.parity_batch("cnn"))
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([canonical.WEIGHTS_FILE, canonical.BATCH_FILE])


# --- the published archives: pinned by SHA-256 beside an MD5, bounded before they are read --------

def quiet(done, total):
    """A progress callback that keeps the test output clean."""


def toy_archive(folder: Path, *, member_bytes: int = 2000) -> Path:
    """A real tar.gz with one member of random bytes, as a publisher would serve it."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = np.random.default_rng(0).integers(0, 256, member_bytes, dtype=np.uint8).tobytes()
    path = folder / "toy.tar.gz"
    with tarfile.open(path, mode="w:gz") as tar:
        member = tarfile.TarInfo(TOY_MEMBER)
        member.size = len(payload)
        tar.addfile(member, io.BytesIO(payload))
    return path


TOY_MEMBER = "toy/data.bin"


def toy_remote(archive: Path, **fields) -> data.RemoteFile:
    """`archive` declared like CIFAR-10: its published MD5 and, beside it, its SHA-256."""
    body = archive.read_bytes()
    fields.setdefault("sha256", hashlib.sha256(body).hexdigest())
    return data.RemoteFile("Toy", archive.name, archive.as_uri(), "md5", hashlib.md5(body).hexdigest(), **fields)


def test_cifar10_is_pinned_by_sha256_beside_its_published_md5():
    assert (data.CIFAR10.algorithm, data.CIFAR10.digest) == ("md5", "c58f30108f718f92721af3b95e74349a")
    assert data.CIFAR10.sha256 == "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
    assert data.IMDB.algorithm == "sha256"  # published as a SHA-256 already


def test_a_download_with_the_published_md5_but_another_sha256_is_refused(tmp_path):
    archive = toy_archive(tmp_path / "published")
    assert data.fetch(toy_remote(archive), tmp_path / "data", progress=quiet) == tmp_path / "data" / archive.name
    forged = toy_remote(archive, sha256="0" * 64)
    with pytest.raises(data.DataError, match=f"corrupt \\(sha256 expected {'0' * 64}, got") as refused:
        data.fetch(forged, tmp_path / "other", progress=quiet)
    assert "\n" not in str(refused.value)
    assert list((tmp_path / "other").iterdir()) == []  # nothing unverified is kept


def test_a_present_file_is_checked_against_the_sha256_even_with_an_md5_stamp(tmp_path):
    archive = toy_archive(tmp_path / "published")
    md5_only = toy_remote(archive, sha256="")
    data.fetch(md5_only, tmp_path / "data", progress=quiet)  # verified, and stamped, by its MD5 alone
    with pytest.raises(data.DataError, match="is corrupt \\(sha256 expected"):
        data.fetch(toy_remote(archive, sha256="0" * 64), tmp_path / "data")
    assert data.fetch(toy_remote(archive), tmp_path / "data") == tmp_path / "data" / archive.name


def test_the_bytes_parsed_are_checked_against_the_sha256(tmp_path):
    archive = toy_archive(tmp_path)
    assert set(safe_tar.read_tar_members(toy_remote(archive), archive, {TOY_MEMBER})) == {TOY_MEMBER}
    assert checksum.read_verified(toy_remote(archive), archive) == archive.read_bytes()
    forged = toy_remote(archive, sha256="0" * 64)
    with pytest.raises(data.DataError, match="sha256 expected"):
        safe_tar.read_tar_members(forged, archive, {TOY_MEMBER})
    with pytest.raises(data.DataError, match="sha256 expected"):
        checksum.read_verified(forged, archive)


@pytest.mark.parametrize("announced", [True, False], ids=["Content-Length", "no Content-Length"])
def test_a_download_larger_than_its_cap_is_refused(tmp_path, monkeypatch, announced):
    archive = toy_archive(tmp_path / "published", member_bytes=20_000)
    capped = toy_remote(archive, max_bytes=1000)
    if not announced:  # a server that does not say how much it sends is stopped as the bytes come
        monkeypatch.setattr(download, "_content_length", lambda response: None)
    with pytest.raises(data.DataError, match="larger than 1000 bytes") as refused:
        data.fetch(capped, tmp_path / "data", progress=quiet)
    assert "\n" not in str(refused.value) and capped.url in str(refused.value)
    assert list((tmp_path / "data").iterdir()) == []  # nothing half-written is left
    assert data.fetch(toy_remote(archive), tmp_path / "data", progress=quiet).is_file()  # under its cap: fine


def test_a_present_file_larger_than_its_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    archive = toy_archive(tmp_path, member_bytes=20_000)
    capped = toy_remote(archive, max_bytes=1000)
    read = []
    monkeypatch.setattr(checksum, "file_digest", lambda *args: read.append(args))
    with pytest.raises(data.DataError, match="larger than 1000 bytes"):
        data.fetch(capped, tmp_path)
    with pytest.raises(data.DataError, match="larger than 1000 bytes"):
        checksum.read_verified(capped, archive)
    assert read == []


def test_a_tar_member_larger_than_its_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    archive = toy_archive(tmp_path, member_bytes=5000)
    monkeypatch.setattr(safe_tar, "LONGEST_MEMBER", 4999)

    def must_not_read(*args, **kwargs):
        raise AssertionError("a member over the cap was read")

    monkeypatch.setattr(tarfile.TarFile, "extractfile", must_not_read)
    with pytest.raises(data.DataError, match=f"member '{TOY_MEMBER}' is larger than 4999 bytes") as refused:
        safe_tar.read_tar_members(toy_remote(archive), archive, {TOY_MEMBER})
    assert "\n" not in str(refused.value)


def test_the_published_archives_are_capped_at_their_size():
    assert data.CIFAR10.max_bytes == 170_498_071  # the published tarball's size: nothing larger has its digest
    assert 17_000_000 < data.IMDB.max_bytes <= 64 << 20
    assert safe_tar.LONGEST_MEMBER >= 31_035_704  # a CIFAR-10 batch (10,000 images and their pickle)
