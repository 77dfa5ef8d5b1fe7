"""ResNet-50 v1.5 feature extraction (inference), in MindSpore: nn.Cells (compiled in graph mode).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
MindSpore's core package has no model zoo (mindcv has one), so the model is written out here.
Random inputs (seed 0) on the canonical weights (--init canonical; MindSpore's own with --init
framework): weights do not change the timing.
"""
from mindspore import nn

from workloads.common import canonical
from workloads.runtime import mindspore as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "every convolution pad_mode='pad' with padding k//2 on both sides, as PyTorch's padding=k//2; "
    "MindSpore's default pad_mode='same' with stride 2 would pad only after",
    "max pool 3x3/2 pad_mode='pad', padding=1, as PyTorch's (it follows a ReLU, so the pad value never wins)",
    "batch-norm epsilon 1e-5, momentum 0.9 (MindSpore's momentum weighs the old moving statistics: "
    "PyTorch's 0.1); set_train(False): the moving statistics",
    "convolution kernels OIHW and NCHW input: canonical as is; batch norm gamma, beta, moving_mean, "
    "moving_variance: canonical names as is",
    "parameter count: trainable_params() (the moving statistics are not trainable, as PyTorch's buffers)",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def conv(in_channels, out_channels, size, stride=1):
    # symmetric padding, as PyTorch's padding=size//2 ('same' with stride 2 pads only after)
    return nn.Conv2d(in_channels, out_channels, size, stride=stride, pad_mode="pad", padding=size // 2,
                     has_bias=False)


def batch_norm(channels):  # phrase: batch-norm
    # MindSpore's momentum is the weight of the old moving statistics: 0.9 is PyTorch's momentum=0.1
    return nn.BatchNorm2d(channels, eps=canonical.BN_EPSILON, momentum=0.9)


class Bottleneck(nn.Cell):
    def __init__(self, in_channels, width, stride):
        super().__init__()
        out_channels = width * EXPANSION
        self.conv1, self.bn1 = conv(in_channels, width, 1), batch_norm(width)
        self.conv2, self.bn2 = conv(width, width, 3, stride), batch_norm(width)  # v1.5: the stride is here
        self.conv3, self.bn3 = conv(width, out_channels, 1), batch_norm(out_channels)
        self.relu = nn.ReLU()
        self.has_shortcut = stride != 1 or in_channels != out_channels
        if self.has_shortcut:
            self.shortcut_conv = conv(in_channels, out_channels, 1, stride)
            self.shortcut_bn = batch_norm(out_channels)

    def construct(self, x):  # phrase: residual-block
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = self.shortcut_bn(self.shortcut_conv(x)) if self.has_shortcut else x
        return self.relu(y + shortcut)


class ResNet50Features(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem_conv, self.stem_bn = conv(3, 64, 7, 2), batch_norm(64)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="pad", padding=1)
        blocks, in_channels = [], 64
        for width, count, stride in STAGES:
            for block in range(count):
                blocks.append(Bottleneck(in_channels, width, stride if block == 0 else 1))
                in_channels = width * EXPANSION
        self.blocks = nn.SequentialCell(blocks)

    def construct(self, images):  # images: (N, C, H, W)
        x = self.pool(self.relu(self.stem_bn(self.stem_conv(images))))
        x = self.blocks(x)
        return x.mean(axis=(2, 3))  # global average pool -> (N, 2048)  # phrase: global-avg-pool


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """Kernels are already OIHW; batch norm's parameters carry the canonical names."""
    def load_batch_norm(norm: nn.BatchNorm2d, name: str) -> None:
        for field in ("gamma", "beta", "moving_mean", "moving_variance"):
            runtime.set_parameter(getattr(norm, field), params[f"{name}.{field}"])

    runtime.set_parameter(model.stem_conv.weight, params["stem.conv.kernel"])
    load_batch_norm(model.stem_bn, "stem.bn")
    blocks = iter(model.blocks)
    for stage, (_, count, _) in enumerate(STAGES, start=1):
        for index in range(count):
            block, prefix = next(blocks), f"stage{stage}.block{index}"
            for number in (1, 2, 3):
                runtime.set_parameter(getattr(block, f"conv{number}").weight, params[f"{prefix}.conv{number}.kernel"])
                load_batch_norm(getattr(block, f"bn{number}"), f"{prefix}.bn{number}")
            if block.has_shortcut:
                runtime.set_parameter(block.shortcut_conv.weight, params[f"{prefix}.shortcut.conv.kernel"])
                load_batch_norm(block.shortcut_bn, f"{prefix}.shortcut.bn")


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        model = ResNet50Features()
        model.set_train(False)  # inference only: batch norm on moving statistics, no gradients
        return model

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
