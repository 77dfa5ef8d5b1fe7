"""Keras 3's device policy: the device, precision and provenance switches, and what the model ran."""
from __future__ import annotations

import os

import keras
import numpy as np

from workloads.common import modes, precision as precision_rules
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED
from workloads.runtime.keras.backends import BACKEND, FACTS, selected_device
from workloads.runtime.keras.optimizers import describe_optimizer

_POLICIES = {"fp32": "float32", "tf32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


# --- device and precision -------------------------------------------------------------------------

class KerasPolicy(Policy):
    """``device`` is "cpu" or "cuda". ``data_format``: the convolution layout this backend runs
    best on this device (the models take NCHW input either way). ``dtype_policy``: Keras' own
    mixed-precision policy, set globally (fp16 gets a LossScaleOptimizer at compile)."""

    def __init__(self, device: str, precision: str, jit_compile: bool = False):
        super().__init__(device, precision)
        self.data_format = FACTS.data_format(device)
        self.dtype_policy = _POLICIES[precision]
        # compile()'s: XLA on JAX always, on TensorFlow in the compiled mode; torch.compile on torch in it
        self.jit_compile = jit_compile


def select_device(run: Run, *, recurrent: bool = False) -> KerasPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches.
    ``recurrent``: whether the model holds an RNN layer, which the compiled mode on torch refuses
    (backends.TORCH_COMPILED_RNN)."""
    compiled = run.mode == modes.COMPILED
    refused = FACTS.refuses_rnn(compiled) if recurrent else None
    if refused:
        raise Unsupported(refused)
    FACTS.set_threads(run)  # before the backend's runtime starts (TensorFlow's pools take their size then)
    has_gpu = bool(FACTS.gpus())
    if run.requested_device == "cuda" and not has_gpu:
        raise Unsupported(f"no CUDA GPU visible to Keras' {BACKEND} backend on this host")
    device = "cuda" if has_gpu and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    precision_rules.check("keras", precision, device, FACTS.capability() if device == "cuda" else None)
    FACTS.use(device)
    selected_device[0] = device
    # jit_compile: XLA in the compiled mode on TensorFlow (never Keras' "auto", which turns XLA on
    # whenever TensorFlow sees a GPU, even for a CPU cell), always on JAX; torch.compile in the compiled
    # mode on torch: recorded with the reason (and the compiler: inductor's, its caches in the cell's folder).
    jit_compile, xla = FACTS.xla(compiled)
    compiler = FACTS.compiler(device, compiled)
    policy = KerasPolicy(device, precision, jit_compile)
    if device == "cuda":
        FACTS.set_tf32(precision == "tf32")  # fp32 means true fp32
    run.declare_sync(*FACTS.device_sync(device))
    # Mixed precision through Keras' own policy (fp16 gets a LossScaleOptimizer at compile).
    keras.mixed_precision.set_dtype_policy(policy.dtype_policy)  # phrase: autocast
    keras.utils.set_random_seed(SEED)  # Python, numpy, the backend and Keras' seed generator  # phrase: seeding
    cuda_version, cudnn_version = FACTS.cuda_versions() if device == "cuda" else (None, None)
    run.set_provenance(
        framework_version=f"keras {keras.__version__} / {FACTS.name} {FACTS.version}",
        device=device,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        gpu_name=FACTS.gpu_name() if device == "cuda" else None,
        extras={"keras_backend": BACKEND, "layout": policy.data_format, "xla": xla,
                "dtype_policy": policy.dtype_policy, "tf32": _tf32_reported(device),
                "autotune": FACTS.autotune if device == "cuda" else "none (CPU)",
                **({"compiler": compiler} if compiler else {})},
    )
    FACTS.set_up_compiler(run, device, compiled)
    return policy


def _tf32_reported(device: str) -> str:
    """What the backend reports about TF32 after select_device set it (read back, not assumed)."""
    if device != "cuda":
        return "n/a (CPU)"
    override = os.environ.get("NVIDIA_TF32_OVERRIDE")
    return FACTS.tf32_reported() + (f"; NVIDIA_TF32_OVERRIDE={override}" if override is not None else "")


# --- model facts ----------------------------------------------------------------------------------

def parameter_count(model: keras.Model) -> int:
    """Trainable parameters, as PyTorch's parameters(): batch norm's moving statistics are state."""
    return int(sum(np.prod(weight.shape) for weight in model.trainable_weights))


def record_compiled(run: Run, policy: KerasPolicy, model: keras.Model) -> None:
    """What jit_compile ended as (Keras turns it off for a model with a layer XLA cannot compile,
    e.g. TensorFlow's cuDNN GRU), the step, and the optimizer's implementation."""
    jit_compile = bool(model.jit_compile)
    extras = {"jit_compile": str(jit_compile).lower()}
    if policy.jit_compile and not jit_compile:
        extras["xla"] = ("off: XLA was asked for, but Keras turned jit_compile off (a layer of this model "
                         "cannot be compiled by XLA, e.g. cuDNN's GRU)")
    if getattr(model, "optimizer", None) is not None:
        compiled = ("compiled by torch.compile in the first step, each graph counted (samples.traces)"
                    if BACKEND == "torch" else "traced once per input shape (samples.traces)")
        extras["train_step"] = ("Keras' train_function, loss kept on the device (TrainStep); "
                                + (compiled if compiles_steps(model)
                                   else "eager: train_step runs in Python every step, nothing is traced"))
        extras["optimizer"] = describe_optimizer(model.optimizer)
    run.set_provenance(extras=extras)


def compiles_steps(model: keras.Model) -> bool:
    """Whether Keras traces the model's steps (tf.function, jax.jit; torch.compile with jit_compile on
    torch) rather than running them eagerly."""
    return not model.run_eagerly and (BACKEND in ("tensorflow", "jax") or bool(model.jit_compile))


def count_traces(run: Run, model: keras.Model, step: str) -> None:
    """Count each trace of Keras' compiled ``train_step`` or ``predict_step`` with ``run.note_trace``.
    TensorFlow and JAX: the step is wrapped, and the wrapper's body runs only while tf.function or
    jax.jit traces (before Keras makes the function: it binds the step then). Torch: TorchDynamo
    would replay a Python side effect on every call, so inductor counts the graphs it compiles
    instead (the backend's compile_counted)."""
    if BACKEND == "torch":
        FACTS.compile_counted(run, model, step)
        return
    original = getattr(model, step)

    def counted(*args, **kwargs):
        run.note_trace(step)  # Python runs this only while tracing
        return original(*args, **kwargs)

    setattr(model, step, counted)


def record_peak_memory(run: Run, policy: KerasPolicy) -> None:
    if policy.device == "cuda":
        run.record_peak_device_memory(FACTS.peak_memory_mb())
