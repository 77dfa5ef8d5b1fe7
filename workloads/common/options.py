"""Framework options: the switches a framework's rows can be run with, each declared once.

A switch that changes speed (a channels-last layout, an executor) is never read
from an environment variable a backend may or may not pass along: it is part of the cell
(``Cell.options``), travels in the cell document through every backend, is recorded in the
result (``provenance.extras["option.<name>"]``, default values included) and appears in the row's
name in the report when it is not the default. The host checks what is asked for against this
table (``python -m orchestrator run-matrix --option channels_last=on``, or ``options`` in
matrix.toml); the framework's runtime reads the resolved value with ``run.option(name)``. How a
framework executes the model (eager, a graph, compiled by XLA or inductor) is no option but the
cell's mode, a run-wide dimension (workloads/common/modes.py).

Standard library only (Python 3.6): the host and every image read this one table.
"""
from collections import OrderedDict
from typing import Dict, Mapping, Tuple

ON, OFF = "on", "off"


class Option:
    """One switch: its name, the values it takes, its default, and what it does."""

    def __init__(self, name: str, values: Tuple[str, ...], default: str, help: str):
        assert default in values, (name, default, values)
        self.name, self.values, self.default, self.help = name, tuple(values), default, help

    def __repr__(self) -> str:
        return "Option({!r}, default={!r})".format(self.name, self.default)


CHANNELS_LAST = Option("channels_last", (OFF, ON), OFF,
                       "run convolutions in the NHWC (channels-last) memory layout, the tensor cores' own "
                       "layout in half precision; the input is still delivered NCHW and converted once per batch")
ONEDNN_MAX_CPU_ISA = Option("onednn_max_cpu_isa", ("avx2", "all"), "avx2",
                            "cap oneDNN's CPU instruction set: avx2 (the default: on AVX-512 CPUs MindSpore's "
                            "non-1x1 convolutions otherwise take oneDNN's 50-100x slower reference kernel) or all")
EXECUTOR = Option("executor", ("async_scheduling", "simple"), "async_scheduling",
                  "Caffe2's net executor: async_scheduling (runs independent operators concurrently) or simple "
                  "(one operator after another)")

OPTIONS = {
    "pytorch": (CHANNELS_LAST,),
    "paddle": (CHANNELS_LAST,),
    "mindspore": (ONEDNN_MAX_CPU_ISA,),
    "caffe2": (EXECUTOR,),
}  # type: Dict[str, Tuple[Option, ...]]


class OptionError(ValueError):
    """An option a framework does not declare, or a value it does not take (one line naming the fix)."""


def declared(framework: str) -> Dict[str, Option]:
    return OrderedDict((option.name, option) for option in OPTIONS.get(framework, ()))


def every_name() -> Tuple[str, ...]:
    return tuple(sorted({option.name for options in OPTIONS.values() for option in options}))


def check(framework: str, given: Mapping[str, str]) -> Dict[str, str]:
    """``given`` checked against ``framework``'s options, defaults dropped (so that a cell run with
    the defaults spelled out is the same cell as one run without them), sorted by name."""
    options = declared(framework)
    chosen = {}
    for name in sorted(given):
        value = given[name]
        if name not in options:
            takes = ", ".join(options) if options else "none"
            raise OptionError("{} has no option {!r} (its options: {})".format(framework, name, takes))
        if value not in options[name].values:
            raise OptionError("option {}={!r} for {}: choose from {}".format(
                name, value, framework, ", ".join(options[name].values)))
        if value != options[name].default:
            chosen[name] = value
    return chosen


def resolve(framework: str, given: Mapping[str, str]) -> Dict[str, str]:
    """Every option ``framework`` declares, at its given value or its default."""
    chosen = check(framework, given)
    return OrderedDict((name, chosen.get(name, option.default)) for name, option in declared(framework).items())


def label(options: Mapping[str, str]) -> str:
    """``channels_last=on, executor=simple``: how a row names its non-default options ("" for none)."""
    return ", ".join("{}={}".format(name, options[name]) for name in sorted(options))
