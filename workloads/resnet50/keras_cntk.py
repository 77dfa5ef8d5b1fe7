"""ResNet-50 v1.5 feature extraction (inference), in Keras 2.2 on CNTK (the original study's Keras(CNTK) row).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution; keras.applications.ResNet50
is v1 (stride on the 1x1), so the model is written out, as in workloads/resnet50/keras.py (Keras 3).
The canonical weights (seeded; --init framework: the framework's initialisers) and random inputs (seed 0):
weights do not change the timing.
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import keras_cntk as runtime

import keras
from keras import layers

from workloads.common import canonical

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution (keras.applications is v1)",
    "strided convolutions and the max pool pad explicitly on both sides (ZeroPadding2D + 'valid'), "
    "as PyTorch's padding=k//2, whatever 'same' means on a backend; zero padding before the max pool "
    "equals PyTorch's -inf there, its input being post-ReLU",
    "batch-norm epsilon 1e-5 (Keras' default is 1e-3), momentum 0.9 (= PyTorch's 0.1); inference "
    "(predict_on_batch, learning phase 0) uses the moving statistics",
    "channels_first (NCHW), CNTK's native layout: no transposes",
    "convolution kernels stored HWIO: canonical OIHW transposed",
    "parameter count: trainable weights only (Keras' count_params() adds the moving statistics)",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4
CHANNELS = 1  # the channel axis of channels_first maps


def resnet50_features(s) -> "keras.Model":
    def conv(x, filters, size, stride, name):
        if stride > 1 and size > 1:  # symmetric padding, as PyTorch's padding=size//2
            x = layers.ZeroPadding2D(size // 2, data_format="channels_first")(x)
            padding = "valid"
        else:
            padding = "same"
        return layers.Conv2D(filters, size, strides=stride, padding=padding, use_bias=False,
                             data_format="channels_first", name=name)(x)

    def batch_norm(x, name):  # phrase: batch-norm
        return layers.BatchNormalization(axis=CHANNELS, momentum=0.9, epsilon=canonical.BN_EPSILON, name=name)(x)

    def relu(x):
        return layers.Activation("relu")(x)

    def bottleneck(x, width, stride, name, project):  # phrase: residual-block
        y = relu(batch_norm(conv(x, width, 1, 1, name + "_conv1"), name + "_bn1"))
        y = relu(batch_norm(conv(y, width, 3, stride, name + "_conv2"), name + "_bn2"))  # v1.5 stride
        y = batch_norm(conv(y, width * EXPANSION, 1, 1, name + "_conv3"), name + "_bn3")
        shortcut = x
        if project:  # the first block of every stage changes the width: a projection shortcut
            shortcut = batch_norm(conv(x, width * EXPANSION, 1, stride, name + "_shortcut_conv"),
                                  name + "_shortcut_bn")
        return relu(layers.Add()([y, shortcut]))

    images = keras.Input(shape=s.image_shape)  # (3, 224, 224) NCHW, as the harness gives them
    x = relu(batch_norm(conv(images, 64, 7, 2, "stem_conv"), "stem_bn"))
    x = layers.ZeroPadding2D(1, data_format="channels_first")(x)
    x = layers.MaxPooling2D(3, strides=2, data_format="channels_first")(x)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = bottleneck(x, width, stride if block == 0 else 1, "stage{}_block{}".format(stage, block),
                           project=block == 0)
    features = layers.GlobalAveragePooling2D(data_format="channels_first")(x)  # -> (N, 2048)  # phrase: global-avg-pool
    return keras.Model(images, features, name="resnet50_v1_5_features")


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Each layer's weights by Keras layer name (numpy only): "stage1_block0_conv1" holds canonical
    "stage1.block0.conv1"; kernels HWIO; batch norm [gamma, beta, moving_mean, moving_variance]."""
    arrays = {}
    for key in params:
        layer, _, part = key.rpartition(".")
        name = layer.replace(".", "_")
        if part == "kernel":
            arrays[name] = [canonical.oihw_to_hwio(params[key])]
        elif part == "gamma":
            arrays[name] = [params[layer + "." + p] for p in ("gamma", "beta", "moving_mean", "moving_variance")]
    return arrays


def load_canonical(model: "keras.Model", params: dict) -> None:
    arrays = canonical_arrays(params)
    weighted = [layer for layer in model.layers if layer.weights]
    assert {layer.name for layer in weighted} == set(arrays)
    for layer in weighted:
        layer.set_weights(arrays[layer.name])


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return resnet50_features(run.settings)

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
