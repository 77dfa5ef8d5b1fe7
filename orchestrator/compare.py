"""Did it get slower? Two runs' cells matched one to one, and per cell a verdict on the change.

A cell is matched across the two runs by what was asked for, whatever its repeat: framework,
variant, workload, precision, profile, data, init and non-default options (the cell's key without
its ``r<N>``), and by the device it ran on, kind and model, as the report groups rows
(FAIRNESS.md: compare-same-device): a cell run on two GPU models is two cells, each listed with
why it was not compared, and two runs with no device in common are refused in one line, their
figures not on one scale (docs/REPRODUCING.md). Per matched cell the workload's declared headline
figure is compared (medians, their ratio, and whether the change is beyond ``factor`` and
significant), and so is the test accuracy where the workload has one (worse by more than its
declared tolerance).

Significance comes from the raw repeats (the ok ones), with a one-sided test in the direction of
"worse" at ``ALPHA``:

- Mann-Whitney U where both runs have at least ``MANN_WHITNEY_MIN`` ok repeats: rank-based, so
  one disturbed repeat (a pause, a noisy neighbour) cannot decide it alone.
- Welch's t-test where both have at least ``WELCH_MIN`` (and one has fewer than
  ``MANN_WHITNEY_MIN``): with 3 repeats against 3 the smallest p-value Mann-Whitney U can give
  is 1/20 = 0.05, so it could never say "significant"; Welch's test can, from the spread.
- The factor alone with fewer repeats, or where neither run's repeats spread at all (no test
  can weigh a spread of zero): said in the table.

A cell that has no usable repeat on one side (failed, timed out, unsupported, invalid figures, a
diverged training) is listed with its statuses and never compared as numbers; one that was ok in
BASE and failed, timed out or gave invalid figures in NEW counts as worse (a change that breaks a
cell is a regression). Unsupported in NEW does not count: it says the cell cannot run there.
"""
from __future__ import annotations

import dataclasses
import math
import os
import warnings
from pathlib import Path

import pandas as pd

from orchestrator.errors import UserError
from orchestrator.report.formatting import missing
from orchestrator.report.frame import report_frame
from orchestrator.report.gate import DIVERGED
from orchestrator.report.groups import device_label, with_devices
from orchestrator.row_names import row_name
from orchestrator.results import CELLS_FOLDER, INVALID, Unreadable, load_cells
from orchestrator.run_folder import COMPARE_PAGES
from workloads.common import declaration, modes
from workloads.common.declaration import HIGHER

# What a cell is, whatever its repeat (workloads.common.result.Cell.key without "r<N>"); the
# report's frame gives init (the record's or the framework's), the mode, and options as one label; and
# the device it ran on ("GPU NVIDIA H200": groups.device_label), which the cell's key does not name.
IDENTITY = ["workload", "framework", "variant", "precision", "mode", "profile", "data", "init", "options", "machine"]

DEFAULT_FACTOR = 1.1
ALPHA = 0.05  # one-sided: the probability of calling noise a slowdown
MANN_WHITNEY_MIN = 5  # ok repeats on each side
WELCH_MIN = 3
# A hair of float rounding is no loss of accuracy: 0.77 - 0.74 is 0.030000000000000027, not above 0.03.
ACCURACY_ROUNDING = 1e-9
MANN_WHITNEY, WELCH, FACTOR_ONLY = "Mann-Whitney U", "Welch's t-test", "factor only"

# A row's verdict on its headline figure (and on its accuracy, which has only WORSE and SAME).
WORSE, BETTER, SAME, NOT_SIGNIFICANT, BROKEN, NOT_COMPARED = (
    "worse", "better", "no change", "not significant", "broken", "not compared")
# NEW statuses that count as worse when BASE was ok: a failure, not a declared "cannot run here".
BREAKING_STATUSES = ("failed", "timeout", INVALID)

COMPARE_MD, COMPARE_HTML = COMPARE_PAGES


@dataclasses.dataclass
class Side:
    """One run's repeats of one cell."""

    status: str  # "ok" when at least one repeat is usable, else the repeats' statuses ("failed", ...)
    broken: bool  # no usable repeat, and one failed, timed out or gave invalid figures
    note: str  # what a reader needs beside the numbers: repeats not ok, and why
    values: list[float]  # the headline figure of each usable repeat
    accuracy: float | None  # the median test accuracy of the usable repeats
    versions: str  # the framework's version(s), as recorded

    @property
    def usable(self) -> bool:
        return self.status == "ok" and bool(self.values)

    @property
    def median(self) -> float:
        return float(pd.Series(self.values).median()) if self.values else math.nan


@dataclasses.dataclass
class Row:
    """One matched cell: both sides and the verdicts."""

    identity: dict[str, str]
    base: Side
    new: Side
    metric: declaration.Metric
    ratio: float = math.nan  # NEW median / BASE median of the headline figure
    worse_by: float = math.nan  # how many times worse NEW is (< 1: better), whichever way the metric is better
    method: str = ""  # MANN_WHITNEY, WELCH or FACTOR_ONLY (with why)
    p_value: float = math.nan
    verdict: str = NOT_COMPARED
    accuracy_change: float = math.nan  # NEW - BASE, in fractions (0.01 = one point)
    accuracy_tolerance: float | None = None  # None: the workload has no accuracy
    accuracy_verdict: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def counts_as_worse(self) -> bool:
        return self.verdict in (WORSE, BROKEN) or self.accuracy_verdict == WORSE

    @property
    def name(self) -> str:
        return cell_name(self.identity)


@dataclasses.dataclass
class Comparison:
    base_dir: Path
    new_dir: Path
    factor: float
    rows: list[Row]
    only_base: list[dict]  # {"identity", "name", "status", "why"} per cell only BASE has
    only_new: list[dict]
    unreadable: dict[str, int]  # "BASE"/"NEW" -> cell files that could not be read
    left_out: list[Unreadable] = dataclasses.field(default_factory=list)  # those files, each with why

    @property
    def worse(self) -> list[Row]:
        return [row for row in self.rows if row.counts_as_worse]


def cell_name(identity: dict[str, str]) -> str:
    """"cnn · tensorflow [compiled] · cuda12 · fp32 · smoke · synthetic · GPU NVIDIA H200": a cell's
    identity as one line."""
    framework = row_name(identity["framework"], identity["options"], identity["init"], mode=identity["mode"])
    return " · ".join([identity["workload"], framework, identity["variant"], identity["precision"],
                       identity["profile"], identity["data"], identity["machine"]])


def check_factor(factor: float) -> float:
    """--factor: finite and at least 1 (below 1, an unchanged cell would count as worse)."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor >= 1):
        raise UserError(f"--factor {factor!r}: give a finite number of at least 1, e.g. 1.1 (more than 10% worse counts)")
    return float(factor)


# --- reading the runs -------------------------------------------------------------------------

def load_run(folder: str | os.PathLike, side: str) -> tuple[pd.DataFrame, list[Unreadable]]:
    """The report's frame of one run folder, and the cell files that could not be read."""
    folder = Path(folder)
    if not folder.is_dir() or not (folder / CELLS_FOLDER).is_dir():
        raise UserError(f"{side} {folder} is not a run folder (no {CELLS_FOLDER}/ in it); pass a folder "
                        f"run-matrix wrote, e.g. results/<run-id>")
    try:
        loaded = load_cells(folder)
    except UserError as error:
        raise UserError(f"{side}: {error}") from None
    frame = with_devices(report_frame(loaded.results))
    frame["machine"] = [device_label(kind, model) for kind, model in zip(frame["device_kind"], frame["device_model"])]
    # a result from before modes were declared ran its framework's default mode: the same cell as one
    # that names it, so that a run is compared with an older published one
    frame["mode"] = [modes.resolve(str(framework), mode if isinstance(mode, str) else "")
                     for framework, mode in zip(frame["framework"], frame["mode"])]
    frame[IDENTITY] = frame[IDENTITY].fillna("").astype(str)
    return frame, loaded.unreadable


def measured_devices(frame: pd.DataFrame) -> set[str]:
    """The devices a run's results name in full (kind and model)."""
    known = frame[(frame["device_kind"] != "") & (frame["device_model"] != "")]
    return set(known["machine"])


def _listed(devices: set[str], shown: int = 3) -> str:
    """A few device names, each cut short (they come from the cells), for one line."""
    names = [" ".join(name.split())[:80] for name in sorted(devices)[:shown]]
    return ", ".join(names) + (f" and {len(devices) - shown} more" if len(devices) > shown else "")


def _side(repeats: pd.DataFrame, workload: declaration.Workload) -> Side:
    statuses = repeats["status"].tolist()
    reasons = repeats["reason"].fillna("").astype(str)
    diverged = repeats[(repeats["status"] == "failed") & reasons.str.strip().str.startswith(DIVERGED)]
    # as in the report: a training that diverged in one repeat is failed, whatever the others did
    usable = repeats[repeats["status"] == "ok"] if diverged.empty else repeats.iloc[0:0]
    values = usable[workload.headline].dropna().astype(float).tolist() if workload.headline in usable else []
    accuracy = math.nan
    if workload.accuracy and "test_accuracy" in usable:
        accuracy = usable["test_accuracy"].dropna().median()
    if not diverged.empty:
        status = "failed"
    elif values:
        status = "ok"
    else:
        status = ", ".join(dict.fromkeys(status for status in statuses if status != "ok")) or "ok (no figure)"
    not_ok = repeats[repeats["status"] != "ok"]
    note = ""
    if len(not_ok):
        first = next((reason for reason in not_ok["reason"] if isinstance(reason, str) and reason.strip()), "")
        note = f"{len(not_ok)} of {len(repeats)} repeats not ok" + (f": {' '.join(first.split())[:200]}" if first else "")
    shown = usable if len(usable) else repeats
    versions = [str(value) for value in shown["framework_version"].dropna().unique() if str(value)]
    broken = not values and (not diverged.empty or any(status in BREAKING_STATUSES for status in statuses))
    return Side(status=status, broken=broken, note=note, values=values,
                accuracy=None if missing(accuracy) else float(accuracy),
                versions=", ".join(versions))


# --- the statistics ------------------------------------------------------------------------------

def significance(base: list[float], new: list[float], higher_is_better: bool) -> tuple[str, float]:
    """(method, one-sided p-value that NEW is worse than BASE); p is NaN for the factor alone."""
    from scipy import stats  # imported here: only compare needs SciPy, and it takes a moment to load

    # NEW worse: its values smaller than BASE's where higher is better, larger where lower is
    alternative = "less" if higher_is_better else "greater"
    smallest = min(len(base), len(new))
    if smallest < WELCH_MIN:
        return f"{FACTOR_ONLY} (fewer than {WELCH_MIN} ok repeats)", math.nan
    if len(set(base)) == 1 and len(set(new)) == 1:
        return f"{FACTOR_ONLY} (no spread in either run)", math.nan
    with warnings.catch_warnings():  # one run without spread: SciPy warns of lost precision, the test holds
        warnings.simplefilter("ignore", RuntimeWarning)
        if smallest >= MANN_WHITNEY_MIN:
            method, p_value = MANN_WHITNEY, stats.mannwhitneyu(new, base, alternative=alternative).pvalue
        else:
            method, p_value = WELCH, stats.ttest_ind(new, base, equal_var=False, alternative=alternative).pvalue
    if not math.isfinite(p_value):
        return f"{FACTOR_ONLY} (the test gave no p-value)", math.nan
    return method, float(p_value)


def _compare_row(identity: dict[str, str], base: Side, new: Side, workload: declaration.Workload,
                 factor: float) -> Row:
    metric = workload.headline_metric
    row = Row(identity=identity, base=base, new=new, metric=metric,
              accuracy_tolerance=workload.accuracy_tolerance if workload.accuracy else None)
    if base.versions and new.versions and base.versions != new.versions:
        row.notes.append(f"{identity['framework']} {base.versions} in BASE, {new.versions} in NEW")
    row.notes += [f"{label}: {side.note}" for label, side in (("BASE", base), ("NEW", new)) if side.note]
    if not (base.usable and new.usable):
        row.verdict = BROKEN if base.usable and new.broken else NOT_COMPARED
        return row
    higher = metric.better == HIGHER
    row.ratio = new.median / base.median if base.median else math.nan
    row.worse_by = (base.median / new.median if new.median else math.inf) if higher else row.ratio
    row.method, row.p_value = significance(base.values, new.values, higher)
    tested = not math.isnan(row.p_value)
    if row.worse_by > factor:
        row.verdict = WORSE if not tested or row.p_value < ALPHA else NOT_SIGNIFICANT
    elif row.worse_by < 1 / factor:
        if tested:  # the same test the other way round: p of "NEW is better", for this row's p column
            row.p_value = significance(base.values, new.values, not higher)[1]
        row.verdict = BETTER if not tested or row.p_value < ALPHA else NOT_SIGNIFICANT
    else:
        row.verdict = SAME
    if row.accuracy_tolerance is not None and base.accuracy is not None and new.accuracy is not None:
        row.accuracy_change = new.accuracy - base.accuracy
        loss = -row.accuracy_change
        row.accuracy_verdict = WORSE if loss > row.accuracy_tolerance + ACCURACY_ROUNDING else SAME
    return row


def compare(base_dir: str | os.PathLike, new_dir: str | os.PathLike, factor: float = DEFAULT_FACTOR) -> Comparison:
    """Match BASE's and NEW's cells and judge each change (see the module's docstring)."""
    factor = check_factor(factor)
    base_frame, base_unreadable = load_run(base_dir, "BASE")
    new_frame, new_unreadable = load_run(new_dir, "NEW")
    base_profiles, new_profiles = set(base_frame["profile"]), set(new_frame["profile"])
    if not base_profiles & new_profiles:
        raise UserError(f"BASE ran the {', '.join(sorted(base_profiles))} profile and NEW the "
                        f"{', '.join(sorted(new_profiles))} one: their figures are not on the same scale; "
                        f"compare two runs of the same --profile")
    base_devices, new_devices = measured_devices(base_frame), measured_devices(new_frame)
    if base_devices and new_devices and not base_devices & new_devices:
        raise UserError(f"BASE ran on {_listed(base_devices)} and NEW on {_listed(new_devices)}: "
                        f"figures from another device are not on the same scale, so nothing was compared; compare "
                        f"with a run from the same device model")
    declared = declaration.declared()
    base_frame = base_frame[base_frame["workload"].isin(declared)]
    new_frame = new_frame[new_frame["workload"].isin(declared)]
    base_cells = {key: group for key, group in base_frame.groupby(IDENTITY, sort=False)}
    new_cells = {key: group for key, group in new_frame.groupby(IDENTITY, sort=False)}
    common = [key for key in base_cells if key in new_cells]
    if not common:
        raise UserError(f"BASE ({len(base_cells)} cells) and NEW ({len(new_cells)} cells) have no cell in common "
                        f"(same framework, variant, workload, precision, profile, data, init, options and device); "
                        f"compare two runs of the same matrix")
    order = list(declared)
    rows = []
    for key in sorted(common, key=lambda key: (order.index(key[0]), key[1:])):
        workload = declaration.get(key[0])
        identity = dict(zip(IDENTITY, key))
        rows.append(_compare_row(identity, _side(base_cells[key], workload), _side(new_cells[key], workload),
                                 workload, factor))

    def only(cells: dict, other: dict, other_side: str) -> list[dict]:
        """The cells the other run lacks, each with why it could not be compared."""
        listed = []
        for key in sorted((key for key in cells if key not in other), key=lambda key: (order.index(key[0]), key[1:])):
            identity = dict(zip(IDENTITY, key))
            statuses = ", ".join(dict.fromkeys(cells[key]["status"].tolist()))
            elsewhere = [other_key[-1] for other_key in other if other_key[:-1] == key[:-1]]
            why = (f"{other_side} ran it on {', '.join(elsewhere)}, not on {identity['machine']}" if elsewhere
                   else f"{other_side} did not run it")
            listed.append({"identity": identity, "name": cell_name(identity), "status": statuses, "why": why})
        return listed

    return Comparison(base_dir=Path(base_dir), new_dir=Path(new_dir), factor=factor, rows=rows,
                      only_base=only(base_cells, new_cells, "NEW"), only_new=only(new_cells, base_cells, "BASE"),
                      unreadable={"BASE": len(base_unreadable), "NEW": len(new_unreadable)},
                      left_out=[*base_unreadable, *new_unreadable])
