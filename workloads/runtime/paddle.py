"""PaddlePaddle's runtime for the three Paddle workloads: the device policy and the loops, written once.

The workloads are written for Paddle's dynamic graph (its default mode since 2.0, eager like PyTorch).
On a GPU its kernels are queued on a CUDA stream, so `run.sync` is `paddle.device.synchronize`; on
the CPU they run before the call returns (in both modes). Three defaults differ from PyTorch's; each
is handled here: Paddle's import pins the CPU math libraries to ONE thread (it sets OMP_NUM_THREADS=1
when unset), its CUDA build computes fp32 matmuls and convolutions in TF32 on Ampere and newer, and
its dynamic-graph AMP leaves CPU kernels in float32 (so fp16 / bf16 need a GPU).

The cell's mode (workloads/common/modes.py) is eager (the default: nothing traced, every operator
dispatched from Python) or graph: `policy.converted(model)` converts the model's forward with
`paddle.jit.to_static(full_graph=True)` (dynamic-to-static), one static program per train or eval
mode and input shape, built on its first call (the first training step or the warm-up pass,
FAIRNESS.md: warm-up-apart) and counted in `samples.traces`; Paddle derives the backward as a
program too, and the optimizer's update stays eager (Paddle's to_static cannot convert `backward()`
or the optimizer's step). The framework option `channels_last` (workloads/common/options.py) runs
the convolutions, pools and batch norms NHWC (`data_format="NHWC"`; the input batch arrives NCHW and
is transposed once per batch, inside the model's forward).

`select_device(run)` returns a `PaddlePolicy` (device, precision, layout, autocast, loss scaler);
`train_and_evaluate`, `parity_steps`, `extract_features` and `parity_features` run a workload's
model through the shared loops of workloads/common/loop.py.
`Training` and `FeatureExtraction` are Paddle's side of the scaffold every workload file fills in
(workloads/common/scaffold.py).
"""
from __future__ import annotations

import os

import numpy as np
import paddle
from paddle.base import core
from paddle.jit.dy2static.program_translator import StaticFunction

from workloads.common import loop, modes, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
_GROWTH_INTERVAL = 2000  # fp16 loss scale: doubled after this many finite steps (PyTorch GradScaler's)


# --- device and precision -------------------------------------------------------------------------

class PaddlePolicy(Policy):
    """The device ("cuda" or "cpu", made current by paddle.set_device), what the precision asks, and the
    convolutions' layout: `data_format` "NHWC" with the channels_last option, else "NCHW"."""

    def __init__(self, device, precision: str, *, channels_last: bool = False, count_programs=None):
        super().__init__(device, precision)
        self.channels_last = channels_last
        self.count_programs = count_programs  # the graph mode's program counter (_program_counter); None: eager

    @property
    def data_format(self) -> str:
        return "NHWC" if self.channels_last else "NCHW"

    def converted(self, model: paddle.nn.Layer) -> paddle.nn.Layer:  # phrase: compile-step
        """``model`` as the cell's mode runs it: itself (eager), or with its forward converted in place by
        paddle.jit.to_static (graph). full_graph=True: the whole forward one static program, or an error
        (never Paddle's SOT, which would run what it cannot convert eagerly, unsaid). Converted once."""
        if self.count_programs is None or isinstance(model.forward, StaticFunction):
            return model
        paddle.jit.to_static(model, full_graph=True)
        self.count_programs(model.forward)
        return model

    def autocast(self):  # phrase: autocast
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


def select_device(run: Run) -> PaddlePolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    gpus = _gpu_count()
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to Paddle on this host (CPU build, or no GPU)")
    device_type = "cuda" if gpus and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    precision_rules.check("paddle", precision, device_type,
                          paddle.device.cuda.get_device_capability(0) if device_type == "cuda" else None)
    channels_last = run.option("channels_last") == "on"
    if channels_last and run.cell.workload == "gru":
        raise Unsupported("channels_last lays out convolutions (NHWC); the GRU model has none")
    paddle.set_device("gpu:0" if device_type == "cuda" else "cpu")  # phrase: device-placement
    paddle.seed(SEED)  # phrase: seeding
    # the run's threads (FAIRNESS.md: same-threads): OMP_NUM_THREADS was set before the import (else
    # Paddle's import sets it to 1), and Paddle's own switch here; Paddle reports neither back
    core.set_num_threads(run.threads)
    run.record_threads(None, None, "OMP_NUM_THREADS before the import, paddle.base.core.set_num_threads",
                       note="Paddle reports no thread count back")
    graph = run.mode == modes.GRAPH
    extras = {"layout": "NHWC (channels_last)" if channels_last else "NCHW / TNC",
              "graph": ("static: paddle.jit.to_static(full_graph=True), the model's forward one static program per "
                        "train or eval mode and input shape (its backward derived as one), built on the first call; "
                        "the optimizer's update eager" if graph else
                        "dynamic (eager): no paddle.jit.to_static, nothing traced or compiled"),
              "autocast": _AUTOCAST_DTYPES.get(precision, "none"), "paddle_commit": paddle.version.commit,
              "tf32": "n/a (CPU)"}
    if device_type == "cpu":  # oneDNN kernels in the dynamic graph: off by default (Paddle's own CPU kernels + MKL)
        extras["onednn"] = str(paddle.get_flags(["FLAGS_use_onednn"])["FLAGS_use_onednn"]).lower()
        run.declare_sync(no_wait, "nothing: Paddle's CPU kernels (dynamic graph, or a converted program's run) "
                                  "finish before the call returns")
    if device_type == "cuda":
        # fp32 means true fp32 (FAIRNESS.md: true-precision): Paddle's CUDA build allows TF32 in cuBLAS and cuDNN by default.
        core.set_cublas_switch(precision == "tf32")
        core.set_cudnn_switch(precision == "tf32")
        # cuDNN autotuning (FAIRNESS.md: autotune): try every convolution algorithm once per shape, keep the fastest
        paddle.set_flags({"FLAGS_cudnn_exhaustive_search": True})
        run.declare_sync(paddle.device.synchronize, "paddle.device.synchronize: every kernel queued on the GPU")  # phrase: device-sync
        extras.update(allow_tf32=str(precision == "tf32").lower(), cudnn_exhaustive_search="true",
                      tf32=tf32_report())
    run.set_provenance(
        framework_version=paddle.__version__,
        device=device_type,
        cuda_version=paddle.version.cuda() if device_type == "cuda" else None,
        cudnn_version=paddle.version.cudnn() if device_type == "cuda" else None,
        gpu_name=paddle.device.cuda.get_device_name(0) if device_type == "cuda" else None,
        extras=extras,
    )
    return PaddlePolicy(device_type, precision, channels_last=channels_last,
                        count_programs=_program_counter(run) if graph else None)


def _program_counter(run: Run):
    """What counts each static program paddle.jit.to_static builds for a converted forward in
    ``samples.traces`` ("to_static program N (train|eval)"): a program of the same mode and input
    shapes built twice is a retrace, which the report flags. Paddle builds one in its program
    cache's _build_once, on a cache miss only, so that is where it is counted."""
    seen: dict = {}

    def count(static_forward: StaticFunction) -> None:
        cache = static_forward.program_cache
        build = cache._build_once

        def counted(key):
            train = bool(key.kwargs.get("is_train"))
            shapes = [tuple(spec.shape) for spec in paddle.utils.flatten(key.input_args_with_spec)
                      if hasattr(spec, "shape")]
            identity = (train, str(shapes))
            seen.setdefault(identity, f"to_static program {len(seen) + 1} ({'train' if train else 'eval'})")
            run.note_trace(seen[identity])
            return build(key)

        cache._build_once = counted
    return count


def tf32_report() -> str:
    """What Paddle says about TF32, read back after select_device set it: its cuBLAS and cuDNN switches
    (core.get_cublas_switch / get_cudnn_switch, the FLAGS behind them), and the NVIDIA_TF32_OVERRIDE
    this process was given (workloads/__main__.py sets 0 for fp32 cells before the import)."""
    override = os.environ.get("NVIDIA_TF32_OVERRIDE", "unset")
    return (f"cublas={str(core.get_cublas_switch()).lower()}, cudnn={str(core.get_cudnn_switch()).lower()} "
            f"(core.get_cublas_switch / get_cudnn_switch); NVIDIA_TF32_OVERRIDE={override}")


def to_channels_last(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """Switch a built model's convolutions, batch norms and pools to NHWC in place (the channels_last
    option), for a model whose constructor takes no data_format (Paddle's zoo ResNet-50). The kernels
    keep their shape: Paddle's convolution weights are OIHW in either layout, so the canonical
    weights load the same way. Refuses any other layer that holds parameters or depends on the layout."""
    from paddle import nn
    from paddle.nn.functional.conv import _update_padding_nd

    for name, layer in model.named_sublayers(include_self=True):
        if isinstance(layer, nn.Conv2D):
            assert layer._padding_mode == "zeros", (name, layer._padding_mode)
            layer._data_format, layer._channel_dim = "NHWC", 3
            layer._updated_padding, layer._padding_algorithm = _update_padding_nd(layer._padding, True, 2)
        elif isinstance(layer, nn.BatchNorm2D):
            layer._data_format = "NHWC"
        elif isinstance(layer, nn.MaxPool2D):
            layer.data_format = "NHWC"
        elif isinstance(layer, nn.AdaptiveAvgPool2D):
            layer._data_format = "NHWC"
        elif layer.parameters(include_sublayers=False) or isinstance(layer, (nn.Flatten, nn.Linear, nn.AvgPool2D)):
            raise TypeError(f"to_channels_last: {name} ({type(layer).__name__}) is not converted")
    return model


def describe_optimizer(optimizer) -> str:
    """What update ran (the "optimizer" record): Paddle's built-in optimizer op, merged over every
    parameter (use_multi_tensor=True) or one op per parameter."""
    kind = type(optimizer).__name__
    if getattr(optimizer, "_use_multi_tensor", False):
        op = {"Momentum": "merged_momentum_", "Adam": "merged_adam_"}.get(kind, "merged op")
        return (f"paddle.optimizer.{kind}(use_multi_tensor=True): built-in op {op}, one multi-tensor op "
                f"for every parameter")
    op = {"Momentum": "momentum_", "Adam": "adam_"}.get(kind, "its op")
    return f"paddle.optimizer.{kind}: built-in op {op}, one per parameter"


def describe_gru_kernel(policy: PaddlePolicy, gru: paddle.nn.GRU) -> str:
    """Which GRU kernel runs (the "gru_kernel" record), read from the layer as its forward decides:
    with could_use_cudnn (one layer, the four cuDNN-form parameters) nn.GRU calls Paddle's fused rnn
    operator, whose GPU kernel is cuDNN's and whose CPU kernel is Paddle's own C++ loop over the time
    steps; otherwise it loops its GRUCell in Python, one step at a time."""
    if not gru.could_use_cudnn or (paddle.device.is_compiled_with_rocm()):
        return "python-loop: nn.GRU steps its GRUCell in Python (could_use_cudnn is False)"
    if policy.device == "cuda":
        return "cudnn: nn.GRU's rnn operator (cuDNN's GRU)"
    return "fused-cpu: nn.GRU's rnn operator (Paddle's C++ CPU kernel, every time step in one operator)"


def to_host(features: paddle.Tensor) -> np.ndarray:
    """Features into a numpy array (inside each timed batch: FAIRNESS.md host-copy); float32 first
    where numpy lacks the dtype (Paddle hands bfloat16 over as raw uint16)."""
    if features.dtype != paddle.float32:
        features = features.astype("float32")
    return features.numpy()


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

    def step(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:  # phrase: train-step
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
        step = _train_step(policy, policy.converted(model), optimizer, loss_function)
    run.set_parameter_count(parameter_count(model))
    run.set_provenance(extras={"optimizer": describe_optimizer(optimizer)})
    model.train()
    loop.train(run, data, step)  # the loss is read (float) once per epoch
    # phrase: eval-mode
    model.eval()  # dropout off (FAIRNESS.md: eval-mode); graph: the eval program, converted on its first call

    def count_correct(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:
        predictions = model(to_device(x)).argmax(axis=1)
        return (predictions == to_device(y)).astype("int64").sum()  # summed on the device

    with paddle.no_grad(), policy.autocast():
        loop.evaluate(run, data, count_correct)
    # end phrase
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_steps(run: Run, policy: PaddlePolicy, model, optimizer, loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity).

    The steps run in train mode with every dropout layer in eval mode: dropout off (it is random,
    and frameworks' generators differ), the rest in train mode, where Paddle keeps what a backward
    needs (its rnn operator keeps nothing in eval mode; a converted forward's eval program has no
    backward)."""
    run.set_parameter_count(parameter_count(model))
    step = _train_step(policy, policy.converted(model), optimizer, loss_function)

    def forward(x: np.ndarray) -> paddle.Tensor:
        model.eval()
        with paddle.no_grad():
            return model(to_device(x))

    def train_step(x: np.ndarray, y: np.ndarray) -> paddle.Tensor:
        model.train()
        for layer in model.sublayers():
            if isinstance(layer, (paddle.nn.Dropout, paddle.nn.Dropout2D, paddle.nn.Dropout3D)):
                layer.eval()
        return step(x, y)

    return loop.parity_outputs(forward, train_step, batch, to_numpy=lambda logits: logits.numpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: PaddlePolicy, model, images: np.ndarray) -> None:
    """The warm pass, then the timed forward-only pass, with no gradients (FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(model))
    model = policy.converted(model.eval())  # batch norm on its moving statistics; graph: converted in the warm-up
    with paddle.no_grad(), policy.autocast():
        loop.infer(run, images, lambda batch: model(to_device(batch)), to_host=to_host)
    run.record_peak_device_memory(_peak_device_memory_mb(policy))


def parity_features(run: Run, policy: PaddlePolicy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    model = policy.converted(model.eval())
    with paddle.no_grad():
        return {"features": to_host(model(to_device(batch["x"])))}


# --- the scaffold's Paddle part (workloads/common/scaffold.py) ----------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A Paddle training workload: its file gives build_model, load_canonical, make_optimizer (a
    paddle.optimizer, use_multi_tensor: one merged op) and loss_function (a loss layer); the device
    policy and the loops are this module's."""

    def select_device(self, run: Run) -> PaddlePolicy:
        return select_device(run)

    def train(self, run: Run, policy: PaddlePolicy, model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: PaddlePolicy, model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Paddle inference workload: its file gives build_model (in eval mode) and load_canonical."""

    def select_device(self, run: Run) -> PaddlePolicy:
        return select_device(run)

    def extract(self, run: Run, policy: PaddlePolicy, model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: PaddlePolicy, model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
