"""The one error type for expected failures, caught once in ``python -m orchestrator``'s main."""


class UserError(Exception):
    """An expected failure; its message names the fix."""


class CannotRunHere(UserError):
    """This host cannot provide what a cell needs (a base image it has not and cannot pull): the
    backend records the cell as unsupported with this message, which names the fix, and goes on."""
