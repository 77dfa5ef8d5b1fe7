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

SCHEMA_VERSION = 2
# Version 1 lacks only fields that have defaults here (init, options, per-step training times,
# the first loss, trace counts, the wider provenance): it is still read.
READABLE_SCHEMA_VERSIONS = (1, 2)

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
    """What was asked for: one (framework, variant, workload, precision, profile) and repeat."""

    framework: str
    workload: str
    variant: str = "cpu"
    precision: str = "fp32"
    profile: str = "full"
    data: str = "real"
    repeat: int = 0
    init: str = CANONICAL_INIT  # canonical or framework (see INITS)
    options: Dict[str, str] = field(default_factory=dict)  # non-default framework options (workloads/common/options.py)

    @property
    def key(self) -> str:
        """File-name-safe identity; a repeat of the same cell gets its own key, and so does a cell
        run from the framework's own initialisers or with a non-default option."""
        parts = [self.framework, self.variant, self.workload, self.precision, self.profile, self.data]
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
    environment: Dict[str, str] = field(default_factory=dict)  # the variables that change speed, as set
    gpu: Dict[str, str] = field(default_factory=dict)  # memory, clocks, power limit, persistence, ECC, MIG
    packages: List[str] = field(default_factory=list)  # every installed distribution, "name==version", sorted
    packages_sha256: Optional[str] = None  # of the package list, one "name==version" per line
    extras: Dict[str, str] = field(default_factory=dict)  # framework-specific switches


@dataclass
class Result:
    """One cell's outcome: identity, status, timed phases, metrics, raw samples, provenance."""

    cell: Cell
    status: str = "ok"
    reason: Optional[str] = None  # why a cell is unsupported / failed
    started_at: Optional[str] = None  # ISO 8601, UTC
    phases: Dict[str, float] = field(default_factory=dict)  # seconds per timed phase
    metrics: Metrics = field(default_factory=Metrics)
    samples: Samples = field(default_factory=Samples)
    settings: Dict[str, typing.Any] = field(default_factory=dict)  # the hyperparameters used
    provenance: Provenance = field(default_factory=Provenance)
    outputs: Dict[str, typing.Any] = field(default_factory=dict)  # parity runs: the model's outputs
    wall_time_s: Optional[float] = None  # the whole cell as the host saw it
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

    def write(self, path: Union[str, os.PathLike]) -> None:
        """Write atomically, so that a crash never leaves half a result on disk."""
        write_json_atomic(Path(path), self.to_dict())

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
    safe_files.write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


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
        if dataclasses.is_dataclass(hints[item.name]) and isinstance(value, dict):
            value = _build(hints[item.name], value)
        values[item.name] = value
    unknown = set(data) - {item.name for item in dataclasses.fields(kind)}
    if unknown:
        raise TypeError(f"unknown field(s) in {kind.__name__}: {', '.join(sorted(unknown))}")
    return kind(**values)


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
