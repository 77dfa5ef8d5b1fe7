"""The cell document: how every backend hands a cell to `python -m workloads --cell FILE`."""
import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.backends import CELL_DOCUMENT, cell_request, write_cell_document
from workloads.__main__ import main, parse_args
from workloads.common.cell import CELL_DOCUMENT_VERSION, CellDocumentError, CellRequest
from workloads.common.result import Cell, Result

ROOT = Path(__file__).resolve().parent.parent
CELL = Cell("pytorch", "cnn", variant="cpu", precision="fp32", profile="smoke", data="synthetic", repeat=2)


def test_the_document_round_trips_through_json_and_a_file(tmp_path):
    request = cell_request(CELL, device="cpu", data_dir="/data/", out="/results/result.json",
                           parity="parity/cnn", onnx_model="onnx/resnet50-abc")
    assert (request.parity, request.onnx_model) == ("/data/parity/cnn", "/data/onnx/resnet50-abc")
    assert CellRequest.from_json(request.to_json()) == request
    path = write_cell_document(request, tmp_path)
    assert path == tmp_path / CELL_DOCUMENT and path.stat().st_mode & 0o777 == 0o644  # a container's user reads it
    assert CellRequest.read(path) == request
    document = json.loads(path.read_text())
    assert document["version"] == CELL_DOCUMENT_VERSION and document["cell"]["repeat"] == 2


def test_the_argument_form_builds_the_same_document(tmp_path, monkeypatch):
    monkeypatch.delenv("ROSETTA_FRAMEWORK", raising=False)
    request = cell_request(CELL, device="cpu", data_dir="/data", out="/results/result.json",
                           parity="parity/cnn", export_onnx="/export")
    by_hand = parse_args(["cnn", "--framework", "pytorch", "--variant", "cpu", "--profile", "smoke",
                          "--precision", "fp32", "--device", "cpu", "--data", "synthetic", "--data-dir", "/data",
                          "--repeat", "2", "--out", "/results/result.json", "--parity", "/data/parity/cnn",
                          "--export-onnx", "/export"])
    assert by_hand == request
    path = write_cell_document(request, tmp_path)
    assert parse_args(["--cell", str(path)]) == request
    # Options not given take the document's defaults.
    assert parse_args(["gru", "--framework", "jax"]) == CellRequest(cell=Cell("jax", "gru"))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(version=99), "version 99"),
    (lambda d: d["cell"].update(colour="blue"), "unknown field 'colour'"),
    (lambda d: d["cell"].pop("workload"), "lacks 'workload'"),
    (lambda d: d["cell"].update(repeat="2"), "Cell.repeat is '2', not a int"),
    (lambda d: d.update(device=None), "CellRequest.device is null"),
    (lambda d: d.update(out=3), "CellRequest.out is 3"),
])
def test_a_malformed_document_names_its_problem(change, message):
    document = json.loads(CellRequest(cell=CELL).to_json())
    change(document)
    with pytest.raises(CellDocumentError, match=message):
        CellRequest.from_json(json.dumps(document))


def test_the_entry_point_refuses_a_bad_or_mixed_cell_document(tmp_path, capsys):
    path = write_cell_document(CellRequest(cell=Cell("pytorch", "cnn", profile="weekly")), tmp_path)
    with pytest.raises(SystemExit):
        parse_args(["--cell", str(path)])
    assert "invalid profile 'weekly'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--cell", str(path), "--profile", "smoke"])
    assert "drop profile" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--cell", str(tmp_path / "missing.json")])
    assert "cannot read it" in capsys.readouterr().err


UNSAFE_NAMES = ["../..", "../../../tmp/escape", "a/b", ".hidden", "a__b", "", "x" * 65, "cpu\n", "c\u0301pu"]


FIELDS = ["framework", "variant", "workload", "precision", "profile", "data"]


@pytest.mark.parametrize(("field", "value"), [(field, value) for field in FIELDS for value in UNSAFE_NAMES
                                              # an empty framework or workload is refused as missing, not as unsafe
                                              if not (value == "" and field in ("framework", "workload"))])
def test_a_name_that_would_become_an_unsafe_path_is_refused_in_one_line(tmp_path, monkeypatch, capsys, field, value):
    """Every name in the cell's key (the default result path) is checked, by argument and by document."""
    monkeypatch.setenv("ROSETTA_RESULTS_DIR", str(tmp_path / "results"))
    cell = dataclasses.replace(CELL, **{field: value})
    path = write_cell_document(CellRequest(cell=cell, device="cpu"), tmp_path)
    before = files_under(tmp_path.parent)
    arguments = [cell.workload, "--framework", cell.framework, "--variant", cell.variant,
                 "--precision", cell.precision, "--profile", cell.profile, "--data", cell.data]
    for argv in (["--cell", str(path)], arguments):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if argv is arguments and field in ("precision", "profile", "data"):
            assert "invalid choice" in err  # argparse's own choices, with its usage line
        else:
            assert err.count("\n") == 1 and f"invalid {field}" in err, err
    assert files_under(tmp_path.parent) == before


def files_under(folder: Path) -> list:
    return sorted(str(path) for path in folder.rglob("*"))


@pytest.mark.parametrize("name", ["cu118", "keras-tf", "mxnet-module", "py3.6", "cpu_avx2", "gcc+mkl"])
def test_ordinary_names_are_accepted(name, tmp_path, monkeypatch):
    monkeypatch.setenv("ROSETTA_RESULTS_DIR", str(tmp_path))
    assert parse_args(["gru", "--framework", "pytorch", "--variant", name]).cell.variant == name


@pytest.mark.parametrize("how", ["a folder", "under a file"])
def test_an_out_that_cannot_be_a_file_is_refused_before_the_run(tmp_path, capsys, how):
    target = tmp_path / "results"
    target.mkdir()
    if how == "under a file":
        (tmp_path / "file").write_text("")
        target = tmp_path / "file" / "sub" / "result.json"
    started = []
    with pytest.raises(SystemExit) as exit_info:
        main(["cnn", "--framework", "pytorch", "--profile", "smoke", "--data", "synthetic", "--out", str(target)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(target) in err and "--out" in err and "Traceback" not in err, err
    assert not started


def test_a_result_that_cannot_be_written_after_the_run_is_one_line(tmp_path, monkeypatch, capsys):
    """The check before the run can be overtaken (a folder made meanwhile): still one line, exit 2."""
    import workloads.__main__ as entry

    out = tmp_path / "result.json"
    monkeypatch.setattr(entry, "out_problem", lambda path: None)
    monkeypatch.setattr(entry.importlib, "import_module", lambda name: out.mkdir() or _Succeeds)
    code = main(["cnn", "--framework", "pytorch", "--profile", "smoke", "--data", "synthetic", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "cannot write the result to" in err and "Traceback" not in err, err


class _Succeeds:
    MATCHED = ()  # a workload module's interface: what had to be matched, and run

    @staticmethod
    def run(run):
        pass


@pytest.mark.e2e
def test_a_cell_document_runs_a_real_cell(tmp_path):
    """PyTorch's smoke CNN from a cell document, in its real environment (built on first use)."""
    from orchestrator.backends.local import LocalBackend
    from orchestrator.frameworks import discover

    python = LocalBackend(discover()).interpreter("pytorch", "cpu")
    out = tmp_path / "result.json"
    request = cell_request(Cell("pytorch", "cnn", profile="smoke", data="synthetic"), device="cpu",
                           data_dir=str(tmp_path / "data"), out=str(out))
    path = write_cell_document(request, tmp_path)
    completed = subprocess.run([python, "-m", "workloads", "--cell", str(path)], cwd=ROOT, capture_output=True,
                               text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    result = Result.read(out)
    assert result.status == "ok" and result.cell == request.cell
    assert result.provenance.device == "cpu" and result.metrics.train_time_s > 0
