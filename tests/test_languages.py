"""Frameworks in other languages: the language-neutral cell command, the R row (r-keras: R through
reticulate on keras-tf's engine) and the Julia row (knet: defined, not run on a host without Julia).

Everything here is light except the last two tests, which run the r-keras row for real on the local
backend (R from Debian, keras-tf's cached environment): skipped without Rscript, failed instead
where CI requires every engine (ROSETTA_REQUIRE_DOCKER=1, as the Docker tests)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestrator import frameworks, images
from orchestrator.images import dockerfile as dockerfiles
from orchestrator.backends.local import LocalBackend
from orchestrator.errors import UserError
from orchestrator.report import render
from orchestrator.report.languages import overhead_rows, time_added
from orchestrator.results import cell_path
from workloads.__main__ import main
from workloads.common import foreign, hyperparams
from workloads.common.harness import Unsupported
from workloads.common.result import EXIT_UNSUPPORTED, Cell, Metrics, Provenance, Result
from support.records import measured

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = frameworks.discover()
# Julia 1.8.5's standard libraries: they ship with Julia, so a manifest gives them no source tree hash.
JULIA_STDLIBS = {
    "ArgTools", "Artifacts", "Base64", "CompilerSupportLibraries_jll", "Dates", "Downloads", "FileWatching",
    "InteractiveUtils", "LazyArtifacts", "LibCURL", "LibCURL_jll", "LibGit2", "LibSSH2_jll", "Libdl",
    "LinearAlgebra", "Logging", "Markdown", "MbedTLS_jll", "Mmap", "MozillaCACerts_jll", "NetworkOptions",
    "OpenBLAS_jll", "OpenLibm_jll", "Pkg", "Printf", "REPL", "Random", "SHA", "Serialization", "Sockets",
    "SparseArrays", "Statistics", "TOML", "Tar", "Test", "UUIDs", "Unicode", "Zlib_jll", "libblastrampoline_jll",
    "nghttp2_jll", "p7zip_jll"}


# --- the contract: a framework's metadata names its cell command ------------------------------------

def test_python_is_the_default_language_and_its_command_is_unchanged():
    pytorch = REGISTRY["pytorch"]
    assert pytorch.language == frameworks.PYTHON and pytorch.language.uses_python_environment
    assert pytorch.language.command_line(python="/venv/bin/python", workloads="/src/workloads") == \
        ["/venv/bin/python", "-m", "workloads"]
    assert 'ENTRYPOINT ["python", "-m", "workloads"]\n' in dockerfiles.render(pytorch)


def test_the_r_row_names_rscript_and_the_python_reticulate_embeds():
    r_keras = REGISTRY["r-keras"]
    assert r_keras.language.name == "R" and r_keras.language.program == "Rscript"
    assert r_keras.workloads == ("cnn", "resnet50", "gru")  # workloads/<workload>/r_keras.R
    assert r_keras.language.command_line(python="/venv/bin/python", workloads="/src/workloads") == \
        ["Rscript", "--vanilla", "/src/workloads/cell.R", "--python", "/venv/bin/python"]


def write_metadata(folder: Path, language: str) -> Path:
    folder.mkdir()
    (folder / "requirements-cpu.txt").write_text("somefw==1.0\n")
    (folder / "metadata.toml").write_text('[variants.cpu]\ndevice = "cpu"\n\n[language]\n' + language)
    return folder


@pytest.mark.parametrize("language, expected", [
    ('name = "R"\nsuffix = "R"\n', "[language] needs command"),
    ('name = "R"\nsuffix = "R"\ncommand = "Rscript x.R"\n', "[language] needs command"),
    ('suffix = "R"\ncommand = ["Rscript"]\n', "[language] needs name"),
    ('name = "R"\nsuffix = "R"\ncommand = ["Rscript"]\ncomand = ["x"]\n', "[language] has unknown keys comand"),
])
def test_a_wrong_language_table_is_refused_with_the_fix(tmp_path, language, expected):
    with pytest.raises(UserError, match=re.escape(expected)) as error:
        frameworks.load_framework(write_metadata(tmp_path / "somefw", language))
    assert "\n" not in str(error.value)


# --- the local backend ------------------------------------------------------------------------------

def test_a_missing_language_is_an_unsupported_cell_with_the_install_line(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda program, *args, **kwargs: None)
    backend = LocalBackend(REGISTRY, cache_dir=tmp_path, log=lambda line: None)
    for name, says in (("knet", "Julia is not installed here: no `julia` on PATH"),
                       ("r-keras", "apt-get install -y r-base-core r-cran-reticulate")):
        cell = Cell(framework=name, workload="resnet50")
        reason = backend.unsupported_reason(cell, REGISTRY[name].variants["cpu"])
        assert reason.startswith("defined, not run here: ") and says in reason, reason


def test_the_r_row_runs_in_keras_tfs_environment(tmp_path):
    backend = LocalBackend(REGISTRY, cache_dir=tmp_path, log=lambda line: None)
    r_keras = backend.environment_dir(REGISTRY["r-keras"].variants["cpu"], "r-keras")
    keras_tf = backend.environment_dir(REGISTRY["keras-tf"].variants["cpu"], "keras-tf")
    assert r_keras == keras_tf and r_keras.name.startswith("keras-tf-cpu-")  # one environment, not two


# --- images -----------------------------------------------------------------------------------------

def test_the_r_image_installs_r_and_runs_cells_with_rscript():
    r_keras = REGISTRY["r-keras"]
    text = dockerfiles.render(r_keras)
    assert 'ENTRYPOINT ["Rscript", "--vanilla", "/opt/rosetta/workloads/cell.R", "--python", "python"]\n' in text
    assert "r-base-core r-cran-reticulate" in text and "    KERAS_BACKEND=tensorflow \\\n" in text
    files = images.context_files(r_keras, r_keras.variants["cpu"], images.BuildOptions())
    assert {"workloads/cell.R", "workloads/runtime/r_keras.R", "workloads/cnn/r_keras.R", "workloads/gru/r_keras.R",
            "workloads/resnet50/r_keras.R", "workloads/runtime/keras/__init__.py", "workloads/common/foreign.py",
            "workloads/__main__.py"} <= set(files)
    assert not any(name.endswith(".jl") for name in files)
    assert files["build/requirements.txt"].read_bytes() == (ROOT / "images/keras-tf/requirements-cpu.txt").read_bytes()
    assert images.pinned_version(r_keras, r_keras.variants["cpu"]) == \
        images.pinned_version(REGISTRY["keras-tf"], REGISTRY["keras-tf"].variants["cpu"])


def test_the_julia_image_context_holds_its_workload_and_project_and_no_python():
    knet = REGISTRY["knet"]
    for variant in knet.variants.values():
        files = images.context_files(knet, variant, images.BuildOptions())
        assert {"Dockerfile", "build/Project.toml", "build/Manifest.toml", "workloads/cell.jl",
                "workloads/resnet50/knet.jl"} <= set(files)
        assert not any(name.startswith("workloads/") and name.endswith(".py") for name in files)
        text = files["Dockerfile"].decode()
        assert "ARG BASE_IMAGE=julia:" in text and "COPY build/Project.toml build/Manifest.toml /opt/rosetta/julia/" in text
        assert 'ENTRYPOINT ["julia", "--project=/opt/rosetta/julia", "--startup-file=no", ' \
               '"/opt/rosetta/workloads/cell.jl"]' in text
    assert images.image_tag(knet, knet.variants["cpu"]) == "rosetta-knet:cpu-1.4.10"


def test_only_the_julia_cuda_image_gets_its_cuda_release_to_fetch_at_build_time():
    knet, pytorch, options = REGISTRY["knet"], REGISTRY["pytorch"], images.BuildOptions()
    dockerfile = images.context_files(knet, knet.variants["cuda"], options)["Dockerfile"]
    assert images.build_arguments(knet.variants["cuda"], options, dockerfile) == {
        "BASE_IMAGE": knet.variants["cuda"].base_image, "VARIANT_CUDA": knet.variants["cuda"].cuda}
    assert images.build_arguments(knet.variants["cpu"], options, dockerfile)["VARIANT_CUDA"] == ""
    variant = pytorch.variants["cpu"]
    python_dockerfile = images.context_files(pytorch, variant, options)["Dockerfile"]
    assert set(images.build_arguments(variant, options, python_dockerfile)) == {"BASE_IMAGE"}
    assert "# build argument VARIANT_CUDA=11.7" in images.dry_run(knet, knet.variants["cuda"], options)


def test_the_julia_project_pins_every_package_it_names():
    project = tomllib.loads((ROOT / "images/knet/Project.toml").read_text())
    compat = project["compat"]
    for package in set(project["deps"]) - JULIA_STDLIBS:
        assert re.fullmatch(r"=\d+\.\d+\.\d+", compat.get(package, "")), (package, compat.get(package))
    assert re.fullmatch(r"=\d+\.\d+\.\d+", compat["julia"])
    assert knet_version_in_base_image() == compat["julia"].lstrip("=")


def julia_manifest() -> dict[str, dict]:
    manifest = tomllib.loads((ROOT / "images/knet/Manifest.toml").read_text())
    assert manifest["manifest_format"] == "2.0"
    for name, versions in manifest["deps"].items():
        assert len(versions) == 1, f"{name}: one version per package in an environment"
    return {"julia_version": manifest["julia_version"]} | {name: versions[0] for name, versions in manifest["deps"].items()}


def test_the_julia_manifest_pins_the_whole_closure_of_the_project_and_nothing_else():
    """Pkg.instantiate() installs exactly what the manifest lists: every package the project reaches must
    be there with its version and source tree hash (a standard library with neither), and the project's
    exact pins must be the manifest's versions; an entry nothing reaches would be a leftover."""
    project = tomllib.loads((ROOT / "images/knet/Project.toml").read_text())
    manifest = julia_manifest()
    assert manifest.pop("julia_version") == project["compat"]["julia"].lstrip("=") == knet_version_in_base_image()
    reached, waiting = set(), list(project["deps"])
    while waiting:
        name = waiting.pop()
        assert name in manifest, f"{name} is needed but not in Manifest.toml"
        if name not in reached:
            reached.add(name)
            waiting.extend(manifest[name].get("deps", []))
    assert reached == set(manifest), f"in Manifest.toml but needed by nothing: {sorted(set(manifest) - reached)}"
    for name, uuid in project["deps"].items():
        assert manifest[name]["uuid"] == uuid, name
    for name, entry in manifest.items():
        assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", entry["uuid"]), name
        if name in JULIA_STDLIBS:
            assert "git-tree-sha1" not in entry, name
        else:
            assert re.fullmatch(r"[0-9a-f]{40}", entry.get("git-tree-sha1", "")), f"{name}: no source tree hash"
            assert re.fullmatch(r"\d+\.\d+\.\d+(\+\d+)?", entry.get("version", "")), f"{name}: no version"
    for name, pin in project["compat"].items():
        if name != "julia":
            assert manifest[name]["version"] == pin.lstrip("="), name
    uuids = [entry["uuid"] for entry in manifest.values()]
    assert len(uuids) == len(set(uuids))


def test_the_julia_manifest_is_part_of_the_pins_the_image_lock_records():
    variant = REGISTRY["knet"].variants["cpu"]
    folder = ROOT / "images/knet"
    expected = hashlib.sha256((folder / "Project.toml").read_bytes() + (folder / "Manifest.toml").read_bytes())
    assert images.requirements_hash(REGISTRY["knet"], variant) == expected.hexdigest()


def knet_version_in_base_image() -> str:
    bases = {variant.base_image for variant in REGISTRY["knet"].variants.values()}
    assert len(bases) == 1
    return re.fullmatch(r"julia:(\d+\.\d+\.\d+)-\w+", bases.pop()).group(1)


# --- the Julia workload follows the contract ----------------------------------------------------------

def test_the_knet_workload_has_the_sections_of_every_row():
    text = (ROOT / "workloads/resnet50/knet.jl").read_text()
    sections = [text.index(f"# --- {name}") for name in ("model", "canonical weights", "run", "parity")]
    assert sections == sorted(sections)
    assert "const MATCHED = [" in text and "function run(run)" in text and "function parity(run, folder)" in text
    entry = (ROOT / "workloads/cell.jl").read_text()
    for fact in ("CELL_DOCUMENT_VERSION", "SCHEMA_VERSION", "EXIT_UNSUPPORTED"):
        assert fact.split(" = ")[0] in entry
    from workloads.common.cell import CELL_DOCUMENT_VERSION
    from workloads.common.result import SCHEMA_VERSION
    assert f"const CELL_DOCUMENT_VERSION = {CELL_DOCUMENT_VERSION}" in entry
    assert f"const SCHEMA_VERSION = {SCHEMA_VERSION}" in entry


def julia_syntax_errors(source: bytes) -> list[str]:
    """Where tree-sitter's Julia grammar finds no valid Julia: the syntax check a host without Julia can do."""
    import tree_sitter
    import tree_sitter_julia
    tree = tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language())).parse(source)
    found, waiting = [], [tree.root_node]
    while waiting:
        node = waiting.pop()
        if node.type == "ERROR" or node.is_missing:
            found.append(f"line {node.start_point[0] + 1}: {node.text[:60]!r}")
        waiting.extend(node.children)
    return found


def test_the_julia_files_parse_and_load_only_what_the_project_pins():
    assert julia_syntax_errors(b"function f(x)\n    x +\nend\nf(1,,2)\n")  # the check can fail
    project = tomllib.loads((ROOT / "images/knet/Project.toml").read_text())
    files = sorted((ROOT / "workloads").rglob("*.jl"))
    assert {path.name for path in files} == {"cell.jl", "knet.jl"}
    for path in files:
        source = path.read_bytes()
        assert julia_syntax_errors(source) == [], path
        for package in re.findall(r"^(?:using|import) (\w+)", source.decode(), re.M):
            assert package in project["deps"], f"{path.name} loads {package}, which Project.toml does not name"
    knet = REGISTRY["knet"]
    dockerfile = images.context_files(knet, knet.variants["cuda"], images.BuildOptions())["Dockerfile"].decode()
    snippets = re.findall(r"julia [^']*-e '([^']*)'", dockerfile.replace("\\\n", "\n"))
    assert len(snippets) == 2  # instantiate and precompile; the CUDA variant's artifacts
    for snippet in snippets:
        assert julia_syntax_errors(snippet.encode()) == [], snippet


def real_julia() -> list[str]:
    """ROSETTA_JULIA: a Julia command line with JSON.jl on its load path, e.g. "julia" or
    "/opt/julia/bin/julia --compile=min"; none here (no Julia installs on this host), so skipped."""
    command = shlex.split(os.environ.get("ROSETTA_JULIA", ""))
    if not command:
        pytest.skip("no ROSETTA_JULIA: a Julia with JSON.jl is needed to run workloads/cell.jl")
    loads = subprocess.run([*command, "--startup-file=no", "-e", "using JSON"], capture_output=True, text=True)
    assert loads.returncode == 0, f"ROSETTA_JULIA cannot load JSON.jl: {loads.stderr[-500:]}"
    return command


def test_the_julia_cell_contract_holds_under_a_real_julia(tmp_path):
    """workloads/cell.jl run for real on a stand-in workload (tests/support/julia_stub_workload.jl): the results
    pass the result schema and the exit codes are the contract's. Knet itself is not involved."""
    import jsonschema
    from workloads.common.cell import CELL_DOCUMENT_VERSION

    julia = real_julia()
    (tmp_path / "resnet50").mkdir()
    shutil.copy(ROOT / "workloads/cell.jl", tmp_path / "cell.jl")
    shutil.copy(ROOT / "tests/support/julia_stub_workload.jl", tmp_path / "resnet50/stand_in.jl")
    schema = json.loads((ROOT / "schema/result.schema.json").read_text())
    cell = {"framework": "stand-in", "workload": "resnet50", "variant": "cpu", "precision": "fp32",
            "profile": "smoke", "data": "synthetic", "repeat": 0, "init": "canonical", "options": {}}

    def run_cell(name, environment=None, **changes):
        document = {"version": CELL_DOCUMENT_VERSION, "cell": cell, "device": "cpu", "data_dir": str(tmp_path),
                    "out": str(tmp_path / f"{name}.json"), "parity": None, "export_onnx": None, "onnx_model": None}
        document.update(changes)
        (tmp_path / f"{name}.cell").write_text(json.dumps(document))
        done = subprocess.run([*julia, "--startup-file=no", str(tmp_path / "cell.jl"), "--cell", str(tmp_path / f"{name}.cell")],
                              capture_output=True, text=True, timeout=600, env={**os.environ, **(environment or {})})
        out = Path(document["out"])
        result = json.loads(out.read_text()) if out.is_file() else None
        if result is not None:
            jsonschema.validate(result, schema)
        return done, result

    done, result = run_cell("ok")
    assert done.returncode == 0, done.stderr
    assert result["status"] == "ok" and result["cell"] == cell
    assert len(result["samples"]["batch_times_s"]) == 3 and result["metrics"]["images_per_s"] > 0
    assert {"framework_import", "data_load", "model_build", "warmup", "inference"} <= set(result["phases"])
    assert set(result["phase_spans"]) == set(result["phases"]) - {"framework_import"}
    assert result["provenance"]["extras"]["language"] == "Julia"
    done, result = run_cell("fp16", cell={**cell, "precision": "fp16"})
    assert (done.returncode, result["status"], result["reason"]) == (EXIT_UNSUPPORTED, "unsupported", "the stand-in runs fp32 only")
    done, result = run_cell("diverged", {"STAND_IN_DIVERGES": "1"})
    assert (done.returncode, result["status"]) == (1, "failed") and result["reason"].startswith("diverged:")
    assert result["metrics"]["images_per_s"] > 0  # the figures are kept, never ranked
    done, result = run_cell("parity", parity=str(tmp_path))
    assert done.returncode == 0 and result["outputs"] == {"features": [[1.0, 2.0], [3.0, 4.0]]}
    done, result = run_cell("newer", version=CELL_DOCUMENT_VERSION + 1)
    assert done.returncode == 2 and result is None and len(done.stderr.strip().splitlines()) == 1
    (tmp_path / "broken.cell").write_text("{broken")
    done = subprocess.run([*julia, "--startup-file=no", str(tmp_path / "cell.jl"), "--cell", str(tmp_path / "broken.cell")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def julia_dict(text: str, name: str) -> dict:
    body = re.search(rf"const {name} = Dict{{String,Any}}\((.*?)\)\n", text, re.S).group(1)
    pairs = re.findall(r'"(\w+)" => (\[[\d, ]+\]|[\d_]+)', body)
    return {key: json.loads(value) if value.startswith("[") else int(value.replace("_", "")) for key, value in pairs}


@pytest.mark.parametrize("profile", hyperparams.PROFILES)
def test_the_knet_settings_are_the_declared_ones(profile):
    """Julia cannot import workloads/resnet50/__init__.py: its copy must stay equal to it."""
    text = (ROOT / "workloads/resnet50/knet.jl").read_text()
    settings = julia_dict(text, "SETTINGS")
    if profile == "smoke":
        settings.update(julia_dict(text, "SMOKE"))
    declared = hyperparams.settings("resnet50", profile)
    assert settings == {key: list(value) if isinstance(value, tuple) else value
                        for key, value in vars(declared).items()}
    assert f"const SEED = {hyperparams.SEED}" in text


# --- the bridge: a foreign workload through the Python harness --------------------------------------------

def test_an_unsupported_returned_across_a_bridge_is_raised_again():
    assert foreign.raise_returned(3) == 3
    with pytest.raises(Unsupported, match="fp16 needs a CUDA GPU"):
        foreign.ForeignWorkload(run=lambda run: Unsupported("fp16 needs a CUDA GPU"), parity=None).run(None)


def test_a_foreign_workload_keeps_the_exit_codes_and_the_result(tmp_path):
    """What workloads/cell.R does, without R: main() with a loader, an Unsupported handed back as a value."""
    out = tmp_path / "result.json"
    workload = foreign.ForeignWorkload(run=lambda run: Unsupported("no GPU here"), parity=None, matched=["a", "b"])
    code = main(["cnn", "--framework", "r-keras", "--profile", "smoke", "--data", "synthetic", "--out", str(out)],
                load_workload=lambda cell: workload)
    result = Result.read(out)
    assert code == EXIT_UNSUPPORTED and (result.status, result.reason) == ("unsupported", "no GPU here")
    assert result.provenance.extras["matched"] == "a | b"


# --- the report: what R adds against its engine ---------------------------------------------------------

def timed(framework: str, workload: str, figure: float) -> Result:
    metrics = (Metrics(seconds_per_1000_images=1000 / figure, images_per_s=figure) if workload == "resnet50"
               else Metrics(steady_samples_per_s=figure, train_time_s=10.0, test_accuracy=0.5))
    metrics.parameter_count = hyperparams.settings(workload, "full").parameter_count  # the report ranks only such rows
    return measured(Result(cell=Cell(framework=framework, workload=workload, profile="smoke", data="synthetic"),
                  status="ok", metrics=metrics,
                  provenance=Provenance(device="cpu", cpu_model="EPYC", framework_version="keras 3.15.1")))


def test_the_report_shows_what_the_language_adds_against_its_engine(tmp_path):
    for result in (timed("keras-tf", "cnn", 200.0), timed("r-keras", "cnn", 160.0),
                   timed("keras-tf", "resnet50", 20.0), timed("r-keras", "resnet50", 25.0),
                   timed("pytorch", "gru", 500.0), timed("r-keras", "gru", 400.0)):  # no keras-tf gru: no line
        result.write(cell_path(tmp_path, result.cell))
    markdown, html = render(tmp_path)
    text = markdown.read_text()
    start = text.index("## What a language adds")
    section = text[start:text.index("\n## ", start + 1)]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "r-keras" in line]
    assert len(lines) == 2
    assert "| r-keras | keras-tf |" in lines[0] and lines[0].endswith("| +25% |")  # 200/160 - 1: 25% more time per sample
    assert lines[1].endswith("| -20% |")  # 20/25 - 1: R's images took less time here
    assert 'id="language-overhead"' in html.read_text()


def test_no_language_line_without_both_rows(tmp_path):
    timed("r-keras", "cnn", 160.0).write(cell_path(tmp_path, Cell("r-keras", "cnn", profile="smoke", data="synthetic")))
    markdown, _ = render(tmp_path)
    assert "What a language adds" not in markdown.read_text()
    assert overhead_rows({}, {"r-keras": ("R", "keras-tf")}) == []
    assert time_added(100.0, 0.0, lower_is_better=False) != time_added(100.0, 0.0, lower_is_better=False)  # NaN


# --- the R row for real ---------------------------------------------------------------------------------

def require_rscript() -> None:
    if shutil.which("Rscript"):
        return
    reason = "no Rscript on PATH (apt-get install -y r-base-core r-cran-reticulate)"
    if os.environ.get("ROSETTA_REQUIRE_DOCKER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.mark.e2e
def test_the_r_row_runs_three_ok_smoke_cells_on_the_local_backend(tmp_path):
    require_rscript()
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--frameworks", "r-keras",
               "--variants", "cpu", "--modes", "graph", "--profile", "smoke", "--data", "synthetic", "--results-dir",
               str(tmp_path), "--timeout", "900", "--no-parity"]  # parity: the next test
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    results = {r.cell.workload: r for r in map(Result.read, (tmp_path / "cells").glob("*.json"))}
    assert completed.returncode == 0 and set(results) == {"cnn", "resnet50", "gru"}, completed.stderr[-3000:]
    for workload, result in results.items():
        assert result.status == "ok", (workload, result.reason, result.stderr_tail)
        assert result.metrics.parameter_count == hyperparams.settings(workload, "smoke").parameter_count
        extras = result.provenance.extras
        assert extras["language"] == "R" and extras["r_version"] and extras["reticulate_version"]
        assert " from R " in result.provenance.framework_version and "tensorflow" in result.provenance.framework_version
        assert extras["init"] == "canonical" and all(count == 1 for count in result.samples.traces.values())
    assert "/keras-tf-cpu-" in results["cnn"].provenance.interpreter  # keras-tf's environment, reused


@pytest.mark.e2e
def test_the_r_row_passes_parity_with_pytorch(tmp_path):
    """In its default mode (graph): the compiled mode is the same Keras on TensorFlow that
    test_e2e's every-framework and second-mode tests check in both modes, reached from Python."""
    require_rscript()
    command = [sys.executable, "-m", "orchestrator", "parity", "--backend", "local", "--frameworks", "pytorch,r-keras",
               "--modes", "default", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "parity"),
               "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    table = (tmp_path / "parity" / "parity.md").read_text() if (tmp_path / "parity" / "parity.md").exists() else ""
    assert completed.returncode == 0, (completed.stderr[-3000:], table)
    rows = [line for line in table.splitlines() if line.startswith("| r-keras [")]
    # 2 cnn + 1 resnet50 + 2 gru outputs, in its graph mode
    assert len(rows) == 5 and all(row.startswith("| r-keras [graph] |") and row.endswith("| pass |") for row in rows), table


def test_an_environment_of_no_framework_is_refused(tmp_path):
    folder = write_metadata(tmp_path / "somefw", 'name = "R"\nsuffix = "R"\ncommand = ["Rscript"]\n')
    text = (folder / "metadata.toml").read_text()
    (folder / "metadata.toml").write_text('environment = "keras-tff"\n' + text)
    with pytest.raises(UserError, match="environment = 'keras-tff' names no framework"):
        frameworks.discover(tmp_path)
