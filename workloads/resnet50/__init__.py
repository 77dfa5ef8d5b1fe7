"""The ResNet-50 workload: v1.5 feature extraction (inference), cut after the global average pool."""
from dataclasses import dataclass  # novermin

from workloads.common.declaration import HIGHER, INFERENCE, LOWER, Metric, Workload


@dataclass(frozen=True)
class ResNet50Settings:
    """ResNet-50 v1.5 feature extraction (inference), cut after the global average pool."""

    image_shape: tuple = (3, 224, 224)
    feature_size: int = 2048
    batch_size: int = 32
    batches: int = 40  # 40 x 32 = 1280 images
    warmup_batches: int = 1  # one untimed warm pass over this many batches first
    parameter_count: int = 23_508_032  # without the 1000-way classifier


WORKLOAD = Workload(
    name="resnet50",
    title="ResNet-50 — feature extraction (inference)",
    kind=INFERENCE,
    order=2,
    settings=ResNet50Settings,
    smoke=dict(batches=2),
    metrics=(
        Metric("seconds_per_1000_images", "s / 1000 images", "s", LOWER, "timed forward passes only"),
        Metric("images_per_s", "images/s", "images/s", HIGHER, "timed forward passes only"),
    ),
    headline="seconds_per_1000_images",
    throughput="images_per_s",
    steady=None,  # the warm pass is untimed, so the timed pass is already steady
    accuracy=False,
    dataset=None,  # random input (seed 0): weights and pixel values do not change the timing
    parity_batch=2,
    parity_outputs=("features",),
    description="ResNet-50 v1.5 to the global pool (2048-D), batch 32, 40 batches after one warm pass",
)
