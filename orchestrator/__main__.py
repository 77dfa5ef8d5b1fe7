"""Rosetta Bench command line: `python -m orchestrator <command> ...`.

Each command is a module in orchestrator/commands/ (its arguments, and a plain function that does
the work); this file only builds the parser from them and dispatches. Expected failures raise
UserError (orchestrator/errors.py), caught once in `main`: one line naming the fix, and the
error's own exit code (2; 130 for an interrupted run, 1 for a lost cluster).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from rich.markup import escape

from orchestrator import commands
from orchestrator.commands._shared import EXIT_INTERRUPTED, EXIT_USER_ERROR, console
from orchestrator.errors import UserError


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is a UserError like any other: one line, exit 2 (argparse
    would print its usage block first)."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m orchestrator",
                                     description="Rosetta Bench: the same models in every framework, measured alike.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks of errors")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb, module in commands.discover().items():
        command = subparsers.add_parser(verb, help=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UserError as error:
        console.print(f"[red]error:[/red] {escape(str(error))}")
        return EXIT_USER_ERROR
    try:
        return args.run(args)
    except UserError as error:  # Interrupted and ClusterLost too: each says its own exit code
        if args.verbose:
            traceback.print_exc()
        console.print(f"[red]error:[/red] {escape(str(error))}")
        return error.exit_code
    except KeyboardInterrupt:
        console.print("interrupted")
        return EXIT_INTERRUPTED


# `kill` (or a CI job's time limit) and a closed terminal or SSH session end a run as Ctrl-C does.
INTERRUPTING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _interrupt_on_signal(signum, frame) -> None:
    """SIGTERM or SIGHUP: stop as Ctrl-C does, so the running cell's process group or container is
    removed, its work folder too, and finished cells stay on disk for --resume. Further such
    signals are ignored from here on, so they cannot cut that clean-up short."""
    for number in INTERRUPTING_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    raise KeyboardInterrupt


def install_signal_handlers() -> None:
    for number in INTERRUPTING_SIGNALS:
        if signal.getsignal(number) != signal.SIG_IGN:  # `nohup` ignores SIGHUP on purpose: keep that
            signal.signal(number, _interrupt_on_signal)


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    install_signal_handlers()
    sys.exit(main())
