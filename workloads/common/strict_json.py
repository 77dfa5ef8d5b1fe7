"""JSON that came from elsewhere, parsed strictly: UTF-8, no NaN or Infinity, no number JSON writes
but no float holds (1e999), nesting capped; any other document refused with one short line.

The one parser of the documents a user or another machine hands over (run.json, images.lock, the
cell document; docs/RUN-GUARANTEES.md, the trust model). Standard library only (Python 3.6 and
newer: the images read the cell document with it).
"""
import json
import math


class JSONRefused(ValueError):
    """Why bytes are no JSON document that is read here: one short line, quoting nothing long."""


def loads(data, deepest: int):
    """The JSON value `data` (bytes, or text) holds, lists and objects nested at most `deepest`
    levels; JSONRefused otherwise. Read the bytes bounded first (safe_files.read_bytes_bounded):
    this parses all it is given."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as error:
        raise JSONRefused("not UTF-8 text (byte {})".format(error.start)) from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except RecursionError:  # Python's own parser recurses: thousands of levels end it
        raise JSONRefused("JSON nested too deeply") from None
    except ValueError as error:  # not JSON, NaN or Infinity, an integer of thousands of digits
        raise JSONRefused("not valid JSON ({})".format(" ".join(str(error).split())[:120])) from None
    if nesting_depth(value, deepest) > deepest:
        raise JSONRefused("JSON nested more than {} levels deep".format(deepest))
    return value


def _refuse_constant(name: str):
    raise ValueError("{} is no number JSON allows".format(name))


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON's own syntax, but no number a document can be rewritten with
        raise ValueError("{} is out of range".format(text[:20]))
    return value


def quoted(value, limit: int = 60) -> str:
    """A value from a document as a one-line refusal quotes it: a string or number short, with every
    line break and control character escaped (repr); a list or object by its kind."""
    if isinstance(value, str):
        return repr(value[:limit])
    if isinstance(value, (bool, int, float)) or value is None:
        return json.dumps(value)[:limit]
    return json_kind(value)


def json_kind(value) -> str:
    """How a JSON value is named in a one-line refusal: "an object", "a list", "null", ..."""
    if value is None:
        return "null"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def nesting_depth(data, limit: int) -> int:
    """How deeply lists and objects nest in `data`, counted iteratively (no recursion limit to hit)
    and given up once past `limit`: a file from elsewhere may nest millions of levels deep."""
    deepest, pending = 0, [(data, 0)]
    while pending and deepest <= limit:
        value, depth = pending.pop()
        if isinstance(value, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            pending += [(item, depth) for item in (value.values() if isinstance(value, dict) else value)]
    return deepest
