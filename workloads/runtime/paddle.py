"""PaddlePaddle's runtime for the three Paddle workloads: the device policy and the loops, written once.

The workloads run Paddle's dynamic graph (its default mode since 2.0, eager like PyTorch). On a GPU
its kernels are queued on a CUDA stream, so `run.sync` is `paddle.device.synchronize`; on the CPU
eager kernels run before the call returns. Three defaults differ from PyTorch's; each is handled here:
Paddle's import pins the CPU math libraries to ONE thread (it sets OMP_NUM_THREADS=1 when unset),
its CUDA build computes fp32 matmuls and convolutions in TF32 on Ampere and newer, and its
dynamic-graph AMP leaves CPU kernels in float32 (so fp16 / bf16 need a GPU).

`select_device(run)` returns a `PaddlePolicy` (device, precision, autocast, loss scaler);
`train_and_evaluate`, `parity_steps`, `extract_features` and `parity_features` run a workload's
model through the shared loops of workloads/common/loop.py.
"""
from __future__ import annotations

import os

import numpy as np
import paddle
from paddle.base import core

from workloads.common import loop
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
_GROWTH_INTERVAL = 2000  # fp16 loss scale: doubled after this many finite steps (PyTorch GradScaler's)


# --- device and precision -------------------------------------------------------------------------

class PaddlePolicy(Policy):
    """The device ("cuda" or "cpu", made current by paddle.set_device) and what the precision asks."""

    def autocast(self):
        """Mixed precision through Paddle's own AMP (level O1: white-listed ops in half precision)."""
        return paddle.amp.auto_cast(enable=self.precision in _AUTOCAST_DTYPES, level="O1",
                                    dtype=_AUTOCAST_DTYPES.get(self.precision, "float16"))

    def grad_scaler(self) -> paddle.amp.GradScaler:
        """Loss scaling for fp16 only, as PyTorch's GradScaler: start at 2^16, halve (and skip the step)
        on every overflow, double after 2000 finite steps. These are paddle.amp.GradScaler's defaults,
        written out because its base class AmpScaler's differ (2^15, 1000 steps). Disabled, it passes
        everything through."""
        return paddle.amp.GradScaler(enable=self.precision == "fp16", init_loss_scaling=2.0**16, incr_ratio=2.0,
                                     decr_ratio=0.5, incr_every_n_steps=_GROWTH_INTERVAL,
                                     decr_every_n_nan_or_inf=1)


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


def select_device(run: Run) -> PaddlePolicy:
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
        # fp32 means true fp32 (FAIRNESS.md: true-precision): Paddle's CUDA build allows TF32 in cuBLAS and cuDNN by default.
        core.set_cublas_switch(precision == "tf32")
        core.set_cudnn_switch(precision == "tf32")
        # cuDNN autotuning (FAIRNESS.md: autotune): try every convolution algorithm once per shape, keep the fastest
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
    return PaddlePolicy(device_type, precision)


def to_device(array: np.ndarray) -> paddle.Tensor:
    """A numpy batch as a tensor on the current device (paddle.set_device); integer arrays (labels,
    token ids) as int64, what Paddle's embeddings and losses take."""
    return paddle.to_tensor(array if np.issubdtype(array.dtype, np.floating) else array.astype("int64"))


def parameter_count(model: paddle.nn.Layer) -> int:
    """Trainable parameters only: batch norm's moving mean and variance are parameters with
    trainable=False in Paddle (PyTorch keeps them as buffers)."""
    return int(sum(int(np.prod(p.shape)) for p in model.parameters() if p.trainable))


def _peak_device_memory_mb(policy: PaddlePolicy):
    return paddle.device.cuda.max_memory_allocated() / 2**20 if policy.device == "cuda" else None


# --- training -------------------------------------------------------------------------------------

def _train_step(policy: PaddlePolicy, model, optimizer, loss_function):
    """One optimizer step on a numpy batch, under the policy's autocast and loss scaler."""
    scaler = policy.grad_scaler()

    def step(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:
        inputs, labels = to_device(x), to_device(y)
        optimizer.clear_grad(set_to_zero=False)  # drop the gradients (PyTorch's set_to_none)
        with policy.autocast():
            loss = loss_function(model(inputs), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # stays on the device: no host sync per step
    return step


def train_and_evaluate(run: Run, policy: PaddlePolicy, model, optimizer, loss_function, data) -> None:
    """Train `model` on `data` with `optimizer` and `loss_function`, then measure its test accuracy."""
    with run.phase("model_build"):  # added to the workload's model_build
        step = _train_step(policy, model, optimizer, loss_function)
    run.set_parameter_count(parameter_count(model))
    model.train()
    loop.train(run, data, step)  # the loss is read (float) once per epoch
    model.eval()  # dropout off (FAIRNESS.md: eval-mode)

    def count_correct(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:
        predictions = model(to_device(x)).argmax(axis=1)
        return (predictions == to_device(y)).astype("int64").sum()  # summed on the device

    with paddle.no_grad(), policy.autocast():
        loop.evaluate(run, data, count_correct)
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_steps(run: Run, policy: PaddlePolicy, model, optimizer, loss_function, batch: dict, *,
                 steps_in_train_mode: bool = False) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity).

    The steps run in eval mode (dropout is random, and frameworks' generators differ), unless
    `steps_in_train_mode`: for a model without dropout whose operators keep what their backward
    needs only in train mode (Paddle's rnn operator)."""
    run.set_parameter_count(parameter_count(model))
    step = _train_step(policy, model, optimizer, loss_function)

    def forward(x: np.ndarray) -> paddle.Tensor:
        model.eval()
        with paddle.no_grad():
            return model(to_device(x))

    def train_step(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:
        if steps_in_train_mode:
            model.train()
        return step(x, y)

    return loop.parity_outputs(forward, train_step, batch, to_numpy=lambda logits: logits.numpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: PaddlePolicy, model, images: np.ndarray) -> None:
    """The warm pass, then the timed forward-only pass, with no gradients (FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(model))
    model.eval()  # batch norm on its moving statistics
    with paddle.no_grad(), policy.autocast():
        loop.infer(run, images, lambda batch: model(to_device(batch)))
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_features(run: Run, policy: PaddlePolicy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    model.eval()
    with paddle.no_grad():
        return {"features": model(to_device(batch["x"])).numpy()}
