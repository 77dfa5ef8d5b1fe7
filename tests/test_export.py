"""`export RUN --format csv`: one tidy row per cell and repeat that pandas reads back as written,
and bad input as one line. Run folders are fabricated from Result objects in tmp_path."""
from __future__ import annotations

import io

import pandas as pd
import pytest

from orchestrator.__main__ import main
from orchestrator.commands import export
from orchestrator.results import cell_path
from workloads.common import declaration
from workloads.common.result import Cell, Metrics, Provenance, Result
from conftest import error_line
from support.records import measured

# Text a CSV writer must quote: a comma, a quote, a line break, and HTML for good measure.
AWKWARD_REASON = 'CUDA OOM, "twice"\nthen <script>alert(1)</script>'
DIGEST = "sha256:" + "ab" * 32


def result(framework, workload, repeat, *, rate=None, status="ok", reason=None, options=None) -> Result:
    metrics = Metrics()
    if status == "ok" and workload == "resnet50":
        metrics = Metrics(images_per_s=rate, seconds_per_1000_images=1000 / rate, parameter_count=23_508_032)
    elif status == "ok":
        metrics = Metrics(steady_samples_per_s=rate, samples_per_s=rate * 0.9, train_time_s=50_000 / rate,
                          test_accuracy=0.77, parameter_count=3_441_592)
    return measured(Result(cell=Cell(framework=framework, workload=workload, variant="cuda12", repeat=repeat,
                            options=options or {}),
                  status=status, reason=reason, metrics=metrics, started_at=f"2026-12-02T10:0{repeat}:00+00:00",
                  provenance=Provenance(framework_version="2.5.1", cuda_version="12.4", device="cuda",
                                        gpu_name="NVIDIA H200", gpu_driver="570.1", backend="docker",
                                        image_digest=DIGEST, git_revision="abc1234")))


@pytest.fixture
def run(tmp_path):
    made = [result("pytorch", "cnn", repeat, rate=rate) for repeat, rate in enumerate([1200.0, 1100.0, 1300.0])]
    made += [result("tensorflow", "cnn", 0, rate=900.0, options={"xla": "on"}),
             result("jax", "cnn", 0, status="failed", reason=AWKWARD_REASON),
             result("pytorch", "resnet50", 0, rate=250.0)]
    for item in made:
        item.write(cell_path(tmp_path / "run", item.cell))
    return tmp_path / "run", made


# Text that looks like a number ("12.4", "12.10") stays text only when the reader says so.
TEXT = {column: str for column in export.IDENTITY + export.OUTCOME + export.PROVENANCE
        if column not in ("repeat", "headline", "wall_time_s")}


def read_back(path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=TEXT, keep_default_na=False, na_values=[""])


def test_export_writes_one_tidy_row_per_cell_and_repeat_that_pandas_reads_back(run, capsys):
    folder, made = run
    assert main(["export", str(folder), "--format", "csv"]) == 0
    assert f"export: {folder / export.DEFAULT_FILE}" in capsys.readouterr().err
    frame = read_back(folder / export.DEFAULT_FILE)
    assert len(frame) == len(made)
    assert list(frame.columns[:len(export.IDENTITY)]) == export.IDENTITY
    for column in export.OUTCOME + export.PROVENANCE + ["steady_samples_per_s", "images_per_s", "test_accuracy"]:
        assert column in frame.columns
    for item in made:
        (row,) = frame[frame["key"] == item.cell.key].to_dict("records")
        assert (row["framework"], row["workload"], row["repeat"], row["status"]) == (
            item.cell.framework, item.cell.workload, item.cell.repeat, item.status)
        headline = declaration.get(item.cell.workload).headline
        assert row["headline_metric"] == headline
        expected = getattr(item.metrics, headline)
        assert (pd.isna(row["headline"]) if expected is None else row["headline"] == pytest.approx(expected))
        assert row["image_digest"] == DIGEST and row["framework_version"] == "2.5.1"
        assert row["cuda_version"] == "12.4" and row["device"] == "cuda" and row["gpu_name"] == "NVIDIA H200"
    failed = frame[frame["framework"] == "jax"].iloc[0]
    assert failed["reason"] == AWKWARD_REASON  # quoted in the file, read back whole
    assert frame.loc[frame["framework"] == "tensorflow", "options"].item() == "xla=on"
    assert frame.loc[frame["workload"] == "resnet50", "images_per_s"].item() == pytest.approx(250.0)
    # grouping the tidy rows gives the medians a notebook wants
    ok = frame[frame["status"] == "ok"].fillna({"options": ""})  # no options: an empty field
    medians = ok.groupby(["workload", "framework", "options"])["headline"].median()
    assert medians[("cnn", "pytorch", "")] == pytest.approx(1200.0)


def test_export_to_standard_output(run, capsys):
    folder, made = run
    assert main(["export", str(folder), "--out", "-"]) == 0
    out = capsys.readouterr().out
    assert len(read_back(io.StringIO(out))) == len(made)
    assert not (folder / export.DEFAULT_FILE).exists()


def test_export_to_a_file_of_ones_choosing(run, tmp_path):
    folder, made = run
    target = tmp_path / "elsewhere" / "run.csv"
    assert main(["export", str(folder), "--out", str(target)]) == 0
    assert len(read_back(target)) == len(made)


@pytest.mark.parametrize("arguments, expected", [
    (["{tmp}/missing"], "is not a run folder"),
    (["{run}", "--format", "json"], "invalid choice: 'json'"),
    (["{run}", "--out", "{run}"], "cannot write"),
    (["{tmp}/empty"], "no results in"),
])
def test_bad_input_is_one_line_exit_2(run, tmp_path, capsys, arguments, expected):
    folder, _ = run
    (tmp_path / "empty" / "cells").mkdir(parents=True)
    argv = ["export"] + [argument.format(tmp=tmp_path, run=folder) for argument in arguments]
    assert main(argv) == 2
    assert expected in error_line(capsys)


def test_a_linked_default_file_is_replaced_never_written_through(run, tmp_path):
    folder, made = run
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (folder / export.DEFAULT_FILE).symlink_to(outside)
    assert main(["export", str(folder)]) == 0
    assert outside.read_text() == "keep me"
    assert not (folder / export.DEFAULT_FILE).is_symlink() and len(read_back(folder / export.DEFAULT_FILE)) == len(made)
