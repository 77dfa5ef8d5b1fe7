"""VGG-style CNN trained on CIFAR-10, in Chainer.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/common/hyperparams.py. Chainer is define-by-run: the forward pass is plain
Python, `loss.backward()` builds the gradients, `optimizer.update()` applies them.
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import chainer as env

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
            self.conv1 = L.Convolution2D(channels, s.conv1_filters, 3, pad=1, initialW=glorot())  # pad=1: "same"
            self.conv2 = L.Convolution2D(s.conv1_filters, s.conv1_filters, 3, pad=1, initialW=glorot())
            self.conv3 = L.Convolution2D(s.conv1_filters, s.conv2_filters, 3, pad=1, initialW=glorot())
            self.conv4 = L.Convolution2D(s.conv2_filters, s.conv2_filters, 3, pad=1, initialW=glorot())
            self.dense1 = L.Linear(s.conv2_filters * 8 * 8, s.dense_units, initialW=glorot())
            self.dense2 = L.Linear(s.dense_units, s.classes, initialW=glorot())  # logits: softmax lives in the loss

    def forward(self, images):
        s = self.s
        h = F.relu(self.conv1(images))
        h = self.conv2(h)
        # F.dropout is active only while chainer.config.train is True
        h = F.dropout(F.relu(F.max_pooling_2d(h, 2, stride=2, cover_all=False)), s.dropout_conv)
        h = F.relu(self.conv3(h))
        h = self.conv4(h)
        h = F.dropout(F.relu(F.max_pooling_2d(h, 2, stride=2, cover_all=False)), s.dropout_conv)
        h = F.dropout(F.relu(self.dense1(h)), s.dropout_dense)  # L.Linear flattens (N, C, H, W) itself
        return self.dense2(h)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:
    """Convolution kernels are already OIHW; dense kernels are stored (out, in)."""
    for name in ("conv1", "conv2", "conv3", "conv4"):
        layer = getattr(model, name)
        layer.W.array[...] = layer.xp.asarray(params[f"{name}.kernel"])
        layer.b.array[...] = layer.xp.asarray(params[f"{name}.bias"])
    for name in ("dense1", "dense2"):
        layer = getattr(model, name)
        layer.W.array[...] = layer.xp.asarray(canonical.dense_to_out_in(params[f"{name}.kernel"]))
        layer.b.array[...] = layer.xp.asarray(params[f"{name}.bias"])


def make_train_step(model, optimizer):
    def train_step(images, labels):
        loss = F.softmax_cross_entropy(model(images), labels)  # mean over the batch
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss  # a Variable on the device: no host sync per step
    return train_step


def make_optimizer(model, s):
    # Chainer's momentum: v = m*v - lr*g; w += v. For a constant lr this is PyTorch's plain form.
    optimizer = chainer.optimizers.MomentumSGD(lr=s.learning_rate, momentum=s.momentum)
    optimizer.setup(model)
    return optimizer


# --- run ----------------------------------------------------------------------------------------

def run(run: Run) -> None:
    s = run.settings
    device = env.select_device(run)

    with run.phase("data_load"):
        data = run.load_cifar10()

    with run.phase("model_build"):
        model = VGGStyleCNN(s)
        model.to_device(device)
        optimizer = make_optimizer(model, s)
        train_step = make_train_step(model, optimizer)
    run.set_parameter_count(env.parameter_count(model))

    # --- train
    with chainer.using_config("train", True):
        for _ in range(s.epochs):
            for images, labels in run.train_batches(data.x_train, data.y_train):
                loss = train_step(env.to_device(images, device), env.to_device(labels.astype(np.int32), device))
            run.end_epoch(float(loss.array))

    # --- evaluate
    with run.phase("evaluate"):
        correct, total = device.xp.zeros((), dtype=np.int64), 0
        # train=False: dropout off (lesson 5); no_backprop_mode: no graph, no gradients
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            for images, labels in run.eval_batches(data.x_test, data.y_test):
                predictions = model(env.to_device(images, device)).array.argmax(axis=1)
                correct += (predictions == env.to_device(labels, device)).sum()
                total += len(labels)
    run.record_accuracy(int(correct), total)
    env.record_peak_memory(run, device)


# --- parity -------------------------------------------------------------------------------------

def parity(run: Run, params: dict, batch: dict) -> dict:
    s = run.settings
    device = env.select_device(run)
    model = VGGStyleCNN(s)
    model.to_device(device)
    load_canonical(model, params)
    run.set_parameter_count(env.parameter_count(model))
    images = env.to_device(batch["x"], device)
    labels = env.to_device(batch["y"].astype(np.int32), device)
    # dropout off, for the steps too: dropout is random and frameworks' generators differ
    with chainer.using_config("train", False):
        with chainer.no_backprop_mode():
            logits = env.to_host(model(images).array)
        train_step = make_train_step(model, make_optimizer(model, s))
        for _ in range(canonical.PARITY_STEPS):
            train_step(images, labels)
        with chainer.no_backprop_mode():
            after = env.to_host(model(images).array)
    return {"logits": logits, "logits_after_training": after}
