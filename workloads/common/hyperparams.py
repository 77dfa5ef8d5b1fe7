"""The one source of every workload setting (MISSION.md), shared by all frameworks.

Profile ``full`` is exactly the original study's settings. Profile ``smoke`` runs the same
models on a few batches so that one cell takes seconds on a CPU; it changes only how much work
is done (batches, epochs), never the model or the optimizer.
"""
import dataclasses  # novermin (Python 3.6 images install the dataclasses backport)
from dataclasses import dataclass  # novermin
from typing import Optional

WORKLOADS = ("cnn", "resnet50", "gru")
PROFILES = ("smoke", "full")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
DATA_SOURCES = ("real", "synthetic")

SEED = 0


@dataclass(frozen=True)
class CNNSettings:
    """VGG-style CNN on CIFAR-10 (training)."""

    image_shape: tuple = (3, 32, 32)  # NCHW, matches cuDNN's preferred layout
    classes: int = 10
    conv1_filters: int = 50
    conv2_filters: int = 100
    dense_units: int = 512
    dropout_conv: float = 0.25
    dropout_dense: float = 0.5
    learning_rate: float = 0.01
    momentum: float = 0.9  # plain momentum, no "unit gain"
    batch_size: int = 64
    epochs: int = 10
    max_train_batches: Optional[int] = None  # per epoch; None = every complete batch
    max_eval_batches: Optional[int] = None
    # the published reference parameter count, checked by the tests for each framework
    parameter_count: int = 3_441_592


@dataclass(frozen=True)
class ResNet50Settings:
    """ResNet-50 v1.5 feature extraction (inference), cut after the global average pool."""

    image_shape: tuple = (3, 224, 224)
    feature_size: int = 2048
    batch_size: int = 32
    batches: int = 40  # 40 x 32 = 1280 images
    warmup_batches: int = 1  # one untimed warm pass over this many batches first
    parameter_count: int = 23_508_032  # without the 1000-way classifier


@dataclass(frozen=True)
class GRUSettings:
    """GRU sentiment classifier on IMDB (training)."""

    vocabulary: int = 30_000
    sequence_length: int = 150
    embedding_size: int = 125
    hidden_size: int = 100
    classes: int = 2
    start_char: int = 1
    oov_char: int = 2
    index_from: int = 3
    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    batch_size: int = 64
    epochs: int = 3
    max_train_batches: Optional[int] = None
    max_eval_batches: Optional[int] = None
    parameter_count: int = 3_818_302  # cuDNN-style GRU: two bias vectors per gate


_FULL = {"cnn": CNNSettings(), "resnet50": ResNet50Settings(), "gru": GRUSettings()}

_SMOKE_OVERRIDES = {
    "cnn": dict(epochs=1, max_train_batches=8, max_eval_batches=8),
    "resnet50": dict(batches=2),
    "gru": dict(epochs=1, max_train_batches=8, max_eval_batches=8),
}


def settings(workload: str, profile: str):
    """Return the frozen settings of ``workload`` under ``profile``."""
    if workload not in _FULL:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    base = _FULL[workload]
    if profile == "smoke":
        return dataclasses.replace(base, **_SMOKE_OVERRIDES[workload])
    return base
