"""What a number typed on the command line may be: ASCII digits (and, where a fraction is
allowed, a decimal point and an exponent), with spaces around it at most; nothing else.

Python's own `int()` and `float()` take much more: Unicode digits (`٣`, `１２`), underscores
(`1_000`), signs, `nan` and `inf`, and `str.isdigit()` takes `²`, which `int()` then refuses with a
ValueError. Every numeric option reads its text here instead (docs/RUN-GUARANTEES.md, bad input),
so what a user typed is one plain number, or it is refused in one line.
"""
from __future__ import annotations

import math
import re

_WHOLE = re.compile(r"\s*([0-9]+)\s*", re.ASCII)
_DECIMAL = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*", re.ASCII)
# Significant digits beyond every range an option has, and far below int()'s own limit (4300
# digits), which would otherwise raise on a number a script pasted a thousand digits of.
MOST_DIGITS = 30
# HOST:PORT: a host name or IPv4 address, or an IPv6 address in brackets.
_ADDRESS = re.compile(r"\s*([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]+)\s*", re.ASCII)
LARGEST_PORT = 65535


def whole_number(text: str, low: int, high: int) -> int | None:
    """`text` as a whole number from `low` to `high`; None when it is no such number."""
    match = _WHOLE.fullmatch(text)
    if not match or len(match[1].lstrip("0")) > MOST_DIGITS:
        return None
    value = int(match[1])
    return value if low <= value <= high else None


def decimal_number(text: str) -> float | None:
    """`text` as a finite number (`1e999` is none); None when it is no such number."""
    match = _DECIMAL.fullmatch(text)
    if not match:
        return None
    value = float(match[1])
    return value if math.isfinite(value) else None


def host_and_port(address: str) -> tuple[str, int] | None:
    """HOST:PORT as (host, port), the port from 1 to 65535; None when it is not that."""
    match = _ADDRESS.fullmatch(address)
    if not match:
        return None
    port = whole_number(match[2], 1, LARGEST_PORT)
    return (match[1], port) if port is not None else None
