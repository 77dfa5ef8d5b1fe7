"""ResNet-50 v1.5 feature extraction (inference), in TensorFlow's own low-level API (no Keras).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
The canonical weights (--init canonical, the default) and random inputs (seed 0): weights do not
change the timing.
What to notice: TensorFlow's "SAME" padding is asymmetric when the stride is 2 (the extra row and
column go at the bottom and right), so the strided layers pad explicitly, as PyTorch does.
"""
import tensorflow as tf

from workloads.common import canonical
from workloads.runtime import tensorflow as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "explicit symmetric padding (3 for the 7x7 stem, 1 for 3x3 and the stem max pool): "
    "TensorFlow's 'SAME' pads only the bottom/right by one when the stride is 2",
    "convolution kernels stored HWIO: canonical OIHW transposed",
    "NHWC on the CPU, NCHW on a GPU; the NCHW batch is transposed in the compiled function",
    "batch norm written with tf.nn.batch_normalization on the moving statistics, epsilon 1e-5 (Keras' is 1e-3)",
)


# --- model --------------------------------------------------------------------------------------

class ResNet50Features(tf.Module):
    stages = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
    expansion = 4

    def __init__(self, layout: str):
        super().__init__()
        self.layout = layout
        self.spatial = [1, 2] if layout == "NHWC" else [2, 3]
        self.params = {}  # name -> variable, with canonical names: "stem.conv.kernel", "stem.bn.gamma", ...
        self._conv("stem.conv", 3, 64, 7)
        self._batch_norm("stem.bn", 64)
        in_channels = 64
        for stage, (width, blocks, _) in enumerate(self.stages, start=1):
            for block in range(blocks):
                prefix, out_channels = f"stage{stage}.block{block}", width * self.expansion
                self._conv(f"{prefix}.conv1", in_channels, width, 1)
                self._batch_norm(f"{prefix}.bn1", width)
                self._conv(f"{prefix}.conv2", width, width, 3)
                self._batch_norm(f"{prefix}.bn2", width)
                self._conv(f"{prefix}.conv3", width, out_channels, 1)
                self._batch_norm(f"{prefix}.bn3", out_channels)
                if block == 0:  # the first block of every stage changes the width: a projection shortcut
                    self._conv(f"{prefix}.shortcut.conv", in_channels, out_channels, 1)
                    self._batch_norm(f"{prefix}.shortcut.bn", out_channels)
                in_channels = out_channels

    def _conv(self, name, cin, cout, size):  # HWIO kernel, He-normal (weights do not change timing)
        self.params[f"{name}.kernel"] = tf.Variable(
            tf.random.normal((size, size, cin, cout), stddev=(2.0 / (size * size * cin)) ** 0.5))

    def _batch_norm(self, name, channels):
        self.params[f"{name}.gamma"] = tf.Variable(tf.ones(channels))
        self.params[f"{name}.beta"] = runtime.zeros(channels)
        self.params[f"{name}.moving_mean"] = runtime.zeros(channels, trainable=False)
        self.params[f"{name}.moving_variance"] = tf.Variable(tf.ones(channels), trainable=False)

    # --- layers
    def conv(self, x, name, stride=1, pad=0):
        padding = [[0, 0], [pad, pad], [pad, pad]]
        padding = padding + [[0, 0]] if self.layout == "NHWC" else [[0, 0]] + padding  # N, H, W, C or N, C, H, W
        return tf.nn.conv2d(x, self.params[f"{name}.kernel"], strides=stride, padding=padding,
                            data_format=self.layout)

    def batch_norm(self, x, name):  # inference: the moving statistics (FAIRNESS.md: eval-mode)  # phrase: batch-norm
        shape = [-1] if self.layout == "NHWC" else [-1, 1, 1]  # broadcast over (N, C, H, W)
        p = lambda key: tf.reshape(self.params[f"{name}.{key}"], shape)  # noqa: E731
        return tf.nn.batch_normalization(x, p("moving_mean"), p("moving_variance"), offset=p("beta"),
                                         scale=p("gamma"), variance_epsilon=canonical.BN_EPSILON)

    def max_pool(self, x):  # 3x3, stride 2, padding 1 filled with -inf, as PyTorch pads it
        padding = [[0, 0], [1, 1], [1, 1]]
        padding = padding + [[0, 0]] if self.layout == "NHWC" else [[0, 0]] + padding
        x = tf.pad(x, padding, constant_values=float("-inf"))
        return tf.nn.max_pool2d(x, ksize=3, strides=2, padding="VALID", data_format=self.layout)

    def bottleneck(self, x, prefix, stride):  # phrase: residual-block
        out = tf.nn.relu(self.batch_norm(self.conv(x, f"{prefix}.conv1"), f"{prefix}.bn1"))
        out = tf.nn.relu(self.batch_norm(self.conv(out, f"{prefix}.conv2", stride, pad=1), f"{prefix}.bn2"))
        out = self.batch_norm(self.conv(out, f"{prefix}.conv3"), f"{prefix}.bn3")
        if f"{prefix}.shortcut.conv.kernel" in self.params:
            x = self.batch_norm(self.conv(x, f"{prefix}.shortcut.conv", stride), f"{prefix}.shortcut.bn")
        return tf.nn.relu(out + x)

    def __call__(self, images):  # images: (N, C, H, W), the canonical layout
        x = tf.transpose(images, [0, 2, 3, 1]) if self.layout == "NHWC" else images
        x = tf.nn.relu(self.batch_norm(self.conv(x, "stem.conv", stride=2, pad=3), "stem.bn"))
        x = self.max_pool(x)
        for stage, (_, blocks, stride) in enumerate(self.stages, start=1):
            for block in range(blocks):
                x = self.bottleneck(x, f"stage{stage}.block{block}", stride if block == 0 else 1)
        return tf.reduce_mean(x, axis=self.spatial)  # global average pool -> (N, 2048)  # phrase: global-avg-pool


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """The model keeps canonical names; convolution kernels OIHW -> HWIO, batch norm as is."""
    assert set(params) == set(model.params), set(params) ^ set(model.params)
    for name, variable in model.params.items():
        value = params[name]
        variable.assign(canonical.oihw_to_hwio(value) if name.endswith(".kernel") else value)


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return ResNet50Features(policy.layout)

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
