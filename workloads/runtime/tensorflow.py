"""TensorFlow's device, precision and provenance switches, shared by the three TensorFlow workloads.

The TensorFlow rows are written with TensorFlow's own low-level API (tf.Module, tf.Variable,
tf.nn, tf.GradientTape inside tf.function); Keras, which TensorFlow bundles, has its own rows.
Set ROSETTA_XLA=1 to compile every step with XLA (tf.function(jit_compile=True)).
"""
from __future__ import annotations

import os

import tensorflow as tf

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED

XLA = os.environ.get("ROSETTA_XLA", "0") == "1"


def select_device(run: Run) -> str:
    """Pick the device ("cpu" or "cuda"), refuse what it cannot do (before any work), set the global switches."""
    gpus = tf.config.list_physical_devices("GPU")
    if run.requested_device == "cuda" and not gpus:
        build = "" if tf.test.is_built_with_cuda() else " (this is a CPU-only TensorFlow build)"
        raise Unsupported(f"no CUDA GPU visible to TensorFlow on this host{build}")
    on_gpu = bool(gpus) and run.requested_device != "cpu"
    precision = run.precision
    if precision in ("fp16", "bf16"):
        raise Unsupported(f"{precision}: these low-level TensorFlow rows run fp32 and tf32 only (TensorFlow's "
                          "mixed precision is the Keras policy API; the keras-tf rows measure it)")
    if precision == "tf32" and not on_gpu:
        raise Unsupported("tf32 needs a CUDA GPU; this cell runs on the CPU")
    gpu_name = None
    if on_gpu:
        for gpu in gpus:  # before the GPUs are initialised: take memory as needed, so peak use means something
            tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(gpus[0])
        major, minor = details.get("compute_capability", (0, 0))
        if precision == "tf32" and major < 8:
            raise Unsupported(f"tf32 needs compute capability 8.0 or newer; this GPU has {major}.{minor}")
        gpu_name = details.get("device_name")
    else:
        tf.config.set_visible_devices([], "GPU")  # cpu requested on a GPU host: hide the GPUs
    # fp32 means true fp32: TensorFlow turns TF32 on by default on Ampere and newer GPUs.
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    tf.random.set_seed(SEED)
    # Waits for every pending kernel (GPU streams, and TensorFlow's async queues if enabled).
    run.sync = tf.test.experimental.sync_devices
    build = tf.sysconfig.get_build_info()
    device = "cuda" if on_gpu else "cpu"
    run.set_provenance(
        framework_version=tf.__version__,
        device=device,
        cuda_version=build.get("cuda_version") if on_gpu else None,
        cudnn_version=build.get("cudnn_version") if on_gpu else None,
        gpu_name=gpu_name,
        extras={"layout": f"{layout(device)} / TNC", "xla": str(XLA).lower(),
                "cudnn_autotune": "true (TensorFlow's default)" if on_gpu else "n/a",
                "allow_tf32": str(precision == "tf32").lower(),
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
                "threads": str(tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count())},
    )
    return device


def layout(device: str) -> str:
    """NCHW on a GPU (cuDNN's native layout, lesson 3); NHWC on the CPU, the only layout of
    TensorFlow's CPU convolution and pooling kernels."""
    return "NCHW" if device == "cuda" else "NHWC"


def tf_function(function):
    """One compiled graph per step: tf.function, with XLA when ROSETTA_XLA=1."""
    return tf.function(function, jit_compile=XLA)


def glorot_uniform(shape, fan_in: int, fan_out: int) -> tf.Variable:
    limit = (6.0 / (fan_in + fan_out)) ** 0.5
    return tf.Variable(tf.random.uniform(shape, -limit, limit))


def zeros(shape, trainable: bool = True) -> tf.Variable:
    return tf.Variable(tf.zeros(shape), trainable=trainable)


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy over the batch; softmax is folded into the loss (lesson 7)."""
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def parameter_count(module: tf.Module) -> int:
    return sum(int(tf.size(variable)) for variable in module.trainable_variables)


def record_peak_memory(run: Run, device: str) -> None:
    if device == "cuda":
        run.result.metrics.peak_device_memory_mb = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
