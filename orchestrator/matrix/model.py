"""The matrix as the run uses it: frameworks with their variants, workloads, precisions, modes and options;
narrowing by the command line; the cells, repeat-major, in a seeded order."""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from orchestrator.errors import UserError
from orchestrator.frameworks import Framework
from orchestrator.matrix.checks import (QUOTED, check_choice, check_names, check_repeat, first_repeated, quoted,
                                        toml_type)
from workloads.common import modes as framework_modes, options as framework_options
from workloads.common.hyperparams import DATA_SOURCES, PRECISIONS, PROFILES, WORKLOADS
from workloads.common.result import CANONICAL_INIT, INITS, Cell

# Repeats when neither the matrix file nor --repeat says: the full profile is what gets published,
# and one run of a cell says nothing about its spread; a smoke run only checks that cells run.
DEFAULT_REPEATS = {"full": 3, "smoke": 1}
# The most cells one framework's option lists may expand to (channels_last = ["off", "on"] is 2).
MAX_OPTION_COMBINATIONS = 64


@dataclass
class FrameworkEntry:
    name: str
    variants: list[str]
    workloads: list[str] | None = None  # None: the matrix defaults
    precisions: list[str] | None = None
    modes: list[str] | None = None  # None: the matrix's modes, else every mode the framework declares
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
    # Execution modes (workloads/common/modes.py) asked of every framework: one it does not declare
    # is a recorded "unsupported" cell. None: each framework's default mode and its compiled one where
    # it declares one (modes.in_default_matrix), so that the default matrix has no cell that cannot run.
    modes: list[str] | None = None
    frameworks: list[FrameworkEntry] = field(default_factory=list)
    source: str = "matrix.toml"

    @property
    def repeats(self) -> int:
        """How many times each cell runs: as set, else 3 for the full profile and 1 for smoke."""
        return self.repeat if self.repeat is not None else DEFAULT_REPEATS.get(self.profile, 1)

    def modes_of(self, entry: FrameworkEntry) -> list[str]:
        """The modes `entry`'s cells run: its own list, else the matrix's, else its default mode and its
        compiled one."""
        chosen = entry.modes if entry.modes is not None else self.modes
        if chosen is None:
            return framework_modes.in_default_matrix(entry.name) or [""]
        return framework_modes.chosen(entry.name, chosen)

    def cells(self, frameworks: dict[str, Framework]) -> list[Cell]:
        """Repeat-major, then workload, precision, framework, variant, mode and option set: every
        cell runs once before any runs a second time (`run_order` shuffles within each repeat)."""
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
                        for variant, mode, chosen in itertools.product(entry.variants, self.modes_of(entry),
                                                                       entry.option_sets()):
                            cells.append(Cell(framework=entry.name, workload=workload, variant=variant,
                                              precision=precision, profile=self.profile, data=self.data,
                                              repeat=repeat, init=self.init, options=dict(chosen), mode=mode))
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


def check_options(table, framework: str, where: str) -> dict[str, list[str]]:
    """A framework's `options = { channels_last = "on" }` (a value may be a list: one cell per value), each
    name and value checked against workloads/common/options.py."""
    declared = framework_options.declared(framework)
    example = next(iter(declared.values()), None)
    hint = (f'e.g. options = {{ {example.name} = "{example.values[-1]}" }} or '
            f'{{ {example.name} = {list(example.values)!r} }}'.replace("'", '"') if example
            else f"{framework} declares no option (workloads/common/options.py)")
    if not isinstance(table, dict):
        raise UserError(f"{where}: options must be a table, {hint}; not {toml_type(table)} ({quoted(table)})")
    chosen = {}
    for name, value in table.items():
        if name not in declared:  # checked here, so that no message quotes a hostile name whole
            raise UserError(f"{where}: {framework} has no option {quoted(name)} (its options: "
                            f"{', '.join(declared) or 'none'})")
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(item, str) for item in values):
            raise UserError(f"{where}: options.{name} must be a value or a non-empty list of values (strings), "
                            f"not {toml_type(value)} ({quoted(value)}); {hint}")
        repeated = first_repeated(values)
        if repeated is not None:
            raise UserError(f"{where}: options.{name} gives {quoted(repeated)} twice; name each value once")
        for item in values:
            if item not in declared[name].values:
                raise UserError(f"{where}: option {name}={quoted(item)} for {framework}: choose from "
                                f"{', '.join(declared[name].values)}")
        chosen[name] = list(values)
    combinations = 1
    for values in chosen.values():
        combinations *= len(values)
    if combinations > MAX_OPTION_COMBINATIONS:
        raise UserError(f"{where}: options expand to {combinations} cells per (workload, precision, variant); "
                        f"at most {MAX_OPTION_COMBINATIONS}: list fewer values")
    return chosen


def parse_option_arguments(given: list[str] | None) -> dict[str, list[str]]:
    """`--option NAME=VALUE` (repeatable; VALUE may be comma-separated, one cell per value) as
    name -> values. The shape only: which frameworks take them is `narrow`'s check."""
    chosen: dict[str, list[str]] = {}
    for text in given or ():
        name, equals, value = (part.strip() for part in text.partition("="))
        values = [item.strip() for item in value.split(",") if item.strip()]
        if not equals or not name or not values:
            raise UserError(f"--option {quoted(text)}: give NAME=VALUE, e.g. --option channels_last=on (or "
                            f"channels_last=off,on for one cell per value); options: "
                            f"{', '.join(framework_options.every_name())}")
        if name in chosen:
            raise UserError(f"--option {name} is given twice; give it once (channels_last=off,on runs both values)")
        repeated = first_repeated(values)
        if repeated is not None:
            raise UserError(f"--option {name[:QUOTED]}: value {quoted(repeated)} is given twice; name each "
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
           repeat: int | None = None, init: str | None = None, options: list[str] | None = None,
           modes: list[str] | None = None) -> Matrix:
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
    if modes:  # every selected framework, in every mode named: one it lacks is an unsupported cell
        matrix.modes = check_names(modes, framework_modes.CHOICES, "modes", where)
        for entry in matrix.frameworks:
            entry.modes = None
    if profile:
        matrix.profile = check_choice(profile, PROFILES, "profile", where)
    if data:
        matrix.data = check_choice(data, DATA_SOURCES, "data source", where)
    if repeat is not None:
        matrix.repeat = check_repeat(repeat)
    if init:
        matrix.init = check_choice(init, INITS, "init", where)
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
