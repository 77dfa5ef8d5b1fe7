"""GPU telemetry through NVML (NVIDIA's `nvidia-ml-py`, `import pynvml`): the energy counter or power,
utilisation, SM clock, temperature, clock-event (throttle) reasons and memory, per GPU a cell was given."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from orchestrator.errors import first_line
from orchestrator.telemetry.rapl import Unmeasurable

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
class GpuReading:
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

    def read(self, now: float) -> GpuReading:
        nvml, sm_clock = self.nvml, getattr(self.nvml, "NVML_CLOCK_SM", 1)
        gpu_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        reading = GpuReading(now, [], [], [], [], [], [], 0)
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


