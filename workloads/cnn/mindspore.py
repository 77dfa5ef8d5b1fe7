"""VGG-style CNN trained on CIFAR-10, in MindSpore: an nn.Cell, nn.Momentum, one step (compiled in graph mode).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
What to notice: a Cell reads like a PyTorch Module (construct = forward), but MindSpore's layer
defaults differ from PyTorch's (no convolution bias, "same" padding), and the training step is
written functionally (value_and_grad + optimizer), compiled by mindspore.jit in graph mode.
"""
from mindspore import nn
from mindspore.common.initializer import XavierUniform

from workloads.common import canonical
from workloads.runtime import mindspore as runtime

MATCHED = (
    "convolution kernels OIHW and NCHW input: canonical as is; dense weights stored (out, in): "
    "canonical (in, out) transposed",
    "Conv2d pad_mode='pad', padding=1 (MindSpore's default pad_mode is 'same') and has_bias=True "
    "(its default has no bias)",
    "Glorot-uniform kernels (XavierUniform) and zero biases set explicitly",
    "nn.Momentum is the plain form v = m*v + g, w -= lr*v (no dampening, no unit gain), as PyTorch; "
    "its ApplyMomentum op runs per parameter in each step",
    "loss nn.CrossEntropyLoss (mean over the batch) on int32 labels",
    "nn.Dropout(p=rate): p is the drop probability (MindSpore 1.x took keep_prob)",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(nn.Cell):
    def __init__(self, s):
        super().__init__()

        def conv(in_channels, out_channels):  # padding 1 on each side: "same", as PyTorch's padding=1  # phrase: conv3x3-same
            return nn.Conv2d(in_channels, out_channels, 3, pad_mode="pad", padding=1, has_bias=True,
                             weight_init=XavierUniform(), bias_init="zeros")

        def dense(in_features, out_features):  # phrase: dense
            return nn.Dense(in_features, out_features, weight_init=XavierUniform(), bias_init="zeros")

        channels = s.image_shape[0]
        self.conv1 = conv(channels, s.conv1_filters)
        self.conv2 = conv(s.conv1_filters, s.conv1_filters)
        self.conv3 = conv(s.conv1_filters, s.conv2_filters)
        self.conv4 = conv(s.conv2_filters, s.conv2_filters)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)  # phrase: max-pool
        self.relu = nn.ReLU()
        # phrase: dropout
        # active only after set_train(True) (FAIRNESS.md: eval-mode); one Cell per place, each with its own random stream
        self.dropout1 = nn.Dropout(p=s.dropout_conv)
        # end phrase
        self.dropout2 = nn.Dropout(p=s.dropout_conv)
        self.dropout3 = nn.Dropout(p=s.dropout_dense)
        self.flatten = nn.Flatten()  # NCHW: already the canonical (C, H, W) order  # phrase: flatten
        self.dense1 = dense(s.conv2_filters * 8 * 8, s.dense_units)
        self.dense2 = dense(s.dense_units, s.classes)

    def construct(self, images):  # images: (N, C, H, W)
        x = self.relu(self.conv1(images))
        x = self.conv2(x)
        x = self.dropout1(self.relu(self.pool(x)))
        x = self.relu(self.conv3(x))
        x = self.conv4(x)
        x = self.dropout2(self.relu(self.pool(x)))
        x = self.dropout3(self.relu(self.dense1(self.flatten(x))))
        return self.dense2(x)  # logits: softmax lives in the loss


def make_optimizer(network, s):  # phrase: sgd-momentum
    # nn.Momentum: v = m*v + g; w -= lr*v, PyTorch's plain momentum.
    return nn.Momentum(network.trainable_params(), learning_rate=s.learning_rate, momentum=s.momentum)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(network: VGGStyleCNN, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels are already OIHW; dense weights are stored (out, in)."""
    for name in ("conv1", "conv2", "conv3", "conv4"):
        layer = getattr(network, name)
        runtime.set_parameter(layer.weight, params[f"{name}.kernel"])
        runtime.set_parameter(layer.bias, params[f"{name}.bias"])
    for name in ("dense1", "dense2"):
        layer = getattr(network, name)
        runtime.set_parameter(layer.weight, canonical.dense_to_out_in(params[f"{name}.kernel"]))
        runtime.set_parameter(layer.bias, params[f"{name}.bias"])


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return VGGStyleCNN(run.settings)

    def load_canonical(self, network, params):
        load_canonical(network, params)

    def make_optimizer(self, network, run, policy):
        return make_optimizer(network, run.settings)

    def loss_function(self):
        return nn.CrossEntropyLoss()  # phrase: softmax-cross-entropy


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
