"""What a reviewer needs to know about the machine a cell ran on, read from inside the cell.

CPUs this process may use (affinity) and its cgroup's CPU quota, the environment variables that
change speed, the GPU's memory, clocks, power limit, persistence, ECC and MIG modes (through
``nvidia-smi``, which the NVIDIA container runtime mounts into containers; absent: left empty),
and every installed distribution with a digest of the list, so that two results can be told to
come from the same environment or not. Standard library only (Python 3.6).
"""
import hashlib
import os
import subprocess
import sys
from typing import Dict, List, Optional

# Variables that change how fast a framework runs: thread pools, math libraries, compilers, GPUs.
SPEED_VARIABLE_PREFIXES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO_", "BLIS_", "XLA_", "TF_", "JAX_",
                           "NVIDIA_TF32_OVERRIDE", "CUDA_", "CUDNN_", "CUBLAS_", "NCCL_", "ONEDNN_", "DNNL_",
                           "MXNET_", "FLAGS_", "TORCH_", "PYTORCH_", "KERAS_", "CHAINER_", "CUPY_", "MS_",
                           "GLOG_", "ORT_", "NVIDIA_VISIBLE_DEVICES")

# nvidia-smi's names for what provenance.gpu records, under our own keys.
_GPU_QUERY = (("name", "name"), ("memory_total_mib", "memory.total"), ("sm_clock_max_mhz", "clocks.max.sm"),
              ("memory_clock_max_mhz", "clocks.max.memory"), ("sm_clock_mhz", "clocks.sm"),
              ("power_limit_w", "power.limit"), ("persistence_mode", "persistence_mode"),
              ("ecc_mode", "ecc.mode.current"), ("mig_mode", "mig.mode.current"),
              ("compute_capability", "compute_cap"), ("driver", "driver_version"))
_NVIDIA_SMI_TIMEOUT_S = 20


def fill_host_facts(provenance) -> None:
    """What every result records of the host, the interpreter and the machine (fill_machine_facts);
    the harness adds numpy's version."""
    import platform
    import socket

    provenance.python_version = platform.python_version()
    provenance.platform = platform.platform()
    provenance.hostname = socket.gethostname()
    provenance.cpu_model = cpu_model()
    provenance.cpu_count = os.cpu_count()
    provenance.git_revision = os.environ.get("ROSETTA_GIT_REVISION") or None
    provenance.gpu_driver = nvidia_driver_version()
    provenance.interpreter = sys.executable
    provenance.user_id = os.getuid()
    provenance.network_interfaces = network_interfaces()
    fill_machine_facts(provenance)


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def network_interfaces() -> List[str]:
    """The interfaces this process sees; a container run without network has only loopback."""
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


def nvidia_driver_version() -> Optional[str]:
    """The kernel driver's version, readable inside a container without nvidia-smi."""
    try:
        with open("/proc/driver/nvidia/version") as stream:
            first = stream.readline()
    except OSError:
        return None
    words = first.split()
    for word in words:
        if word[:1].isdigit() and "." in word:
            return word
    return first.strip() or None


def fill_machine_facts(provenance) -> None:
    """Fill a result's provenance (workloads.common.result.Provenance) with what this module reads."""
    provenance.cpu_affinity = cpu_affinity()
    provenance.cpu_quota = cgroup_cpu_quota()
    provenance.environment = speed_environment()
    provenance.gpu = gpu_details()
    provenance.packages = installed_packages()
    provenance.packages_sha256 = packages_digest(provenance.packages)


def process_threads() -> Optional[int]:
    """How many threads this process holds now (Linux: /proc/self/status), framework pools included."""
    try:
        with open("/proc/self/status") as stream:
            for line in stream:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_affinity() -> Optional[int]:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> Optional[float]:
    """The CPU limit, in CPUs, of this process's cgroup (v2 ``cpu.max``, else v1's CFS quota);
    None when there is none or it cannot be read."""
    try:
        with open(os.path.join(root, "cpu.max")) as stream:
            quota, period = stream.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as stream:
            quota = int(stream.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as stream:
            period = int(stream.read())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def speed_environment(environ=None) -> Dict[str, str]:
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in sorted(environ) if name.startswith(SPEED_VARIABLE_PREFIXES)}


def gpu_details() -> Dict[str, str]:
    """The first visible GPU's figures as nvidia-smi reports them; {} without a GPU or nvidia-smi."""
    if not os.path.exists("/proc/driver/nvidia/version"):
        return {}
    fields = ",".join(query for _, query in _GPU_QUERY)
    command = ["nvidia-smi", "--query-gpu=" + fields, "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible:
        command.insert(1, "--id=" + visible)
    try:
        output = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                universal_newlines=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return {}
    values = [value.strip() for value in lines[0].split(",")]
    return {key: value for (key, _), value in zip(_GPU_QUERY, values) if value and value != "[N/A]"}


def installed_packages() -> List[str]:
    """Every installed distribution as ``name==version``, sorted by name (case-insensitive)."""
    found = {}
    try:
        from importlib import metadata  # novermin (Python 3.8+; older images use pkg_resources)

        for distribution in metadata.distributions():
            name = distribution.metadata["Name"]
            if name:
                found[name.lower()] = "{}=={}".format(name, distribution.version)
    except ImportError:
        try:
            import pkg_resources
        except ImportError:
            return []
        for distribution in pkg_resources.working_set:
            found[distribution.project_name.lower()] = "{}=={}".format(distribution.project_name, distribution.version)
    return [found[name] for name in sorted(found)]


def packages_digest(packages: List[str]) -> Optional[str]:
    if not packages:
        return None
    return "sha256:" + hashlib.sha256(("\n".join(packages) + "\n").encode("utf-8")).hexdigest()


if __name__ == "__main__":
    sys.stdout.write("\n".join(installed_packages()) + "\n")
