"""The CPU's ceiling, measured: a roofline probe of large matrix multiplications on the cells' threads.

A CPU has no datasheet figure that holds for every core count, clock and vector unit, so a run
measures its own (docs/MEASURED.md, the CPU probe): once per host and run, before its first cell,
numpy's BLAS multiplies two square fp32 matrices on as many threads as a cell gets, and the best of
a few timed repeats is the CPU's fp32 peak, recorded in run.json's invocation as ``cpu_peak`` with
how it was measured. The probe runs in a subprocess of the host's own Python (its numpy, never a
framework: the host imports none), so that its thread count is set before the BLAS starts.
bf16 is not measured: numpy has no bfloat16 type; the record says so, with the CPU's bfloat16
instructions, and a bf16 CPU row shows "peak unknown". A CPU row's % of peak divides its achieved
FLOP/s by the probe of the CPU model it ran on (orchestrator/report/ceiling.py).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
import time

SIZE = 2048  # the matrices' side: 17 GFLOP a product, large enough for the BLAS's best kernel
LARGE_HOST_SIZE = 4096  # from LARGE_HOST_THREADS threads on, so that every thread has blocks to work on
LARGE_HOST_THREADS = 16
REPEATS = 3  # timed products at least; more until MIN_PROBE_S has passed
MIN_PROBE_S = 0.5
PROBE_TIMEOUT_S = 300
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's flags for bfloat16 arithmetic
# run.json may come from elsewhere: what a cpu_peak record may hold (record_problem).
LONGEST_TEXT = 400
PRECISION_NAMES = ("fp32", "tf32", "fp16", "bf16")


def cell_threads(environ=None) -> int:
    """The threads a CPU cell's math library runs on: OMP_NUM_THREADS where the host sets it (every
    backend hands it to its cells: orchestrator/backends, SPEED_VARIABLES), else every CPU this
    process may run on."""
    environ = os.environ if environ is None else environ
    value = environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0))


def cpu_model() -> str:
    """The CPU's model name as a cell records it (workloads/common/provenance.py, cpu_model)."""
    from workloads.common.provenance import cpu_model as recorded  # standard library only

    return recorded() or "unknown CPU"


def probe(threads: int, *, timeout: float = PROBE_TIMEOUT_S) -> dict:
    """Measure this host's CPU peak on `threads` threads: the cpu_peak record run.json keeps.
    A probe that fails is recorded as not measured, with why; it never stops the run."""
    record = {"cpu_model": cpu_model(), "threads": int(threads),
              "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "method": "", "flops_per_s": {}, "not_measured": {}}
    size = LARGE_HOST_SIZE if threads >= LARGE_HOST_THREADS else SIZE
    environment = {**os.environ, **{name: str(threads) for name in THREAD_VARIABLES}}
    try:
        finished = subprocess.run([sys.executable, "-m", "orchestrator.cpu_peak", str(size)], env=environment,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        measured = json.loads(finished.stdout.strip().splitlines()[-1]) if finished.returncode == 0 else None
    except subprocess.TimeoutExpired:
        measured, why = None, f"the probe ran past {timeout:g} s"
    except (OSError, ValueError, IndexError) as error:
        measured, why = None, f"the probe's answer could not be read ({type(error).__name__})"
    else:
        why = f"the probe exited {finished.returncode}: {finished.stderr.strip()[-200:]}"
    if not isinstance(measured, dict) or not _positive(measured.get("fp32")):
        record["method"] = f"numpy matmul of two {size}x{size} fp32 matrices on {threads} threads"
        record["not_measured"]["fp32"] = f"not measured: {why if measured is None else 'the probe gave no figure'}"
    else:
        record["flops_per_s"]["fp32"] = float(measured["fp32"])
        record["method"] = (f"numpy {measured['numpy']} matmul ({measured['blas']}) of two {size}x{size} fp32 "
                            f"matrices on {threads} threads, the best of {measured['repeats']} timed products "
                            f"after one untimed: 2 x {size}^3 FLOPs each")
    flags = sorted(_cpu_flags() & set(BF16_INSTRUCTIONS))
    record["not_measured"]["bf16"] = (
        "not measured: numpy has no bfloat16 type, so the probe's BLAS multiplies none (this CPU has "
        + (", ".join(flags) if flags else "no bfloat16 instructions") + ")")
    return record


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def record_problem(record) -> str | None:
    """What makes a cpu_peak record (from run.json, which may come from elsewhere) unfit to be read,
    or None: every field of its type, texts bounded, figures finite and positive."""
    if not isinstance(record, dict):
        return "its cpu_peak is not an object"
    for name in ("cpu_model", "method", "measured_at"):
        if not isinstance(record.get(name), str) or len(record[name]) > LONGEST_TEXT:
            return f"its cpu_peak's {name} is not a text of at most {LONGEST_TEXT} characters"
    if type(record.get("threads")) is not int or not 0 < record["threads"] < 1 << 20:
        return "its cpu_peak's threads is not a positive whole number"
    figures, reasons = record.get("flops_per_s"), record.get("not_measured")
    if not isinstance(figures, dict) or not all(name in PRECISION_NAMES and _positive(value)
                                                for name, value in figures.items()):
        return "its cpu_peak's flops_per_s is not an object of precisions to positive numbers"
    if not isinstance(reasons, dict) or not all(name in PRECISION_NAMES and isinstance(text, str)
                                                and len(text) <= LONGEST_TEXT for name, text in reasons.items()):
        return "its cpu_peak's not_measured is not an object of precisions to texts"
    return None


def _measure(size: int) -> dict:
    """Run in the probe's subprocess: the best fp32 FLOP/s of a few SIZE x SIZE products."""
    import numpy as np

    generator = np.random.default_rng(0)
    a, b = (generator.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    np.matmul(a, b)  # untimed: the BLAS's threads start, the pages are touched
    best, repeats, started = math.inf, 0, time.perf_counter()
    while repeats < REPEATS or time.perf_counter() - started < MIN_PROBE_S:
        start = time.perf_counter()
        np.matmul(a, b)
        best = min(best, time.perf_counter() - start)
        repeats += 1
    try:  # numpy 1.25 and newer describe their build
        blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    except AttributeError:
        blas = {}
    return {"fp32": 2.0 * size ** 3 / best, "repeats": repeats, "numpy": np.__version__,
            "blas": f"{blas.get('name', 'unknown BLAS')} {blas.get('version', '')}".strip()}


if __name__ == "__main__":
    print(json.dumps(_measure(int(sys.argv[1]))))
