"""VGG-style CNN trained on CIFAR-10, in PaddlePaddle (dynamic graph).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
What to notice: it reads almost line for line as the PyTorch file (nn.Layer, NCHW, eager autograd),
but Linear stores its kernel (in, out) as the canonical layout does, initialisers are given per
parameter through ParamAttr, and the optimizer is handed its parameters and cleared with clear_grad.
With the channels_last option every convolution and pool takes data_format="NHWC" (the layout is a
layer argument in Paddle, not a tensor's memory format as in PyTorch), so the flatten sees (H, W, C).
"""
import numpy as np
import paddle
from paddle import nn

from workloads.common import canonical
from workloads.runtime import paddle as runtime

MATCHED = (
    "dense kernels stored (in, out) as the canonical layout; convolution kernels OIHW: canonical as is",
    "Glorot-uniform kernels and zero biases set explicitly through ParamAttr (Paddle's defaults differ)",
    "Momentum(use_nesterov=False) is the plain form v = m*v + g, w -= lr*v (no dampening, no unit gain); "
    "use_multi_tensor=True updates every parameter in one merged_momentum_ op (the same update)",
    "padding=1 for 3x3 'same' convolutions; NCHW, so flatten is already in canonical order "
    "(channels_last: NHWC, so dense1's rows are permuted to the (H, W, C) order the flatten yields)",
    "Dropout mode 'upscale_in_train' (inverted dropout, its default), as PyTorch",
    "loss CrossEntropyLoss (softmax inside, mean over the batch) on int64 labels",
)


# --- model --------------------------------------------------------------------------------------

def glorot_uniform() -> paddle.ParamAttr:
    """Glorot uniform, as Keras; fans from the (out, in, kh, kw) or (in, out) shape, as canonical.py."""
    return paddle.ParamAttr(initializer=nn.initializer.XavierUniform())


def zeros() -> paddle.ParamAttr:
    return paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))


class VGGStyleCNN(nn.Layer):
    def __init__(self, s, data_format: str = "NCHW"):
        super().__init__()
        channels = s.image_shape[0]
        self.data_format = data_format  # "NHWC" with the channels_last option
        # what dense1 reads, (C, H, W): the last convolution's channels after two 2x2 pools
        self.flattened = (s.conv2_filters, s.image_shape[1] // 4, s.image_shape[2] // 4)

        def conv(in_channels, out_channels):  # padding=1: "same"  # phrase: conv3x3-same
            return nn.Conv2D(in_channels, out_channels, 3, padding=1, weight_attr=glorot_uniform(), bias_attr=zeros(),
                             data_format=data_format)

        def pool():  # phrase: max-pool
            return nn.MaxPool2D(2, 2, data_format=data_format)

        def dense(in_features, out_features):  # phrase: dense
            return nn.Linear(in_features, out_features, weight_attr=glorot_uniform(), bias_attr=zeros())

        self.layers = nn.Sequential(
            conv(channels, s.conv1_filters), nn.ReLU(),
            conv(s.conv1_filters, s.conv1_filters),
            pool(), nn.ReLU(), nn.Dropout(s.dropout_conv),  # phrase: dropout
            conv(s.conv1_filters, s.conv2_filters), nn.ReLU(),
            conv(s.conv2_filters, s.conv2_filters),
            pool(), nn.ReLU(), nn.Dropout(s.dropout_conv),
            nn.Flatten(),  # NCHW: (C, H, W) order, canonical; NHWC: (H, W, C)  # phrase: flatten
            dense(int(np.prod(self.flattened)), s.dense_units), nn.ReLU(), nn.Dropout(s.dropout_dense),
            dense(s.dense_units, s.classes),  # logits: softmax lives in the loss
        )

    def forward(self, images):  # images: (N, C, H, W)
        if self.data_format == "NHWC":
            images = images.transpose([0, 2, 3, 1])  # once per batch, on the device
        return self.layers(images)


def make_optimizer(model, s):  # phrase: sgd-momentum
    # Paddle's momentum is the plain form v = m*v + g; w -= lr*v, as PyTorch's. use_multi_tensor: one
    # merged_momentum_ op updates every parameter (the same update, FAIRNESS.md: optimizers).
    return paddle.optimizer.Momentum(learning_rate=s.learning_rate, momentum=s.momentum, use_nesterov=False,
                                     parameters=model.parameters(), use_multi_tensor=True)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels are already OIHW (in either layout); dense kernels are already (in, out).
    NHWC flattens (H, W, C): dense1's rows are permuted to that order."""
    convolutions = [layer for layer in model.layers if isinstance(layer, nn.Conv2D)]
    denses = [layer for layer in model.layers if isinstance(layer, nn.Linear)]
    arrays = dict(params)
    if model.data_format == "NHWC":
        arrays["dense1.kernel"] = canonical.nchw_rows_to_nhwc_rows(params["dense1.kernel"], *model.flattened)
    for layer, name in zip(convolutions + denses, ("conv1", "conv2", "conv3", "conv4", "dense1", "dense2")):
        for parameter, array in ((layer.weight, arrays[f"{name}.kernel"]), (layer.bias, arrays[f"{name}.bias"])):
            assert tuple(parameter.shape) == array.shape, (name, parameter.shape, array.shape)
            parameter.set_value(array)


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return VGGStyleCNN(run.settings, policy.data_format)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return nn.CrossEntropyLoss()  # phrase: softmax-cross-entropy


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
