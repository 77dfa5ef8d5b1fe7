"""CNTK's device policy, its training / evaluation / inference loops, and the numpy layout conversions.

The three CNTK workload files build their networks and learners and hand them here: the loops are
written once, on top of workloads/common/loop.py.

CNTK 2.7 (2019) is the last release: Python 3.6 at most, CUDA 10.0 / cuDNN 7. Everything in this
file and in the three CNTK workload files runs on Python 3.6 (no f-string "=", no walrus, no
`from __future__ import annotations`). The layout conversions at the bottom are plain numpy
functions that never touch CNTK, so the host's tests check them without CNTK installed (they import
these modules over a stand-in `cntk` module that refuses every use: nothing runs CNTK at import).
`Training` and `FeatureExtraction` are CNTK's side of the scaffold every workload file fills in
(workloads/common/scaffold.py); what a CNTK workload builds is a `Network`.

CNTK's libraries are linked against OpenMPI 1.10 by name (libmpi.so.12, libmpi_cxx.so.1), needed
even in a single process. The workload files import this module before `import cntk`, so that a
host without them gets an "unsupported here" cell that says how to provide them, not a crash.
"""
import abc
from typing import NamedTuple, Optional, Tuple

import numpy as np

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED

MPI_MISSING = ("CNTK 2.7 cannot load {}: it is linked against OpenMPI 1.10 (libmpi.so.12, libmpi_cxx.so.1). "
               "On a host: install an OpenMPI runtime (libopenmpi3), run images/cntk/openmpi-compat.sh DIR, which "
               "links it under those names, and put DIR on LD_LIBRARY_PATH; or run the cell in its image")

try:
    import cntk as C
except ImportError as error:
    if "libmpi" not in str(error):
        raise
    raise Unsupported(MPI_MISSING.format(str(error).split(": cannot open shared object file")[0])) from None

# CUDA 10.0 and cuDNN 7 know no GPU past Turing (compute capability 7.5): the image's metadata says
# so (max_compute_capability), and the device check below refuses a newer GPU before any work.
MAX_COMPUTE_CAPABILITY = (7, 5)


# --- device, precision, provenance ----------------------------------------------------------------

# CUDA 10.0 / cuDNN 7 predate TF32 (CUDA 11, Ampere), and no GPU CNTK can target has it (FAIRNESS.md: true-precision)
TF32_ON_GPU = "n/a (cntk-gpu 2.7 is a CUDA 10.0 / cuDNN 7 build for GPUs up to compute capability 7.5: no TF32)"
TF32_ON_CPU = "n/a (CPU)"

# CNTK builds a static graph once, in Python; it compiles it into its C++ network on the first
# minibatch (inside the first step's time). Classifier counts its Trainer, the one graph it trains.
GRAPH = "static graph built once in Python (one Trainer); CNTK compiles it on the first minibatch"


class CNTKPolicy(Policy):
    """``device`` is "cpu" or "cuda" (CNTK's default device is set to it). Whether the GRU can run
    cuDNN's optimized_rnnstack is probed, not assumed (choose_gru, FAIRNESS.md: fused-rnn): where
    select_device was asked to, ``fused_gru`` and ``gru_kernel`` hold what it found (else None)."""

    def __init__(self, device, precision: str):
        super().__init__(device, precision)
        self.fused_gru = None  # type: Optional[bool]
        self.gru_kernel = None  # type: Optional[str]


def select_device(run: Run, probe_gru: bool = False) -> CNTKPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the switches; with
    ``probe_gru``, find which GRU runs on it (choose_gru)."""
    gpus = [d for d in C.device.all_devices() if d.type() == C.device.DeviceKind.GPU]
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to CNTK on this host (the cpu variant installs the CPU-only "
                          "cntk wheel; cntk-gpu needs CUDA 10.0 / cuDNN 7)")
    on_gpu = bool(gpus) and run.requested_device != "cpu"
    precision_rules.check("cntk", run.precision, "cuda" if on_gpu else "cpu")  # fp32 only (FAIRNESS.md: true-precision)
    gpu_name = None
    if on_gpu:
        properties = C.device.get_gpu_properties(gpus[0])
        capability = (properties.version_major, properties.version_minor)
        if capability > MAX_COMPUTE_CAPABILITY:
            raise Unsupported("CNTK 2.7's CUDA 10.0 / cuDNN 7 cannot target compute capability {}.{} "
                              "(up to 7.5, Turing)".format(*capability))
        gpu_name = properties.name
        C.device.try_set_default_device(gpus[0])  # phrase: device-placement
    else:
        C.device.try_set_default_device(C.device.cpu())
    C.cntk_py.set_fixed_random_seed(SEED)  # phrase: seeding
    C.cntk_py.set_max_num_cputhreads(run.threads)  # FAIRNESS.md: same-threads; CNTK has no inter-op pool
    run.record_threads(C.cntk_py.get_max_num_cputhreads(), None, "cntk_py.set_max_num_cputhreads")
    if on_gpu:
        run.declare_sync(_sync, "the last step's output copied to the host (its loss, or the features): CNTK's "
                         "Python API has no device-wide synchronise, and each step depends on the one before")
    else:
        run.declare_sync(no_wait, "nothing: CNTK computes on the CPU in the calling thread, each call returning "
                         "finished")
    device = "cuda" if on_gpu else "cpu"
    run.set_provenance(
        framework_version=C.__version__,
        device=device,
        cuda_version="10.0 (cntk-gpu 2.7 build)" if on_gpu else None,
        cudnn_version="7 (cntk-gpu 2.7 build)" if on_gpu else None,
        gpu_name=gpu_name,
        extras={"layout": "NCHW / sequence axis (CNTK's only layouts)",
                "cudnn_autotune": "CNTK's default (cuDNN algorithms chosen by measuring)" if on_gpu else "n/a",
                "tf32": TF32_ON_GPU if on_gpu else TF32_ON_CPU},
    )
    policy = CNTKPolicy(device, run.precision)
    if probe_gru:
        policy.fused_gru, policy.gru_kernel = choose_gru(policy)
    return policy


_pending = []  # how to read back the last value a step left on the device, for _sync


def keep_for_sync(read_back) -> None:
    """Remember how to copy a step's output to the host (``read_back()``): that copy is how CNTK
    waits for the GPU."""
    _pending[:] = [read_back]


def _sync() -> None:  # phrase: device-sync
    """CNTK has no device-wide synchronise in Python: copying the last result to the host waits for it."""
    if _pending:
        _pending[0]()


def minibatch_loss(trainer) -> float:
    """The last step's loss, copied to the host."""
    return trainer.previous_minibatch_loss_average


def parameter_count(function) -> int:
    """Trainable parameters; batch norm's running statistics are CNTK constants, not parameters."""
    return int(sum(int(np.prod(p.shape)) for p in function.parameters))


def graph_ops(function) -> set:
    """The names of the operations in a CNTK graph (what actually runs, read back from the graph)."""
    from cntk.logging.graph import depth_first_search

    return {node.op_name for node in depth_first_search(function, lambda node: isinstance(node, C.Function))}


def count_ops(function) -> int:
    """How many primitive operations a CNTK graph holds (its Combine nodes aside)."""
    from cntk.logging.graph import depth_first_search

    return len(depth_first_search(function, lambda node: isinstance(node, C.Function) and node.op_name != "Combine"))


def cudnn_gru_problem() -> Optional[str]:
    """Run a tiny optimized_rnnstack(recurrent_op='gru') on the default device: None when it runs,
    else the first line of what CNTK raised (its CPU build has no kernel: "Feature Not Implemented")."""
    steps = C.sequence.input_variable(2)
    weight = C.parameter((C.InferredDimension, 2), init=0.1)
    gru = C.optimized_rnnstack(steps, weight, 2, 1, recurrent_op="gru")
    try:
        gru.eval({steps: [np.ones((3, 2), np.float32)]})
    except RuntimeError as error:
        return str(error).strip().splitlines()[0]
    return None


def choose_gru(policy: CNTKPolicy) -> Tuple[bool, str]:
    """(fused, gru_kernel): cuDNN's optimized_rnnstack where it runs on this device, else the
    canonical cell written out in layers.Recurrence; the gru_kernel text says what ran and why
    (FAIRNESS.md: fused-rnn). The workload checks its built graph against it (check_gru_graph)."""
    problem = cudnn_gru_problem()
    if problem is None:
        return True, "cudnn: C.optimized_rnnstack(recurrent_op='gru'), cuDNN's fused GRU"
    return False, ("scan: the canonical cell in layers.Recurrence, stepped over the sequence axis by CNTK's C++ "
                   "recurrent loop (PastValue); optimized_rnnstack raised on the {}: {}".format(policy.device, problem))


def check_gru_graph(logits, fused: bool) -> None:
    """The built graph holds the GRU choose_gru named: OptimizedRNNStack, or a PastValue loop without it."""
    ops = graph_ops(logits)
    assert ("OptimizedRNNStack" in ops) == fused and (fused or "PastValue" in ops), sorted(ops)


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    """cross_entropy_with_softmax takes one-hot targets: integer labels become float32 rows."""
    return np.eye(classes, dtype=np.float32)[labels]


# --- the loops ------------------------------------------------------------------------------------

class Classifier:
    """A CNTK network of one input, its logits, and the Trainer that fits them.

    ``loss(logits, labels)`` is the workload's loss on one-hot labels (per sample: the Trainer
    averages the batch), ``learner`` its optimizer over ``logits.parameters``. A learner built for
    one batch size (one that divides a summed gradient by it) passes ``batch_size``, and every step
    checks it. The Trainer is CNTK's one graph build, counted (``run.note_trace("train_graph")``:
    FAIRNESS.md, trace-once).
    """

    def __init__(self, run: Run, logits, loss, learner, batch_size=None):
        (self.inputs,) = logits.arguments  # the images or the token sequences
        self.logits = logits
        self.classes = logits.shape[-1]
        self.labels = C.input_variable(self.classes, name="labels")
        self.trainer = C.Trainer(logits, (loss(logits, self.labels), None), [learner])
        run.note_trace("train_graph")
        run.set_provenance(extras={"graph": GRAPH})
        self.batch_size = batch_size

    def feed(self, x: np.ndarray):
        """A numpy batch in the input's dtype (token indices become float32, CNTK's input type)."""
        return x.astype(self.inputs.dtype, copy=False)

    def step(self, x: np.ndarray, y: np.ndarray):  # phrase: train-step
        """One optimizer step; returns the Trainer, which holds its loss (read by train_and_evaluate)."""
        assert self.batch_size is None or len(x) == self.batch_size, (len(x), self.batch_size)
        self.trainer.train_minibatch({self.inputs: self.feed(x), self.labels: one_hot(y, self.classes)})
        keep_for_sync(lambda: minibatch_loss(self.trainer))
        return self.trainer

    def forward(self, x: np.ndarray) -> np.ndarray:  # phrase: eval-mode
        """Logits in inference mode: eval() runs no dropout (FAIRNESS.md: eval-mode)."""
        return self.logits.eval({self.inputs: self.feed(x)})

    def count_correct(self, x: np.ndarray, y: np.ndarray) -> int:
        return int((self.forward(x).argmax(axis=1) == y).sum())


def train_and_evaluate(run: Run, policy: CNTKPolicy, classifier: Classifier, data) -> None:
    """Train every epoch, then evaluate the test set. CNTK reports no peak device memory."""
    run.set_parameter_count(parameter_count(classifier.logits))
    # CNTK's Python API has no device-side sum: every step's loss is read on the host for the
    # validity gate (docs/FAIRNESS.md: every-step-finite; what remains unequal says so)
    loop.train(run, data, classifier.step, loss_value=minibatch_loss,
               add_losses=lambda total, trainer: (total or 0.0) + minibatch_loss(trainer), sum_value=float)
    loop.evaluate(run, data, classifier.count_correct)


def parity_steps(run: Run, policy: CNTKPolicy, classifier: Classifier, batch: dict) -> dict:
    """The logits on the canonical weights, then after canonical.PARITY_STEPS steps on the batch."""
    run.set_parameter_count(parameter_count(classifier.logits))
    return loop.parity_outputs(classifier.forward, classifier.step, batch)


def extract_features(run: Run, policy: CNTKPolicy, features, images: np.ndarray) -> None:
    """The warm pass then the timed pass; eval() is inference, with no gradients (FAIRNESS.md: eval-mode).
    Each eval copies the features into a numpy array on the host (FAIRNESS.md: host-copy), so the
    device has finished when it returns: to_host only checks that it is numpy."""
    (inputs,) = features.arguments
    run.set_parameter_count(parameter_count(features))
    loop.infer(run, images, lambda batch: features.eval({inputs: batch}), to_host=host_array)


def host_array(value) -> np.ndarray:
    """What CNTK's eval returned for one dense output: already a numpy array on the host."""
    assert isinstance(value, np.ndarray), type(value)
    return value


def parity_features(run: Run, policy: CNTKPolicy, features, batch: dict) -> dict:
    (inputs,) = features.arguments
    run.set_parameter_count(parameter_count(features))
    return {"features": features.eval({inputs: batch["x"]})}


# --- the scaffold's CNTK part (workloads/common/scaffold.py) ------------------------------------------

class Network(NamedTuple):
    """What a CNTK workload builds: its output function (the logits, or ResNet-50's features) of its
    one input, its parameters by name (what load_canonical fills in), and the batch size a learner
    built for one batch size is made for (None: any)."""
    output: object
    parameters: dict
    batch_size: Optional[int] = None


class Training(scaffold.Training):
    """A CNTK training workload: its file gives build_model (a Network), load_canonical, make_learner
    and loss; the optimizer the scaffold makes is the Classifier, CNTK's Trainer over that learner."""

    @abc.abstractmethod
    def make_learner(self, network: Network, run: Run, policy: CNTKPolicy):
        """The CNTK learner over ``network.output.parameters``."""

    @abc.abstractmethod
    def loss(self, logits, labels):
        """The loss on one-hot labels, per sample (the Trainer averages the batch)."""

    def select_device(self, run: Run) -> CNTKPolicy:
        return select_device(run)

    def make_optimizer(self, network: Network, run: Run, policy: CNTKPolicy) -> "Classifier":
        return Classifier(run, network.output, self.loss, self.make_learner(network, run, policy), network.batch_size)

    def train(self, run: Run, policy: CNTKPolicy, network: Network, classifier: "Classifier", data) -> None:
        train_and_evaluate(run, policy, classifier, data)

    def parity_steps(self, run: Run, policy: CNTKPolicy, network: Network, classifier: "Classifier",
                     batch: dict) -> dict:
        return parity_steps(run, policy, classifier, batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A CNTK inference workload: its file gives build_model (a Network of the features) and load_canonical."""

    def select_device(self, run: Run) -> CNTKPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: CNTKPolicy, network: Network, images: np.ndarray) -> None:
        extract_features(run, policy, network.output, images)

    def parity_features(self, run: Run, policy: CNTKPolicy, network: Network, batch: dict) -> dict:
        return parity_features(run, policy, network.output, batch)


# --- canonical layouts -> CNTK's, numpy only ------------------------------------------------------
# CNTK keeps tensors column-major and shows them to Python with their axes reversed, so a Python
# (rows, columns) array is what C++ sees as columns x rows: numpy's row-major order is the memory
# order. Convolution kernels are (out, in, height, width), the canonical OIHW; dense kernels are
# (in, out), used as times(x, W) = x @ W, the canonical form.

def conv_bias(bias: np.ndarray) -> np.ndarray:
    """Convolution2D's bias is (out, 1, 1), broadcast over height and width."""
    return np.ascontiguousarray(bias.reshape(-1, 1, 1))


def cudnn_gru_size(inputs: int, hidden: int) -> int:
    """Floats in cuDNN's packed parameters of one unidirectional GRU layer: 6 matrices, 6 biases."""
    return 3 * hidden * inputs + 3 * hidden * hidden + 6 * hidden


def pack_cudnn_gru(kernel: np.ndarray, recurrent_kernel: np.ndarray, input_bias: np.ndarray,
                   recurrent_bias: np.ndarray) -> np.ndarray:
    """Canonical GRU weights -> the weight of C.optimized_rnnstack(recurrent_op='gru'), (size / hidden, hidden).

    optimized_rnnstack hands its weight to cuDNN as one flat buffer in cuDNN's own order: the
    input matrices W_r, W_z, W_n (each hidden x inputs, row-major), the recurrent matrices
    R_r, R_z, R_n (hidden x hidden), then the biases b_Wr, b_Wz, b_Wn, b_Rr, b_Rz, b_Rn. cuDNN's
    gate order is the canonical r, z, n, and its GRU is the canonical reset-after form with two
    biases per gate. The canonical kernels are (in, 3*hidden) for x @ W, so each gate block is
    transposed. The Python shape is (size / hidden, hidden): its row-major order is the buffer.
    """
    hidden = recurrent_kernel.shape[0]
    matrices = np.split(kernel, 3, axis=1) + np.split(recurrent_kernel, 3, axis=1)
    flat = np.concatenate([block.T.ravel() for block in matrices] + [input_bias.ravel(), recurrent_bias.ravel()])
    assert flat.size == cudnn_gru_size(kernel.shape[0], hidden)
    return np.ascontiguousarray(flat.reshape(-1, hidden), dtype=np.float32)


def unpack_cudnn_gru(packed: np.ndarray, inputs: int, hidden: int):
    """The inverse of pack_cudnn_gru: (kernel, recurrent_kernel, input_bias, recurrent_bias), canonical."""
    flat = np.asarray(packed).ravel()
    assert flat.size == cudnn_gru_size(inputs, hidden), (flat.size, inputs, hidden)
    sizes = [hidden * inputs] * 3 + [hidden * hidden] * 3 + [hidden] * 6
    pieces = np.split(flat, np.cumsum(sizes)[:-1])
    kernel = np.concatenate([p.reshape(hidden, inputs).T for p in pieces[0:3]], axis=1)
    recurrent_kernel = np.concatenate([p.reshape(hidden, hidden).T for p in pieces[3:6]], axis=1)
    return kernel, recurrent_kernel, np.concatenate(pieces[6:9]), np.concatenate(pieces[9:12])
