"""The ranking gate (FAIRNESS.md: ranking-gate): a row is ranked only when every check that applies
to it has passed, and the report says which failed for each row that is not.

The checks, each with its own verdict per row (passed, failed with why, not applicable, not checked):

- repeats (FAIRNESS.md: all-repeats-ok): every repeat of the row is ok; one diverged repeat
  (FAIRNESS.md: validity-gate) or one failed, timed out or invalid repeat keeps the row out;
- parameters (FAIRNESS.md: reference-parameter-count): the parameter count the row recorded is the
  reference model's, as the workload declares it (``settings().parameter_count``);
- accuracy (FAIRNESS.md: accuracy-targets): the median test accuracy is within the workload's
  declared target, in the full profile on real data only; anywhere else it does not apply, and a
  table says so once, not per row;
- parity (FAIRNESS.md: parity-gate): the framework (its variant, mode and options) passed the parity
  check run-matrix runs beside the cells (orchestrator/parity.py); a run without one says "not
  checked", which does not keep a row out, a failed check does.

The grid, the ranking tables, every chart and the energy section show ranked rows only (``ranked``).
"""
from __future__ import annotations

import dataclasses
import math

import pandas as pd

from workloads.common import declaration
from workloads.common.declaration import Workload

PASSED, FAILED, NOT_APPLICABLE, NOT_CHECKED = "passed", "failed", "not applicable", "not checked"
REPEATS, PARAMETERS, ACCURACY, PARITY = "repeats", "parameters", "accuracy", "parity"
CHECKS = (REPEATS, PARAMETERS, ACCURACY, PARITY)
DIVERGED = "diverged"  # the reason a diverged repeat records starts with it (FAIRNESS.md: validity-gate)
# Where the accuracy target applies: the study's settings on its data.
TARGET_PROFILE, TARGET_DATA = "full", "real"
NO_PARITY_RUN = "this run has no parity check (run-matrix --no-parity, or a run from before run-matrix ran one)"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One check's verdict on one row."""

    state: str  # PASSED, FAILED, NOT_APPLICABLE or NOT_CHECKED
    why: str = ""

    @property
    def failed(self) -> bool:
        return self.state == FAILED

    def __str__(self) -> str:
        return f"{self.state}: {self.why}" if self.why else self.state


@dataclasses.dataclass
class ParityRecord:
    """A run's parity verdicts, per (workload, framework, variant, mode, options label), why a row
    without one was not checked, and the run's one line about its check."""

    verdicts: dict[tuple[str, str, str, str, str], Verdict]
    missing: str = "no parity result for this framework, variant, mode and options"
    summary: str = ""


def reference_parameter_count(workload: Workload) -> int | None:
    """The reference model's parameter count, as the workload declares it (None: it declares none)."""
    count = getattr(workload.settings_for(TARGET_PROFILE), "parameter_count", None)
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def accuracy_applies(workload: Workload, profile, data) -> bool:
    return (workload.accuracy and workload.accuracy_target is not None
            and profile == TARGET_PROFILE and data == TARGET_DATA)


def accuracy_rule(workload: Workload, profile, data) -> str | None:
    """What a table of (profile, data) says once about the accuracy check; None: no accuracy here."""
    if not workload.accuracy:
        return None
    if workload.accuracy_target is None:
        return "Accuracy target: not applicable (the workload declares none)."
    target = f"{_percent(workload.accuracy_target)} ± {_percent(workload.accuracy_tolerance)}"
    if accuracy_applies(workload, profile, data):
        return f"Accuracy target: {target}; a row outside it is not ranked."
    return (f"Accuracy target ({target}): not applicable here; it holds in the {TARGET_PROFILE} profile on "
            f"{TARGET_DATA} data only, so no row of this table is judged by its accuracy.")


def verdicts(row: dict, workload: Workload, parity: ParityRecord | None, *, usable: int,
             diverged: int) -> dict[str, Verdict]:
    """Every check's verdict on one summary row (its statistics already computed)."""
    return {REPEATS: _repeats(row, usable=usable, diverged=diverged),
            PARAMETERS: _parameters(row, workload, usable=usable),
            ACCURACY: _accuracy(row, workload, usable=usable),
            PARITY: _parity(row, workload, parity)}


def apply(summary: pd.DataFrame) -> pd.DataFrame:
    """The ``ranked`` column (status ok, a headline figure, no failed check) and ``not_ranked``
    (the failed checks, with why) from each row's ``checks``."""
    summary = summary.copy()
    failures = [failed_checks(checks) for checks in summary["checks"]]
    summary["ranked"] = [(status == "ok" and not _missing(median) and not failed)
                         for status, median, failed in zip(summary["status"], summary["median"], failures)]
    summary["not_ranked"] = ["; ".join(failed) if failed else ("" if is_ranked else "no headline figure")
                             for failed, is_ranked in zip(failures, summary["ranked"])]
    return summary


def ranked(summary: pd.DataFrame) -> pd.Series:
    """Which rows are ranked: those the gate let through (FAIRNESS.md: ranking-gate)."""
    if "ranked" in summary:
        return summary["ranked"].astype(bool)
    return (summary["status"] == "ok") & summary["median"].notna()


def failed_checks(checks: dict[str, Verdict]) -> list[str]:
    """"parameters: 3,441,600, not the reference's 3,441,592" per failed check, in CHECKS order."""
    return [f"{name}: {checks[name].why or FAILED}" for name in CHECKS if name in checks and checks[name].failed]


def gate_text(row) -> str:
    """The Gate column: "passed", or "not ranked: " and the failed checks."""
    return "passed" if row["ranked"] else f"not ranked: {row['not_ranked']}"


def parity_text(row) -> str:
    """The Parity column: passed, failed with why, not checked with why, or not applicable."""
    verdict = (row["checks"] or {}).get(PARITY)
    return str(verdict) if verdict is not None else NOT_CHECKED


def _repeats(row: dict, *, usable: int, diverged: int) -> Verdict:
    runs = row["runs"]
    if diverged:
        return Verdict(FAILED, f"diverged in {diverged} of {runs} repeat{'s' if runs != 1 else ''}")
    if usable == runs:
        return Verdict(PASSED)
    return Verdict(FAILED, f"{usable} of {runs} repeats ok")


def _parameters(row: dict, workload: Workload, *, usable: int) -> Verdict:
    expected = reference_parameter_count(workload)
    if expected is None:
        return Verdict(NOT_APPLICABLE, "the workload declares no reference parameter count")
    if not usable:
        return Verdict(NOT_CHECKED, "no usable repeat")
    count = row["parameter_count"]
    if _missing(count):
        return Verdict(FAILED, "no parameter count recorded")
    if int(count) != expected:
        return Verdict(FAILED, f"{int(count):,}, not the reference model's {expected:,}")
    return Verdict(PASSED)


def _accuracy(row: dict, workload: Workload, *, usable: int) -> Verdict:
    if not accuracy_applies(workload, row["profile"], row["data"]):
        return Verdict(NOT_APPLICABLE)
    if not usable:
        return Verdict(NOT_CHECKED, "no usable repeat")
    accuracy = row.get(declaration.TEST_ACCURACY.name)
    if _missing(accuracy):
        return Verdict(FAILED, "no test accuracy recorded")
    target, tolerance = workload.accuracy_target, workload.accuracy_tolerance
    within = f"target {_percent(target)} ± {_percent(tolerance)} (median {_percent(accuracy, 1)})"
    if accuracy < target - tolerance:
        return Verdict(FAILED, f"below {within}")
    if accuracy > target + tolerance:
        return Verdict(FAILED, f"above {within}")
    return Verdict(PASSED)


def _parity(row: dict, workload: Workload, parity: ParityRecord | None) -> Verdict:
    if workload.canonical_layers is None:
        return Verdict(NOT_APPLICABLE, "the workload has no canonical weights to check")
    if parity is None:
        return Verdict(NOT_CHECKED, NO_PARITY_RUN)
    key = (workload.name, row["framework"], row["variant"], row["mode"], row["options"])
    return parity.verdicts.get(key, Verdict(NOT_CHECKED, parity.missing))


def _percent(value: float, decimals: int = 0) -> str:
    return f"{value * 100:.{decimals}f}%"


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
