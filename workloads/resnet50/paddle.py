"""ResNet-50 v1.5 feature extraction (inference), in PaddlePaddle, from Paddle's own model zoo.

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
Random inputs (seed 0) on the canonical weights (--init canonical; Paddle's own with --init framework):
weights do not change the timing. What to notice:
unlike most zoos, paddle.vision.models.resnet50 IS v1.5 (its BottleneckBlock strides the 3x3), so
the zoo model serves as is, as the original study used each framework's zoo; num_classes=0 drops
the classifier and leaves the global pool's (N, 2048, 1, 1) output. The zoo takes no data_format:
with the channels_last option runtime.to_channels_last switches its convolutions, batch norms and
pools to NHWC after it is built (the weights keep their OIHW shape), and the batch is transposed once.
"""
import paddle
from paddle import nn
from paddle.vision.models import resnet50

from workloads.common import canonical
from workloads.runtime import paddle as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution (Paddle's zoo model is v1.5)",
    "batch-norm epsilon 1e-5 (Paddle's default); eval mode uses the moving statistics",
    "convolution kernels OIHW and NCHW input: canonical as is (channels_last: NHWC layers, the kernels "
    "still OIHW); batch norm gamma/beta -> weight/bias, moving mean/variance -> _mean/_variance",
    "parameter count: trainable parameters only (Paddle's moving statistics are parameters with trainable=False)",
)


# --- model --------------------------------------------------------------------------------------

class ResNet50Features(nn.Layer):
    """The zoo's ResNet-50 without its classifier, flattened to (N, 2048)."""

    def __init__(self, data_format: str = "NCHW"):
        super().__init__()
        # phrase: global-avg-pool
        # pretrained=False: random weights, nothing downloaded; num_classes=0: no fc, ends at the global pool
        self.backbone = resnet50(pretrained=False, num_classes=0)
        # end phrase
        self.data_format = data_format
        if data_format == "NHWC":  # the channels_last option
            runtime.to_channels_last(self.backbone)

    def forward(self, images):  # images: (N, C, H, W)
        if self.data_format == "NHWC":
            images = images.transpose([0, 2, 3, 1])  # once per batch, on the device
        return paddle.flatten(self.backbone(images), start_axis=1)  # (N, 2048, 1, 1) or (N, 1, 1, 2048) -> (N, 2048)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """Canonical "stageS.blockB.convK" is the zoo's layerS[B].convK; "shortcut" is its downsample (conv, bn)."""
    used = set()

    def load(parameter, name: str) -> None:
        array = params[name]
        assert tuple(parameter.shape) == array.shape, (name, parameter.shape, array.shape)
        parameter.set_value(array)
        used.add(name)

    def load_batch_norm(norm: nn.BatchNorm2D, name: str) -> None:
        assert norm._epsilon == canonical.BN_EPSILON
        load(norm.weight, f"{name}.gamma")
        load(norm.bias, f"{name}.beta")
        load(norm._mean, f"{name}.moving_mean")
        load(norm._variance, f"{name}.moving_variance")

    backbone = model.backbone
    load(backbone.conv1.weight, "stem.conv.kernel")
    load_batch_norm(backbone.bn1, "stem.bn")
    for stage, layer in enumerate((backbone.layer1, backbone.layer2, backbone.layer3, backbone.layer4), start=1):
        for index, block in enumerate(layer):
            prefix = f"stage{stage}.block{index}"
            for number in (1, 2, 3):
                load(getattr(block, f"conv{number}").weight, f"{prefix}.conv{number}.kernel")
                load_batch_norm(getattr(block, f"bn{number}"), f"{prefix}.bn{number}")
            if block.downsample is not None:
                load(block.downsample[0].weight, f"{prefix}.shortcut.conv.kernel")
                load_batch_norm(block.downsample[1], f"{prefix}.shortcut.bn")
    assert used == set(params), f"canonical arrays not loaded: {sorted(set(params) - used)[:5]}"


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return ResNet50Features(policy.data_format).eval()  # eval: batch-norm uses the moving statistics

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
