"""Every numeric option is parsed to the end: any text given to it is a valid value or refused in
one line, exit 2 (docs/RUN-GUARANTEES.md, bad input).

Property-based: each option gets hypothesis's text and numbers bent as a user or a script may bend
them (tests/support/hostile.py: Unicode digits, which `str.isdigit()` and `int()` take; signs, spaces,
exponents, `nan`, `1_000`, a thousand digits), through the real parser and the conversion the
command does (its work stubbed: no cell runs), and the outcome is checked against this file's own
reading of the option's rule: a number is ASCII digits (with a decimal point and exponent where the
option takes a fraction), nothing else, and in the option's range. A few go through
`python -m orchestrator` in a subprocess.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import pytest
from hypothesis import given, strategies as st

from support import hostile
from support.hostile import HOSTILE, assert_one_line, assert_refused_in_one_line, finish, run_cli
from orchestrator.errors import UserError

# --- this file's reading of each option's rule ----------------------------------------------------------

_WHOLE = re.compile(r"\s*([0-9]+)\s*", re.ASCII)
_DECIMAL = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*", re.ASCII)


def whole(low: int, high: int) -> Callable[[str], int | None]:
    def expected(text: str) -> int | None:
        match = _WHOLE.fullmatch(text)
        if not match or len(match[1].lstrip("0")) > 30:
            return None
        value = int(match[1])
        return value if low <= value <= high else None
    return expected


def decimal(accept: Callable[[float], bool]) -> Callable[[str], float | None]:
    def expected(text: str) -> float | None:
        match = _DECIMAL.fullmatch(text)
        if not match:
            return None
        value = float(match[1])
        return value if math.isfinite(value) and accept(value) else None
    return expected


def or_none(rule: Callable[[str], object]) -> Callable[[str], object]:
    """The container limits also take `none` (no limit); the value is then None, hence NONE."""
    return lambda text: NONE if text.strip().lower() == "none" else rule(text)


NONE = object()
_SIZE = re.compile(r"\s*([0-9]+)([bkmg]?)b?\s*", re.ASCII | re.IGNORECASE)


def size(text: str) -> str | None:
    match = _SIZE.fullmatch(text)
    if not match or len(match[1].lstrip("0")) > 30:
        return None
    number, unit = int(match[1]), match[2].lower()
    in_bytes = number * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    return f"{number}{unit}" if 6 << 20 <= in_bytes < 1 << 62 else None


_GPU = re.compile(r"[0-9]{1,4}|(?:GPU|MIG)-[A-Za-z0-9-]{1,80}(?:/[0-9]{1,4}/[0-9]{1,4})?", re.ASCII)


def gpus(text: str) -> str | None:
    items = [item.strip() for item in text.split(",")]
    if not all(_GPU.fullmatch(item) for item in items):
        return None
    return ",".join(items)


_ADDRESS = re.compile(r"\s*([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]+)\s*", re.ASCII)


def address(text: str) -> str | None:
    match = _ADDRESS.fullmatch(text)
    if not match or len(match[2].lstrip("0")) > 5 or not 1 <= int(match[2]) <= 65535:
        return None
    return f"{match[1]}:{int(match[2])}"


# --- the options, and where each one's value arrives -----------------------------------------------------

@dataclass(frozen=True)
class Option:
    commands: tuple[str, ...]
    flag: str
    expected: Callable[[str], object]  # the value the command must get, or None: refused
    arrives: Callable[[dict], object]  # the value where the command received it
    valid: str  # a valid value, which the strategies bend


def _backend(name: str) -> Callable[[dict], object]:
    return lambda call: getattr(call["backend"], name)


OPTIONS = [
    Option(("run-matrix",), "--repeat", whole(1, 100), lambda call: call["selection"].repeat, "3"),
    Option(("run-matrix",), "--seed", whole(0, 2 ** 32 - 1), lambda call: call["selection"].seed, "4294967295"),
    Option(("run-matrix", "parity"), "--timeout", decimal(lambda value: 0 < value <= 604800),
           lambda call: call["settings"].timeout, "3600"),
    Option(("run-matrix",), "--idle-window", decimal(lambda value: 0 <= value <= 60),
           lambda call: call["settings"].idle_window_s, "2.5"),
    Option(("run-matrix", "parity"), "--cpu-cells-per-node", whole(1, 1024), _backend("cpu_cells_per_node"), "2"),
    Option(("run-matrix", "parity"), "--max-retries", whole(0, 100), _backend("max_retries"), "2"),
    Option(("run-matrix", "parity"), "--container-memory", or_none(size), _backend("container_memory"), "16g"),
    Option(("run-matrix", "parity"), "--container-pids", or_none(whole(1, 4_194_304)), _backend("container_pids"),
           "4096"),
    Option(("run-matrix", "parity"), "--gpus", gpus, _backend("gpus"), "0,1"),
    Option(("run-matrix", "parity"), "--ray-address", address, _backend("ray_address"), "10.0.0.5:6379"),
    Option(("compare",), "--factor", decimal(lambda value: value >= 1), lambda call: call["factor"], "1.1"),
]
# What a user, a script or a locale may type for a number.
TRICKY = ["1e999", "nan", "NaN", "inf", "-inf", "-0", "0", "+5", "0x10", "1_000", "１２", "٣", "²", "³", "𝟑", "9" * 5000,
          "9" * 4300, "18446744073709551616", " 5 ", "\t5", "5\n", "\u00a05", "5\u2028", "", " ", "5.", ".5", "5e0",
          "1e-400", "0.0", "none", "NONE", " none ", "16G", "16gb", "6m", "5m", "0,1", "0,,1", "GPU-8932f937-d72c", "MIG-GPU-1/0/0",
          "host:6379", "host:²", "host:０", "host:65536", "[::1]:6379", ":6379", "host:", "a b:1", "\x00", "5\x00"]


class _Called(Exception):
    """The command's work, stubbed: raised with what it was given, so nothing runs."""

    def __init__(self, call: dict):
        super().__init__("called")
        self.call = call


def _record(*args, **kwargs):
    names = {0: "selection", 1: "backend", 2: "settings"}
    raise _Called({**{names.get(index, index): value for index, value in enumerate(args)}, **kwargs})


@pytest.fixture(scope="module")
def command_line():
    """`python -m orchestrator`'s parser and each command's own conversion, the work stubbed."""
    from orchestrator.__main__ import build_parser
    from orchestrator.commands import compare, parity, run_matrix

    patch = pytest.MonkeyPatch()
    patch.setattr(run_matrix, "run_matrix", _record)
    patch.setattr(parity, "parity_check", lambda backend, settings, **kwargs: _record(None, backend, settings, **kwargs))
    patch.setattr(compare, "run_compare", lambda base, new, **kwargs: _record(base, new, **kwargs))
    parser = build_parser()

    def run(argv: list[str]) -> tuple[dict | None, str | None]:
        """(what the command's work was given, None), or (None, the one line it was refused with)."""
        try:
            args = parser.parse_args(argv)
            args.run(args)
        except _Called as called:
            return called.call, None
        except UserError as error:  # what __main__.main prints as `error: ...`, exit 2
            return None, str(error)
        raise AssertionError(f"{argv}: neither ran nor was refused")

    yield run
    patch.undo()


def _arguments(command: str, option: Option, text: str) -> list[str]:
    base = ["compare", "base", "new"] if command == "compare" else [command, "--backend", "local"]
    return [*base, f"{option.flag}={text}"]  # `=`: a value starting with '-' is the option's, not a flag


def check(run, command: str, option: Option, text: str) -> None:
    call, refusal = run(_arguments(command, option, text))
    expected = option.expected(text)
    if expected is None:
        assert call is None, f"{option.flag} {text[:80]!r} was accepted as {option.arrives(call)!r}"
        assert option.flag in assert_one_line(refusal, option.flag), refusal
        return
    assert refusal is None, f"{option.flag} {text[:80]!r} was refused: {refusal}"
    value = option.arrives(call)
    assert value == (None if expected is NONE else expected), f"{option.flag} {text!r}: {value!r} != {expected!r}"
    assert type(value) is type(None if expected is NONE else expected), f"{option.flag} {text!r}: {value!r}"


@pytest.mark.parametrize("option", OPTIONS, ids=[option.flag for option in OPTIONS])
def test_each_options_valid_value_and_tricky_numerals(command_line, option):
    assert option.expected(option.valid) is not None
    for command in option.commands:
        for text in [option.valid, *TRICKY]:
            check(command_line, command, option, text)


@HOSTILE
@given(data=st.data())
def test_any_text_for_a_numeric_option_is_a_valid_value_or_refused_in_one_line(command_line, data):
    option = data.draw(st.sampled_from(OPTIONS))
    command = data.draw(st.sampled_from(option.commands))
    text = data.draw(hostile.hostile_number(option.valid) | st.text(max_size=30) | st.sampled_from(TRICKY))
    check(command_line, command, option, text)


def test_numeric_options_refused_through_the_command_line(tmp_path):
    """The real `python -m orchestrator`: exit 2, one line, no traceback."""
    cases = {"--cpu-cells-per-node ²": ["run-matrix", "--cpu-cells-per-node", "²"],
             "--container-pids ²": ["run-matrix", "--backend", "local", "--container-pids", "²"],
             "--container-memory of 5000 digits": ["parity", "--backend", "local", "--container-memory", "9" * 5000],
             "--ray-address host:²": ["run-matrix", "--backend", "ray", "--ray-address", "127.0.0.1:²"],
             "--factor nan": ["compare", str(tmp_path), str(tmp_path), "--factor", "nan"],
             "--repeat ٣": ["run-matrix", "--repeat", "٣"]}
    started = {name: run_cli(arguments, cwd=tmp_path, timeout=60) for name, arguments in cases.items()}
    for name, process in started.items():
        code, err = finish(process)
        assert_refused_in_one_line(code, err, name)
