"""The benchmark matrix: load and validate `matrix.toml`, apply command-line narrowing, expand cells.

Every unknown key or name, every value of the wrong TOML type and every name given twice is
refused with one line that names the file, the key and what is expected.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.frameworks import PROJECT_ROOT, Framework
from workloads.common.hyperparams import DATA_SOURCES, PRECISIONS, PROFILES, WORKLOADS
from workloads.common.result import Cell

DEFAULT_MATRIX = PROJECT_ROOT / "matrix.toml"

_TOP_KEYS = ("defaults", "frameworks")
_DEFAULT_KEYS = ("profile", "data", "repeat", "workloads", "precisions")
_FRAMEWORK_KEYS = ("variants", "workloads", "precisions")

# A huge repeat would build millions of cells in memory before the first one runs; a hundred
# repeats of one cell is already more than any comparison here needs.
MAX_REPEAT = 100

# What a TOML value is called in messages, by its Python type (tomllib's mapping).
_TOML_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list",
               dict: "a table"}


def _toml_type(value) -> str:
    return next((name for kind, name in _TOML_TYPES.items() if type(value) is kind), "a date or time")


def _expect(value, kind: type, expected: str, where: str, key: str):
    """The value when it has the TOML type the key needs; else one line naming file, key and type."""
    if type(value) is not kind:  # type(), not isinstance: true/false is no integer here
        raise UserError(f"{where}: {key} must be {expected}, not {_toml_type(value)} ({value!r:.60})")
    return value


@dataclass
class FrameworkEntry:
    name: str
    variants: list[str]
    workloads: list[str] | None = None  # None: the matrix defaults
    precisions: list[str] | None = None


@dataclass
class Matrix:
    profile: str = "full"
    data: str = "real"
    repeat: int = 1
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    frameworks: list[FrameworkEntry] = field(default_factory=list)
    source: str = "matrix.toml"

    def cells(self, frameworks: dict[str, Framework]) -> list[Cell]:
        """Repeat-major, then workload, then framework: repeats are interleaved across frameworks
        so that slow drift of the machine (heat, neighbours) hits every framework alike."""
        cells = []
        for repeat in range(self.repeat):
            for workload in self.workloads:
                for precision in self.precisions:
                    for entry in self.frameworks:
                        if workload not in frameworks[entry.name].workloads:
                            continue  # shown as n/a in the report, never run
                        if entry.workloads is not None and workload not in entry.workloads:
                            continue
                        if entry.precisions is not None and precision not in entry.precisions:
                            continue
                        for variant in entry.variants:
                            cells.append(Cell(framework=entry.name, workload=workload, variant=variant,
                                              precision=precision, profile=self.profile, data=self.data,
                                              repeat=repeat))
        return cells

    def not_applicable(self, frameworks: dict[str, Framework]) -> list[dict]:
        """The (framework, workload) pairs asked for that a framework does not implement, with the
        reason: recorded in run.json, so that the report shows them instead of leaving them out."""
        pairs = []
        for entry in self.frameworks:
            reasons = frameworks[entry.name].not_applicable()
            for workload in self.workloads:
                if workload in reasons and (entry.workloads is None or workload in entry.workloads):
                    pairs.append({"framework": entry.name, "workload": workload, "variants": list(entry.variants),
                                  "reason": reasons[workload]})
        return pairs


def _check_keys(table: dict, valid: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in valid:
            raise UserError(f"{where}: unknown key {key!r}; valid keys: {', '.join(valid)}")


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
            raise UserError(f"{where}: each of {what} must be a string (a name), not {_toml_type(name)} "
                            f"({name!r:.60}); choose from {', '.join(valid)}")
        if name not in valid:
            raise UserError(f"{where}: unknown {singular} {name!r}; choose from {', '.join(valid)}")
    repeated = [name for position, name in enumerate(names) if name in names[:position]]
    if repeated:
        raise UserError(f"{where}: {singular} {repeated[0]!r} is given twice in {what}; name each once")
    return list(names)


def _check_choice(value, valid, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: {what} must be a string, not {_toml_type(value)} ({value!r:.60}); "
                        f"choose from {', '.join(valid)}")
    if value not in valid:
        raise UserError(f"{where}: unknown {what} {value!r}; choose from {', '.join(valid)}")
    return value


def parse(text: str, frameworks: dict[str, Framework], source: str = "matrix.toml") -> Matrix:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{source}: not valid TOML ({error}); fix the file or pass --matrix") from error
    _check_keys(document, _TOP_KEYS, source)
    defaults = _expect(document.get("defaults", {}), dict, "a table ([defaults])", source, "defaults")
    _check_keys(defaults, _DEFAULT_KEYS, f"{source} [defaults]")
    matrix = Matrix(source=source)
    where = f"{source} [defaults]"
    matrix.profile = _check_choice(defaults.get("profile", matrix.profile), PROFILES, "profile", where)
    matrix.data = _check_choice(defaults.get("data", matrix.data), DATA_SOURCES, "data source", where)
    matrix.repeat = check_repeat(_expect(defaults.get("repeat", matrix.repeat), int,
                                         f"a whole number from 1 to {MAX_REPEAT}", where, "repeat"), f"{where}: repeat")
    matrix.workloads = check_names(defaults.get("workloads", matrix.workloads), WORKLOADS, "workloads", where)
    matrix.precisions = check_names(defaults.get("precisions", matrix.precisions), PRECISIONS, "precisions", where)
    tables = _expect(document.get("frameworks", {}), dict, "tables ([frameworks.<name>])", source, "frameworks")
    if not tables:
        raise UserError(f"{source}: no [frameworks.<name>] table; choose from {', '.join(frameworks)}")
    for name, table in tables.items():
        _check_choice(name, frameworks, "framework", f"{source} [frameworks]")
        where = f"{source} [frameworks.{name}]"
        if not isinstance(table, dict):
            raise UserError(f"{where}: must be a table, e.g. variants = [\"cpu\"], not {_toml_type(table)}")
        _check_keys(table, _FRAMEWORK_KEYS, where)
        framework = frameworks[name]
        entry = FrameworkEntry(name=name, variants=check_names(
            table.get("variants", [framework.default_variant]), list(framework.variants), "variants", where))
        if "workloads" in table:
            entry.workloads = check_names(table["workloads"], WORKLOADS, "workloads", where)
        if "precisions" in table:
            entry.precisions = check_names(table["precisions"], PRECISIONS, "precisions", where)
        matrix.frameworks.append(entry)
    return matrix


def load(path: Path | None, frameworks: dict[str, Framework]) -> Matrix:
    path = Path(path) if path else DEFAULT_MATRIX
    if not path.is_file():
        raise UserError(f"matrix file {path} not found; pass --matrix FILE (the default is {DEFAULT_MATRIX.name})")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"matrix file {path}: cannot be read ({error.strerror}); check its permissions") from error
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"matrix file {path}: not UTF-8 (byte {error.start}); save it as UTF-8 text") from error
    return parse(text, frameworks, source=str(path))


def check_repeat(repeat: int, what: str = "--repeat") -> int:
    if not 1 <= repeat <= MAX_REPEAT:
        raise UserError(f"{what} must be a whole number from 1 to {MAX_REPEAT}, not {repeat}")
    return repeat


def narrow(matrix: Matrix, frameworks: dict[str, Framework], *, names: list[str] | None = None,
           variants: list[str] | None = None, workloads: list[str] | None = None,
           precisions: list[str] | None = None, profile: str | None = None, data: str | None = None,
           repeat: int | None = None) -> Matrix:
    """Apply command-line choices. A framework named on the command line but absent from the
    matrix file runs its default variant."""
    where = "command line"
    if names:
        check_names(names, list(frameworks), "frameworks", where)
        by_name = {entry.name: entry for entry in matrix.frameworks}
        matrix.frameworks = [by_name.get(name) or FrameworkEntry(name, [frameworks[name].default_variant])
                             for name in names]
    if variants:
        valid = sorted({v for entry in matrix.frameworks for v in frameworks[entry.name].variants})
        check_names(variants, valid, "variants", where)
        for entry in matrix.frameworks:
            entry.variants = [v for v in variants if v in frameworks[entry.name].variants]
    if workloads:
        matrix.workloads = check_names(workloads, WORKLOADS, "workloads", where)
    if precisions:
        matrix.precisions = check_names(precisions, PRECISIONS, "precisions", where)
    if profile:
        matrix.profile = _check_choice(profile, PROFILES, "profile", where)
    if data:
        matrix.data = _check_choice(data, DATA_SOURCES, "data source", where)
    if repeat is not None:
        matrix.repeat = check_repeat(repeat)
    return matrix
