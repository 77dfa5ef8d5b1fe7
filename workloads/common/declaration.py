"""What a workload declares about itself, once: `workloads/<workload>/__init__.py` holds a `WORKLOAD`.

Standard library only (Python 3.6 and newer: the oldest images run 3.6), so the host and every
image read the same declaration. Everything else (the settings a framework reads, the report's
columns and headline, which dataset the host prefetches, the parity batch, the console line) is
derived from it; see workloads/ADDING_A_WORKLOAD.md.
"""
import dataclasses  # novermin (Python 3.6 images install the dataclasses backport)
import importlib
from dataclasses import dataclass  # novermin
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

from workloads.common.result import Metrics

LOWER, HIGHER = "lower", "higher"  # which direction is better
TRAINING, INFERENCE = "training", "inference"
IMAGES, TOKENS = "images", "tokens"  # what a parity batch's input holds
RECORDED = frozenset(f.name for f in dataclasses.fields(Metrics))  # the record's own figures


@dataclass(frozen=True)
class Metric:
    """One figure the report shows, with where its value comes from.

    A metric named after a field of the result's `metrics` record (workloads.common.result.Metrics,
    filled in by the harness) reads that field. Any other metric declares ``derive``: a function of
    the whole result record (its samples, phases, settings and metrics) that returns the figure or
    None, evaluated on the host when results are loaded. So a new figure needs no new field in the
    result schema: what it is computed from is already recorded (a framework adds a timed phase
    with ``run.phase(name)`` if it needs one).
    """

    name: str  # a field of workloads.common.result.Metrics, or the derived metric's own name
    label: str  # column heading, e.g. "train time" (the unit is added unless the label names it)
    unit: str  # "s", "samples/s", "" for a fraction
    better: str  # LOWER or HIGHER
    description: str = ""
    derive: Optional[Callable[[Any], Optional[float]]] = None  # result -> value, for a derived metric

    def __post_init__(self):
        if self.better not in (LOWER, HIGHER):
            raise ValueError("Metric {!r}: better must be {!r} or {!r}".format(self.name, LOWER, HIGHER))
        if self.derive is None and self.name not in RECORDED:
            raise ValueError("Metric {!r} is not a field of the result's metrics record; declare how it is "
                             "derived (derive=lambda result: ...)".format(self.name))
        if self.derive is not None and self.name in RECORDED:
            raise ValueError("Metric {!r} is recorded by the harness; a derived metric needs a name of its "
                             "own".format(self.name))

    def value(self, result) -> Optional[float]:
        """This metric's value in one result record (a workloads.common.result.Result), or None."""
        if self.derive is not None:
            return self.derive(result)
        return getattr(result.metrics, self.name)

    @property
    def heading(self) -> str:
        """The label with its unit, e.g. "train time (s)"; a label that names its unit stays as it is
        ("samples/s", "s / 1000 images"), and a fraction has none ("test accuracy")."""
        if not self.unit or self.unit in self.label.split():
            return self.label
        return "{} ({})".format(self.label, self.unit)


@dataclass(frozen=True)
class Workload:
    """A workload's one declaration.

    ``settings`` is a frozen dataclass whose defaults are the full profile (the study's settings);
    ``smoke`` overrides only how much work is done, never the model or the optimizer.
    ``metrics`` lists every figure the report shows for it, one column each, in this order:
    ``headline`` names the ranked one (median, spread, relative to the best), ``throughput`` and
    ``steady`` the rates a throughput comparison reads (benchmarks/framework_throughput.py).
    ``parity_input`` says what the canonical parity batch holds (IMAGES of ``settings.image_shape``
    or TOKENS below ``settings.vocabulary``, ``settings.sequence_length`` long); a training
    workload's batch has labels too. ``canonical_layers(layers, settings)`` names the model's
    layers in order through workloads.common.canonical.Layers, which draws their canonical weights;
    ``flop_model(settings)`` walks its forward pass in shapes (workloads.common.flops.FlopTrace).
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
    dataset: Optional[str] = None  # a downloaded dataset (workloads.common.data), None for random input
    parity_batch: int = 8  # the canonical batch's size in the parity check
    parity_input: str = IMAGES  # IMAGES or TOKENS
    parity_outputs: Tuple[str, ...] = ()  # what parity() returns (see workloads/common/canonical.py)
    canonical_layers: Optional[Callable[[Any, Any], None]] = None  # (layers, settings) -> None
    # (settings) -> workloads.common.flops.FlopTrace: the forward pass in shapes, whose FLOPs per
    # sample every result's achieved FLOP/s is measured against. None: not counted.
    flop_model: Optional[Callable[[Any], Any]] = None
    # The test accuracy a correct run reaches in the full profile on real data (the study's figure),
    # give or take the tolerance: the report flags a row outside it. None: no accuracy applies.
    accuracy_target: Optional[float] = None
    accuracy_tolerance: float = 0.0
    description: str = ""

    def __post_init__(self):
        if self.kind not in (TRAINING, INFERENCE):
            raise ValueError("workload {!r}: kind must be {!r} or {!r}".format(self.name, TRAINING, INFERENCE))
        names = [metric.name for metric in self.metrics]
        for role in ("headline", "throughput", "steady"):
            value = getattr(self, role)
            if value is not None and value not in names:
                raise ValueError("workload {!r}: {} {!r} is not one of its metrics".format(self.name, role, value))
        if len(set(names)) != len(names):
            raise ValueError("workload {!r}: a metric is listed twice".format(self.name))
        unknown = set(self.smoke) - {f.name for f in dataclasses.fields(self.settings)}
        if unknown:
            raise ValueError("workload {!r}: smoke overrides unknown settings {}".format(self.name, sorted(unknown)))
        if self.parity_input not in (IMAGES, TOKENS):
            raise ValueError("workload {!r}: parity_input must be {!r} or {!r}".format(self.name, IMAGES, TOKENS))

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError("workload {!r} has no metric {!r}".format(self.name, name))

    @property
    def headline_metric(self) -> Metric:
        return self.metric(self.headline)

    @property
    def accuracy(self) -> bool:
        """Whether a test accuracy applies: it does when the workload lists the metric."""
        return TEST_ACCURACY.name in (metric.name for metric in self.metrics)

    @property
    def parity_labels(self) -> bool:
        """A training workload's parity batch has labels: its optimizer steps need them."""
        return self.kind == TRAINING

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
TRAIN_TIME = Metric("train_time_s", "total train time", "s", LOWER,
                    "every epoch, first step (compilation, autotuning) included: the study's figure")
SAMPLES_PER_S = Metric("samples_per_s", "samples/s overall", "samples/s", HIGHER,
                       "over every epoch, first step included")
STEADY_SAMPLES_PER_S = Metric("steady_samples_per_s", "steady samples/s", "samples/s", HIGHER,
                              "every step after the first: the ranked, steady-state throughput")
FIRST_STEP = Metric("first_step_s", "first step", "s", LOWER,
                    "the first training step alone: compilation, tracing and autotuning land here",
                    derive=lambda result: result.samples.first_step_s)
TEST_ACCURACY = Metric("test_accuracy", "test accuracy", "", HIGHER, "on the test set after training")
