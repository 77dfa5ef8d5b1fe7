"""PaddlePaddle's device, precision and provenance switches, shared by the three Paddle workloads.

The workloads run Paddle's dynamic graph (its default mode since 2.0, eager like PyTorch). On a GPU
its kernels are queued on a CUDA stream, so `run.sync` is `paddle.device.synchronize`; on the CPU
eager kernels run before the call returns. Three defaults differ from PyTorch's; each is handled here:
Paddle's import pins the CPU math libraries to ONE thread (it sets OMP_NUM_THREADS=1 when unset),
its CUDA build computes fp32 matmuls and convolutions in TF32 on Ampere and newer, and its
dynamic-graph AMP leaves CPU kernels in float32 (so fp16 / bf16 need a GPU).
"""
from __future__ import annotations

import os

import numpy as np
import paddle
from paddle.base import core

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
_GROWTH_INTERVAL = 2000  # fp16 loss scale: doubled after this many finite steps (PyTorch GradScaler's)


# --- device and precision -------------------------------------------------------------------------

def _gpu_count() -> int:
    return paddle.device.cuda.device_count() if paddle.device.is_compiled_with_cuda() else 0


def cpu_threads() -> int:
    """CPU math threads: what OMP_NUM_THREADS said when the process started, else every usable CPU.

    Paddle's import overwrites os.environ["OMP_NUM_THREADS"] with "1" when it is unset (one thread:
    its default suits data-parallel jobs), while PyTorch, TensorFlow and JAX use every core. The
    environment the process was started with (/proc/self/environ) is what the user asked for.
    """
    try:
        with open("/proc/self/environ", "rb") as stream:
            for entry in stream.read().split(b"\0"):
                name, _, value = entry.partition(b"=")
                if name == b"OMP_NUM_THREADS" and value.strip().isdigit() and int(value) > 0:
                    return int(value)
    except OSError:
        pass
    return len(os.sched_getaffinity(0))


def select_device(run: Run) -> str:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpus = _gpu_count()
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to Paddle on this host (CPU build, or no GPU)")
    device_type = "cuda" if gpus and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    if device_type == "cpu" and precision != "fp32":
        # paddle.amp.auto_cast(dtype="bfloat16") on the CPU runs every kernel in float32 (checked
        # with Paddle 3.3.1): recording that as bf16 would be a false figure.
        raise Unsupported(f"{precision} needs a CUDA GPU with Paddle (its CPU kernels stay float32 under auto_cast)")
    if device_type == "cuda":
        major, minor = paddle.device.cuda.get_device_capability(0)
        if precision in ("tf32", "bf16") and major < 8:
            raise Unsupported(f"{precision} needs compute capability 8.0 or newer; this GPU has {major}.{minor}")
    paddle.set_device("gpu:0" if device_type == "cuda" else "cpu")
    paddle.seed(SEED)
    threads = cpu_threads()
    core.set_num_threads(threads)
    extras = {"layout": "NCHW / TNC", "graph": "dynamic (eager)", "threads": threads,
              "autocast": _AUTOCAST_DTYPES.get(precision, "none"), "paddle_commit": paddle.version.commit}
    if device_type == "cpu":  # oneDNN kernels in the dynamic graph: off by default (Paddle's own CPU kernels + MKL)
        extras["onednn"] = str(paddle.get_flags(["FLAGS_use_onednn"])["FLAGS_use_onednn"]).lower()
    if device_type == "cuda":
        # fp32 means true fp32: Paddle's CUDA build allows TF32 in cuBLAS and cuDNN by default.
        core.set_cublas_switch(precision == "tf32")
        core.set_cudnn_switch(precision == "tf32")
        # cuDNN autotuning (lesson 1): try every convolution algorithm once per shape, keep the fastest
        paddle.set_flags({"FLAGS_cudnn_exhaustive_search": True})
        run.sync = paddle.device.synchronize
        extras.update(allow_tf32=str(precision == "tf32").lower(), cudnn_exhaustive_search="true")
    run.set_provenance(
        framework_version=paddle.__version__,
        device=device_type,
        cuda_version=paddle.version.cuda() if device_type == "cuda" else None,
        cudnn_version=paddle.version.cudnn() if device_type == "cuda" else None,
        gpu_name=paddle.device.cuda.get_device_name(0) if device_type == "cuda" else None,
        extras=extras,
    )
    return device_type


def autocast(precision: str):
    """Mixed precision through Paddle's own AMP (level O1: white-listed ops in half precision)."""
    return paddle.amp.auto_cast(enable=precision in _AUTOCAST_DTYPES, level="O1",
                                dtype=_AUTOCAST_DTYPES.get(precision, "float16"))


def grad_scaler(precision: str) -> paddle.amp.GradScaler:
    """Loss scaling for fp16 only, as PyTorch's GradScaler: start at 2^16, halve (and skip the step) on
    every overflow, double after 2000 finite steps. These are paddle.amp.GradScaler's defaults, written
    out because its base class AmpScaler's differ (2^15, 1000 steps). Disabled, it passes through."""
    return paddle.amp.GradScaler(enable=precision == "fp16", init_loss_scaling=2.0**16, incr_ratio=2.0,
                                 decr_ratio=0.5, incr_every_n_steps=_GROWTH_INTERVAL, decr_every_n_nan_or_inf=1)


def to_device(array: np.ndarray, dtype: str | None = None) -> paddle.Tensor:
    """A numpy batch as a tensor on the current device (paddle.set_device); dtype converts indices."""
    return paddle.to_tensor(array if dtype is None else array.astype(dtype))


def parameter_count(model: paddle.nn.Layer) -> int:
    """Trainable parameters only: batch norm's moving mean and variance are parameters with
    trainable=False in Paddle (PyTorch keeps them as buffers)."""
    return int(sum(int(np.prod(p.shape)) for p in model.parameters() if p.trainable))


def record_peak_memory(run: Run, device_type: str) -> None:
    if device_type == "cuda":
        run.result.metrics.peak_device_memory_mb = paddle.device.cuda.max_memory_allocated() / 2**20
