"""Workloads written in another language that reaches Python through a bridge (R's reticulate).

Such a language's entry script (workloads/cell.R) calls ``workloads.__main__.main(argv,
load_workload)``: the cell document, the clocks, the data, the validity gate, the result JSON and
the exit codes stay the Python harness's, one source of truth for every row. ``load_workload(cell)``
returns a ``ForeignWorkload`` that holds the language's own ``run`` and ``parity`` functions.

A bridge loses an exception's class on its way back: reticulate turns an ``Unsupported`` raised by
Python code that the R code called into a plain RuntimeError. The entry script catches it where it
still knows the class and returns ``Unsupported(reason)`` instead; ForeignWorkload raises it again
here, so an unsupported cell exits 3 with its reason like any other.
"""
from typing import Any, Callable, Iterable


class ForeignWorkload:
    """The interface `python -m workloads` expects of a workload module, over foreign functions."""

    def __init__(self, run: Callable, parity: Callable, matched: Iterable[str] = ()):
        self._run, self._parity = run, parity
        self.MATCHED = tuple(matched)  # what had to be matched, printed in the report

    def run(self, run) -> None:
        raise_returned(self._run(run))

    def parity(self, run, params: dict, batch: dict) -> dict:
        return raise_returned(self._parity(run, params, batch))


def raise_returned(value: Any) -> Any:
    """Raise an exception a foreign function returned in place of raising it; else the value."""
    if isinstance(value, BaseException):
        raise value
    return value
