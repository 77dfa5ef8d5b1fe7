"""End to end with the real parts: the README's run-matrix on the local backend, a real PyTorch
environment built from images/pytorch/requirements-cpu.txt, the real workloads, a rendered report.

The environment is built on first use (about a minute here) and cached in ~/.cache/rosetta-bench
(or $ROSETTA_CACHE_DIR), so later runs start at once.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from workloads.common import hyperparams, modes
from workloads.common.result import Result, json_schema

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("e2e") / "run"
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "pytorch",
               "--profile", "smoke", "--data", "synthetic", "--results-dir", str(results), "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    print(completed.stderr)
    return results, completed


# the workloads each of PyTorch's modes runs (the compiled GRU: runtime.StepCompiledGRU)
MODE_WORKLOADS = {"eager": ["cnn", "gru", "resnet50"], "compiled": ["cnn", "gru", "resnet50"]}


def ok_cells(results: Path, mode: str) -> dict:
    records = {path.name: Result.read(path) for path in (results / "cells").glob("*.json")}
    ok = {r.cell.workload: r for r in records.values() if r.status == "ok" and r.cell.mode == mode}
    assert sorted(ok) == MODE_WORKLOADS[mode], {k: (r.status, r.reason) for k, r in records.items()}
    return ok


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_ok_cells_with_sane_metrics_in_each_mode(smoke_run, mode):
    results, completed = smoke_run
    assert completed.returncode == 0, completed.stderr
    ok = ok_cells(results, mode)
    for workload, result in ok.items():
        settings = hyperparams.settings(workload, "smoke")
        # the same model as the reference: parameter count pinned in hyperparams
        assert result.metrics.parameter_count == settings.parameter_count
        assert result.provenance.framework_version.startswith("2.13.0")
        assert result.provenance.data_source in ("synthetic", "random") and result.provenance.device == "cpu"
        assert result.provenance.git_revision and result.provenance.backend == "local"
        assert result.phases["framework_import"] > 0 and result.phases["model_build"] > 0
        assert result.wall_time_s >= sum(result.phases.values())
        # achieved FLOP/s: the headline rate times the FLOPs counted from the model (docs/MEASURED.md)
        rate = result.metrics.steady_samples_per_s if workload != "resnet50" else result.metrics.images_per_s
        assert result.metrics.flops_per_sample > 0
        assert result.metrics.achieved_flops_per_s == pytest.approx(rate * result.metrics.flops_per_sample)
        jsonschema.validate(json.loads((results / "cells" / f"{result.cell.key}.json").read_text()), json_schema())
    for workload in [name for name in ("cnn", "gru") if name in ok]:
        metrics, samples = ok[workload].metrics, ok[workload].samples
        assert samples.epoch_steps == [8] and 0 < samples.first_step_s < metrics.train_time_s
        assert 0.0 <= metrics.test_accuracy <= 1.0 and metrics.final_loss > 0
        assert metrics.samples_per_s > 0 and metrics.steady_samples_per_s > 0
    # eight SGD steps from the canonical start on synthetic data with a class signal beat 10-class
    # chance (0.10; two standard errors over 512 test images is 0.027 more)
    # (eager: inductor draws dropout's masks from its own generator, another trajectory from the same start)
    assert ok["cnn"].metrics.test_accuracy > 0.125 or mode == "compiled"
    resnet = ok["resnet50"]
    assert len(resnet.samples.batch_times_s) == 3 and resnet.phases["warmup"] > 0
    median = float(np.median(resnet.samples.batch_times_s))
    batch = hyperparams.settings("resnet50", "smoke").batch_size
    assert resnet.metrics.seconds_per_1000_images == pytest.approx(median / batch * 1000)


def test_the_compiled_rows_ran_torch_compile_with_their_caches_in_the_cells_own_folder(smoke_run):
    """docs/FAIRNESS.md, modes-compared: the compiled rows are torch.compile (inductor) on the CPU
    with the machine's C++ compiler, each graph compiled once, compilation in the first step (or the
    warm-up pass; inductor's own setup in a phase of its own before the model is built), caches in the
    cell's temporary folder, never the home folder; the GRU a Python loop over one compiled step (its
    grad and no-grad graphs each compiled once); and parity holds in the compiled mode too."""
    results, _ = smoke_run
    ok, eager = ok_cells(results, "compiled"), ok_cells(results, "eager")
    for workload, result in ok.items():
        extras = result.provenance.extras
        assert extras["mode"].startswith("compiled: torch.compile (inductor)"), extras
        assert extras["compiler"].startswith("inductor: C++/OpenMP kernels built by "), extras
        assert "caches in the cell's temporary folder" in extras["compiler"] and "/home" not in extras["compiler"]
        assert result.samples.traces and all(name.startswith("torch.compile graph ") and count == 1
                                             for name, count in result.samples.traces.items()), result.samples.traces
        assert "compiler" not in eager[workload].provenance.extras and eager[workload].samples.traces == {}
        # inductor's own setup, timed apart before the model is built (workloads/common/inductor.py, set_up)
        assert result.phases["compiler_setup"] > 0 and "compiler_setup" not in eager[workload].phases
    # compilation lands in the first step, timed apart
    assert ok["cnn"].samples.first_step_s > max(ok["cnn"].samples.batch_times_s[1:])
    assert ok["gru"].samples.first_step_s > max(ok["gru"].samples.batch_times_s[1:])
    assert ok["gru"].provenance.extras["gru_kernel"].startswith(
        "compiled-step: a Python loop over 150 time steps of one torch.compile'd (inductor) GRU step"), ok["gru"]
    assert eager["gru"].provenance.extras["gru_kernel"].startswith("fused-cpu: ")
    table = (results / "parity" / "parity.md").read_text()
    assert table.count("| pytorch [compiled] | cpu |") >= 3 and "FAIL" not in table, table


def test_cuda_variant_is_recorded_not_crashed(smoke_run):
    results, _ = smoke_run
    cuda = [Result.read(p) for p in (results / "cells").glob("pytorch__cu130__*.json")]
    assert len(cuda) == 3 * 2  # workloads x modes
    assert all(r.status in ("ok", "unsupported") for r in cuda)


def test_a_cpu_only_build_asked_for_a_gpu_says_so(smoke_run, tmp_path):
    """--device cuda on a CPU wheel (what a CUDA variant gets if a wheelhouse's CPU torch matches its
    pin) is "unsupported" naming the build, not a missing GPU and not a crash."""
    from orchestrator.backends.local import LocalBackend
    from orchestrator.frameworks import discover
    from workloads.common.result import EXIT_UNSUPPORTED

    python = LocalBackend(discover()).interpreter("pytorch", "cpu")  # built by smoke_run
    out = tmp_path / "gru.json"
    completed = subprocess.run([python, "-m", "workloads", "gru", "--framework", "pytorch", "--device", "cuda",
                                "--profile", "smoke", "--data", "synthetic", "--out", str(out)],
                               cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == EXIT_UNSUPPORTED, completed.stderr[-2000:]
    result = Result.read(out)
    assert result.status == "unsupported" and "is a CPU-only build" in result.reason


def test_report_rendered(smoke_run):
    results, _ = smoke_run
    markdown = (results / "report.md").read_text()
    html = (results / "report.html").read_text()
    for title in ("CNN", "ResNet-50", "GRU"):
        assert title in markdown
    assert markdown.count("| pytorch \\[eager") >= 3 and markdown.count("| pytorch \\[compiled\\] | cpu | fp32 |") == 2
    assert markdown.count("| pytorch \\[compiled, gru=compiled-step\\] | cpu | fp32 |") == 1
    assert "Published reference" in markdown and "K80" in markdown
    assert html.count('<figure class="chart">') == 3 and "<script" not in html
    # one result row per workload and mode (the GRU's rows name their kernel too), each with its
    # achieved FLOP/s and its % of the CPU's peak, which the run's probe measured
    rows = [line for line in markdown.splitlines() if line.startswith("| pytorch") and "| cpu | fp32 |" in line]
    assert len(rows) == 6, rows
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        flops = next(index for index, cell in enumerate(cells) if cell.endswith("FLOP/s"))
        assert re.fullmatch(r"[0-9.]+%", cells[flops + 1]), row  # "% of peak" beside it
    assert '<figure class="chart ceiling">' in html and "of peak</span>" in html


def test_the_cpu_peak_is_measured_once_and_recorded_with_how(smoke_run):
    """The roofline probe (orchestrator/cpu_peak.py) ran before the CPU cells, on their threads, and
    run.json says what it measured and how; bf16 says why it was not measured."""
    results, _ = smoke_run
    invocations = json.loads((results / "run.json").read_text())["invocations"]
    probe = invocations[0]["cpu_peak"]
    assert probe["flops_per_s"]["fp32"] > 0 and probe["threads"] >= 1
    assert "numpy" in probe["method"] and "fp32" in probe["method"] and probe["cpu_model"]
    assert probe["not_measured"]["bf16"].startswith("not measured: ")


def test_resume_skips_finished_cells(smoke_run):
    results, _ = smoke_run
    before = [Result.read(path) for path in (results / "cells").glob("*.json")]
    finished, refused = sum(r.status == "ok" for r in before), sum(r.status == "unsupported" for r in before)
    assert finished >= 6 and finished + refused == len(before)  # every CPU cell ok, the compiled GRU included
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "pytorch",
               "--profile", "smoke", "--data", "synthetic", "--results-dir", str(results), "--resume"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    # the ok cells are skipped; an unsupported one (a CUDA cell on a host without a GPU) is asked
    # again, and says why again
    assert f"{finished} cell(s) already ok, {refused} to run" in completed.stderr, completed.stderr
    assert f"0 ok, {refused} unsupported, 0 failed, {finished} already done" in completed.stderr, completed.stderr


def test_parity_of_the_reference_against_the_numpy_definition(tmp_path):
    """`orchestrator parity` for PyTorch, whose outputs every framework is compared with, checked
    against plain-numpy forward passes of the canonical models."""
    from support.numpy_reference import cnn_logits, gru_logits

    from workloads.common import canonical

    command = [sys.executable, "-m", "orchestrator", "parity", "--backend", "local", "--frameworks", "pytorch",
               "--modes", "eager", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "parity")]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert completed.returncode == 0, completed.stderr
    assert "| pytorch [eager] | cpu | 3,441,592 | logits |" in (tmp_path / "parity" / "parity.md").read_text()
    for workload, definition in (("cnn", cnn_logits), ("gru", gru_logits)):
        weights, batch = canonical.load(tmp_path / "data" / "parity" / workload)
        result = Result.read(next((tmp_path / "parity" / "cells").glob(f"pytorch__*__{workload}__*.json")))
        expected = definition(weights, batch["x"])
        got = np.asarray(result.outputs["logits"])
        assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < canonical.PARITY_TOLERANCE
        assert not np.allclose(result.outputs["logits_after_training"], got)  # the steps did train


def cpu_frameworks() -> list[str]:
    from orchestrator import frameworks

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    # Python rows only: the R row has its own tests (tests/test_languages.py), the Julia row runs in its image
    return [name for name, framework in frameworks.discover().items()
            if "cpu" in framework.variants and framework.variants["cpu"].python in (None, here)
            and framework.language == frameworks.PYTHON]


EVERY_FRAMEWORK_SHARDS = 2  # the longest run: two groups of their own, which the two CI workers can share


@pytest.mark.parametrize("shard", [pytest.param(shard, marks=pytest.mark.xdist_group(f"e2e-every-framework-{shard}"))
                                   for shard in range(EVERY_FRAMEWORK_SHARDS)])
def test_every_framework_runs_the_smoke_matrix_and_passes_parity(tmp_path, shard):
    """Every registered framework, each in its own environment and its default mode: an ok cell per
    workload it implements, and its outputs on the canonical weights within tolerance of PyTorch's
    (each framework's other modes: the next test); every other framework in each shard."""
    from orchestrator import frameworks

    names = cpu_frameworks()[shard::EVERY_FRAMEWORK_SHARDS]
    assert names, "no Python framework to run"
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--variants", "cpu",
               "--frameworks", ",".join(names), "--modes", "default", "--profile", "smoke", "--data", "synthetic",
               "--no-report", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "smoke"),
               "--timeout", "1200"]
    results = run_and_read(command, tmp_path / "smoke")
    known = frameworks.discover()
    assert len(results) == sum(len(known[name].workloads) for name in names)  # ONNX Runtime: resnet50 only
    assert {(r.cell.framework, r.cell.mode) for r in results} == {(name, modes.default(name)) for name in names}
    for result in results:
        assert result.metrics.parameter_count == hyperparams.settings(result.cell.workload, "smoke").parameter_count
    check_the_same_start_and_fast_paths(results)
    assert_parity_passed(tmp_path / "smoke", names)


# The cells a framework's other mode refuses: (framework, mode, workload) -> the start of the reason its
# cell records (Keras on torch's compiled GRU: workloads/runtime/keras/backends.py, TORCH_COMPILED_RNN).
REFUSED = {("keras-torch", "compiled", "gru"): "torch.compile does not compile this model in reasonable time"}


def second_modes() -> dict[str, list[str]]:
    """Each Python framework's modes other than its default, PyTorch's aside (its compiled rows are
    test_the_compiled_rows_ran_torch_compile_...'s, above)."""
    return {name: list(modes.declared(name))[1:] for name in cpu_frameworks()
            if len(modes.declared(name)) > 1 and name != "pytorch"}


SECOND_MODE_SHARDS = 2  # as EVERY_FRAMEWORK_SHARDS


@pytest.mark.parametrize("shard", [pytest.param(shard, marks=pytest.mark.xdist_group(f"e2e-second-modes-{shard}"))
                                   for shard in range(SECOND_MODE_SHARDS)])
def test_every_frameworks_other_modes_run_the_smoke_matrix_and_pass_parity(tmp_path, shard):
    """docs/FAIRNESS.md, modes-compared: each framework's modes beyond its default (XLA for
    TensorFlow and Keras on TensorFlow, torch.compile for Keras on torch, paddle.jit.to_static for
    Paddle, MXNet's and MindSpore's eager) run here on the CPU, traced once, and pass parity (a
    refused cell, REFUSED, says why); every other framework in each shard."""
    chosen = dict(list(second_modes().items())[shard::SECOND_MODE_SHARDS])
    assert chosen, "no Python framework declares a second mode"
    tables = "".join(f'[frameworks.{name}]\nvariants = ["cpu"]\nmodes = {json.dumps(more)}\n'
                     for name, more in chosen.items())
    (tmp_path / "matrix.toml").write_text(f'[defaults]\nprofile = "smoke"\ndata = "synthetic"\n{tables}')
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--matrix",
               str(tmp_path / "matrix.toml"), "--no-report", "--data-dir", str(tmp_path / "data"),
               "--results-dir", str(tmp_path / "smoke"), "--timeout", "1200"]
    results = run_and_read(command, tmp_path / "smoke", refused=REFUSED)
    assert sorted({(r.cell.framework, r.cell.mode) for r in results}) == sorted(
        (name, mode) for name, more in chosen.items() for mode in more)
    check_the_same_start_and_fast_paths([r for r in results if r.status == "ok"])
    assert_parity_passed(tmp_path / "smoke", list(chosen))


def run_and_read(command: list[str], results_dir: Path, refused: dict = None) -> list[Result]:
    """Run a run-matrix command line and read its cells' results, every one of them ok but those in
    ``refused`` ((framework, mode, workload) -> the start of its reason), which are unsupported, saying so."""
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=5400)
    results = [Result.read(p) for p in (results_dir / "cells").glob("*.json")]
    refused = refused or {}

    def expected(r: Result) -> bool:
        reason = refused.get((r.cell.framework, r.cell.mode, r.cell.workload))
        return r.status == "ok" if reason is None else r.status == "unsupported" and r.reason.startswith(reason)

    not_ok = {r.cell.key: (r.status, r.reason, (r.stderr_tail or "")[-800:]) for r in results if not expected(r)}
    assert completed.returncode == 0 and results and not not_ok, (completed.stderr[-3000:], not_ok)
    return results


def assert_parity_passed(results_dir, names):
    """run-matrix's own parity check (its cells and parity.md in the run's parity/ folder): every
    framework's outputs on the canonical weights within tolerance of PyTorch's."""
    table_path = results_dir / "parity" / "parity.md"
    table = table_path.read_text() if table_path.exists() else ""
    assert table and "FAIL" not in table, table
    for name in names:
        assert f"| {name} [" in table, (name, table)  # "| pytorch [eager] |": the row names its mode
    # a compiled parity cell runs the predict step before and after its training steps: each graph
    # is still compiled once (Keras on torch once compiled its predict step again after training)
    for path in (results_dir / "parity" / "cells").glob("*.json"):
        result = Result.read(path)
        assert all(count == 1 for count in result.samples.traces.values()), (result.cell.key, result.samples.traces)


def check_the_same_start_and_fast_paths(results):
    """docs/FAIRNESS.md, same-start: every framework starts from the canonical weights, so on the
    same first batch (the same seed, the same data) the GRU's first loss (it has no dropout) is the
    same number everywhere. Every compiled step traced once (one shape each in a smoke run), and
    every training row says which optimizer update and which GRU kernel ran."""
    first_losses = {r.cell.framework: r.samples.first_loss for r in results if r.cell.workload == "gru"}
    if first_losses:
        reference = first_losses.get("pytorch", next(iter(first_losses.values())))
        assert all(abs(loss - reference) <= 1e-3 * abs(reference) for loss in first_losses.values()), first_losses
    for result in results:
        assert result.provenance.extras.get("init") == "canonical", result.cell.key
        assert all(count == 1 for count in result.samples.traces.values()), (result.cell.key, result.samples.traces)
        if result.cell.workload != "resnet50":
            assert result.provenance.extras.get("optimizer"), result.cell.key
            assert len(result.samples.batch_times_s) == sum(result.samples.epoch_steps)
        if result.cell.workload == "gru":
            kernel = result.provenance.extras.get("gru_kernel", "")
            assert kernel.split(":")[0] in ("cudnn", "fused-cpu", "scan", "python-loop"), (result.cell.key, kernel)


def frameworks_on_other_pythons() -> tuple[list[str], list[str]]:
    """(frameworks whose CPU variant needs another Python that this host has, those it lacks)."""
    from orchestrator import frameworks
    from orchestrator.backends.local import find_python

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    others = [(name, framework.variants["cpu"].python) for name, framework in frameworks.discover().items()
              if "cpu" in framework.variants and framework.variants["cpu"].python not in (None, here)]
    found = [(name, find_python(version)) for name, version in others]  # each runs the interpreter it finds
    return [name for name, python in found if python], [name for name, python in found if not python]


@pytest.mark.xdist_group("e2e-other-pythons")  # long, and needs nothing of this module's other tests
def test_frameworks_on_other_pythons_run_where_the_host_has_that_python(tmp_path):
    """CNTK and Keras 2.2 (Python 3.6) and Caffe2 (3.9), in environments the local backend builds
    from the host's other Pythons (pyenv's here): ok smoke cells and parity with PyTorch. CNTK also
    needs OpenMPI under its 1.10 names (images/cntk/openmpi-compat.sh; .ci/run provides them)."""
    import os

    present, missing = frameworks_on_other_pythons()
    if not present:
        pytest.skip(f"this host has none of the Pythons {', '.join(missing)} need")
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--variants", "cpu",
               "--frameworks", ",".join(present), "--profile", "smoke", "--data", "synthetic", "--no-report",
               "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "smoke"), "--timeout", "1200"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=5400)
    results = [Result.read(p) for p in (tmp_path / "smoke" / "cells").glob("*.json")]
    no_mpi = [r for r in results if r.status == "unsupported" and "OpenMPI 1.10" in (r.reason or "")]
    if no_mpi and not os.environ.get("CI"):
        pytest.skip(f"{no_mpi[0].reason[:160]}... (CI provides OpenMPI)")
    not_ok = {r.cell.key: (r.status, r.reason, (r.stderr_tail or "")[-800:]) for r in results if r.status != "ok"}
    assert completed.returncode == 0 and not not_ok and len(results) == 3 * len(present), \
        (completed.stderr[-3000:], not_ok)
    check_the_same_start_and_fast_paths(results)
    assert_parity_passed(tmp_path / "smoke", present)
