"""The cell document (`python -m workloads --cell FILE`, workloads/common/cell.py) is read to the
end, whatever it holds: accepted, or refused in one printable line (CellDocumentError; exit 2 from
the command), never a traceback, a wait on a FIFO or a megabyte of message (docs/RUN-GUARANTEES.md,
bad input). As tests/test_hostile_inputs.py does for the host's documents: hypothesis breaks a
VALID document (tests/support/hostile.py), fixed hostile files, and the real command in a subprocess.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given

from support import hostile
from support.hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, planted_and_refused, read_or_refused, run_all


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder the examples of a property overwrite in turn."""
    return tmp_path_factory.mktemp("hostile")


VALID_CELL_DOCUMENT = {
    "version": 3, "device": "cpu", "data_dir": "/data", "out": "/results/result.json", "parity": None,
    "export_onnx": None, "onnx_model": None,
    "cell": {"framework": "pytorch", "workload": "cnn", "variant": "cpu", "precision": "fp32", "profile": "smoke",
             "data": "synthetic", "repeat": 2, "init": "canonical", "options": {"channels_last": "on"}},
}


def read_cell_document(path: Path) -> None:
    """What `python -m workloads --cell FILE` does with the document before the cell runs: read it,
    then check what it asks for (a refusal there is one line too, printed by `refuse`)."""
    from workloads.__main__ import request_problem
    from workloads.common.cell import CellRequest

    request = CellRequest.read(path)
    problem = request_problem(request)
    if problem is not None:
        assert assert_one_line(problem, "cell document").isprintable(), problem


def test_the_valid_cell_document_is_accepted(tmp_path):
    from workloads.__main__ import request_problem
    from workloads.common.cell import CellRequest

    path = tmp_path / "cell.json"
    path.write_text(json.dumps(VALID_CELL_DOCUMENT))
    request = CellRequest.read(path)
    assert request.cell.key == "pytorch__cpu__cnn__fp32__smoke__synthetic__channels_last-on__r2"
    assert request_problem(request) is None and request.to_json() == CellRequest.from_json(request.to_json()).to_json()


@HOSTILE
@given(data=hostile.hostile_document(VALID_CELL_DOCUMENT))
def test_any_cell_document_is_read_or_refused_in_one_printable_line(scratch, data):
    from workloads.common.cell import CellDocumentError

    line = read_or_refused(scratch / "cell.json", data, read_cell_document, CellDocumentError, "cell document")
    assert line is None or line.isprintable(), line


CELL_DOCUMENT_PLANTS = {
    "huge": (lambda path: path.write_text(json.dumps(VALID_CELL_DOCUMENT) + " " * (2 << 20)), "larger than"),
    "fifo": (lambda path: os.mkfifo(path), "not a regular file"),
    "link": (lambda path: path.symlink_to(path.parent / "elsewhere.json"), "symbolic link"),
    "folder": (lambda path: path.mkdir(), "not a regular file"),
    "not UTF-8": (lambda path: path.write_bytes(b'{"version": 3, "cell": {"framework": "\xff"}}'), "not UTF-8"),
    "nested 5000 deep": (lambda path: path.write_text('{"version": 3, "cell": ' + "[" * 5000 + "]" * 5000 + "}"),
                         "nested"),
    "NaN repeat": (lambda path: path.write_text(json.dumps(VALID_CELL_DOCUMENT).replace('"repeat": 2', '"repeat": NaN')),
                   "NaN"),
    "negative repeat": (lambda path: path.write_text(json.dumps(VALID_CELL_DOCUMENT).replace('"repeat": 2',
                                                                                             '"repeat": -1')), "repeat"),
    "version 3.0": (lambda path: path.write_text(json.dumps(VALID_CELL_DOCUMENT).replace('"version": 3',
                                                                                         '"version": 3.0')), "version"),
    "a megabyte-long field name": (lambda path: path.write_text(json.dumps(
        {**VALID_CELL_DOCUMENT, "x" * 900_000: 1})), "unknown field"),
    "a repeat of a million line breaks": (lambda path: path.write_text(json.dumps(
        hostile.replaced(VALID_CELL_DOCUMENT, ("cell", "repeat"), "\n" * 400_000))), "repeat"),
}


@pytest.mark.parametrize("case", CELL_DOCUMENT_PLANTS)
def test_a_cell_document_that_is_no_file_or_no_document_is_refused(tmp_path, case):
    from workloads.common.cell import CellDocumentError, CellRequest

    plant, expected = CELL_DOCUMENT_PLANTS[case]
    line = planted_and_refused(tmp_path, plant, json.dumps(VALID_CELL_DOCUMENT), "cell.json", CellRequest.read,
                               CellDocumentError, expected)
    assert line.isprintable()


def test_hostile_cell_documents_through_the_command_line(tmp_path):
    """`python -m workloads --cell FILE`, as a backend runs it: exit 2 and one line, never a
    traceback, a usage block or a wait on a FIFO."""
    cases = {}
    for name in ("fifo", "link", "not UTF-8", "nested 5000 deep", "NaN repeat", "a repeat of a million line breaks"):
        folder = tmp_path / str(len(cases))
        folder.mkdir()
        (folder / "elsewhere.json").write_text(json.dumps(VALID_CELL_DOCUMENT))
        CELL_DOCUMENT_PLANTS[name][0](folder / "cell.json")
        cases[name] = ["--cell", str(folder / "cell.json")]
    cases["a list"] = ["--cell", str(tmp_path / "list.json")]
    (tmp_path / "list.json").write_text("[]")
    for name, (code, err) in run_all(cases, tmp_path, module="workloads", timeout=60).items():
        line = assert_refused_in_one_line(code, err, name, prefix="python -m workloads: error: --cell ")
        assert len([line for line in err.splitlines() if line.strip()]) == 1, f"{name}: {err[:2000]}"
        assert line.isprintable() and len(line) <= hostile.LONGEST_MESSAGE + 200, f"{name}: {line[:400]!r}"
