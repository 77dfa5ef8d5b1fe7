"""MindSpore's runtime for the three MindSpore workloads: the device policy, the compiled step and the loops.

MindSpore runs a Python function two ways: op by op (PyNative mode, its default) or compiled into
one static graph (graph mode, `mindspore.jit`). The workloads run in graph mode: every Cell call
and the training step are compiled on their first call, which lands in the harness's first step
(or warm pass). Device work may still be pending when a call returns, so `run.sync` waits:
`mindspore.runtime.synchronize` on a GPU; on the CPU, where that call is not supported, it waits
for the last output the workload handed to `track` (each step depends on the one before).

On the CPU, MindSpore 2.10 hands oneDNN its convolution weights in the plain OIHW layout. On a
CPU with AVX-512, oneDNN 3.10 then picks a wrapper whose inner kernel is its reference (scalar)
convolution: 3x3 and 7x7 convolutions run at about 0.3 GMAC/s, 50-100 times slower than the
im2col + GEMM kernel it picks when its instruction set is capped at AVX2 (about 20 GMAC/s on 2
cores; 1x1 convolutions and matmuls run as fast either way). So `select_device` caps it
(ONEDNN_MAX_CPU_ISA=AVX2, oneDNN's own switch, read when its first primitive is made), unless the
variable is already set: set ONEDNN_MAX_CPU_ISA=ALL to measure the default.

Only fp32 is wired up: MindSpore's mixed precision (`mindspore.amp`) is not set up here, so other
precisions are recorded as unsupported. On a GPU, fp32 is true fp32 (TF32 turned off; MindSpore
allows it for convolutions by default). The GPU switches have not been run: there is no CUDA
variant yet (images/mindspore/metadata.toml says why).

`select_device(run)` returns a `MindSporePolicy` (device, precision); `train_and_evaluate`,
`parity_steps`, `extract_features` and `parity_features` run a workload's network through the
shared loops of workloads/common/loop.py.
"""
from __future__ import annotations

import os

import numpy as np

import mindspore as ms

from workloads.common import loop
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED

_device: list = ["cpu"]
_last_output: list = [None]  # what the last dispatched call returned, for run.sync on the CPU
ONEDNN_ISA_CAP = "AVX2"  # see the module docstring: oneDNN's GEMM convolution instead of its reference one


# --- device and precision -------------------------------------------------------------------------

def sync() -> None:
    """Wait for the device: every queued GPU kernel, or on the CPU the last tracked output."""
    if _device[0] == "cuda":
        ms.runtime.synchronize()
    elif _last_output[0] is not None:
        _last_output[0].asnumpy()  # a small copy (a loss, a batch of features) that waits for its graph


def track(output):
    """Remember what a compiled call returned, so `run.sync` can wait for it; returns it unchanged."""
    _last_output[0] = output
    return output


def _gpu_available() -> bool:
    """Whether this MindSpore loaded its GPU plugin at import (it needs CUDA 11 and nvcc under CUDA_HOME).

    The public ms.device_context.gpu.is_available() asks the same question but logs two warnings
    (and every plugin's load error) on each CPU host, so the context it reads is asked directly.
    """
    try:
        from mindspore._c_expression import MSContext
    except ImportError:  # a later MindSpore that moved it
        return ms.device_context.gpu.is_available()
    return MSContext.get_instance().is_pkg_support_device("GPU")


class MindSporePolicy(Policy):
    """The device ("cuda" or "cpu", made current by mindspore.set_device) and the precision (fp32 only)."""


def select_device(run: Run) -> MindSporePolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpu = _gpu_available()
    if run.requested_device == "cuda" and not gpu:
        raise Unsupported("no CUDA GPU visible to MindSpore on this host (its GPU plugin did not load)")
    device_type = "cuda" if gpu and run.requested_device != "cpu" else "cpu"
    if run.precision != "fp32":
        raise Unsupported(f"{run.precision} is not implemented for MindSpore (fp32 only)")
    if device_type == "cpu":
        os.environ.setdefault("ONEDNN_MAX_CPU_ISA", ONEDNN_ISA_CAP)  # before the first oneDNN primitive
    ms.set_device("GPU" if device_type == "cuda" else "CPU")
    # graph mode: each Cell call and the jitted step are compiled to one static graph on first call
    ms.set_context(mode=ms.GRAPH_MODE)
    if device_type == "cuda":
        gpu_context = ms.device_context.gpu
        gpu_context.op_precision.conv_allow_tf32(False)  # fp32 means true fp32 (FAIRNESS.md: true-precision)
        gpu_context.op_precision.matmul_allow_tf32(False)
        # cuDNN autotuning (FAIRNESS.md: autotune): try every convolution algorithm once, keep the fastest
        gpu_context.op_tuning.conv_fprop_algo("performance")
        gpu_context.op_tuning.conv_dgrad_algo("performance")
        gpu_context.op_tuning.conv_wgrad_algo("performance")
    ms.set_seed(SEED)
    np.random.seed(SEED)  # nn.GRU draws its initial weights from numpy's global generator
    _device[0] = device_type
    run.sync = sync
    run.set_provenance(
        framework_version=ms.__version__,
        device=device_type,
        cuda_version=None,  # MindSpore does not report its CUDA version at run time; the variant names it
        cudnn_version=None,
        gpu_name=None,
        extras={"layout": "NCHW / TNC", "mode": "GRAPH_MODE (mindspore.jit): compiled on the first call",
                "cudnn_conv_algo": "performance" if device_type == "cuda" else "none (CPU)",
                "allow_tf32": "false",
                "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "") if device_type == "cpu" else "n/a"},
    )
    return MindSporePolicy(device_type, run.precision)


def to_device(array: np.ndarray) -> ms.Tensor:
    """Labels and token indices as int32 (what MindSpore's losses and Embedding take), images as they are."""
    if array.dtype == np.int64:
        array = array.astype(np.int32)
    return ms.Tensor(array)


def _peak_device_memory_mb(policy: MindSporePolicy):
    return ms.runtime.max_memory_allocated() / 2**20 if policy.device == "cuda" else None


# --- model facts ----------------------------------------------------------------------------------

def parameter_count(network: ms.nn.Cell) -> int:
    """Trainable parameters: batch norm's moving statistics are not trainable in MindSpore either."""
    return int(sum(np.prod(parameter.shape) for parameter in network.trainable_params()))


def set_parameter(parameter: ms.Parameter, value: np.ndarray) -> None:
    """Overwrite a parameter with a canonical array, checking the shape it must already have."""
    if tuple(parameter.shape) != tuple(value.shape):
        raise ValueError(f"{parameter.name}: shape {tuple(parameter.shape)}, canonical {tuple(value.shape)}")
    parameter.set_data(ms.Tensor(np.ascontiguousarray(value, dtype=np.float32)))


# --- the training step ----------------------------------------------------------------------------

def _train_step(network: ms.nn.Cell, optimizer, loss_function):
    """One compiled step: `step(x, y) -> loss` on a numpy batch, the loss left on the device.

    `mindspore.value_and_grad` differentiates the mean loss with respect to the optimizer's
    parameters; the optimizer updates them in place. `mindspore.jit` compiles forward, backward
    and update into one graph on the first call (it lands in the harness's first_step_s). Dropout
    follows the network's mode: `network.set_train(True)` for training, False for the parity steps.
    """
    def loss_of(x, y):
        return loss_function(network(x), y)

    gradient_of = ms.value_and_grad(loss_of, None, optimizer.parameters)

    @ms.jit
    def step(x, y):
        loss, gradients = gradient_of(x, y)
        optimizer(gradients)
        return loss

    def call(x: np.ndarray, y: np.ndarray):
        return track(step(to_device(x), to_device(y)))

    return call


def train_and_evaluate(run: Run, policy: MindSporePolicy, network, optimizer, loss_function, data) -> None:
    """Train `network` on `data` with `optimizer` and `loss_function`, then measure its test accuracy."""
    with run.phase("model_build"):  # added to the workload's model_build; compiled on the first step
        network.set_train(True)  # dropout on
        step = _train_step(network, optimizer, loss_function)
    run.set_parameter_count(parameter_count(network))
    loop.train(run, data, step)  # the loss stays on the device; read (float) once per epoch
    network.set_train(False)  # dropout off (FAIRNESS.md: eval-mode); graph mode compiles the inference graph once

    def count_correct(x: np.ndarray, y: np.ndarray) -> ms.Tensor:
        predictions = network(to_device(x)).argmax(axis=1)
        # summed on the device; tracked so that run.sync waits for it
        return track((predictions == to_device(y)).astype(ms.int32).sum())

    loop.evaluate(run, data, count_correct)
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_steps(run: Run, policy: MindSporePolicy, network, optimizer, loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity)."""
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)  # dropout off, in the forward pass and inside the parity steps
    return loop.parity_outputs(lambda x: network(to_device(x)), _train_step(network, optimizer, loss_function),
                               batch, to_numpy=lambda logits: logits.asnumpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: MindSporePolicy, network, images: np.ndarray) -> None:
    """The warm pass (graph compilation lands there), then the timed forward-only pass; run.sync
    waits for each batch's features."""
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)  # inference only: batch norm on moving statistics, no gradients (FAIRNESS.md: eval-mode)
    loop.infer(run, images, lambda batch: track(network(to_device(batch))))
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_features(run: Run, policy: MindSporePolicy, network, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)
    return {"features": network(to_device(batch["x"])).asnumpy()}
