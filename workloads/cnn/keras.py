"""VGG-style CNN trained on CIFAR-10, in Keras 3: one file for the TensorFlow, JAX and PyTorch backends.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the loss (from_logits=True).
The model is written once in the Functional API; KERAS_BACKEND, set before the import, picks the
engine, and workloads/runtime/keras/ the convolution layout that engine runs best.
"""
import keras
from keras import layers

from workloads.common import canonical
from workloads.runtime import keras as runtime

MATCHED = (
    "input NCHW as every framework; channels_last models transpose it in the graph (Permute) and "
    "transpose back before Flatten, so dense1's rows keep the canonical (C, H, W) order",
    "convolution kernels stored HWIO: canonical OIHW transposed; dense kernels (in, out) as is",
    "padding='same' on stride-1 3x3 convolutions pads 1 on each side, as PyTorch's padding=1",
    "Keras' SGD momentum v = m*v - lr*g, w += v equals the plain form v = m*v + g, w -= lr*v "
    "at a constant learning rate (no unit gain); TensorFlow runs it as ResourceApplyKerasMomentum, "
    "torch as PyTorch's own fused SGD (runtime.sgd_momentum)",
    "Glorot-uniform kernels and zero biases are Keras' defaults",
    "loss SparseCategoricalCrossentropy(from_logits=True): mean softmax cross-entropy, integer labels",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(s, data_format: str, dropout: bool = True) -> keras.Model:
    def conv(filters, name, **options):  # "same": pad 1 on each side, as PyTorch's padding=1  # phrase: conv3x3-same
        return layers.Conv2D(filters, 3, padding="same", data_format=data_format, name=name, **options)

    def pool():  # phrase: max-pool
        return layers.MaxPooling2D(2, 2, data_format=data_format)

    def drop(rate):  # the parity check trains with dropout off  # phrase: dropout
        return layers.Dropout(rate if dropout else 0.0)

    images = keras.Input(shape=s.image_shape)  # (channels, height, width), as the harness gives them
    x = images if data_format == "channels_first" else layers.Permute((2, 3, 1))(images)  # -> NHWC
    x = conv(s.conv1_filters, "conv1", activation="relu")(x)
    x = conv(s.conv1_filters, "conv2")(x)
    x = drop(s.dropout_conv)(layers.ReLU()(pool()(x)))
    x = conv(s.conv2_filters, "conv3", activation="relu")(x)
    x = conv(s.conv2_filters, "conv4")(x)
    x = drop(s.dropout_conv)(layers.ReLU()(pool()(x)))
    if data_format == "channels_last":
        x = layers.Permute((3, 1, 2))(x)  # flatten in (C, H, W) order, as every other framework
    x = layers.Flatten()(x)  # phrase: flatten
    x = layers.Dense(s.dense_units, activation="relu", name="dense1")(x)  # phrase: dense
    x = drop(s.dropout_dense)(x)
    logits = layers.Dense(s.classes, name="dense2")(x)  # logits: softmax lives in the loss
    return keras.Model(images, logits, name="vgg_style_cnn")


# --- loss and optimizer -------------------------------------------------------------------------

def compile_model(model: keras.Model, s, policy: runtime.KerasPolicy) -> keras.Model:
    # jit_compile from the policy: XLA always on JAX, on TensorFlow in the compiled mode (a tf.function
    # otherwise), torch.compile on torch in the compiled mode (else eager). The optimizer is each
    # backend's own momentum op where it has one (runtime.sgd_momentum).
    model.compile(optimizer=runtime.sgd_momentum(learning_rate=s.learning_rate, momentum=s.momentum),  # phrase: compile-step
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),  # phrase: softmax-cross-entropy
                  jit_compile=policy.jit_compile)
    return model


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: keras.Model, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels OIHW -> HWIO; dense kernels are already (in, out)."""
    for name in ("conv1", "conv2", "conv3", "conv4"):
        model.get_layer(name).set_weights([canonical.oihw_to_hwio(params[f"{name}.kernel"]),
                                           params[f"{name}.bias"]])
    for name in ("dense1", "dense2"):
        model.get_layer(name).set_weights([params[f"{name}.kernel"], params[f"{name}.bias"]])


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, dropout=True):
        return compile_model(vgg_style_cnn(run.settings, policy.data_format, dropout), run.settings, policy)

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too: dropout is random and frameworks' generators differ
        return self.build_model(run, policy, dropout=False)

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
