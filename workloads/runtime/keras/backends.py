"""Keras 3's three backends, and what differs between them: seeing a GPU, using it, synchronising it,
TF32, XLA, the convolution layout, versions, threads, peak memory.

`python -m workloads` sets KERAS_BACKEND (images/<fw>/metadata.toml) before `import keras`;
BACKEND is what Keras chose, FACTS that backend's answers. The rest of the package asks FACTS,
never the backend's own module, so a fourth backend is one class here.
"""
from __future__ import annotations

import sys

import keras

from workloads.common.harness import no_wait
from workloads.common import inductor, threads as thread_rules
from workloads.common.threads import JAX_THREADS

BACKEND = keras.backend.backend()  # "tensorflow", "jax" or "torch"


# --- per-backend facts ----------------------------------------------------------------------------

class _TensorFlow:
    name = "tensorflow"
    autotune = "cuDNN autotuning (TensorFlow's default, TF_CUDNN_USE_AUTOTUNE)"

    def __init__(self):
        import tensorflow
        self.tf, self.version = tensorflow, tensorflow.__version__

    def gpus(self):
        return self.tf.config.list_physical_devices("GPU")

    def use(self, device: str) -> None:  # phrase: device-placement
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

    def xla(self, compiled: bool) -> tuple[bool, str]:
        if compiled:
            return True, "on: jit_compile=True, every train and predict step one XLA cluster (mode compiled)"
        return False, "off: jit_compile=False, tf.function graphs without XLA (mode graph, the default)"

    def compiler(self, device: str, compiled: bool) -> str:
        return ""  # XLA: the "xla" extra says it all

    def set_up_compiler(self, run, device: str, compiled: bool) -> None:
        """Nothing: XLA's setup is in-process and takes hundredths of a second (inductor.set_up)."""

    def refuses_rnn(self, compiled: bool) -> str | None:
        return None  # XLA compiles the GRU's scan (and Keras turns it off for cuDNN's GRU, recorded)

    def batch(self, array):
        return array  # numpy: the tf.function traces it as a tensor, by shape and dtype

    def cuda_versions(self) -> tuple[str | None, str | None]:
        info = self.tf.sysconfig.get_build_info()
        return info.get("cuda_version"), info.get("cudnn_version")

    def sync(self) -> None:  # phrase: device-sync
        self.tf.test.experimental.sync_devices()  # waits for every GPU stream

    def device_sync(self, device: str) -> tuple:
        """What the harness waits with on `device`, and what it waits for (FAIRNESS.md: explicit-sync)."""
        return self.sync, ("tf.test.experimental.sync_devices: every pending kernel on every device TensorFlow "
                           "uses (as the TensorFlow row)")

    def peak_memory_mb(self) -> float:
        return self.tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20

    def set_threads(self, run) -> None:
        """The run's threads through the backend's own switches, read back (FAIRNESS.md: same-threads)."""
        thread_rules.set_tensorflow_threads(self.tf, run)

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

    def xla(self, compiled: bool) -> tuple[bool, str]:
        return True, "always: Keras' JAX backend compiles every train and predict step with jax.jit (XLA); no other mode"

    def compiler(self, device: str, compiled: bool) -> str:
        return ""

    def set_up_compiler(self, run, device: str, compiled: bool) -> None:
        """Nothing: XLA's setup is in-process and takes hundredths of a second (inductor.set_up)."""

    def refuses_rnn(self, compiled: bool) -> str | None:
        return None  # the GRU is a lax.scan, one loop in the compiled step

    def batch(self, array):
        return array  # TrainStep puts it on the device with the step's state (jax.device_put)

    def cuda_versions(self) -> tuple[str | None, str | None]:
        try:
            from jax._src.lib import cuda_versions  # present with the CUDA plugin only
            return (str(cuda_versions.cuda_runtime_get_version()), str(cuda_versions.cudnn_get_version()))
        except Exception:  # noqa: BLE001 - provenance only
            return None, None

    def sync(self) -> None:
        # JAX has no device-wide synchronise: block on what the last compiled step returned.
        if last_outputs[0] is not None:
            self.jax.block_until_ready(last_outputs[0])

    def device_sync(self, device: str) -> tuple:
        return self.sync, ("jax.block_until_ready on the last compiled step's outputs (JAX has no device-wide "
                           "synchronise, and dispatches asynchronously on the CPU too)")

    def peak_memory_mb(self) -> float | None:
        stats = self.gpus()[0].memory_stats() or {}
        return stats["peak_bytes_in_use"] / 2**20 if "peak_bytes_in_use" in stats else None

    def set_threads(self, run) -> None:
        run.record_threads(None, None, "none (JAX has no thread switch)", note=JAX_THREADS)

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

    def xla(self, compiled: bool) -> tuple[bool, str]:
        if compiled:
            return True, ("n/a: no XLA on torch; jit_compile=True hands Keras' train and predict steps to torch.compile "
                          "(inductor), compiled in the first step (mode compiled)")
        return False, ("n/a: jit_compile=False, eager: no torch.compile (mode eager, the default; Keras' own 'auto' "
                       "leaves it off too)")

    def compiler(self, device: str, compiled: bool) -> str:
        """The compiled mode's inductor: its caches in the cell's temporary folder, and the CPU's C++
        compiler, or Unsupported without one (workloads/common/inductor.py, as the PyTorch row)."""
        return inductor.compile_caches(device) if compiled else ""

    def set_up_compiler(self, run, device: str, compiled: bool) -> None:
        """The compiled mode: inductor's own setup, timed apart before the model is built
        (workloads/common/inductor.py, set_up, as the PyTorch row)."""
        if compiled:
            inductor.set_up(run, self.torch, device)

    def refuses_rnn(self, compiled: bool) -> str | None:
        return TORCH_COMPILED_RNN if compiled else None

    def compile_counted(self, run, model: keras.Model, step: str) -> None:
        """Make Keras' ``step`` function ("train_step" or "predict_step") now, as jit_compile=True
        makes it on torch (keras/src/backend/torch/trainer.py: torch.compile of its one-step
        function, inductor, torch.compile's other defaults), with inductor counting the graphs it
        compiles (samples.traces, "train_step graph 1", ...): Keras makes its one-step function with
        jit_compile off for that one call, and it is compiled here. Nothing is compiled until the
        function's first call (the first step, or the warm-up pass)."""
        from torch._inductor.compile_fx import compile_fx

        make, attribute = {"train_step": (model.make_train_function, "train_function"),
                           "predict_step": (model.make_predict_function, "predict_function")}[step]
        model.jit_compile = False
        try:
            make(force=True)
        finally:
            model.jit_compile = True
        counted = inductor.counting_backend(run, compile_fx, f"{step} graph")
        setattr(model, attribute, self.torch.compile(getattr(model, attribute), backend=counted))
        # Keras' global state gains its "stateless_scope" attribute the first time a stateless scope
        # is entered (the train step enters one); TorchDynamo guards a step on that attribute's
        # absence, so a predict step compiled before the first train step (the parity check's
        # logits on the canonical weights) would compile again after it. One scope entered and left
        # here gives every step the state it will find from then on; no number changes.
        with keras.StatelessScope():
            pass
        if step == "train_step":
            # Keras' torch train_step starts with zero_grad(), whose TorchDynamo guards check whether each
            # gradient is None: None before the first step only, so the second step would compile the
            # step again, outside the first step's time (FAIRNESS.md: warm-up-apart). Zero gradients
            # before the first step, as every later step finds the last one's; zero_grad() drops them
            # at once, so no number changes.
            for variable in model.trainable_weights:
                variable.value.grad = self.torch.zeros_like(variable.value)

    def record_dynamo(self, run) -> None:
        """What TorchDynamo made of the compiled steps (extras "torch_compile"), from its own counters
        after the run: the Python frames it compiled of those it was handed, why it left others
        eager (e.g. its recompile limit), and where it broke a graph (the call it broke at runs
        eagerly between two graphs: Tensor.backward(), the fused optimizer). Said, not silently
        substituted (FAIRNESS.md: modes-compared)."""
        from torch._dynamo.utils import counters

        def kinds(counter) -> str:
            found: dict = {}
            for reason, count in counter.items():
                kind = next((line.strip() for line in str(reason).splitlines() if line.strip()), "?")[:100]
                found[kind] = found.get(kind, 0) + count
            return "; ".join(f"{kind} (x{count})" for kind, count in sorted(found.items(), key=lambda item: -item[1]))

        frames = counters["frames"]
        run.set_provenance(extras={"torch_compile": (
            f"TorchDynamo compiled {frames['ok']} of the {frames['total']} Python frames it was handed; "
            f"frames left eager: {kinds(counters['unimplemented']) or 'none'}; "
            f"graph breaks: {kinds(counters['graph_break']) or 'none'}")})

    def batch(self, array):
        """A numpy batch as a tensor on Keras' device, before it reaches Keras' step: torch.compile
        cannot trace numpy arrays (a graph break at ndarray.dtype); eager Keras converts it first too."""
        return keras.ops.convert_to_tensor(array)

    def cuda_versions(self) -> tuple[str | None, str | None]:
        return self.torch.version.cuda, str(self.torch.backends.cudnn.version())

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def device_sync(self, device: str) -> tuple:
        if device == "cuda":
            return self.sync, "torch.cuda.synchronize: every kernel queued on the GPU's streams"
        return no_wait, "nothing: PyTorch's CPU operators run in the calling thread and return finished"

    def peak_memory_mb(self) -> float:
        return self.torch.cuda.max_memory_allocated() / 2**20

    def set_threads(self, run) -> None:
        thread_rules.set_torch_threads(self.torch, run)

    def data_format(self, device: str) -> str:
        # torch convolutions are NCHW; with channels_last Keras transposes around every layer.
        return "channels_first"


# Why Keras on torch refuses the GRU in its compiled mode: while torch.compile traces, Keras' torch gru
# skips cuDNN (torch.compiler.is_compiling()) for its Python loop over the time steps, which TorchDynamo
# unrolls into one graph. Measured with Keras 3.15.1 and PyTorch 2.13 on a 2-core CPU shared with
# other work: with 20 of the workload's 150 steps the first train step took about 3 minutes (the predict
# step 1.5 more); with all 150 the first train step had not finished compiling after 10 minutes.
TORCH_COMPILED_RNN = ("torch.compile does not compile this model in reasonable time: under torch.compile Keras' "
                      "torch GRU is its Python loop over the time steps (it skips cuDNN while compiling), which "
                      "TorchDynamo unrolls into one graph (over 10 minutes of compilation for the 150 steps)")

FACTS = {"tensorflow": _TensorFlow, "jax": _Jax, "torch": _Torch}[BACKEND]()
last_outputs: list = [None]  # what the last JAX step returned, for run.sync
selected_device: list = ["cpu"]  # the device select_device chose ("cpu" or "cuda")
