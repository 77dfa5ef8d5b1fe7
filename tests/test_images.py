"""Framework images: names, deterministic build contexts, and real build / push / pull / run."""
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator import frameworks, images
from orchestrator.images import dockerfile as dockerfiles, lock as image_lock
from orchestrator.__main__ import main
from orchestrator.errors import UserError
from workloads.common import modes
from workloads.common.result import Result

from conftest import BASE_IMAGE

pytestmark = pytest.mark.xdist_group("docker-engine")  # one worker builds, runs and removes the images

ROOT = Path(__file__).resolve().parent.parent
REQUIRE_DOCKER = os.environ.get("ROSETTA_REQUIRE_DOCKER") == "1"
REGISTRY = frameworks.discover()
PYTORCH = REGISTRY["pytorch"]


def options(**overrides):
    return images.BuildOptions(**overrides)


# --- names and contexts (no engine needed) ------------------------------------------------------

def test_tags_name_framework_variant_and_version():
    assert images.image_tag(PYTORCH, PYTORCH.variants["cpu"]) == "rosetta-pytorch:cpu-2.13.0"
    assert images.image_tag(PYTORCH, PYTORCH.variants["cu118"], "127.0.0.1:5000") == \
        "127.0.0.1:5000/rosetta-pytorch:cu118-2.7.1"  # the local label +cu118 cannot be in a tag


def test_every_variant_pins_its_framework_and_has_a_base():
    for framework in REGISTRY.values():
        for variant in framework.variants.values():
            assert images.pinned_version(framework, variant)
            assert images.base_image(variant, options())
            assert variant.device == "cpu" or variant.name != "cpu"


def test_context_is_deterministic_and_holds_only_what_the_image_needs(tmp_path):
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"torch")
    (wheelhouse / "pandas-2.0.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not needed")
    (wheelhouse / "torch-2.1.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"wrong version")
    chosen = options(wheelhouse=wheelhouse)
    files = images.context_files(PYTORCH, PYTORCH.variants["cpu"], chosen)
    first = images.build_context(files)
    assert first == images.build_context(images.context_files(PYTORCH, PYTORCH.variants["cpu"], chosen))
    with tarfile.open(fileobj=io.BytesIO(first)) as archive:
        members = archive.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    assert "build/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" in names
    assert not any("pandas" in n or "torch-2.1.0" in n for n in names)
    assert {"Dockerfile", "build/requirements.txt", "build/ca-bundle.crt", "workloads/__main__.py",
            "workloads/common/harness.py", "workloads/runtime/pytorch.py", "workloads/cnn/pytorch.py"} <= set(names)
    assert not any(n.startswith(("tests/", "orchestrator/", "results/")) or n.endswith(".md") for n in names)


def test_the_image_side_reads_each_frameworks_module_and_import_env_from_its_metadata(tmp_path):
    """metadata.toml's `module` and `import_env` reach the image side (workloads/common/naming.py) as
    workloads/frameworks.json: in a checkout, what `python -m orchestrator.frameworks` writes from
    every registration; in an image, its own framework's part, which the build context writes and
    `python -m workloads` reads there (by hand too), on an image's Python with no TOML parser."""
    assert (ROOT / "workloads" / "frameworks.json").read_text() == frameworks.image_side_json(REGISTRY), \
        "workloads/frameworks.json is stale: python -m orchestrator.frameworks > workloads/frameworks.json"
    from workloads.common import naming
    for name, framework in REGISTRY.items():
        assert (naming.module_name(name), naming.environment(name)) == (framework.workload_module, framework.import_env)
    assert naming.frameworks_of("keras") == ["keras-jax", "keras-tf", "keras-torch"]
    assert REGISTRY["keras-cntk"].import_env == {"KERAS_BACKEND": "cntk"} and REGISTRY["pytorch"].import_env == {}

    keras_tf = REGISTRY["keras-tf"]
    files = images.context_files(keras_tf, keras_tf.variant("cpu"), options())
    assert json.loads(files["workloads/frameworks.json"])["frameworks"] == \
        {"keras-tf": {"module": "keras", "import_env": {"KERAS_BACKEND": "tensorflow"}}}
    assert "workloads/frameworks.json" not in images.context_files(REGISTRY["knet"], REGISTRY["knet"].variant("cpu"),
                                                                   options())  # Julia's image has no Python side
    for name, content in files.items():  # the image's workloads folder, as its build context lays it out
        if name.startswith("workloads/"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(content if isinstance(content, bytes) else Path(content).read_bytes())
    script = ("from workloads.common import naming; import workloads.__main__ as main; "
              "print(naming.module_name('keras-tf'), naming.environment('keras-tf'), main.available_frameworks('cnn'))")
    completed = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert completed.stdout.split("\n")[0] == "keras {'KERAS_BACKEND': 'tensorflow'} ['keras-tf']", completed.stderr


@pytest.mark.parametrize("line, expected", [
    ('module = "../pytorch"', "module = '../pytorch' must name the workload files"),
    ("module = 3", "module = 3 must name the workload files"),
    ('import_env = { KERAS_BACKEND = 3 }', "import_env must be a table of VARIABLE"),
    ('import_env = { "keras backend" = "jax" }', "import_env must be a table of VARIABLE"),
])
def test_a_wrong_module_or_import_env_is_refused_with_the_fix(tmp_path, line, expected):
    folder = tmp_path / "somefw"
    folder.mkdir()
    (folder / "metadata.toml").write_text(f'{line}\n[variants.cpu]\ndevice = "cpu"\n')
    with pytest.raises(UserError, match=re.escape(expected)):
        frameworks.load_framework(folder)


def test_build_options_default_to_pips_own_variables(tmp_path, monkeypatch):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_CERT", str(bundle))
    monkeypatch.setenv("PIP_FIND_LINKS", f"/does/not/exist {tmp_path}")
    chosen = images.BuildOptions.from_environment()
    assert chosen.ca_bundle == bundle and chosen.wheelhouse == tmp_path
    with pytest.raises(UserError, match="--ca-bundle .*no such file"):
        images.BuildOptions.from_environment(ca_bundle=tmp_path / "missing.pem")
    with pytest.raises(UserError, match="--wheelhouse .*no such folder"):
        images.BuildOptions.from_environment(wheelhouse=tmp_path / "missing")


def test_dry_run_prints_dockerfile_and_context(capsys):
    assert main(["build", "pytorch", "--variant", "cu126", "--dry-run", "--base-image", "my-base:1"]) == 0
    out = capsys.readouterr().out
    assert dockerfiles.render(PYTORCH).rstrip() in out  # the rendered template, as the build sends it
    assert "# image: rosetta-pytorch:cu126-2.7.1" in out and "BASE_IMAGE=my-base:1" in out
    assert "ENTRYPOINT [\"python\", \"-m\", \"workloads\"]" in out and "build/requirements.txt" in out
    assert "USER 10001:10001" in out


# --- the real engine and registry -----------------------------------------------------------------

@pytest.fixture(scope="module")
def pytorch_image(docker_client):
    """The PyTorch CPU image, built through the CLI on the local base (cached layers make reruns quick)."""
    assert main(["build", "pytorch", "--variant", "cpu", "--base-image", BASE_IMAGE]) == 0
    return docker_client.images.get(images.image_tag(PYTORCH, PYTORCH.variants["cpu"]))


def test_image_is_labelled_non_root_with_only_the_compiler_torch_compile_needs(docker_client, pytorch_image):
    """Non-root, the build stage's files gone; the one build tool kept is g++ with Python's headers,
    which torch.compile's inductor builds its CPU kernels with (images/pytorch/metadata.toml)."""
    labels = pytorch_image.labels
    assert labels["io.rosetta-bench.framework"] == "pytorch" and labels["io.rosetta-bench.framework-version"] == "2.13.0"
    assert labels["io.rosetta-bench.requirements-sha256"] == images.requirements_hash(PYTORCH, PYTORCH.variants["cpu"])
    assert labels["org.opencontainers.image.revision"] not in ("", None)
    assert pytorch_image.attrs["Config"]["User"] == "10001:10001"
    listing = docker_client.containers.run(pytorch_image.id, entrypoint=["sh", "-c"], remove=True, network_mode="none",
                                           command=["id -u; ls /build 2>&1; command -v g++ || echo no-compiler; "
                                                    "python -c 'import sysconfig; print(sysconfig.get_paths()[\"include\"])' "
                                                    "| xargs -I{} ls {}/Python.h; "
                                                    "python -c 'import torch; print(torch.__version__)'"])
    lines = listing.decode().split()
    assert lines[0] == "10001" and "/usr/bin/g++" in lines and "2.13.0+cpu" in lines[-1]
    assert any(line.endswith("/Python.h") for line in lines), lines
    assert "No" in listing.decode() or "cannot access" in listing.decode()  # the build stage's files are gone


def test_missing_base_image_names_the_fix(docker_client, capsys):
    assert main(["build", "pytorch", "--base-image", "rosetta-no-such-base:0"]) == 2
    line = capsys.readouterr().err
    assert "base image rosetta-no-such-base:0 is not here and cannot be pulled" in line
    assert "--base-image" in line and "make-local-base.sh" in line


def test_a_cell_whose_base_image_this_host_cannot_get_is_unsupported_with_the_fix(docker_client, tmp_path, capsys):
    """The Julia row on an engine without its julia base (no registry outside): not run here, and
    why, never a failed cell; the fix names Julia, not the Debian base that Python rows use."""
    run = tmp_path / "run"
    assert main(["run-matrix", "--frameworks", "knet", "--variants", "cpu", "--profile", "smoke", "--data",
                 "synthetic", "--backend", "docker", "--base-image", "rosetta-no-such-base:0",
                 "--results-dir", str(run)]) == 0
    (result,) = [json.loads(path.read_text()) for path in (run / "cells").glob("*.json")]
    assert result["status"] == "unsupported"
    assert result["reason"].startswith("base image rosetta-no-such-base:0 is not here and cannot be pulled")
    assert "image that has Julia" in result["reason"] and "make-local-base.sh" not in result["reason"]


def test_push_then_pull_by_digest(docker_client, pytorch_image, registry, capsys):
    assert main(["push", "pytorch", "--registry", registry]) == 0
    out = capsys.readouterr().err
    digest = out.split(" as ")[-1].split()[0]
    assert digest.startswith("sha256:")
    repository = f"{registry}/rosetta-pytorch"
    docker_client.images.remove(f"{repository}:cpu-2.13.0")
    pulled = images.pull_image(docker_client, f"{repository}@{digest}", log=lambda line: None)
    assert pulled.id == pytorch_image.id
    assert f"{repository}@{digest}" in docker_client.images.get(pulled.id).attrs["RepoDigests"]


def test_registry_unreachable(docker_client, pytorch_image, capsys):
    assert main(["push", "pytorch", "--registry", "127.0.0.1:9"]) == 2
    assert "is the registry 127.0.0.1:9 running and reachable" in capsys.readouterr().err


# --- publish -> images.lock -> pull by digest (a local registry stands in for ghcr.io) ------------

@pytest.fixture(scope="module")
def published(docker_client, pytorch_image, registry, tmp_path_factory):
    """pytorch/cpu published to the test registry, pinned in a lock of the test's own: its path and entry."""
    lock = tmp_path_factory.mktemp("lock") / "images.lock"
    # --allow-dirty: a developer's checkout may hold uncommitted changes; the lock then says so
    assert main(["publish", "pytorch", "--variant", "cpu", "--registry", registry, "--lock", str(lock),
                 "--base-image", BASE_IMAGE, "--allow-dirty"]) == 0
    return lock, image_lock.read(lock)[("pytorch", "cpu")]


def test_publish_pins_what_the_registry_holds(published, pytorch_image, registry):
    """skopeo, reading the registry itself, confirms the digest, the platform and the labels the lock records."""
    import hashlib
    import json
    import shutil

    _, entry = published
    assert entry.registry == registry and entry.tag == "cpu-2.13.0" and entry.digest.startswith("sha256:")
    assert entry.source_revision == pytorch_image.labels[images.REVISION_LABEL]
    assert entry.sources_sha256 == images.sources_hash(PYTORCH, PYTORCH.variant("cpu"))
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        pytest.fail("skopeo is not installed (apt-get install skopeo)") if REQUIRE_DOCKER else \
            pytest.skip("skopeo is not installed (apt-get install skopeo)")
    where = f"docker://{entry.reference()}"
    raw = subprocess.run([skopeo, "inspect", "--tls-verify=false", "--raw", where], capture_output=True, check=True)
    assert "sha256:" + hashlib.sha256(raw.stdout).hexdigest() == entry.digest  # the manifest's bytes are the digest
    inspected = json.loads(subprocess.run([skopeo, "inspect", "--tls-verify=false", where], capture_output=True,
                                          check=True, text=True).stdout)
    assert inspected["Digest"] == entry.digest and f"{inspected['Os']}/{inspected['Architecture']}" == entry.platform
    for label, value in entry.label_checks().items():
        assert inspected["Labels"][label] == value, label


def test_pull_by_the_lock_brings_back_the_same_image(docker_client, published, pytorch_image, registry, capsys):
    import docker

    lock, entry = published
    docker_client.images.remove(pytorch_image.id, force=True)  # every local name of it
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(pytorch_image.id)
    try:
        assert main(["pull", "pytorch", "--registry", registry, "--lock", str(lock)]) == 0
        assert f"pulled {entry.reference()} (verified: pytorch/cpu" in capsys.readouterr().err
        pulled = docker_client.images.get(entry.reference())
        assert pulled.id == pytorch_image.id  # byte for byte the published image
        assert f"{registry}/rosetta-pytorch:cpu-2.13.0" in pulled.tags
    finally:  # the later tests use it under its local name
        docker_client.images.get(pytorch_image.id).tag("rosetta-pytorch", "cpu-2.13.0")


def test_a_tampered_digest_is_refused(docker_client, published, registry, tmp_path, capsys):
    lock, entry = published
    tampered = tmp_path / "images.lock"
    # a digest the registry does not hold
    image_lock.write({("pytorch", "cpu"): dataclasses.replace(entry, digest="sha256:" + "0" * 64)}, tampered)
    assert main(["pull", "pytorch", "--registry", registry, "--lock", str(tampered)]) == 2
    err = capsys.readouterr().err
    assert "has no image with images.lock's digest for pytorch/cpu; refusing" in err and "Traceback" not in err
    # the digest of another image that the registry does hold in the same repository
    other = docker_client.images.get(BASE_IMAGE)
    other.tag(f"{registry}/rosetta-pytorch", "not-pytorch")
    other_digest = images.push_image(docker_client, f"{registry}/rosetta-pytorch:not-pytorch",
                                     f"{registry}/rosetta-pytorch:not-pytorch", log=lambda line: None)
    image_lock.write({("pytorch", "cpu"): dataclasses.replace(entry, digest=other_digest)}, tampered)
    assert main(["pull", "pytorch", "--registry", registry, "--lock", str(tampered)]) == 2
    err = capsys.readouterr().err
    assert "the image does not match images.lock's pytorch/cpu entry" in err and "io.rosetta-bench.framework" in err
    assert not [tag for tag in docker_client.images.get(BASE_IMAGE).tags if "rosetta-pytorch:cpu" in tag]
    docker_client.images.remove(f"{registry}/rosetta-pytorch:not-pytorch")


def cell_containers(client) -> set[str]:
    """Ids of the containers labelled as Rosetta Bench cells, whatever their state."""
    return {c.id for c in client.containers.list(all=True, filters={"label": "io.rosetta-bench.cell"})}


def test_smoke_matrix_in_containers(docker_client, pytorch_image, published, registry, tmp_path):
    """run-matrix --backend docker --pull: the image images.lock pins, by digest; ok cells recording
    that digest, run as a non-root user without network, and no container left behind."""
    lock, entry = published
    before = cell_containers(docker_client)  # an earlier, killed run's may be there: not ours
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "docker", "--frameworks", "pytorch",
               "--modes", "default", "--profile", "smoke", "--data", "synthetic", "--registry", registry, "--pull",
               "--results-dir", str(tmp_path / "run"), "--timeout", "600"]  # compiled: the next test
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                               env={**os.environ, image_lock.LOCK_VARIABLE: str(lock)})
    assert completed.returncode == 0, completed.stderr
    results = [Result.read(p) for p in (tmp_path / "run" / "cells").glob("*.json")]
    ok = [r for r in results if r.status == "ok"]
    assert sorted(r.cell.workload for r in ok) == ["cnn", "gru", "resnet50"]
    for result in ok:
        provenance = result.provenance
        assert provenance.backend == "docker" and provenance.image_id == pytorch_image.id
        assert provenance.image_digest == entry.reference()  # the pinned image, and no other
        assert provenance.user_id == 10001 and provenance.network_interfaces == ["lo"]
    assert all(r.status == "unsupported" and "no GPU runtime" in r.reason for r in results if r.cell.variant != "cpu")
    assert cell_containers(docker_client) - before == set()
    assert (tmp_path / "run" / "report.html").is_file()
    # the parity check's cells ran in containers too, one per CPU (docs/RUN-GUARANTEES.md), and passed
    parity = [Result.read(p) for p in (tmp_path / "run" / "parity" / "cells").glob("pytorch__cpu__*.json")]
    assert sorted(r.cell.workload for r in parity) == ["cnn", "gru", "resnet50"]
    assert all(r.status == "ok" and r.provenance.backend == "docker" and r.provenance.user_id == 10001 for r in parity)
    table = (tmp_path / "run" / "parity" / "parity.md").read_text()
    assert table.count("| pytorch [eager] | cpu |") == 5 and "FAIL" not in table, table


def test_the_compiled_mode_runs_in_the_pytorch_image(docker_client, pytorch_image, tmp_path):
    """docs/FAIRNESS.md, modes-compared: torch.compile's inductor builds its CPU kernels inside the
    container, with the image's g++, its caches in the cell's own /tmp; each graph compiled once."""
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "docker", "--frameworks", "pytorch",
               "--variants", "cpu", "--workloads", "cnn", "--modes", "compiled", "--profile", "smoke", "--data",
               "synthetic", "--base-image", BASE_IMAGE, "--no-parity", "--no-report",
               "--results-dir", str(tmp_path / "run"), "--timeout", "900"]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    [result] = [Result.read(p) for p in (tmp_path / "run" / "cells").glob("*.json")]
    assert completed.returncode == 0 and result.status == "ok", (result.reason, (result.stderr_tail or "")[-2000:])
    assert result.provenance.image_id == pytorch_image.id and result.cell.mode == "compiled"
    assert result.provenance.extras["compiler"].startswith("inductor: C++/OpenMP kernels built by /usr/bin/g++")
    assert result.samples.traces and all(count == 1 for count in result.samples.traces.values())


def test_compose_config_validates():
    """`docker compose config` (or docker-compose v1) accepts the file as written."""
    import shutil

    from conftest import _skip_or_fail

    if shutil.which("docker-compose"):
        command = ["docker-compose", "config", "-q"]
    elif shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        command = ["docker", "compose", "config", "-q"]
    else:
        _skip_or_fail("neither docker-compose nor the docker compose plugin is installed")
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr


def test_build_failure_names_the_step_and_the_log(docker_client, tmp_path):
    """A requirement pip cannot find: one line with the failing step and where the full log is."""
    folder = tmp_path / "brokenfw"
    folder.mkdir()  # no Dockerfile of its own: images/Dockerfile.j2 is rendered for it
    (folder / "requirements-cpu.txt").write_text("rosetta-no-such-package-anywhere==0.0.1\n")
    variant = frameworks.Variant("cpu", "cpu", folder / "requirements-cpu.txt", base_image=BASE_IMAGE)
    broken = frameworks.Framework("brokenfw", "Broken", folder, {"cpu": variant}, "cpu", (),
                                  package="rosetta-no-such-package-anywhere")
    chosen = images.BuildOptions.from_environment(log_dir=tmp_path / "logs")
    with pytest.raises(UserError) as error:
        images.build(docker_client, broken, variant, chosen, log=lambda line: None)
    message = str(error.value)
    assert "building rosetta-brokenfw:cpu-0.0.1 failed at 'Step 4/" in message and "RUN set -eu" in message
    log_path = Path(message.rsplit("full log: ", 1)[1])
    assert log_path.is_file() and "rosetta-no-such-package-anywhere" in log_path.read_text()
    assert "\n" not in message


# The Debian release whose python3 is each Python an image may need; `images/base/make-local-base.sh`
# makes it locally (no registry here): bookworm's 3.11, bullseye's 3.9 (Caffe2's torch 1.10.2).
DEBIAN_SUITES = {"3.11": "bookworm", "3.9": "bullseye"}


def frameworks_built_in_ci() -> list[str]:
    """Every framework whose CPU image can be built on a local Debian base, but PyTorch (its image
    has the tests above) and Keras 3 on each backend (the same TensorFlow / JAX / PyTorch wheels as
    those images, built and run by hand: it would double CI's downloads for no new Dockerfile
    logic). CNTK's Python 3.6 has no Debian release: its Ubuntu 18.04 base cannot be made here."""
    return [name for name, framework in REGISTRY.items()
            if "cpu" in framework.variants and framework.variants["cpu"].python in DEBIAN_SUITES
            and name != "pytorch" and not name.startswith("keras-")]


def local_base_for(python: str, docker_client) -> str:
    """The local base image with this Python, made with make-local-base.sh when missing."""
    import docker

    if python == "3.11":
        return BASE_IMAGE
    name = f"rosetta-base:{DEBIAN_SUITES[python]}"
    try:
        docker_client.images.get(name)
    except docker.errors.ImageNotFound:
        import os

        script = ROOT / "images" / "base" / "make-local-base.sh"
        made = subprocess.run([str(script), name], env=dict(os.environ, DEBIAN_SUITE=DEBIAN_SUITES[python]),
                              capture_output=True, text=True, timeout=1200)
        if made.returncode != 0:
            message = f"could not make {name}: {made.stderr.strip()[-300:]}"
            if os.environ.get("ROSETTA_REQUIRE_DOCKER"):
                pytest.fail(message)
            pytest.skip(message)
    return name


# A non-default framework option every workload of the framework takes, given to its image's run, and
# the one mode each image runs (its default, or a non-default one that travels in the cell document).
NON_DEFAULT_OPTION = {"caffe2": "executor=simple"}
IMAGE_MODE = {"tensorflow": "compiled"}


def image_workload(framework) -> str:
    """The one workload each framework image runs in its containers here: the CNN (training, the
    optimizer, dropout and evaluation in one cell) where the framework has it. Every workload runs in
    PyTorch's image (test_smoke_matrix_in_containers) and on the local backend in each framework's
    own environment (tests/test_e2e.py), and each image's context is checked to hold every module
    its workloads import (test_every_image_context_holds_the_modules_its_workloads_import)."""
    return "cnn" if "cnn" in framework.workloads else sorted(framework.workloads)[0]


@pytest.mark.parametrize("name", frameworks_built_in_ci())
def test_framework_image_builds_and_runs_its_smoke_cell_in_a_container(name, docker_client, pytorch_image, tmp_path):
    """The framework's CPU image through `orchestrator build`, then a smoke cell in a container
    (image_workload; pytorch_image: ONNX Runtime's model is exported in PyTorch's image)."""
    import os

    framework = REGISTRY[name]
    base = local_base_for(framework.variants["cpu"].python, docker_client)
    assert main(["build", name, "--variant", "cpu", "--base-image", base]) == 0
    image = docker_client.images.get(images.image_tag(framework, framework.variants["cpu"]))
    assert image.labels["io.rosetta-bench.framework"] == name
    before = cell_containers(docker_client)
    option = NON_DEFAULT_OPTION.get(name)  # a framework option travels in the cell document, not the environment
    workload = image_workload(framework)
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "docker", "--frameworks", name,
               "--workloads", workload, "--variants", "cpu", "--profile", "smoke", "--data", "synthetic", "--base-image", base,
               "--results-dir", str(tmp_path / "run"), "--timeout", "900", "--no-parity",  # one image per test
               "--modes", IMAGE_MODE.get(name) or modes.default(name), *(["--option", option] if option else [])]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                               env=dict(os.environ, OMP_NUM_THREADS="2"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = [Result.read(p) for p in (tmp_path / "run" / "cells").glob("*.json")]
    assert [(r.cell.workload, r.status) for r in results] == [(workload, "ok")], \
        {r.cell.key: (r.reason, (r.stderr_tail or "")[-600:]) for r in results}
    assert all(r.provenance.image_id == image.id and r.provenance.user_id == 10001 for r in results)
    for result in results:  # the speed variables (FAIRNESS.md, provenance a reviewer needs) both backends to carry into the container, and back
        assert result.provenance.environment.get("OMP_NUM_THREADS") == "2", result.provenance.environment
        assert result.provenance.extras["init"] == "canonical"
        packages = tmp_path / "run" / "packages" / (result.provenance.packages_sha256.split(":")[1] + ".txt")
        assert packages.read_text().splitlines() == result.provenance.packages
        if option:
            option_name, value = option.split("=")
            assert result.provenance.extras[f"option.{option_name}"] == value and result.cell.options == {option_name: value}
    assert cell_containers(docker_client) - before == set()
    if os.environ.get("CI"):  # a CI machine's disk holds a few images, not all of them
        docker_client.images.remove(image.id, force=True)


def test_every_image_context_holds_the_modules_its_workloads_import():
    """A workload file's `from workloads.runtime import X` must find X inside that image: a module, or
    a package (Keras 3's runtime) whole; and no image carries another framework's runtime package."""
    import re

    packages = {path.parent.name: sorted(path.parent.glob("*.py"))
                for path in (ROOT / "workloads" / "runtime").glob("*/__init__.py")}
    assert "keras" in packages and len(packages["keras"]) > 2
    for framework in REGISTRY.values():
        for variant in framework.variants.values():
            files = images.context_files(framework, variant, options())
            for name in [n for n in files if n.startswith("workloads/") and n.endswith(".py")]:
                for imported in re.findall(r"^from workloads\.runtime import (\w+)", Path(files[name]).read_text(), re.M):
                    if imported in packages:
                        wanted = {f"workloads/runtime/{imported}/{path.name}" for path in packages[imported]}
                        assert wanted <= set(files), (framework.name, imported, sorted(wanted - set(files)))
                    else:
                        assert f"workloads/runtime/{imported}.py" in files, (framework.name, name, imported)
            carried = {name.split("/")[2] for name in files if name.count("/") == 3 and name.startswith("workloads/runtime/")}
            assert carried <= {framework.runtime, framework.workload_module}, (framework.name, carried)


def test_every_image_runs_its_workload_files_on_the_python_its_variant_declares():
    """Old CUDA bases bring old Pythons (MXNet cu112 and Chainer cu110 run 3.8): every file such an
    image holds must work there. vermin reads the syntax, library calls and keyword arguments that
    need a newer Python (a "# novermin" comment marks a line guarded for older ones); this host can
    only run its own."""
    vermin = pytest.importorskip("vermin")
    import subprocess

    checked = set()
    for framework in REGISTRY.values():
        for variant in framework.variants.values():
            target = variant.python or framework.python
            if not target or (framework.name, target) in checked:
                continue
            checked.add((framework.name, target))
            files = images.context_files(framework, variant, options())
            sources = [str(files[n]) for n in files if n.startswith("workloads/") and n.endswith(".py")]
            command = [sys.executable, "-c", "import sys; from vermin.main import main; sys.exit(main())",
                       "--no-tips", "--violations", f"-t={target}-", *sources]
            completed = subprocess.run(command, capture_output=True, text=True)
            assert completed.returncode == 0, f"{framework.name} ({target}):\n{completed.stdout[-3000:]}"
    assert ("chainer", "3.8") in checked and vermin


class _FakeImages:
    """The part of the Docker SDK's client.images that ensure_image uses."""

    def __init__(self, labels: dict | None):
        self.labels = labels

    def get(self, tag):
        import docker

        if self.labels is None:
            raise docker.errors.ImageNotFound(tag)
        return type("Image", (), {"labels": self.labels, "id": "sha256:fake"})()


@pytest.mark.parametrize("built_from, pull, expected", [
    ("current", False, []),  # built from these sources: used as it is
    ("other", False, ["build"]),  # built from other workload sources: rebuilt, said in one line
    ("other", True, []),  # pulled: kept, with a warning naming the rebuild
    (None, False, ["build"]),  # not there: built
])
def test_an_image_built_from_other_workload_sources_is_rebuilt(monkeypatch, tmp_path, built_from, pull, expected):
    monkeypatch.setenv(image_lock.LOCK_VARIABLE, str(tmp_path / "empty.lock"))  # pinned: test_image_lock.py, publish tests above
    framework = frameworks.discover()["pytorch"]
    variant = framework.variant("cpu")
    labels = None if built_from is None else {
        images.SOURCES_LABEL: images.sources_hash(framework, variant) if built_from == "current" else "0" * 64}
    client = type("Client", (), {"images": _FakeImages(labels)})()
    calls, messages = [], []
    monkeypatch.setattr(images.resolve, "build", lambda *args, **kwargs: calls.append("build"))  # where it is called
    monkeypatch.setattr(images.resolve, "pull_image", lambda *args, **kwargs: calls.append("pull"))
    tag = images.ensure_image(client, framework, variant, images.BuildOptions(), pull=pull, log=messages.append)
    assert tag == images.image_tag(framework, variant) and calls == expected
    if pull:  # the lock pins nothing: pulled by tag, said so
        assert "has no entry in images.lock: pulled by tag, not pinned" in messages.pop(0)
    if built_from == "other":
        assert len(messages) == 1 and "other workload sources" in messages[0]


def test_the_sources_digest_follows_the_workload_files(monkeypatch):
    framework = frameworks.discover()["pytorch"]
    variant = framework.variant("cpu")
    before = images.sources_hash(framework, variant)
    files = images.context_files(framework, variant, images.BuildOptions())
    changed = dict(files, **{"workloads/cnn/pytorch.py": b"# another source\n"})
    monkeypatch.setattr(images.context, "context_files", lambda *args, **kwargs: changed)
    assert images.sources_hash(framework, variant) != before
    assert images.image_labels(framework, variant)[images.SOURCES_LABEL] == images.sources_hash(framework, variant)
