"""VGG-style CNN trained on CIFAR-10, in Keras 2.2 on CNTK (the original study's Keras(CNTK) row).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the loss
(categorical_crossentropy with from_logits=True, which Keras' CNTK backend maps to CNTK's
cross_entropy_with_softmax). Compare with workloads/cnn/keras.py: the same model in Keras 3.
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import keras_cntk as runtime

import keras
from keras import layers

from workloads.common import canonical, hyperparams

MATCHED = (
    "channels_first (NCHW), CNTK's native layout: no transposes in the convolutions",
    "Keras 2.2's Flatten turns channels_first maps to (H, W, C) before flattening (so dense weights "
    "port between layouts): dense1's canonical (C, H, W) rows are permuted to match "
    "(canonical.nchw_rows_to_nhwc_rows)",
    "convolution kernels stored HWIO (Keras' own layout on every backend): canonical OIHW transposed",
    "padding='same' on stride-1 3x3 convolutions pads 1 on each side, as PyTorch's padding=1",
    "Keras' SGD momentum v = m*v - lr*g, w += v equals the plain form v = m*v + g, w -= lr*v at a "
    "constant learning rate (no unit gain)",
    "loss: categorical_crossentropy(from_logits=True) on one-hot labels (Keras 2.2's sparse loss "
    "has no from_logits), the batch mean",
    "--init framework: Glorot-uniform kernels and zero biases, Keras' defaults",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(s, dropout: bool = True) -> "keras.Model":
    def conv(filters, name, **options):  # "same": pad 1 on each side, as PyTorch's padding=1  # phrase: conv3x3-same
        return layers.Conv2D(filters, 3, padding="same", data_format="channels_first", name=name, **options)

    def pool():  # phrase: max-pool
        return layers.MaxPooling2D(2, 2, data_format="channels_first")

    def drop(rate):  # the parity check trains with dropout off  # phrase: dropout
        return layers.Dropout(rate if dropout else 0.0)

    images = keras.Input(shape=s.image_shape)  # (channels, height, width), as the harness gives them
    x = conv(s.conv1_filters, "conv1", activation="relu")(images)
    x = conv(s.conv1_filters, "conv2")(x)
    x = drop(s.dropout_conv)(layers.Activation("relu")(pool()(x)))
    x = conv(s.conv2_filters, "conv3", activation="relu")(x)
    x = conv(s.conv2_filters, "conv4")(x)
    x = drop(s.dropout_conv)(layers.Activation("relu")(pool()(x)))
    x = layers.Flatten(data_format="channels_first")(x)  # Keras 2.2 flattens these maps in (H, W, C) order  # phrase: flatten
    x = layers.Dense(s.dense_units, activation="relu", name="dense1")(x)  # phrase: dense
    x = drop(s.dropout_dense)(x)
    logits = layers.Dense(s.classes, name="dense2")(x)  # logits: softmax lives in the loss
    return keras.Model(images, logits, name="vgg_style_cnn")


# --- loss and optimizer -------------------------------------------------------------------------

# what update ran (FAIRNESS.md: fused-optimizers)
OPTIMIZER = runtime.WRITTEN_OUT.format("Keras 2.2's SGD(momentum) (v = m*v - lr*g, w += v)")


def compile_model(model: "keras.Model", s) -> "keras.Model":
    model.compile(optimizer=keras.optimizers.SGD(lr=s.learning_rate, momentum=s.momentum),  # phrase: compile-step, sgd-momentum
                  loss=runtime.cross_entropy_from_logits)
    return model


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Each layer's weights in Keras' order and layout (numpy only): kernels HWIO, dense (in, out),
    dense1's rows in the (H, W, C) order of Keras 2.2's channels_first Flatten."""
    s = hyperparams.settings("cnn", "full")
    arrays = {name: [canonical.oihw_to_hwio(params[name + ".kernel"]), params[name + ".bias"]]
              for name in ("conv1", "conv2", "conv3", "conv4")}
    rows = canonical.nchw_rows_to_nhwc_rows(params["dense1.kernel"], s.conv2_filters, 8, 8)
    arrays["dense1"] = [rows, params["dense1.bias"]]
    arrays["dense2"] = [params["dense2.kernel"], params["dense2.bias"]]
    return arrays


def load_canonical(model: "keras.Model", params: dict) -> None:  # phrase: load-weights
    for name, weights in canonical_arrays(params).items():
        model.get_layer(name).set_weights(weights)


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, dropout=True):
        return compile_model(vgg_style_cnn(run.settings, dropout), run.settings)

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too: dropout is random and frameworks' generators differ
        return self.build_model(run, policy, dropout=False)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def train(self, run, policy, model, optimizer, data):
        run.set_provenance(extras={"optimizer": OPTIMIZER})
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
