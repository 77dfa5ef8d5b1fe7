"""The same threads in every framework (docs/FAIRNESS.md: same-threads): a run-wide `--threads N`
(default: the CPUs each cell may use) travels in the cell document, is set before the framework's
import and through its own switches, is recorded as what the framework reports back, and the report
flags a row whose framework reports another count or cannot obey. One test runs the real PyTorch
and ONNX Runtime environments (built on first use) through run-matrix on the local backend."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.backends import cell_request
from orchestrator.report import render
from workloads.common import threads
from workloads.common.cell import MOST_THREADS, CellDocumentError, CellRequest
from workloads.common.harness import Run
from workloads.common.result import Cell, Result
from test_report_fairness import only, summary_of, training, write

ROOT = Path(__file__).resolve().parent.parent


# --- the request: the command line, the cell document, the cell ----------------------------------------

def test_threads_travel_from_the_job_in_the_cell_document():
    request = cell_request(Cell("pytorch", "cnn"), device="cpu", data_dir="/data", out="r.json", threads=3)
    assert CellRequest.from_json(request.to_json()).threads == 3
    assert CellRequest.from_json(cell_request(Cell("pytorch", "cnn"), device="cpu", data_dir="/data",
                                              out="r.json").to_json()).threads is None  # the cell's own CPUs


@pytest.mark.parametrize("value", [0, -1, MOST_THREADS + 1, True, "4", 2.0])
def test_a_cell_document_with_another_thread_count_is_refused(value):
    document = json.loads(cell_request(Cell("pytorch", "cnn"), device="cpu", data_dir="/d", out="r.json").to_json())
    document["threads"] = value
    with pytest.raises(CellDocumentError, match="threads is .* not a whole number from 1 to 4096"):
        CellRequest.from_json(json.dumps(document))


@pytest.mark.parametrize("value", ["0", "many", "4097", "-2", "1.5"])
def test_run_matrix_refuses_a_thread_count_in_one_line(value, capsys):
    assert main(["run-matrix", "--threads", value]) == 2
    assert "--threads: must be a whole number of threads from 1 to 4096" in capsys.readouterr().err


def test_without_threads_a_cell_takes_the_cpus_it_may_use_capped_by_its_quota(monkeypatch):
    monkeypatch.setattr(threads, "cpu_affinity", lambda: 16)
    monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda: None)
    assert threads.resolve(None) == 16 and threads.resolve(3) == 3
    monkeypatch.setattr(threads, "cgroup_cpu_quota", lambda: 2.5)  # a container's --cpus 2.5
    assert threads.usable_cpus() == 3
    run = Run(Cell("pytorch", "cnn", profile="smoke", data="synthetic"))
    assert run.threads == 3 and run.result.provenance.threads_requested == 3


def test_the_variables_read_at_import_name_both_pools():
    environment = threads.environment(5)
    assert {environment[name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                                           "TF_NUM_INTEROP_THREADS", "MXNET_CPU_WORKER_NTHREADS")} == {"5"}


def test_what_a_framework_reports_back_is_recorded_and_a_difference_noted():
    run = Run(Cell("pytorch", "cnn", profile="smoke", data="synthetic"), threads=4)
    run.record_threads(4, 4, "the switches")
    provenance = run.result.provenance
    assert (provenance.threads_intra_op, provenance.threads_inter_op, provenance.threads_note) == (4, 4, None)
    assert provenance.extras["threads"] == "the switches"
    run.record_threads(4, 8, "the switches", note="the inter-op pool had started")
    assert provenance.threads_note == "inter-op 8 reported; the inter-op pool had started"
    run.record_threads(None, None, "none", note=threads.JAX_THREADS)
    assert provenance.threads_note.startswith("cannot obey: JAX has no switch")


# --- the report flags it ------------------------------------------------------------------------------

def test_the_report_flags_a_row_whose_framework_did_not_take_the_threads(tmp_path):
    write(tmp_path, [training("pytorch", 2000, threads_requested=4, threads_intra_op=4, threads_inter_op=4),
                     training("jax", 1800, threads_requested=4, threads_note=threads.JAX_THREADS),
                     training("tensorflow", 1500, threads_requested=4, threads_intra_op=4, threads_inter_op=2,
                              threads_note="inter-op 2 reported")])
    summary = summary_of(tmp_path)
    assert not [flag for flag in only(summary, framework="pytorch")["flags"] if flag.startswith("threads")]
    assert only(summary, framework="jax")["flags"] == [f"threads: 4 asked: {threads.JAX_THREADS}"]
    assert only(summary, framework="tensorflow")["flags"] == ["threads: 4 asked: inter-op 2 reported"]
    assert only(summary, framework="tensorflow")["details"]["threads asked / reported"] == \
        "4 asked; intra-op 4, inter-op 2"
    markdown, html = (path.read_text() for path in render(tmp_path))
    for page in (markdown, html):
        assert "threads: 4 asked: inter-op 2 reported" in page and "threads: 4 asked: cannot obey: JAX" in page


# --- the real frameworks ----------------------------------------------------------------------------

def test_pytorch_and_onnxruntime_report_the_threads_run_matrix_asked_for(tmp_path):
    """Real cells on the local backend: each framework reports back, through its own getters
    (torch.get_num_threads / get_num_interop_threads, the session's SessionOptions), the --threads the
    run asked for, which is not the machine's default; run.json records the request."""
    asked = 3
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks",
               "pytorch,onnxruntime", "--variants", "cpu", "--workloads", "resnet50", "--profile", "smoke",
               "--data", "synthetic", "--modes", "default", "--threads", str(asked), "--no-parity", "--results-dir", str(tmp_path / "run"),
               "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = {result.cell.framework: result for result in
               (Result.read(path) for path in (tmp_path / "run" / "cells").glob("*.json"))}
    assert sorted(results) == ["onnxruntime", "pytorch"]
    for framework, result in results.items():
        provenance = result.provenance
        assert result.status == "ok", (framework, result.reason)
        assert (provenance.threads_requested, provenance.threads_intra_op, provenance.threads_inter_op,
                provenance.threads_note) == (asked, asked, asked, None), framework
        assert provenance.environment["OMP_NUM_THREADS"] == str(asked)
        assert provenance.extras["sync"].startswith("nothing: ")  # both CPU paths return finished
    assert "torch.set_num_threads" in results["pytorch"].provenance.extras["threads"]
    assert "SessionOptions.intra_op_num_threads" in results["onnxruntime"].provenance.extras["threads"]
    [invocation] = json.loads((tmp_path / "run" / "run.json").read_text())["invocations"]
    assert invocation["threads"] == asked
    assert f"threads: {asked} asked" not in (tmp_path / "run" / "report.md").read_text()  # no row flagged
