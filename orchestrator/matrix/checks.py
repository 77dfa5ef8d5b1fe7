"""What every reader of a matrix shares: checking a value's type, name or range, and quoting it in one line."""
from __future__ import annotations

from orchestrator.errors import UserError

# A huge repeat would build millions of cells in memory before the first one runs; a hundred
# repeats of one cell is already more than any comparison here needs.
MAX_REPEAT = 100
QUOTED = 60
# What a TOML value is called in messages, by its Python type (tomllib's mapping).
TOML_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list",
               dict: "a table"}


def toml_type(value) -> str:
    return next((name for kind, name in TOML_TYPES.items() if type(value) is kind), "a date or time")


def quoted(value) -> str:
    """A value as a message quotes it: its repr (no line break survives one), cut to QUOTED characters;
    a long list or table is not rendered whole first."""
    if isinstance(value, (list, dict)) and len(value) > QUOTED:
        return f"{toml_type(value)} of {len(value)} items"
    text = repr(value[:QUOTED + 1] if isinstance(value, str) else value)
    return text if len(text) <= QUOTED else text[:QUOTED] + "..."


def first_repeated(items: list):
    """The first item given a second time, or None (a set: a long list costs no quadratic time)."""
    seen = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def expect(value, kind: type, expected: str, where: str, key: str):
    """The value when it has the TOML type the key needs; else one line naming file, key and type."""
    if type(value) is not kind:  # type(), not isinstance: true/false is no integer here
        raise UserError(f"{where}: {key} must be {expected}, not {toml_type(value)} ({quoted(value)})")
    return value


def check_keys(table: dict, valid: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in valid:
            raise UserError(f"{where}: unknown key {quoted(key)}; valid keys: {', '.join(valid)}")


def check_names(names, valid, what: str, where: str) -> list[str]:
    """A non-empty list of known names, each named once.

    A name given twice is refused rather than silently dropped: it would run the same cell twice
    into one result file, and it is more often a typo for another name than a wish."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not names:
        raise UserError(f"{where}: {what} must be a non-empty list of names, e.g. [\"{next(iter(valid))}\"]; "
                        f"choose from {', '.join(valid)}")
    singular = what[:-1] if what.endswith("s") else what
    for name in names:
        if not isinstance(name, str):
            raise UserError(f"{where}: each of {what} must be a string (a name), not {toml_type(name)} "
                            f"({quoted(name)}); choose from {', '.join(valid)}")
        if name not in valid:
            raise UserError(f"{where}: unknown {singular} {quoted(name)}; choose from {', '.join(valid)}")
    repeated = first_repeated(names)
    if repeated is not None:
        raise UserError(f"{where}: {singular} {repeated!r} is given twice in {what}; name each once")
    return list(names)


def check_choice(value, valid, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: {what} must be a string, not {toml_type(value)} ({quoted(value)}); "
                        f"choose from {', '.join(valid)}")
    if value not in valid:
        raise UserError(f"{where}: unknown {what} {quoted(value)}; choose from {', '.join(valid)}")
    return value


def check_repeat(repeat: int, what: str = "--repeat") -> int:
    if not 1 <= repeat <= MAX_REPEAT:
        raise UserError(f"{what} must be a whole number from 1 to {MAX_REPEAT}, not {repeat}")
    return repeat
