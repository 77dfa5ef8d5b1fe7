"""The benchmark matrix: load and validate `matrix.toml`, apply command-line narrowing, expand cells.

Every unknown key or name, every value of the wrong TOML type and every name given twice is
refused with one line that names the file, the key and what is expected.

Cells are expanded repeat-major (every cell once before any second repeat), and `run_order`
shuffles them within each repeat in an order drawn from a seed that the run records, so that
neither slow drift of the machine (heat, neighbours) nor a fixed position in the run favours one
framework.
"""
from __future__ import annotations

import itertools
import os
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.frameworks import PROJECT_ROOT, Framework
from workloads.common import options as framework_options, safe_files
from workloads.common.hyperparams import DATA_SOURCES, PRECISIONS, PROFILES, WORKLOADS
from workloads.common.result import CANONICAL_INIT, INITS, Cell

DEFAULT_MATRIX = PROJECT_ROOT / "matrix.toml"

_TOP_KEYS = ("defaults", "frameworks")
_DEFAULT_KEYS = ("profile", "data", "repeat", "init", "workloads", "precisions")
_FRAMEWORK_KEYS = ("variants", "workloads", "precisions", "options", "accelerator_types")

# A huge repeat would build millions of cells in memory before the first one runs; a hundred
# repeats of one cell is already more than any comparison here needs.
MAX_REPEAT = 100
# Repeats when neither the matrix file nor --repeat says: the full profile is what gets published,
# and one run of a cell says nothing about its spread; a smoke run only checks that cells run.
DEFAULT_REPEATS = {"full": 3, "smoke": 1}
# The most cells one framework's option lists may expand to (xla = ["off", "on"] is 2).
MAX_OPTION_COMBINATIONS = 64
# A matrix file is a page of names: a megabyte is far past any real one, and bounds what a damaged
# or hostile file costs to read (docs/RUN-GUARANTEES.md, the trust model). So do the longest GPU
# model name and the longest value a message quotes.
LONGEST_MATRIX_FILE = 1 << 20
LONGEST_GPU_MODEL = 64
QUOTED = 60

# What a TOML value is called in messages, by its Python type (tomllib's mapping).
_TOML_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list",
               dict: "a table"}


def _toml_type(value) -> str:
    return next((name for kind, name in _TOML_TYPES.items() if type(value) is kind), "a date or time")


def _quoted(value) -> str:
    """A value as a message quotes it: its repr (no line break survives one), cut to QUOTED characters;
    a long list or table is not rendered whole first."""
    if isinstance(value, (list, dict)) and len(value) > QUOTED:
        return f"{_toml_type(value)} of {len(value)} items"
    text = repr(value[:QUOTED + 1] if isinstance(value, str) else value)
    return text if len(text) <= QUOTED else text[:QUOTED] + "..."


def _first_repeated(items: list):
    """The first item given a second time, or None (a set: a long list costs no quadratic time)."""
    seen = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _expect(value, kind: type, expected: str, where: str, key: str):
    """The value when it has the TOML type the key needs; else one line naming file, key and type."""
    if type(value) is not kind:  # type(), not isinstance: true/false is no integer here
        raise UserError(f"{where}: {key} must be {expected}, not {_toml_type(value)} ({_quoted(value)})")
    return value


@dataclass
class FrameworkEntry:
    name: str
    variants: list[str]
    workloads: list[str] | None = None  # None: the matrix defaults
    precisions: list[str] | None = None
    # option name -> the values to run (a list expands into one cell per value); checked against
    # workloads/common/options.py. Empty: the framework's defaults.
    options: dict[str, list[str]] = field(default_factory=dict)
    # CUDA variant -> the GPU model its cells must run on (the Ray backend's placement, as
    # --accelerator-type for the whole run), e.g. {"cu112": "A100"} for MXNet's CUDA 11.2 build
    accelerator_types: dict[str, str] = field(default_factory=dict)

    def option_sets(self) -> list[dict[str, str]]:
        """Every combination of the listed option values, each checked and with defaults dropped
        (workloads/common/options.check), once each: the cells' `options`."""
        names = sorted(self.options)
        combinations = []
        for values in itertools.product(*(self.options[name] for name in names)):
            chosen = framework_options.check(self.name, dict(zip(names, values)))
            if chosen not in combinations:
                combinations.append(chosen)
        return combinations or [{}]


@dataclass
class Matrix:
    profile: str = "full"
    data: str = "real"
    repeat: int | None = None  # None: DEFAULT_REPEATS for the profile (see `repeats`)
    init: str = CANONICAL_INIT  # how every cell's model starts: canonical weights, or the framework's own
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    precisions: list[str] = field(default_factory=lambda: ["fp32"])
    frameworks: list[FrameworkEntry] = field(default_factory=list)
    source: str = "matrix.toml"

    @property
    def repeats(self) -> int:
        """How many times each cell runs: as set, else 3 for the full profile and 1 for smoke."""
        return self.repeat if self.repeat is not None else DEFAULT_REPEATS.get(self.profile, 1)

    def cells(self, frameworks: dict[str, Framework]) -> list[Cell]:
        """Repeat-major, then workload, precision, framework, variant and option set: every cell
        runs once before any runs a second time (`run_order` shuffles within each repeat)."""
        cells = []
        for repeat in range(self.repeats):
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
                            for chosen in entry.option_sets():
                                cells.append(Cell(framework=entry.name, workload=workload, variant=variant,
                                                  precision=precision, profile=self.profile, data=self.data,
                                                  repeat=repeat, init=self.init, options=dict(chosen)))
        return cells

    def accelerator_types(self) -> dict[tuple[str, str], str]:
        """(framework, CUDA variant) -> the GPU model its cells must run on, from matrix.toml."""
        return {(entry.name, variant): model for entry in self.frameworks
                for variant, model in entry.accelerator_types.items()}

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
            raise UserError(f"{where}: unknown key {_quoted(key)}; valid keys: {', '.join(valid)}")


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
                            f"({_quoted(name)}); choose from {', '.join(valid)}")
        if name not in valid:
            raise UserError(f"{where}: unknown {singular} {_quoted(name)}; choose from {', '.join(valid)}")
    repeated = _first_repeated(names)
    if repeated is not None:
        raise UserError(f"{where}: {singular} {repeated!r} is given twice in {what}; name each once")
    return list(names)


def _check_choice(value, valid, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: {what} must be a string, not {_toml_type(value)} ({_quoted(value)}); "
                        f"choose from {', '.join(valid)}")
    if value not in valid:
        raise UserError(f"{where}: unknown {what} {_quoted(value)}; choose from {', '.join(valid)}")
    return value


def _check_options(table, framework: str, where: str) -> dict[str, list[str]]:
    """A framework's `options = { xla = "on" }` (a value may be a list: one cell per value), each
    name and value checked against workloads/common/options.py."""
    declared = framework_options.declared(framework)
    example = next(iter(declared.values()), None)
    hint = (f'e.g. options = {{ {example.name} = "{example.values[-1]}" }} or '
            f'{{ {example.name} = {list(example.values)!r} }}'.replace("'", '"') if example
            else f"{framework} declares no option (workloads/common/options.py)")
    if not isinstance(table, dict):
        raise UserError(f"{where}: options must be a table, {hint}; not {_toml_type(table)} ({_quoted(table)})")
    chosen = {}
    for name, value in table.items():
        if name not in declared:  # checked here, so that no message quotes a hostile name whole
            raise UserError(f"{where}: {framework} has no option {_quoted(name)} (its options: "
                            f"{', '.join(declared) or 'none'})")
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(item, str) for item in values):
            raise UserError(f"{where}: options.{name} must be a value or a non-empty list of values (strings), "
                            f"not {_toml_type(value)} ({_quoted(value)}); {hint}")
        repeated = _first_repeated(values)
        if repeated is not None:
            raise UserError(f"{where}: options.{name} gives {_quoted(repeated)} twice; name each value once")
        for item in values:
            if item not in declared[name].values:
                raise UserError(f"{where}: option {name}={_quoted(item)} for {framework}: choose from "
                                f"{', '.join(declared[name].values)}")
        chosen[name] = list(values)
    combinations = 1
    for values in chosen.values():
        combinations *= len(values)
    if combinations > MAX_OPTION_COMBINATIONS:
        raise UserError(f"{where}: options expand to {combinations} cells per (workload, precision, variant); "
                        f"at most {MAX_OPTION_COMBINATIONS}: list fewer values")
    return chosen


def parse(text: str, frameworks: dict[str, Framework], source: str = "matrix.toml") -> Matrix:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        reason = (str(error).splitlines() or ["no reason given"])[0][:200]
        raise UserError(f"{source}: not valid TOML ({reason}); fix the file or pass --matrix") from None
    except ValueError as error:  # a TOML integer of thousands of digits, past Python's limit
        raise UserError(f"{source}: not valid TOML ({str(error)[:120]}); fix the file or pass --matrix") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise UserError(f"{source}: values nested too deeply to be a matrix file; fix the file or pass --matrix") \
            from None
    _check_keys(document, _TOP_KEYS, source)
    defaults = _expect(document.get("defaults", {}), dict, "a table ([defaults])", source, "defaults")
    _check_keys(defaults, _DEFAULT_KEYS, f"{source} [defaults]")
    matrix = Matrix(source=source)
    where = f"{source} [defaults]"
    matrix.profile = _check_choice(defaults.get("profile", matrix.profile), PROFILES, "profile", where)
    matrix.data = _check_choice(defaults.get("data", matrix.data), DATA_SOURCES, "data source", where)
    if "repeat" in defaults:  # unset: DEFAULT_REPEATS for the profile
        matrix.repeat = check_repeat(_expect(defaults["repeat"], int, f"a whole number from 1 to {MAX_REPEAT}",
                                             where, "repeat"), f"{where}: repeat")
    matrix.init = _check_choice(defaults.get("init", matrix.init), INITS, "init", where)
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
        if "options" in table:
            entry.options = _check_options(table["options"], name, where)
        if "accelerator_types" in table:
            entry.accelerator_types = _check_accelerator_types(table["accelerator_types"], framework, where)
        matrix.frameworks.append(entry)
    return matrix


def _check_accelerator_types(value, framework: Framework, where: str) -> dict[str, str]:
    """accelerator_types = { cu112 = "A100" }: a GPU model (a node's accelerator-type label) per CUDA variant."""
    cuda = [name for name, variant in framework.variants.items() if variant.device == "cuda"]
    example = f'{{ {cuda[0] if cuda else "cu130"} = "H100" }}'
    table = _expect(value, dict, f"a table of CUDA variant = GPU model, e.g. {example}", where, "accelerator_types")
    for variant, model in table.items():
        if variant not in cuda:
            raise UserError(f"{where}: accelerator_types names {_quoted(variant)}, not a CUDA variant of "
                            f"{framework.name}; "
                            f"choose from {', '.join(cuda) or 'none (it has no CUDA variant)'}")
        _expect(model, str, 'a GPU model name, e.g. "H100"', where, f"accelerator_types.{variant}")
        if not model.strip() or len(model) > LONGEST_GPU_MODEL or not model.isprintable():
            raise UserError(f"{where}: accelerator_types.{variant} is {_quoted(model)}; name a GPU model (at most "
                            f"{LONGEST_GPU_MODEL} printable characters), e.g. \"H100\"")
    return dict(table)


def load(path: Path | None, frameworks: dict[str, Framework]) -> Matrix:
    path = Path(path) if path else DEFAULT_MATRIX
    if not path.exists():
        raise UserError(f"matrix file {path} not found; pass --matrix FILE (the default is {DEFAULT_MATRIX.name})")
    try:  # the user's own file, so a link to it is followed; but bounded, and never a FIFO or a device
        data = safe_files.read_bytes_bounded(os.path.realpath(path), LONGEST_MATRIX_FILE)
    except safe_files.UnsafePath:
        what = f"larger than {LONGEST_MATRIX_FILE} bytes" if path.is_file() else "not a regular file"
        raise UserError(f"matrix file {path}: {what}; pass --matrix FILE, a matrix file") from None
    except OSError as error:
        raise UserError(f"matrix file {path}: cannot be read ({error.strerror or error}); check its permissions") \
            from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"matrix file {path}: not UTF-8 (byte {error.start}); save it as UTF-8 text") from error
    return parse(text, frameworks, source=str(path))


def check_repeat(repeat: int, what: str = "--repeat") -> int:
    if not 1 <= repeat <= MAX_REPEAT:
        raise UserError(f"{what} must be a whole number from 1 to {MAX_REPEAT}, not {repeat}")
    return repeat


def parse_option_arguments(given: list[str] | None) -> dict[str, list[str]]:
    """`--option NAME=VALUE` (repeatable; VALUE may be comma-separated, one cell per value) as
    name -> values. The shape only: which frameworks take them is `narrow`'s check."""
    chosen: dict[str, list[str]] = {}
    for text in given or ():
        name, equals, value = (part.strip() for part in text.partition("="))
        values = [item.strip() for item in value.split(",") if item.strip()]
        if not equals or not name or not values:
            raise UserError(f"--option {_quoted(text)}: give NAME=VALUE, e.g. --option xla=on (or xla=off,on for "
                            f"one cell per value); options: {', '.join(framework_options.every_name())}")
        if name in chosen:
            raise UserError(f"--option {name} is given twice; give it once (xla=off,on runs both values)")
        repeated = _first_repeated(values)
        if repeated is not None:
            raise UserError(f"--option {name[:QUOTED]}: value {_quoted(repeated)} is given twice; name each "
                            "value once")
        chosen[name] = values
    return chosen


def _apply_options(matrix: Matrix, given: dict[str, list[str]]) -> None:
    """Each --option goes to every selected framework that declares it (replacing the matrix file's
    values for it); an option no selected framework declares, or a value one of them does not
    take, is refused in one line."""
    selected = [entry.name for entry in matrix.frameworks]
    for name, values in given.items():
        takers = [entry for entry in matrix.frameworks if name in framework_options.declared(entry.name)]
        if not takers:
            owners = [framework for framework, declared in framework_options.OPTIONS.items()
                      if any(option.name == name for option in declared)]
            known = ", ".join(framework_options.every_name())
            raise UserError(f"--option {name}: no selected framework ({', '.join(selected)}) declares it; "
                            + (f"{name} is an option of {', '.join(owners)}: select one with --frameworks"
                               if owners else f"options: {known}"))
        for entry in takers:
            for value in values:
                try:
                    framework_options.check(entry.name, {name: value})
                except framework_options.OptionError as error:
                    raise UserError(f"--option {name}={value} refused: {error}") from None
            entry.options = {**entry.options, name: list(values)}


def narrow(matrix: Matrix, frameworks: dict[str, Framework], *, names: list[str] | None = None,
           variants: list[str] | None = None, workloads: list[str] | None = None,
           precisions: list[str] | None = None, profile: str | None = None, data: str | None = None,
           repeat: int | None = None, init: str | None = None, options: list[str] | None = None) -> Matrix:
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
    if init:
        matrix.init = _check_choice(init, INITS, "init", where)
    if options:
        _apply_options(matrix, parse_option_arguments(options))
    return matrix


def run_order(cells: list[Cell], seed: int) -> list[Cell]:
    """`cells` (repeat-major) shuffled within each repeat in the order `seed` draws: repeats stay
    interleaved (every cell once before any second time), and within a repeat no framework always
    runs first or last. The same seed and cells give the same order (so `--resume` can keep it)."""
    generator = random.Random(seed)
    ordered = []
    for _, group in itertools.groupby(cells, key=lambda cell: cell.repeat):
        group = list(group)
        generator.shuffle(group)
        ordered += group
    return ordered


def new_seed() -> int:
    """A fresh seed for `run_order`, from the system's randomness."""
    return random.SystemRandom().randrange(2 ** 32)
