"""Every file and value a user hands Rosetta Bench is read to the end, whatever it holds: accepted,
or refused in one line naming the fix (a UserError: exit 2), never a traceback, a hang or a
megabyte of error message (docs/RUN-GUARANTEES.md, the trust model).

Property-based: each reader gets VALID files of its kind broken by tests/hostile.py (bytes flipped,
cut short, spliced; values swapped for other types, nested thousands deep, huge, NaN), as many
cases as ROSETTA_HOSTILE_EXAMPLES says (300 by default). A few fixed hostile cases per kind go
through the real command line in a subprocess: exit 2 and no traceback.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given

import hostile
from hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, finish, run_cli
from orchestrator.backends.contract import Backend
from orchestrator import frameworks, matrix
from orchestrator.errors import UserError

KNOWN = frameworks.discover()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder the examples of a property overwrite in turn."""
    return tmp_path_factory.mktemp("hostile")


def run_all(cases: dict[str, list[str]], cwd: Path, **options) -> dict[str, tuple[int, str]]:
    """Each case's command line run at once (they are independent), then each one's (exit, stderr)."""
    started = {name: run_cli(arguments, cwd=cwd, **options) for name, arguments in cases.items()}
    return {name: finish(process) for name, process in started.items()}


# --- the matrix file (orchestrator/matrix/) ---------------------------------------------------------

VALID_MATRIX = {
    "defaults": {"profile": "smoke", "data": "synthetic", "repeat": 2, "init": "canonical",
                 "workloads": ["cnn", "gru"], "precisions": ["fp32", "fp16"]},
    "frameworks": {
        "pytorch": {"variants": ["cpu", "cu130"], "workloads": ["cnn"], "precisions": ["fp32"],
                    "options": {"channels_last": ["off", "on"]}},
        "mxnet": {"variants": ["cpu", "cu112"], "accelerator_types": {"cu112": "A100"}},
        "tensorflow": {"options": {"xla": "on"}},
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
    path = scratch / "matrix.toml"
    path.write_bytes(data)
    try:
        read_matrix(path)
    except UserError as error:
        assert_one_line(str(error), "matrix file")


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


def _fake_interpreter(folder: Path) -> str:
    """Stands in for a framework's Python: every cell it is given fails at once."""
    script = folder / "fake-python"
    script.write_text("#!/bin/sh\nexit 1\n")
    script.chmod(0o755)
    return str(script)


RUN_CASES = {
    "a list": b"[]",
    "invocations a string": b'{"invocations": "abc"}',
    "not UTF-8": b'{"invocations": [{"seed": 1, "host": "\xff"}]}',
    "a NaN seed": b'{"invocations": [{"seed": NaN}]}',
    "nested 5000 deep": b'{"invocations": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
    "a seed of the wrong type": b'{"invocations": [{"seed": "7"}]}',
}


@pytest.mark.parametrize("how", ["--resume", "--force"])
def test_hostile_run_records_through_the_command_line(tmp_path, how):
    python = _fake_interpreter(tmp_path)
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
