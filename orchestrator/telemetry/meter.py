"""One cell's meter: the idle window, the readings while the cell runs, and the joules attributed to
the phases the workload reports (Result.phase_spans), the steady phase above all."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from orchestrator.errors import first_line
from orchestrator.telemetry.defaults import (COUNTER, CPU_INTERVAL_S, GPU_INTERVAL_S, IDLE_WINDOW_S, INFERENCE_PHASE,
                                             INTEGRATION, MIB, NONE, STEADY_PHASE)
from orchestrator.telemetry.nvml import NvmlGpus, GpuReading, decode_clock_events
from orchestrator.telemetry.rapl import Rapl
from workloads.common.result import DeviceEnergy, Energy, Result

@dataclass
class _Series:
    """Cumulative joules over wall-clock time, every device of a kind together."""

    times: list[float] = field(default_factory=list)
    joules: list[float] = field(default_factory=list)

    def add(self, when: float, joules: float) -> None:
        self.times.append(when)
        self.joules.append(joules)

    def at(self, when: float) -> float:
        return float(np.interp(when, self.times, self.joules))

    def between(self, start: float, end: float) -> float:
        return self.at(end) - self.at(start)


class CellMeter:
    """Measures one cell: `start()` just before it (idle window included), `stop()` as it ends,
    then `energy(result)`. Readings come from a background thread only where there is something
    to read; `clock` and `sleep` stand in for time.time and time.sleep in tests."""

    def __init__(self, *, gpus: NvmlGpus | None, gpu_reason: str | None, rapl: Rapl | None,
                 cpu_reason: str | None, idle_window_s: float = IDLE_WINDOW_S,
                 gpu_interval_s: float = GPU_INTERVAL_S, cpu_interval_s: float = CPU_INTERVAL_S,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        self.gpus, self.gpu_reason = gpus, gpu_reason
        self.rapl, self.cpu_reason = rapl, cpu_reason
        self.idle_window_s = idle_window_s if (gpus or rapl) else 0.0
        self.interval_s = gpu_interval_s if gpus else cpu_interval_s
        self.clock, self.sleep = clock, sleep
        self.gpu_readings: list[GpuReading] = []
        self.gpu_series, self.cpu_series = _Series(), _Series()
        self.first = self.cell_start = self.cell_end = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: dict[str, str] = {}  # device kind -> why its readings stopped midway

    @property
    def measures_anything(self) -> bool:
        return self.gpus is not None or self.rapl is not None

    def start(self) -> None:
        self.first = self._read()
        if self.measures_anything:
            self._thread = threading.Thread(target=self._sample, name="rosetta-telemetry", daemon=True)
            self._thread.start()
            if self.idle_window_s > 0:
                self.sleep(self.idle_window_s)  # nothing else runs: this is the idle power
        self.cell_start = self._read()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self.cell_end = self._read()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def _read(self) -> float:
        with self._lock:
            now = self.clock()
            if self.gpus is not None and "gpu" not in self._failure:
                self._add_gpu(self.gpus.read(now))  # NVML's errors are None figures, never raised
            if self.rapl is not None and "cpu" not in self._failure:
                try:
                    self.cpu_series.add(now, self.rapl.read_j())
                except (OSError, ValueError) as error:  # a counter gone midway
                    self._failure["cpu"] = first_line(error, 200)
            return now

    def _add_gpu(self, reading: GpuReading) -> None:
        previous = self.gpu_readings[-1] if self.gpu_readings else None
        self.gpu_readings.append(reading)
        if self.gpus.has_counter:
            if None in reading.energy_mj:
                return
            start = next(r.energy_mj for r in self.gpu_readings if None not in r.energy_mj)
            self.gpu_series.add(reading.time, sum(now - first for now, first in zip(reading.energy_mj, start)) / 1000.0)
        elif None not in reading.power_w:
            total = sum(reading.power_w)
            if previous is None or None in previous.power_w or not self.gpu_series.times:
                if not self.gpu_series.times:
                    self.gpu_series.add(reading.time, 0.0)
                return  # a gap: integrated from the next pair of samples on
            earlier = sum(previous.power_w)  # the trapezoid between this sample and the last
            self.gpu_series.add(reading.time, self.gpu_series.joules[-1]
                                + (earlier + total) / 2.0 * (reading.time - previous.time))

    # --- the record -----------------------------------------------------------------------------

    def energy(self, result: Result) -> Energy:
        """The cell's record: both device kinds, kWh, and the per-sample figures of its steady phase."""
        record = Energy(gpu=self._gpu_energy(result), cpu=self._cpu_energy(result))
        measured = [device for device in (record.gpu, record.cpu) if device.gross_j is not None]
        if measured:
            record.kwh = sum(device.gross_j for device in measured) / 3.6e6
        _per_sample(record, result, self.cell_start, self.cell_end)
        return record

    def _measure(self, series: _Series, device: DeviceEnergy, result: Result, kind: str) -> None:
        """Gross, idle, net and mean power, and joules per phase, off the cumulative series."""
        start, end = self.cell_start, self.cell_end
        device.duration_s = end - start
        if len(series.times) < 2 or series.times[-1] < end or series.times[0] > start:
            device.method = NONE
            device.reason = (f"the readings stopped midway ({self._failure[kind]})" if kind in self._failure
                             else "the device gave too few readings to measure the cell")
            return
        device.gross_j = series.between(start, end)
        device.mean_w = device.gross_j / device.duration_s if device.duration_s > 0 else None
        idle = self.cell_start - self.first
        if self.idle_window_s > 0 and idle > 0:
            device.idle_w = series.between(self.first, self.cell_start) / idle
            device.net_j = device.gross_j - device.idle_w * device.duration_s
        device.phase_j = phase_joules(series, result.phase_spans, start, end)

    def _gpu_energy(self, result: Result) -> DeviceEnergy:
        gpus = self.gpus
        if gpus is None:
            return DeviceEnergy(method=NONE, reason=self.gpu_reason)
        device = DeviceEnergy(method=COUNTER if gpus.has_counter else INTEGRATION, devices=list(gpus.names))
        if not gpus.has_counter:
            device.reason = "no total-energy counter on this GPU: power samples integrated (trapezoids)"
        self._measure(self.gpu_series, device, result, "gpu")
        during = [reading for reading in self.gpu_readings if self.cell_start <= reading.time <= self.cell_end]
        device.readings = len(during)
        power = [sum(r.power_w) for r in during if None not in r.power_w]
        device.peak_w = max(power) if power else None
        utilisation = [value for value in (_mean(r.utilisation_pct) for r in during) if value is not None]
        if utilisation:
            device.utilisation_mean_pct, device.utilisation_max_pct = float(np.mean(utilisation)), max(utilisation)
        clocks = [value for r in during for value in r.sm_clock_mhz if value is not None]
        if clocks:
            device.sm_clock_mean_mhz, device.sm_clock_min_mhz = float(np.mean(clocks)), min(clocks)
        temperatures = [value for r in during for value in r.temperature_c if value is not None]
        device.max_temperature_c = max(temperatures) if temperatures else None
        memory = [sum(r.memory_used_b) for r in during if None not in r.memory_used_b]
        device.peak_memory_mb = max(memory) / MIB if memory else None
        bits = 0
        for reading in during:
            bits |= reading.event_bits
        device.throttle_reasons = decode_clock_events(bits, gpus.event_names)
        return device

    def _cpu_energy(self, result: Result) -> DeviceEnergy:
        if self.rapl is None:
            return DeviceEnergy(method=NONE, reason=self.cpu_reason)
        device = DeviceEnergy(method=COUNTER, devices=list(self.rapl.names),
                              reason="RAPL: package (and DRAM) domains; peak power is not sampled")
        self._measure(self.cpu_series, device, result, "cpu")
        device.readings = sum(self.cell_start <= when <= self.cell_end for when in self.cpu_series.times)
        return device


def _mean(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return float(np.mean(present)) if present else None


def phase_joules(series: _Series, spans: dict, start: float, end: float) -> dict[str, float]:
    """Joules inside each phase's spans (clipped to the measured window), read off the cumulative
    series at the spans' ends; a phase wholly outside the window (another clock) is left out."""
    joules = {}
    for name, stretches in (spans or {}).items():
        total, inside = 0.0, False
        for low, high in _clipped(stretches, start, end):
            total += series.between(low, high)
            inside = True
        if inside:
            joules[name] = total
    return joules


def _clipped(stretches, start: float, end: float) -> list[tuple[float, float]]:
    """A phase's [start, end] stretches, clipped to the window; empty and malformed ones dropped."""
    clipped = []
    for stretch in stretches or []:
        if isinstance(stretch, (list, tuple)) and len(stretch) == 2:
            low, high = max(float(stretch[0]), start), min(float(stretch[1]), end)
            if high > low:
                clipped.append((low, high))
    return clipped


def basis_of(result: Result) -> tuple[str | None, int | None, str | None]:
    """(phase, samples in it, why none): training's steady steps (every step after the first, as
    steady_samples_per_s counts them) or inference's timed batches, as many samples as the
    batches held."""
    if result.status != "ok":
        return None, None, f"the cell is {result.status}: no per-sample figures"
    batch = result.settings.get("batch_size") if isinstance(result.settings, dict) else None
    samples = result.samples
    if not isinstance(batch, int) or batch <= 0:
        return None, None, "the result records no batch size"
    if samples.epoch_steps:
        steps = sum(samples.epoch_steps) - 1
        if steps <= 0:
            return None, None, "a single training step: no steady phase"
        return STEADY_PHASE, steps * batch, None
    if samples.batch_times_s:
        return INFERENCE_PHASE, len(samples.batch_times_s) * batch, None
    return None, None, "no timed steps or batches (a parity run, or nothing timed)"


def _per_sample(record: Energy, result: Result, start: float, end: float) -> None:
    phase, count, why = basis_of(result)
    if phase is None:
        record.reason = why
        return
    record.basis_phase, record.basis_samples = phase, count
    kinds = (("gpu", record.gpu), ("cpu", record.cpu))
    devices = [(name, device) for name, device in kinds if phase in device.phase_j]
    if not devices:
        measured = [name for name, device in kinds if device.gross_j is not None]
        if not measured:
            record.reason = "no device's energy was measured"
        elif phase not in (result.phase_spans or {}):
            record.reason = (f"the workload reported no '{phase}' span (its image predates the phase spans: "
                             f"rebuild it)")
        else:
            record.reason = f"the '{phase}' span lies outside the measured window"
        return
    record.basis_devices = [name for name, _ in devices]
    gross = sum(device.phase_j[phase] for _, device in devices)
    record.joules_per_sample = gross / count
    record.samples_per_joule = count / gross if gross > 0 else None
    if all(device.idle_w is not None for _, device in devices):
        seconds = sum(high - low for low, high in _clipped(result.phase_spans.get(phase), start, end))
        record.net_joules_per_sample = (gross - sum(device.idle_w for _, device in devices) * seconds) / count


