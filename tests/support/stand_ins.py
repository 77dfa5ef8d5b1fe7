"""Importing a framework's modules on a host that lacks the framework: stand-in modules that refuse
any use, so a test that imports over them proves nothing touches the framework at import time."""
import importlib
import sys
import types
from contextlib import contextmanager


class Refuses(types.ModuleType):
    """A stand-in module: importable (submodules are set as attributes), any other use fails the test."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AssertionError(f"{self.__name__}.{name} used while importing: the modules must not touch "
                             f"the framework at import time")


def refusing_package(names: list[str]) -> dict[str, Refuses]:
    """Stand-ins for dotted module names, each child reachable as its parent's attribute."""
    stand_ins = {name: Refuses(name) for name in names}
    for name, module in stand_ins.items():
        parent, _, child = name.rpartition(".")
        if parent in stand_ins:
            setattr(stand_ins[parent], child, module)
    return stand_ins


@contextmanager
def imported_over(stand_ins: dict[str, types.ModuleType], names: list[str]):
    """Import `names` afresh with `stand_ins` in sys.modules; sys.modules is restored afterwards."""
    saved = {name: sys.modules.get(name) for name in list(stand_ins) + names}
    sys.modules.update(stand_ins)
    for name in names:
        sys.modules.pop(name, None)
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
