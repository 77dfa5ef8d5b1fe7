"""PyTorch's device, precision and provenance switches, shared by the three PyTorch workloads."""
from __future__ import annotations

import contextlib

import torch

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def select_device(run: Run) -> torch.device:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    cuda_available = torch.cuda.is_available()
    if run.requested_device == "cuda" and not cuda_available:
        if torch.version.cuda is None:  # e.g. a CPU wheel from a wheelhouse matched torch==X in a CUDA variant
            raise Unsupported(f"this PyTorch ({torch.__version__}) is a CPU-only build: it cannot use a GPU")
        raise Unsupported("no CUDA GPU visible to PyTorch on this host")
    device = torch.device("cuda" if cuda_available and run.requested_device != "cpu" else "cpu")
    precision = run.precision
    if device.type == "cpu" and precision in ("tf32", "fp16"):
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if precision in ("tf32", "bf16") and major < 8:
            raise Unsupported(f"{precision} needs compute capability 8.0 or newer; this GPU has {major}.{minor}")
    # fp32 means true fp32: TF32 tensor-core math only when asked for.
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True  # cuDNN autotuning (lesson 1); its cost lands in the first step
    torch.manual_seed(SEED)
    if device.type == "cuda":
        run.sync = torch.cuda.synchronize
    run.set_provenance(
        framework_version=torch.__version__,
        device=device.type,
        cuda_version=torch.version.cuda if device.type == "cuda" else None,
        cudnn_version=str(torch.backends.cudnn.version()) if device.type == "cuda" else None,
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        extras={"layout": "NCHW / TNC", "cudnn_benchmark": "true",
                "allow_tf32": str(precision == "tf32").lower(),
                "autocast": str(_AUTOCAST_DTYPES.get(precision, "none")),
                "threads": str(torch.get_num_threads())},
    )
    return device


def autocast(device: torch.device, precision: str):
    """Mixed precision through PyTorch's own autocast; fp32 and tf32 run without it."""
    if precision in _AUTOCAST_DTYPES:
        return torch.autocast(device.type, dtype=_AUTOCAST_DTYPES[precision])
    return contextlib.nullcontext()


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """Loss scaling for fp16 only; a disabled scaler passes everything through."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def fused_optimizer(device: torch.device) -> bool:
    """Fused optimizers check fp16 overflow on the device, so no step waits for the host."""
    return device.type == "cuda"


def to_device(array, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(array).to(device, non_blocking=True)


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def record_peak_memory(run: Run, device: torch.device) -> None:
    if device.type == "cuda":
        run.result.metrics.peak_device_memory_mb = torch.cuda.max_memory_allocated(device) / 2**20
