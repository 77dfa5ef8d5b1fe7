"""The versioned result record: one JSON file per cell, written inside the image, read on the host.

Standard library only, so both sides share it. ``schema/result.schema.json`` is generated from
these dataclasses (``python -m workloads.common.result``) and a test keeps the two in step.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import typing
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1

# The contract between host and image: exit 0 = result written and ok; EXIT_UNSUPPORTED = the
# cell cannot run here (the reason is in the result); anything else = failed.
EXIT_OK = 0
EXIT_UNSUPPORTED = 3

STATUSES = ("ok", "unsupported", "failed", "timeout")


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

    @property
    def key(self) -> str:
        """File-name-safe identity; a repeat of the same cell gets its own key."""
        return "__".join(
            [self.framework, self.variant, self.workload, self.precision, self.profile, self.data,
             f"r{self.repeat}"])


@dataclass
class Metrics:
    """Derived figures; None where a figure does not apply to the workload."""

    train_time_s: float | None = None  # every epoch, first step included (the study's figure)
    steady_state_time_s: float | None = None  # training time after the first (warm-up) step
    samples_per_s: float | None = None
    steady_samples_per_s: float | None = None
    seconds_per_1000_images: float | None = None  # ResNet-50, timed pass only
    images_per_s: float | None = None
    test_accuracy: float | None = None
    final_loss: float | None = None
    parameter_count: int | None = None
    peak_host_memory_mb: float | None = None
    peak_device_memory_mb: float | None = None


@dataclass
class Samples:
    """Every raw timing sample, kept so that spread and outliers can be studied later."""

    first_step_s: float | None = None  # first training step: compilation / autotuning lands here
    epoch_times_s: list[float] = field(default_factory=list)
    epoch_steps: list[int] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    batch_times_s: list[float] = field(default_factory=list)  # inference: one per timed batch


@dataclass
class Provenance:
    """Where and with what the numbers were measured."""

    framework_version: str | None = None
    python_version: str | None = None
    numpy_version: str | None = None
    cuda_version: str | None = None  # as the framework sees it
    cudnn_version: str | None = None
    device: str | None = None  # cpu or cuda, as resolved
    gpu_name: str | None = None
    gpu_driver: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    platform: str | None = None
    hostname: str | None = None
    git_revision: str | None = None
    data_source: str | None = None  # real or synthetic
    data_checksum: str | None = None  # of the downloaded archive, "algorithm:hexdigest"
    backend: str | None = None  # local or docker, filled in by the host
    interpreter: str | None = None
    user_id: int | None = None  # the workload's uid: containers run as a non-root user
    network_interfaces: list[str] = field(default_factory=list)  # just ["lo"] in a container without network
    image_id: str | None = None
    image_digest: str | None = None
    extras: dict[str, str] = field(default_factory=dict)  # framework-specific switches


@dataclass
class Result:
    """One cell's outcome: identity, status, timed phases, metrics, raw samples, provenance."""

    cell: Cell
    status: str = "ok"
    reason: str | None = None  # why a cell is unsupported / failed
    started_at: str | None = None  # ISO 8601, UTC
    phases: dict[str, float] = field(default_factory=dict)  # seconds per timed phase
    metrics: Metrics = field(default_factory=Metrics)
    samples: Samples = field(default_factory=Samples)
    settings: dict[str, typing.Any] = field(default_factory=dict)  # the hyperparameters used
    provenance: Provenance = field(default_factory=Provenance)
    outputs: dict[str, typing.Any] = field(default_factory=dict)  # parity runs: the model's outputs
    wall_time_s: float | None = None  # the whole cell as the host saw it
    stderr_tail: str | None = None
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f"result schema_version {version!r} is not supported (this Rosetta Bench reads "
                f"version {SCHEMA_VERSION}); re-run the cell or use the matching release")
        try:
            return _build(cls, data)
        except (TypeError, KeyError) as error:
            raise SchemaError(f"malformed result record: {error}") from error

    def write(self, path: str | os.PathLike) -> None:
        """Write atomically, so that a crash never leaves half a result on disk."""
        write_json_atomic(Path(path), self.to_dict())

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Result":
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise SchemaError(f"{path}: not valid JSON ({error})") from error
        try:
            return cls.from_dict(data)
        except SchemaError as error:
            raise SchemaError(f"{path}: {error}") from error


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(data, stream, indent=2, sort_keys=False)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


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
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
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
    schema["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    schema["properties"]["status"] = {"enum": list(STATUSES)}
    schema["required"] = sorted(set(schema.get("required", [])) | {"schema_version", "status"})
    return schema


if __name__ == "__main__":
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
