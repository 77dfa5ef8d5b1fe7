"""Keras 3's runtime: device, precision and provenance switches, and the one training, evaluation
and inference loop the three Keras workloads share.

One implementation serves three rows: `python -m workloads` sets KERAS_BACKEND to tensorflow, jax
or torch before `import keras`. Everything that differs between the backends (seeing a GPU,
synchronising it, TF32, the convolution layout, versions) is here; the workload files are pure
Keras. A workload hands this module its compiled model (the loss and optimizer are compile()'s,
the optimizers from `sgd_momentum` and `adam`: each backend's own built-in or fused op where one
computes PyTorch's update); the training step is Keras' own compiled `train_function` (see
TrainStep), traced once per input shape and counted (`run.note_trace`). `Training` and
`FeatureExtraction` are Keras' side of the scaffold every workload file fills in
(workloads/common/scaffold.py).
"""
from __future__ import annotations

import importlib
import os
import sys

import keras
import numpy as np

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED

BACKEND = keras.backend.backend()  # "tensorflow", "jax" or "torch"
_POLICIES = {"fp32": "float32", "tf32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


# --- per-backend facts ----------------------------------------------------------------------------

class _TensorFlow:
    name = "tensorflow"
    autotune = "cuDNN autotuning (TensorFlow's default, TF_CUDNN_USE_AUTOTUNE)"

    def __init__(self):
        import tensorflow
        self.tf, self.version = tensorflow, tensorflow.__version__

    def gpus(self):
        return self.tf.config.list_physical_devices("GPU")

    def use(self, device: str) -> None:
        gpus = self.gpus()
        try:  # both must come before the first op initialises the GPUs
            if device == "cpu" and gpus:
                self.tf.config.set_visible_devices([], "GPU")
            for gpu in gpus if device == "cuda" else []:
                self.tf.config.experimental.set_memory_growth(gpu, True)  # peak memory means something
        except RuntimeError as error:  # already initialised: pin ops to the device instead
            if device == "cpu":
                self.tf.device("/CPU:0").__enter__()
            print(f"note: {error}", file=sys.stderr)

    def capability(self) -> tuple[int, int]:
        return tuple(self.tf.config.experimental.get_device_details(self.gpus()[0])["compute_capability"])

    def gpu_name(self) -> str:
        return self.tf.config.experimental.get_device_details(self.gpus()[0]).get("device_name", "GPU")

    def set_tf32(self, enabled: bool) -> None:
        # TensorFlow turns TF32 on by default on Ampere and newer: fp32 must switch it off.
        self.tf.config.experimental.enable_tensor_float_32_execution(enabled)

    def tf32_reported(self) -> str:
        enabled = self.tf.config.experimental.tensor_float_32_execution_enabled()
        return f"{'on' if enabled else 'off'} (tf.config.experimental.tensor_float_32_execution_enabled() = {enabled})"

    def xla(self, option: str) -> tuple[bool, str]:
        if option == "on":
            return True, "on: jit_compile=True, every train and predict step one XLA cluster (option xla=on)"
        return False, "off: jit_compile=False, tf.function graphs without XLA (option xla=off, the default)"

    def cuda_versions(self) -> tuple[str | None, str | None]:
        info = self.tf.sysconfig.get_build_info()
        return info.get("cuda_version"), info.get("cudnn_version")

    def sync(self) -> None:
        self.tf.test.experimental.sync_devices()  # waits for every GPU stream

    def peak_memory_mb(self) -> float:
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20

    def threads(self) -> str:
        return str(self.tf.config.threading.get_intra_op_parallelism_threads() or "auto")

    def data_format(self, device: str) -> str:
        # cuDNN's native NCHW on a GPU (FAIRNESS.md: layouts); TensorFlow's CPU kernels only run NHWC.
        return "channels_first" if device == "cuda" else "channels_last"


class _Jax:
    name = "jax"
    autotune = "XLA's GPU autotuning (its default)"

    def __init__(self):
        import jax
        self.jax, self.version = jax, jax.__version__

    def gpus(self):
        try:
            return self.jax.devices("gpu")
        except RuntimeError:  # no GPU plugin or no GPU
            return []

    def use(self, device: str) -> None:
        platform = "gpu" if device == "cuda" else "cpu"
        self.jax.config.update("jax_default_device", self.jax.devices(platform)[0])

    def capability(self) -> tuple[int, int]:
        major, _, minor = str(self.gpus()[0].compute_capability).partition(".")
        return int(major), int(minor or 0)

    def gpu_name(self) -> str:
        return self.gpus()[0].device_kind

    def set_tf32(self, enabled: bool) -> None:
        # XLA's default fp32 matmul/conv precision on a GPU may use TF32; "highest" is true fp32.
        self.jax.config.update("jax_default_matmul_precision", "tensorfloat32" if enabled else "highest")

    def tf32_reported(self) -> str:
        precision = self.jax.config.jax_default_matmul_precision
        return f"{'on' if precision == 'tensorfloat32' else 'off'} (jax_default_matmul_precision = {precision})"

    def xla(self, option: str) -> tuple[bool, str]:
        return True, "always: Keras' JAX backend compiles every train and predict step with jax.jit (XLA); no option"

    def cuda_versions(self) -> tuple[str | None, str | None]:
        try:
            from jax._src.lib import cuda_versions  # present with the CUDA plugin only
            return (str(cuda_versions.cuda_runtime_get_version()), str(cuda_versions.cudnn_get_version()))
        except Exception:  # noqa: BLE001 - provenance only
            return None, None

    def sync(self) -> None:
        # JAX has no device-wide synchronise: block on what the last compiled step returned.
        if _last_outputs[0] is not None:
            self.jax.block_until_ready(_last_outputs[0])

    def peak_memory_mb(self) -> float | None:
        stats = self.gpus()[0].memory_stats() or {}
        return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None

    def threads(self) -> str:
        return "auto"

    def data_format(self, device: str) -> str:
        return "channels_last"  # JAX's convention; XLA chooses the physical GPU layout itself


class _Torch:
    name = "torch"
    autotune = "torch.backends.cudnn.benchmark = True"

    def __init__(self):
        import torch
        self.torch, self.version = torch, torch.__version__

    def gpus(self):
        return list(range(self.torch.cuda.device_count())) if self.torch.cuda.is_available() else []

    def use(self, device: str) -> None:
        # Keras' torch backend puts every tensor on its default device ("cuda" when one exists);
        # a device scope entered for the rest of this one-cell process overrides it.
        keras.device("cuda:0" if device == "cuda" else "cpu").__enter__()
        self.torch.backends.cudnn.benchmark = True  # cuDNN autotuning (FAIRNESS.md: autotune)

    def capability(self) -> tuple[int, int]:
        return self.torch.cuda.get_device_capability(0)

    def gpu_name(self) -> str:
        return self.torch.cuda.get_device_name(0)

    def set_tf32(self, enabled: bool) -> None:
        self.torch.backends.cuda.matmul.allow_tf32 = enabled
        self.torch.backends.cudnn.allow_tf32 = enabled  # PyTorch's default is True for convolutions

    def tf32_reported(self) -> str:
        backends = self.torch.backends
        try:
            return (f"matmul {str(backends.cuda.matmul.allow_tf32).lower()}, cudnn "
                    f"{str(backends.cudnn.allow_tf32).lower()} (torch.backends.cuda.matmul.allow_tf32, "
                    f"torch.backends.cudnn.allow_tf32)")
        except RuntimeError as error:  # e.g. PyTorch refusing a mix of its legacy and new TF32 switches
            return f"unreadable ({error})"

    def xla(self, option: str) -> tuple[bool, str]:
        return False, ("n/a: jit_compile=False, eager (with the torch backend jit_compile would mean torch.compile, "
                       "which the PyTorch row does not use either; Keras' own 'auto' leaves it off)")

    def cuda_versions(self) -> tuple[str | None, str | None]:
        return self.torch.version.cuda, str(self.torch.backends.cudnn.version())

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def peak_memory_mb(self) -> float:
        return self.torch.cuda.max_memory_allocated() / 2**20

    def threads(self) -> str:
        return str(self.torch.get_num_threads())

    def data_format(self, device: str) -> str:
        # torch convolutions are NCHW; with channels_last Keras transposes around every layer.
        return "channels_first"


_BACKEND = {"tensorflow": _TensorFlow, "jax": _Jax, "torch": _Torch}[BACKEND]()
_last_outputs: list = [None]  # what the last JAX step returned, for run.sync
_DEVICE: list = ["cpu"]  # the device select_device chose ("cpu" or "cuda")


# --- device and precision -------------------------------------------------------------------------

class KerasPolicy(Policy):
    """``device`` is "cpu" or "cuda". ``data_format``: the convolution layout this backend runs
    best on this device (the models take NCHW input either way). ``dtype_policy``: Keras' own
    mixed-precision policy, set globally (fp16 gets a LossScaleOptimizer at compile)."""

    def __init__(self, device: str, precision: str, jit_compile: bool = False):
        super().__init__(device, precision)
        self.data_format = _BACKEND.data_format(device)
        self.dtype_policy = _POLICIES[precision]
        self.jit_compile = jit_compile  # compile()'s: XLA on JAX always, on TensorFlow with option xla=on


def select_device(run: Run) -> KerasPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    has_gpu = bool(_BACKEND.gpus())
    if run.requested_device == "cuda" and not has_gpu:
        raise Unsupported(f"no CUDA GPU visible to Keras' {BACKEND} backend on this host")
    device = "cuda" if has_gpu and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    precision_rules.check("keras", precision, device, _BACKEND.capability() if device == "cuda" else None)
    _BACKEND.use(device)
    _DEVICE[0] = device
    # XLA: the xla option on TensorFlow (never Keras' "auto", which turns XLA on whenever TensorFlow
    # sees a GPU, even for a CPU cell), always on JAX, never on torch: recorded with the reason.
    jit_compile, xla = _BACKEND.xla(run.options.get("xla", "off"))
    policy = KerasPolicy(device, precision, jit_compile)
    if device == "cuda":
        _BACKEND.set_tf32(precision == "tf32")  # fp32 means true fp32
        run.sync = _BACKEND.sync
    elif BACKEND == "jax":
        run.sync = _BACKEND.sync  # JAX dispatches asynchronously on the CPU too
    # Mixed precision through Keras' own policy (fp16 gets a LossScaleOptimizer at compile).
    keras.mixed_precision.set_dtype_policy(policy.dtype_policy)
    keras.utils.set_random_seed(SEED)  # Python, numpy, the backend and Keras' seed generator
    cuda_version, cudnn_version = _BACKEND.cuda_versions() if device == "cuda" else (None, None)
    run.set_provenance(
        framework_version=f"keras {keras.__version__} / {_BACKEND.name} {_BACKEND.version}",
        device=device,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        gpu_name=_BACKEND.gpu_name() if device == "cuda" else None,
        extras={"keras_backend": BACKEND, "layout": policy.data_format, "xla": xla,
                "dtype_policy": policy.dtype_policy, "tf32": _tf32_reported(device),
                "threads": _BACKEND.threads(), "autotune": _BACKEND.autotune if device == "cuda" else "none (CPU)"},
    )
    return policy


def _tf32_reported(device: str) -> str:
    """What the backend reports about TF32 after select_device set it (read back, not assumed)."""
    if device != "cuda":
        return "n/a (CPU)"
    override = os.environ.get("NVIDIA_TF32_OVERRIDE")
    return _BACKEND.tf32_reported() + (f"; NVIDIA_TF32_OVERRIDE={override}" if override is not None else "")


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
        extras["train_step"] = ("Keras' train_function, loss kept on the device (TrainStep); "
                                + ("traced once per input shape (samples.traces)" if _compiles_steps(model)
                                   else "eager: train_step runs in Python every step, nothing is traced"))
        extras["optimizer"] = describe_optimizer(model.optimizer)
    run.set_provenance(extras=extras)


def _compiles_steps(model: keras.Model) -> bool:
    """Whether Keras traces the model's steps (tf.function, jax.jit) rather than running them eagerly."""
    return BACKEND in ("tensorflow", "jax") and not model.run_eagerly


def _count_traces(run: Run, model: keras.Model, step: str) -> None:
    """Wrap the model's ``train_step`` or ``predict_step`` so that each trace of Keras' compiled
    function calls ``run.note_trace``: the wrapper's body runs only while tf.function or jax.jit
    traces. Before Keras makes the function (it binds the step then)."""
    original = getattr(model, step)

    def counted(*args, **kwargs):
        run.note_trace(step)  # Python runs this only while tracing
        return original(*args, **kwargs)

    setattr(model, step, counted)


def record_peak_memory(run: Run, policy: KerasPolicy) -> None:
    if policy.device == "cuda":
        run.record_peak_device_memory(_BACKEND.peak_memory_mb())


def dense_gradient(gradient):
    """A dense gradient: TensorFlow's IndexedSlices (an embedding's) summed into a tensor, else as is."""
    if BACKEND == "tensorflow" and isinstance(gradient, _BACKEND.tf.IndexedSlices):
        return _BACKEND.tf.convert_to_tensor(gradient)  # sums the slices of repeated indices
    return gradient


# --- optimizers -----------------------------------------------------------------------------------
#
# The same update as the PyTorch row, through each backend's own built-in or fused op where one
# computes it (FAIRNESS.md: fused optimizers), else written out, and recorded (extras "optimizer"):
#
#               SGD, plain momentum                          Adam, PyTorch's epsilon form
#   tensorflow  tf.raw_ops.ResourceApplyKerasMomentum        tf.raw_ops.ResourceApplyAdam, epsilon*sqrt(1-b2^t)
#   torch       torch.optim.sgd.sgd(fused=True)              torch.optim.adam.adam(fused=True)
#   jax         Keras' SGD in Keras ops                      written out in Keras ops (_WrittenOutAdam)
#
# On JAX both are Keras ops inside the one jax.jit-compiled train step, which XLA fuses; JAX has no
# optimizer ops of its own to call.

def sgd_momentum(learning_rate: float, momentum: float) -> keras.optimizers.Optimizer:
    """SGD with plain momentum. Keras' form v = m*v - lr*g, w += v (TensorFlow's op computes it)
    equals PyTorch's v = m*v + g, w -= lr*v at a constant learning rate."""
    cls = {"tensorflow": _tensorflow_sgd, "torch": _torch_sgd}.get(BACKEND, lambda: keras.optimizers.SGD)()
    return cls(learning_rate=learning_rate, momentum=momentum)


def adam(learning_rate: float, beta_1: float, beta_2: float, epsilon: float) -> keras.optimizers.Optimizer:
    """Adam with epsilon added to sqrt(v-hat), as PyTorch and the Adam paper's Algorithm 1 (Keras'
    own adds it to sqrt(v): in effect eps/sqrt(1-b2^t), 32x larger at step 1), with a dense
    gradient (see _WrittenOutAdam)."""
    cls = {"tensorflow": _tensorflow_adam, "torch": _torch_adam}.get(BACKEND, lambda: _WrittenOutAdam)()
    return cls(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


def describe_optimizer(optimizer) -> str:
    """What implements the update (extras "optimizer"): "fused", "built-in op" or "written out"."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # fp16: under Keras' LossScaleOptimizer
    description = getattr(type(inner), "DESCRIPTION", None)
    if description:
        return description
    if BACKEND == "jax":
        return (f"Keras' {type(inner).__name__} in Keras ops, XLA-fused inside the jax.jit-compiled train step "
                f"(JAX has no optimizer op to call)")
    return f"written out: Keras' {type(inner).__name__} in Keras ops"


class _WrittenOutAdam(keras.optimizers.Adam):
    """Keras' Adam with epsilon added to sqrt(v-hat), as the Adam paper's Algorithm 1 and PyTorch.

    Keras' own update, w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v) + eps), is the paper's
    "efficient" reordering, whose epsilon is in effect eps/sqrt(1-b2^t): 32x larger at step 1.
    The embedding's gradient is made dense first: on TensorFlow it arrives as IndexedSlices, one
    slice per token occurrence, and Keras' ops.square squares those slices before they are summed,
    so a token seen twice in a batch would get a wrong second moment.
    """

    DESCRIPTION = ("written out: Keras ops in PyTorch's epsilon form, about 10 per variable, XLA-fused inside the "
                   "jax.jit-compiled train step (JAX has no Adam op; Keras' own Adam adds epsilon to sqrt(v))"
                   if BACKEND == "jax" else
                   "written out: Keras ops in PyTorch's epsilon form, about 10 per variable")

    def update_step(self, gradient, variable, learning_rate):
        from keras import ops

        dtype = variable.dtype
        gradient = ops.cast(dense_gradient(gradient), dtype)
        step = ops.cast(self.iterations + 1, dtype)
        correction1 = 1 - ops.power(ops.cast(self.beta_1, dtype), step)
        correction2 = 1 - ops.power(ops.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(correction2)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, ops.cast(learning_rate, dtype) / correction1),
                                             denominator))


def _tensorflow_sgd():
    tf = _BACKEND.tf

    class SGD(keras.optimizers.SGD):
        DESCRIPTION = ("tf.raw_ops.ResourceApplyKerasMomentum: TensorFlow's built-in momentum op, one per variable "
                       "(Keras' form v = m*v - lr*g, w += v)")

        def update_step(self, gradient, variable, learning_rate):
            if self.momentum == 0 or self.nesterov:
                return super().update_step(gradient, variable, learning_rate)
            dtype = variable.dtype
            tf.raw_ops.ResourceApplyKerasMomentum(
                var=variable.handle, accum=self.momentums[self._get_variable_index(variable)].handle,
                lr=tf.cast(learning_rate, dtype), grad=tf.cast(dense_gradient(gradient), dtype),
                momentum=tf.cast(self.momentum, dtype), use_locking=False, use_nesterov=False)

    return SGD


def _tensorflow_adam():
    tf = _BACKEND.tf

    class Adam(keras.optimizers.Adam):
        """TensorFlow's ResourceApplyAdam computes Keras' form, w -= lr*sqrt(1-b2^t)/(1-b1^t) *
        m/(sqrt(v) + eps'); with eps' = eps*sqrt(1-b2^t), given afresh each step, that is exactly
        PyTorch's w -= lr/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps). The gradient is made dense first
        (the embedding's IndexedSlices summed: see _WrittenOutAdam)."""

        DESCRIPTION = ("tf.raw_ops.ResourceApplyAdam: TensorFlow's built-in Adam op, one per variable, epsilon "
                       "given as eps*sqrt(1-beta2^t) each step, which is PyTorch's epsilon form")

        def update_step(self, gradient, variable, learning_rate):
            dtype = variable.dtype
            index = self._get_variable_index(variable)
            step = tf.cast(self.iterations + 1, dtype)
            beta1_power = tf.pow(tf.cast(self.beta_1, dtype), step)
            beta2_power = tf.pow(tf.cast(self.beta_2, dtype), step)
            tf.raw_ops.ResourceApplyAdam(
                var=variable.handle, m=self._momentums[index].handle, v=self._velocities[index].handle,
                beta1_power=beta1_power, beta2_power=beta2_power, lr=tf.cast(learning_rate, dtype),
                beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
                epsilon=tf.cast(self.epsilon, dtype) * tf.sqrt(1 - beta2_power),
                grad=tf.cast(dense_gradient(gradient), dtype), use_locking=False, use_nesterov=False)

    return Adam


def _torch_update_kind() -> tuple[bool, str]:
    """(fused, how): PyTorch's fused optimizer kernels where this device has them, else foreach."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
        devices = _get_fused_kernels_supported_devices()
    except ImportError:
        devices = ["cuda"]
    device = _DEVICE[0]  # select_device's choice
    if device in devices:
        return True, f"fused=True): PyTorch's fused kernel, one per step for every variable (fused, on {device}"
    return False, f"foreach=True): PyTorch's multi-tensor ops (built-in op; no fused kernel on {device}"


def _torch_sgd():
    import torch
    from keras.src.backend.torch.optimizers.torch_parallel_optimizer import TorchParallelOptimizer
    from torch.optim import sgd as functional_sgd

    fused, words = _torch_update_kind()

    class SGD(TorchParallelOptimizer, keras.optimizers.SGD):
        """PyTorch's own SGD kernel (the PyTorch row's) on the Keras variables; the momentum buffer
        then holds PyTorch's v (Keras' own holds -lr*v), which gives the same weights."""

        DESCRIPTION = f"torch.optim.sgd.sgd({words}; the PyTorch row's own kernel)"

        def __init__(self, learning_rate, **kwargs):
            super().__init__(learning_rate=learning_rate, **kwargs)
            self._constant_rate = float(learning_rate)  # no schedule: no device read per step

        def _parallel_update_step(self, grads, variables, learning_rate):
            if self.momentum == 0 or self.nesterov:
                raise NotImplementedError("the benchmark's SGD has plain momentum")
            buffers = [self.momentums[self._get_variable_index(variable)].value for variable in variables]
            with torch.no_grad():
                functional_sgd.sgd([variable.value for variable in variables], list(grads), buffers,
                                   fused=fused or None, foreach=None if fused else True, weight_decay=0.0,
                                   momentum=self.momentum, lr=self._constant_rate, dampening=0.0,
                                   nesterov=False, maximize=False)

    return SGD


def _torch_adam():
    import torch
    from keras.src.backend.torch.optimizers.torch_parallel_optimizer import TorchParallelOptimizer
    from torch.optim import adam as functional_adam

    fused, words = _torch_update_kind()

    class Adam(TorchParallelOptimizer, keras.optimizers.Adam):
        """PyTorch's own Adam kernel (the PyTorch row's, PyTorch's epsilon form) on the Keras
        variables; its step counts are PyTorch's per-parameter tensors (they follow iterations)."""

        DESCRIPTION = f"torch.optim.adam.adam({words}; the PyTorch row's own kernel, PyTorch's epsilon form)"

        def __init__(self, learning_rate, **kwargs):
            super().__init__(learning_rate=learning_rate, **kwargs)
            self._constant_rate = float(learning_rate)  # no schedule: no device read per step

        def build(self, variables):
            super().build(variables)
            self._steps = [torch.zeros((), dtype=torch.float32, device=variable.value.device) for variable in variables]

        def _parallel_update_step(self, grads, variables, learning_rate):
            index = [self._get_variable_index(variable) for variable in variables]
            with torch.no_grad():
                functional_adam.adam([variable.value for variable in variables], list(grads),
                                     [self._momentums[i].value for i in index],
                                     [self._velocities[i].value for i in index],
                                     [], [self._steps[i] for i in index], fused=fused or None,
                                     foreach=None if fused else True, amsgrad=False, beta1=self.beta_1,
                                     beta2=self.beta_2, lr=self._constant_rate, weight_decay=0.0, eps=self.epsilon,
                                     maximize=False)

    return Adam


# --- which GRU kernel ran -------------------------------------------------------------------------

class _GRUKernelWatch:
    """Records, in extras "gru_kernel", what Keras' GRU layer actually ran. keras.layers.GRU asks
    the backend's ``gru`` for its fast path and falls back to its generic RNN loop when that raises
    NotImplementedError; the torch backend's ``gru`` itself falls back to a per-step Python loop,
    silently, when its cuDNN call raises. Thin wrappers around those functions (they call the
    originals unchanged) see which path returned, and the error that caused a fallback."""

    def __init__(self):
        self.run, self.seen, self.error = None, [], None

    def note(self, kernel: str) -> None:
        if self.run is not None and kernel not in self.seen:  # several: each in the order it first ran
            self.seen.append(kernel)
            self.run.set_provenance(extras={"gru_kernel": " | then: ".join(self.seen)})

    def take_error(self, otherwise: str) -> str:
        error, self.error = self.error, None
        return f"cuDNN path raised {error}" if error else otherwise


_GRU_WATCH: list = []  # the one watch, once its wrappers are installed


def watch_gru_kernel(run: Run) -> None:
    """Record which GRU kernel runs from now on into ``run``'s extras (install the wrappers once)."""
    if not _GRU_WATCH:
        _GRU_WATCH.append(_install_gru_watch())
    watch = _GRU_WATCH[0]
    watch.run, watch.seen, watch.error = run, [], None


def _install_gru_watch() -> _GRUKernelWatch:
    import keras.src.backend as backend_module

    watch = _GRUKernelWatch()
    fast_path = backend_module.gru
    no_gpu = "no GPU for cuDNN here"

    def gru(inputs, *args, **kwargs):
        steps = inputs.shape[1]
        try:
            result = fast_path(inputs, *args, **kwargs)
        except NotImplementedError:  # the layer now runs its generic loop over GRUCell
            why = watch.take_error(no_gpu if not _BACKEND.gpus() else "the backend's gru declined")
            watch.note({"tensorflow": f"scan: tf.while_loop over {steps} steps of Keras' GRUCell ops "
                                      f"(TensorFlow's generic kernel; {why})",
                        "jax": f"scan: lax.scan over {steps} steps of Keras' GRUCell (Keras' generic RNN loop; {why})",
                        "torch": f"python-loop: Keras' generic RNN loop, a Python loop over {steps} steps of "
                                 f"GRUCell ({why})"}[BACKEND])
            raise
        if BACKEND == "tensorflow":
            watch.note("cudnn: cuDNN's fused GRU (tf.raw_ops.CudnnRNNV3, Keras' TensorFlow gru)")
        elif BACKEND == "jax":
            watch.note(f"scan: Keras' JAX gru, a lax.scan over {steps} steps with the input projections in one "
                       f"matmul (JAX has no fused GRU)")
        return result  # torch: _cudnn_gru or _fallback_gru noted which

    backend_module.gru = gru
    if BACKEND == "jax":  # Keras' JAX gru has no cuDNN path to fall back from
        return watch
    rnn = importlib.import_module(f"keras.src.backend.{BACKEND}.rnn")
    cudnn = rnn._cudnn_gru

    def cudnn_gru(*args, **kwargs):
        try:
            result = cudnn(*args, **kwargs)
        except Exception as error:  # the caller decides: TensorFlow's raises NotImplementedError, torch's falls back
            watch.error = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            raise
        if BACKEND == "torch":
            watch.note("cudnn: cuDNN's fused GRU (torch._VF.gru, Keras' torch gru)")
        return result

    rnn._cudnn_gru = cudnn_gru
    if BACKEND == "torch":
        fallback = rnn._fallback_gru

        def fallback_gru(inputs, *args, **kwargs):
            on_cuda = getattr(getattr(inputs, "device", None), "type", "cpu") == "cuda"
            why = watch.take_error("Keras' torch gru takes cuDNN for CUDA inputs only" if not on_cuda
                                   else "cuDNN not eligible here")
            watch.note(f"python-loop: Keras' torch gru fallback, a Python loop over {inputs.shape[1]} steps with the "
                       f"input projections in one matmul ({why})")
            return fallback(inputs, *args, **kwargs)

        rnn._fallback_gru = fallback_gru
    return watch


# --- the training step ----------------------------------------------------------------------------

class TrainStep:
    """`model.train_on_batch(x, y)` without its host fetch: the step's loss stays on the device.

    Keras 3's train_on_batch ends every step with a float() of the loss (`pythonify_logs`), which
    waits for the device: one host round trip per step, which a GPU pays in idle time. This calls
    the same compiled `model.train_function` that train_on_batch calls (traced once by Keras, with
    compile()'s jit_compile), after the same metric reset, so the returned loss is this batch's.
    On JAX, whose train_function is stateless, the state is carried from step to step and written
    back to the model's variables by `sync_weights()`, as Keras' own fit() does once per epoch.
    The first call is train_on_batch itself: it builds the model and the function.

    The optimizer's variables are built here, before the first step: TensorFlow's Keras would create
    them inside the first trace of the train function, and a tf.function that creates variables
    while tracing traces a second time. With ``run``, every trace of the step is counted
    (samples.traces["train_step"]; one per input shape, as the tests check).
    """

    def __init__(self, model: keras.Model, run: Run | None = None):
        self.model = model
        self.state = None  # JAX only: (trainable, non-trainable, optimizer, metrics) variables
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # as Keras' own symbolic build would
        if run is not None and _compiles_steps(model):
            _count_traces(run, model, "train_step")

    def __call__(self, x: np.ndarray, y: np.ndarray):
        model = self.model
        if model.train_function is None:
            return np.float32(model.train_on_batch(x, y))
        if BACKEND == "jax":
            return self._jax_step(x, y)
        model.reset_metrics()  # the loss tracker is a running mean: this batch's loss only
        # A plain list: Keras' TensorFlow train_function then calls its tf.function on the batch
        # itself (a tf.data iterator would go through a second function); the batch's numpy arrays
        # are traced as tensors by shape and dtype, so the step is traced once per shape.
        logs = model.train_function([(x, y, None)])
        return logs["loss"]

    def _jax_step(self, x, y):
        import jax
        import jax.numpy as jnp

        model = self.model
        if self.state is None:
            self.state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                              optimizer_variables=True, metrics_variables=True,
                                              purge_model_variables=True)
        trainable, non_trainable, optimizer, metrics = self.state
        metrics = [jnp.zeros_like(value) for value in metrics]  # = reset_metrics()
        model._jax_state_synced = False
        data = jax.tree_util.tree_map(jax.device_put, (x, y))
        logs, self.state = model.train_function((trainable, non_trainable, optimizer, metrics),
                                                iter([(*data, None)]))
        _last_outputs[0] = self.state
        return logs["loss"]

    def sync_weights(self) -> None:
        """Write the JAX state back to the model's variables (a no-op on the other backends)."""
        if BACKEND != "jax" or self.state is None:
            return
        trainable, non_trainable, optimizer, metrics = self.state
        self.model._jax_state = {"trainable_variables": trainable, "non_trainable_variables": non_trainable,
                                 "optimizer_variables": optimizer, "metrics_variables": metrics}
        self.model._jax_state_synced = False
        self.model.jax_state_sync()
        self.state = None
        _last_outputs[0] = None


# --- the loops ------------------------------------------------------------------------------------

def count_correct(model: keras.Model, inputs: np.ndarray, labels: np.ndarray) -> int:
    """predict_on_batch: inference mode, dropout off (FAIRNESS.md: eval-mode); it returns numpy."""
    return int((model.predict_on_batch(inputs).argmax(axis=1) == labels).sum())


def train_and_evaluate(run: Run, policy: KerasPolicy, model: keras.Model, data) -> None:
    """Train a compiled model with `loop.train` (TrainStep: train_on_batch without a host sync per
    step), then evaluate it on the test set."""
    with run.phase("model_build"):
        train_step = TrainStep(model, run)
    run.set_parameter_count(parameter_count(model))
    record_compiled(run, policy, model)
    # JAX: each epoch's state is written back into the model's variables after its clock stops
    loop.train(run, data, train_step, end_epoch=train_step.sync_weights)
    loop.evaluate(run, data, lambda inputs, labels: count_correct(model, inputs, labels))
    record_peak_memory(run, policy)


def parity_steps(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` of the benchmark's own
    step (train_on_batch first, then the fast path)."""
    run.set_parameter_count(parameter_count(model))
    train_step = TrainStep(model, run)

    def forward(inputs):
        train_step.sync_weights()  # JAX: the steps' state back into the model (none yet: a no-op)
        return model.predict_on_batch(inputs)

    return loop.parity_outputs(forward, train_step, batch)


def extract_features(run: Run, policy: KerasPolicy, model: keras.Model, images: np.ndarray) -> None:
    """ResNet-50's timed inference. predict_on_batch: inference mode (batch norm on its moving
    statistics), no gradients (FAIRNESS.md: eval-mode), compiled (XLA on JAX, and on TensorFlow with
    option xla=on; a tf.function on TensorFlow otherwise; eager under torch.no_grad on PyTorch); it
    converts the features to numpy itself (backend.convert_to_numpy), so each batch ends on the host;
    ``to_host`` states it (keras.ops.convert_to_numpy, a no-op on numpy)."""
    run.set_parameter_count(parameter_count(model))
    model.jit_compile = policy.jit_compile  # the model is not compiled: set what compile() would
    if _compiles_steps(model):
        _count_traces(run, model, "predict_step")
    record_compiled(run, policy, model)
    loop.infer(run, images, model.predict_on_batch, to_host=keras.ops.convert_to_numpy)
    record_peak_memory(run, policy)


def parity_features(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    model.jit_compile = policy.jit_compile
    return {"features": keras.ops.convert_to_numpy(model.predict_on_batch(batch["x"]))}


# --- the scaffold's Keras part (workloads/common/scaffold.py) -----------------------------------------

class Training(scaffold.Training):
    """A Keras training workload: its file gives build_model (compiled: the loss and the optimizer
    are compile()'s, so make_optimizer keeps the scaffold's None) and load_canonical."""

    def select_device(self, run: Run) -> KerasPolicy:
        return select_device(run)

    def train(self, run: Run, policy: KerasPolicy, model: keras.Model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, data)

    def parity_steps(self, run: Run, policy: KerasPolicy, model: keras.Model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Keras inference workload: its file gives build_model and load_canonical."""

    def select_device(self, run: Run) -> KerasPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: KerasPolicy, model: keras.Model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
