"""Per-framework images: tags, build contexts assembled in memory, build, pull and push.

A build context holds only what its image needs (the Dockerfile rendered by dockerfiles.py, the
variant's pinned requirements and build constraints, an optional CA bundle and local wheels, the
common workload code and that framework's own files) and is written with fixed tar metadata, so the
same inputs give the same bytes and Docker's layer cache keeps working.
"""
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

from orchestrator import __version__, dockerfiles, frameworks, host
from orchestrator.errors import CannotRunHere, UserError
from orchestrator.frameworks import WORKLOADS_DIR, Framework, Variant

LABEL = "io.rosetta-bench"
SOURCES_LABEL = f"{LABEL}.sources-sha256"  # value: sources_hash() of what the image was built from
REVISION_LABEL = "org.opencontainers.image.revision"  # value: the project's git revision at build time
LOCAL_BASE_SCRIPT = "images/base/make-local-base.sh"
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


# --- names ----------------------------------------------------------------------------------------

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
    return options.base_image or dockerfiles.variant_base(variant)


def build_arguments(variant: Variant, options: BuildOptions, dockerfile: bytes) -> dict[str, str]:
    """BASE_IMAGE for every image (one Dockerfile serves all variants); VARIANT_CUDA, the variant's CUDA
    release ("" on a CPU variant), only for a Dockerfile that declares it: the Julia row fetches that
    toolkit while it builds, since CUDA.jl would otherwise download it in the cell, which has no network."""
    arguments = {"BASE_IMAGE": base_image(variant, options)}
    if re.search(rb"^ARG VARIANT_CUDA\b", dockerfile, re.M):
        arguments["VARIANT_CUDA"] = variant.cuda or ""
    return arguments


# --- build context --------------------------------------------------------------------------------

def context_files(framework: Framework, variant: Variant, options: BuildOptions) -> dict[str, Path | bytes]:
    """Archive name -> source file (or bytes), for exactly what this image needs."""
    files: dict[str, Path | bytes] = {
        "Dockerfile": dockerfiles.render(framework).encode(),
        "build/requirements.txt": variant.requirements,
        # an empty bundle means "pip's default"; the file always exists so the Dockerfile stays simple
        "build/ca-bundle.crt": options.ca_bundle if options.ca_bundle else b"",
        "build/wheels/README": b"local wheels offered to pip (--wheelhouse)\n",
    }
    if dockerfiles.has_build_constraints(framework):  # empty for a variant without: the Dockerfile tests -s
        files[dockerfiles.CONSTRAINTS_FILE] = variant.build_constraints or b""
    for wheel in _matching_wheels(variant, options.wheelhouse):
        files[f"build/wheels/{wheel.name}"] = wheel
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


def _matching_wheels(variant: Variant, wheelhouse: Path | None) -> list[Path]:
    """Only wheels of packages the requirements name, built for this Python, so the context stays small."""
    if not wheelhouse:
        return []
    wanted = {}
    for requirement in _requirement_lines(variant.requirements):
        name, _, version = requirement.partition("==")
        wanted[_normalise(name)] = version.strip()
    matches = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        pinned = wanted.get(_normalise(name))
        if variant.device == "cuda" and version.endswith("+cpu"):
            continue  # a CPU-only build must never stand in for a CUDA one
        if pinned is not None and (not pinned or version == pinned or version.split("+")[0] == pinned):
            matches.append(wheel)
    return matches


def build_context(files: dict[str, Path | bytes]) -> bytes:
    """A tar archive with fixed metadata: same inputs, same bytes, warm layer cache."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            source = files[name]
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


def image_labels(framework: Framework, variant: Variant) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": f"Rosetta Bench {framework.display_name} ({variant.name})",
        "org.opencontainers.image.version": __version__,
        REVISION_LABEL: host.git_revision() or "unknown",
        f"{LABEL}.framework": framework.name,
        f"{LABEL}.framework-version": pinned_version(framework, variant),
        f"{LABEL}.variant": variant.name,
        f"{LABEL}.device": variant.device,
        f"{LABEL}.cuda": variant.cuda or ("from the wheel" if variant.device == "cuda" else "none"),
        f"{LABEL}.requirements-sha256": requirements_hash(framework, variant),
        SOURCES_LABEL: sources_hash(framework, variant),
    }


def dry_run(framework: Framework, variant: Variant, options: BuildOptions) -> str:
    """What a build would send: tag, base image, labels, the Dockerfile and the context's files."""
    files = context_files(framework, variant, options)
    lines = [f"# image: {image_tag(framework, variant, options.registry)}"]
    lines += [f"# build argument {name}={value}"
              for name, value in build_arguments(variant, options, files["Dockerfile"]).items()]
    lines += [f"# label {key}={value}" for key, value in image_labels(framework, variant).items()]
    lines += ["", files["Dockerfile"].decode().rstrip(), "", "# build context:"]
    for name in sorted(files):
        source = files[name]
        size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
        lines.append(f"#   {size:>12,} B  {name}")
    return "\n".join(lines)


# --- engine operations ----------------------------------------------------------------------------

def build(client, framework: Framework, variant: Variant, options: BuildOptions, *, log: Log = print):
    """Build one image, streaming its steps; the full log is kept on disk."""
    import docker

    tag = image_tag(framework, variant, options.registry)
    files = context_files(framework, variant, options)
    arguments = build_arguments(variant, options, files["Dockerfile"])
    base = arguments["BASE_IMAGE"]
    ensure_base_image(client, base, framework)
    context = build_context(files)
    log_dir = options.log_dir or Path.home() / ".cache" / "rosetta-bench" / "build-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', tag)}.log"
    log(f"building {tag} on {base} ({len(context) / 2**20:.1f} MiB context; log: {log_path})")
    step = "the first step"
    with open(log_path, "w") as stream:
        try:
            chunks = client.api.build(fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True,
                                      forcerm=True, pull=False, decode=True, buildargs=arguments,
                                      labels=image_labels(framework, variant))
            for chunk in chunks:
                text = chunk.get("stream", "")
                stream.write(text)
                if text.startswith("Step "):
                    step = text.strip()
                    log(f"  {step}")
                if "error" in chunk:
                    stream.write(chunk["error"] + "\n")
                    message = chunk["error"].strip().splitlines()[-1]
                    raise UserError(f"building {tag} failed at {step!r}: {message}; full log: {log_path}")
        except docker.errors.APIError as error:
            raise UserError(f"building {tag} failed: {_explain(error)}; full log: {log_path}") from error
    image = client.images.get(tag)
    log(f"built {tag} ({image.short_id}, {image.attrs.get('Size', 0) / 2**20:,.0f} MiB)")
    return image


def ensure_base_image(client, name: str, framework: Framework) -> None:
    """The base must be local or pullable; say how to make one when it is neither."""
    import docker

    try:
        client.images.get(name)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(name)
    except docker.errors.APIError as error:
        if framework.language.uses_python_environment:
            fix = f"pass --base-image with a local image, e.g. one made by {LOCAL_BASE_SCRIPT}"
        else:  # a base that brings its language (Julia's official image): no Debian base stands in for it
            fix = (f"`docker pull {name}` where a registry is reachable (then `docker save` / `docker load` "
                   f"here), or pass --base-image with a local image that has {framework.language.name}")
        raise CannotRunHere(f"base image {name} is not here and cannot be pulled ({_explain(error)}); {fix}") \
            from error


def ensure_image(client, framework: Framework, variant: Variant, options: BuildOptions, *, pull: bool = False,
                 log: Log = print) -> str:
    """The image for a cell, as a reference the engine knows: already here, pulled (with --pull:
    by images.lock's digest where the lock has an entry, else by tag with a warning), or built."""
    import docker

    if pull:
        from orchestrator import image_lock

        entry = image_lock.read().get((framework.name, variant.name))
        if entry is not None:
            return image_lock.ensure_locked(client, entry, framework, variant, options.registry, log=log)
        log(f"warning: {framework.name}/{variant.name} has no entry in images.lock: pulled by tag, not pinned "
            f"(a maintainer pins it with `python -m orchestrator publish {framework.name} --variant {variant.name}`)")
    tag = image_tag(framework, variant, options.registry)
    try:
        existing = client.images.get(tag)
    except docker.errors.ImageNotFound:
        existing = None
    if existing is not None:
        built_from = (existing.labels or {}).get(SOURCES_LABEL)
        if built_from == sources_hash(framework, variant):
            return tag
        if pull:  # a pulled image is what it is: say so rather than replace it behind the user's back
            log(f"warning: {tag} was built from other workload sources than this checkout's; its cells run "
                f"those (rebuild with `python -m orchestrator build {framework.name} --variant {variant.name}`)")
            return tag
        log(f"{tag} was built from other workload sources than this checkout's: rebuilding it")
    if pull:
        pull_image(client, tag, log=log)
    else:
        build(client, framework, variant, options, log=log)
    return tag


def push_image(client, source: str, target: str, *, log: Log = print) -> str:
    """Tag `source` as `target` and push it; returns the registry digest (sha256:...)."""
    import docker

    try:
        image = client.images.get(source)
    except docker.errors.ImageNotFound:
        raise UserError(f"image {source} is not here; build it first: python -m orchestrator build") from None
    repository, _, tag = target.rpartition(":")
    image.tag(repository, tag)
    log(f"pushing {target}")
    digest = None
    try:
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise UserError(f"pushing {target} failed: {chunk['error'].strip()}; "
                                f"{_registry_hint(target)}")
            digest = (chunk.get("aux") or {}).get("Digest", digest)
    except (UserError, docker.errors.APIError) as error:
        if target != source:
            client.images.remove(target, noprune=True)  # leave no tag behind for a push that failed
        if isinstance(error, UserError):
            raise
        raise UserError(f"pushing {target} failed: {_explain(error)}; {_registry_hint(target)}") from error
    if not digest:
        raise UserError(f"pushing {target} gave no digest; {_registry_hint(target)}")
    log(f"pushed {target} as {digest}")
    return digest


def pull_image(client, reference: str, *, log: Log = print):
    import docker

    log(f"pulling {reference}")
    try:
        return client.images.pull(reference)
    except docker.errors.NotFound:
        raise UserError(f"{reference} is not in the registry; build and push it first "
                        "(python -m orchestrator build ... then push --registry ...)") from None
    except docker.errors.APIError as error:
        raise UserError(f"pulling {reference} failed: {_explain(error)}; {_registry_hint(reference)}") from error


def publish(client, framework: Framework, variant: Variant, options: BuildOptions, registry: str, *,
            log: Log = print) -> dict:
    """Build (the same context as `build`), push to `registry`, and return what the lock records,
    read back from the registry: the digest it answers for the pushed manifest and its platform,
    and the labels the image carries (what it was built from: image_lock.LABELLED_FIELDS)."""
    from dataclasses import replace

    image = build(client, framework, variant, replace(options, registry=None), log=log)
    target = image_tag(framework, variant, registry)
    digest = push_image(client, image_tag(framework, variant), target, log=log)
    repository = image_repository(framework.name, registry)
    try:
        answer = client.images.get_registry_data(f"{repository}@{digest}")
    except Exception as error:  # noqa: BLE001 - any failure to read it back means: not confirmed
        raise UserError(f"{repository}@{digest}: pushed, but the registry does not answer for it "
                        f"({_explain(error)}); {_registry_hint(target)}") from None
    if answer.id != digest:
        raise UserError(f"{target}: the registry answers {answer.id} for the digest {digest} the push returned; "
                        "not recorded")
    platforms = answer.attrs.get("Platforms") or [{"os": image.attrs.get("Os"),
                                                   "architecture": image.attrs.get("Architecture")}]
    platform = "/".join(part for part in (platforms[0].get("os"), platforms[0].get("architecture"),
                                          platforms[0].get("variant")) if part)
    return {"repository": repository.rsplit("/", 1)[1], "tag": target.rsplit(":", 1)[1], "digest": digest,
            "platform": platform, "labels": image.labels or {}}


def image_digest(image) -> str | None:
    digests = image.attrs.get("RepoDigests") or []
    return digests[0] if digests else None


# --- helpers --------------------------------------------------------------------------------------

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


def _explain(error) -> str:
    text = getattr(error, "explanation", None) or str(error)
    return " ".join(str(text).split())[:300]


def _registry_hint(reference: str) -> str:
    registry = reference.split("/")[0] if "/" in reference else "docker.io"
    return f"is the registry {registry} running and reachable (check --registry)?"


