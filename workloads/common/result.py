"""The versioned result record: one JSON file per cell, written inside the image, read on the host.

Standard library only, so both sides share it. ``schema/result.schema.json`` is generated from
these dataclasses (``python -m workloads.common.result``) and a test keeps the two in step.
"""
import dataclasses  # novermin (Python 3.6 images install the dataclasses backport)
import json
import math
import os
import sys
import typing
from dataclasses import dataclass, field  # novermin
from pathlib import Path
from typing import Dict, List, Optional, Union

from workloads.common import safe_files

SCHEMA_VERSION = 4
# Version 1 lacks only fields that have defaults here (init, options, per-step training times,
# the first loss, trace counts, the wider provenance), version 2 only the phases' wall-clock spans
# and the host's energy record, version 3 only the FLOP figures and the cell's mode (the threads
# asked and reported too): all are still read.
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)

# The contract between host and image: exit 0 = result written and ok; EXIT_UNSUPPORTED = the
# cell cannot run here (the reason is in the result); anything else = failed.
EXIT_OK = 0
EXIT_UNSUPPORTED = 3

STATUSES = ("ok", "unsupported", "failed", "timeout")
# How a cell's model starts: from the canonical weights every framework loads (the default, so that
# accuracies compare), or from each framework's own initialisers.
CANONICAL_INIT, FRAMEWORK_INIT = "canonical", "framework"
INITS = (CANONICAL_INIT, FRAMEWORK_INIT)


class SchemaError(ValueError):
    """A result file this version of Rosetta Bench cannot read."""


@dataclass
class Cell:
    """What was asked for: one (framework, variant, workload, precision, mode, profile) and repeat."""

    framework: str
    workload: str
    variant: str = "cpu"
    precision: str = "fp32"
    profile: str = "full"
    data: str = "real"
    repeat: int = 0
    init: str = CANONICAL_INIT  # canonical or framework (see INITS)
    options: Dict[str, str] = field(default_factory=dict)  # non-default framework options (workloads/common/options.py)
    # How the framework runs the model (workloads/common/modes.py): eager, graph or compiled; ""
    # (a result from before modes were declared): the framework's default mode, unnamed.
    mode: str = ""

    @property
    def key(self) -> str:
        """File-name-safe identity; a repeat of the same cell gets its own key, and so does a cell
        run from the framework's own initialisers or with a non-default option, and each mode."""
        parts = [self.framework, self.variant, self.workload, self.precision] + ([self.mode] if self.mode else [])
        parts += [self.profile, self.data]
        if self.init != CANONICAL_INIT:
            parts.append(f"init-{self.init}")
        parts += [f"{name}-{self.options[name]}" for name in sorted(self.options)]
        return "__".join(parts + [f"r{self.repeat}"])


@dataclass
class Metrics:
    """Derived figures; None where a figure does not apply to the workload."""

    train_time_s: Optional[float] = None  # every epoch, first step included (the study's figure)
    steady_state_time_s: Optional[float] = None  # training time after the first (warm-up) step
    samples_per_s: Optional[float] = None
    steady_samples_per_s: Optional[float] = None
    seconds_per_1000_images: Optional[float] = None  # ResNet-50, timed pass only
    images_per_s: Optional[float] = None
    test_accuracy: Optional[float] = None
    final_loss: Optional[float] = None
    parameter_count: Optional[int] = None
    peak_host_memory_mb: Optional[float] = None
    peak_device_memory_mb: Optional[float] = None
    # The headline phase's FLOPs per sample, counted from the model (workloads/common/flops.py), and
    # the measured headline rate times it: training's steady samples/s x forward + backward FLOPs,
    # inference's images/s x forward FLOPs. What a % of peak divides by the device's peak.
    flops_per_sample: Optional[float] = None
    achieved_flops_per_s: Optional[float] = None


@dataclass
class Samples:
    """Every raw timing sample, kept so that spread and outliers can be studied later."""

    first_step_s: Optional[float] = None  # first training step: compilation / autotuning lands here
    epoch_times_s: List[float] = field(default_factory=list)
    epoch_steps: List[int] = field(default_factory=list)
    epoch_losses: List[Optional[float]] = field(default_factory=list)  # None: not a finite number
    # Inference: one per timed batch, the device synchronised around each. Training: one per step,
    # every epoch in order, as the host saw it (the device is synchronised only after the first
    # step and at each epoch's end, so a step's figure is when the host could hand over the next
    # batch); a retrace or recompilation after the first step shows here as an outlier.
    batch_times_s: List[float] = field(default_factory=list)
    first_loss: Optional[float] = None  # the first training step's loss: the validity gate's baseline
    # How often Python traced each compiled function (tf.function, jax.jit, ...): more than once per
    # input shape is a retrace, paid inside the timed steps.
    traces: Dict[str, int] = field(default_factory=dict)


@dataclass
class Provenance:
    """Where and with what the numbers were measured."""

    framework_version: Optional[str] = None
    python_version: Optional[str] = None
    numpy_version: Optional[str] = None
    cuda_version: Optional[str] = None  # as the framework sees it
    cudnn_version: Optional[str] = None
    device: Optional[str] = None  # cpu or cuda, as resolved
    gpu_name: Optional[str] = None
    gpu_driver: Optional[str] = None
    cpu_model: Optional[str] = None
    cpu_count: Optional[int] = None
    platform: Optional[str] = None
    hostname: Optional[str] = None
    git_revision: Optional[str] = None
    data_source: Optional[str] = None  # real or synthetic
    data_checksum: Optional[str] = None  # of the downloaded archive, "algorithm:hexdigest"
    backend: Optional[str] = None  # local or docker, filled in by the host
    interpreter: Optional[str] = None
    user_id: Optional[int] = None  # the workload's uid: containers run as a non-root user
    network_interfaces: List[str] = field(default_factory=list)  # just ["lo"] in a container without network
    image_id: Optional[str] = None
    image_digest: Optional[str] = None
    # Where a cluster backend placed the cell (Ray): node id, node address, accelerator type, the
    # engine's version, and how many tries it took; empty for a cell run on this host.
    cluster: Dict[str, str] = field(default_factory=dict)
    image_revision: Optional[str] = None  # the project revision the image was built from (its label)
    image_sources_sha256: Optional[str] = None  # the workload sources the image holds (its label)
    cpu_affinity: Optional[int] = None  # CPUs this process may run on (sched_getaffinity)
    cpu_quota: Optional[float] = None  # the cgroup's CPU limit, in CPUs; None: no limit
    process_threads: Optional[int] = None  # threads the cell's process held at its end: every pool its framework started
    # The run's thread rule (docs/FAIRNESS.md: same-threads): the threads asked of the framework, the
    # intra-op and inter-op counts it reports back (None: it reports none), and why it differs, if it does.
    threads_requested: Optional[int] = None
    threads_intra_op: Optional[int] = None
    threads_inter_op: Optional[int] = None
    threads_note: Optional[str] = None
    environment: Dict[str, str] = field(default_factory=dict)  # the variables that change speed, as set
    gpu: Dict[str, str] = field(default_factory=dict)  # memory, clocks, power limit, persistence, ECC, MIG
    packages: List[str] = field(default_factory=list)  # every installed distribution, "name==version", sorted
    packages_sha256: Optional[str] = None  # of the package list, one "name==version" per line
    extras: Dict[str, str] = field(default_factory=dict)  # framework-specific switches


# How an energy figure was obtained (orchestrator/telemetry/): the difference of a hardware
# energy counter (NVML's total energy, RAPL's energy_uj), power samples integrated over time, or
# not at all (the figure is null and `reason` says why).
ENERGY_METHODS = ("counter", "integration", "none")


@dataclass
class DeviceEnergy:
    """One kind of device's energy over the cell (the GPUs it was given, or the CPU packages),
    measured on the host around the cell. Joules and watts summed over the devices; null where
    the method could not measure a figure. Gross: everything drawn while the cell ran; net: gross
    minus the idle power (measured just before the cell) times the cell's duration."""

    method: str = "none"  # one of ENERGY_METHODS
    reason: Optional[str] = None  # why a figure is null, or what limits it
    devices: List[str] = field(default_factory=list)  # "0: NVIDIA H200", "package-0", ...
    duration_s: Optional[float] = None  # the cell as the host measured it
    gross_j: Optional[float] = None
    net_j: Optional[float] = None
    idle_w: Optional[float] = None
    mean_w: Optional[float] = None  # gross_j / duration_s
    peak_w: Optional[float] = None  # the highest power sample (GPU only: RAPL gives no power)
    phase_j: Dict[str, float] = field(default_factory=dict)  # gross joules inside each phase's spans
    readings: int = 0  # samples taken while the cell ran
    utilisation_mean_pct: Optional[float] = None
    utilisation_max_pct: Optional[float] = None
    sm_clock_mean_mhz: Optional[float] = None
    sm_clock_min_mhz: Optional[float] = None
    max_temperature_c: Optional[float] = None
    throttle_reasons: List[str] = field(default_factory=list)  # NVML's clock-event reasons seen
    peak_memory_mb: Optional[float] = None  # device memory in use (every process's), at its peak


@dataclass
class Energy:
    """The host's energy record of one cell, and what it gives per sample (or image) of the
    workload's steady phase: the training steps after the first, or ResNet-50's timed batches."""

    gpu: DeviceEnergy = field(default_factory=DeviceEnergy)
    cpu: DeviceEnergy = field(default_factory=DeviceEnergy)
    basis_phase: Optional[str] = None  # the phase the per-sample figures are of ("steady", "inference")
    basis_samples: Optional[int] = None  # samples (images) processed in that phase
    basis_devices: List[str] = field(default_factory=list)  # whose joules count: ["gpu", "cpu"]
    joules_per_sample: Optional[float] = None  # gross, in the basis phase
    net_joules_per_sample: Optional[float] = None  # net of idle power, in the basis phase
    samples_per_joule: Optional[float] = None
    kwh: Optional[float] = None  # the whole cell, gross, the measured devices together
    reason: Optional[str] = None  # why the per-sample figures are null


@dataclass
class Result:
    """One cell's outcome: identity, status, timed phases, metrics, raw samples, provenance."""

    cell: Cell
    status: str = "ok"
    reason: Optional[str] = None  # why a cell is unsupported / failed
    started_at: Optional[str] = None  # ISO 8601, UTC
    phases: Dict[str, float] = field(default_factory=dict)  # seconds per timed phase
    # Wall-clock (time.time()) [start, end] of every stretch of each phase, so the host can attribute
    # its energy samples to phases; "first_step" and "steady" split training's "train" phase.
    phase_spans: Dict[str, List[List[float]]] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    samples: Samples = field(default_factory=Samples)
    settings: Dict[str, typing.Any] = field(default_factory=dict)  # the hyperparameters used
    provenance: Provenance = field(default_factory=Provenance)
    outputs: Dict[str, typing.Any] = field(default_factory=dict)  # parity runs: the model's outputs
    wall_time_s: Optional[float] = None  # the whole cell as the host saw it
    energy: Optional[Energy] = None  # measured on the host around the cell; None: not sampled
    stderr_tail: Optional[str] = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        """Plain JSON data; a NaN or infinity (a diverged loss) becomes None, never a bare token."""
        return finite_only(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version not in READABLE_SCHEMA_VERSIONS:
            raise SchemaError(
                f"result schema_version {version!r} is not supported (this Rosetta Bench reads "
                f"versions {', '.join(map(str, READABLE_SCHEMA_VERSIONS))}); re-run the cell or use the matching release")
        try:
            return _build(cls, data)
        except (TypeError, KeyError) as error:
            raise SchemaError(f"malformed result record: {error}") from error

    def to_json(self) -> str:
        """The record as its result file holds it (what `write` writes; a Ray node's answer carries it)."""
        return json_text(self.to_dict())

    def write(self, path: Union[str, os.PathLike]) -> None:
        """Write atomically, so that a crash never leaves half a result on disk."""
        safe_files.write_text_atomic(Path(path), self.to_json())

    @classmethod
    def read(cls, path: Union[str, os.PathLike]) -> "Result":
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise SchemaError(f"{path}: not valid JSON ({error})") from error
        try:
            return cls.from_dict(data)
        except SchemaError as error:
            raise SchemaError(f"{path}: {error}") from error


def write_json_atomic(path: Path, data: dict) -> None:
    """Write `data` as indented JSON atomically, never through a link (workloads/common/safe_files.py).
    NaN and infinity are refused: they are not JSON (finite_only turns them into None first)."""
    safe_files.write_text_atomic(path, json_text(data))


def json_text(data: dict) -> str:
    """`data` as the project's JSON files hold it: indented, NaN and infinity refused."""
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"


def finite_only(value):
    """``value`` with every NaN or infinite float replaced by None, at any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_only(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(item) for item in value]
    return value


def _build(kind, data):
    """Rebuild nested dataclasses from plain JSON data."""
    hints = typing.get_type_hints(kind)
    values = {}
    for item in dataclasses.fields(kind):
        if item.name not in data:
            continue
        value = data[item.name]
        kind_of_value = _dataclass_in(hints[item.name])
        if kind_of_value is not None and isinstance(value, dict):
            value = _build(kind_of_value, value)
        values[item.name] = value
    unknown = set(data) - {item.name for item in dataclasses.fields(kind)}
    if unknown:
        raise TypeError(f"unknown field(s) in {kind.__name__}: {', '.join(sorted(unknown))}")
    return kind(**values)


def _dataclass_in(hint):
    """The dataclass a field holds: its type, or the X of Optional[X]; else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    arguments = [argument for argument in getattr(hint, "__args__", None) or ()
                 if argument is not type(None)]  # Optional[X] is Union[X, None]
    if getattr(hint, "__origin__", None) is typing.Union and len(arguments) == 1 \
            and dataclasses.is_dataclass(arguments[0]):
        return arguments[0]
    return None


# --- JSON Schema, generated from the dataclasses above ------------------------------------------

def _type_schema(hint) -> dict:
    origin = typing.get_origin(hint)  # novermin (the schema is generated on the host, never in an image)
    arguments = typing.get_args(hint)  # novermin
    if dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        options = [_type_schema(a) for a in arguments if a is not type(None)]
        schema = options[0] if len(options) == 1 else {"anyOf": options}
        if type(None) in arguments:
            schema = {"anyOf": [schema, {"type": "null"}]}
        return schema
    if origin is list:
        return {"type": "array", "items": _type_schema(arguments[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(arguments[1])}
    if hint is typing.Any:
        return {}
    return {str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"},
            bool: {"type": "boolean"}}[hint]


def _dataclass_schema(kind) -> dict:
    hints = typing.get_type_hints(kind)
    properties = {item.name: _type_schema(hints[item.name]) for item in dataclasses.fields(kind)}
    required = [item.name for item in dataclasses.fields(kind)
                if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING]
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if kind.__doc__:
        schema["description"] = " ".join(kind.__doc__.split())
    if required:
        schema["required"] = required
    return schema


def json_schema() -> dict:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$id": "https://rosetta-bench.invalid/schema/result.schema.json",
              "title": "Rosetta Bench cell result", **_dataclass_schema(Result)}
    schema["properties"]["schema_version"] = {"enum": list(READABLE_SCHEMA_VERSIONS)}
    schema["properties"]["status"] = {"enum": list(STATUSES)}
    schema["required"] = sorted(set(schema.get("required", [])) | {"schema_version", "status"})
    return schema


if __name__ == "__main__":
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")

