"""Caffe2's device policy and its training / evaluation / inference loops, shared by the three workloads.

Caffe2 was merged into PyTorch in 2018; its Python API (caffe2.python: core, workspace, brew,
model_helper) last shipped compiled in PyPI's torch 1.10.2 wheels, for Python 3.6 to 3.9 (see
images/caffe2/FINDING.md). These rows run that API on Python 3.9. A model is two nets of operators
on named blobs in a global workspace: param_init_net (run once) and net (run per batch); numpy
arrays go in with FeedBlob and come out with FetchBlob. The workload files build the nets; the
loops here run them, on top of workloads/common/loop.py. `Training` and `FeatureExtraction` are
Caffe2's side of the scaffold every workload file fills in (workloads/common/scaffold.py).
"""
from importlib import metadata
from typing import NamedTuple

import numpy as np
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.hyperparams import SEED

# PyPI's torch 1.10.2 is a CUDA 10.2 / cuDNN 7 build: no code for GPUs past Turing (7.5).
MAX_COMPUTE_CAPABILITY = (7, 5)
# CUDA 10.2 / cuDNN 7 predate TF32 (CUDA 11, Ampere), and no GPU this build targets has it (FAIRNESS.md: true-precision)
TF32_ON_GPU = ("n/a (torch 1.10.2's Caffe2 is a CUDA 10.2 / cuDNN 7 build for GPUs up to compute capability 7.5: "
               "no TF32)")
TF32_ON_CPU = "n/a (CPU)"

# The framework option "executor" (workloads/common/options.py): Caffe2's async_scheduling executor runs
# the operators of a net as a graph, independent ones at once, on a pool of worker threads; "simple"
# runs them one after another in the calling thread. Workers: the run's threads (FAIRNESS.md:
# same-threads: its inter-op pool); 4 per device, the default of Caffe2's own data_parallel_model
# (num_threads_per_device), only where a policy is made without a run.
ASYNC_SCHEDULING, SIMPLE = "async_scheduling", "simple"
WORKERS_PER_DEVICE = 4

# Caffe2 has no tracing: each net is instantiated once (workspace.CreateNet) and run by name per batch.
GRAPH = "static nets, each instantiated once (workspace.CreateNet, counted) and run by name per batch"


class Caffe2Policy(Policy):
    """``device`` is the DeviceOption every net and blob is placed with; ``name`` says "cpu" or "cuda";
    ``operator_arguments`` go to every convolution, pooling and batch norm: on a GPU, cuDNN with its
    exhaustive algorithm search (FAIRNESS.md: autotune). ``executor`` is the nets' executor (the
    option "executor"), ``workers`` its thread pool's size (async_scheduling only)."""

    def __init__(self, device, precision: str, name: str, executor: str = ASYNC_SCHEDULING,
                 workers: int = WORKERS_PER_DEVICE):
        super().__init__(device, precision)
        self.name = name
        self.operator_arguments = {"engine": "CUDNN", "cudnn_exhaustive_search": True} if name == "cuda" else {}
        self.executor = executor
        self.workers = workers


def select_device(run: Run) -> Caffe2Policy:
    """Pick the device, refuse what it cannot do (before any work), reset the workspace."""
    # warnings and errors only; the run's threads for its OpenMP and MKL math (FAIRNESS.md: same-threads)
    workspace.GlobalInit(["caffe2", "--caffe2_log_level=2", "--caffe2_omp_num_threads={}".format(run.threads),
                          "--caffe2_mkl_num_threads={}".format(run.threads)])
    gpus = workspace.NumCudaDevices() if workspace.has_gpu_support else 0
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to Caffe2 on this host")
    on_gpu = gpus > 0 and run.requested_device != "cpu"
    precision_rules.check("caffe2", run.precision, "cuda" if on_gpu else "cpu")  # (FAIRNESS.md: true-precision)
    gpu_name, cuda_version = None, None
    if on_gpu:
        properties = workspace.GetDeviceProperties(0)
        capability = (properties["major"], properties["minor"])
        if capability > MAX_COMPUTE_CAPABILITY:
            raise Unsupported("PyPI's torch 1.10.2 (CUDA 10.2) cannot target compute capability {}.{} "
                              "(up to 7.5, Turing)".format(*capability))
        gpu_name = properties.get("name")
        cuda_version = str(workspace.GetCUDAVersion())
    device = "cuda" if on_gpu else "cpu"
    executor = run.option("executor")
    workers = run.threads
    run.record_threads(None, workers if executor == ASYNC_SCHEDULING else None,
                       "--caffe2_omp_num_threads, --caffe2_mkl_num_threads (intra-op); the async_scheduling "
                       "executor's num_workers (inter-op)",
                       note="Caffe2 reports no intra-op count back" + (
                           "" if executor == ASYNC_SCHEDULING else "; the simple executor has no inter-op pool"))
    run.declare_sync(no_wait, "nothing: workspace.RunNet returns when the net has finished (the async_scheduling "  # phrase: device-sync
                     "executor waits for its final operators' events, a GPU's included)")
    run.set_provenance(
        framework_version="caffe2 in torch {}".format(metadata.version("torch")),
        device=device,
        cuda_version=cuda_version,
        gpu_name=gpu_name,
        extras={"layout": "NCHW / TNC", "engine": "CUDNN" if on_gpu else "default (CPU)",
                "cudnn_autotune": "exhaustive search on (cudnn_exhaustive_search)" if on_gpu else "n/a",
                "tf32": TF32_ON_GPU if on_gpu else TF32_ON_CPU,
                "executor": describe_executor(executor, workers), "graph": GRAPH},
    )
    workspace.ResetWorkspace()
    # phrase: seeding
    np.random.seed(SEED)
    device_option = core.DeviceOption(caffe2_pb2.CUDA if on_gpu else caffe2_pb2.CPU, 0, random_seed=SEED)
    # end phrase
    return Caffe2Policy(device_option, run.precision, device, executor, workers)


def describe_executor(executor: str, workers: int) -> str:
    if executor == ASYNC_SCHEDULING:
        return "async_scheduling ({} worker threads; independent operators run at once)".format(workers)
    if executor == SIMPLE:
        return "simple (one operator after another, in the calling thread)"
    raise ValueError("unknown Caffe2 executor {!r}".format(executor))


def create_net(run: Run, policy: Caffe2Policy, net) -> None:  # phrase: compile-step
    """Set the net's executor (the option "executor"), then instantiate it, once (counted per net:
    FAIRNESS.md, trace-once). RunNet still returns when the net has finished: async_scheduling's Run() waits
    for the events of its final operators (a GPU's included)."""
    proto = net.Proto()
    proto.type = policy.executor
    if policy.executor == ASYNC_SCHEDULING:
        proto.num_workers = policy.workers
    workspace.CreateNet(net)
    run.note_trace(net.Name())


def feed(name: str, array: np.ndarray, device_option) -> None:
    workspace.FeedBlob(name, array, device_option=device_option)


def parameter_count(model) -> int:
    """Trainable parameters (model.params); batch norm's running statistics are computed params."""
    return int(sum(workspace.FetchBlob(str(p)).size for p in model.params))


def recurrent_kernel(net, steps: int) -> str:
    """What runs a net's recurrence, read from its operators (FAIRNESS.md: fused-rnn): cuDNN's Recurrent
    operator, or a RecurrentNetwork operator that runs its step net once per time step."""
    for op in net.Proto().op:
        on = "CUDA" if op.device_option.device_type == caffe2_pb2.CUDA else "the CPU"
        if op.type == "Recurrent":
            return "cudnn: Caffe2's Recurrent operator (cuDNN RNN), on {}".format(on)
        if op.type == "RecurrentNetwork":
            (step_net,) = [argument.n for argument in op.arg if argument.name == "step_net"]
            return ("scan: Caffe2's RecurrentNetwork operator runs its step net ({}) for each of the {} steps, "
                    "on {}").format(", ".join(step.type for step in step_net.op), steps, on)
    raise ValueError("no recurrent operator in net {}".format(net.Name()))


def count_ops(net) -> int:
    return len(net.Proto().op)


def glorot(fan_in: int, fan_out: int):
    """Glorot-uniform as a Caffe2 fill (Caffe2's XavierFill is uniform over +-sqrt(3 / fan_in))."""
    limit = float(np.sqrt(6.0 / (fan_in + fan_out)))
    return ("UniformFill", {"min": -limit, "max": limit})


# --- the loops ------------------------------------------------------------------------------------

class Classifier:
    """A Caffe2 classifier: a training net (forward, gradients, updates; blob "labels" in, blob "loss"
    out) and a test net (blob "logits" out) over the same parameter blobs, both instantiated
    (create_net), and ``feed_inputs(x)``, which puts a numpy batch's inputs into the workspace, on
    the ``policy``'s device."""

    def __init__(self, train, test, feed_inputs, policy: Caffe2Policy):
        self.train, self.test = train, test
        self.feed_inputs = feed_inputs
        self.policy = policy
        self.device = policy.device

    def step(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:  # phrase: train-step
        """One optimizer step; its loss, copied from its blob: RunNet has already waited for the net
        (create_net), so the copy of one number adds no wait, and the validity gate sees every step's."""
        self.feed_inputs(x)
        feed("labels", y.astype(np.int32), self.device)  # SoftmaxWithLoss takes int32 labels
        workspace.RunNet(self.train.net)
        return workspace.FetchBlob("loss")

    def forward(self, x: np.ndarray) -> np.ndarray:  # phrase: eval-mode
        """Logits from the test net: dropout off, is_test=1 (FAIRNESS.md: eval-mode)."""
        self.feed_inputs(x)
        workspace.RunNet(self.test.net)
        return workspace.FetchBlob("logits").copy()

    def count_correct(self, x: np.ndarray, y: np.ndarray) -> int:
        return int((self.forward(x).argmax(axis=1) == y).sum())


def train_and_evaluate(run: Run, policy: Caffe2Policy, classifier: Classifier, data) -> None:
    """Train every epoch, then evaluate the test set. Caffe2 reports no peak device memory."""
    run.set_parameter_count(parameter_count(classifier.train))
    loop.train(run, data, classifier.step)
    loop.evaluate(run, data, classifier.count_correct)


def parity_steps(run: Run, policy: Caffe2Policy, classifier: Classifier, batch: dict) -> dict:
    """The logits on the canonical weights, then after canonical.PARITY_STEPS steps on the batch."""
    run.set_parameter_count(parameter_count(classifier.train))
    return loop.parity_outputs(classifier.forward, classifier.step, batch)


def extract_features(run: Run, policy: Caffe2Policy, model, images: np.ndarray) -> None:
    """The warm pass then the timed pass of a forward-only net (blob "images" in, "features" out; no
    gradient operators: FAIRNESS.md, eval-mode). RunNet returns when the net's operators have finished;
    the features blob is fetched to the host inside every timed batch (FAIRNESS.md: host-copy)."""
    run.set_parameter_count(parameter_count(model))

    def forward(batch: np.ndarray) -> str:
        feed("images", batch, policy.device)
        workspace.RunNet(model.net)
        return "features"

    loop.infer(run, images, forward, to_host=workspace.FetchBlob)  # a numpy copy of the blob


def parity_features(run: Run, policy: Caffe2Policy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    feed("images", batch["x"], policy.device)
    workspace.RunNet(model.net)
    return {"features": workspace.FetchBlob("features").copy()}


# --- the scaffold's Caffe2 part (workloads/common/scaffold.py) ----------------------------------------

class FeatureNet(NamedTuple):
    """A forward-only Caffe2 model (its ModelHelper: blob "images" in, "features" out) and the policy
    whose device its blobs live on."""
    model: object
    policy: Caffe2Policy


class Training(scaffold.Training):
    """A Caffe2 training workload: its file gives build_model (a Classifier: the training net, with
    its loss, gradient and update operators, and the test net, over the same blobs; so
    make_optimizer keeps the scaffold's None) and load_canonical."""

    def select_device(self, run: Run) -> Caffe2Policy:
        return select_device(run)

    def train(self, run: Run, policy: Caffe2Policy, classifier: Classifier, optimizer, data) -> None:
        train_and_evaluate(run, policy, classifier, data)

    def parity_steps(self, run: Run, policy: Caffe2Policy, classifier: Classifier, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, classifier, batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Caffe2 inference workload: its file gives build_model (a FeatureNet) and load_canonical."""

    def select_device(self, run: Run) -> Caffe2Policy:
        return select_device(run)

    def extract(self, run: Run, policy: Caffe2Policy, net: FeatureNet, images: np.ndarray) -> None:
        extract_features(run, policy, net.model, images)

    def parity_features(self, run: Run, policy: Caffe2Policy, net: FeatureNet, batch: dict) -> dict:
        return parity_features(run, policy, net.model, batch)
