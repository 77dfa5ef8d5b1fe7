"""The commands of `python -m orchestrator`: one module per command, and the module is the registration.

A command module defines
    HELP                      one line, shown in `python -m orchestrator --help`
    add_arguments(parser)     its options (shared groups come from common_args)
    main(args) -> int         the argparse adapter: reads `args`, calls the module's plain function
                              (the one tests call), returns the exit code
and may define ORDER (a number; lower comes first in --help, modules without one come last).
Its verb is its module name with `_` as `-` (run_matrix.py -> run-matrix). Modules whose names
start with `_`, and common_args, are not commands.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

NOT_COMMANDS = {"common_args"}
REQUIRED = ("HELP", "add_arguments", "main")
LAST = 1_000  # the ORDER of a module that declares none


def verb(module_name: str) -> str:
    return module_name.rpartition(".")[2].replace("_", "-")


def discover() -> dict[str, ModuleType]:
    """verb -> command module, in --help order. (The package's namespace also gains the modules as
    attributes, `list` among them: this file uses no builtin of a command's name.)"""
    names = [info.name for info in pkgutil.iter_modules(__path__)
             if not info.name.startswith("_") and info.name not in NOT_COMMANDS]
    modules = [importlib.import_module(f"{__name__}.{name}") for name in names]
    for module in modules:
        missing = [attribute for attribute in REQUIRED if not hasattr(module, attribute)]
        if missing:
            raise TypeError(f"{module.__file__} is a command module but lacks {', '.join(missing)} "
                            f"(see orchestrator/commands/__init__.py)")
    modules.sort(key=lambda module: (getattr(module, "ORDER", LAST), module.__name__))
    return {verb(module.__name__): module for module in modules}
