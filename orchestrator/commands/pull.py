"""`pull`: fetch the published images a reproduction uses, by the digests images.lock pins."""
from __future__ import annotations

import argparse

from orchestrator.images import engine_errors, lock as image_lock
from orchestrator.commands import common_args
from orchestrator.commands._shared import console

HELP = "pull published images by images.lock's digests (default registry, or --registry)"
ORDER = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser, required=True)
    common_args.add_lock_registry(parser, verb="pull from")


def main(args: argparse.Namespace) -> int:
    pull_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry, lock=args.lock)
    return 0


def pull_images(*, frameworks: list[str], variants: list[str] | None, registry: str | None = None,
                lock=None) -> list[str]:
    """Pull each selected image by its lock entry's digest and check it; returns the references.
    A stale entry (built from other workload sources than this checkout's) is reported."""
    from orchestrator.backends import docker as docker_backend

    selected = common_args.selected_variants(frameworks, variants)
    entries = image_lock.read(lock)
    locked = [(framework, variant, image_lock.entry_for(entries, framework, variant, lock))
              for framework, variant in selected]  # every entry is there before anything is pulled
    client = docker_backend.connect()
    pulled = []
    for framework, variant, entry in locked:
        with engine_errors("pulling images"):
            image = image_lock.pull(client, entry, registry, log=console.print)
        reference = entry.reference(image_lock.registry(registry))
        console.print(f"pulled {reference} (verified: {entry.framework}/{entry.variant}, revision "
                      f"{entry.source_revision[:12]}, {entry.platform}; image {image.short_id})")
        why = image_lock.stale(entry, framework, variant)
        if why:
            console.print(f"[yellow]warning:[/yellow] {why}")
        pulled.append(reference)
    return pulled
