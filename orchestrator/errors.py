"""The expected failures of every command, each with its exit code, caught once in
``python -m orchestrator``'s main; and the one way an error becomes a one-line message."""
from __future__ import annotations

EXIT_CELLS_FAILED = 1  # the command ran, but a cell (or a check) failed
EXIT_USER_ERROR = 2  # a UserError: the message names the fix
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP


class UserError(Exception):
    """An expected failure; its message names the fix."""

    exit_code = EXIT_USER_ERROR


class CannotRunHere(UserError):
    """This host cannot provide what a cell needs (a base image it has not and cannot pull): the
    backend records the cell as unsupported with this message, which names the fix, and goes on."""


class Interrupted(UserError):
    """Ctrl-C, SIGTERM or SIGHUP stopped a run; the finished cells are kept for --resume."""

    exit_code = EXIT_INTERRUPTED


class ClusterLost(UserError):
    """The cluster a dispatching backend ran cells on stopped answering: the run ends, the finished
    cells kept. Exit 1, as for a failed cell: the command itself was right."""

    exit_code = EXIT_CELLS_FAILED


def printable(text: str) -> str:
    """`text` with every line break and control character written as its escape: one printable line
    (what a cell, a node or a file handed over may hold anything)."""
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def first_line(error: BaseException | str | None, limit: int = 300) -> str:
    """An error (or a text) as one short, printable line: a Docker API error's own explanation when
    it gave one, else the first non-empty line, else the error's type; cut at `limit` with an ellipsis."""
    if isinstance(error, BaseException):
        text = str(getattr(error, "explanation", None) or error).strip()
        fallback = type(error).__name__
    else:
        text, fallback = (error or "").strip(), ""
    line = printable(text.splitlines()[0].strip()) if text else fallback
    return line if len(line) <= limit else line[: limit - 1] + "…"
