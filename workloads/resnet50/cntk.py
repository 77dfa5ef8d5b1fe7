"""ResNet-50 v1.5 feature extraction (inference), in CNTK 2.7's own API (cntk.layers).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
The canonical weights (seeded; --init framework: the framework's initialisers) and random inputs (seed 0):
weights do not change the timing.
What to notice: CNTK's pad=True centres the kernel on input positions 0, s, 2s, ..., which for odd
kernels is exactly PyTorch's symmetric padding of k // 2, strided or not; batch norm's running
statistics are CNTK constants (aggregate_mean / aggregate_variance), not parameters.
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import cntk as runtime

import cntk as C

from workloads.common import canonical

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "pad=True (auto padding) centres odd kernels on 0, s, 2s, ...: PyTorch's padding=k//2 for the 7x7 "
    "stem, the strided 3x3s and the 3x3 max pool; 1x1 convolutions unpadded",
    "convolution kernels (out, in, height, width): canonical OIHW as is; no convolution biases",
    "batch norm: scale/bias are the canonical gamma/beta, aggregate_mean/aggregate_variance the moving "
    "statistics; epsilon 1e-5 (CNTK's default too); eval() uses the running statistics (FAIRNESS.md: eval-mode)",
    "NCHW input, CNTK's only image layout; global average pool then reshape to 2048",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def resnet50_features(s):
    """The network as a CNTK function of its one input, the images; returns (features, layers by canonical name)."""
    layers = {}

    def conv(x, name, filters, size, stride=1):  # pad=True: PyTorch's padding=size//2 (odd sizes)
        layers[name] = C.layers.Convolution2D((size, size), filters, strides=stride, pad=size > 1,
                                              bias=False, activation=None)
        return layers[name](x)

    def batch_norm(x, name):  # per channel (map_rank=1); inference uses the running statistics  # phrase: batch-norm
        layers[name] = C.layers.BatchNormalization(map_rank=1, epsilon=canonical.BN_EPSILON)
        return layers[name](x)

    def bottleneck(x, prefix, width, stride, project):  # phrase: residual-block
        out = C.relu(batch_norm(conv(x, prefix + ".conv1", width, 1), prefix + ".bn1"))
        out = C.relu(batch_norm(conv(out, prefix + ".conv2", width, 3, stride), prefix + ".bn2"))  # v1.5 stride
        out = batch_norm(conv(out, prefix + ".conv3", width * EXPANSION, 1), prefix + ".bn3")
        if project:  # the first block of every stage changes the width: a projection shortcut
            x = batch_norm(conv(x, prefix + ".shortcut.conv", width * EXPANSION, 1, stride), prefix + ".shortcut.bn")
        return C.relu(out + x)

    images = C.input_variable(s.image_shape, name="images")  # (3, 224, 224); the batch axis is implicit
    x = C.relu(batch_norm(conv(images, "stem.conv", 64, 7, 2), "stem.bn"))
    x = C.layers.MaxPooling((3, 3), strides=(2, 2), pad=True)(x)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = bottleneck(x, "stage{}.block{}".format(stage, block), width, stride if block == 0 else 1,
                           project=block == 0)
    features = C.reshape(C.layers.GlobalAveragePooling()(x), (s.feature_size,))  # (2048, 1, 1) -> 2048  # phrase: global-avg-pool
    return features, layers


# --- canonical weights --------------------------------------------------------------------------

# canonical suffix -> the CNTK layer's attribute that holds it
BATCH_NORM = {"gamma": "scale", "beta": "bias", "moving_mean": "aggregate_mean",
              "moving_variance": "aggregate_variance"}


def canonical_arrays(params: dict) -> dict:
    """Canonical arrays by "<layer>.<CNTK attribute>" (numpy only): kernels and batch norm as they are."""
    arrays = {}
    for key, value in params.items():
        layer, _, suffix = key.rpartition(".")
        arrays[layer + "." + ("W" if suffix == "kernel" else BATCH_NORM[suffix])] = value
    return arrays


def load_canonical(layers: dict, params: dict) -> None:
    arrays = canonical_arrays(params)
    assert {key.rpartition(".")[0] for key in arrays} == set(layers)
    for key, value in arrays.items():
        layer, _, attribute = key.rpartition(".")
        target = getattr(layers[layer], attribute)
        assert target.shape == value.shape, (key, target.shape, value.shape)
        target.value = value


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. The warm pass
    takes graph compilation and cuDNN's algorithm search; eval() is inference."""

    def build_model(self, run, policy):
        features, layers = resnet50_features(run.settings)
        return runtime.Network(features, layers)

    def load_canonical(self, network, params):
        load_canonical(network.parameters, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
