"""Chainer's device, precision and provenance switches, and the loops the three Chainer workloads share.

Chainer 7.8.1 is the last release (end of life). It runs on NumPy on the CPU and on CuPy on an
NVIDIA GPU; `chainer.config.train` switches dropout and batch norm between training and inference.
A workload hands its Chain (on the device), its optimizer (set up on the Chain) and its loss
function; the step (forward, backward, update) is written once here. What ran is recorded in the
result's extras: the update rule ("optimizer"), the GRU's kernel ("gru_kernel", detected from the
graph the first training step built) and TF32 ("tf32"). Nothing is traced or compiled: Chainer is
define-by-run, so ``samples.traces`` stays empty. `Training` and `FeatureExtraction` are Chainer's side
of the scaffold every workload file fills in (workloads/common/scaffold.py).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

import chainer
from chainer.backends import cuda
from chainer.functions.rnn import n_step_rnn

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED


class ChainerPolicy(Policy):
    """``device`` is Chainer's device object (``@numpy`` or ``@cupy:0``): it sends arrays and moves
    Chains; ``xp`` is its array module (NumPy or CuPy). fp32 only (see select_device)."""

    def __init__(self, device, precision: str):
        super().__init__(device, precision)
        self.xp = device.xp
        self.on_gpu = device.xp is not np


def select_device(run: Run) -> ChainerPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpu_available = cuda.available and _cuda_device_count() > 0
    if run.requested_device == "cuda" and not gpu_available:
        reason = _cupy_problem() if not cuda.available else "no CUDA GPU visible to CuPy"
        raise Unsupported(f"{reason}: Chainer reaches a GPU only through CuPy")
    on_gpu = gpu_available and run.requested_device != "cpu"
    precision = run.precision
    precision_rules.check("chainer", precision, "cuda" if on_gpu else "cpu")  # fp32 only (FAIRNESS.md: true-precision)
    chainer.config.train = True  # the loops below switch it off for evaluation and inference
    # cuDNN convolution autotuning (FAIRNESS.md: autotune); its cost lands in the first step
    chainer.config.autotune = True
    chainer.config.use_cudnn = "auto"
    np.random.seed(SEED)  # Chainer's initializers and dropout draw from NumPy's global generator on the CPU  # phrase: seeding
    # FAIRNESS.md: same-threads: Chainer has no thread pool of its own; on the CPU NumPy's BLAS reads
    # OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS at the import, and reports nothing back
    run.record_threads(None, None, "none of its own: NumPy's BLAS, through OMP/OPENBLAS/MKL_NUM_THREADS before the "
                       "import", note="Chainer has no thread switch and reports no count")
    if on_gpu:
        cupy = cuda.cupy
        tf32 = tf32_report()  # checked before the device is used: before any cuBLAS or cuDNN handle
        device = chainer.get_device("@cupy:0")
        device.use()
        cupy.random.seed(SEED)
        run.declare_sync(lambda: cupy.cuda.Device().synchronize(),  # phrase: device-sync
                         "cupy.cuda.Device().synchronize: every kernel queued on the GPU")
        properties = cupy.cuda.runtime.getDeviceProperties(0)
        name = properties["name"]
        run.set_provenance(
            framework_version=chainer.__version__,
            device="cuda",
            cuda_version=str(cupy.cuda.runtime.runtimeGetVersion()),
            cudnn_version=str(cuda.cudnn.getVersion()) if cuda.cudnn_enabled else None,
            gpu_name=name.decode() if isinstance(name, bytes) else str(name),
            extras={"layout": "NCHW / TNC", "cupy_version": cupy.__version__, "cudnn_autotune": "true",
                    "cudnn_enabled": str(cuda.cudnn_enabled).lower(),
                    "tf32": tf32 + "; " + _cublas_math_mode()},
        )
    else:
        device = chainer.get_device("@numpy")
        run.declare_sync(no_wait, "nothing: on the CPU Chainer computes with NumPy, which returns finished")
        run.set_provenance(
            framework_version=chainer.__version__,
            device="cpu",
            cuda_version=None, cudnn_version=None, gpu_name=None,
            extras={"layout": "NCHW / TNC", "backend": "numpy", "numpy_version": np.__version__,
                    "tf32": "n/a (CPU)"},
        )
    return ChainerPolicy(device, precision)


def tf32_report() -> str:
    """What this (fp32, GPU) process says about TF32: the NVIDIA_TF32_OVERRIDE value it holds.

    Chainer 7.8.1 has no TF32 switch, and cuDNN 8 may run fp32 convolutions as TF32 on Ampere (CC
    8.0, the newest GPU Chainer's CuPy supports) unless NVIDIA_TF32_OVERRIDE=0. cuBLAS and cuDNN
    read it when their handles are created, which CuPy does lazily on first use: setting it after
    that has no effect. So ``python -m workloads`` sets it before Chainer (and CuPy) is imported
    (naming.precision_environment); this checks that it arrived, and an fp32 cell without it refuses
    to run rather than time TF32 as fp32.
    """
    seen = os.environ.get("NVIDIA_TF32_OVERRIDE")
    if seen != "0":
        raise RuntimeError(f"fp32 needs NVIDIA_TF32_OVERRIDE=0 set before Chainer is imported (it is {seen!r}): "
                           "run the cell through python -m workloads, which sets it")
    return ("off: NVIDIA_TF32_OVERRIDE=0 in the process environment, set before import, so before any cuBLAS or "
            "cuDNN handle; Chainer 7.8.1 and CuPy 7.8 have no TF32 switch of their own")


def _cublas_math_mode() -> str:
    """cuBLAS's math mode on CuPy's handle, as cuBLAS reports it (0 = CUBLAS_DEFAULT_MATH: no TF32)."""
    try:
        from cupy.cuda import cublas, device

        return f"cuBLAS math mode {int(cublas.getMathMode(device.get_cublas_handle()))}"
    except Exception as error:  # noqa: BLE001 - CuPy 7 may lack getMathMode; the record says so
        return f"cuBLAS math mode unreadable ({type(error).__name__})"


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


def to_device(array: np.ndarray, policy: ChainerPolicy):  # phrase: device-placement
    """Integer arrays (labels, token ids) as int32, which F.softmax_cross_entropy and L.EmbedID need."""
    if array.dtype == np.int64:
        array = array.astype(np.int32)
    return policy.device.send(np.ascontiguousarray(array))


def to_host(array) -> np.ndarray:
    return np.asarray(chainer.backends.cuda.to_cpu(array))


def parameter_count(model: chainer.Link) -> int:
    """Parameters only: batch norm's running statistics are persistent state, not parameters."""
    return int(sum(parameter.size for parameter in model.params()))


def peak_memory_mb(policy: ChainerPolicy) -> float | None:
    """What CuPy's memory pool holds (it keeps what it ever allocated); None on the CPU."""
    if policy.on_gpu:
        return cuda.cupy.get_default_memory_pool().total_bytes() / 2**20
    return None


def optimizer_description(optimizer: chainer.Optimizer, model: chainer.Link) -> str:
    """Which update `optimizer` runs on `model`'s parameters, from where they live (as Chainer's
    UpdateRule decides it, per parameter): CuPy arrays take the rule's one CuPy elementwise kernel
    per parameter, NumPy arrays its NumPy code, several array operations per parameter."""
    base = next(cls for cls in type(optimizer).__mro__ if cls.__module__.startswith("chainer.optimizers"))
    name = f"chainer.optimizers.{base.__name__}" + (f" ({type(optimizer).__name__})" if type(optimizer) is not base
                                                     else "")
    modules = {type(parameter.array).__module__.split(".")[0] for parameter in model.params()}
    if modules == {"cupy"}:
        return f"{name}: fused per parameter, one CuPy elementwise kernel each (Chainer has no multi-tensor update)"
    if modules == {"numpy"}:
        return f"{name}: written out in NumPy, several array operations per parameter (its CPU update rule)"
    return f"{name}: parameters in {', '.join(sorted(modules))}"


def gru_kernel_of(hidden: chainer.Variable) -> Optional[str]:
    """What computed NStepGRU's final hidden state `hidden`, read from the graph it belongs to (None
    without one, e.g. under no_backprop_mode). cuDNN's fused GRU is one NStepGRU function node (its
    only node); otherwise Chainer ran its per-time-step loop (n_step_rnn_impl: a linear layer and the
    gates for every step, in NumPy on the CPU)."""
    node = hidden.creator_node
    for _ in range(4):  # through the link's reordering of the batch (Permutate) to what computed it
        if node is None:
            return None
        function = getattr(node, "function", node)  # old-style Functions sit in a FunctionAdapter
        if isinstance(function, n_step_rnn.BaseNStepRNN):
            return f"cudnn: chainer.functions {type(function).__name__} (cuDNN's fused RNN)"
        if not node.inputs:
            break
        node = node.inputs[0].creator_node
    where = "NumPy" if chainer.backend.get_array_module(hidden.array) is np else "CuPy"
    return f"python-loop: Chainer's n_step_rnn_impl, one step at a time in {where} (no cuDNN)"


# --- the loops ------------------------------------------------------------------------------------

def _train_step(policy: ChainerPolicy, model: chainer.Chain, optimizer, loss_function):  # phrase: train-step
    def step(x: np.ndarray, y: np.ndarray):
        loss = loss_function(model(to_device(x, policy)), to_device(y, policy))  # mean over the batch
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss  # a Variable on the device: no host sync per step
    return step


def _logits(policy: ChainerPolicy, model: chainer.Chain):
    def forward(x: np.ndarray):
        with chainer.no_backprop_mode():  # no graph, no gradients
            return model(to_device(x, policy)).array
    return forward


def train_and_evaluate(run: Run, policy: ChainerPolicy, model: chainer.Chain, optimizer, loss_function, data) -> None:
    """Train with `optimizer` on `loss_function(logits, labels)`, then count correct test predictions."""
    run.set_parameter_count(parameter_count(model))
    run.set_provenance(extras={"optimizer": optimizer_description(optimizer, model)})
    with chainer.using_config("train", True):  # dropout on
        loop.train(run, data, _train_step(policy, model, optimizer, loss_function),
                   loss_value=lambda loss: float(loss.array),
                   # the arrays summed, not the Variables: a sum of Variables would keep every step's graph
                   add_losses=lambda total, loss: loss.array if total is None else total + loss.array,
                   sum_value=float)
    forward = _logits(policy, model)

    def count_correct(x: np.ndarray, y: np.ndarray):  # summed on the device, read once at the end
        return (forward(x).argmax(axis=1) == to_device(y, policy)).sum()

    with chainer.using_config("train", False):  # dropout off (FAIRNESS.md: eval-mode)  # phrase: eval-mode
        loop.evaluate(run, data, count_correct)
    run.record_peak_device_memory(peak_memory_mb(policy))


def parity_steps(run: Run, policy: ChainerPolicy, model: chainer.Chain, optimizer, loss_function, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    # dropout off, for the steps too: dropout is random and frameworks' generators differ
    with chainer.using_config("train", False):
        return loop.parity_outputs(_logits(policy, model), _train_step(policy, model, optimizer, loss_function),
                                   batch, to_numpy=to_host)


def extract_features(run: Run, policy: ChainerPolicy, model: chainer.Chain, images: np.ndarray) -> None:
    """Forward-only passes: batch norm on its running statistics, no graph (FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(model))
    with chainer.using_config("train", False):
        loop.infer(run, images, _logits(policy, model), to_host=to_host)  # inside every timed batch
    run.record_peak_device_memory(peak_memory_mb(policy))


def parity_features(run: Run, policy: ChainerPolicy, model: chainer.Chain, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    with chainer.using_config("train", False):
        return {"features": to_host(_logits(policy, model)(batch["x"]))}


# --- the scaffold's Chainer part (workloads/common/scaffold.py) ---------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A Chainer training workload: its file gives build_model, load_canonical, make_optimizer (a
    chainer.Optimizer set up on the model) and loss_function; the device policy and the loops are
    this module's."""

    def select_device(self, run: Run) -> ChainerPolicy:
        return select_device(run)

    def train(self, run: Run, policy: ChainerPolicy, model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: ChainerPolicy, model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Chainer inference workload: its file gives build_model (on the policy's device) and load_canonical."""

    def select_device(self, run: Run) -> ChainerPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: ChainerPolicy, model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: ChainerPolicy, model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
