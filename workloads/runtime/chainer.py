"""Chainer's device, precision and provenance switches, shared by the three Chainer workloads.

Chainer 7.8.1 is the last release (end of life). It runs on NumPy on the CPU and on CuPy on an
NVIDIA GPU; `chainer.config.train` switches dropout and batch norm between training and inference.
"""
from __future__ import annotations

import numpy as np

import chainer
from chainer.backends import cuda

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED


def select_device(run: Run):
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpu_available = cuda.available and _cuda_device_count() > 0
    if run.requested_device == "cuda" and not gpu_available:
        reason = _cupy_problem() if not cuda.available else "no CUDA GPU visible to CuPy"
        raise Unsupported(f"{reason}: Chainer reaches a GPU only through CuPy")
    on_gpu = gpu_available and run.requested_device != "cpu"
    precision = run.precision
    if not on_gpu and precision in ("tf32", "fp16", "bf16"):
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU (NumPy)")
    if precision in ("tf32", "bf16"):
        raise Unsupported(f"Chainer 7.8.1 has no {precision} switch (its CuPy and cuDNN predate it)")
    if precision == "fp16":
        raise Unsupported("fp16 (Chainer's 'mixed16' dtype with loss scaling) is not wired in this benchmark")
    chainer.config.train = True  # the workloads switch it off for evaluation and inference
    chainer.config.autotune = True  # cuDNN convolution autotuning (lesson 1); its cost lands in the first step
    chainer.config.use_cudnn = "auto"
    np.random.seed(SEED)  # Chainer's initializers and dropout draw from NumPy's global generator on the CPU
    if on_gpu:
        cupy = cuda.cupy
        device = chainer.get_device("@cupy:0")
        device.use()
        cupy.random.seed(SEED)
        run.sync = lambda: cupy.cuda.Device().synchronize()
        properties = cupy.cuda.runtime.getDeviceProperties(0)
        name = properties["name"]
        run.set_provenance(
            framework_version=chainer.__version__,
            device="cuda",
            cuda_version=str(cupy.cuda.runtime.runtimeGetVersion()),
            cudnn_version=str(cuda.cudnn.getVersion()) if cuda.cudnn_enabled else None,
            gpu_name=name.decode() if isinstance(name, bytes) else str(name),
            extras={"layout": "NCHW / TNC", "cupy_version": cupy.__version__, "cudnn_autotune": "true",
                    "cudnn_enabled": str(cuda.cudnn_enabled).lower()},
        )
    else:
        device = chainer.get_device("@numpy")
        run.set_provenance(
            framework_version=chainer.__version__,
            device="cpu",
            cuda_version=None, cudnn_version=None, gpu_name=None,
            extras={"layout": "NCHW / TNC", "backend": "numpy", "numpy_version": np.__version__},
        )
    return device


def _cupy_problem() -> str:
    """Why Chainer has no CuPy: not installed, or installed without the CUDA libraries it links to
    (cupy-cuda110 needs CUDA 11.0's, which its image's base provides)."""
    error = getattr(cuda, "_resolution_error", None)
    if error is None or isinstance(error, ImportError) and "No module named 'cupy'" in str(error):
        return "CuPy is not installed"
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"CuPy cannot load CUDA ({lines[-1] if lines else type(error).__name__})"


def _cuda_device_count() -> int:
    """CuPy installed but no driver or GPU (a CUDA image on a CPU host) raises; that means none."""
    try:
        return cuda.cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - cupy.cuda.runtime.CUDARuntimeError, or a missing libcuda
        return 0


def to_device(array, device):
    return device.send(np.ascontiguousarray(array))


def to_host(array) -> np.ndarray:
    return np.asarray(chainer.backends.cuda.to_cpu(array))


def parameter_count(model: chainer.Link) -> int:
    """Parameters only: batch norm's running statistics are persistent state, not parameters."""
    return int(sum(parameter.size for parameter in model.params()))


def record_peak_memory(run: Run, device) -> None:
    if getattr(device, "xp", np) is not np:
        pool = cuda.cupy.get_default_memory_pool()
        run.result.metrics.peak_device_memory_mb = pool.total_bytes() / 2**20
