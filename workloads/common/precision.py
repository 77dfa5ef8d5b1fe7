"""What each precision needs of the device, and what each framework refuses beyond that: one table.

A precision a device or framework cannot honour is recorded as unsupported, never silently
downgraded (docs/FAIRNESS.md: true-precision). The rules below are the same for every framework;
a framework that cannot follow one says so in EXCEPTIONS, with the reason its cells record.
Each runtime's `select_device(run)` calls `check` once it knows the device its framework sees
(and, on a GPU, that GPU's compute capability), before any work.

Keyed by runtime (`workloads/runtime/<name>.py`): a runtime that serves several frameworks (MXNet's
Gluon and Module rows, the Keras 3 rows) refuses the same things for all of them. Python 3.6
compatible: the CNTK runtimes import it.
"""
from typing import NamedTuple, Optional, Tuple

from workloads.common.harness import Unsupported

CPU, CUDA = "cpu", "cuda"
ANY_DEVICE = "any"

NEEDS_GPU = "{precision} needs a CUDA GPU; this cell runs on the CPU"
NEEDS_CAPABILITY = "{precision} needs compute capability {needed} or newer; this GPU has {major}.{minor}"


class Needs(NamedTuple):
    """What a precision needs wherever it runs."""
    gpu: bool  # refused on the CPU
    compute_capability: Optional[Tuple[int, int]]  # the oldest GPU architecture that has it; None: any
    why: str


RULES = {
    "fp32": Needs(gpu=False, compute_capability=None, why="true fp32 runs on every device"),
    "tf32": Needs(gpu=True, compute_capability=(8, 0),
                  why="TF32 is a tensor-core mode of NVIDIA GPUs from Ampere (8.0) on"),
    "fp16": Needs(gpu=True, compute_capability=None,
                  why="mixed fp16 with loss scaling is a GPU mode: CPU kernels would run fp32 or emulate it"),
    "bf16": Needs(gpu=False, compute_capability=(8, 0),
                  why="bf16 tensor cores came with Ampere (8.0); CPU kernels run bf16 where the framework has them"),
}
REDUCED = ("tf32", "fp16", "bf16")  # every precision but fp32


class Refusal(NamedTuple):
    """Precisions a framework refuses beyond RULES, on one device or any, and the reason its cells
    record ("{precision}" is filled in). A framework's refusals are checked in the order listed,
    before the rules."""
    precisions: Tuple[str, ...]
    reason: str
    device: str = ANY_DEVICE


class Exceptions(NamedTuple):
    """One framework's departures from RULES."""
    refusals: Tuple[Refusal, ...] = ()
    # Why the framework cannot tell a GPU's compute capability, where it cannot: the capability rule
    # is then not checked for it (the host's max_compute_capability check still is).
    capability_unknown: str = ""


EXCEPTIONS = {
    "caffe2": Exceptions(refusals=(
        Refusal(REDUCED, "{precision}: the Caffe2 rows run fp32 only (Caffe2's fp16 needs FloatToHalf casts and "
                         "fp16 operators throughout; CUDA 10.2 predates TF32 and bf16)"),)),
    "chainer": Exceptions(refusals=(
        Refusal(REDUCED, NEEDS_GPU + " (NumPy)", device=CPU),
        Refusal(("tf32",), "Chainer 7.8.1 and CuPy 7.8 have no TF32 switch (CUPY_TF32 came with CuPy 8): without "
                           "NVIDIA_TF32_OVERRIDE=0 cuDNN 8 may run the fp32 convolutions as TF32 on Ampere while "
                           "cuBLAS keeps the matmuls fp32, a mix that is not a tf32 cell"),
        Refusal(("bf16",), "Chainer 7.8.1 has no bf16 switch (its CuPy and cuDNN predate it)"),
        Refusal(("fp16",), "fp16 (Chainer's 'mixed16' dtype with loss scaling) is not wired in this benchmark"))),
    "cntk": Exceptions(refusals=(
        Refusal(REDUCED, "{precision}: the CNTK rows run fp32 only (CNTK 2.7 predates TF32 and bf16, and its fp16 "
                         "is not exposed through these layers and learners)"),)),
    "keras_cntk": Exceptions(refusals=(
        Refusal(REDUCED, "{precision}: Keras 2.2 has no mixed-precision API and CNTK 2.7 predates TF32 and bf16; "
                         "these rows run fp32 only"),)),
    "mindspore": Exceptions(refusals=(
        Refusal(REDUCED, "{precision} is not implemented for MindSpore (fp32 only)"),)),
    "mxnet": Exceptions(refusals=(
        Refusal(REDUCED, NEEDS_GPU, device=CPU),  # bf16 too: MXNet 1.9.1 has no bf16 CPU path wired here
        Refusal(("tf32",), "MXNet 1.9.1 has no TF32 switch of its own: without NVIDIA_TF32_OVERRIDE=0 cuDNN 8 and "
                           "cuBLAS 11 choose by their own defaults (cuDNN's fp32 convolutions may use TF32 on "
                           "Ampere and newer), so a tf32 cell could not say what ran"),
        # MXNet 1.9.1 has AMP (mxnet.contrib.amp) for fp16 and no bf16 GPU path; not wired up here.
        Refusal(("fp16", "bf16"), "{precision} is not implemented for MXNet (fp32 only)"))),
    "onnxruntime": Exceptions(
        refusals=(Refusal(("fp16", "bf16"), "{precision}: ONNX Runtime runs the graph in the precision it was "
                                            "exported in (fp32); a reduced-precision graph needs a separate "
                                            "conversion of the model, not done here"),),
        capability_unknown="ONNX Runtime has no API for the GPU's compute capability; its CUDA provider's use_tf32 "
                           "is what a tf32 cell sets"),
    "paddle": Exceptions(refusals=(
        # paddle.amp.auto_cast(dtype="bfloat16") on the CPU runs every kernel in float32 (checked with
        # Paddle 3.3.1): recording that as bf16 would be a false figure.
        Refusal(REDUCED, "{precision} needs a CUDA GPU with Paddle (its CPU kernels stay float32 under auto_cast)",
                device=CPU),)),
    "tensorflow": Exceptions(refusals=(
        Refusal(("fp16", "bf16"), "{precision}: these low-level TensorFlow rows run fp32 and tf32 only (TensorFlow's "
                                  "mixed precision is the Keras policy API; the keras-tf rows measure it)"),)),
}


def check(runtime: str, precision: str, device: str, capability: Optional[Tuple[int, int]] = None) -> None:
    """Raise Unsupported if `runtime`'s framework cannot run `precision` on `device` ("cpu" or "cuda")
    whose compute capability (major, minor) is `capability` (on a GPU; None on the CPU). The
    framework's own refusals come first, in their order, then the rules."""
    if precision not in RULES:
        raise ValueError("unknown precision {!r}; one of {}".format(precision, ", ".join(RULES)))
    if device not in (CPU, CUDA):
        raise ValueError("device must be {!r} or {!r}, not {!r}".format(CPU, CUDA, device))
    exceptions = EXCEPTIONS.get(runtime, Exceptions())
    for refusal in exceptions.refusals:
        if precision in refusal.precisions and refusal.device in (ANY_DEVICE, device):
            raise Unsupported(refusal.reason.format(precision=precision))
    needs = RULES[precision]
    if needs.gpu and device == CPU:
        raise Unsupported(NEEDS_GPU.format(precision=precision))
    if device == CUDA and needs.compute_capability is not None and not exceptions.capability_unknown:
        if capability is None:
            raise ValueError("{} on a GPU: pass its compute capability, or declare in EXCEPTIONS why {} cannot "
                             "tell it".format(precision, runtime))
        major, minor = (int(part) for part in capability)
        if (major, minor) < needs.compute_capability:
            raise Unsupported(NEEDS_CAPABILITY.format(precision=precision, needed="{}.{}".format(
                *needs.compute_capability), major=major, minor=minor))
