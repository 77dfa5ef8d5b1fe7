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
"""
from __future__ import annotations

import importlib
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from orchestrator.errors import first_line
from workloads.common.result import DeviceEnergy, Energy, Result

POWERCAP_ROOT = Path("/sys/class/powercap")
IDLE_WINDOW_S = 1.0  # idle power is measured over this window just before each cell (0: not measured)
GPU_INTERVAL_S = 0.1  # NVML readings, about 10 a second
# RAPL alone (no GPU sampled): a reading a second is plenty for phases of seconds, costs nothing
# (a few sysfs reads), and catches every wrap of a counter that wraps after minutes at full power.
CPU_INTERVAL_S = 1.0
MIB = 2 ** 20

COUNTER, INTEGRATION, NONE = "counter", "integration", "none"

# The phase the per-sample figures are of, by the kind of workload: the training steps after the
# first (compilation and autotuning land in the first), or inference's timed batches.
STEADY_PHASE, INFERENCE_PHASE = "steady", "inference"


class Unmeasurable(Exception):
    """A device kind that cannot be measured here; the message is the recorded reason."""


# --- CPUs: the kernel's powercap RAPL counters --------------------------------------------------

_PACKAGE_ZONE = re.compile(r"intel-rapl:\d+$")  # a CPU package (AMD's packages use the same driver name)
_SUB_ZONE = re.compile(r"intel-rapl:\d+:\d+$")  # a package's core, uncore or DRAM domain


@dataclass
class _Zone:
    name: str  # "package-0", "dram"
    energy_file: Path
    wrap_j: float  # max_energy_range_uj in joules: the counter starts from 0 again past it
    last_uj: int = 0
    total_j: float = 0.0


class Rapl:
    """The packages' (and their DRAM domains') energy counters, summed, with wrap-around handled.
    Core and uncore domains are inside their package and not added again; "psys" (the whole
    platform, on some laptops) overlaps the packages and is left out."""

    def __init__(self, root: Path = POWERCAP_ROOT):
        root = Path(root)
        zones = []
        folders = sorted(root.glob("intel-rapl:*")) if root.is_dir() else []
        for folder in folders:
            name = _read_text(folder / "name")
            if name is None:
                continue
            if (_PACKAGE_ZONE.match(folder.name) and name.startswith("package")) or \
                    (_SUB_ZONE.match(folder.name) and name == "dram"):
                label = name if name.startswith("package") else f"{name} ({folder.name})"
                zones.append((label, folder))
        if not zones:
            raise Unmeasurable(f"no RAPL package zone under {root} (a VM or container hides it, or the CPU "
                               f"has no RAPL counters)")
        self.zones: list[_Zone] = []
        for label, folder in zones:
            energy, wrap = folder / "energy_uj", folder / "max_energy_range_uj"
            if not energy.exists():
                raise Unmeasurable(f"{energy} is missing (the zone has no energy counter)")
            try:
                first = int(energy.read_text().strip())
                wrap_uj = int(wrap.read_text().strip())
            except PermissionError:
                raise Unmeasurable(f"{energy} is not readable by this user (root only since Linux 5.10, "
                                   f"CVE-2020-8694); run as root or make it readable to measure CPU energy") from None
            except (OSError, ValueError) as error:
                raise Unmeasurable(f"{energy} cannot be read ({first_line(error, 200)})") from None
            self.zones.append(_Zone(label, energy, wrap_uj / 1e6, last_uj=first))

    @property
    def names(self) -> list[str]:
        return [zone.name for zone in self.zones]

    def read_j(self) -> float:
        """Joules since this object was made, every zone together. A counter that went backwards
        wrapped at max_energy_range_uj once (read often enough that it cannot wrap twice)."""
        for zone in self.zones:
            now = int(zone.energy_file.read_text().strip())
            delta = (now - zone.last_uj) / 1e6
            if delta < 0:
                delta += zone.wrap_j
            zone.total_j += delta
            zone.last_uj = now
        return sum(zone.total_j for zone in self.zones)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


# --- GPUs: NVML ---------------------------------------------------------------------------------

def load_nvml(module=None):
    """The NVML bindings, started (nvmlInit); `module` stands in for `pynvml` (tests). Raises
    Unmeasurable with the reason when they are not installed or no driver answers."""
    if module is None:
        try:
            module = importlib.import_module("pynvml")
        except ImportError:
            raise Unmeasurable("nvidia-ml-py (pynvml) is not installed on the host") from None
    try:
        module.nvmlInit()
    except Exception as error:  # noqa: BLE001 - pynvml.NVMLError and its subclasses: no driver or library
        raise Unmeasurable(f"NVML did not start ({first_line(error, 200)}): no NVIDIA driver answers on this host") from None
    return module


@dataclass
class _GpuReading:
    time: float
    energy_mj: list[float | None]  # per GPU: the total-energy counter, where read
    power_w: list[float | None]
    utilisation_pct: list[float | None]
    sm_clock_mhz: list[float | None]
    temperature_c: list[float | None]
    memory_used_b: list[float | None]
    event_bits: int


class NvmlGpus:
    """The GPUs a cell was given, read through NVML. `ids`: device indices or UUIDs (as --gpus and
    CUDA_VISIBLE_DEVICES take them), None for every GPU."""

    def __init__(self, nvml, ids: list[str] | None):
        self.nvml = nvml
        if ids is None:
            ids = [str(index) for index in range(int(nvml.nvmlDeviceGetCount()))]
        if not ids:
            raise Unmeasurable("NVML lists no GPU on this host")
        self.handles, self.names = [], []
        for identifier in ids:
            try:
                handle = (nvml.nvmlDeviceGetHandleByIndex(int(identifier)) if identifier.isdigit()
                          else nvml.nvmlDeviceGetHandleByUUID(identifier))
            except Exception as error:  # noqa: BLE001 - NVMLError: no such GPU, a MIG instance, ...
                raise Unmeasurable(f"NVML cannot open GPU {identifier} ({first_line(error, 200)})") from None
            self.handles.append(handle)
            name = _call(lambda: nvml.nvmlDeviceGetName(handle))
            self.names.append(f"{identifier}: {_text(name)}" if name is not None else identifier)
        # the counter's difference where every GPU has one; otherwise all are integrated alike
        self.has_counter = all(_call(lambda h=handle: nvml.nvmlDeviceGetTotalEnergyConsumption(h)) is not None
                               for handle in self.handles)
        self._events = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                        or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self.event_names = clock_event_names(nvml)

    def read(self, now: float) -> _GpuReading:
        nvml, sm_clock = self.nvml, getattr(self.nvml, "NVML_CLOCK_SM", 1)
        gpu_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        reading = _GpuReading(now, [], [], [], [], [], [], 0)
        for handle in self.handles:
            energy = _call(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) if self.has_counter else None
            power = _call(lambda: nvml.nvmlDeviceGetPowerUsage(handle))  # milliwatts
            rates = _call(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
            memory = _call(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
            reading.energy_mj.append(None if energy is None else float(energy))
            reading.power_w.append(None if power is None else power / 1000.0)
            reading.utilisation_pct.append(None if rates is None else float(rates.gpu))
            reading.sm_clock_mhz.append(_number(_call(lambda: nvml.nvmlDeviceGetClockInfo(handle, sm_clock))))
            reading.temperature_c.append(_number(_call(lambda: nvml.nvmlDeviceGetTemperature(handle, gpu_sensor))))
            reading.memory_used_b.append(None if memory is None else float(memory.used))
            if self._events is not None:
                reading.event_bits |= int(_call(lambda: self._events(handle)) or 0)
        return reading


def clock_event_names(nvml) -> dict[int, str]:
    """Bit -> name of NVML's clock-event (formerly throttle) reasons, from the bindings' own
    constants (nvmlClocksEventReasonSwPowerCap = 0x4 -> "SwPowerCap"); an alias keeps the first
    name in alphabetical order."""
    names: dict[int, str] = {}
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        for attribute in sorted(dir(nvml)):
            value = getattr(nvml, attribute)
            if attribute.startswith(prefix) and isinstance(value, int) and value > 0 and value & (value - 1) == 0:
                names.setdefault(value, attribute[len(prefix):])
        if names:
            break
    return names


def decode_clock_events(bits: int, names: dict[int, str]) -> list[str]:
    """The reasons set in `bits`, by name; a bit the bindings do not name as "0x...". NVML counts
    GpuIdle among them: an idle GPU runs slowly by design."""
    reasons, bit = [], 1
    while bits >= bit:
        if bits & bit:
            reasons.append(names.get(bit, f"{bit:#x}"))
        bit <<= 1
    return reasons


def _call(read):
    """NVML's answer, or None where the GPU does not support the query (or cannot answer now)."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError: NotSupported, NoPermission, GPU lost...
        return None


def _number(value) -> float | None:
    return None if value is None else float(value)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- one cell -----------------------------------------------------------------------------------

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
        self.gpu_readings: list[_GpuReading] = []
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

    def _add_gpu(self, reading: _GpuReading) -> None:
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
