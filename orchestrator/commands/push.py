"""`push`: tag local images with a registry's name and push them there."""
from __future__ import annotations

import argparse

from orchestrator import images
from orchestrator.commands import common_args
from orchestrator.commands._shared import console

HELP = "tag and push images to --registry"
ORDER = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser, required=True)
    common_args.add_registry_target(parser)


def main(args: argparse.Namespace) -> int:
    push_images(frameworks=args.frameworks, variants=args.variants, registry=args.registry)
    return 0


def push_images(*, frameworks: list[str], variants: list[str] | None, registry: str) -> list[str]:
    """Push each selected image under `registry`; returns the pushed references."""
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    with images.engine_errors("pushing images"):
        return [images.push_image(client, images.image_tag(framework, variant),
                                  images.image_tag(framework, variant, registry), log=console.print)
                for framework, variant in common_args.selected_variants(frameworks, variants)]
