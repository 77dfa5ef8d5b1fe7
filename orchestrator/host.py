"""What this host offers: GPUs, a Docker engine, the project's git revision. Cheap probes only."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from orchestrator.frameworks import PROJECT_ROOT


def gpus() -> list[str]:
    """NVIDIA GPUs as `nvidia-smi -L` lists them; empty without a driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in listing.stdout.splitlines() if line.startswith("GPU ")]


# What run.json records about each GPU, by our own key: nvidia-smi's name for it (the fallback's query).
_SMI_FIELDS = (("name", "name"), ("uuid", "uuid"), ("memory_total_mib", "memory.total"),
               ("sm_clock_max_mhz", "clocks.max.sm"), ("memory_clock_max_mhz", "clocks.max.memory"),
               ("sm_clock_mhz", "clocks.sm"), ("power_limit_w", "power.limit"),
               ("persistence_mode", "persistence_mode"), ("ecc_mode", "ecc.mode.current"),
               ("mig_mode", "mig.mode.current"), ("compute_capability", "compute_cap"),
               ("driver", "driver_version"))


def gpu_facts() -> list[dict]:
    """Per GPU of this host: name, memory, clocks, power limit, persistence, ECC and MIG modes,
    compute capability and driver, for run.json. Through NVML (nvidia-ml-py's `pynvml`) when it is
    installed and a driver answers; else nvidia-smi's query; else nvidia-smi's listing; [] without
    a GPU. A figure the GPU or driver does not report is left out, never guessed."""
    return _nvml_facts() or _smi_facts() or [{"listing": line, "source": "nvidia-smi -L"} for line in gpus()]


def _nvml_facts() -> list[dict]:
    try:
        import pynvml  # nvidia-ml-py: optional, NVIDIA's own bindings of the driver's management library
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError and its subclasses: no driver or library here
        return []
    try:
        driver = _nvml(lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
        cuda = _nvml(lambda: _cuda_version(pynvml.nvmlSystemGetCudaDriverVersion()))
        count = _nvml(pynvml.nvmlDeviceGetCount) or 0
        facts = []
        for index in range(count):
            handle = _nvml(lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
            if handle is None:
                continue
            clock = getattr(pynvml, "NVML_CLOCK_SM", 1), getattr(pynvml, "NVML_CLOCK_MEM", 2)
            memory = _nvml(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
            power = _nvml(lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle))  # milliwatts
            capability = _nvml(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
            gpu = {
                "index": index,
                "name": _nvml(lambda: _text(pynvml.nvmlDeviceGetName(handle))),
                "uuid": _nvml(lambda: _text(pynvml.nvmlDeviceGetUUID(handle))),
                "memory_total_mib": round(memory.total / 2 ** 20) if memory is not None else None,
                "sm_clock_max_mhz": _nvml(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, clock[0])),
                "memory_clock_max_mhz": _nvml(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, clock[1])),
                "sm_clock_mhz": _nvml(lambda: pynvml.nvmlDeviceGetClockInfo(handle, clock[0])),
                "power_limit_w": round(power / 1000, 1) if power is not None else None,
                "persistence_mode": _enabled(_nvml(lambda: pynvml.nvmlDeviceGetPersistenceMode(handle))),
                "ecc_mode": _enabled(_current(_nvml(lambda: pynvml.nvmlDeviceGetEccMode(handle)))),
                "mig_mode": _enabled(_current(_nvml(lambda: pynvml.nvmlDeviceGetMigMode(handle)))),
                "compute_capability": "{}.{}".format(*capability) if capability else None,
                "driver": driver,
                "cuda_driver_version": cuda,
                "source": "nvml",
            }
            facts.append({key: value for key, value in gpu.items() if value is not None})
        return facts
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down what we started; nothing to report
            pass


def _nvml(call):
    """The call's answer, or None when NVML says the GPU does not support it (or cannot answer)."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError: NotSupported, NoPermission, GPU lost...
        return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _current(pair):
    """(current, pending) modes as NVML returns them: the current one."""
    return pair[0] if isinstance(pair, (tuple, list)) and pair else None


def _enabled(flag) -> str | None:
    return None if flag is None else ("Enabled" if int(flag) else "Disabled")


def _cuda_version(number: int | None) -> str | None:
    """NVML's 12040 -> "12.4": the newest CUDA the driver supports."""
    return None if not number else f"{number // 1000}.{number % 1000 // 10}"


def _smi_facts() -> list[dict]:
    if not shutil.which("nvidia-smi"):
        return []
    fields = ",".join(query for _, query in _SMI_FIELDS)
    try:
        query = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if query.returncode != 0:
        return []
    facts = []
    for index, line in enumerate(row for row in query.stdout.splitlines() if row.strip()):
        values = [value.strip() for value in line.split(",")]
        gpu = {key: value for (key, _), value in zip(_SMI_FIELDS, values) if value and value != "[N/A]"}
        facts.append({"index": index, **gpu, "source": "nvidia-smi"})
    return facts


def gpu_compute_capabilities() -> list[tuple[str, str]]:
    """(name, compute capability) per GPU, e.g. ("NVIDIA H200", "9.0"); empty without a driver."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [line.rsplit(",", 1) for line in query.stdout.splitlines() if "," in line]
    return [(name.strip(), capability.strip()) for name, capability in rows]


@dataclass
class DockerStatus:
    available: bool
    detail: str  # engine version, or why it did not answer


def docker_engine(timeout: float = 3.0) -> DockerStatus:
    """Whether a Docker engine answers, asked through the Docker SDK for Python."""
    try:
        import docker  # the SDK, not a framework: optional on hosts that only use the local backend
    except ImportError:
        return DockerStatus(False, "the Docker SDK for Python is not installed (pip install docker)")
    try:
        client = docker.from_env(timeout=timeout)
        version = client.version().get("Version", "?")
        client.close()
        return DockerStatus(True, f"Docker Engine {version}")
    except docker.errors.DockerException as error:
        return DockerStatus(False, f"no Docker engine answered ({str(error).splitlines()[0][:160]})")


def git_revision() -> str | None:
    """HEAD of the project checkout, with `-dirty` when it has uncommitted changes."""
    if not shutil.which("git"):
        return None
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, check=False)
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")
