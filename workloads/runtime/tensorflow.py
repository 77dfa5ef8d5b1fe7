"""TensorFlow's runtime: device, precision and provenance switches, and the one training,
evaluation and inference loop the three TensorFlow workloads share.

The TensorFlow rows are written with TensorFlow's own low-level API (tf.Module, tf.Variable,
tf.nn, tf.GradientTape inside tf.function); Keras, which TensorFlow bundles, has its own rows.
A workload hands this module its tf.Module model, its optimizer (a tf.Module with
``apply(gradients, variables)``) and its loss; the step is built here, once.
Set ROSETTA_XLA=1 to compile every step with XLA (tf.function(jit_compile=True)).
"""
from __future__ import annotations

import os

import tensorflow as tf

from workloads.common import loop
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED

XLA = os.environ.get("ROSETTA_XLA", "0") == "1"


class TensorFlowPolicy(Policy):
    """``device`` is "cpu" or "cuda". ``layout``: the convolution layout of this device (see
    `layout`). ``fused_rnn``: the GRU runs cuDNN's fused kernel (a GPU, and no XLA, which cannot
    compile that op; FAIRNESS.md: fused-rnn). fp32 and tf32 only: the global TF32 switch is set."""

    def __init__(self, device: str, precision: str):
        super().__init__(device, precision)
        self.layout = layout(device)
        self.fused_rnn = device == "cuda" and not XLA


def select_device(run: Run) -> TensorFlowPolicy:
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
    return TensorFlowPolicy(device, precision)


def layout(device: str) -> str:
    """NCHW on a GPU (cuDNN's native layout; FAIRNESS.md: layouts); NHWC on the CPU, the only layout of
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
    """Mean softmax cross-entropy over the batch; softmax is folded into the loss (FAIRNESS.md: softmax-in-loss)."""
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def parameter_count(module: tf.Module) -> int:
    return sum(int(tf.size(variable)) for variable in module.trainable_variables)


def record_peak_memory(run: Run, policy: TensorFlowPolicy) -> None:
    if policy.device == "cuda":
        run.record_peak_device_memory(tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20)


# --- the loops ----------------------------------------------------------------------------------

def make_train_step(model: tf.Module, optimizer: tf.Module, loss_function):
    """One compiled step: forward in training mode, the loss, its gradients, the optimizer's update."""
    @tf_function
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_function(model(inputs, training=True), labels)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss  # a tensor: nothing is read back to the host per step
    return train_step


def train_and_evaluate(run: Run, policy: TensorFlowPolicy, model: tf.Module, optimizer: tf.Module,
                       loss_function, data) -> None:
    """Train with `loop.train`, then count correct test predictions on the device."""
    with run.phase("model_build"):
        train_step = make_train_step(model, optimizer, loss_function)
        predict = tf_function(lambda inputs: tf.argmax(model(inputs, training=False), axis=1))  # dropout off
    run.set_parameter_count(parameter_count(model))
    loop.train(run, data, train_step)
    # an int64 count summed on the device, read once (FAIRNESS.md: eval-mode: training=False)
    loop.evaluate(run, data, lambda inputs, labels: tf.reduce_sum(tf.cast(predict(inputs) == labels, tf.int64)))
    record_peak_memory(run, policy)


def parity_steps(run: Run, policy: TensorFlowPolicy, model: tf.Module, optimizer: tf.Module,
                 loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` of the benchmark's
    own step (a model for parity is built with its dropout off: dropout is random)."""
    run.set_parameter_count(parameter_count(model))
    tensors = {"x": tf.constant(batch["x"]), "y": tf.constant(batch["y"])}
    return loop.parity_outputs(lambda inputs: model(inputs, training=False),
                               make_train_step(model, optimizer, loss_function), tensors,
                               to_numpy=lambda tensor: tensor.numpy())


def extract_features(run: Run, policy: TensorFlowPolicy, model: tf.Module, images) -> None:
    """ResNet-50's timed inference: one forward-only graph, no tape, no gradients (FAIRNESS.md: eval-mode)."""
    with run.phase("model_build"):
        forward = tf_function(model)
    run.set_parameter_count(parameter_count(model))
    loop.infer(run, images, forward)
    record_peak_memory(run, policy)


def parity_features(run: Run, policy: TensorFlowPolicy, model: tf.Module, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    return {"features": tf_function(model)(tf.constant(batch["x"])).numpy()}
