"""`pull`: fetch images from a registry instead of building them."""
from __future__ import annotations

import argparse

from orchestrator import images
from orchestrator.commands import common_args
from orchestrator.commands._shared import console

HELP = "pull images from --registry"
ORDER = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser, required=True)
    common_args.add_registry_target(parser)


def main(args: argparse.Namespace) -> int:
    pull_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry)
    return 0


def pull_images(*, frameworks: list[str], variants: list[str] | None, registry: str) -> list[str]:
    """Pull each selected image from `registry`; returns the image IDs."""
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    pulled = []
    for framework, variant in common_args.selected_variants(frameworks, variants):
        image = images.pull_image(client, images.image_tag(framework, variant, registry), log=console.print)
        console.print(f"pulled {images.image_digest(image) or image.id}")
        pulled.append(image.id)
    return pulled
