"""The one error the data loaders raise, and the one-line wording of what caused it."""
import urllib.error


class DataError(Exception):
    """An expected data problem (missing, corrupt, unsafe); the one-line message names the fix."""


def describe(error: BaseException) -> str:
    """A caught error as one short line for a DataError's message."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return one_line(str(error.reason))
    return one_line(f"{type(error).__name__}: {error}")


def one_line(text: str) -> str:
    return " ".join(text.split())
