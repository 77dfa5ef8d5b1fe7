"""Keras 2.2 on CNTK 2.7's runtime: device, precision and provenance switches, and the one training,
evaluation and inference loop the keras-cntk workloads share.

The original study's Keras(CNTK) row. Keras 2.2.5 is the multi-backend Keras of that study, not
Keras 3 (which has no CNTK backend): its own workload files (workloads/*/keras_cntk.py), Python 3.6,
KERAS_BACKEND=cntk set before `import keras` (images/keras-cntk/metadata.toml's import_env; the image sets it too).
Keras' CNTK backend takes CNTK's default device once, when it is imported: the best device there is
(a GPU when one is visible), so the device is checked here rather than chosen. The workload files
import this module before Keras, so that a host without the OpenMPI libraries CNTK is linked against
gets an "unsupported here" cell that says how to provide them. A workload hands this module its
compiled model (the loss and optimizer are compile()'s). `Training` and `FeatureExtraction` are this
runtime's side of the scaffold every workload file fills in (workloads/common/scaffold.py).
"""

import numpy as np

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED

try:  # before Keras, which imports CNTK: a missing OpenMPI becomes an "unsupported here" reason
    import cntk as C
except ImportError as error:
    if "libmpi" not in str(error):
        raise
    raise Unsupported("CNTK 2.7 cannot load {}: it is linked against OpenMPI 1.10 (libmpi.so.12, libmpi_cxx.so.1). "
                      "On a host: install an OpenMPI runtime (libopenmpi3), run images/cntk/openmpi-compat.sh DIR, which "
                      "links it under those names, and put DIR on LD_LIBRARY_PATH; or run the cell in its image".format(
                          str(error).split(": cannot open shared object file")[0])) from None
import keras  # noqa: E402 - after CNTK's check
from keras import backend as K  # noqa: E402

MAX_COMPUTE_CAPABILITY = (7, 5)  # CUDA 10.0 / cuDNN 7 (cntk-gpu 2.7): up to Turing
# CUDA 10.0 / cuDNN 7 predate TF32 (CUDA 11, Ampere), and no GPU CNTK can target has it (FAIRNESS.md: true-precision)
TF32_ON_GPU = "n/a (cntk-gpu 2.7 is a CUDA 10.0 / cuDNN 7 build for GPUs up to compute capability 7.5: no TF32)"
TF32_ON_CPU = "n/a (CPU)"

# Keras 2.2 builds its train function (a CNTK Trainer over one C.universal learner made of the optimizer's
# update ops) and its predict function on first use, and keeps them; CNTK compiles each on its first call.
GRAPH = "Keras 2.2 train and predict functions, each built once (counted); CNTK compiles each on its first call"

# Keras 2.2 on CNTK: every optimizer is its get_updates() written in Keras backend ops, which Keras'
# CNTK backend hands to CNTK as one C.universal learner; there is no built-in or fused optimizer path.
WRITTEN_OUT = ("written out: {} in Keras backend ops, which Keras' CNTK backend runs as one C.universal learner "
               "(Keras 2.2 has no built-in or fused optimizer on CNTK)")


class KerasCNTKPolicy(Policy):
    """``device`` is "cpu" or "cuda" (the one Keras' CNTK backend took), ``precision`` fp32 (the only
    one); ``data_format`` channels_first, CNTK's native layout, set as Keras' global image format."""

    def __init__(self, device, precision):
        super().__init__(device, precision)
        self.data_format = "channels_first"


def select_device(run: Run) -> KerasCNTKPolicy:
    """Check the device Keras' CNTK backend took, refuse what it cannot do (before any work), set the switches."""
    if K.backend() != "cntk":
        raise Unsupported("keras-cntk needs KERAS_BACKEND=cntk before Keras is imported (Keras chose {})".format(
            K.backend()))
    device = C.device.use_default_device()  # fixed by Keras' import  # phrase: device-placement
    on_gpu = device.type() == C.device.DeviceKind.GPU
    if run.requested_device == "cuda" and not on_gpu:
        raise Unsupported("no CUDA GPU visible to CNTK on this host (the cpu variant installs the CPU-only cntk "
                          "wheel; cntk-gpu needs CUDA 10.0 / cuDNN 7)")
    if run.requested_device == "cpu" and on_gpu:
        raise Unsupported("Keras' CNTK backend took the GPU when it was imported; set CUDA_VISIBLE_DEVICES= "
                          "to run this cell on the CPU")
    precision_rules.check("keras_cntk", run.precision, "cuda" if on_gpu else "cpu")  # (FAIRNESS.md: true-precision)
    gpu_name = None
    if on_gpu:
        properties = C.device.get_gpu_properties(device)
        capability = (properties.version_major, properties.version_minor)
        if capability > MAX_COMPUTE_CAPABILITY:
            raise Unsupported("CNTK 2.7's CUDA 10.0 / cuDNN 7 cannot target compute capability {}.{} "
                              "(up to 7.5, Turing)".format(*capability))
        gpu_name = properties.name
    resolved = "cuda" if on_gpu else "cpu"
    run.declare_sync(no_wait, "nothing: Keras 2.2's train_on_batch returns the loss as a float and "  # phrase: device-sync
                     "predict_on_batch a numpy array, each copied to the host after CNTK finished the batch")
    policy = KerasCNTKPolicy(resolved, run.precision)
    K.set_image_data_format(policy.data_format)  # NCHW, CNTK's native layout: no transposes (FAIRNESS.md: layouts)
    # phrase: seeding
    np.random.seed(SEED)  # Keras 2.2 draws its initialisers' seeds from numpy
    C.cntk_py.set_fixed_random_seed(SEED)
    # end phrase
    C.cntk_py.set_max_num_cputhreads(run.threads)  # FAIRNESS.md: same-threads; CNTK has no inter-op pool
    run.record_threads(C.cntk_py.get_max_num_cputhreads(), None, "cntk_py.set_max_num_cputhreads")
    run.set_provenance(
        framework_version="keras {} / cntk {}".format(keras.__version__, C.__version__),
        device=resolved,
        cuda_version="10.0 (cntk-gpu 2.7 build)" if on_gpu else None,
        cudnn_version="7 (cntk-gpu 2.7 build)" if on_gpu else None,
        gpu_name=gpu_name,
        extras={"keras_backend": "cntk", "layout": policy.data_format,
                "train_step": "model.train_on_batch (returns the loss as a float: one host sync per step)",
                "tf32": TF32_ON_GPU if on_gpu else TF32_ON_CPU},
    )
    return policy


def parameter_count(model) -> int:
    """Trainable weights only (Keras' count_params() adds batch norm's moving statistics)."""
    return int(sum(K.count_params(weight) for weight in model.trainable_weights))


def graph_ops(tensor) -> set:
    """The names of the CNTK operations behind a Keras tensor (read back from the graph that runs)."""
    from cntk.logging.graph import depth_first_search

    return {node.op_name for node in depth_first_search(tensor, lambda node: isinstance(node, C.Function))}


def gru_kernel(model, steps: int) -> str:
    """What runs the GRU, read from the model's CNTK graph (FAIRNESS.md: fused-rnn): Keras 2.2's K.rnn
    becomes CNTK's recurrent loop (sequence.past_value) or, unrolled, one copy of the cell per step."""
    ops = graph_ops(model.output)
    if "OptimizedRNNStack" in ops:
        return "cudnn: C.optimized_rnnstack"
    if "PastValue" in ops:
        return ("scan: Keras 2.2's K.rnn as CNTK's recurrent loop (sequence.past_value), stepped over the sequence "
                "axis by CNTK's C++ engine (Keras' CuDNNGRU is TensorFlow-only)")
    return ("python-loop: Keras 2.2's K.rnn unrolled the cell {} times in Python (no recurrent loop in "
            "the graph)").format(steps)


def count_function_builds(run: Run, model) -> None:
    """Count each build of Keras 2.2's train and predict functions (FAIRNESS.md: trace-once): Keras makes
    them on first use and keeps them, so a second build of either is a rebuild ("retrace")."""
    for attribute in ("train_function", "predict_function"):
        make = getattr(model, "_make_" + attribute)

        def counted(make=make, attribute=attribute):
            fresh = getattr(model, attribute, None) is None
            make()
            if fresh and getattr(model, attribute, None) is not None:
                run.note_trace(attribute)

        setattr(model, "_make_" + attribute, counted)
    run.set_provenance(extras={"graph": GRAPH})


def host_array(value) -> np.ndarray:
    """What predict_on_batch returned: already a numpy array on the host (FAIRNESS.md: host-copy)."""
    assert isinstance(value, np.ndarray), type(value)
    return value


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    """The loss takes one-hot targets (Keras 2.2's sparse loss has no from_logits)."""
    return np.eye(classes, dtype=np.float32)[labels]


def cross_entropy_from_logits(targets, logits):  # phrase: softmax-cross-entropy
    """Softmax folded into the loss (FAIRNESS.md: softmax-in-loss): CNTK's cross_entropy_with_softmax
    under Keras' name."""
    return K.categorical_crossentropy(targets, logits, from_logits=True)


# --- the loops ------------------------------------------------------------------------------------
# Keras 2.2's train_on_batch returns the loss as a float (one host sync per step, recorded in the
# provenance's train_step); predict_on_batch is inference mode, learning phase 0: dropout off and
# batch norm on its moving statistics (FAIRNESS.md: eval-mode). CNTK reports no peak device memory.

def count_correct(model, inputs, labels):  # phrase: eval-mode
    return int((model.predict_on_batch(inputs).argmax(axis=1) == labels).sum())


def train_and_evaluate(run: Run, policy: KerasCNTKPolicy, model, data) -> None:
    """Train a compiled model with `loop.train` on one-hot targets, then evaluate it."""
    classes = run.settings.classes
    run.set_parameter_count(parameter_count(model))
    count_function_builds(run, model)
    loop.train(run, data, lambda inputs, labels: model.train_on_batch(inputs, one_hot(labels, classes)))  # phrase: train-step
    loop.evaluate(run, data, lambda inputs, labels: count_correct(model, inputs, labels))


def parity_steps(run: Run, policy: KerasCNTKPolicy, model, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` train_on_batch steps."""
    classes = run.settings.classes
    run.set_parameter_count(parameter_count(model))
    count_function_builds(run, model)
    return loop.parity_outputs(model.predict_on_batch,
                               lambda inputs, labels: model.train_on_batch(inputs, one_hot(labels, classes)), batch)


def extract_features(run: Run, policy: KerasCNTKPolicy, model, images: np.ndarray) -> None:
    """ResNet-50's timed inference; each predict_on_batch returns numpy, so each batch ends on the host."""
    run.set_parameter_count(parameter_count(model))
    count_function_builds(run, model)
    loop.infer(run, images, model.predict_on_batch, to_host=host_array)


def parity_features(run: Run, policy: KerasCNTKPolicy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    return {"features": model.predict_on_batch(batch["x"])}


# --- the scaffold's Keras 2.2 part (workloads/common/scaffold.py) -------------------------------------

class Training(scaffold.Training):
    """A Keras 2.2 training workload: its file gives build_model (compiled: the loss and the optimizer
    are compile()'s, so make_optimizer keeps the scaffold's None) and load_canonical."""

    def select_device(self, run: Run) -> KerasCNTKPolicy:
        return select_device(run)

    def train(self, run: Run, policy: KerasCNTKPolicy, model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, data)

    def parity_steps(self, run: Run, policy: KerasCNTKPolicy, model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Keras 2.2 inference workload: its file gives build_model and load_canonical."""

    def select_device(self, run: Run) -> KerasCNTKPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: KerasCNTKPolicy, model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: KerasCNTKPolicy, model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
