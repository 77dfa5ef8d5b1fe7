"""ResNet-50 v1.5 feature extraction (inference), in Caffe2 (brew helpers, one test-mode net).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
The canonical weights (seeded; --init framework: the framework's initialisers) and random inputs (seed 0):
weights do not change the timing.
What to notice: batch norm is SpatialBN with is_test=1, reading the running mean and variance blobs
(brew names the variance blob "_riv", a leftover of its inverse-variance days: it holds the variance).
"""
import numpy as np
from caffe2.python import brew, core, model_helper, workspace

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import caffe2 as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "explicit symmetric padding k//2 on the 7x7 stem, the 3x3s and the 3x3 max pool, as PyTorch",
    "convolution kernels (out, in, h, w): canonical OIHW as is; no convolution biases (no_bias=1)",
    "SpatialBN is_test=1 on the running statistics, epsilon 1e-5: gamma/beta are the _s/_b blobs, the moving "
    "mean/variance the _rm/_riv blobs (FAIRNESS.md: eval-mode)",
    "NCHW input; global AveragePool then Flatten to 2048",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def blob(name: str) -> str:
    """Canonical layer names ("stage1.block0.conv1") as blob names ("stage1_block0_conv1")."""
    return name.replace(".", "_")


def resnet50_features(model, policy):
    """Add the network to `model` (blob "images" in, blob "features" out), in inference mode."""
    options = policy.operator_arguments  # cuDNN and its algorithm search on a GPU

    def conv(x, name, cin, cout, size, stride=1):
        return brew.conv(model, x, blob(name), dim_in=cin, dim_out=cout, kernel=size, stride=stride,
                         pad=size // 2, no_bias=1, **options)

    def batch_norm(x, name, channels):  # is_test: the running statistics (FAIRNESS.md: eval-mode)  # phrase: batch-norm
        return brew.spatial_bn(model, x, blob(name), channels, epsilon=canonical.BN_EPSILON, is_test=True, **options)

    def bottleneck(x, prefix, cin, width, stride):  # phrase: residual-block
        out = brew.relu(model, batch_norm(conv(x, prefix + ".conv1", cin, width, 1), prefix + ".bn1", width),
                        blob(prefix + ".relu1"))
        out = brew.relu(model, batch_norm(conv(out, prefix + ".conv2", width, width, 3, stride), prefix + ".bn2",
                                          width), blob(prefix + ".relu2"))  # v1.5 stride
        out = batch_norm(conv(out, prefix + ".conv3", width, width * EXPANSION, 1), prefix + ".bn3", width * EXPANSION)
        if cin != width * EXPANSION:  # the first block of every stage: a projection shortcut
            x = batch_norm(conv(x, prefix + ".shortcut.conv", cin, width * EXPANSION, 1, stride),
                           prefix + ".shortcut.bn", width * EXPANSION)
        return brew.relu(model, model.net.Sum([out, x], blob(prefix + ".sum")), blob(prefix + ".out"))

    x = brew.relu(model, batch_norm(conv("images", "stem.conv", 3, 64, 7, 2), "stem.bn", 64), "stem_relu")
    x = brew.max_pool(model, x, "stem_pool", kernel=3, stride=2, pad=1, **options)
    channels = 64
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = bottleneck(x, "stage{}.block{}".format(stage, block), channels, width, stride if block == 0 else 1)
            channels = width * EXPANSION
    x = brew.average_pool(model, x, "pool", global_pooling=True, **options)  # (N, 2048, 1, 1)  # phrase: global-avg-pool
    return model.net.Flatten(x, "features")  # (N, 2048)


def build(run: Run, policy):
    """The forward-only net (no gradient operators), initialised and instantiated."""
    s = run.settings
    model = model_helper.ModelHelper(name="resnet50_features")
    with core.DeviceScope(policy.device):
        resnet50_features(model, policy)
    runtime.feed("images", np.zeros((s.batch_size, *s.image_shape), np.float32), policy.device)
    workspace.RunNetOnce(model.param_init_net)
    runtime.create_net(run, policy, model.net)
    return model


# --- canonical weights --------------------------------------------------------------------------

BATCH_NORM = {"gamma": "_s", "beta": "_b", "moving_mean": "_rm", "moving_variance": "_riv"}


def canonical_arrays(params: dict) -> dict:
    """Blob name -> array (numpy only): kernels "<layer>_w" as they are, batch norm's four blobs."""
    arrays = {}
    for key, value in params.items():
        layer, _, part = key.rpartition(".")
        arrays[blob(layer) + ("_w" if part == "kernel" else BATCH_NORM[part])] = value
    return arrays


def load_canonical(model, params: dict, policy) -> None:
    arrays = canonical_arrays(params)
    blobs = {str(p) for p in model.params} | {str(p) for p in model.GetComputedParams()}
    assert set(arrays) == blobs, set(arrays) ^ blobs
    for name, value in arrays.items():
        assert workspace.FetchBlob(name).shape == value.shape, name
        runtime.feed(name, value, policy.device)


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. The warm pass
    takes allocation and cuDNN's algorithm search."""

    def build_model(self, run, policy):
        return runtime.FeatureNet(build(run, policy), policy)

    def load_canonical(self, net, params):
        load_canonical(net.model, params, net.policy)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
