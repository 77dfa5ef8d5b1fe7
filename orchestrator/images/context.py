"""Build contexts: an image's name and tag, its build arguments, the files its context holds,
assembled in memory with fixed tar metadata, and the hashes of what it is built from."""
from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.errors import UserError
from orchestrator import frameworks
from orchestrator.frameworks import WORKLOADS_DIR, Framework, Variant
from orchestrator.images import dockerfile, wheelhouse

Log = Callable[[str], None]


@dataclass
class BuildOptions:
    registry: str | None = None  # prefix of every tag, e.g. 127.0.0.1:5000 or ghcr.io/me
    base_image: str | None = None  # overrides the variant's base image
    ca_bundle: Path | None = None  # given to pip inside the build only
    wheelhouse: Path | None = None  # local wheels offered to pip inside the build
    log_dir: Path | None = None  # where full build logs go

    @classmethod
    def from_environment(cls, *, registry: str | None = None, base_image: str | None = None,
                         ca_bundle: str | os.PathLike | None = None, wheelhouse: str | os.PathLike | None = None,
                         log_dir: Path | None = None) -> "BuildOptions":
        """Fill what was not given from the variables pip itself honours."""
        if ca_bundle is None:
            ca_bundle = next((os.environ[name] for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
                              if os.environ.get(name)), None)
        if wheelhouse is None:
            folders = [f for f in os.environ.get("PIP_FIND_LINKS", "").split() if Path(f).is_dir()]
            wheelhouse = folders[0] if folders else None
        options = cls(registry=registry.rstrip("/") if registry else None, base_image=base_image,
                      ca_bundle=Path(ca_bundle) if ca_bundle else None,
                      wheelhouse=Path(wheelhouse) if wheelhouse else None, log_dir=log_dir)
        if options.ca_bundle and not options.ca_bundle.is_file():
            raise UserError(f"--ca-bundle {options.ca_bundle}: no such file; give the PEM bundle your proxy's "
                            "certificates are in")
        if options.wheelhouse and not options.wheelhouse.is_dir():
            raise UserError(f"--wheelhouse {options.wheelhouse}: no such folder; give a folder of .whl files")
        return options


def pinned_version(framework: Framework, variant: Variant) -> str:
    """The framework package's pinned version, without a local label (tags cannot hold '+')."""
    package = _normalise(variant.package or framework.package or framework.name)
    if variant.requirements.name == "Project.toml":  # Julia's pins: [compat] Knet = "=1.4.10"
        return _julia_pin(variant.requirements, package)
    for requirement in _requirement_lines(variant.requirements):
        name, _, version = requirement.partition("==")
        if _normalise(name) == package and version:
            return version.strip().split("+")[0]
    raise UserError(f"{variant.requirements}: no `{package}==<version>` pin; every variant pins its framework")


def _julia_pin(project: Path, package: str) -> str:
    try:
        compat = tomllib.loads(project.read_text()).get("compat", {})
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{project}: not valid TOML ({error})") from error
    for name, version in compat.items():
        if _normalise(name) == package and str(version).startswith("=") and "," not in str(version):
            return str(version).lstrip("=").strip()
    raise UserError(f"{project}: no [compat] pin `{package} = \"=<version>\"`; every variant pins its framework")


def image_repository(framework: str, registry: str | None = None) -> str:
    return f"{registry}/rosetta-{framework}" if registry else f"rosetta-{framework}"


def image_tag(framework: Framework, variant: Variant, registry: str | None = None) -> str:
    return f"{image_repository(framework.name, registry)}:{variant.name}-{pinned_version(framework, variant)}"


def base_image(variant: Variant, options: BuildOptions) -> str:
    return options.base_image or dockerfile.variant_base(variant)


def build_arguments(variant: Variant, options: BuildOptions, dockerfile: bytes) -> dict[str, str]:
    """BASE_IMAGE for every image (one Dockerfile serves all variants); VARIANT_CUDA, the variant's CUDA
    release ("" on a CPU variant), only for a Dockerfile that declares it: the Julia row fetches that
    toolkit while it builds, since CUDA.jl would otherwise download it in the cell, which has no network."""
    arguments = {"BASE_IMAGE": base_image(variant, options)}
    if re.search(rb"^ARG VARIANT_CUDA\b", dockerfile, re.M):
        arguments["VARIANT_CUDA"] = variant.cuda or ""
    return arguments


def context_files(framework: Framework, variant: Variant, options: BuildOptions, *,
                  warn: wheelhouse.Warn | None = None) -> dict[str, Path | bytes | wheelhouse.LocalWheel]:
    """Archive name -> source file (or bytes, or a wheel from the wheelhouse), for exactly what this
    image needs. `warn` is told, one line each, what of the wheelhouse was skipped and why."""
    files: dict[str, Path | bytes | wheelhouse.LocalWheel] = {
        "Dockerfile": dockerfile.render(framework).encode(),
        "build/requirements.txt": variant.requirements,
        # an empty bundle means "pip's default"; the file always exists so the Dockerfile stays simple
        "build/ca-bundle.crt": options.ca_bundle if options.ca_bundle else b"",
        "build/wheels/README": b"local wheels offered to pip (--wheelhouse)\n",
    }
    if dockerfile.has_build_constraints(framework):  # empty for a variant without: the Dockerfile tests -s
        files[dockerfile.CONSTRAINTS_FILE] = variant.build_constraints or b""
    pins = {_normalise(name): version.strip()
            for name, _, version in (requirement.partition("==") for requirement in _requirement_lines(variant.requirements))}
    for wheel in wheelhouse.matching_wheels(options.wheelhouse, pins, cuda=variant.device == "cuda", warn=warn):
        files[f"build/wheels/{wheel.path.name}"] = wheel
    module = framework.workload_module
    language = framework.language
    if language.uses_python_environment:  # the Python package: the harness, and its runtime
        for path in sorted(WORKLOADS_DIR.rglob("*.py")):
            relative = path.relative_to(WORKLOADS_DIR)
            if _python_file_wanted(relative.parts, module, framework.runtime or module):
                files[f"workloads/{relative.as_posix()}"] = path
        # the registration's module and import_env for the image side (workloads/common/naming.py): this
        # framework's only, so that registering another framework leaves this image's sources as they were
        files["workloads/frameworks.json"] = frameworks.image_side_json({framework.name: framework}).encode()
    if language.suffix != "py":  # another language's: its entry script (workloads/cell.R) and workload files
        for path in sorted(WORKLOADS_DIR.rglob(f"*.{language.suffix}")):
            relative = path.relative_to(WORKLOADS_DIR)
            if len(relative.parts) == 1 or path.stem == module:
                files[f"workloads/{relative.as_posix()}"] = path
    for name in language.project_files:  # e.g. Julia's Project.toml and Manifest.toml
        files[f"build/{name}"] = framework.folder / name
    return files


def _python_file_wanted(parts: tuple[str, ...], module: str, runtime: str) -> bool:
    """Whether workloads/<parts> goes into the image of a framework whose workload files are
    `<workload>/<module>.py` and whose runtime is `runtime/<runtime>.py` or the package
    `runtime/<runtime>/` (Keras 3's), whole: the harness, the common code and those, nothing else.
    A runtime of the module's own name comes too (MXNet's Module rows: runtime/mxnet_module.py, on
    the runtime/mxnet.py they share with the Gluon rows)."""
    if parts[0] == "runtime":
        if len(parts) > 2:  # inside a runtime package: that runtime's own only
            return parts[1] in (runtime, module)
        return parts[1] in ("__init__.py", f"{runtime}.py", f"{module}.py")
    return len(parts) == 1 or parts[0] == "common" or parts[-1] in ("__init__.py", f"{module}.py")


def build_context(files: dict[str, Path | bytes | wheelhouse.LocalWheel]) -> bytes:
    """A tar archive with fixed metadata: same inputs, same bytes, warm layer cache."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            source = files[name]
            if isinstance(source, wheelhouse.LocalWheel):
                content = source.read()  # the user's folder: bounded, never through a link
            else:
                content = source if isinstance(source, bytes) else Path(source).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(content), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def requirements_hash(framework: Framework, variant: Variant) -> str:
    """The variant's pins as one digest: its requirements file, then the language's project files the
    image is built with (Julia's Manifest.toml: the exact version of every package, not only the
    direct ones)."""
    digest = hashlib.sha256(variant.requirements.read_bytes())
    for name in framework.language.project_files:
        path = framework.folder / name
        if path != variant.requirements:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def sources_hash(framework: Framework, variant: Variant) -> str:
    """What an image runs, as one digest: its rendered Dockerfile and the workload sources it holds.
    An image labelled with another digest was built from other sources than the ones here."""
    digest = hashlib.sha256()
    files = context_files(framework, variant, BuildOptions())
    for name in sorted(name for name in files if name == "Dockerfile" or name.startswith("workloads/")):
        content = files[name]
        digest.update(name.encode() + b"\0")
        digest.update(content if isinstance(content, bytes) else content.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _requirement_lines(path: Path) -> list[str]:
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            lines.append(line)
    return lines


def _normalise(name: str) -> str:
    """A requirement's project name as PEP 503 compares it, extras dropped: tensorflow[and-cuda] -> tensorflow."""
    return re.sub(r"[-_.]+", "-", name.split("[", 1)[0]).lower().strip()
