"""The image a cell runs in: here already, pulled (by images.lock's digest where it pins one), or built."""
from __future__ import annotations

import threading

from rich.markup import escape

from orchestrator.errors import CannotRunHere, UserError
from orchestrator.frameworks import Framework, Variant
from orchestrator.images import labels, lock
from orchestrator.images.context import BuildOptions, Log, image_tag, sources_hash
from orchestrator.images.engine import build, pull_image


def ensure_image(client, framework: Framework, variant: Variant, options: BuildOptions, *, pull: bool = False,
                 log: Log = print) -> str:
    """The image for a cell, as a reference the engine knows: already here, pulled (with --pull:
    by images.lock's digest where the lock has an entry, else by tag with a warning), or built."""
    import docker

    if pull:
        entry = lock.read().get((framework.name, variant.name))
        if entry is not None:
            return lock.ensure_locked(client, entry, framework, variant, options.registry, log=log)
        log(f"warning: {framework.name}/{variant.name} has no entry in images.lock: pulled by tag, not pinned "
            f"(a maintainer pins it with `python -m orchestrator publish {framework.name} --variant {variant.name}`)")
    tag = image_tag(framework, variant, options.registry)
    try:
        existing = client.images.get(tag)
    except docker.errors.ImageNotFound:
        existing = None
    if existing is not None:
        built_from = labels.read(existing).get(labels.SOURCES_LABEL)
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


class CellImages:
    """A cell's image reference (its tag, or repository@digest when pulled by images.lock), each
    image checked (its sources digest, its lock entry) or built once per run, not again per cell;
    a failed build or pull is not retried for every cell of that image. A failure this host cannot
    mend (CannotRunHere) is said as "not run here", any other as an error. Cells that share the
    host (the parity check's, one thread each) ask one at a time: an image is built or pulled once,
    and never two at once."""

    def __init__(self, client, frameworks: dict[str, Framework], options: BuildOptions, *, pull: bool = False,
                 log: Log = print):
        self.client, self.frameworks, self.options, self.pull, self.log = client, frameworks, options, pull, log
        self.ready: dict[str, str] = {}  # tag -> the reference to run
        self.failures: dict[str, UserError] = {}
        self._lock = threading.Lock()

    def __call__(self, cell) -> str:
        with self._lock:
            return self._reference(cell)

    def _reference(self, cell) -> str:
        framework = self.frameworks[cell.framework]
        variant = framework.variant(cell.variant)
        tag = image_tag(framework, variant, self.options.registry)
        if tag in self.ready:
            return self.ready[tag]
        if tag not in self.failures:
            try:
                self.ready[tag] = ensure_image(self.client, framework, variant, self.options, pull=self.pull,
                                               log=self.log)
                return self.ready[tag]
            except UserError as error:
                self.failures[tag] = error
                said = "not run here:" if isinstance(error, CannotRunHere) else "[red]error:[/red]"
                self.log(f"{said} {escape(str(error))}")
        raise self.failures[tag]
