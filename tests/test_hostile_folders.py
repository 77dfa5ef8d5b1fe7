"""Folders a user hands over are read to the end, whatever lies in them: a wheelhouse (--wheelhouse,
$PIP_FIND_LINKS) and a data folder (--data-dir). What is in them is used, skipped with a one-line
warning, or refused in one line (exit 2; a dataset's problem fails its cells in one line), never a
traceback, a wait on a FIFO, a file read through a link or a file read whole however large
(docs/RUN-GUARANTEES.md, bad input).

Property-based (tests/hostile.py's settings): hypothesis plants files, links, folders, FIFOs and
oversized files under names valid and hostile, then runs the real functions the host calls; a few
cases go through `python -m orchestrator` in a subprocess.
"""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import hostile
from hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, finish, run_cli
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
    from orchestrator import wheelhouse as wheelhouse_module

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
    from orchestrator import wheelhouse as wheelhouse_module

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
