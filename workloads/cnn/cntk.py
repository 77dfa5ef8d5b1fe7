"""VGG-style CNN trained on CIFAR-10, in CNTK 2.7's own API (cntk.layers, Trainer, momentum_sgd).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the loss
(cross_entropy_with_softmax). What to notice: CNTK's momentum is "unit gain" by default
(v = m*v + (1-m)*g), which the original study had to switch off; unit_gain=False is the plain form
every other framework uses. Runs on Python 3.6 (CNTK 2.7's last).
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import cntk as runtime

import cntk as C


MATCHED = (
    "convolution kernels (out, in, height, width): canonical OIHW as is; biases shaped (out, 1, 1)",
    "NCHW input, CNTK's only image layout; the flatten is (C, H, W) order, so dense1's rows are canonical",
    "pad=True on stride-1 3x3 convolutions pads 1 on each side, as PyTorch's padding=1",
    "momentum_sgd(unit_gain=False): v = m*v + lr*g, w -= v, PyTorch's plain momentum at a constant rate "
    "(CNTK's default unit gain scales the gradient by 1 - m)",
    "the learner gets the batch's mean gradient and applies the rate as is (minibatch_size=IGNORE: "
    "no rescaling by a reference minibatch size)",
    "one-hot float labels for cross_entropy_with_softmax, built on the host per batch",
    "--init framework: Glorot-uniform kernels and zero biases, CNTK's layer defaults",
    "dropout is active in Trainer.train_minibatch only; eval() runs inference (FAIRNESS.md: eval-mode)",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(s, dropout: bool = True):
    """The network as a CNTK function of its one input, the images; returns (logits, layers by name)."""
    def conv(filters):  # pad=True on a 3x3 stride-1 kernel: 1 on each side, as PyTorch's padding=1  # phrase: conv3x3-same
        return C.layers.Convolution2D((3, 3), filters, pad=True, activation=None)

    def drop(rate, x):  # the parity check trains with dropout off  # phrase: dropout
        return C.layers.Dropout(rate)(x) if dropout else x

    layers = {"conv1": conv(s.conv1_filters), "conv2": conv(s.conv1_filters),
              "conv3": conv(s.conv2_filters), "conv4": conv(s.conv2_filters),
              "dense1": C.layers.Dense(s.dense_units, activation=None),
              "dense2": C.layers.Dense(s.classes, activation=None)}
    pool = C.layers.MaxPooling((2, 2), strides=(2, 2))  # phrase: max-pool
    images = C.input_variable(s.image_shape, name="images")  # (3, 32, 32); the batch axis is implicit
    x = C.relu(layers["conv1"](images))
    x = drop(s.dropout_conv, C.relu(pool(layers["conv2"](x))))
    x = C.relu(layers["conv3"](x))
    x = drop(s.dropout_conv, C.relu(pool(layers["conv4"](x))))
    x = C.reshape(x, (s.conv2_filters * 8 * 8,))  # flatten in (C, H, W) order, the canonical one  # phrase: flatten
    x = drop(s.dropout_dense, C.relu(layers["dense1"](x)))
    logits = layers["dense2"](x)  # logits: softmax lives in the loss
    return logits, layers


# --- loss and optimizer ---------------------------------------------------------------------------

def loss(logits, labels):  # phrase: softmax-cross-entropy
    """Softmax folded into the loss (FAIRNESS.md: softmax-in-loss), per sample: the Trainer averages the batch."""
    return C.cross_entropy_with_softmax(logits, labels)


# what update ran (FAIRNESS.md: fused-optimizers): CNTK's own C++ learner, no ops written out
OPTIMIZER = ("built-in: C.momentum_sgd(unit_gain=False), CNTK's C++ momentum learner (one update per parameter; "
             "the plain momentum PyTorch's SGD computes, dampening 0)")


def make_learner(logits, s):  # phrase: sgd-momentum
    """Plain momentum, v = m*v + lr*g, as PyTorch's (FAIRNESS.md: framework-defaults): CNTK's default unit
    gain would scale the gradient by 1 - m; minibatch_size=IGNORE applies the rate to the mean gradient."""
    return C.momentum_sgd(logits.parameters, lr=s.learning_rate, momentum=s.momentum,
                          unit_gain=False, minibatch_size=C.learners.IGNORE)


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Canonical arrays in CNTK's layouts, by "<layer>.W" / "<layer>.b" (numpy only)."""
    arrays = {}
    for name in ("conv1", "conv2", "conv3", "conv4"):
        arrays[name + ".W"] = params[name + ".kernel"]  # OIHW, as CNTK stores it
        arrays[name + ".b"] = runtime.conv_bias(params[name + ".bias"])
    for name in ("dense1", "dense2"):
        arrays[name + ".W"] = params[name + ".kernel"]  # (in, out): times(x, W) = x @ W
        arrays[name + ".b"] = params[name + ".bias"]
    return arrays


def load_canonical(layers: dict, params: dict) -> None:  # phrase: load-weights
    for key, value in canonical_arrays(params).items():
        name, weight = key.split(".")
        parameter = getattr(layers[name], weight)
        assert parameter.shape == value.shape, (key, parameter.shape, value.shape)
        parameter.value = value


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, dropout=True):
        logits, layers = vgg_style_cnn(run.settings, dropout)
        return runtime.Network(logits, layers)

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too: dropout is random and frameworks' generators differ
        return self.build_model(run, policy, dropout=False)

    def load_canonical(self, network, params):
        load_canonical(network.parameters, params)

    def make_learner(self, network, run, policy):
        return make_learner(network.output, run.settings)

    def loss(self, logits, labels):
        return loss(logits, labels)

    def train(self, run, policy, network, classifier, data):
        run.set_provenance(extras={"optimizer": OPTIMIZER})
        super().train(run, policy, network, classifier, data)


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
