"""ResNet-50 v1.5 feature extraction (inference), in MXNet Gluon.

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1; the
Gluon model zoo's resnet50_v1 is v1, so the model is written out here).
Random weights and random inputs (seed 0): weights do not change the timing.
"""
import mxnet as mx
from mxnet.gluon import nn

from workloads.common import canonical
from workloads.runtime import mxnet as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution (the Gluon zoo's resnet50_v1 is v1)",
    "batch-norm epsilon 1e-5 (Gluon's default); predict mode (outside autograd.record) uses the moving statistics",
    "convolution kernels OIHW and NCHW input: canonical as is",
)


# --- model --------------------------------------------------------------------------------------

class Bottleneck(nn.HybridBlock):
    expansion = 4

    def __init__(self, in_channels, width, stride, **kwargs):
        super().__init__(**kwargs)
        out_channels = width * self.expansion
        with self.name_scope():
            self.conv1 = nn.Conv2D(width, 1, use_bias=False, in_channels=in_channels)
            self.bn1 = nn.BatchNorm(epsilon=canonical.BN_EPSILON, in_channels=width)  # phrase: batch-norm
            self.conv2 = nn.Conv2D(width, 3, strides=stride, padding=1, use_bias=False, in_channels=width)  # v1.5
            self.bn2 = nn.BatchNorm(epsilon=canonical.BN_EPSILON, in_channels=width)
            self.conv3 = nn.Conv2D(out_channels, 1, use_bias=False, in_channels=width)
            self.bn3 = nn.BatchNorm(epsilon=canonical.BN_EPSILON, in_channels=out_channels)
            self.shortcut = None  # identity
            if stride != 1 or in_channels != out_channels:
                self.shortcut = nn.HybridSequential()
                self.shortcut.add(nn.Conv2D(out_channels, 1, strides=stride, use_bias=False, in_channels=in_channels),
                                  nn.BatchNorm(epsilon=canonical.BN_EPSILON, in_channels=out_channels))

    def hybrid_forward(self, F, x):  # phrase: residual-block
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet50Features(nn.HybridBlock):
    stages = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.layers = nn.HybridSequential()
            self.layers.add(nn.Conv2D(64, 7, strides=2, padding=3, use_bias=False, in_channels=3),
                            nn.BatchNorm(epsilon=canonical.BN_EPSILON, in_channels=64),
                            nn.Activation("relu"), nn.MaxPool2D(3, strides=2, padding=1))
            in_channels = 64
            for width, blocks, stride in self.stages:
                for block in range(blocks):
                    self.layers.add(Bottleneck(in_channels, width, stride if block == 0 else 1))
                    in_channels = width * Bottleneck.expansion
            self.layers.add(nn.GlobalAvgPool2D(), nn.Flatten())  # global average pool -> (N, 2048)  # phrase: global-avg-pool

    def hybrid_forward(self, F, images):
        return self.layers(images)


def build(context):
    model = ResNet50Features()
    model.initialize(mx.init.Xavier(), ctx=context)
    return model


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """Kernels are already OIHW; batch norm: gamma, beta, running_mean, running_var."""
    def load_conv(conv: nn.Conv2D, name: str) -> None:
        conv.weight.set_data(mx.nd.array(params[f"{name}.kernel"]))

    def load_batch_norm(norm: nn.BatchNorm, name: str) -> None:
        assert norm._kwargs["eps"] == canonical.BN_EPSILON
        norm.gamma.set_data(mx.nd.array(params[f"{name}.gamma"]))
        norm.beta.set_data(mx.nd.array(params[f"{name}.beta"]))
        norm.running_mean.set_data(mx.nd.array(params[f"{name}.moving_mean"]))
        norm.running_var.set_data(mx.nd.array(params[f"{name}.moving_variance"]))

    load_conv(model.layers[0], "stem.conv")
    load_batch_norm(model.layers[1], "stem.bn")
    blocks = iter(layer for layer in model.layers if isinstance(layer, Bottleneck))
    for stage, (_, count, _) in enumerate(model.stages, start=1):
        for index in range(count):
            block, prefix = next(blocks), f"stage{stage}.block{index}"
            for number in (1, 2, 3):
                load_conv(getattr(block, f"conv{number}"), f"{prefix}.conv{number}")
                load_batch_norm(getattr(block, f"bn{number}"), f"{prefix}.bn{number}")
            if block.shortcut is not None:
                load_conv(block.shortcut[0], f"{prefix}.shortcut.conv")
                load_batch_norm(block.shortcut[1], f"{prefix}.shortcut.bn")


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. The runtime
    extracts outside autograd.record: no gradients, batch norm in predict mode (FAIRNESS.md: eval-mode)."""

    def build_model(self, run, policy):
        return build(policy.device)

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
