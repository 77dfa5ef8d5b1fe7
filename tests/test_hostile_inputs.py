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


# --- the matrix file (orchestrator/matrix.py) ---------------------------------------------------------

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
