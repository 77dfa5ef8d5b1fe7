"""Caffe2's device, precision and provenance switches, shared by the three Caffe2 workloads.

Caffe2 was merged into PyTorch in 2018; its Python API (caffe2.python: core, workspace, brew,
model_helper) last shipped compiled in PyPI's torch 1.10.2 wheels, for Python 3.6 to 3.9 (see
images/caffe2/FINDING.md). These rows run that API on Python 3.9. A model is two nets of operators
on named blobs in a global workspace: param_init_net (run once) and net (run per batch); numpy
arrays go in with FeedBlob and come out with FetchBlob.
"""
from importlib import metadata

import numpy as np
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED

# PyPI's torch 1.10.2 is a CUDA 10.2 / cuDNN 7 build: no code for GPUs past Turing (7.5).
MAX_COMPUTE_CAPABILITY = (7, 5)


def select_device(run: Run):
    """Pick the device, refuse what it cannot do (before any work); returns its DeviceOption."""
    workspace.GlobalInit(["caffe2", "--caffe2_log_level=2"])  # warnings and errors only
    gpus = workspace.NumCudaDevices() if workspace.has_gpu_support else 0
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to Caffe2 on this host")
    on_gpu = gpus > 0 and run.requested_device != "cpu"
    if run.precision != "fp32":
        raise Unsupported("{}: the Caffe2 rows run fp32 only (Caffe2's fp16 needs FloatToHalf casts and "
                          "fp16 operators throughout; CUDA 10.2 predates TF32 and bf16)".format(run.precision))
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
    run.set_provenance(
        framework_version="caffe2 in torch {}".format(metadata.version("torch")),
        device=device,
        cuda_version=cuda_version,
        gpu_name=gpu_name,
        extras={"layout": "NCHW / TNC", "engine": "CUDNN" if on_gpu else "default (CPU)",
                "cudnn_autotune": "exhaustive search on (cudnn_exhaustive_search)" if on_gpu else "n/a"},
    )
    workspace.ResetWorkspace()
    np.random.seed(SEED)
    return core.DeviceOption(caffe2_pb2.CUDA if on_gpu else caffe2_pb2.CPU, 0, random_seed=SEED)


def arguments(device_option) -> dict:
    """Operator arguments for this device: cuDNN with its algorithm search on a GPU (lesson 1)."""
    if device_option.device_type == caffe2_pb2.CUDA:
        return {"engine": "CUDNN", "cudnn_exhaustive_search": True}
    return {}


def feed(name: str, array: np.ndarray, device_option) -> None:
    workspace.FeedBlob(name, array, device_option=device_option)


def parameter_count(model) -> int:
    """Trainable parameters (model.params); batch norm's running statistics are computed params."""
    return int(sum(workspace.FetchBlob(str(p)).size for p in model.params))


def glorot(fan_in: int, fan_out: int):
    """Glorot-uniform as a Caffe2 fill (Caffe2's XavierFill is uniform over +-sqrt(3 / fan_in))."""
    limit = float(np.sqrt(6.0 / (fan_in + fan_out)))
    return ("UniformFill", {"min": -limit, "max": limit})
