"""The CNN workload: a VGG-style network trained on CIFAR-10 (the study's settings)."""
from dataclasses import dataclass  # novermin
from typing import Optional

from workloads.common.declaration import (FIRST_STEP, IMAGES, SAMPLES_PER_S, STEADY_SAMPLES_PER_S, TEST_ACCURACY,
                                          TRAIN_TIME, TRAINING, Workload)
from workloads.common.flops import FlopTrace


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
    # the reference model's parameter count, checked by the tests for each framework
    parameter_count: int = 3_441_592


def canonical_layers(layers, s: CNNSettings) -> None:
    """The parity check's canonical parameters, layer by layer (workloads/common/canonical.py)."""
    channels, height, width = s.image_shape
    layers.conv("conv1", s.conv1_filters, channels, 3)
    layers.conv("conv2", s.conv1_filters, s.conv1_filters, 3)
    layers.conv("conv3", s.conv2_filters, s.conv1_filters, 3)
    layers.conv("conv4", s.conv2_filters, s.conv2_filters, 3)
    # two 2x2 poolings after "same" convolutions: dense1 reads conv4's maps at a quarter of the
    # height and width, flattened in NCHW order
    layers.dense("dense1", s.conv2_filters * (height // 4) * (width // 4), s.dense_units)
    layers.dense("dense2", s.dense_units, s.classes)


def flop_model(s: CNNSettings) -> FlopTrace:
    """The forward pass in shapes (workloads/common/flops.py): FLOPs per sample."""
    trace = FlopTrace(s.image_shape)
    for filters in (s.conv1_filters, s.conv2_filters):
        trace.conv(filters, 3)
        trace.conv(filters, 3)
        trace.pool(2, 2)
    trace.flatten()
    trace.dense(s.dense_units)
    trace.dense(s.classes)
    return trace


WORKLOAD = Workload(
    name="cnn",
    title="CNN — CIFAR-10 training",
    kind=TRAINING,
    order=1,
    settings=CNNSettings,
    smoke=dict(epochs=1, max_train_batches=8, max_eval_batches=8),
    metrics=(STEADY_SAMPLES_PER_S, FIRST_STEP, TRAIN_TIME, SAMPLES_PER_S, TEST_ACCURACY),
    headline="steady_samples_per_s",
    throughput="samples_per_s",
    steady="steady_samples_per_s",
    dataset="cifar10",
    parity_batch=8,
    parity_input=IMAGES,
    parity_outputs=("logits", "logits_after_training"),
    canonical_layers=canonical_layers,
    flop_model=flop_model,
    accuracy_target=0.77,  # the study's figure after its epochs on the real data
    accuracy_tolerance=0.03,
    description="conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD momentum 0.9, "
                "batch 64, 10 epochs",
)
