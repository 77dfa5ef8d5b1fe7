"""VGG-style CNN trained on CIFAR-10, in Chainer.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/cnn/__init__.py. Chainer is define-by-run: the forward pass is plain
Python, `loss.backward()` builds the gradients, `optimizer.update()` applies them.
"""
import chainer
import chainer.functions as F
import chainer.links as L

from workloads.common import canonical
from workloads.runtime import chainer as runtime

MATCHED = (
    "dense kernels stored (out, in): canonical (in, out) transposed",
    "Glorot-uniform kernels and zero biases set explicitly (Chainer's default init is LeCun normal)",
    "MomentumSGD is v = m*v - lr*g, w += v: the plain form (v = -lr * PyTorch's v) for a constant lr",
    "pad=1 for 3x3 'same' convolutions; max pooling with cover_all=False (Chainer's default True can add a row)",
    "labels int32, as F.softmax_cross_entropy requires; NCHW, so flatten is already in canonical order",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(chainer.Chain):
    def __init__(self, s):
        super().__init__()
        self.s = s
        channels = s.image_shape[0]
        glorot = chainer.initializers.GlorotUniform  # as Keras (Chainer's default is LeCun normal)
        with self.init_scope():
            self.conv1 = L.Convolution2D(channels, s.conv1_filters, 3, pad=1, initialW=glorot())  # pad=1: "same"  # phrase: conv3x3-same
            self.conv2 = L.Convolution2D(s.conv1_filters, s.conv1_filters, 3, pad=1, initialW=glorot())
            self.conv3 = L.Convolution2D(s.conv1_filters, s.conv2_filters, 3, pad=1, initialW=glorot())
            self.conv4 = L.Convolution2D(s.conv2_filters, s.conv2_filters, 3, pad=1, initialW=glorot())
            self.dense1 = L.Linear(s.conv2_filters * 8 * 8, s.dense_units, initialW=glorot())  # phrase: dense
            self.dense2 = L.Linear(s.dense_units, s.classes, initialW=glorot())  # logits: softmax lives in the loss

    def forward(self, images):
        s = self.s
        h = F.relu(self.conv1(images))
        h = self.conv2(h)
        # phrase: max-pool, dropout
        # F.dropout is active only while chainer.config.train is True
        h = F.dropout(F.relu(F.max_pooling_2d(h, 2, stride=2, cover_all=False)), s.dropout_conv)
        # end phrase
        h = F.relu(self.conv3(h))
        h = self.conv4(h)
        h = F.dropout(F.relu(F.max_pooling_2d(h, 2, stride=2, cover_all=False)), s.dropout_conv)
        h = F.dropout(F.relu(self.dense1(h)), s.dropout_dense)  # L.Linear flattens (N, C, H, W) itself  # phrase: flatten
        return self.dense2(h)


def make_optimizer(model, s):  # phrase: sgd-momentum
    # Chainer's momentum: v = m*v - lr*g; w += v. For a constant lr this is PyTorch's plain form.
    optimizer = chainer.optimizers.MomentumSGD(lr=s.learning_rate, momentum=s.momentum)
    optimizer.setup(model)
    return optimizer


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels are already OIHW; dense kernels are stored (out, in)."""
    for name in ("conv1", "conv2", "conv3", "conv4"):
        layer = getattr(model, name)
        layer.W.array[...] = layer.xp.asarray(params[f"{name}.kernel"])
        layer.b.array[...] = layer.xp.asarray(params[f"{name}.bias"])
    for name in ("dense1", "dense2"):
        layer = getattr(model, name)
        layer.W.array[...] = layer.xp.asarray(canonical.dense_to_out_in(params[f"{name}.kernel"]))
        layer.b.array[...] = layer.xp.asarray(params[f"{name}.bias"])


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        model = VGGStyleCNN(run.settings)
        model.to_device(policy.device)
        return model

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return F.softmax_cross_entropy  # phrase: softmax-cross-entropy


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
