"""The Docker engine's part: build (and what a build would send), pull, push, publish."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from rich.markup import escape

from orchestrator.errors import CannotRunHere, UserError, first_line
from orchestrator.frameworks import Framework, Variant
from orchestrator.images import labels, wheelhouse
from orchestrator.images.context import (BuildOptions, Log, build_arguments, build_context, context_files,
                                         image_repository, image_tag)

LOCAL_BASE_SCRIPT = "images/base/make-local-base.sh"


def dry_run(framework: Framework, variant: Variant, options: BuildOptions) -> str:
    """What a build would send: tag, base image, labels, the Dockerfile and the context's files."""
    warnings: list[str] = []
    files = context_files(framework, variant, options, warn=warnings.append)
    lines = [f"# warning: {warning}" for warning in warnings]
    lines += [f"# image: {image_tag(framework, variant, options.registry)}"]
    lines += [f"# build argument {name}={value}"
              for name, value in build_arguments(variant, options, files["Dockerfile"]).items()]
    lines += [f"# label {key}={value}" for key, value in labels.image_labels(framework, variant).items()]
    lines += ["", files["Dockerfile"].decode().rstrip(), "", "# build context:"]
    for name in sorted(files):
        source = files[name]
        if isinstance(source, wheelhouse.LocalWheel):
            size = source.size
        else:
            size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
        lines.append(f"#   {size:>12,} B  {name}")
    return "\n".join(lines)


@contextlib.contextmanager
def engine_errors(doing: str):
    """Around a command's calls to the engine: an engine that stops answering midway (stopped, its
    socket closed, a call past its time limit), or one that refuses a call no step explains, is one
    line naming the fix and exit 2, never a traceback (RUN-GUARANTEES.md: bad input). What finished
    before it stays: built images stay built, and publish has rewritten the lock after each image."""
    import docker
    import requests

    try:
        yield
    except requests.exceptions.RequestException as error:
        raise UserError(f"the Docker engine stopped answering while {doing} ({first_line(error, 200)}); check "
                        "that it runs (`docker info`), then run the command again") from error
    except docker.errors.DockerException as error:
        raise UserError(f"the Docker engine refused a call while {doing}: {_explain(error)}") from error


def build(client, framework: Framework, variant: Variant, options: BuildOptions, *, log: Log = print):
    """Build one image, streaming its steps; the full log is kept on disk."""
    import docker

    tag = image_tag(framework, variant, options.registry)
    files = context_files(framework, variant, options, warn=lambda warning: log(f"warning: {escape(warning)}"))
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
                                      labels=labels.image_labels(framework, variant))
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
    and the labels the image carries (what it was built from: labels.LOCK_LABELS)."""
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


def _explain(error) -> str:
    text = getattr(error, "explanation", None) or str(error)
    return " ".join(str(text).split())[:300]


def _registry_hint(reference: str) -> str:
    registry = reference.split("/")[0] if "/" in reference else "docker.io"
    return f"is the registry {registry} running and reachable (check --registry)?"
