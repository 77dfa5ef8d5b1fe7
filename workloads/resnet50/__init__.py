"""The ResNet-50 workload: v1.5 feature extraction (inference), cut after the global average pool."""
from dataclasses import dataclass  # novermin

from workloads.common.declaration import HIGHER, IMAGES, INFERENCE, LOWER, Metric, Workload
from workloads.common.flops import FlopTrace

STEM_WIDTH = 64
# ResNet-50 v1.5: (width, blocks, stride of the first block) per stage, as in the workload files
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
BOTTLENECK_EXPANSION = 4  # a bottleneck block's output has 4x its width


@dataclass(frozen=True)
class ResNet50Settings:
    """ResNet-50 v1.5 feature extraction (inference), cut after the global average pool."""

    image_shape: tuple = (3, 224, 224)
    feature_size: int = 2048
    batch_size: int = 32
    batches: int = 40  # 40 x 32 = 1280 images
    warmup_batches: int = 5  # an untimed warm pass over this many batches first (autotuning, allocation)
    parameter_count: int = 23_508_032  # without the 1000-way classifier


def batch_percentile_ms(result, percent: float):
    """A percentile of the timed batches, in milliseconds (linear interpolation); None without samples."""
    times = sorted(result.samples.batch_times_s)
    if not times:
        return None
    position = (len(times) - 1) * percent / 100.0
    low = int(position)
    high = min(low + 1, len(times) - 1)
    return 1000.0 * (times[low] + (times[high] - times[low]) * (position - low))


def canonical_layers(layers, s: ResNet50Settings) -> None:
    """The parity check's canonical parameters, layer by layer (workloads/common/canonical.py)."""
    layers.conv("stem.conv", STEM_WIDTH, s.image_shape[0], 7, bias=False)
    layers.batch_norm("stem.bn", STEM_WIDTH)
    in_channels = STEM_WIDTH
    for stage, (width, blocks, _) in enumerate(STAGES, start=1):
        for block in range(blocks):
            prefix = "stage{}.block{}".format(stage, block)
            out_channels = width * BOTTLENECK_EXPANSION
            layers.conv(prefix + ".conv1", width, in_channels, 1, bias=False)
            layers.batch_norm(prefix + ".bn1", width)
            layers.conv(prefix + ".conv2", width, width, 3, bias=False)
            layers.batch_norm(prefix + ".bn2", width)
            layers.conv(prefix + ".conv3", out_channels, width, 1, bias=False)
            # a small last gamma keeps 16 random residual blocks from blowing activations up
            layers.batch_norm(prefix + ".bn3", out_channels, gamma_scale=0.2)
            if block == 0:
                layers.conv(prefix + ".shortcut.conv", out_channels, in_channels, 1, bias=False)
                layers.batch_norm(prefix + ".shortcut.bn", out_channels)
            in_channels = out_channels


def flop_model(s: ResNet50Settings) -> FlopTrace:
    """The forward pass in shapes (workloads/common/flops.py): FLOPs per image. v1.5: a block's
    stride sits on its 3x3 convolution, and on its shortcut's 1x1."""
    trace = FlopTrace(s.image_shape)
    trace.conv(STEM_WIDTH, 7, stride=2, padding=3)
    trace.pool(3, 2, padding=1)
    for width, blocks, stride in STAGES:
        for block in range(blocks):
            step = stride if block == 0 else 1
            trace.branch()
            trace.conv(width, 1)
            trace.conv(width, 3, stride=step)
            trace.conv(width * BOTTLENECK_EXPANSION, 1)
            if block == 0:  # the projection shortcut: 1x1, strided as the block
                main = trace.shortcut()
                trace.conv(width * BOTTLENECK_EXPANSION, 1, stride=step, padding=0)
                trace.rejoin(main)
            else:
                trace.rejoin()
    trace.global_pool()
    return trace


WORKLOAD = Workload(
    name="resnet50",
    title="ResNet-50 — feature extraction (inference)",
    kind=INFERENCE,
    order=2,
    settings=ResNet50Settings,
    # smoke: fewer and smaller batches (inference has no batch-size-dependent dynamics to keep); on a
    # CPU a pass over 32 images at 224x224 takes seconds, and every framework's smoke run pays it
    smoke=dict(batches=3, warmup_batches=2, batch_size=8),
    metrics=(
        Metric("images_per_s", "images/s", "images/s", HIGHER,
               "the median timed batch (forward pass and copy of the features to the host)"),
        Metric("seconds_per_1000_images", "s / 1000 images", "s", LOWER, "the median timed batch, scaled"),
        Metric("batch_p10_ms", "batch p10", "ms", LOWER, "10th percentile of the timed batches",
               derive=lambda result: batch_percentile_ms(result, 10)),
        Metric("batch_p90_ms", "batch p90", "ms", LOWER, "90th percentile of the timed batches",
               derive=lambda result: batch_percentile_ms(result, 90)),
    ),
    headline="images_per_s",
    throughput="images_per_s",
    steady=None,  # the warm pass is untimed, so the timed pass is already steady
    dataset=None,  # random input (seed 0): weights and pixel values do not change the timing
    parity_batch=2,
    parity_input=IMAGES,
    parity_outputs=("features",),
    canonical_layers=canonical_layers,
    flop_model=flop_model,
    description="ResNet-50 v1.5 to the global pool (2048-D), batch 32, 40 timed batches after 5 warm ones",
)
