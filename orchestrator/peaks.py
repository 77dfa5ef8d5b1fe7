"""The dense peak FLOP/s a GPU's datasheet quotes, per precision (results/reference/gpu-peak-flops.toml).

A result's % of peak divides its achieved FLOP/s by the peak of the GPU it ran on, matched by the
name NVML reports (the `gpu_name` every CUDA result records), in the precision it ran. A GPU the
table does not list, or a precision it has no peak for, says so: never a guess.
"""
from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UserError
from workloads.common.hyperparams import PRECISIONS

TABLE = Path(__file__).resolve().parent.parent / "results" / "reference" / "gpu-peak-flops.toml"
LONGEST_TABLE = 1 << 20  # bytes


@dataclass(frozen=True)
class GpuPeaks:
    model: str
    nvml_names: tuple[str, ...]
    flops_per_s: dict[str, float]  # precision -> dense peak FLOP/s
    source: str


@dataclass(frozen=True)
class Peak:
    """A cell's ceiling: `flops_per_s` with where it comes from, or None and why there is none."""

    flops_per_s: float | None
    source: str  # the datasheet, or why there is no peak


def _key(name: str) -> str:
    return " ".join(str(name).split()).casefold()


@functools.lru_cache(maxsize=4)
def load(path: Path = TABLE) -> dict[str, GpuPeaks]:
    """NVML name (case and spacing aside) -> its GPU's peaks; the table refused in one line if malformed."""
    fix = f"restore it with `git checkout {TABLE.relative_to(TABLE.parent.parent.parent)}`"
    try:
        if path.stat().st_size > LONGEST_TABLE:
            raise UserError(f"{path}: larger than {LONGEST_TABLE} bytes; {fix}")
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"{path}: cannot be read ({error}); {fix}") from None
    table: dict[str, GpuPeaks] = {}
    for number, entry in enumerate(document.get("gpu", []), start=1):
        problem = _entry_problem(entry)
        if problem:
            raise UserError(f"{path}: GPU entry {number}: {problem}; {fix}")
        peaks = {precision: float(entry[f"{precision}_tflops"]) * 1e12 for precision in PRECISIONS
                 if f"{precision}_tflops" in entry}
        gpu = GpuPeaks(entry["model"], tuple(entry["nvml_names"]), peaks, entry["source"])
        for name in gpu.nvml_names:
            if _key(name) in table:
                raise UserError(f"{path}: {name!r} is listed twice; {fix}")
            table[_key(name)] = gpu
    return table


def _entry_problem(entry) -> str | None:
    if not isinstance(entry, dict):
        return "not a table"
    for field in ("model", "source"):
        if not isinstance(entry.get(field), str) or not entry[field].strip():
            return f"no {field}"
    names = entry.get("nvml_names")
    if not isinstance(names, list) or not names or not all(isinstance(name, str) and name.strip() for name in names):
        return "nvml_names must be a list of names"
    known = {"model", "source", "nvml_names"} | {f"{precision}_tflops" for precision in PRECISIONS}
    if set(entry) - known:
        return f"unknown field {sorted(set(entry) - known)[0]!r}"
    for precision in PRECISIONS:
        value = entry.get(f"{precision}_tflops")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            return f"{precision}_tflops must be a positive number of TFLOP/s"
    if "fp32_tflops" not in entry:
        return "no fp32_tflops (every GPU has an FP32 rate)"
    return None


def gpu_peak(gpu_name: str | None, precision: str, table: dict[str, GpuPeaks] | None = None) -> Peak:
    """The peak of `gpu_name` (as NVML reports it) in `precision`, or why there is none."""
    if not gpu_name or not str(gpu_name).strip():
        return Peak(None, "peak unknown: the GPU's name was not recorded")
    gpu = (load() if table is None else table).get(_key(gpu_name))
    if gpu is None:
        return Peak(None, f"peak unknown: {str(gpu_name)[:80]} is not in {TABLE.name}")
    flops = gpu.flops_per_s.get(precision)
    if flops is None:
        return Peak(None, f"no peak for {precision}: the {gpu.model} has no {precision} Tensor Core path in its "
                          f"datasheet")
    return Peak(flops, f"{gpu.model}, {precision}: {gpu.source}")
