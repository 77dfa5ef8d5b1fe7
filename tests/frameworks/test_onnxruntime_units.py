"""ONNX Runtime's row: registration, the ONNX export's plumbing and cache, "not applicable" in the report,
and (marked e2e) the real thing: PyTorch's environment exports the model, ONNX Runtime's runs it.

ONNX Runtime is not installed on the host, so the unit tests exercise the host side with a fake
backend standing in for PyTorch's environment; the e2e test runs both real environments. The start
(--init) and the TF32 record are checked in the cached ONNX Runtime environment the local backend
built (skipped where there is none).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.framework_cells import framework_python

from orchestrator.backends.contract import Backend
from orchestrator import frameworks, images, matrix, onnx_export
from orchestrator.backends import CellJob, cell_request
from orchestrator.report import render
from orchestrator.results import cell_path
from workloads.common import canonical, hyperparams
from workloads.common.data.checksum import file_digest
from workloads.common.result import Cell, Result
from support.records import measured

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = frameworks.discover()
ORT = REGISTRY["onnxruntime"]


# --- registration -----------------------------------------------------------------------------------

def test_an_inference_engine_registers_resnet50_only_and_says_why_not_the_others():
    assert ORT.workloads == ("resnet50",)
    assert onnx_export.needs_export(ORT) and not onnx_export.needs_export(REGISTRY["pytorch"])
    reasons = ORT.not_applicable()
    assert set(reasons) == {"cnn", "gru"} and all("inference engine" in reason for reason in reasons.values())
    assert REGISTRY["pytorch"].not_applicable() == {}


def test_variants_pin_onnxruntime_and_pytorch_pins_its_exporter():
    assert images.image_tag(ORT, ORT.variants["cpu"]) == "rosetta-onnxruntime:cpu-1.32.0"
    assert images.image_tag(ORT, ORT.variants["cu130"]) == "rosetta-onnxruntime:cu130-1.31.1"  # onnxruntime-gpu
    for variant in ORT.variants.values():
        lines = [line for line in variant.requirements.read_text().splitlines() if line and not line.startswith("#")]
        assert lines and all("==" in line for line in lines), lines
    pytorch = REGISTRY["pytorch"].variants[REGISTRY["pytorch"].default_variant].requirements.read_text()
    assert "onnx==" in pytorch and "onnxscript==" in pytorch  # torch.onnx.export's default exporter needs both


def test_matrix_runs_resnet50_and_records_the_rest_as_not_applicable():
    parsed = matrix.parse('[defaults]\nprofile = "smoke"\n[frameworks.onnxruntime]\nvariants = ["cpu"]\n'
                          '[frameworks.pytorch]\nvariants = ["cpu"]\n', REGISTRY)
    assert {(c.framework, c.workload) for c in parsed.cells(REGISTRY)} == \
        {("onnxruntime", "resnet50"), ("pytorch", "cnn"), ("pytorch", "resnet50"), ("pytorch", "gru")}
    assert [(item["framework"], item["workload"], item["variants"]) for item in parsed.not_applicable(REGISTRY)] == \
        [("onnxruntime", "cnn", ["cpu"]), ("onnxruntime", "gru", ["cpu"])]
    narrowed = matrix.narrow(parsed, REGISTRY, workloads=["resnet50"])
    assert narrowed.not_applicable(REGISTRY) == []  # only what the run asked for


# --- the contract: the cell document and the entry point ---------------------------------------------

def test_export_and_model_folders_reach_the_workload():
    cell = Cell("pytorch", "resnet50")
    request = cell_request(cell, device="cpu", data_dir="/data", out="/results/result.json",
                           parity="onnx/.incoming-x/canonical", export_onnx="/export")
    assert (request.parity, request.export_onnx) == ("/data/onnx/.incoming-x/canonical", "/export")
    request = cell_request(Cell("onnxruntime", "resnet50"), device="cpu", data_dir="/data/", out="r.json",
                           onnx_model="onnx/resnet50-abc")
    assert request.onnx_model == "/data/onnx/resnet50-abc"
    assert cell_request(cell, device="cpu", data_dir="/data", out="r.json").onnx_model is None


def test_the_entry_point_exports_only_from_canonical_weights():
    from workloads.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["resnet50", "--framework", "pytorch", "--export-onnx", "/tmp/out"])
    args = parse_args(["resnet50", "--framework", "pytorch", "--parity", "p", "--export-onnx", "/tmp/out"])
    assert args.export_onnx == "/tmp/out"


def test_docker_mounts_the_export_folder_writable_and_nothing_else_changes(tmp_path):
    pytest.importorskip("docker")
    from orchestrator.backends.docker import DockerBackend
    from orchestrator.backends.docker_container import EXPORT_MOUNT

    class Engine:
        def info(self):
            return {}

    backend = DockerBackend({}, client=Engine(), image_for=str)
    job = CellJob(cell=Cell("pytorch", "resnet50"), device="cpu", work_dir=tmp_path / "w", log_path=tmp_path / "l",
                  data_dir=tmp_path / "data", parity="onnx/in/canonical", export_dir=tmp_path / "data" / "onnx" / "in")
    mounts = backend._container_options(job, tmp_path / "out")["mounts"]
    export = [m for m in mounts if m["Target"] == EXPORT_MOUNT]
    assert export and export[0]["Source"] == str(job.export_dir) and not export[0]["ReadOnly"]
    job.export_dir = None
    assert [m["Target"] for m in backend._container_options(job, tmp_path / "out")["mounts"]] == ["/data", "/results"]


# --- the export cache (a fake backend stands in for PyTorch's environment) -----------------------------

def test_weights_digest_names_the_weights():
    params = canonical.parameters("resnet50")
    assert onnx_export.weights_digest(params) == onnx_export.weights_digest(dict(reversed(list(params.items()))))
    changed = dict(params, **{"stem.bn.beta": params["stem.bn.beta"] + np.float32(1e-3)})
    assert onnx_export.weights_digest(changed) != onnx_export.weights_digest(params)


class ExportingBackend(Backend):
    """Runs PyTorch's export cell by writing what the real one writes, or fails it."""

    name = "fake"

    def __init__(self, fail: str | None = None, unsupported: set | None = None):
        self.jobs, self.fail, self.unsupported = [], fail, unsupported or set()

    def unsupported_reason(self, cell, variant):
        return "no GPU here" if (cell.framework, variant.name) in self.unsupported else None

    def run_cell(self, job: CellJob) -> Result:
        self.jobs.append(job)
        if self.fail:
            return Result(cell=job.cell, status="failed", reason=self.fail)
        assert (job.data_dir / job.parity / canonical.WEIGHTS_FILE).is_file()  # the canonical weights to export
        for name in onnx_export.MODEL_FILES:
            (job.export_dir / name).write_bytes(name.encode() * 100)
        files = {name: file_digest(job.export_dir / name, "sha256") for name in onnx_export.MODEL_FILES}
        (job.export_dir / "export.json").write_text(json.dumps({"opset": 20, "files": files}))
        result = measured(Result(cell=job.cell))
        result.provenance.interpreter = "/venvs/pytorch/bin/python"
        return result


def prepare(backend, tmp_path, cells=None):
    cells = cells or [Cell("onnxruntime", "resnet50", variant="cpu"), Cell("onnxruntime", "resnet50", variant="cu130"),
                      Cell("pytorch", "resnet50")]
    messages = []
    sources = onnx_export.prepare(cells, backend, REGISTRY, data_dir=tmp_path / "data", results_dir=tmp_path / "run",
                                  timeout=None, git_revision="abc", log=messages.append)
    return sources, messages


def test_exported_once_then_reused_and_recorded(tmp_path):
    backend = ExportingBackend()
    sources, _ = prepare(backend, tmp_path)
    assert len(backend.jobs) == 1
    job = backend.jobs[0]
    assert (job.cell.framework, job.cell.workload, job.cell.variant, job.device) == ("pytorch", "resnet50", "cpu", "cpu")
    folder = sources.folder(Cell("onnxruntime", "resnet50"))
    assert folder.startswith("onnx/resnet50-") and sources.problem(Cell("onnxruntime", "resnet50")) is None
    assert sources.folder(Cell("pytorch", "resnet50")) is None and sources.folder(Cell("onnxruntime", "cnn")) is None
    record = json.loads((tmp_path / "data" / folder / "export.json").read_text())
    assert (tmp_path / "data" / folder / "export.json").stat().st_mode & 0o777 == 0o644  # a container's user reads it
    assert record["canonical_weights_sha256"] == onnx_export.weights_digest(canonical.parameters("resnet50"))
    assert record["exported_by"] == "fake backend, /venvs/pytorch/bin/python" and record["opset"] == 20
    assert sorted(p.name for p in (tmp_path / "data" / folder).iterdir()) == ["export.json", "model.onnx",
                                                                             "model.onnx.data"]
    assert [p.name for p in (tmp_path / "data" / "onnx").iterdir()] == [Path(folder).name]  # nothing left over
    assert Result.read(tmp_path / "run" / "onnx-export.json").status == "ok"

    again, messages = prepare(backend, tmp_path)
    assert len(backend.jobs) == 1 and again.folder(Cell("onnxruntime", "resnet50")) == folder
    assert any("reusing" in message for message in messages)

    (tmp_path / "data" / folder / "model.onnx.data").write_bytes(b"truncated")  # no longer what export.json says
    prepare(backend, tmp_path)
    assert len(backend.jobs) == 2


def test_a_failed_export_fails_the_cells_with_one_line_naming_the_log(tmp_path):
    backend = ExportingBackend(fail="RuntimeError: torch.onnx.export needs the onnx package\nTraceback ...")
    sources, _ = prepare(backend, tmp_path)
    problem = sources.problem(Cell("onnxruntime", "resnet50"))
    assert problem.startswith("no ONNX model: exporting it in pytorch/cpu on the fake backend failed "
                              "(RuntimeError: torch.onnx.export needs the onnx package)")
    assert "\n" not in problem and "onnx-export.log" in problem
    assert sources.folder(Cell("onnxruntime", "resnet50")) is None
    assert not list((tmp_path / "data" / "onnx").iterdir())  # the half-made export is gone


def test_no_export_when_no_cell_needs_it(tmp_path):
    backend = ExportingBackend(unsupported={("onnxruntime", "cu130")})
    sources, _ = prepare(backend, tmp_path, [Cell("onnxruntime", "resnet50", variant="cu130"),
                                             Cell("pytorch", "resnet50"), Cell("pytorch", "cnn")])
    assert backend.jobs == [] and sources.folders == {} and sources.problems == {}
    broken = ExportingBackend(unsupported={("pytorch", "cpu")})
    sources, _ = prepare(broken, tmp_path, [Cell("onnxruntime", "resnet50")])
    assert broken.jobs == [] and "cannot export it (no GPU here)" in sources.problem(Cell("onnxruntime", "resnet50"))


# --- the report ---------------------------------------------------------------------------------------

def test_the_report_shows_workloads_a_framework_does_not_implement_as_not_applicable(tmp_path):
    result = measured(Result(cell=Cell("onnxruntime", "resnet50", profile="smoke", data="synthetic")))
    result.metrics.images_per_s, result.metrics.parameter_count = 150.0, 23_508_032
    result.write(cell_path(tmp_path, result.cell))
    parsed = matrix.parse('[frameworks.onnxruntime]\nvariants = ["cpu"]\n', REGISTRY)
    (tmp_path / "run.json").write_text(json.dumps({"invocations": [{"not_applicable": parsed.not_applicable(REGISTRY)}]}))
    markdown_path, html_path = render(tmp_path)
    markdown, html = markdown_path.read_text(), html_path.read_text()
    assert "## CNN" in markdown and "## GRU" in markdown and "No results for" not in markdown
    # one "Not run" list per reason, naming both workloads the engine does not implement
    assert markdown.count("not applicable: ONNX Runtime is an inference engine; this workload trains") == 1
    assert "(2 cells): cnn · onnxruntime (cpu); gru · onnxruntime (cpu)" in markdown
    assert markdown.count("No framework in this run implements this workload") == 2
    assert "| onnxruntime | cpu | fp32 | 1 | 150 |" in markdown
    assert html.count("not applicable: ONNX Runtime is an inference engine") == 1
    (tmp_path / "run.json").unlink()  # an older run without the record still renders
    assert "not applicable" not in render(tmp_path)[0].read_text()


# --- the real thing: PyTorch's environment exports, ONNX Runtime's runs it (local backend) --------------

@pytest.mark.e2e
def test_export_then_smoke_cell_then_parity_in_the_real_environments(tmp_path):
    data = tmp_path / "data"  # a fresh data dir: the export really runs
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "onnxruntime",
               "--variants", "cpu", "--profile", "smoke", "--data", "synthetic", "--data-dir", str(data),
               "--results-dir", str(tmp_path / "smoke"), "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert completed.returncode == 0, completed.stderr[-3000:]
    [result] = [Result.read(p) for p in (tmp_path / "smoke" / "cells").glob("*.json")]
    assert result.status == "ok" and result.cell.workload == "resnet50", (result.reason, result.stderr_tail)
    smoke = hyperparams.settings("resnet50", "smoke")
    assert result.metrics.parameter_count == 23_508_032 and len(result.samples.batch_times_s) == smoke.batches
    assert result.phases["model_build"] > 0 and result.phases["warmup"] > 0 and result.metrics.images_per_s > 0
    [folder] = [p for p in (data / "onnx").iterdir()]
    record = json.loads((folder / "export.json").read_text())
    assert set(record["files"]) == {"model.onnx", "model.onnx.data"} and record["opset"] == 20
    assert record["torch_version"].startswith("2.13.0") and record["parameter_count"] == 23_508_032
    assert record["input"]["shape"] == ["batch", 3, 224, 224]
    for name, digest in record["files"].items():
        assert file_digest(folder / name, "sha256") == digest
    extras = result.provenance.extras
    assert extras["onnx_model_sha256"] == record["files"]["model.onnx"]
    assert extras["onnx_canonical_weights_sha256"] == record["canonical_weights_sha256"]
    assert extras["providers"] == "CPUExecutionProvider" and result.provenance.device == "cpu"
    assert Result.read(tmp_path / "smoke" / "onnx-export.json").phases["export"] > 0
    assert "not applicable: ONNX Runtime is an inference engine" in (tmp_path / "smoke" / "report.md").read_text()

    command = [sys.executable, "-m", "orchestrator", "parity", "--backend", "local", "--frameworks",
               "pytorch,onnxruntime", "--workloads", "resnet50", "--modes", "default", "--data-dir", str(data),
               "--results-dir", str(tmp_path / "parity"), "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "ONNX model: reusing" in completed.stderr  # exported once
    comparisons = json.loads((tmp_path / "parity" / "parity.json").read_text())
    [ours] = [c for c in comparisons if c["framework"].split(" [")[0] == "onnxruntime"]  # "onnxruntime [graph]"
    assert ours["status"] == "pass" and ours["differences"]["features"][1] < canonical.PARITY_TOLERANCE


def test_the_export_folder_is_never_world_writable(tmp_path):
    """The folder the export cell writes is ours, mode 0700; a backend whose cells run as another
    user (Docker's, as root) is asked to hand it over, instead of opening it to everyone."""

    class HandingOver(ExportingBackend):
        def __init__(self):
            super().__init__()
            self.handed, self.modes = [], []

        def make_writable_by_cells(self, folder):
            self.handed.append(folder.resolve())

        def run_cell(self, job):
            self.modes.append(job.export_dir.stat().st_mode & 0o777)
            return super().run_cell(job)

    backend = HandingOver()
    sources, _ = prepare(backend, tmp_path)
    assert backend.modes == [0o700]
    assert backend.handed == [backend.jobs[0].export_dir]
    assert sources.folder(Cell("onnxruntime", "resnet50")) is not None


# --- the start and the records, in the ONNX Runtime environment (tests/support/framework_cells.py builds it once)

def test_init_canonical_is_what_the_exported_graph_holds_and_init_framework_is_refused(tmp_path):
    """ONNX Runtime has no initialisers: --init canonical is recorded (the weights are in the graph, exported
    from the canonical arrays) before anything else; --init framework is unsupported, not run as canonical.
    The TF32 record reads the CUDA provider's own options back ("n/a (CPU)" without it)."""
    script = """
import json
from workloads.common.harness import Run, Unsupported
from workloads.common.result import Cell
from workloads.resnet50 import onnxruntime as workload
from workloads.runtime import onnxruntime as runtime
found = {}
for init in ("canonical", "framework"):
    run = Run(Cell("onnxruntime", "resnet50", profile="smoke", data="synthetic", init=init), device="cpu")
    try:
        workload.run(run)
        found[init] = ["ran"]
    except Unsupported as error:
        found[init] = ["unsupported", str(error)]
    except RuntimeError as error:  # no exported model named: it gets that far only with the canonical start
        found[init] = ["no model", str(error)]
    found[init].append(run.result.provenance.extras.get("init"))

class Session:
    def __init__(self, options):
        self.options = options
    def get_provider_options(self):
        return self.options

found["tf32"] = [runtime.tf32_report(Session({runtime.CPU: {}})),
                 runtime.tf32_report(Session({runtime.CUDA: {"use_tf32": "0"}, runtime.CPU: {}}))]
print("RESULT " + json.dumps(found))
"""
    environment = {key: value for key, value in os.environ.items() if key != "ROSETTA_ONNX_MODEL"}
    completed = subprocess.run([framework_python("onnxruntime"), "-c", script], cwd=ROOT, capture_output=True,
                               text=True, timeout=600,
                               env={**environment, "PYTHONPATH": str(ROOT), "NVIDIA_TF32_OVERRIDE": "0"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    [line] = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    found = json.loads(line[len("RESULT "):])
    assert found["canonical"][0] == "no model" and "--onnx-model" in found["canonical"][1]
    assert found["canonical"][2] == "canonical"
    assert found["framework"][0] == "unsupported" and "no initialisers" in found["framework"][1]
    assert found["framework"][2] is None
    assert found["tf32"][0] == "n/a (CPU)"
    assert found["tf32"][1].startswith("use_tf32=0 ") and "NVIDIA_TF32_OVERRIDE=0" in found["tf32"][1]
