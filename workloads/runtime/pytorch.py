"""PyTorch's runtime for the three PyTorch workloads: the device policy and the loops, written once.

`select_device(run)` picks the device, refuses what it cannot do and returns a `TorchPolicy`
(device, precision, autocast, loss scaler, fused optimizers, memory format); the workloads read
those choices from it. `train_and_evaluate`, `parity_steps`, `extract_features` and
`parity_features` run a workload's model through the shared loops of workloads/common/loop.py.
`Training` and `FeatureExtraction` are PyTorch's side of the scaffold every workload file fills in
(workloads/common/scaffold.py). The cell's mode (workloads/common/modes.py) is eager (the default)
or compiled: `policy.compiled(model)` wraps the model in torch.compile (inductor, static shapes),
so its forward and backward run as fused generated kernels; the optimizer's update stays PyTorch's
own (fused where it has the kernel). Compilation happens on the first call, so in the first
training step or the warm-up pass (FAIRNESS.md: warm-up-apart), with its caches in the cell's own
temporary folder (never the home folder: every cell compiles cold, as a fresh machine would);
inductor's own setup, the same for every model, is timed apart before the model is built
(workloads/common/inductor.py, set_up).
"""
from __future__ import annotations

import collections
import contextlib

import numpy as np
import torch

from workloads.common import inductor, loop, modes, precision as precision_rules, scaffold, threads as thread_rules
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


# --- device and precision -------------------------------------------------------------------------

class TorchPolicy(Policy):
    """The device (a torch.device) and what the cell's precision asks of PyTorch."""

    def __init__(self, device: torch.device, precision: str, memory_format=torch.contiguous_format,
                 compile_with=None):
        super().__init__(device, precision)
        # the compiled mode's torch.compile backend (inductor, counting its graphs); None: eager
        self.compile_with = compile_with
        self.autocast_dtype = _AUTOCAST_DTYPES.get(precision)  # None: no autocast (fp32, tf32)
        # PyTorch's fused SGD and Adam kernels (CUDA and, since 2.4, CPU): one kernel updates every
        # parameter, where the default runs a for-loop of per-parameter ops on the CPU and
        # multi-tensor "foreach" ops on CUDA (FAIRNESS.md: fused optimizers). They also check fp16
        # overflow on the device, so no step waits for the host.
        self.fused_optimizer = device.type in _fused_optimizer_devices()
        # torch.channels_last (option channels_last=on, convolutional models only) or contiguous (NCHW)
        self.memory_format = memory_format

    def batch(self, array: np.ndarray) -> torch.Tensor:  # phrase: device-placement
        """An input batch on the device, in the policy's memory format when it is an image batch."""
        tensor = to_device(array, self.device)
        if tensor.dim() == 4 and self.memory_format is not torch.contiguous_format:
            tensor = tensor.contiguous(memory_format=self.memory_format)  # NCHW values, NHWC in memory
        return tensor

    def compiled(self, model: torch.nn.Module) -> torch.nn.Module:  # phrase: compile-step
        """``model`` as the cell's mode runs it: itself (eager), or torch.compile'd (compiled)."""
        if self.compile_with is None:
            return model
        return torch.compile(model, backend=self.compile_with, dynamic=False)

    def autocast(self):  # phrase: autocast
        """Mixed precision through PyTorch's own autocast; fp32 and tf32 run without it."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for fp16 only; a disabled scaler passes everything through."""
        return torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")


def _fused_optimizer_devices() -> tuple:
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
        return tuple(_get_fused_kernels_supported_devices())
    except ImportError:  # an older PyTorch: fused kernels on CUDA only
        return ("cuda",)


def select_device(run: Run, *, convolutions: bool = True) -> TorchPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches.

    ``convolutions``: whether the workload's model has any: the channels_last option lays out
    convolutions, so a model without one (the GRU) refuses it as unsupported, as Paddle does."""
    cuda_available = torch.cuda.is_available()
    if run.requested_device == "cuda" and not cuda_available:
        if torch.version.cuda is None:  # e.g. a CPU wheel from a wheelhouse matched torch==X in a CUDA variant
            raise Unsupported(f"this PyTorch ({torch.__version__}) is a CPU-only build: it cannot use a GPU")
        raise Unsupported("no CUDA GPU visible to PyTorch on this host")
    device = torch.device("cuda" if cuda_available and run.requested_device != "cpu" else "cpu")
    precision = run.precision
    precision_rules.check("pytorch", precision, device.type,
                     torch.cuda.get_device_capability(device) if device.type == "cuda" else None)
    # fp32 means true fp32: TF32 tensor-core math only when asked for (FAIRNESS.md: true-precision).
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True  # cuDNN autotuning (FAIRNESS.md: autotune); its cost lands in the first step
    channels_last = run.option("channels_last") == "on"
    if channels_last and not convolutions:
        raise Unsupported("channels_last lays out convolutions (NHWC); the GRU model has none")
    memory_format = torch.channels_last if channels_last and convolutions else torch.contiguous_format
    compile_with, compiler = (_inductor(run), inductor.compile_caches(device.type)) if run.mode == modes.COMPILED \
        else (None, "")
    torch.manual_seed(SEED)  # phrase: seeding
    thread_rules.set_torch_threads(torch, run)
    if device.type == "cuda":
        run.declare_sync(torch.cuda.synchronize, "torch.cuda.synchronize: every kernel queued on the GPU's streams")  # phrase: device-sync
    else:
        run.declare_sync(no_wait, "nothing: PyTorch's CPU operators run in the calling thread and return finished")
    run.set_provenance(
        framework_version=torch.__version__,
        device=device.type,
        cuda_version=torch.version.cuda if device.type == "cuda" else None,
        cudnn_version=str(torch.backends.cudnn.version()) if device.type == "cuda" else None,
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        extras={"layout": _layout(channels_last, convolutions), "cudnn_benchmark": "true",
                "tf32": _tf32_reported(device),
                "autocast": str(_AUTOCAST_DTYPES.get(precision, "none")),
                **({"compiler": compiler} if compiler else {})},
    )
    if compile_with is not None:
        inductor.set_up(run, torch, device.type)
    return TorchPolicy(device, precision, memory_format, compile_with)


def _inductor(run: Run):
    """torch.compile's inductor backend, counting each graph it compiles in ``samples.traces``
    (workloads/common/inductor.py)."""
    from torch._inductor.compile_fx import compile_fx

    return inductor.counting_backend(run, compile_fx, context=_grad_mode)


def _grad_mode(example_inputs) -> str:
    """The autograd mode a graph is compiled for, part of its identity: a model without dropout (the
    GRU) has the same graph code in training and in evaluation, which TorchDynamo compiles again,
    rightly, for the other grad mode or for inference tensors (its guards): no recompilation."""
    inference = any(isinstance(item, torch.Tensor) and item.is_inference() for item in example_inputs)
    return ("grad" if torch.is_grad_enabled() else "no grad") + (", inference tensors" if inference else "")


def _layout(channels_last: bool, convolutions: bool) -> str:
    if not convolutions:
        return "TNC"
    return "NHWC (channels_last)" if channels_last else "NCHW"


def _tf32_reported(device: torch.device) -> str:
    """What PyTorch reports about TF32 after select_device set it (read back, not assumed)."""
    if device.type != "cuda":
        return "n/a (CPU)"
    try:
        return (f"matmul {str(torch.backends.cuda.matmul.allow_tf32).lower()}, cudnn "
                f"{str(torch.backends.cudnn.allow_tf32).lower()} (torch.backends.cuda.matmul.allow_tf32, "
                f"torch.backends.cudnn.allow_tf32); float32 matmul precision {torch.get_float32_matmul_precision()}")
    except RuntimeError as error:  # e.g. PyTorch refusing a mix of its legacy and new TF32 switches
        return f"unreadable ({error})"


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A numpy batch on the device; integer arrays (labels, token ids) as int64, the index type of
    PyTorch's embeddings and losses."""
    tensor = torch.from_numpy(array).to(device, non_blocking=True)
    return tensor if tensor.is_floating_point() else tensor.long()


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _peak_device_memory_mb(device: torch.device):
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


# --- the GRU layer ---------------------------------------------------------------------------------

def gru_layer(policy: TorchPolicy, input_size: int, hidden_size: int) -> torch.nn.Module:
    """The GRU layer as the cell's mode runs it (time-major): nn.GRU in eager mode (cuDNN's fused
    kernel on a GPU, FAIRNESS.md: fused-rnn), StepCompiledGRU in compiled mode (modes-compared)."""
    if policy.compile_with is None:
        return torch.nn.GRU(input_size, hidden_size, num_layers=1, batch_first=False)
    return StepCompiledGRU(input_size, hidden_size, policy.compile_with)


class StepCompiledGRU(torch.nn.Module):
    """The compiled mode's GRU: nn.GRU's parameters (its names, shapes and initialisation, so the
    canonical weights load as into nn.GRU), run as a Python loop over the time steps of one
    torch.compile'd GRU step, the input projections of every step in one matmul before it.
    Why not nn.GRU under torch.compile (measured with PyTorch 2.13 on the CPU): TorchDynamo refuses
    an nn.GRU module (an isinstance check, hence no subclass here), its allow_rnn switch unrolls the
    150 time steps into one graph (minutes of compilation), and inductor fails on the scan operator;
    one step compiles in seconds. The loop is opaque to TorchDynamo (torch.compiler.disable), so the
    model-level compile does not unroll it either: the embedding and dense layers around it are
    compiled graphs of their own."""

    def __init__(self, input_size: int, hidden_size: int, compile_with):
        super().__init__()
        reference = torch.nn.GRU(input_size, hidden_size)  # draws the same initial values as eager's
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            setattr(self, name, getattr(reference, name))
        self.step = torch.compile(_gru_step, backend=compile_with, dynamic=False)
        # register_forward_hook's, run by forward itself (an OrderedDict: the handle holds a weak reference)
        self._own_forward_hooks = collections.OrderedDict()

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """nn.Module's contract (hook(module, inputs, outputs), whose returned value, if any, replaces
        the outputs; a handle whose remove() drops it), but the hook runs at the end of this module's
        own forward, which TorchDynamo leaves alone: a hook that nn.Module.__call__ ran would be
        traced into the compiled model around this layer (graph breaks, and the hook's removal a
        recompilation)."""
        if prepend or with_kwargs or always_call:
            raise NotImplementedError("StepCompiledGRU runs plain forward hooks only")
        handle = torch.utils.hooks.RemovableHandle(self._own_forward_hooks)
        self._own_forward_hooks[handle.id] = hook
        return handle

    @torch.compiler.disable
    def forward(self, inputs: torch.Tensor):  # inputs: (time, batch, features)
        projected = torch.nn.functional.linear(inputs, self.weight_ih_l0, self.bias_ih_l0)
        # the initial state requires a gradient whenever the later ones will, so that the step is
        # compiled once per grad mode, not again from the second step (a TorchDynamo guard)
        hidden = inputs.new_zeros(inputs.shape[1], self.weight_hh_l0.shape[1]).requires_grad_(
            torch.is_grad_enabled() and (projected.requires_grad or self.weight_hh_l0.requires_grad))
        states = []
        for step_inputs in projected.unbind(0):
            hidden = self.step(step_inputs, hidden, self.weight_hh_l0, self.bias_hh_l0)
            states.append(hidden)
        outputs = (torch.stack(states), hidden.unsqueeze(0))  # as nn.GRU's: every step's state, the last
        for hook in list(self._own_forward_hooks.values()):
            replaced = hook(self, (inputs,), outputs)
            outputs = outputs if replaced is None else replaced  # nn.Module's: a returned value replaces them
        return outputs


def _gru_step(projected, hidden, weight_hh, bias_hh):
    """One GRU step in cuDNN's reset-after form, gates r, z, n, in ATen's GRU cell's arithmetic."""
    reset_i, update_i, new_i = projected.chunk(3, 1)
    reset_h, update_h, new_h = torch.nn.functional.linear(hidden, weight_hh, bias_hh).chunk(3, 1)
    reset, update = torch.sigmoid(reset_i + reset_h), torch.sigmoid(update_i + update_h)
    new = torch.tanh(new_i + reset * new_h)
    return (hidden - new) * update + new


# --- training -------------------------------------------------------------------------------------

def _train_step(policy: TorchPolicy, model, optimizer, loss_function):
    """One optimizer step on a numpy batch, under the policy's autocast and loss scaler."""
    scaler = policy.grad_scaler()

    def step(x: np.ndarray, y: np.ndarray) -> torch.Tensor:  # phrase: train-step
        inputs, labels = policy.batch(x), to_device(y, policy.device)
        optimizer.zero_grad(set_to_none=True)
        with policy.autocast():
            loss = loss_function(model(inputs), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # stays on the device: no host sync per step
    return step


def train_and_evaluate(run: Run, policy: TorchPolicy, model, optimizer, loss_function, data) -> None:
    """Train `model` on `data` with `optimizer` and `loss_function`, then measure its test accuracy."""
    with run.phase("model_build"):  # added to the workload's model_build
        step = _train_step(policy, policy.compiled(model), optimizer, loss_function)
    run.set_parameter_count(parameter_count(model))
    run.set_provenance(extras={"optimizer": describe_optimizer(optimizer, policy.device)})
    model.train()
    loop.train(run, data, step)  # the loss is read (float) once per epoch
    # phrase: eval-mode
    model.eval()  # dropout off (FAIRNESS.md: eval-mode)
    evaluated = policy.compiled(model)  # compiled again in eval mode: dropout out of the graph

    def count_correct(x: np.ndarray, y: np.ndarray) -> torch.Tensor:
        predictions = evaluated(policy.batch(x)).argmax(dim=1)
        return (predictions == to_device(y, policy.device)).sum()  # summed on the device

    with torch.inference_mode(), policy.autocast():
        loop.evaluate(run, data, count_correct)
    # end phrase
    run.record_peak_device_memory(_peak_device_memory_mb(policy.device))


def parity_steps(run: Run, policy: TorchPolicy, model, optimizer, loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity)."""
    run.set_parameter_count(parameter_count(model))
    model.eval()  # dropout off, for the steps too: dropout is random and frameworks' generators differ
    compiled = policy.compiled(model)  # parity holds in every mode: the compiled model's outputs are checked

    def forward(x: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return compiled(policy.batch(x))

    return loop.parity_outputs(forward, _train_step(policy, compiled, optimizer, loss_function), batch,
                               to_numpy=lambda logits: logits.cpu().numpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: TorchPolicy, model, images: np.ndarray) -> None:
    """The warm pass, then the timed forward-only pass, with no gradients (FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(model))
    model.eval()  # batch norm on its running statistics
    forward = policy.compiled(model)  # compiled in the warm-up pass, before the timed one
    with torch.inference_mode(), policy.autocast():
        loop.infer(run, images, lambda batch: forward(policy.batch(batch)), to_host=to_host)
    run.record_peak_device_memory(_peak_device_memory_mb(policy.device))


def to_host(features: torch.Tensor) -> np.ndarray:
    """The features as a numpy array on the host (inside every timed batch: FAIRNESS.md, host-copy);
    bf16 goes through fp32 first, numpy having no bfloat16."""
    if features.dtype == torch.bfloat16:
        features = features.float()
    return features.cpu().numpy()


def parity_features(run: Run, policy: TorchPolicy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    with torch.inference_mode():
        return {"features": to_host(policy.compiled(model.eval())(policy.batch(batch["x"])))}


# --- what ran -------------------------------------------------------------------------------------

def describe_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> str:
    """Which implementation of the update runs (extras "optimizer"): fused, foreach or for-loop."""
    defaults = optimizer.defaults
    name = f"torch.optim.{type(optimizer).__name__}"
    if defaults.get("fused"):
        return f"{name}(fused=True): PyTorch's fused kernel, one per step for every parameter (fused, on {device.type})"
    if defaults.get("foreach") or (defaults.get("foreach") is None and device.type == "cuda"):
        return f"{name}(foreach): multi-tensor foreach ops (built-in op, not fused)"
    return f"{name}: a for-loop of per-parameter ops (written out by PyTorch; no fused kernel on {device.type})"


def watch_gru_kernel(run: Run, gru: torch.nn.Module) -> None:
    """Record which GRU kernel the first training step actually ran (extras "gru_kernel"), read from
    the autograd node that produced the GRU's output: cuDNN's fused kernel leaves CudnnRnnBackward0,
    ATen's native GRU (its CPU path) the StackBackward0 of its loop over the time steps, and the
    compiled mode's StepCompiledGRU the node of inductor's compiled step under its stack."""
    def hook(module, inputs, outputs):
        node = outputs[0].grad_fn
        if node is None:  # no autograd here (inference): the next training step tells
            return
        handle.remove()
        name, device = type(node).__name__, outputs[0].device.type
        steps = inputs[0].shape[0]  # time-major
        if isinstance(gru, StepCompiledGRU):
            step = type(node.next_functions[0][0]).__name__  # the last step's node, under the stack
            kernel = (f"compiled-step: a Python loop over {steps} time steps of one torch.compile'd (inductor) GRU "
                      f"step on {device}, the input projections in one matmul (autograd node {step})")
        elif "Cudnn" in name:
            kernel = f"cudnn: cuDNN's fused GRU through torch.nn.GRU (autograd node {name})"
        elif "Miopen" in name:
            kernel = f"miopen: MIOpen's fused GRU through torch.nn.GRU (autograd node {name})"
        elif "Mkldnn" in name:
            kernel = f"fused-cpu: oneDNN GRU through torch.nn.GRU (autograd node {name})"
        elif device == "cpu":
            kernel = (f"fused-cpu: ATen's native CPU GRU, one aten::gru call: a C++ loop over {steps} time steps "
                      f"with the input projections in one matmul (PyTorch has no oneDNN GRU; autograd node {name})")
        else:
            kernel = (f"aten-loop: ATen's native GRU on {device} without cuDNN, a C++ loop of per-step GRU cells "
                      f"(autograd node {name})")
        run.set_provenance(extras={"gru_kernel": kernel})

    handle = gru.register_forward_hook(hook)  # StepCompiledGRU's runs outside TorchDynamo


# --- the scaffold's PyTorch part (workloads/common/scaffold.py) ----------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A PyTorch training workload: its file gives build_model, load_canonical, make_optimizer (a
    torch.optim optimizer, fused where PyTorch has the kernel: policy.fused_optimizer) and
    loss_function (a loss module); the device policy and the loops are this module's."""

    def select_device(self, run: Run) -> TorchPolicy:
        return select_device(run)

    def train(self, run: Run, policy: TorchPolicy, model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: TorchPolicy, model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A PyTorch inference workload: its file gives build_model (in eval mode) and load_canonical."""

    def select_device(self, run: Run) -> TorchPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: TorchPolicy, model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: TorchPolicy, model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
