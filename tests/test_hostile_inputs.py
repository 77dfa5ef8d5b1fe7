"""Every file and value a user hands Rosetta Bench is read to the end, whatever it holds: accepted,
or refused in one line naming the fix (a UserError: exit 2), never a traceback, a hang or a
megabyte of error message (docs/RUN-GUARANTEES.md, the trust model).

Property-based: each reader gets VALID files of its kind broken by tests/support/hostile.py (bytes flipped,
cut short, spliced; values swapped for other types, nested thousands deep, huge, NaN), as many
cases as ROSETTA_HOSTILE_EXAMPLES says (300 by default). A few fixed hostile cases per kind go
through the real command line in a subprocess: exit 2 and no traceback.

Here the host's documents: the matrix file, run.json, images.lock. The same for the cell document
is in test_hostile_cell_document.py, for numeric options in test_hostile_options.py, for a
wheelhouse and a data folder in test_hostile_folders.py.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given

from support import hostile
from support.hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, planted_and_refused, read_or_refused, run_all
from orchestrator.backends.contract import Backend
from orchestrator import frameworks, matrix
from orchestrator.errors import UserError

KNOWN = frameworks.discover()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder the examples of a property overwrite in turn."""
    return tmp_path_factory.mktemp("hostile")


# --- the matrix file (orchestrator/matrix/) ---------------------------------------------------------

VALID_MATRIX = {
    "defaults": {"profile": "smoke", "data": "synthetic", "repeat": 2, "init": "canonical",
                 "workloads": ["cnn", "gru"], "precisions": ["fp32", "fp16"]},
    "frameworks": {
        "pytorch": {"variants": ["cpu", "cu130"], "workloads": ["cnn"], "precisions": ["fp32"],
                    "options": {"channels_last": ["off", "on"]}},
        "mxnet": {"variants": ["cpu", "cu112"], "accelerator_types": {"cu112": "A100"}},
        "tensorflow": {"modes": ["compiled"]},
    },
}


def read_matrix(path: Path) -> None:
    """What run-matrix does with a matrix file before any cell runs."""
    loaded = matrix.load(path, KNOWN)
    loaded.cells(KNOWN)
    loaded.accelerator_types()
    loaded.not_applicable(KNOWN)


def test_the_valid_matrix_is_accepted(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(hostile.toml_text(VALID_MATRIX))
    loaded = matrix.load(path, KNOWN)
    assert loaded.repeats == 2 and [entry.name for entry in loaded.frameworks] == ["pytorch", "mxnet", "tensorflow"]
    assert loaded.accelerator_types() == {("mxnet", "cu112"): "A100"}
    cells = loaded.cells(KNOWN)
    assert {cell.framework for cell in cells} == {"pytorch", "mxnet", "tensorflow"}
    assert {cell.repeat for cell in cells} == {0, 1} and {"channels_last": "on"} in [cell.options for cell in cells]


@HOSTILE
@given(data=hostile.hostile_document(VALID_MATRIX, "toml"))
def test_any_matrix_file_is_read_or_refused_in_one_line(scratch, data):
    read_or_refused(scratch / "matrix.toml", data, read_matrix, UserError, "matrix file")


def test_a_matrix_file_larger_than_allowed_is_not_read(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text("# padding\n" * (matrix.LONGEST_MATRIX_FILE // 10 + 1) + hostile.toml_text(VALID_MATRIX))
    with pytest.raises(UserError, match="larger than") as refused:
        matrix.load(path, KNOWN)
    assert_one_line(str(refused.value))


def test_a_matrix_fifo_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "matrix.toml")
    with pytest.raises(UserError, match="not a regular file") as refused:
        matrix.load(tmp_path / "matrix.toml", KNOWN)
    assert_one_line(str(refused.value))


MATRIX_CASES = {
    "nested 5000 deep": "[defaults]\nworkloads = " + "[" * 5000 + "]" * 5000 + "\n",
    "not UTF-8": b"[defaults]\nprofile = \"sm\xffoke\"\n",
    "a workload named 140000 times": "[defaults]\nworkloads = [" + '"cnn", ' * 140000 + "]\n",
    "a megabyte-long key": '"' + "k" * (hostile.HUGE - 100) + '" = 1\n',
    "an option name with a line break": '[frameworks.pytorch]\noptions = { "a\\nb" = 1 }\n',
    "a date for a repeat": "[defaults]\nrepeat = 1979-05-27\n",
}


def test_hostile_matrix_files_through_the_command_line(tmp_path):
    cases = {}
    for name, text in MATRIX_CASES.items():
        path = tmp_path / f"{len(cases)}.toml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        cases[name] = ["run-matrix", "--matrix", str(path), "--backend", "local", "--no-report"]
    for name, (code, err) in run_all(cases, tmp_path).items():
        line = assert_refused_in_one_line(code, err, name)
        assert len(line) <= hostile.LONGEST_MESSAGE + 200, f"{name}: {len(line)} characters"


# --- run.json of a results folder resumed or forced (orchestrator/run_folder.py) ----------------------

VALID_RUN = {"invocations": [
    {"started_at": "2026-01-02T03:04:05+00:00", "mode": "benchmark", "backend": "local", "git_revision": "0" * 40,
     "host": "bench", "platform": "Linux-6.1-x86_64", "cpu_count": 16,
     "gpus": [{"name": "NVIDIA H100", "memory_mb": 81559, "driver": "550.54"}], "cells": 4,
     "matrix": "matrix.toml", "profile": "smoke", "data": "synthetic", "repeat": 2, "init": "canonical", "seed": 7,
     "options": {"pytorch": {"channels_last": ["off", "on"]}}, "argv": ["run-matrix", "--repeat", "2"],
     "not_applicable": [{"framework": "onnxruntime", "workload": "cnn", "variants": ["cpu"], "reason": "inference"}],
     "order": ["pytorch__cpu__cnn__fp32__smoke__synthetic__r0"]},
    {"started_at": "2026-01-02T04:00:00+00:00", "mode": "benchmark", "backend": "local", "seed": 11, "order": []},
]}


class _Backend(Backend):
    """What run.json records of a backend: its name; it never runs a cell here."""

    name = "local"

    def run_cell(self, job):
        raise AssertionError("no cell runs in these tests")


def read_run(folder: Path) -> dict:
    """What a resumed or forced run does with run.json before any cell runs: the order seed, the
    folder's mode (for --resume without a folder), one more invocation appended."""
    from unittest import mock

    from orchestrator import host, run_folder, runner
    from orchestrator.commands.run_matrix import recorded_seed

    record = run_folder.read_run_record(folder)
    assert isinstance(record, dict) and isinstance(record["invocations"], list)
    assert all(isinstance(invocation, dict) for invocation in record["invocations"])
    assert run_folder.run_mode(folder) in (run_folder.MODE_BENCHMARK, run_folder.MODE_PARITY)
    seed = recorded_seed(folder)
    assert seed is None or (type(seed) is int and 0 <= seed < 2 ** 32)
    with mock.patch.object(host, "gpu_facts", return_value=[]):
        runner._write_run_metadata(folder, _Backend(), [], None, {"seed": 3}, order=[])
    assert len(run_folder.read_run_record(folder)["invocations"]) == len(record["invocations"]) + 1
    return record


def test_the_valid_run_record_is_accepted(tmp_path):
    from orchestrator import run_folder
    from orchestrator.commands.run_matrix import recorded_seed

    (tmp_path / "run.json").write_text(json.dumps(VALID_RUN))
    assert run_folder.read_run_record(tmp_path) == VALID_RUN
    assert recorded_seed(tmp_path) == 11 and run_folder.run_mode(tmp_path) == run_folder.MODE_BENCHMARK
    assert read_run(tmp_path) == VALID_RUN
    assert run_folder.read_run_record(tmp_path / "nothing-here") == {"invocations": []}  # a fresh folder


@HOSTILE
@given(data=hostile.hostile_document(VALID_RUN))
def test_any_run_record_is_read_or_refused_in_one_line_by_every_reader(scratch, data):
    """A refused run.json is refused by each of its readers alike, and left as it was: a resumed
    or forced run never silently drops the history it holds."""
    from orchestrator import host, run_folder, runner
    from orchestrator.commands.run_matrix import recorded_seed
    from unittest import mock

    folder = scratch / "run"
    folder.mkdir(exist_ok=True)
    (folder / "run.json").write_bytes(data)
    try:
        read_run(folder)
        return
    except UserError as error:
        assert_one_line(str(error), "run.json")
    (folder / "run.json").write_bytes(data)
    for reader in (run_folder.read_run_record, run_folder.run_mode, recorded_seed):
        with pytest.raises(UserError) as refused:
            reader(folder)
        assert_one_line(str(refused.value), reader.__name__)
    with mock.patch.object(host, "gpu_facts", return_value=[]), pytest.raises(UserError):
        runner._write_run_metadata(folder, _Backend(), [], None, {}, order=[])
    assert (folder / "run.json").read_bytes() == data


@pytest.mark.parametrize("plant, expected", [
    (lambda path: path.write_text(json.dumps(VALID_RUN) + " " * (16 << 20)), "larger than"),
    (lambda path: os.mkfifo(path), "not a regular file"),
    (lambda path: path.symlink_to(path.parent / "elsewhere.json"), "symbolic link"),
    (lambda path: path.mkdir(), "is a folder where the run writes a file"),
    (lambda path: path.write_text('{"invocations": [{"seed": NaN}]}'), "NaN"),
    (lambda path: path.write_text('{"invocations": [{"started_at": 1e999}]}'), "out of range"),
    (lambda path: path.write_text('{"invocations": [{"cpu_count": Infinity}]}'), "Infinity"),
    (lambda path: path.write_text('{"invocations": [' + "[" * 40 + "]" * 40 + "]}"), "nested"),
])
def test_a_run_record_that_is_no_file_or_no_json_is_refused(tmp_path, plant, expected):
    from orchestrator import run_folder

    (tmp_path / "elsewhere.json").write_text(json.dumps(VALID_RUN))
    plant(tmp_path / "run.json")
    with pytest.raises(UserError, match=expected) as refused:
        run_folder.read_run_record(tmp_path)
    assert_one_line(str(refused.value))


RUN_CASES = {
    "a list": b"[]",
    "invocations a string": b'{"invocations": "abc"}',
    "not UTF-8": b'{"invocations": [{"seed": 1, "host": "\xff"}]}',
    "a NaN seed": b'{"invocations": [{"seed": NaN}]}',
    "nested 5000 deep": b'{"invocations": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
    "a seed of the wrong type": b'{"invocations": [{"seed": "7"}]}',
}


@pytest.mark.parametrize("how", ["--resume", "--force"])
def test_hostile_run_records_through_the_command_line(tmp_path, how, fake_interpreter):
    python = fake_interpreter("sys.exit(1)")  # every cell fails at once
    cases = {}
    for name, data in RUN_CASES.items():
        folder = tmp_path / f"run{len(cases)}"
        folder.mkdir()
        (folder / "run.json").write_bytes(data)
        cases[name] = ["run-matrix", "--backend", "local", "--python", python, "--frameworks", "pytorch",
                       "--variants", "cpu", "--workloads", "cnn", "--profile", "smoke", "--data", "synthetic",
                       "--data-dir", str(tmp_path / "data"), "--results-dir", str(folder), "--no-report", how]
    for position, (name, (code, err)) in enumerate(run_all(cases, tmp_path).items()):
        line = assert_refused_in_one_line(code, err, name)
        assert "run.json" in line, line
        assert (tmp_path / f"run{position}" / "run.json").read_bytes() == RUN_CASES[name], f"{name}: rewritten"


# --- images.lock (orchestrator/images/lock.py): read by pull, run-matrix --pull, publish --merge-lock ---

def _lock_entry(variant: str, version: str, fill: str) -> dict:
    return {"registry": "ghcr.io/rosetta-bench", "repository": "rosetta-pytorch", "tag": f"{variant}-{version}",
            "digest": "sha256:" + fill * 64, "platform": "linux/amd64", "source_revision": "0123456789abcdef" * 2 + "01234567",
            "requirements_sha256": "1" * 64, "sources_sha256": "2" * 64, "framework_version": version,
            "published": "2026-01-02T03:04:05+00:00"}


VALID_LOCK = {"comment": "Generated by `python -m orchestrator publish`; do not edit by hand (see README, Images).",
              "schema": 1,
              "images": {"pytorch": {"cpu": _lock_entry("cpu", "2.6.0", "a"), "cu126": _lock_entry("cu126", "2.6.0", "b")},
                         "jax": {"cpu": {**_lock_entry("cpu", "0.4.30", "c"), "repository": "rosetta-jax",
                                         "registry": "127.0.0.1:5000", "platform": "linux/arm64/v8"}}}}
# What a lock entry's values may be, as the test sees it: what becomes an image reference and a
# pull holds no space, no path step, no line break; a digest is sha256 and 64 hex digits.
_LOCK_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def use_lock(path: Path) -> dict:
    """What pull and run-matrix --pull do with the lock before pulling: every entry's reference
    in the default registry and its own, the label checks the pulled image must pass."""
    from orchestrator.images import lock as image_lock

    entries = image_lock.read(path)
    for (framework, variant), entry in entries.items():
        assert (entry.framework, entry.variant) == (framework, variant)
        assert all(type(getattr(entry, field.name)) is str for field in dataclasses.fields(entry)), entry
        assert _LOCK_DIGEST.fullmatch(entry.digest), entry.digest
        for reference in (entry.reference(), entry.reference(image_lock.DEFAULT_REGISTRY),
                          f"{entry.registry}/{entry.repository}:{entry.tag}"):
            assert reference.isprintable() and " " not in reference and "/../" not in reference, reference
            assert "//" not in reference and len(reference) < 1000, reference
        assert entry.platform.count("/") in (1, 2), entry.platform
        assert all(isinstance(value, str) for value in entry.label_checks().values())
    return entries


def assert_names_the_lock_fix(line: str) -> None:
    assert "`git checkout images.lock`" in line or "`python -m orchestrator publish" in line, line


def test_the_valid_lock_is_accepted(tmp_path):
    path = tmp_path / "images.lock"
    path.write_text(json.dumps(VALID_LOCK))
    entries = use_lock(path)
    assert sorted(entries) == [("jax", "cpu"), ("pytorch", "cpu"), ("pytorch", "cu126")]
    assert entries[("jax", "cpu")].reference() == "127.0.0.1:5000/rosetta-jax@sha256:" + "c" * 64


@HOSTILE
@given(data=hostile.hostile_document(VALID_LOCK))
def test_any_lock_is_read_or_refused_in_one_line(scratch, data):
    line = read_or_refused(scratch / "images.lock", data, use_lock, UserError, "images.lock")
    if line is not None:
        assert_names_the_lock_fix(line)


LOCK_PLANTS = {
    "huge": (lambda path: path.write_text(json.dumps(VALID_LOCK) + " " * (16 << 20)), "larger than"),
    "fifo": (lambda path: os.mkfifo(path), "not a regular file"),
    "link": (lambda path: path.symlink_to(path.parent / "elsewhere.lock"), "symbolic link"),
    "folder": (lambda path: path.mkdir(), "not a regular file"),
    "schema true": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace('"schema": 1', '"schema": true')),
                    "schema"),
    "variant a list": (lambda path: path.write_text(json.dumps(hostile.replaced(VALID_LOCK, ("images", "pytorch", "cpu"),
                                                                                 ["sha256:" + "a" * 64]))),
                       "pytorch/cpu"),
    "variants a list": (lambda path: path.write_text(json.dumps(hostile.replaced(VALID_LOCK, ("images", "pytorch"),
                                                                                  [_lock_entry("cpu", "1", "a")]))),
                        "pytorch"),
    "short digest": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace("sha256:" + "a" * 64,
                                                                                 "sha256:" + "a" * 63)), "digest"),
    "repository path": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace('"rosetta-jax"',
                                                                                    '"rosetta-jax/../x"')),
                        "repository"),
    "tag with a space": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace('"cpu-2.6.0"', '"cpu 2.6.0"')),
                         "tag"),
    "platform without arch": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace('"linux/amd64"',
                                                                                          '"linux"')), "platform"),
    "version a number": (lambda path: path.write_text(json.dumps(VALID_LOCK).replace('"2.6.0"', '2.6')),
                         "framework_version is a number"),
    "framework with a line break": (lambda path: path.write_text(
        json.dumps(VALID_LOCK).replace('"pytorch": {', '"py\\ntorch": {')), "framework"),
    "nested 5000 deep": (lambda path: path.write_text(
        '{"schema": 1, "images": {"pytorch": ' + "[" * 5000 + "]" * 5000 + "}}"), "nested"),
}


@pytest.mark.parametrize("case", LOCK_PLANTS)
def test_a_lock_that_is_no_file_or_holds_a_value_of_the_wrong_shape_is_refused(tmp_path, case):
    from orchestrator.images import lock as image_lock

    plant, expected = LOCK_PLANTS[case]
    assert_names_the_lock_fix(planted_and_refused(tmp_path, plant, json.dumps(VALID_LOCK), "images.lock",
                                                  image_lock.read, UserError, expected))


LOCK_CASES = {
    "a FIFO": None,
    "a list where the variants belong": json.dumps(hostile.replaced(VALID_LOCK, ("images", "pytorch"),
                                                                    [_lock_entry("cpu", "1", "a")])),
    "nested 5000 deep": '{"schema": 1, "images": ' + "[" * 5000 + "]" * 5000 + "}",
    "not UTF-8": json.dumps(VALID_LOCK).replace("linux/amd64", "linux/amd\udcff64").encode("utf-8", "surrogateescape"),
    "a digest that is a path": json.dumps(VALID_LOCK).replace("sha256:" + "a" * 64, "../../x"),
}


@pytest.mark.parametrize("command", ["pull", "publish --merge-lock"])
def test_hostile_locks_through_the_command_line(tmp_path, command):
    cases = {}
    for name, text in LOCK_CASES.items():
        path = tmp_path / f"{len(cases)}.lock"
        if text is None:
            os.mkfifo(path)
        else:
            path.write_bytes(text if isinstance(text, bytes) else text.encode())
        cases[name] = (["pull", "pytorch", "--variant", "cpu", "--lock", str(path)] if command == "pull" else
                       ["publish", "--merge-lock", str(path), "--lock", str(tmp_path / "merged.lock")])
    for name, (code, err) in run_all(cases, tmp_path, timeout=60).items():
        assert_names_the_lock_fix(assert_refused_in_one_line(code, err, name))
    assert not (tmp_path / "merged.lock").exists()

