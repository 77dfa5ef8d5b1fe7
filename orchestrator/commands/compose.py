"""`python -m orchestrator compose`: write docker-compose.yml from the frameworks' metadata."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator import compose

ORDER = 45  # after pull: the images it names
HELP = "write docker-compose.yml from images/<fw>/metadata.toml (--check: exit 1 when the file differs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the file is not what the metadata renders")
    parser.add_argument("--file", type=Path, default=compose.COMPOSE_FILE, help="default: docker-compose.yml")


def main(args: argparse.Namespace) -> int:
    return update_compose_file(args.file, check=args.check)


def update_compose_file(path: Path, *, check: bool = False) -> int:
    """0 when the file is (now) current; 1 when --check finds it differs."""
    if check:
        if compose.is_current(path):
            print(f"{path} is current")
            return 0
        print(f"{path} differs from what images/*/metadata.toml renders; run `python -m orchestrator compose`",
              file=sys.stderr)
        return 1
    print(f"{'wrote' if compose.write(path) else 'unchanged:'} {path}")
    return 0
