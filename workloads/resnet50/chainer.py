"""ResNet-50 v1.5 feature extraction (inference), in Chainer, written out.

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1);
Chainer's own L.ResNet50Layers is the original Caffe v1, so the model is written here.
Random weights and random inputs (seed 0): weights do not change the timing.
"""
import chainer
import chainer.functions as F
import chainer.links as L

from workloads.common import canonical
from workloads.runtime import chainer as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution (L.ResNet50Layers is v1)",
    "batch-norm eps=1e-5 set explicitly (Chainer's default is 2e-5); train=False uses the running statistics",
    "stem max pooling with cover_all=False (Chainer's default True gives 57x57, not 56x56)",
    "convolution kernels OIHW and NCHW input: canonical as is",
)


# --- model --------------------------------------------------------------------------------------

class Bottleneck(chainer.Chain):
    expansion = 4

    def __init__(self, in_channels, width, stride):
        super().__init__()
        out_channels = width * self.expansion
        eps = canonical.BN_EPSILON  # 1e-5; Chainer's default is 2e-5
        self.has_shortcut = stride != 1 or in_channels != out_channels
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_channels, width, 1, nobias=True)
            self.bn1 = L.BatchNormalization(width, eps=eps)  # phrase: batch-norm
            self.conv2 = L.Convolution2D(width, width, 3, stride=stride, pad=1, nobias=True)  # v1.5 stride
            self.bn2 = L.BatchNormalization(width, eps=eps)
            self.conv3 = L.Convolution2D(width, out_channels, 1, nobias=True)
            self.bn3 = L.BatchNormalization(out_channels, eps=eps)
            if self.has_shortcut:
                self.shortcut_conv = L.Convolution2D(in_channels, out_channels, 1, stride=stride, nobias=True)
                self.shortcut_bn = L.BatchNormalization(out_channels, eps=eps)

    def forward(self, x):  # phrase: residual-block
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        shortcut = self.shortcut_bn(self.shortcut_conv(x)) if self.has_shortcut else x
        return F.relu(out + shortcut)


class ResNet50Features(chainer.Chain):
    stages = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.stem_conv = L.Convolution2D(3, 64, 7, stride=2, pad=3, nobias=True)
            self.stem_bn = L.BatchNormalization(64, eps=canonical.BN_EPSILON)
            self.blocks = chainer.ChainList()
        in_channels = 64
        for width, blocks, stride in self.stages:
            for block in range(blocks):
                self.blocks.append(Bottleneck(in_channels, width, stride if block == 0 else 1))
                in_channels = width * Bottleneck.expansion

    def forward(self, images):
        h = F.relu(self.stem_bn(self.stem_conv(images)))
        h = F.max_pooling_2d(h, 3, stride=2, pad=1, cover_all=False)
        for block in self.blocks:
            h = block(h)
        return F.mean(h, axis=(2, 3))  # global average pool -> (N, 2048)  # phrase: global-avg-pool


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """Kernels are already OIHW; batch norm: gamma, beta, moving statistics -> avg_mean / avg_var."""
    xp = model.xp

    def load_conv(conv: L.Convolution2D, name: str) -> None:
        conv.W.array[...] = xp.asarray(params[f"{name}.kernel"])

    def load_batch_norm(norm: L.BatchNormalization, name: str) -> None:
        assert norm.eps == canonical.BN_EPSILON
        norm.gamma.array[...] = xp.asarray(params[f"{name}.gamma"])
        norm.beta.array[...] = xp.asarray(params[f"{name}.beta"])
        norm.avg_mean[...] = xp.asarray(params[f"{name}.moving_mean"])
        norm.avg_var[...] = xp.asarray(params[f"{name}.moving_variance"])

    load_conv(model.stem_conv, "stem.conv")
    load_batch_norm(model.stem_bn, "stem.bn")
    blocks = iter(model.blocks)
    for stage, (_, count, _) in enumerate(model.stages, start=1):
        for index in range(count):
            block, prefix = next(blocks), f"stage{stage}.block{index}"
            for number in (1, 2, 3):
                load_conv(getattr(block, f"conv{number}"), f"{prefix}.conv{number}")
                load_batch_norm(getattr(block, f"bn{number}"), f"{prefix}.bn{number}")
            if block.has_shortcut:
                load_conv(block.shortcut_conv, f"{prefix}.shortcut.conv")
                load_batch_norm(block.shortcut_bn, f"{prefix}.shortcut.bn")


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. The runtime
    extracts with train=False (batch norm on running statistics) and no graph (FAIRNESS.md: eval-mode)."""

    def build_model(self, run, policy):
        model = ResNet50Features()
        model.to_device(policy.device)
        return model

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
