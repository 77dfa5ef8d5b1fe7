"""MXNet's device, precision and provenance switches, shared by its Gluon and Module workloads, and
the Gluon workloads' loops (the Module API's are in runtime/mxnet_module.py, on these switches).
What ran is recorded in the result's extras: the update operator ("optimizer"), the RNN kernel
("gru_kernel"), TF32 ("tf32"); a hybridized block's graph builds are counted in samples.traces.

The cell's mode (workloads/common/modes.py) is graph (the default) or eager: `policy.hybridized(net)`
hybridizes the workload's HybridBlock in graph mode (one cached symbolic graph, built on the first
call, so in the first training step or the warm-up pass: FAIRNESS.md, warm-up-apart) and leaves it
imperative in eager mode, Gluon's own default (every operator dispatched from Python, nothing traced).
The workload files build the same blocks for both; only this runtime decides.

MXNet runs every operator asynchronously on its dependency engine: a Python call returns before
the work is done, so honest timing needs ``mx.nd.waitall`` (``run.sync``) before each clock read.
A Gluon workload hands its HybridBlock, its ``gluon.Trainer`` and its per-sample loss; the
step (record, backward, ``Trainer.step``) is written once here. MXNet 1.9.1 reports no peak device
memory of its own, so none is recorded. The numpy-only helpers at the end (the RNN operator's
packed parameter vector) stay importable without MXNet, for the unit tests. `Training` and
`FeatureExtraction` are the Gluon rows' side of the scaffold every workload file fills in
(workloads/common/scaffold.py).
"""
from __future__ import annotations

import ctypes
import math
import os
from typing import Optional

import numpy as np

try:
    import mxnet as mx
except ImportError:  # only the numpy helpers below are usable (tests/frameworks/test_mxnet_units.py)
    mx = None

from workloads.common import loop, modes, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED


class MXNetPolicy(Policy):
    """``device`` is the MXNet context (``mx.cpu()`` or ``mx.gpu(0)``) arrays and parameters live on.
    fp32 only (see select_device). ``graph``: whether the cell's mode hybridizes the Gluon blocks."""

    def __init__(self, device, precision: str, graph: bool):
        super().__init__(device, precision)
        self.graph = graph

    def hybridized(self, net):  # phrase: compile-step
        """``net`` as the cell's mode runs it: hybridized (graph: one cached graph, its memory planned once
        for the one input shape) or as it is (eager: imperative Gluon, operator by operator)."""
        if self.graph:
            net.hybridize(static_alloc=True, static_shape=True)
        return net


def select_device(run: Run) -> MXNetPolicy:
    """Pick the context, refuse what it cannot do (before any work), set the global switches."""
    gpus = mx.context.num_gpus()  # the CUDA runtime's device count: no cuBLAS or cuDNN handle yet
    if run.requested_device == "cuda" and gpus == 0:
        raise Unsupported("no CUDA GPU visible to MXNet on this host (or this is the CPU build)")
    context = mx.gpu(0) if gpus > 0 and run.requested_device != "cpu" else mx.cpu()
    precision = run.precision
    on_gpu = context.device_type == "gpu"
    precision_rules.check("mxnet", precision, "cuda" if on_gpu else "cpu")  # fp32 only (FAIRNESS.md: true-precision)
    tf32 = tf32_report(on_gpu)  # fp32 means true fp32 (FAIRNESS.md: true-precision), checked before any work
    os.environ.setdefault("MXNET_CUDNN_AUTOTUNE_DEFAULT", "1")  # cuDNN autotuning (FAIRNESS.md: autotune)
    mx.random.seed(SEED)  # phrase: seeding
    # FAIRNESS.md: same-threads: MXNet reads both variables at its import and reports neither back
    run.record_threads(None, None, "OMP_NUM_THREADS (intra-op) and MXNET_CPU_WORKER_NTHREADS (its engine's "
                       "CPU workers: inter-op), set before the import", note="MXNet reports no thread count back")
    np.random.seed(SEED)
    run.declare_sync(mx.nd.waitall, "mx.nd.waitall: every pending operator of MXNet's asynchronous "  # phrase: device-sync
                     "dependency engine (CPU and GPU alike)")
    features = mx.runtime.Features()
    run.set_provenance(
        framework_version=mx.__version__,
        device="cuda" if on_gpu else "cpu",
        # MXNet 1.9.1 reports neither its CUDA and cuDNN versions nor the GPU's name: read from the
        # libraries it loaded and from the CUDA driver (nvidia-smi's name as the fallback)
        cuda_version=_cuda_runtime_version() if on_gpu else None,
        cudnn_version=_cudnn_version() if on_gpu else None,
        gpu_name=(_cuda_device_name(context.device_id) or run.result.provenance.gpu.get("name")) if on_gpu else None,
        extras={"layout": "NCHW / TNC", "cudnn_autotune": os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"],
                "tf32": tf32,
                "built_with": ", ".join(f"{name}={str(features.is_enabled(name)).lower()}"
                                        for name in ("CUDA", "CUDNN", "MKLDNN", "OPENMP")),
                "context": str(context)},
    )
    return MXNetPolicy(context, precision, graph=run.mode == modes.GRAPH)


def tf32_report(on_gpu: bool) -> str:
    """What MXNet's process reports about TF32 for this (fp32) cell: the NVIDIA_TF32_OVERRIDE value
    in MXNet's own C environment, which cuBLAS and cuDNN read.

    NVIDIA_TF32_OVERRIDE=0 is the only way to keep TF32 out of MXNet 1.9.1's fp32 cells (it has no
    TF32 switch; cuDNN 8 may run fp32 convolutions as TF32 on Ampere and newer by default). cuBLAS and
    cuDNN read the variable when their handles are created, and MXNet creates those lazily, on the
    first operator that needs them: setting it after that has no effect, and setting it here would
    depend on nothing having run yet. So ``python -m workloads`` sets it before MXNet is imported
    (naming.precision_environment), and this only checks that it arrived: an fp32 GPU cell without
    it refuses to run rather than time TF32 as fp32.
    """
    if not on_gpu:
        return "n/a (CPU)"
    seen = mx.util.getenv("NVIDIA_TF32_OVERRIDE")
    if seen != "0":
        raise RuntimeError(f"fp32 needs NVIDIA_TF32_OVERRIDE=0 set before MXNet is imported (it is {seen!r}): "
                           "run the cell through python -m workloads, which sets it")
    return ("off: NVIDIA_TF32_OVERRIDE=0 in MXNet's C environment (mx.util.getenv), set before import, so before "
            "any cuBLAS or cuDNN handle; MXNet 1.9.1 has no TF32 switch of its own")


# --- what MXNet 1.9.1 does not report itself: read from the CUDA libraries it loaded ---------------

def _loaded_library(stem: str) -> Optional[str]:
    """The path of the shared library named ``stem``* that this process has mapped, or None
    (statically linked, not loaded, or no /proc)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith(stem):
                    return fields[-1]
    except OSError:
        pass
    return None


def _cuda_runtime_version() -> Optional[str]:
    """The CUDA runtime MXNet loaded (cudaRuntimeGetVersion), e.g. "11.2"; None when it is linked in
    statically or cannot be read."""
    path = _loaded_library("libcudart.so")
    if path is None:
        return None
    try:
        version = ctypes.c_int()
        if ctypes.CDLL(path).cudaRuntimeGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def _cudnn_version() -> Optional[str]:
    """The cuDNN MXNet loaded (cudnnGetVersion: major*1000 + minor*100 + patch for cuDNN 8), e.g. "8.1.1"."""
    path = _loaded_library("libcudnn.so")
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path)
        library.cudnnGetVersion.restype = ctypes.c_size_t
        version = int(library.cudnnGetVersion())
    except (OSError, AttributeError):
        return None
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"


def _cuda_device_name(ordinal: int) -> Optional[str]:
    """The GPU's name from the CUDA driver API (libcuda, which a CUDA build of MXNet has loaded), or None."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            driver = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            device, text = ctypes.c_int(), ctypes.create_string_buffer(256)
            if (driver.cuInit(0) == 0 and driver.cuDeviceGet(ctypes.byref(device), ordinal) == 0
                    and driver.cuDeviceGetName(text, len(text), device) == 0):
                return text.value.decode(errors="replace") or None
        except AttributeError:
            pass
        return None
    return None


def to_device(array: np.ndarray, policy: MXNetPolicy):  # phrase: device-placement
    return mx.nd.array(array, ctx=policy.device, dtype=np.float32)  # labels and token ids too: MXNet indexes with floats


def parameter_count(parameters) -> int:
    """Trainable parameters only: batch norm's running statistics have grad_req 'null'."""
    return int(sum(np.prod(p.shape) for p in parameters.values() if p.grad_req != "null"))


if mx is not None:
    @mx.optimizer.register
    class PyTorchAdam(mx.optimizer.Adam):
        """Adam with epsilon added after the bias correction of sqrt(v), as PyTorch and the paper do.

        Stock MXNet folds both bias corrections into the learning rate and adds epsilon to the
        uncorrected sqrt(v): w -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps). Scaling epsilon by
        sqrt(1-b2^t) makes that exactly w -= lr * m_hat / (sqrt(v_hat) + eps).

        Each parameter is updated by MXNet's built-in fused ``adam_update`` (one kernel per parameter).
        The multi-tensor ``contrib.multi_adamw_update`` would compute the same update (eta 1, wd 0), but
        its GPU path copies the gradient scale to the host on every call (a blocking cudaMemcpy), a
        per-step device sync PyTorch's fused Adam does not have; so it is not used.
        """

        def update(self, index, weight, grad, state):
            self._update_count(index)
            lr, wd = self._get_lr(index), self._get_wd(index)
            t = self._index_update_count[index]
            coef1, coef2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
            mean, var = state
            mx.nd.adam_update(weight, grad, mean, var, out=weight, lazy_update=self.lazy_update,
                              lr=lr * math.sqrt(coef2) / coef1, wd=wd, beta1=self.beta1, beta2=self.beta2,
                              epsilon=self.epsilon * math.sqrt(coef2), rescale_grad=self.rescale_grad,
                              **({"clip_gradient": self.clip_gradient} if self.clip_gradient else {}))


def optimizer_description(optimizer, weights) -> str:
    """Which MXNet update operator `optimizer` runs on `weights` (the trained parameters' arrays),
    read from the optimizer's own settings as MXNet 1.9.1's code decides it: its Updater hands SGD
    ``aggregate_num`` parameters per call (MXNET_OPTIMIZER_AGGREGATION_SIZE, default 4) and SGD's
    update runs the multi-tensor operator whenever every array is dense."""
    name = type(optimizer).__name__
    if isinstance(optimizer, PyTorchAdam):
        return ("mx.nd.adam_update (built-in fused op, one kernel per parameter; learning rate and epsilon "
                "rescaled by the bias corrections: PyTorch's Adam)")
    if type(optimizer) is mx.optimizer.SGD:
        operator = "sgd_mom_update" if optimizer.momentum > 0 else "sgd_update"
        if all(weight.stype == "default" for weight in weights):
            per_call = max(1, optimizer.aggregate_num)
            return (f"mx.nd.multi_{operator} (built-in fused multi-tensor op, {per_call} parameters per call: "
                    "MXNET_OPTIMIZER_AGGREGATION_SIZE)")
        return f"mx.nd.{operator} (built-in fused op, one per parameter)"
    return f"{name} (not described)"


def gru_kernel(policy: MXNetPolicy) -> str:
    """Which kernel MXNet's RNN operator (gluon.rnn.GRU and mx.sym.RNN alike) runs, as MXNet 1.9.1
    decides it: cuDNN's on a GPU (its only GPU implementation); on the CPU oneDNN's RNN primitive when
    MXNet is built with it and neither MXNET_MKLDNN_ENABLED=0 nor MXNET_USE_MKLDNN_RNN=0 turns it off,
    else MXNet's own C++ GRU loop. Both CPU paths are one fused operator over every time step.
    tests/frameworks/test_mxnet_units.py checks the CPU answer against oneDNN's own trace (DNNL_VERBOSE)."""
    features = mx.runtime.Features()
    if policy.device.device_type == "gpu":
        if features.is_enabled("CUDNN"):
            return "cudnn: MXNet's RNN operator (mode gru) on cuDNN"
        return "unknown: MXNet's RNN operator on a GPU without cuDNN"
    if (features.is_enabled("MKLDNN") and mx.util.getenv("MXNET_MKLDNN_ENABLED") != "0"
            and mx.util.getenv("MXNET_USE_MKLDNN_RNN") != "0"):
        return "fused-cpu: oneDNN GRU primitive (MXNet's RNN operator, mode gru)"
    return "fused-cpu: MXNet's own C++ GRU kernel (RNN operator, mode gru; oneDNN's RNN off)"


def note_traces(run: Run, net) -> None:
    """Count the Python traces of a hybridized block in ``samples.traces["hybrid_forward"]``.

    A hybridized block runs its ``hybrid_forward`` on symbols once, on its first call, to build the
    graph its CachedOp runs from then on (forward, and the backward derived from it); calls with
    NDArrays are the imperative path. So the count is the number of graph builds: 1 when nothing
    retraces (a new input shape is re-planned inside the CachedOp, with no new Python trace). In eager
    mode every call takes the imperative path: no graph, nothing counted (FAIRNESS.md: trace-once).
    """
    hybrid_forward = net.hybrid_forward

    def traced(F, *args, **kwargs):
        if F is mx.sym:  # only while building the graph
            run.note_trace("hybrid_forward")
        return hybrid_forward(F, *args, **kwargs)

    net.hybrid_forward = traced


# --- the Gluon loops ------------------------------------------------------------------------------

def _train_step(policy: MXNetPolicy, net, trainer, loss_function):  # phrase: train-step
    def step(x: np.ndarray, y: np.ndarray):
        x, y = to_device(x, policy), to_device(y, policy)
        with mx.autograd.record():  # train mode: dropout on
            loss = loss_function(net(x), y)  # per-sample losses
        loss.backward()
        trainer.step(len(y))  # gradients / batch size: the mean loss's gradient
        return loss  # stays on the device: no host sync per step
    return step


def _logits(policy: MXNetPolicy, net):  # phrase: eval-mode
    """Outside autograd.record: no gradients, dropout off and batch norm on its moving statistics
    (FAIRNESS.md: eval-mode)."""
    return lambda x: net(to_device(x, policy))


def to_host(array) -> np.ndarray:
    return array.asnumpy()


def train_and_evaluate(run: Run, policy: MXNetPolicy, net, trainer, loss_function, data) -> None:
    """Train with `trainer` on the per-sample `loss_function`, then count correct test predictions."""
    net = policy.hybridized(net)  # the graph itself is built in the first step
    parameters = net.collect_params()
    run.set_parameter_count(parameter_count(parameters))
    run.set_provenance(extras={"optimizer": optimizer_description(
        trainer.optimizer, [p.data() for p in parameters.values() if p.grad_req != "null"])})
    note_traces(run, net)
    loop.train(run, data, _train_step(policy, net, trainer, loss_function),
               loss_value=lambda loss: loss.mean().asscalar())
    forward = _logits(policy, net)
    loop.evaluate(run, data, lambda x, y: (forward(x).argmax(axis=1) == to_device(y, policy)).sum(),
                  to_int=lambda correct: int(correct.asscalar()))


def parity_steps(run: Run, policy: MXNetPolicy, net, trainer, loss_function, batch: dict) -> dict:
    """The steps run in train mode: `net` is built without dropout for them (MXNet 1.9.1's CPU backward
    in predict mode, autograd.record(train_mode=False), returns wrong gradients for pooling)."""
    net = policy.hybridized(net)  # parity holds in every mode: the mode's own execution is checked
    run.set_parameter_count(parameter_count(net.collect_params()))
    return loop.parity_outputs(_logits(policy, net), _train_step(policy, net, trainer, loss_function), batch,
                               to_numpy=to_host)


def extract_features(run: Run, policy: MXNetPolicy, net, images: np.ndarray) -> None:
    net = policy.hybridized(net)  # the graph itself is built in the warm-up pass
    run.set_parameter_count(parameter_count(net.collect_params()))
    note_traces(run, net)
    loop.infer(run, images, _logits(policy, net), to_host=to_host)  # asnumpy: inside every timed batch


def parity_features(run: Run, policy: MXNetPolicy, net, batch: dict) -> dict:
    net = policy.hybridized(net)
    run.set_parameter_count(parameter_count(net.collect_params()))
    return {"features": to_host(_logits(policy, net)(batch["x"]))}


# --- the scaffold's Gluon part (workloads/common/scaffold.py) -----------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A Gluon training workload: its file gives build_model, load_canonical, make_optimizer (a
    gluon.Trainer) and loss_function (a per-sample gluon.loss); the device policy and the loops are
    this module's."""

    def select_device(self, run: Run) -> MXNetPolicy:
        return select_device(run)

    def train(self, run: Run, policy: MXNetPolicy, net, optimizer, data) -> None:
        train_and_evaluate(run, policy, net, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: MXNetPolicy, net, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, net, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Gluon inference workload: its file gives build_model (a HybridBlock) and load_canonical."""

    def select_device(self, run: Run) -> MXNetPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: MXNetPolicy, net, images: np.ndarray) -> None:
        extract_features(run, policy, net, images)

    def parity_features(self, run: Run, policy: MXNetPolicy, net, batch: dict) -> dict:
        return parity_features(run, policy, net, batch)


# --- numpy-only helpers (no MXNet needed) ---------------------------------------------------------

def gru_packed_parameters(params: dict) -> np.ndarray:
    """Canonical GRU weights -> the RNN operator's packed vector (one layer, one direction).

    Layout (as Gluon's rnn layer concatenates it): every weight, then every bias; weights stored
    (3*hidden, in) with gate order r, z, n (canonical's): [W_i2h, W_h2h, b_i2h, b_h2h], flattened.
    """
    return np.ascontiguousarray(np.concatenate([
        params["gru.kernel"].T.reshape(-1), params["gru.recurrent_kernel"].T.reshape(-1),
        params["gru.input_bias"], params["gru.recurrent_bias"]]).astype(np.float32))


def gru_unpack_parameters(packed: np.ndarray, input_size: int, hidden: int) -> dict:
    """The inverse of ``gru_packed_parameters``: canonical layouts back from the packed vector."""
    sizes = (3 * hidden * input_size, 3 * hidden * hidden, 3 * hidden, 3 * hidden)
    if packed.size != sum(sizes):
        raise ValueError(f"packed GRU vector has {packed.size} values, expected {sum(sizes)}")
    w_i2h, w_h2h, b_i2h, b_h2h = np.split(packed, np.cumsum(sizes)[:-1])
    return {"gru.kernel": w_i2h.reshape(3 * hidden, input_size).T,
            "gru.recurrent_kernel": w_h2h.reshape(3 * hidden, hidden).T,
            "gru.input_bias": b_i2h, "gru.recurrent_bias": b_h2h}
