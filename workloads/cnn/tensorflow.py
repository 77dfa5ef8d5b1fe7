"""VGG-style CNN trained on CIFAR-10, in TensorFlow's own low-level API (no Keras layers).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
The model is a tf.Module of tf.Variables and tf.nn ops; one training step is a tf.GradientTape
inside a tf.function, and the optimizer's update is TensorFlow's own fused op,
tf.raw_ops.ResourceApplyMomentum (one kernel per variable).
"""
import tensorflow as tf

from workloads.common import canonical
from workloads.runtime import tensorflow as runtime

MATCHED = (
    "convolution kernels stored HWIO: canonical OIHW transposed",
    "NHWC on the CPU (TensorFlow's CPU kernels), NCHW on a GPU; the NCHW batch is transposed in the step",
    "NHWC feature maps are transposed to NCHW before the flatten, so dense1 sees the canonical row order",
    "SGD momentum in its plain form v = m*v + g, w -= lr*v (no unit gain): TensorFlow's fused "
    "ResourceApplyMomentum computes exactly that",
    "Glorot-uniform kernels and zero biases written out",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(tf.Module):
    def __init__(self, s, layout: str, dropout: bool = True):
        super().__init__()
        self.layout = layout
        # the parity check trains with dropout off: dropout is random and frameworks' generators differ
        self.dropout = dropout
        self.dropout_conv, self.dropout_dense = s.dropout_conv, s.dropout_dense
        channels, flat = s.image_shape[0], s.conv2_filters * 8 * 8

        def conv(cin, cout):  # HWIO kernel, Glorot uniform, zero bias
            return runtime.glorot_uniform((3, 3, cin, cout), 9 * cin, 9 * cout), runtime.zeros((cout,))

        def dense(fan_in, fan_out):  # (in, out) kernel, Glorot uniform, zero bias
            return runtime.glorot_uniform((fan_in, fan_out), fan_in, fan_out), runtime.zeros((fan_out,))

        self.conv1 = conv(channels, s.conv1_filters)
        self.conv2 = conv(s.conv1_filters, s.conv1_filters)
        self.conv3 = conv(s.conv1_filters, s.conv2_filters)
        self.conv4 = conv(s.conv2_filters, s.conv2_filters)
        self.dense1 = dense(flat, s.dense_units)
        self.dense2 = dense(s.dense_units, s.classes)

    def _conv(self, x, layer):  # phrase: conv3x3-same
        kernel, bias = layer
        x = tf.nn.conv2d(x, kernel, strides=1, padding="SAME", data_format=self.layout)  # 3x3, stride 1: symmetric
        return tf.nn.bias_add(x, bias, data_format=self.layout)

    def _pool(self, x):  # phrase: max-pool
        return tf.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID", data_format=self.layout)

    def __call__(self, images, training: bool = False):  # images: (N, C, H, W), the canonical layout
        training = training and self.dropout  # training=False: dropout off (FAIRNESS.md: eval-mode)
        x = tf.transpose(images, [0, 2, 3, 1]) if self.layout == "NHWC" else images
        x = tf.nn.relu(self._conv(x, self.conv1))
        x = tf.nn.relu(self._pool(self._conv(x, self.conv2)))
        # phrase: dropout
        if training:
            x = tf.nn.dropout(x, self.dropout_conv)
        # end phrase
        x = tf.nn.relu(self._conv(x, self.conv3))
        x = tf.nn.relu(self._pool(self._conv(x, self.conv4)))
        if training:
            x = tf.nn.dropout(x, self.dropout_conv)
        # phrase: flatten
        if self.layout == "NHWC":
            x = tf.transpose(x, [0, 3, 1, 2])  # flatten in (channels, height, width) order
        x = tf.reshape(x, [tf.shape(x)[0], -1])
        # end phrase
        x = tf.nn.relu(tf.matmul(x, self.dense1[0]) + self.dense1[1])  # phrase: dense
        if training:
            x = tf.nn.dropout(x, self.dropout_dense)
        return tf.matmul(x, self.dense2[0]) + self.dense2[1]  # logits: softmax lives in the loss


# --- loss and optimizer -------------------------------------------------------------------------

loss_function = runtime.cross_entropy  # mean softmax cross-entropy of the logits


class SGDMomentum(tf.Module):
    """Plain momentum, PyTorch's form: v = m*v + g; w -= lr*v (v starts at zero). TensorFlow's
    ResourceApplyMomentum op computes exactly this update, fused in one kernel per variable
    (ResourceApplyKerasMomentum is Keras' form, v = m*v - lr*g; w += v: the same only up to rounding)."""

    description = "tf.raw_ops.ResourceApplyMomentum (fused: one kernel per variable)"

    def __init__(self, variables, learning_rate: float, momentum: float):
        super().__init__()
        self.learning_rate, self.momentum = learning_rate, momentum
        self.velocities = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

    def apply(self, gradients, variables):  # phrase: sgd-momentum
        for gradient, velocity, variable in zip(gradients, self.velocities, variables):
            tf.raw_ops.ResourceApplyMomentum(
                var=variable.handle, accum=velocity.handle, lr=tf.constant(self.learning_rate, variable.dtype),
                grad=gradient, momentum=tf.constant(self.momentum, variable.dtype), use_nesterov=False)


def make_optimizer(model, s):
    return SGDMomentum(model.trainable_variables, s.learning_rate, s.momentum)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels OIHW -> HWIO; dense kernels are already (in, out), in NCHW row order."""
    for name in ("conv1", "conv2", "conv3", "conv4"):
        kernel, bias = getattr(model, name)
        kernel.assign(canonical.oihw_to_hwio(params[f"{name}.kernel"]))
        bias.assign(params[f"{name}.bias"])
    for name in ("dense1", "dense2"):
        kernel, bias = getattr(model, name)
        kernel.assign(params[f"{name}.kernel"])
        bias.assign(params[f"{name}.bias"])


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return VGGStyleCNN(run.settings, policy.layout)

    def build_parity_model(self, run, policy, batch):
        return VGGStyleCNN(run.settings, policy.layout, dropout=False)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return loss_function


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
