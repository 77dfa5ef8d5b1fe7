"""What a workload declares about itself, once: `workloads/<workload>/__init__.py` holds a `WORKLOAD`.

Standard library only (Python 3.6 and newer: the oldest images run 3.6), so the host and every
image read the same declaration. Everything else (the settings a framework reads, the report's
columns and headline, which dataset the host prefetches, the parity batch, the console line) is
derived from it; see workloads/ADDING_A_WORKLOAD.md.
"""
import dataclasses  # novermin (Python 3.6 images install the dataclasses backport)
import importlib
from dataclasses import dataclass, field  # novermin
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

LOWER, HIGHER = "lower", "higher"  # which direction is better
TRAINING, INFERENCE = "training", "inference"


@dataclass(frozen=True)
class Metric:
    """One figure of a result's `metrics` record, as the report shows it."""

    name: str  # the field of workloads.common.result.Metrics
    label: str  # column heading
    unit: str  # "s", "samples/s", "" for a fraction
    better: str  # LOWER or HIGHER
    description: str = ""

    def __post_init__(self):
        if self.better not in (LOWER, HIGHER):
            raise ValueError("Metric {!r}: better must be {!r} or {!r}".format(self.name, LOWER, HIGHER))


@dataclass(frozen=True)
class Workload:
    """A workload's one declaration.

    ``settings`` is a frozen dataclass whose defaults are the full profile (the study's settings);
    ``smoke`` overrides only how much work is done, never the model or the optimizer.
    ``metrics`` lists every figure the report shows for it, the headline first among equals:
    ``headline`` names the ranked one, ``throughput`` and ``steady`` the rate columns.
    """

    name: str
    title: str  # the report's section heading
    kind: str  # TRAINING or INFERENCE
    order: int  # position in reports and listings (the study's order first)
    settings: Any  # the settings dataclass (its class, not an instance)
    smoke: Dict[str, Any]
    metrics: Tuple[Metric, ...]
    headline: str  # the metric ranked in the report and printed per cell
    throughput: str  # samples (or images) per second over the whole timed part
    steady: Optional[str] = None  # the throughput after the first step (training only)
    accuracy: bool = False  # whether a test accuracy applies
    dataset: Optional[str] = None  # a downloaded dataset (workloads.common.data), None for random input
    parity_batch: int = 8  # the canonical batch's size in the parity check
    parity_outputs: Tuple[str, ...] = ()  # what parity() returns (see workloads/common/canonical.py)
    description: str = ""

    def __post_init__(self):
        if self.kind not in (TRAINING, INFERENCE):
            raise ValueError("workload {!r}: kind must be {!r} or {!r}".format(self.name, TRAINING, INFERENCE))
        names = [metric.name for metric in self.metrics]
        for role in ("headline", "throughput", "steady"):
            value = getattr(self, role)
            if value is not None and value not in names:
                raise ValueError("workload {!r}: {} {!r} is not one of its metrics".format(self.name, role, value))
        unknown = set(self.smoke) - {f.name for f in dataclasses.fields(self.settings)}
        if unknown:
            raise ValueError("workload {!r}: smoke overrides unknown settings {}".format(self.name, sorted(unknown)))

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError("workload {!r} has no metric {!r}".format(self.name, name))

    @property
    def headline_metric(self) -> Metric:
        return self.metric(self.headline)

    def settings_for(self, profile: str):
        """The frozen settings of this workload under ``profile`` ("full" or "smoke")."""
        full = self.settings()
        return dataclasses.replace(full, **self.smoke) if profile == "smoke" else full


_WORKLOADS_DIR = Path(__file__).resolve().parent.parent
_NOT_WORKLOADS = {"common", "runtime"}
_cache = []  # type: List[Dict[str, Workload]]


def declared() -> Dict[str, Workload]:
    """Every workload, found by listing `workloads/*/__init__.py` (a folder is the registration),
    in declared order."""
    if not _cache:
        found = []
        for folder in sorted(_WORKLOADS_DIR.iterdir()):
            if folder.name in _NOT_WORKLOADS or folder.name.startswith(("_", ".")):
                continue
            if not (folder / "__init__.py").is_file():
                continue
            module = importlib.import_module("workloads." + folder.name)
            workload = getattr(module, "WORKLOAD", None)
            if workload is None:
                continue
            if workload.name != folder.name:
                raise ValueError("workloads/{}/__init__.py declares {!r}".format(folder.name, workload.name))
            found.append(workload)
        _cache.append({w.name: w for w in sorted(found, key=lambda w: (w.order, w.name))})
    return _cache[0]


def get(name: str) -> Workload:
    workloads = declared()
    if name not in workloads:
        raise ValueError("unknown workload {!r}; choose from {}".format(name, ", ".join(workloads)))
    return workloads[name]


# Figures shared by several workloads: one definition each, listed by the workloads that report them.
TRAIN_TIME = Metric("train_time_s", "train time", "s", LOWER,
                    "every epoch, first step (compilation, autotuning) included: the study's figure")
STEADY_TIME = Metric("steady_state_time_s", "steady time", "s", LOWER, "training time after the first step")
SAMPLES_PER_S = Metric("samples_per_s", "samples/s", "samples/s", HIGHER, "over every epoch")
STEADY_SAMPLES_PER_S = Metric("steady_samples_per_s", "steady samples/s", "samples/s", HIGHER,
                              "after the first step")
TEST_ACCURACY = Metric("test_accuracy", "test accuracy", "", HIGHER, "on the test set after training")
