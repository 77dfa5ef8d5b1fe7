"""`publish` (maintainers): build, push, and rewrite images.lock from what the registry returned."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from orchestrator import host, images
from orchestrator.images import lock as image_lock
from orchestrator.commands import common_args
from orchestrator.commands._shared import console
from orchestrator.errors import UserError

HELP = "build, push and pin images in images.lock (maintainers; the release workflow runs it)"
ORDER = 35


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser)
    common_args.add_lock_registry(parser, verb="push to")
    parser.add_argument("--allow-dirty", action="store_true", help="publish from a checkout with uncommitted "
                        "changes (the lock's source revision then names no commit: for a test registry only)")
    parser.add_argument("--merge-lock", nargs="+", type=Path, metavar="LOCK",
                        help="build nothing: take the entries of these lock files (each written by one publish, "
                        "e.g. the release workflow's jobs) into the lock")
    common_args.add_build_options(parser, registry=False)


def main(args: argparse.Namespace) -> int:
    if args.merge_lock:
        if args.frameworks or args.variants:
            raise UserError("--merge-lock builds nothing: leave out the framework names and --variant")
        merge_locks(args.merge_lock, lock=args.lock)
        return 0
    publish_images(common_args.build_options(args), frameworks=args.frameworks, variants=args.variants,
                   registry=args.registry, lock=args.lock, allow_dirty=args.allow_dirty)
    return 0


def publish_images(options: images.BuildOptions = images.BuildOptions(), *, frameworks: list[str] | None = None,
                   variants: list[str] | None = None, registry: str | None = None, lock=None,
                   allow_dirty: bool = False) -> list[image_lock.LockEntry]:
    """Build, push and pin each selected image; the lock is rewritten after each one, so an image
    published before a later one fails stays pinned."""
    selected = common_args.selected_variants(frameworks, variants)
    revision = host.git_revision()
    if not revision or (revision.endswith("-dirty") and not allow_dirty):
        raise UserError(f"publish records the source revision an image was built from, and this checkout's is "
                        f"{revision or 'unknown (not a git checkout)'}: commit first (or pass --allow-dirty for a "
                        "test registry)")
    target = image_lock.registry(registry)
    entries = image_lock.read(lock)
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    published = []
    for framework, variant in selected:
        with images.engine_errors("publishing images"):
            fields = images.publish(client, framework, variant, options, target, log=console.print)
        entry = image_lock.entry_from_labels(fields.pop("labels"), registry=target, published=image_lock.now(),
                                             **fields)
        entries[(framework.name, variant.name)] = entry
        path = image_lock.write(entries, lock)
        console.print(f"pinned {entry.reference()} in {path}")
        published.append(entry)
    return published


def merge_locks(sources: list[Path], *, lock=None) -> Path:
    """Each source's entries into the lock; for an image in several, the latest published wins."""
    entries = image_lock.read(lock)
    for source in sources:
        if not os.path.lexists(source):  # anything else there is image_lock.read's to refuse (a link, a FIFO)
            raise UserError(f"--merge-lock {source}: no such file")
        for key, entry in image_lock.read(source).items():
            if key not in entries or entry.published >= entries[key].published:
                entries[key] = entry
    path = image_lock.write(entries, lock)
    console.print(f"{path}: {len(entries)} pinned image(s)")
    return path
