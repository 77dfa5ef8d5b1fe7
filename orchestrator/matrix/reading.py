"""Reading `matrix.toml`: bounded, every key, type and name checked, one line for anything wrong."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.frameworks import PROJECT_ROOT, Framework
from orchestrator.matrix.checks import (MAX_REPEAT, check_choice, check_keys, check_names, check_repeat, expect, quoted,
                                        toml_type)
from orchestrator.matrix.model import FrameworkEntry, Matrix, check_options
from workloads.common import modes as framework_modes, safe_files
from workloads.common.hyperparams import DATA_SOURCES, PRECISIONS, PROFILES, WORKLOADS
from workloads.common.result import INITS

DEFAULT_MATRIX = PROJECT_ROOT / "matrix.toml"
_TOP_KEYS = ("defaults", "frameworks")
_DEFAULT_KEYS = ("profile", "data", "repeat", "init", "workloads", "precisions", "modes")
_FRAMEWORK_KEYS = ("variants", "workloads", "precisions", "modes", "options", "accelerator_types")
# A matrix file is a page of names: a megabyte is far past any real one, and bounds what a damaged
# or hostile file costs to read (docs/RUN-GUARANTEES.md, the trust model). So do the longest GPU
# model name and the longest value a message quotes.
LONGEST_MATRIX_FILE = 1 << 20
LONGEST_GPU_MODEL = 64


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
    check_keys(document, _TOP_KEYS, source)
    defaults = expect(document.get("defaults", {}), dict, "a table ([defaults])", source, "defaults")
    check_keys(defaults, _DEFAULT_KEYS, f"{source} [defaults]")
    matrix = Matrix(source=source)
    where = f"{source} [defaults]"
    matrix.profile = check_choice(defaults.get("profile", matrix.profile), PROFILES, "profile", where)
    matrix.data = check_choice(defaults.get("data", matrix.data), DATA_SOURCES, "data source", where)
    if "repeat" in defaults:  # unset: DEFAULT_REPEATS for the profile
        matrix.repeat = check_repeat(expect(defaults["repeat"], int, f"a whole number from 1 to {MAX_REPEAT}",
                                             where, "repeat"), f"{where}: repeat")
    matrix.init = check_choice(defaults.get("init", matrix.init), INITS, "init", where)
    matrix.workloads = check_names(defaults.get("workloads", matrix.workloads), WORKLOADS, "workloads", where)
    matrix.precisions = check_names(defaults.get("precisions", matrix.precisions), PRECISIONS, "precisions", where)
    if "modes" in defaults:  # unset: every mode each framework declares (workloads/common/modes.py)
        matrix.modes = check_names(defaults["modes"], framework_modes.CHOICES, "modes", where)
    tables = expect(document.get("frameworks", {}), dict, "tables ([frameworks.<name>])", source, "frameworks")
    if not tables:
        raise UserError(f"{source}: no [frameworks.<name>] table; choose from {', '.join(frameworks)}")
    for name, table in tables.items():
        check_choice(name, frameworks, "framework", f"{source} [frameworks]")
        where = f"{source} [frameworks.{name}]"
        if not isinstance(table, dict):
            raise UserError(f"{where}: must be a table, e.g. variants = [\"cpu\"], not {toml_type(table)}")
        check_keys(table, _FRAMEWORK_KEYS, where)
        framework = frameworks[name]
        entry = FrameworkEntry(name=name, variants=check_names(
            table.get("variants", [framework.default_variant]), list(framework.variants), "variants", where))
        if "workloads" in table:
            entry.workloads = check_names(table["workloads"], WORKLOADS, "workloads", where)
        if "precisions" in table:
            entry.precisions = check_names(table["precisions"], PRECISIONS, "precisions", where)
        if "modes" in table:
            entry.modes = check_names(table["modes"], framework_modes.CHOICES, "modes", where)
        if "options" in table:
            entry.options = check_options(table["options"], name, where)
        if "accelerator_types" in table:
            entry.accelerator_types = _check_accelerator_types(table["accelerator_types"], framework, where)
        matrix.frameworks.append(entry)
    return matrix


def _check_accelerator_types(value, framework: Framework, where: str) -> dict[str, str]:
    """accelerator_types = { cu112 = "A100" }: a GPU model (a node's accelerator-type label) per CUDA variant."""
    cuda = [name for name, variant in framework.variants.items() if variant.device == "cuda"]
    example = f'{{ {cuda[0] if cuda else "cu130"} = "H100" }}'
    table = expect(value, dict, f"a table of CUDA variant = GPU model, e.g. {example}", where, "accelerator_types")
    for variant, model in table.items():
        if variant not in cuda:
            raise UserError(f"{where}: accelerator_types names {quoted(variant)}, not a CUDA variant of "
                            f"{framework.name}; "
                            f"choose from {', '.join(cuda) or 'none (it has no CUDA variant)'}")
        expect(model, str, 'a GPU model name, e.g. "H100"', where, f"accelerator_types.{variant}")
        if not model.strip() or len(model) > LONGEST_GPU_MODEL or not model.isprintable():
            raise UserError(f"{where}: accelerator_types.{variant} is {quoted(model)}; name a GPU model (at most "
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
