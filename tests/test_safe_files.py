"""Files a run produces are written atomically and never through a link; removal never follows one."""
import os
import stat

import pytest

from workloads.common import safe_files


def test_an_atomic_write_replaces_a_planted_link_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out" / "report.md"
    target.parent.mkdir()
    target.symlink_to(victim)
    safe_files.write_text_atomic(target, "report")
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.read_text() == "report"
    assert stat.S_IMODE(target.stat().st_mode) == safe_files.FILE_MODE
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]  # no temporary left


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.md"
    target.write_text("the good one")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        safe_files.write_text_atomic(target, "half")
    assert target.read_text() == "the good one" and [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_a_linked_folder_on_the_way_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    results = tmp_path / "results"
    results.mkdir()
    (results / "cells").symlink_to(elsewhere)
    with pytest.raises(safe_files.UnsafePath, match="symbolic link"):
        safe_files.write_text_atomic(results / "cells" / "x.json", "{}", below=results)
    assert list(elsewhere.iterdir()) == []


def test_remove_tree_unlinks_a_link_and_never_deletes_its_target(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    work = tmp_path / "work"
    work.symlink_to(precious)
    safe_files.remove_tree(work)
    assert not os.path.lexists(work) and (precious / "keep.txt").read_text() == "keep"
    inside = tmp_path / "tree"
    (inside / "sub").mkdir(parents=True)
    (inside / "sub" / "link").symlink_to(precious)
    safe_files.remove_tree(inside)
    assert not inside.exists() and (precious / "keep.txt").exists()
    safe_files.remove_tree(tmp_path / "absent")  # nothing there: nothing to do
