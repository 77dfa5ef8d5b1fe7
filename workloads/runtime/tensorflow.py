"""TensorFlow's runtime: device, precision and provenance switches, and the one training,
evaluation and inference loop the three TensorFlow workloads share.

The TensorFlow rows are written with TensorFlow's own low-level API (tf.Module, tf.Variable,
tf.nn, tf.GradientTape inside tf.function); Keras, which TensorFlow bundles, has its own rows.
A workload hands this module its tf.Module model, its optimizer (a tf.Module with
``apply(gradients, variables)``) and its loss; the step is built here, once.
The cell's mode (workloads/common/modes.py) chooses how each step runs: ``graph`` (the default) a
tf.function graph of TensorFlow's own kernels, ``compiled`` the same tf.function compiled by XLA
(jit_compile=True). Every compiled function counts its Python traces
(``run.note_trace``): each traces once, evaluation included (its last partial batch is padded to
the batch size, so it keeps the one shape). `Training` and `FeatureExtraction` are TensorFlow's side
of the scaffold every workload file fills in (workloads/common/scaffold.py).
"""
from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from workloads.common import loop, modes, precision as precision_rules, scaffold, threads as thread_rules
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED


class TensorFlowPolicy(Policy):
    """``device`` is "cpu" or "cuda". ``layout``: the convolution layout of this device (see
    `layout`). ``xla``: every step compiled with XLA (the cell's mode is ``compiled``). ``fused_rnn``:
    the GRU runs cuDNN's fused kernel (a GPU, and no XLA, which cannot compile that op;
    FAIRNESS.md: fused-rnn). fp32 and tf32 only: the global TF32 switch is set."""

    def __init__(self, device: str, precision: str, xla: bool = False):
        super().__init__(device, precision)
        self.layout = layout(device)
        self.xla = xla
        self.fused_rnn = device == "cuda" and not xla

    def compile(self, function, **keywords):  # phrase: compile-step
        """One compiled graph: tf.function, with XLA in the compiled mode."""
        return tf.function(function, jit_compile=self.xla, **keywords)


def select_device(run: Run) -> TensorFlowPolicy:
    """Pick the device ("cpu" or "cuda"), refuse what it cannot do (before any work), set the global switches."""
    xla = run.mode == modes.COMPILED  # read per cell, here: never from the environment, never at import
    set_threads(run)  # before TensorFlow's runtime starts: its pools take their size then
    gpus = tf.config.list_physical_devices("GPU")
    if run.requested_device == "cuda" and not gpus:
        build = "" if tf.test.is_built_with_cuda() else " (this is a CPU-only TensorFlow build)"
        raise Unsupported(f"no CUDA GPU visible to TensorFlow on this host{build}")
    on_gpu = bool(gpus) and run.requested_device != "cpu"
    precision = run.precision
    if not on_gpu:
        precision_rules.check("tensorflow", precision, "cpu")
    gpu_name = None
    if on_gpu:
        for gpu in gpus:  # before the GPUs are initialised: take memory as needed, so peak use means something
            tf.config.experimental.set_memory_growth(gpu, True)
        details = tf.config.experimental.get_device_details(gpus[0])
        precision_rules.check("tensorflow", precision, "cuda", details.get("compute_capability", (0, 0)))
        # nvidia-smi's name (provenance.gpu) when TensorFlow's device details lack one
        gpu_name = details.get("device_name") or run.result.provenance.gpu.get("name") or "unknown CUDA GPU"
    else:
        tf.config.set_visible_devices([], "GPU")  # cpu requested on a GPU host: hide the GPUs  # phrase: device-placement
    # fp32 means true fp32: TensorFlow turns TF32 on by default on Ampere and newer GPUs.
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    tf32 = str(tf.config.experimental.tensor_float_32_execution_enabled()).lower()  # read back, as TF reports it
    tf.random.set_seed(SEED)  # phrase: seeding
    run.declare_sync(tf.test.experimental.sync_devices, "tf.test.experimental.sync_devices: every pending "  # phrase: device-sync
                     "kernel on every device TensorFlow uses (GPU streams, and its async queues if enabled)")
    build = tf.sysconfig.get_build_info()
    device = "cuda" if on_gpu else "cpu"
    run.set_provenance(
        framework_version=tf.__version__,
        device=device,
        cuda_version=build.get("cuda_version") if on_gpu else None,
        cudnn_version=build.get("cudnn_version") if on_gpu else None,
        gpu_name=gpu_name,
        extras={"layout": f"{layout(device)} / TNC",
                "xla": "on: tf.function(jit_compile=True) (mode compiled)" if xla
                       else "off: tf.function graphs, TensorFlow's kernels (mode graph)",
                "cudnn_autotune": "true (TensorFlow's default)" if on_gpu else "n/a",
                "tf32": f"{tf32} (tf.config.experimental.tensor_float_32_execution_enabled)" if on_gpu else "n/a (CPU)",
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")},
    )
    return TensorFlowPolicy(device, precision, xla)


def set_threads(run: Run) -> None:
    """The run's threads through TensorFlow's own switches (workloads/common/threads.py)."""
    thread_rules.set_tensorflow_threads(tf, run)


def layout(device: str) -> str:
    """NCHW on a GPU (cuDNN's native layout; FAIRNESS.md: layouts); NHWC on the CPU, the only layout of
    TensorFlow's CPU convolution and pooling kernels."""
    return "NCHW" if device == "cuda" else "NHWC"


def glorot_uniform(shape, fan_in: int, fan_out: int) -> tf.Variable:
    limit = (6.0 / (fan_in + fan_out)) ** 0.5
    return tf.Variable(tf.random.uniform(shape, -limit, limit))


def zeros(shape, trainable: bool = True) -> tf.Variable:
    return tf.Variable(tf.zeros(shape), trainable=trainable)


def cross_entropy(logits, labels):  # phrase: softmax-cross-entropy
    """Mean softmax cross-entropy over the batch; softmax is folded into the loss (FAIRNESS.md: softmax-in-loss)."""
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def parameter_count(module: tf.Module) -> int:
    return sum(int(tf.size(variable)) for variable in module.trainable_variables)


def record_peak_memory(run: Run, policy: TensorFlowPolicy) -> None:
    if policy.device == "cuda":
        run.record_peak_device_memory(tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20)


# --- the loops ----------------------------------------------------------------------------------

def make_train_step(run: Run, policy: TensorFlowPolicy, model: tf.Module, optimizer: tf.Module, loss_function):  # phrase: train-step
    """One compiled step: forward in training mode, the loss, its gradients, the optimizer's update."""
    @policy.compile
    def train_step(inputs, labels):
        run.note_trace("train_step")  # Python runs this line only while tracing: a retrace shows in the count
        with tf.GradientTape() as tape:
            loss = loss_function(model(inputs, training=True), labels)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss  # a tensor: nothing is read back to the host per step
    return train_step


def pad_batch(x: np.ndarray, y: np.ndarray, batch_size: int):
    """The test set's last, partial batch padded to the batch size, so evaluation keeps the one
    compiled shape (no second trace, no second XLA compilation inside the timed test pass): the
    padding rows are zeros labelled -1, which no prediction equals."""
    missing = batch_size - len(y)
    if missing <= 0:
        return x, y
    return (np.concatenate([x, np.zeros((missing,) + x.shape[1:], x.dtype)]),
            np.concatenate([y, np.full(missing, -1, y.dtype)]))


def train_and_evaluate(run: Run, policy: TensorFlowPolicy, model: tf.Module, optimizer: tf.Module,
                       loss_function, data) -> None:
    """Train with `loop.train`, then count correct test predictions on the device."""
    with run.phase("model_build"):
        train_step = make_train_step(run, policy, model, optimizer, loss_function)

        @policy.compile
        def count_correct(inputs, labels):  # dropout off (FAIRNESS.md: eval-mode: training=False)  # phrase: eval-mode
            run.note_trace("eval_step")
            predictions = tf.argmax(model(inputs, training=False), axis=1, output_type=labels.dtype)
            return tf.reduce_sum(tf.cast(predictions == labels, tf.int64))
    run.set_parameter_count(parameter_count(model))
    run.set_provenance(extras={"optimizer": optimizer.description})
    loop.train(run, data, train_step)
    # an int64 count summed on the device, read once
    batch_size = run.settings.batch_size
    loop.evaluate(run, data, lambda inputs, labels: count_correct(*pad_batch(inputs, labels, batch_size)))
    record_peak_memory(run, policy)


def parity_steps(run: Run, policy: TensorFlowPolicy, model: tf.Module, optimizer: tf.Module,
                 loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` of the benchmark's
    own step (a model for parity is built with its dropout off: dropout is random)."""
    run.set_parameter_count(parameter_count(model))
    run.set_provenance(extras={"optimizer": optimizer.description})
    tensors = {"x": tf.constant(batch["x"]), "y": tf.constant(batch["y"])}
    return loop.parity_outputs(lambda inputs: model(inputs, training=False),
                               make_train_step(run, policy, model, optimizer, loss_function), tensors,
                               to_numpy=lambda tensor: tensor.numpy())


def make_forward(run: Run, policy: TensorFlowPolicy, model: tf.Module):
    """ResNet-50's forward-only graph: no tape, no gradients (FAIRNESS.md: eval-mode)."""
    @policy.compile
    def forward(images):
        run.note_trace("forward")
        return model(images)
    return forward


def extract_features(run: Run, policy: TensorFlowPolicy, model: tf.Module, images) -> None:
    """ResNet-50's timed inference; every batch's features are copied to the host inside its time."""
    with run.phase("model_build"):
        forward = make_forward(run, policy, model)
    run.set_parameter_count(parameter_count(model))
    loop.infer(run, images, forward, to_host=lambda features: features.numpy())
    record_peak_memory(run, policy)


def parity_features(run: Run, policy: TensorFlowPolicy, model: tf.Module, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    return {"features": make_forward(run, policy, model)(tf.constant(batch["x"])).numpy()}


# --- the scaffold's TensorFlow part (workloads/common/scaffold.py) ------------------------------------

class Training(scaffold.TrainingWithLoss):
    """A TensorFlow training workload: its file gives build_model, load_canonical, make_optimizer (a
    tf.Module with apply(gradients, variables): TensorFlow's own update op) and loss_function; the
    device policy and the loops are this module's."""

    def select_device(self, run: Run) -> TensorFlowPolicy:
        return select_device(run)

    def train(self, run: Run, policy: TensorFlowPolicy, model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, optimizer, self.loss_function(), data)

    def parity_steps(self, run: Run, policy: TensorFlowPolicy, model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, optimizer, self.loss_function(), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A TensorFlow inference workload: its file gives build_model and load_canonical."""

    def select_device(self, run: Run) -> TensorFlowPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: TensorFlowPolicy, model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: TensorFlowPolicy, model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
