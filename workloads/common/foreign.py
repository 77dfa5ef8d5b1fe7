"""Workloads written in another language that reaches Python through a bridge (R's reticulate).

Such a language's entry script (workloads/cell.R) calls ``workloads.__main__.main(argv,
load_workload)``: the cell document, the clocks, the data, the validity gate, the result JSON and
the exit codes stay the Python harness's, one source of truth for every row. ``load_workload(cell)``
returns a ``ForeignWorkload`` that holds the language's own ``run`` and ``parity`` functions.

A bridge loses an exception's class on its way back: reticulate turns an ``Unsupported`` raised by
Python code that the R code called into a plain RuntimeError. The entry script catches it where it
still knows the class and returns ``Unsupported(reason)`` instead; ForeignWorkload raises it again
here, so an unsupported cell exits 3 with its reason like any other.

The language's workload class fills in the same scaffold as a Python row's (workloads/common/
scaffold.py), with ``Bridged`` mixed in before its runtime's class: the scaffold stays Python, so an
Unsupported the runtime raises crosses the bridge once, where the entry script still sees its class.
"""
from typing import Any, Callable, Dict, Iterable


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


class Bridged:
    """Mixed in before a runtime's scaffold class (runtime.Training, runtime.FeatureExtraction) by a
    workload class written in another language: what the language adds to the provenance, recorded
    here in Python once the runtime's select_device has run. The language's runtime gives the two
    class attributes (R's: workloads/runtime/r_keras.R). Were select_device the language's own, an
    Unsupported raised inside it would cross the bridge twice (Python, the language, Python again)
    and reach the harness as a plain RuntimeError: a failed cell instead of an unsupported one."""

    provenance_note = ""  # appended to framework_version, e.g. " from R 4.2.2 (reticulate 1.28)"
    provenance_extras: Dict[str, str] = {}  # e.g. the language, its version, the bridge's

    def select_device(self, run):
        policy = super().select_device(run)
        run.set_provenance(framework_version=(run.result.provenance.framework_version or "") + self.provenance_note,
                           extras=dict(self.provenance_extras))
        return policy

