"""Folders a user hands over are read to the end, whatever lies in them: a wheelhouse (--wheelhouse,
$PIP_FIND_LINKS) and a data folder (--data-dir). What is in them is used, skipped with a one-line
warning, or refused in one line (exit 2; a dataset's problem fails its cells in one line), never a
traceback, a wait on a FIFO, a file read through a link or a file read whole however large
(docs/RUN-GUARANTEES.md, bad input).

Property-based (tests/support/hostile.py's settings): hypothesis plants files, links, folders, FIFOs and
oversized files under names valid and hostile, then runs the real functions the host calls; a few
cases go through `python -m orchestrator` in a subprocess.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from support.hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, finish, run_cli
from orchestrator import frameworks, images
from orchestrator.errors import UserError

REGISTRY = frameworks.discover()
PYTORCH = REGISTRY["pytorch"]
CPU = PYTORCH.variant("cpu")
TAGS = "cp311-cp311-manylinux_2_28_x86_64.whl"
# Wheels the pytorch/cpu build takes (its requirements pin torch==2.13.0 and numpy), and ones it does not.
NUMPY = next(line.split("==")[1].strip() for line in CPU.requirements.read_text().splitlines()
             if line.startswith("numpy=="))
WANTED = [f"torch-{images.pinned_version(PYTORCH, CPU)}+cpu-{TAGS}", f"numpy-{NUMPY}-{TAGS}",
          f"torch-{images.pinned_version(PYTORCH, CPU)}-py3-none-any.whl"]
UNWANTED = [f"pandas-2.0.0-{TAGS}", f"torch-2.1.0-{TAGS}"]
BAD_NAMES = ["torch.whl", "torch-2.13.0.whl", ".whl", "-.whl", "torch-2.13.0+cpu-cp311-cp311.whl", "a b-1.0-py3-none-any.whl",
             "torch-x.y-py3-none-any.whl", "torch-2.13.0-py3-none-any.whl\n.whl", "[bold]x-1-py3-none-any.whl"]
KINDS = ["file", "file", "link", "dangling link", "folder", "fifo", "oversized"]


def plant(folder: Path, name: bytes, kind: str, content: bytes, outside: Path) -> None:
    """One entry of `kind` named `name` (bytes: a name need not be UTF-8) in `folder`."""
    path = os.path.join(os.fsencode(folder), name)
    if kind == "file":
        with open(path, "wb") as stream:
            stream.write(content)
    elif kind == "link":
        os.symlink(os.fsencode(outside), path)
    elif kind == "dangling link":
        os.symlink(os.fsencode(outside.parent / "nowhere.whl"), path)
    elif kind == "folder":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "oversized":  # sparse: costs no disk
        with open(path, "wb") as stream:
            stream.truncate(SMALL_LIMIT + 1)


SMALL_LIMIT = 1 << 16  # the wheel size cap, lowered for the property test (the real one: a test below)


def assemble(wheelhouse: Path) -> tuple[dict[str, bytes], str]:
    """What `build` does with the wheelhouse: the context's files read into the tar it sends (and
    what `build --dry-run` prints)."""
    chosen = images.BuildOptions(wheelhouse=wheelhouse)
    printed = images.dry_run(PYTORCH, CPU, chosen)
    with tarfile.open(fileobj=io.BytesIO(images.build_context(images.context_files(PYTORCH, CPU, chosen)))) as tar:
        wheels = {member.name.rsplit("/", 1)[1]: tar.extractfile(member).read() for member in tar.getmembers()
                  if member.name.startswith("build/wheels/") and member.name.endswith(".whl")}
    return wheels, printed


_ENTRY = st.tuples(st.sampled_from(WANTED + UNWANTED + BAD_NAMES).map(str.encode)
                   | st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=20).map(
                       lambda text: text.encode("utf-8", "surrogateescape") + b".whl")
                   | st.binary(min_size=1, max_size=12).filter(lambda raw: b"/" not in raw and b"\x00" not in raw
                                                               ).map(lambda raw: raw + b".whl"),
                   st.sampled_from(KINDS))


@HOSTILE
@given(entries=st.lists(_ENTRY, min_size=1, max_size=6, unique_by=lambda entry: entry[0]))
def test_any_wheelhouse_gives_its_usable_wheels_or_is_refused_in_one_line(tmp_path_factory, monkeypatch, entries):
    from orchestrator.images import wheelhouse as wheelhouse_module

    monkeypatch.setattr(wheelhouse_module, "LARGEST_WHEEL", SMALL_LIMIT)
    folder = tmp_path_factory.mktemp("wheels")
    outside = folder.parent / f"{folder.name}-outside.whl"
    outside.write_bytes(b"outside the wheelhouse")
    for name, kind in entries:
        if name not in (b".", b".."):
            plant(folder, name, kind, b"wheel " + name, outside)
    unusable_wanted = [name for name, kind in entries if name.decode("utf-8", "replace") in WANTED and kind != "file"]
    try:
        wheels, printed = assemble(folder)
    except UserError as error:
        line = assert_one_line(str(error), "wheelhouse")
        assert line.isprintable() and "--wheelhouse" in line, line
        assert unusable_wanted, f"refused, though every wheel the build takes is a plain file: {line}"
        return
    assert not unusable_wanted, f"a link, folder, FIFO or oversized file taken as a wheel: {unusable_wanted}"
    planted = {name.decode(): b"wheel " + name for name, kind in entries if kind == "file" and name.decode("utf-8", "replace") in WANTED}
    assert wheels == planted  # only the wanted plain files, each with its own bytes, never a link's target's
    for line in printed.splitlines():
        assert line.isprintable(), repr(line)


@pytest.mark.parametrize("kind", ["link", "dangling link", "folder", "fifo"])
def test_a_wanted_wheel_that_is_no_plain_file_is_refused_naming_it(tmp_path, kind):
    folder = tmp_path / "wheels"
    folder.mkdir()
    plant(folder, WANTED[0].encode(), kind, b"", tmp_path / "outside.whl")
    (tmp_path / "outside.whl").write_bytes(b"outside")
    with pytest.raises(UserError, match="--wheelhouse") as refused:
        assemble(folder)
    assert WANTED[0] in assert_one_line(str(refused.value))


def test_a_wheel_larger_than_the_cap_is_refused_before_it_is_read(tmp_path):
    from orchestrator.images import wheelhouse as wheelhouse_module

    folder = tmp_path / "wheels"
    folder.mkdir()
    with open(folder / WANTED[0], "wb") as stream:
        stream.truncate(wheelhouse_module.LARGEST_WHEEL + 1)  # sparse: 4 GiB that cost no disk
    with pytest.raises(UserError, match="larger than") as refused:
        assemble(folder)
    assert_one_line(str(refused.value))


def test_a_name_that_is_no_wheel_is_skipped_with_a_warning(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    for name in [*BAD_NAMES, WANTED[0]]:
        plant(folder, name.encode(), "file", b"x", tmp_path)
    plant(folder, b"\xff\xfe-1.0-py3-none-any.whl", "file", b"x", tmp_path)
    warnings = []
    files = images.context_files(PYTORCH, CPU, images.BuildOptions(wheelhouse=folder), warn=warnings.append)
    assert [name for name in files if name.endswith(".whl")] == [f"build/wheels/{WANTED[0]}"]
    assert len(warnings) == len(BAD_NAMES) + 1
    for warning in warnings:
        assert assert_one_line(warning).isprintable() and "not a wheel file name" in warning, warning


def test_hostile_wheelhouses_through_the_command_line(tmp_path):
    cases = {}
    for name, kind in [("torch.whl", "file"), (WANTED[0], "fifo"), (WANTED[0], "link"), (WANTED[0], "folder")]:
        folder = tmp_path / f"wheels{len(cases)}"
        folder.mkdir()
        plant(folder, name.encode(), kind, b"x", tmp_path / "outside.whl")
        cases[f"{kind} {name}"] = (["build", "pytorch", "--variant", "cpu", "--dry-run", "--wheelhouse", str(folder)],
                                   kind != "file")
    (tmp_path / "outside.whl").write_bytes(b"outside")
    started = {name: (run_cli(arguments, cwd=tmp_path, timeout=60), refused) for name, (arguments, refused) in cases.items()}
    for name, (process, refused) in started.items():
        code, err = finish(process)
        if refused:
            assert_refused_in_one_line(code, err, name)
        else:  # skipped with a warning: the dry run goes on
            assert code == 0 and "Traceback" not in err, f"{name}: exit {code}: {err[-2000:]}"


# --- a data folder (--data-dir; workloads/common/data) ------------------------------------------------

DATA_KINDS = ["link to a copy", "dangling link", "folder", "file", "fifo", "empty", "truncated", "flipped",
              "garbage", "oversized"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A data folder prepared as the host prepares one (archives verified, stamps and caches
    written) from small archives in the real formats (tests/test_data.py), the RemoteFiles that
    describe them, and what each dataset loads as."""
    import hashlib

    from test_data import GRU, cifar_tarball, imdb_npz
    from workloads.common import data

    cifar, _ = cifar_tarball()
    imdb, _ = imdb_npz()
    remotes = {"cifar10": data.RemoteFile("CIFAR-10", "cifar-10-python.tar.gz", "http://127.0.0.1:9/cifar", "md5",
                                          hashlib.md5(cifar).hexdigest(), sha256=hashlib.sha256(cifar).hexdigest(),
                                          max_bytes=len(cifar)),
               "imdb": data.RemoteFile("IMDB", "imdb.npz", "http://127.0.0.1:9/imdb", "sha256",
                                       hashlib.sha256(imdb).hexdigest(), max_bytes=len(imdb))}
    folder = tmp_path_factory.mktemp("prepared") / "data"
    folder.mkdir()
    (folder / "cifar-10-python.tar.gz").write_bytes(cifar)
    (folder / "imdb.npz").write_bytes(imdb)
    with pytest.MonkeyPatch.context() as patch:
        for name, remote in remotes.items():  # the published datasets' table, with these archives
            patch.setitem(data.DATASETS, name, data.DATASETS[name]._replace(remote=remote))
        expected = {name: load(name, folder, remotes[name], GRU) for name in remotes}
    return folder, remotes, expected, GRU


def load(name: str, folder: Path, remote, settings):
    """What the host does before the cells start (data.prepare), then what a cell does (its loader)."""
    from workloads.common import data

    data.prepare(name, folder, settings=settings, offline=True, progress=lambda done, total: None)
    if name == "cifar10":
        return data.load_cifar10(folder, remote=remote, offline=True)
    return data.load_imdb(folder, settings=settings, remote=remote, offline=True)


def plant_instead(path: Path, kind: str, outside: Path, largest: int) -> None:
    """`path` (a file or folder of the data folder) replaced by `kind`; a copy of what it was is
    left at `outside` for the links to point at."""
    from workloads.common import safe_files

    original = path.read_bytes() if path.is_file() else b""
    if path.is_dir():
        shutil.copytree(path, outside, symlinks=True)
    else:
        outside.write_bytes(original)
    safe_files.remove_tree(path)
    if kind == "link to a copy":
        path.symlink_to(outside, target_is_directory=outside.is_dir())
    elif kind == "dangling link":
        path.symlink_to(outside.parent / "nowhere")
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "oversized":  # sparse: costs no disk
        with open(path, "wb") as stream:
            stream.truncate(largest + 1)
    else:
        damaged = {"file": b"a file where a folder was", "empty": b"", "truncated": original[:len(original) // 2],
                   "flipped": bytes(byte ^ 0x5A if index % 97 == 13 else byte for index, byte in enumerate(original)),
                   "garbage": b"\x93NUMPY\x01\x00" + b"{" * 40}[kind]
        path.write_bytes(damaged)


def snapshot(folder: Path) -> dict:
    return {str(path.relative_to(folder)): (path.read_bytes() if path.is_file() and not path.is_symlink() else None)
            for path in sorted(folder.rglob("*"))}


@HOSTILE
@given(data=st.data())
def test_any_data_folder_loads_its_dataset_or_says_why_in_one_line(prepared, tmp_path_factory, monkeypatch, data):
    from workloads.common import data as datasets

    template, remotes, expected, settings = prepared
    name = data.draw(st.sampled_from(sorted(remotes)))
    for name, remote in remotes.items():  # the published datasets' table, with these archives
        monkeypatch.setitem(datasets.DATASETS, name, datasets.DATASETS[name]._replace(remote=remote))
    work = tmp_path_factory.mktemp("data")
    folder = work / "data"
    shutil.copytree(template, folder, symlinks=True)
    where = data.draw(st.sampled_from([folder, *sorted(folder.rglob("*"))]))
    kind = data.draw(st.sampled_from(DATA_KINDS))
    plant_instead(where, kind, work / "outside", remotes[name].max_bytes)
    before = snapshot(work / "outside") if (work / "outside").is_dir() else (work / "outside").read_bytes()
    try:
        loaded = load(name, folder, remotes[name], settings)
    except datasets.DataError as error:
        assert assert_one_line(str(error), f"{kind} at {where.name}").isprintable(), str(error)
    else:
        for split in ("x_train", "y_train", "x_test", "y_test"):
            assert getattr(loaded, split).shape == getattr(expected[name], split).shape, (kind, where.name, split)
            if "cache" not in where.relative_to(work).parts:  # a damaged cache may give other numbers; the archive never
                assert (getattr(loaded, split) == getattr(expected[name], split)).all(), (kind, where.name, split)
    if where != folder:  # a data folder that is itself a link is the user's choice: written through
        after = snapshot(work / "outside") if (work / "outside").is_dir() else (work / "outside").read_bytes()
        assert after == before, "something outside the data folder was changed through a link"


@pytest.mark.parametrize("name", ["cifar10", "imdb"])
def test_an_unreadable_archive_is_one_line(prepared, tmp_path, monkeypatch, name):
    """A file the host may not read (faked: the tests run as root, who reads anything)."""
    from workloads.common import data as datasets

    template, remotes, _, settings = prepared
    for name, remote in remotes.items():  # the published datasets' table, with these archives
        monkeypatch.setitem(datasets.DATASETS, name, datasets.DATASETS[name]._replace(remote=remote))
    folder = tmp_path / "data"
    shutil.copytree(template, folder, symlinks=True)
    shutil.rmtree(folder / "cache")
    for stamp in folder.glob("*.md5"):
        stamp.unlink()
    for stamp in folder.glob("*.sha256"):
        stamp.unlink()
    archive = str(folder / remotes[name].filename)
    real_open, real_os_open = open, os.open

    def refusing(opener):
        def opened(path, *args, **kwargs):
            if os.fsdecode(path) == archive:
                raise PermissionError(13, "Permission denied", archive)
            return opener(path, *args, **kwargs)
        return opened

    monkeypatch.setattr("builtins.open", refusing(real_open))
    monkeypatch.setattr(os, "open", refusing(real_os_open))
    with pytest.raises(datasets.DataError, match="Permission denied") as refused:
        load(name, folder, remotes[name], settings)
    assert_one_line(str(refused.value))


def test_hostile_data_folders_through_the_command_line(tmp_path, fake_interpreter):
    """run-matrix --data real --data-dir X, offline: a data folder that is no folder is refused
    before anything runs (exit 2); a dataset that cannot be had fails its cells in one line (exit 1);
    never a traceback or a wait on a FIFO."""
    python = fake_interpreter("sys.exit(1)")  # every cell fails at once
    (tmp_path / "a file").write_text("not a folder")
    fifo_stamp = tmp_path / "fifo stamp"
    fifo_stamp.mkdir()
    (fifo_stamp / "cifar-10-python.tar.gz").write_bytes(b"not the archive")
    os.mkfifo(fifo_stamp / "cifar-10-python.tar.gz.md5")
    fifo_archive = tmp_path / "fifo archive"
    fifo_archive.mkdir()
    os.mkfifo(fifo_archive / "cifar-10-python.tar.gz")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = {"a file": 2, "dangling": 2, "fifo stamp": 1, "fifo archive": 1}
    started = {}
    for number, name in enumerate(cases):
        started[name] = run_cli(["run-matrix", "--backend", "local", "--python", str(python), "--frameworks", "pytorch",
                                 "--variants", "cpu", "--workloads", "cnn", "--profile", "smoke", "--data", "real",
                                 "--data-dir", str(tmp_path / name), "--results-dir", str(tmp_path / f"run{number}"),
                                 "--no-report"], cwd=tmp_path, timeout=90, env={"ROSETTA_OFFLINE": "1"})
    for name, process in started.items():
        code, err = finish(process)
        if cases[name] == 2:
            line = assert_refused_in_one_line(code, err, name)
            assert "--data-dir" in line, line
        else:
            assert "Traceback" not in err and code == 1, f"{name}: exit {code}: {err[-2000:]}"
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and "CIFAR-10" in errors[0], f"{name}: {err[-2000:]}"
