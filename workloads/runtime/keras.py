"""Keras 3's runtime: device, precision and provenance switches, and the one training, evaluation
and inference loop the three Keras workloads share.

One implementation serves three rows: `python -m workloads` sets KERAS_BACKEND to tensorflow, jax
or torch before `import keras`. Everything that differs between the backends (seeing a GPU,
synchronising it, TF32, the convolution layout, versions) is here; the workload files are pure
Keras. A workload hands this module its compiled model (the loss and optimizer are compile()'s);
the training step is Keras' own compiled `train_function` (see TrainStep).
"""
from __future__ import annotations

import sys

import keras
import numpy as np

from workloads.common import loop
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


# --- device and precision -------------------------------------------------------------------------

class KerasPolicy(Policy):
    """``device`` is "cpu" or "cuda". ``data_format``: the convolution layout this backend runs
    best on this device (the models take NCHW input either way). ``dtype_policy``: Keras' own
    mixed-precision policy, set globally (fp16 gets a LossScaleOptimizer at compile)."""

    def __init__(self, device: str, precision: str):
        super().__init__(device, precision)
        self.data_format = _BACKEND.data_format(device)
        self.dtype_policy = _POLICIES[precision]


def select_device(run: Run) -> KerasPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    has_gpu = bool(_BACKEND.gpus())
    if run.requested_device == "cuda" and not has_gpu:
        raise Unsupported(f"no CUDA GPU visible to Keras' {BACKEND} backend on this host")
    device = "cuda" if has_gpu and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    if device == "cpu" and precision in ("tf32", "fp16"):
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU")
    if device == "cuda":
        major, minor = _BACKEND.capability()
        if precision in ("tf32", "bf16") and major < 8:
            raise Unsupported(f"{precision} needs compute capability 8.0 or newer; this GPU has {major}.{minor}")
    _BACKEND.use(device)
    policy = KerasPolicy(device, precision)
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
        extras={"keras_backend": BACKEND, "layout": policy.data_format,
                "dtype_policy": policy.dtype_policy, "tf32": str(precision == "tf32").lower(),
                "threads": _BACKEND.threads(), "autotune": _BACKEND.autotune if device == "cuda" else "none (CPU)"},
    )
    return policy


# --- model facts ----------------------------------------------------------------------------------

def parameter_count(model: keras.Model) -> int:
    """Trainable parameters, as PyTorch's parameters(): batch norm's moving statistics are state."""
    return int(sum(np.prod(weight.shape) for weight in model.trainable_weights))


def record_compiled(run: Run, model: keras.Model) -> None:
    """What jit_compile="auto" resolved to on this backend (XLA, tf.function, eager), and the step."""
    extras = {"jit_compile": str(bool(model.jit_compile)).lower()}
    if getattr(model, "optimizer", None) is not None:
        extras["train_step"] = "Keras' compiled train_function, loss kept on the device (TrainStep)"
    run.set_provenance(extras=extras)


def record_peak_memory(run: Run, policy: KerasPolicy) -> None:
    if policy.device == "cuda":
        run.record_peak_device_memory(_BACKEND.peak_memory_mb())


def dense_gradient(gradient):
    """A dense gradient: TensorFlow's IndexedSlices (an embedding's) summed into a tensor, else as is."""
    if BACKEND == "tensorflow" and isinstance(gradient, _BACKEND.tf.IndexedSlices):
        return _BACKEND.tf.convert_to_tensor(gradient)  # sums the slices of repeated indices
    return gradient


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
    """

    def __init__(self, model: keras.Model):
        self.model = model
        self.state = None  # JAX only: (trainable, non-trainable, optimizer, metrics) variables

    def __call__(self, x: np.ndarray, y: np.ndarray):
        model = self.model
        if model.train_function is None:
            return np.float32(model.train_on_batch(x, y))
        if BACKEND == "jax":
            return self._jax_step(x, y)
        model.reset_metrics()  # the loss tracker is a running mean: this batch's loss only
        data = (x, y, None)
        logs = model.train_function(iter([data]) if BACKEND == "tensorflow" else [data])
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
        train_step = TrainStep(model)
    run.set_parameter_count(parameter_count(model))
    record_compiled(run, model)
    # JAX: each epoch's state is written back into the model's variables after its clock stops
    loop.train(run, data, train_step, end_epoch=train_step.sync_weights)
    loop.evaluate(run, data, lambda inputs, labels: count_correct(model, inputs, labels))
    record_peak_memory(run, policy)


def parity_steps(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` of the benchmark's own
    step (train_on_batch first, then the fast path)."""
    run.set_parameter_count(parameter_count(model))
    train_step = TrainStep(model)

    def forward(inputs):
        train_step.sync_weights()  # JAX: the steps' state back into the model (none yet: a no-op)
        return model.predict_on_batch(inputs)

    return loop.parity_outputs(forward, train_step, batch)


def extract_features(run: Run, policy: KerasPolicy, model: keras.Model, images: np.ndarray) -> None:
    """ResNet-50's timed inference. predict_on_batch: inference mode (batch norm on its moving
    statistics), no gradients (FAIRNESS.md: eval-mode), compiled (XLA on JAX and on TensorFlow with a
    GPU, a tf.function on TensorFlow's CPU, eager under torch.no_grad on PyTorch); it returns numpy,
    so each batch ends on the host."""
    run.set_parameter_count(parameter_count(model))
    record_compiled(run, model)
    loop.infer(run, images, model.predict_on_batch)
    record_peak_memory(run, policy)


def parity_features(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    return {"features": model.predict_on_batch(batch["x"])}
