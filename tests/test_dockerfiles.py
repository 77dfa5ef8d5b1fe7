"""Framework Dockerfiles rendered from images/Dockerfile.j2 and each framework's metadata."""
import json

import pytest

from orchestrator import frameworks, images
from orchestrator.images import dockerfile as dockerfiles
from orchestrator.errors import UserError
from workloads.common import naming

REGISTRY = frameworks.discover()


def framework_in(folder, *, image=None, base="python:3.11-slim-bookworm", constraints=None, import_env=None):
    """A one-variant framework in a test's folder (outside images/)."""
    folder.mkdir(exist_ok=True)
    (folder / "requirements-cpu.txt").write_text("somefw==1.0\n")
    variant = frameworks.Variant("cpu", "cpu", folder / "requirements-cpu.txt", base_image=base,
                                 build_constraints=constraints)
    return frameworks.Framework(folder.name, "Some FW", folder, {"cpu": variant}, "cpu", (), package="somefw",
                                image=image or {}, import_env=import_env or {})


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_framework_renders_a_complete_dockerfile(name):
    framework = REGISTRY[name]
    text = dockerfiles.render(framework)
    default = framework.variants[framework.default_variant]
    assert "{{" not in text and "{%" not in text and text.endswith('CMD ["--help"]\n')
    assert f"ARG BASE_IMAGE={dockerfiles.variant_base(default)}\n" in text
    assert f"    ROSETTA_FRAMEWORK={name} \\\n" in text
    assert "USER 10001:10001" in text and "useradd --uid 10001" in text  # non-root, as the Docker backend expects
    # the entry point is the framework's cell command (python -m workloads unless [language] says otherwise)
    command = framework.language.command_line(python="python", workloads="/opt/rosetta/workloads")
    assert f"ENTRYPOINT {json.dumps(command)}\n" in text
    if not framework.language.uses_python_environment:  # Julia: no Python environment to build
        return
    assert "-r /build/requirements.txt" in text and "export PIP_CERT=/build/ca-bundle.crt" in text
    for variable, value in naming.environment(name).items():
        assert f"    {variable}={value} \\\n" in text
    declared = framework.image
    for variable, value in declared.get("env", {}).items():
        assert f"    {variable}={value} \\\n" in text
    for package, library in declared.get("system_libraries", {}).items():
        assert f"grep -q '{library.replace('.', chr(92) + '.')}' || packages=\"$packages {package}\"" in text
    uninstall = next(line for line in text.splitlines() if "pip uninstall" in line)
    assert all(tool not in uninstall for tool in declared.get("keep", ()))
    if default.python == "3.6":  # CNTK's Python: pip only (its own Dockerfile blocks)
        assert "uv pip install" not in text and "pip install --find-links /build/wheels -r /build/requirements.txt" in text
    else:  # the local backend's installer, pinned, taking pip's best match over the index and the wheels
        assert f'--find-links /build/wheels "uv=={dockerfiles.UV_VERSION}"' in text
        assert "/opt/venv/bin/uv pip install --no-cache --python /opt/venv/bin/python --index-strategy " \
               "unsafe-best-match" in text and "export SSL_CERT_FILE=/build/ca-bundle.crt" in text
        assert "--compile-bytecode --find-links /build/wheels" in text  # the non-root user cannot write .pyc files
        assert "uninstall --yes --quiet uv " in uninstall  # uv never reaches the image
    # the build context carries exactly this text
    files = images.context_files(framework, default, images.BuildOptions())
    assert files["Dockerfile"] == text.encode()


def test_a_base_without_python_gets_the_distributions():
    assert "command -v python3 >/dev/null || packages=\"python3\"" in dockerfiles.render(REGISTRY["mxnet"])
    assert "python3-venv" not in dockerfiles.render(REGISTRY["pytorch"])  # every base is an official python: image


def test_pytorchs_image_has_the_compiler_and_headers_its_compiled_mode_builds_kernels_with():
    """g++ always; python3-dev only where the base's Python has no Python.h (the local Debian base)."""
    text = dockerfiles.render(REGISTRY["pytorch"])
    assert "--no-install-recommends \\\n        g++ &&" in text
    assert "|| packages=\"$packages python3-dev\"" in text and "Python.h" in text
    assert "python3-dev" not in dockerfiles.render(REGISTRY["mxnet"])


def test_build_constraints_reach_pip_through_the_context():
    chainer = REGISTRY["chainer"]
    text = dockerfiles.render(chainer)
    assert "export PIP_CONSTRAINT=/build/build-constraints.txt" in text
    assert text.index("python3 -m venv") < text.index("PIP_CONSTRAINT")  # not while venv bootstraps pip
    files = images.context_files(chainer, chainer.variants["cpu"], images.BuildOptions())
    assert files[dockerfiles.CONSTRAINTS_FILE] == chainer.variants["cpu"].build_constraints
    pytorch = REGISTRY["pytorch"]
    assert dockerfiles.CONSTRAINTS_FILE not in images.context_files(pytorch, pytorch.variants["cpu"], images.BuildOptions())
    assert "PIP_CONSTRAINT" not in dockerfiles.render(pytorch)


def test_cntk_images_extend_the_template_with_their_openmpi_and_pip():
    for name in ("cntk", "keras-cntk"):
        text = dockerfiles.render(REGISTRY[name])
        assert "LD_LIBRARY_PATH=/opt/mpi-compat" in text and "libopenmpi2" in text and '"pip==21.3.1"' in text
        assert "ARG BASE_IMAGE=ubuntu:18.04" in text
    assert "KERAS_BACKEND=cntk" in dockerfiles.render(REGISTRY["keras-cntk"])


def test_a_handwritten_dockerfile_is_used_as_written(tmp_path):
    framework = framework_in(tmp_path / "oddfw")
    handwritten = "# {{ not a template }}\nFROM scratch\nCOPY workloads/ /opt/rosetta/workloads/\n"
    (framework.folder / "Dockerfile").write_text(handwritten)
    assert dockerfiles.source(framework) == framework.folder / "Dockerfile"
    assert dockerfiles.render(framework) == handwritten
    files = images.context_files(framework, framework.variants["cpu"], images.BuildOptions())
    assert files["Dockerfile"] == handwritten.encode()


def test_a_framework_template_replaces_only_the_blocks_it_names(tmp_path):
    framework = framework_in(tmp_path / "oddfw")
    (framework.folder / "Dockerfile.j2").write_text(
        '{% extends "Dockerfile.j2" %}\n{% block runtime_env %}\n    ODD=1 \\\n{% endblock %}\n')
    text = dockerfiles.render(framework)
    assert "oddfw/Dockerfile.j2" in text  # the header names the file it came from
    assert "    ODD=1 \\\n    ROSETTA_FRAMEWORK=oddfw \\\n" in text
    plain = dockerfiles.render(framework_in(tmp_path / "plainfw"))

    def instructions(dockerfile):
        return [line for line in dockerfile.splitlines() if not line.startswith("#")]
    expected = [line.replace("plainfw", "oddfw") for line in instructions(plain)]
    expected.insert(expected.index("    ROSETTA_FRAMEWORK=oddfw \\"), "    ODD=1 \\")
    assert instructions(text) == expected


def test_image_table_is_checked(tmp_path):
    with pytest.raises(UserError, match=r"unknown keys system_packages"):
        dockerfiles.render(framework_in(tmp_path / "a", image={"system_packages": ["libgomp1"]}))
    with pytest.raises(UserError, match="python_headers must be true or false"):
        dockerfiles.render(framework_in(tmp_path / "c", image={"python_headers": "yes"}))
    with pytest.raises(UserError, match="keep names numpy"):
        dockerfiles.render(framework_in(tmp_path / "b", image={"keep": ["numpy"]}))
    with pytest.raises(UserError, match="already sets"):
        dockerfiles.render(framework_in(tmp_path / "keras-jax", image={"env": {"KERAS_BACKEND": "torch"}},
                                        import_env={"KERAS_BACKEND": "jax"}))
