"""Energy and device telemetry, sampled on the host around each cell, whatever the cell's image runs.

GPUs through NVML (NVIDIA's `nvidia-ml-py`, `import pynvml`): energy from the difference of the
total-energy counter where every GPU the cell was given has one (Volta and newer), else power
samples integrated over time (trapezoids, about 10 a second); besides, per reading, utilisation,
SM clock, temperature, the clock-event (throttle) reasons and the memory in use. CPUs through the
kernel's powercap RAPL counters (`/sys/class/powercap/intel-rapl:*/energy_uj`, wrap-around at
`max_energy_range_uj` handled), where this user may read them.

A cell's meter first measures idle power over a short window (IDLE_WINDOW_S) just before the cell
starts, so gross and net energy are both recorded, then keeps reading until the cell ends. The
workload reports its phases' wall-clock spans (Result.phase_spans, workloads/common/harness.py);
the host clock is the same clock, so the cumulative energy is read off at each span's ends and
every phase gets its joules, the steady phase above all (joules per sample, samples per joule).

Nothing to measure (no NVML or driver, a CPU cell, RAPL hidden or root-only): no thread, no idle
wait, and each figure is null with the reason. Every figure records its method (ENERGY_METHODS):
"counter", "integration", or "none".

    defaults.py  what is read and how often, and the method names
    rapl.py      CPU packages' energy counters
    nvml.py      the GPUs a cell was given, through NVML
    meter.py     one cell's meter: idle window, readings, joules per phase
    __init__.py  Telemetry: what this host can measure, a meter per cell
"""
from __future__ import annotations

from pathlib import Path

from orchestrator.telemetry.defaults import (CPU_INTERVAL_S, GPU_INTERVAL_S, IDLE_WINDOW_S, NONE,  # noqa: F401
                                             POWERCAP_ROOT)
from orchestrator.telemetry.meter import CellMeter  # noqa: F401 (the package's names)
from orchestrator.telemetry.nvml import NvmlGpus, clock_event_names, decode_clock_events, load_nvml  # noqa: F401
from orchestrator.telemetry.rapl import Rapl, Unmeasurable  # noqa: F401
from workloads.common.result import DeviceEnergy, Energy

# --- the run's telemetry: what this host can measure, and a meter per cell ----------------------

class Telemetry:
    """What this host can measure, found once per run, and a CellMeter per cell. `nvml` stands in
    for the `pynvml` module, `powercap_root` for /sys/class/powercap (tests)."""

    def __init__(self, *, nvml=None, powercap_root: Path | None = None, idle_window_s: float = IDLE_WINDOW_S,
                 gpu_interval_s: float | None = None, cpu_interval_s: float | None = None):
        self._nvml_module = nvml
        # the module's settings read now, not at import: a test may point them elsewhere
        self.powercap_root = Path(powercap_root or POWERCAP_ROOT)
        self.idle_window_s = idle_window_s
        self.gpu_interval_s = gpu_interval_s or GPU_INTERVAL_S
        self.cpu_interval_s = cpu_interval_s or CPU_INTERVAL_S
        self._nvml = None
        self._nvml_problem: str | None = None
        self._started = False

    def _nvml_or_reason(self):
        if not self._started:
            self._started = True
            try:
                self._nvml = load_nvml(self._nvml_module)
            except Unmeasurable as problem:
                self._nvml_problem = str(problem)
        return self._nvml, self._nvml_problem

    def meter(self, gpu_ids: list[str] | None, *, cuda: bool, **overrides) -> CellMeter:
        """A meter for a cell given `gpu_ids` (None: every GPU); `cuda`: whether it runs on a GPU at all."""
        gpus, gpu_reason = None, "a CPU cell: no GPU was given to it"
        if cuda:
            nvml, gpu_reason = self._nvml_or_reason()
            if nvml is not None:
                try:
                    gpus = NvmlGpus(nvml, gpu_ids)
                except Unmeasurable as problem:
                    gpu_reason = str(problem)
        try:
            rapl, cpu_reason = Rapl(self.powercap_root), None
        except Unmeasurable as problem:
            rapl, cpu_reason = None, str(problem)
        settings = dict(idle_window_s=self.idle_window_s, gpu_interval_s=self.gpu_interval_s,
                        cpu_interval_s=self.cpu_interval_s, **overrides)
        return CellMeter(gpus=gpus, gpu_reason=gpu_reason, rapl=rapl, cpu_reason=cpu_reason, **settings)

    def meter_for(self, backend, job) -> CellMeter:
        """The meter for a job of a backend that runs cells on this host (local, Docker)."""
        return self.meter(backend.gpus_given(), cuda=job.device == "cuda")

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down what we started; nothing to report
                pass
            self._nvml = None


def not_sampled(reason: str) -> Energy:
    """The record of a cell the host could not measure (a cluster node ran it)."""
    return Energy(gpu=DeviceEnergy(method=NONE, reason=reason), cpu=DeviceEnergy(method=NONE, reason=reason),
                  reason=reason)
