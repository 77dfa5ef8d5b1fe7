"""MindSpore's runtime for the three MindSpore workloads: the device policy, the steps and the loops.

MindSpore runs a Python function two ways: op by op (PyNative mode, its default) or compiled into
one static graph (graph mode, `mindspore.jit`). The cell's mode (workloads/common/modes.py) picks:
graph (the default) compiles every Cell call and each step `policy.compiled` hands to mindspore.jit
on its first call, which lands in the harness's first step (or warm pass); eager is PyNative mode,
the same steps run as plain Python, nothing compiled. Device work may still be pending when a call
returns (PyNative dispatches asynchronously too), so `run.sync` waits: `mindspore.runtime.synchronize`
on a GPU; on the CPU, where that call is not supported, it copies the last output the workload
handed to `track` to the host (each step depends on the one before; in PyNative mode the copy first
drains every operator MindSpore has queued, the step's update included: measured with MindSpore 2.10).

Graph mode traces nothing in Python: MindSpore parses each compiled function's source once per input
shape. So a trace is counted (`run.note_trace`) by a `constexpr` call in each compiled step's body,
which MindSpore evaluates while it compiles the graph and never when the graph runs. PyNative mode
compiles nothing, so nothing is counted there (FAIRNESS.md: trace-once).

On the CPU, oneDNN's instruction set is capped by the framework option `onednn_max_cpu_isa`
(onednn.py in this package says why), set in `select_device` before the first oneDNN primitive.

Only fp32 is wired up: MindSpore's mixed precision (`mindspore.amp`) is not set up here, so other
precisions are recorded as unsupported. On a GPU, fp32 is true fp32 (TF32 turned off; MindSpore
allows it for convolutions by default). The GPU switches have not been run: there is no CUDA
variant yet (images/mindspore/metadata.toml says why).

`select_device(run)`, the loops (workloads/common/loop.py) and the scaffold's classes
(workloads/common/scaffold.py) follow every runtime's shape.
"""
from __future__ import annotations

import os

import numpy as np

import mindspore as ms
from mindspore import ops

from workloads.common import loop, modes, precision as precision_rules, scaffold, threads as thread_rules
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED
from workloads.runtime.mindspore.onednn import set_onednn_isa

_device: list = ["cpu"]
_last_output: list = [None]  # what the last dispatched call returned, for run.sync on the CPU


# --- device and precision -------------------------------------------------------------------------

def sync() -> None:  # phrase: device-sync
    """Wait for the device: every queued GPU kernel, or on the CPU the last tracked output."""
    if _device[0] == "cuda":
        ms.runtime.synchronize()
    elif _last_output[0] is not None:
        _last_output[0].asnumpy()  # a small copy (a loss, a batch of features) that waits for its graph


def track(output):
    """Remember what a step returned, so `run.sync` can wait for it; returns it unchanged."""
    _last_output[0] = output
    return output


def _gpu_available() -> bool:
    """Whether this MindSpore loaded its GPU plugin at import (it needs CUDA 11 and nvcc under CUDA_HOME).

    The public ms.device_context.gpu.is_available() asks the same question but logs two warnings
    (and every plugin's load error) on each CPU host, so the context it reads is asked directly."""
    try:
        from mindspore._c_expression import MSContext
    except ImportError:  # a later MindSpore that moved it
        return ms.device_context.gpu.is_available()
    return MSContext.get_instance().is_pkg_support_device("GPU")


class MindSporePolicy(Policy):
    """The device ("cuda" or "cpu", made current by mindspore.set_device), the precision (fp32 only) and
    ``graph``: whether the cell's mode compiles (graph mode) or runs op by op (PyNative)."""

    def __init__(self, device: str, precision: str, graph: bool):
        super().__init__(device, precision)
        self.graph = graph

    def compiled(self, function):  # phrase: compile-step
        """``function`` as the cell's mode runs it: compiled by mindspore.jit into one static graph on its
        first call (graph mode), or as it is (PyNative: op by op from Python, nothing compiled)."""
        return ms.jit(function) if self.graph else function


def gpu_name(run: Run) -> str | None:
    """The GPU's name: nvidia-smi's (workloads/common/provenance.py, the first visible GPU, which is
    MindSpore's device 0), else MindSpore's own hal.get_device_name."""
    name = (run.result.provenance.gpu or {}).get("name")
    if name:
        return name
    try:
        return ms.hal.get_device_name(0, "GPU")
    except Exception:  # noqa: BLE001 - an API MindSpore is retiring: no name rather than no result
        return None


def select_device(run: Run) -> MindSporePolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpu = _gpu_available()
    if run.requested_device == "cuda" and not gpu:
        raise Unsupported("no CUDA GPU visible to MindSpore on this host (its GPU plugin did not load)")
    device_type = "cuda" if gpu and run.requested_device != "cpu" else "cpu"
    precision_rules.check("mindspore", run.precision, device_type)  # fp32 only (FAIRNESS.md: true-precision)
    onednn = set_onednn_isa(run)  # before the first oneDNN primitive (the CPU kernels; a GPU run's host ops too)
    ms.set_device("GPU" if device_type == "cuda" else "CPU")  # phrase: device-placement
    graph = run.mode == modes.GRAPH  # GRAPH_MODE compiles every Cell call too; PyNative runs them op by op
    ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
    if device_type == "cuda":
        gpu_context = ms.device_context.gpu
        gpu_context.op_precision.conv_allow_tf32(False)  # fp32 means true fp32 (FAIRNESS.md: true-precision)
        gpu_context.op_precision.matmul_allow_tf32(False)
        # cuDNN autotuning (FAIRNESS.md: autotune): try every convolution algorithm once, keep the fastest
        gpu_context.op_tuning.conv_fprop_algo("performance")
        gpu_context.op_tuning.conv_dgrad_algo("performance")
        gpu_context.op_tuning.conv_wgrad_algo("performance")
    ms.set_seed(SEED)  # phrase: seeding
    thread_rules.set_once((ms.device_context.cpu.op_tuning.threads_num, ms.runtime.dispatch_threads_num), run.threads)
    run.record_threads(None, None, "op_tuning.threads_num, dispatch_threads_num", note="MindSpore reports no count")
    np.random.seed(SEED)  # nn.GRU draws its initial weights from numpy's global generator
    _device[0] = device_type
    run.declare_sync(sync, "mindspore.runtime.synchronize: every kernel queued on the GPU" if device_type == "cuda" else
                     "the last step's output copied to the host (no synchronize on the CPU; each step chained)")
    tf32 = "n/a (CPU)"
    if device_type == "cuda":  # MindSpore has no getter for its TF32 switches: what was set, and the override
        tf32 = (f"off: op_precision.conv_allow_tf32(False), matmul_allow_tf32(False) set (MindSpore reads them "
                f"back nowhere); NVIDIA_TF32_OVERRIDE={os.environ.get('NVIDIA_TF32_OVERRIDE', 'unset')}")
    run.set_provenance(
        framework_version=ms.__version__,
        device=device_type,
        cuda_version=None,  # MindSpore does not report its CUDA version at run time; the variant names it
        cudnn_version=None,
        gpu_name=gpu_name(run) if device_type == "cuda" else None,
        extras={"layout": "NCHW / TNC", "execution": _execution(),
                "cudnn_conv_algo": "performance" if device_type == "cuda" else "none (CPU)",
                "allow_tf32": "false", "tf32": tf32, **onednn},
    )
    return MindSporePolicy(device_type, run.precision, graph)


def _execution() -> str:
    """MindSpore's execution mode as its context reports it back (the "execution" record)."""
    mode = ms.get_context("mode")
    return {ms.GRAPH_MODE: "GRAPH_MODE", ms.PYNATIVE_MODE: "PYNATIVE_MODE"}.get(mode, f"unknown ({mode})") + \
        " (mindspore.get_context('mode'))"


def to_host(features: ms.Tensor) -> np.ndarray:
    """Features into a numpy array, inside each timed batch (FAIRNESS.md: host-copy); the copy waits for
    them, so run.sync has nothing left to wait for."""
    array = features.asnumpy()
    _last_output[0] = None
    return array


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


# --- optimizers -----------------------------------------------------------------------------------

_apply_adam = ops.MultitypeFuncGraph("apply_adam")


@_apply_adam.register("Function", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor",
                      "Tensor", "Tensor")
def _apply_adam_to(adam, beta1_power, beta2_power, lr, beta1, beta2, epsilon, parameter, m, v, gradient):
    return adam(parameter, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, gradient)


class Adam(ms.nn.Cell):
    """PyTorch's Adam on MindSpore's built-in ApplyAdam kernel (ops.Adam), one per parameter in the step's graph.

    ops.Adam computes w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + e) (TensorFlow's form); handed
    e = eps * sqrt(1 - b2^t), that is exactly PyTorch's w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
    as Paddle's adam kernel does it. mint.optim.Adam computes the same written out in about ten ops per parameter.
    """

    def __init__(self, parameters, lr: float, betas: tuple, eps: float):
        super().__init__()
        self.parameters = ms.ParameterTuple(parameters)
        self.moments1 = self.parameters.clone(prefix="adam_m", init="zeros")
        self.moments2 = self.parameters.clone(prefix="adam_v", init="zeros")
        self.beta1_power = ms.Parameter(ms.Tensor(1.0, ms.float32), name="adam_beta1_power")  # b1^t
        self.beta2_power = ms.Parameter(ms.Tensor(1.0, ms.float32), name="adam_beta2_power")  # b2^t
        self.lr, self.eps = ms.Tensor(lr, ms.float32), ms.Tensor(eps, ms.float32)
        self.beta1, self.beta2 = ms.Tensor(betas[0], ms.float32), ms.Tensor(betas[1], ms.float32)
        self.adam = ops.Adam()
        self.hyper_map = ops.HyperMap()

    def construct(self, gradients):
        beta1_power = self.beta1_power * self.beta1
        beta2_power = self.beta2_power * self.beta2
        ops.assign(self.beta1_power, beta1_power)
        ops.assign(self.beta2_power, beta2_power)
        epsilon = self.eps * ops.sqrt(1.0 - beta2_power)  # PyTorch's epsilon, in ops.Adam's form
        apply = ops.partial(_apply_adam_to, self.adam, beta1_power, beta2_power, self.lr, self.beta1, self.beta2,
                            epsilon)
        return self.hyper_map(apply, self.parameters, self.moments1, self.moments2, gradients)


def describe_optimizer(optimizer) -> str:
    """What update ran (the "optimizer" record)."""
    if isinstance(optimizer, Adam):
        return ("ops.Adam (ApplyAdam kernel): built-in op, one per parameter per step; epsilon "
                "handed over as eps*sqrt(1 - beta2^t), PyTorch's form")
    if isinstance(optimizer, ms.nn.Momentum):
        return ("nn.Momentum: built-in op ApplyMomentum, one per parameter per step (MindSpore has "
                "no multi-parameter momentum op)")
    return f"{type(optimizer).__module__}.{type(optimizer).__name__}"


def describe_gru_kernel(gru: ms.nn.GRU) -> str:
    """Which GRU kernel runs (the "gru_kernel" record), read from the layer as its construct decides:
    nn.GRU on a GPU calls the CudnnGRU operator; on the CPU it steps its GRU cell function in a loop
    over the time steps, which graph mode unrolls into the compiled step and PyNative runs from Python."""
    from mindspore.nn.layer.rnns import _DynamicGRUCPUGPU

    rnn = gru.rnn
    if isinstance(rnn, _DynamicGRUCPUGPU) and rnn.is_gpu:
        return "cudnn: nn.GRU's CudnnGRU operator (cuDNN's GRU)"
    if isinstance(rnn, _DynamicGRUCPUGPU):
        where = ("unrolled by graph mode into the compiled step" if ms.get_context("mode") == ms.GRAPH_MODE
                 else "run op by op from Python (PyNative)")
        return (f"python-loop: nn.GRU's per-step GRU cell loop (_DynamicRNNBase), {where}; MindSpore has no fused "
                "CPU GRU kernel")
    return f"other: nn.GRU runs {type(rnn).__name__}"


# --- the steps (compiled in graph mode) -----------------------------------------------------------

def trace_counter(run: Run, policy: MindSporePolicy):
    """`note_trace(name)` for the body of a step `policy.compiled` compiles: a constexpr, which MindSpore
    evaluates in Python while it compiles the graph (once per input shape) and never when the graph runs,
    so `run.note_trace` counts compilations (`samples.traces`). reuse_result=False: every compilation
    evaluates it afresh, a recompilation included. In PyNative mode nothing is compiled and a constexpr
    would run on every call, so nothing is counted (FAIRNESS.md: trace-once)."""
    if not policy.graph:
        return lambda function: 0

    @ms.constexpr(reuse_result=False)
    def note_trace(function):
        run.note_trace(function)
        return 0

    return note_trace


def _train_step(run: Run, policy: MindSporePolicy, network: ms.nn.Cell, optimizer, loss_function):  # phrase: train-step
    """One step: `step(x, y) -> loss` on a numpy batch, the loss left on the device.

    `mindspore.value_and_grad` differentiates the mean loss with respect to the optimizer's
    parameters; the optimizer updates them in place. In graph mode `mindspore.jit` compiles forward,
    backward and update into one graph on the first call (it lands in the harness's first_step_s). Dropout
    follows the network's mode: `network.set_train(True)` for training, False for the parity steps.
    """
    note_trace = trace_counter(run, policy)

    def loss_of(x, y):
        return loss_function(network(x), y)

    gradient_of = ms.value_and_grad(loss_of, None, optimizer.parameters)

    def step(x, y):
        note_trace("train_step")  # while compiling only: a second count for one shape is a recompilation
        loss, gradients = gradient_of(x, y)
        optimizer(gradients)
        return loss

    step = policy.compiled(step)

    def call(x: np.ndarray, y: np.ndarray):
        return track(step(to_device(x), to_device(y)))

    return call


def train_and_evaluate(run: Run, policy: MindSporePolicy, network, optimizer, loss_function, data) -> None:
    """Train `network` on `data` with `optimizer` and `loss_function`, then measure its test accuracy."""
    with run.phase("model_build"):  # added to the workload's model_build; compiled on the first step
        network.set_train(True)  # dropout on
        step = _train_step(run, policy, network, optimizer, loss_function)
    run.set_parameter_count(parameter_count(network))
    run.set_provenance(extras={"optimizer": describe_optimizer(optimizer)})
    loop.train(run, data, step)  # the loss stays on the device; read (float) once per epoch
    network.set_train(False)  # dropout off (FAIRNESS.md: eval-mode); graph mode compiles the inference graph once  # phrase: eval-mode
    note_trace = trace_counter(run, policy)

    @policy.compiled
    def correct_in(x, y):
        note_trace("eval_step")  # while compiling only: once per batch shape (a last partial batch is another)
        return (network(x).argmax(axis=1) == y).astype(ms.int32).sum()

    def count_correct(x: np.ndarray, y: np.ndarray) -> ms.Tensor:  # summed on the device; run.sync waits for it
        return track(correct_in(to_device(x), to_device(y)))

    loop.evaluate(run, data, count_correct)
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_steps(run: Run, policy: MindSporePolicy, network, optimizer, loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity)."""
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)  # dropout off, in the forward pass and inside the parity steps
    return loop.parity_outputs(lambda x: network(to_device(x)),
                               _train_step(run, policy, network, optimizer, loss_function), batch,
                               to_numpy=lambda logits: logits.asnumpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: MindSporePolicy, network, images: np.ndarray) -> None:
    """The warm pass (graph mode's compilation lands there), then the timed forward-only pass; each batch's
    features are copied to the host (to_host), which waits for them."""
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)  # inference only: batch norm on moving statistics, no gradients (FAIRNESS.md: eval-mode)
    note_trace = trace_counter(run, policy)

    @policy.compiled
    def forward(images):
        note_trace("forward")  # while compiling only: once for the one batch shape
        return network(images)

    loop.infer(run, images, lambda batch: track(forward(to_device(batch))), to_host=to_host)
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_features(run: Run, policy: MindSporePolicy, network, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(network))
    network.set_train(False)
    return {"features": network(to_device(batch["x"])).asnumpy()}


# --- the scaffold's MindSpore part (workloads/common/scaffold.py) -------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A MindSpore training workload: its file gives build_model, load_canonical, make_optimizer (an
    optimizer Cell) and loss_function (a loss Cell); the policy and the loops are this module's."""

    def select_device(self, run: Run) -> MindSporePolicy:
        return select_device(run)

    def train(self, run: Run, policy: MindSporePolicy, network, optimizer, data) -> None:
        train_and_evaluate(run, policy, network, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: MindSporePolicy, network, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, network, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A MindSpore inference workload: its file gives build_model (set_train(False)) and load_canonical."""

    def select_device(self, run: Run) -> MindSporePolicy:
        return select_device(run)

    def extract(self, run: Run, policy: MindSporePolicy, network, images: np.ndarray) -> None:
        extract_features(run, policy, network, images)

    def parity_features(self, run: Run, policy: MindSporePolicy, network, batch: dict) -> dict:
        return parity_features(run, policy, network, batch)
