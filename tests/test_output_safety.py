"""What Rosetta Bench writes for others to open is safe to open: a CSV a spreadsheet reads runs no
formula from a result's strings, and the Markdown pages carry no live link from them and no cell
without end (docs/RUN-GUARANTEES.md, the trust model: a cell is untrusted). Run folders are
fabricated from Result objects in tmp_path and go through the real commands."""
from __future__ import annotations

import csv

from orchestrator.__main__ import main
from orchestrator.commands import export
from workloads.common.result import Cell, Metrics, Provenance, Result
from records import cell_file, measured

# What a spreadsheet takes for the start of a formula (OWASP, CSV injection): =, +, -, @, tab, CR.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def hostile_result(**provenance) -> Result:
    return measured(Result(
        cell=Cell(framework="=1+2", workload="cnn", variant="cuda12", options={"xla": "-on"}),
        status="ok", metrics=Metrics(steady_samples_per_s=1200.0, samples_per_s=1100.0, test_accuracy=0.77),
        started_at="2026-12-02T10:00:00+00:00",
        provenance=Provenance(framework_version="@SUM(1+1)*cmd|' /C calc'!A0", device="cuda",
                              gpu_name="+HYPERLINK(\"http://evil.example\")", gpu_driver="\t=1+1",
                              cpu_model="\r=cmd", hostname="-2+3+cmd|' /C calc'!A0", cuda_version="-3.5",
                              backend="docker", **provenance)))


def failed_result(reason: str) -> Result:
    return Result(cell=Cell(framework="jax", workload="cnn", variant="cuda12"), status="failed", reason=reason,
                  started_at="2026-12-02T10:01:00+00:00", provenance=Provenance(device="cuda", backend="docker"))


def write_run(folder, results) -> None:
    for item in results:
        item.write(cell_file(folder, item))


def test_the_csv_export_neutralises_every_formula_a_result_could_carry(tmp_path):
    folder = tmp_path / "run"
    write_run(folder, [hostile_result(), failed_result("=HYPERLINK(\"http://evil.example\",\"click\")")])
    assert main(["export", str(folder), "--format", "csv"]) == 0
    with open(folder / export.DEFAULT_FILE, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 2
    cells = [value for row in rows for value in row.values()]
    assert [value for value in cells if value.startswith(FORMULA_STARTS)] == ["-3.5"]  # a numeral, below
    hostile = next(row for row in rows if row["framework"] != "jax")
    assert hostile["framework"] == "'=1+2"  # the text itself, after the quote a spreadsheet hides
    assert hostile["framework_version"] == "'@SUM(1+1)*cmd|' /C calc'!A0"
    assert hostile["gpu_name"] == "'+HYPERLINK(\"http://evil.example\")"
    assert hostile["gpu_driver"] == "'\t=1+1" and hostile["cpu_model"] == "'\r=cmd"
    assert hostile["hostname"] == "'-2+3+cmd|' /C calc'!A0"
    assert hostile["options"] == "xla=-on"  # a formula character inside a cell is no formula
    assert hostile["key"].startswith("'=1+2__cuda12__cnn")
    failed = next(row for row in rows if row["framework"] == "jax")
    assert failed["reason"] == "'=HYPERLINK(\"http://evil.example\",\"click\")"
    # genuine numbers stay numbers: a negative numeral and the figures themselves
    assert hostile["cuda_version"] == "-3.5"
    assert float(hostile["headline"]) == 1200.0 and float(hostile["test_accuracy"]) == 0.77
