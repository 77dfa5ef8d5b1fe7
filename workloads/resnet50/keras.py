"""ResNet-50 v1.5 feature extraction (inference), in Keras 3: one file for the TensorFlow, JAX and PyTorch backends.

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution; keras.applications.ResNet50
is v1 (stride on the 1x1), so the model is written out. Random inputs (seed 0), and
the canonical weights by default (--init canonical), Keras' own with --init framework. Inference
is `predict_on_batch`, Keras' compiled predict function.
"""
import keras
from keras import layers

from workloads.common import canonical
from workloads.runtime import keras as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution (keras.applications is v1)",
    "strided convolutions and the max pool pad explicitly on both sides (ZeroPadding2D + 'valid'), "
    "as PyTorch's padding=k//2; Keras' 'same' with stride 2 would pad only after; zero padding "
    "before the max pool equals PyTorch's -inf there, its input being post-ReLU",
    "batch-norm epsilon 1e-5 (Keras' default is 1e-3), momentum 0.9 (= PyTorch's 0.1); "
    "inference uses the moving statistics",
    "input NCHW as every framework; channels_last models transpose it in the graph (Permute)",
    "convolution kernels stored HWIO: canonical OIHW transposed",
    "parameter count: trainable weights only (Keras' count_params() adds the moving statistics)",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def resnet50_features(s, data_format: str) -> keras.Model:
    channel_axis = 1 if data_format == "channels_first" else -1

    def conv(x, filters, size, stride, name):
        if stride > 1 and size > 1:  # symmetric padding, as PyTorch's padding=size//2
            x = layers.ZeroPadding2D(size // 2, data_format=data_format)(x)
            padding = "valid"
        else:
            padding = "same"
        return layers.Conv2D(filters, size, strides=stride, padding=padding, use_bias=False,
                             data_format=data_format, name=name)(x)

    def batch_norm(x, name):  # phrase: batch-norm
        return layers.BatchNormalization(axis=channel_axis, momentum=0.9, epsilon=canonical.BN_EPSILON,
                                         name=name)(x)

    def bottleneck(x, width, stride, name):  # phrase: residual-block
        out_channels = width * EXPANSION
        y = layers.ReLU()(batch_norm(conv(x, width, 1, 1, f"{name}_conv1"), f"{name}_bn1"))
        y = layers.ReLU()(batch_norm(conv(y, width, 3, stride, f"{name}_conv2"), f"{name}_bn2"))  # v1.5 stride
        y = batch_norm(conv(y, out_channels, 1, 1, f"{name}_conv3"), f"{name}_bn3")
        shortcut = x
        if stride != 1 or x.shape[channel_axis] != out_channels:
            shortcut = batch_norm(conv(x, out_channels, 1, stride, f"{name}_shortcut_conv"), f"{name}_shortcut_bn")
        return layers.ReLU()(layers.Add()([y, shortcut]))

    images = keras.Input(shape=s.image_shape)  # (3, 224, 224) NCHW, as the harness gives them
    x = images if data_format == "channels_first" else layers.Permute((2, 3, 1))(images)  # -> NHWC
    x = layers.ReLU()(batch_norm(conv(x, 64, 7, 2, "stem_conv"), "stem_bn"))
    x = layers.ZeroPadding2D(1, data_format=data_format)(x)
    x = layers.MaxPooling2D(3, strides=2, data_format=data_format)(x)
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = bottleneck(x, width, stride if block == 0 else 1, f"stage{stage}_block{block}")
    features = layers.GlobalAveragePooling2D(data_format=data_format)(x)  # -> (N, 2048)  # phrase: global-avg-pool
    return keras.Model(images, features, name="resnet50_v1_5_features")


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: keras.Model, params: dict) -> None:
    """Kernels OIHW -> HWIO; batch norm takes [gamma, beta, moving_mean, moving_variance].

    Layer "stage1_block0_conv1" holds canonical "stage1.block0.conv1" (the torch backend registers
    layers as torch submodules, whose names cannot contain dots).
    """
    loaded = 0
    for layer in model.layers:
        name = layer.name.replace("_", ".")
        if isinstance(layer, layers.Conv2D):
            layer.set_weights([canonical.oihw_to_hwio(params[f"{name}.kernel"])])
            loaded += 1
        elif isinstance(layer, layers.BatchNormalization):
            assert layer.epsilon == canonical.BN_EPSILON
            layer.set_weights([params[f"{name}.{part}"]
                               for part in ("gamma", "beta", "moving_mean", "moving_variance")])
            loaded += 4
    assert loaded == len(params), f"loaded {loaded} of {len(params)} canonical arrays"


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return resnet50_features(run.settings, policy.data_format)

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
