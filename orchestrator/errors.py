"""The one error type for expected failures, caught once in ``python -m orchestrator``'s main."""


class UserError(Exception):
    """An expected failure; its message names the fix."""
