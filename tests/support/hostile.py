"""Hostile variants of valid inputs, for tests/test_hostile_inputs.py.

Each strategy starts from a VALID document (a run.json, a matrix file, an images.lock, a cell
document) and breaks it the ways a damaged, foreign or malicious file is broken: bytes flipped,
the file cut short, bytes spliced in (not UTF-8), a value swapped for one of another type, a key
dropped or renamed, a value nested thousands of levels deep, a huge string or list, NaN and
Infinity. What a reader must do with any of them (docs/RUN-GUARANTEES.md, the trust model):
accept it, or refuse it in one line that names the fix.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st

ROOT = Path(__file__).resolve().parents[2]

# 300 cases per reader keeps CI quick; ROSETTA_HOSTILE_EXAMPLES=5000 explores further.
EXAMPLES = int(os.environ.get("ROSETTA_HOSTILE_EXAMPLES", "300"))
HOSTILE = settings(max_examples=EXAMPLES, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                          HealthCheck.large_base_example, HealthCheck.function_scoped_fixture])

# A refusal is one line a person reads: a message that echoes a megabyte of the hostile value is
# no clearer than a traceback.
LONGEST_MESSAGE = 2000
HUGE = 1 << 20  # characters: a string far beyond any name or path
DEEP = 5000  # levels: past Python's recursion limit (1000)


def assert_one_line(message: str, what: str = "") -> str:
    """`message` itself, once it is found to be one short line."""
    lines = str(message).splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"{what}: not one line: {str(message)[:400]!r}"
    assert len(message) <= LONGEST_MESSAGE, f"{what}: {len(message)} characters: {str(message)[:400]!r}..."
    return str(message)


def read_or_refused(path: Path, data: bytes, reader, refusal: type[Exception], what: str) -> str | None:
    """`data` written to `path` and handed to `reader`: None when it was read, else the refusal's
    message, once it is found to be one short line (docs/RUN-GUARANTEES.md: bad input gets one line)."""
    path.write_bytes(data)
    try:
        reader(path)
    except refusal as error:
        return assert_one_line(str(error), what)
    return None


def planted_and_refused(folder: Path, plant, valid: str, name: str, read, refusal: type[Exception],
                        expected: str) -> str:
    """`plant` makes `folder/name` (a link to the valid file it finds beside it, a FIFO, a folder,
    a document of the wrong shape...); `read` refuses it with `refusal` matching `expected`, in one
    short line, which is returned."""
    (folder / ("elsewhere" + Path(name).suffix)).write_text(valid)
    plant(folder / name)
    with pytest.raises(refusal, match=expected) as refused:
        read(folder / name)
    return assert_one_line(str(refused.value))


# --- values of every type --------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_AWKWARD_TEXT = st.sampled_from(["", " ", "\n", "a\nb", "\x00", "\u2028", "../../etc/passwd", "/", "..", "٣",
                                 "²", "NaN", "-1", "1e400", "\u202e", "a" * 300, "x" * HUGE])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=2 ** 63),
                    st.integers(max_value=-(2 ** 63)), st.floats(allow_nan=True, allow_infinity=True),
                    _TEXT, _AWKWARD_TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=8)
# TOML has no null, and has dates and times
TOML_SCALARS = st.one_of(st.booleans(), st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
                         st.floats(allow_nan=True, allow_infinity=True), _TEXT, _AWKWARD_TEXT,
                         st.datetimes(), st.dates(), st.times())
TOML_VALUES = st.recursive(TOML_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=8)


# --- paths into a document -------------------------------------------------------------------------

def paths(document, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) to a value in `document`, the root's () first."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths(value, prefix + (key,))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += paths(value, prefix + (index,))
    return found


def replaced(document, path: tuple, value):
    if not path:
        return value
    copied = copy.deepcopy(document)
    holder = copied
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return copied


def dropped(document, path: tuple):
    copied = copy.deepcopy(document)
    holder = copied
    for step in path[:-1]:
        holder = holder[step]
    del holder[path[-1]]
    return copied


def renamed(document, path: tuple, key: str):
    """The dict key at the end of `path` renamed to `key` (its value kept)."""
    copied = copy.deepcopy(document)
    holder = copied
    for step in path[:-1]:
        holder = holder[step]
    holder[key] = holder.pop(path[-1])
    return copied


# --- writing documents (hostile values included) ---------------------------------------------------

def json_text(document) -> str:
    return json.dumps(document, allow_nan=True)  # NaN and Infinity: what a foreign writer may emit


def _toml_string(text: str) -> str:
    escaped = []
    for character in text:
        if character in '"\\':
            escaped.append("\\" + character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'


def toml_value(value) -> str:
    """`value` as TOML (inline tables and arrays); None, which TOML lacks, as an empty table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_string(str(key))} = {toml_value(item)}" for key, item in value.items()) + " }"
    return "{}"


def toml_text(document) -> str:
    """A top-level table as `key = value` lines; anything else as it is (not a TOML document)."""
    if not isinstance(document, dict):
        return toml_value(document)
    return "".join(f"{_toml_string(str(key))} = {toml_value(value)}\n" for key, value in document.items())


# --- the mutations ---------------------------------------------------------------------------------

_SENTINEL = "\x01rosetta-hostile-sentinel\x01"


def _nested_text(depth: int, kind: str, language: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if language == "json":
        return '{"a": ' * depth + "1" + "}" * depth
    return "{ a = " * depth + "1" + " }" * depth


@st.composite
def hostile_document(draw, document, language: str = "json") -> bytes:
    """The bytes of `document` (JSON or TOML) broken one way or another."""
    write = json_text if language == "json" else toml_text
    values = VALUES if language == "json" else TOML_VALUES
    valid = write(document).encode()
    where = paths(document)
    inner = where[1:] or where
    kind = draw(st.sampled_from(["swap", "swap", "drop", "rename", "deep", "huge", "long list", "flip",
                                 "truncate", "splice", "constant", "top"]))
    if kind == "swap":
        return write(replaced(document, draw(st.sampled_from(where)), draw(values))).encode()
    if kind == "drop" and len(where) > 1:
        return write(dropped(document, draw(st.sampled_from(inner)))).encode()
    if kind == "rename":
        keyed = [path for path in inner if path and isinstance(_at(document, path[:-1]), dict)]
        if keyed:
            return write(renamed(document, draw(st.sampled_from(keyed)), draw(_TEXT | _AWKWARD_TEXT))).encode()
    if kind == "deep":
        nested = _nested_text(draw(st.integers(1, DEEP)), draw(st.sampled_from(["list", "table"])), language)
        return _with_raw(document, draw(st.sampled_from(where)), nested, language).encode()
    if kind == "huge":
        size = draw(st.sampled_from([4096, 65536, HUGE, 2 * HUGE]))
        return write(replaced(document, draw(st.sampled_from(where)), draw(st.sampled_from("x\n٣")) * size)).encode()
    if kind == "long list":
        item = draw(st.sampled_from(["cnn", "cpu", "fp32", 0, "on"]))
        return write(replaced(document, draw(st.sampled_from(where)), [item] * draw(st.sampled_from([1000, 100000])))).encode()
    if kind == "flip" and valid:
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] ^= draw(st.integers(1, 255))
        return bytes(data)
    if kind == "truncate":
        return valid[:draw(st.integers(0, max(0, len(valid) - 1)))]
    if kind == "splice":
        position = draw(st.integers(0, len(valid)))
        return valid[:position] + draw(st.binary(min_size=1, max_size=16)) + valid[position:]
    if kind == "constant":
        constant = draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "inf", "1e999", "9" * 5000]))
        return _with_raw(document, draw(st.sampled_from(where)), constant, language).encode()
    if kind == "top":
        return write(draw(values)).encode()
    return valid


def _with_raw(document, path: tuple, raw: str, language: str) -> str:
    """`document` written with the value at `path` replaced by `raw` text, written as it is."""
    token = json.dumps(_SENTINEL) if language == "json" else _toml_string(_SENTINEL)
    write = json_text if language == "json" else toml_text
    return write(replaced(document, path, _SENTINEL)).replace(token, raw)


def _at(document, path: tuple):
    for step in path:
        document = document[step]
    return document


# --- numbers as a user may type them ---------------------------------------------------------------

_UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩۳३০௩３𝟑²³¹"


@st.composite
def hostile_number(draw, valid: str) -> str:
    """A command-line number: `valid` bent (Unicode digits, signs, spaces, exponents, NaN, a
    thousand digits), or any text at all."""
    kind = draw(st.sampled_from(["unicode digit", "affix", "special", "huge", "text", "digits", "decimal"]))
    if kind == "unicode digit":
        position = draw(st.integers(0, len(valid) - 1))
        return valid[:position] + draw(st.sampled_from(_UNICODE_DIGITS)) + valid[position + 1:]
    if kind == "affix":
        prefix = draw(st.sampled_from(["", "+", "-", " ", "\t", "0", "0x", "\u00a0", "--"]))
        suffix = draw(st.sampled_from(["", " ", "\n", "_0", ".0", "e3", "j", "\u00a0", "m", "g", "kb"]))
        return prefix + valid + suffix
    if kind == "special":
        return draw(st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-0", "0", "", " ",
                                     "1_000", "0b11", "0o7", "1e-400", "None", "none", "NONE", "true"]))
    if kind == "huge":
        return draw(st.sampled_from(["9" * 25, "9" * 5000, "1" + "0" * 400, "4294967296", "18446744073709551616"]))
    if kind == "digits":
        return draw(st.text("0123456789", min_size=1, max_size=24))
    if kind == "decimal":
        return draw(st.from_regex(r"[0-9]{1,8}\.[0-9]{0,8}", fullmatch=True))
    return draw(st.text(max_size=24))


# --- the real command line -------------------------------------------------------------------------

def run_cli(arguments: list[str], *, cwd: Path, module: str = "orchestrator", timeout: float = 120,
            env: dict | None = None) -> subprocess.Popen:
    """`python -m <module> ARGS` started in a subprocess (several run at once: see `finish`)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", **(env or {})}
    process = subprocess.Popen([sys.executable, "-m", module, *arguments], cwd=cwd, env=environment,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", start_new_session=True)
    process.timeout = timeout
    return process


def finish(process: subprocess.Popen) -> tuple[int, str]:
    """The exit code and stderr; a process still running at its time limit is killed (exit -9)."""
    try:
        _, err = process.communicate(timeout=process.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        _, err = process.communicate()
        return -9, f"still running after {process.timeout:g} s; {err[-2000:]}"
    return process.returncode, err


def assert_refused_in_one_line(code: int, err: str, what: str, *, prefix: str = "error:") -> str:
    """Exit 2, no traceback, and the refusal one line starting with `prefix` (the last one printed)."""
    assert "Traceback" not in err, f"{what}: {err[-3000:]}"
    assert code == 2, f"{what}: exit {code}: {err[-2000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(prefix), f"{what}: {err[-2000:]}"
    return lines[-1]


def run_all(cases: dict[str, list[str]], cwd: Path, **options) -> dict[str, tuple[int, str]]:
    """Each case's command line run at once (they are independent), then each one's (exit, stderr)."""
    started = {name: run_cli(arguments, cwd=cwd, **options) for name, arguments in cases.items()}
    return {name: finish(process) for name, process in started.items()}
