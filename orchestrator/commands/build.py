"""`build`: build framework images (each framework's default variant, the named ones, or all)."""
from __future__ import annotations

import argparse

from orchestrator import images
from orchestrator.commands import common_args
from orchestrator.commands._shared import console

HELP = "build framework images (default variant, or --variant V / all)"
ORDER = 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_args.add_image_selection(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the rendered Dockerfile and the context's files")
    common_args.add_build_options(parser)


def main(args: argparse.Namespace) -> int:
    build_images(common_args.build_options(args), frameworks=args.frameworks, variants=args.variants,
                 dry_run=args.dry_run)
    return 0


def build_images(options: images.BuildOptions = images.BuildOptions(), *, frameworks: list[str] | None = None,
                 variants: list[str] | None = None, dry_run: bool = False) -> list[str]:
    """Build the selected images and return their IDs; with dry_run print what would be sent instead."""
    selected = common_args.selected_variants(frameworks, variants)
    if dry_run:
        for framework, variant in selected:
            print(images.dry_run(framework, variant, options))
        return []
    from orchestrator.backends import docker as docker_backend

    client = docker_backend.connect()
    with images.engine_errors("building images"):
        return [images.build(client, framework, variant, options, log=console.print).id
                for framework, variant in selected]
