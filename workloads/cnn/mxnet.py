"""VGG-style CNN trained on CIFAR-10, in MXNet Gluon.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
Gluon builds the model imperatively; in graph mode the runtime hybridizes it into one cached
symbolic graph, in eager mode it runs as built (workloads/runtime/mxnet.py).
"""
import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

from workloads.common import canonical
from workloads.runtime import mxnet as runtime

MATCHED = (
    "dense weights stored (out, in): canonical (in, out) transposed",
    "Glorot-uniform kernels (Xavier uniform, avg fan, magnitude 3) and zero biases (Gluon's default bias)",
    "SGD momentum is v = m*v - lr*g, w += v: the plain form (PyTorch's) for a constant learning rate",
    "the loss is per sample and Trainer.step(batch_size) rescales gradients by 1/batch: the mean loss's gradient",
    "padding=1 for 3x3 'same' convolutions; NCHW, so flatten is already in canonical order",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(s, dropout=True) -> nn.HybridSequential:
    glorot = mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)  # Glorot uniform, as Keras
    channels = s.image_shape[0]
    conv_rate, dense_rate = (s.dropout_conv, s.dropout_dense) if dropout else (0.0, 0.0)  # rate 0: identity
    net = nn.HybridSequential()
    net.add(
        nn.Conv2D(s.conv1_filters, 3, padding=1, in_channels=channels, weight_initializer=glorot),  # "same"  # phrase: conv3x3-same
        nn.Activation("relu"),
        nn.Conv2D(s.conv1_filters, 3, padding=1, in_channels=s.conv1_filters, weight_initializer=glorot),
        nn.MaxPool2D(2, 2), nn.Activation("relu"), nn.Dropout(conv_rate),  # phrase: max-pool, dropout
        nn.Conv2D(s.conv2_filters, 3, padding=1, in_channels=s.conv1_filters, weight_initializer=glorot),
        nn.Activation("relu"),
        nn.Conv2D(s.conv2_filters, 3, padding=1, in_channels=s.conv2_filters, weight_initializer=glorot),
        nn.MaxPool2D(2, 2), nn.Activation("relu"), nn.Dropout(conv_rate),
        nn.Flatten(),  # phrase: flatten
        nn.Dense(s.dense_units, in_units=s.conv2_filters * 8 * 8, weight_initializer=glorot),  # phrase: dense
        nn.Activation("relu"), nn.Dropout(dense_rate),
        nn.Dense(s.classes, in_units=s.dense_units, weight_initializer=glorot),  # logits: softmax lives in the loss
    )
    return net


def build(s, context, dropout=True):
    net = vgg_style_cnn(s, dropout)
    net.initialize(ctx=context)
    return net


def make_trainer(net, s):
    # MXNet's momentum: v = m*v - lr*g; w += v. For a constant lr this is PyTorch's plain form.
    return gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": s.learning_rate, "momentum": s.momentum})  # phrase: sgd-momentum


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(net: nn.HybridSequential, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels are already OIHW; dense weights are stored (out, in)."""
    convolutions = [layer for layer in net if isinstance(layer, nn.Conv2D)]
    denses = [layer for layer in net if isinstance(layer, nn.Dense)]
    for layer, name in zip(convolutions, ("conv1", "conv2", "conv3", "conv4")):
        layer.weight.set_data(mx.nd.array(params[f"{name}.kernel"]))
        layer.bias.set_data(mx.nd.array(params[f"{name}.bias"]))
    for layer, name in zip(denses, ("dense1", "dense2")):
        layer.weight.set_data(mx.nd.array(canonical.dense_to_out_in(params[f"{name}.kernel"])))
        layer.bias.set_data(mx.nd.array(params[f"{name}.bias"]))


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return build(run.settings, policy.device)

    def build_parity_model(self, run, policy, batch):
        # Dropout off for the steps: a model built with dropout rate 0 (Gluon's Dropout(0) is the identity).
        # Not autograd.record(train_mode=False): MXNet 1.9.1's CPU backward in predict mode returns wrong,
        # run-to-run different gradients (pooling's backward), so the steps run in train mode.
        return build(run.settings, policy.device, dropout=False)

    def load_canonical(self, net, params):
        load_canonical(net, params)

    def make_optimizer(self, net, run, policy):
        return make_trainer(net, run.settings)

    def loss_function(self):
        return gluon.loss.SoftmaxCrossEntropyLoss()  # phrase: softmax-cross-entropy


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
