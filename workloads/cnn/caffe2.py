"""VGG-style CNN trained on CIFAR-10, in Caffe2 (brew helpers, a training net and a test net).

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the loss (SoftmaxWithLoss).
What to notice: a Caffe2 model is operators on named blobs. The training net gets its gradient
operators from AddGradientOperators and its update operators from optimizer.build_sgd; the test net
is a second model over the same parameter blobs with dropout switched off (is_test=1).
"""
import numpy as np
from caffe2.python import brew, core, model_helper, optimizer, workspace

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import caffe2 as runtime

MATCHED = (
    "convolution kernels (out, in, h, w): canonical OIHW as is; FC weights (out, in): canonical transposed",
    "NCHW throughout; FC flattens (C, H, W) in that order, so dense1's columns are canonical",
    "pad=1 on the stride-1 3x3 convolutions, as PyTorch's padding=1",
    "MomentumSGDUpdate: v = m*v + lr*g, w -= v, PyTorch's plain momentum at a constant rate (no unit gain)",
    "SoftmaxWithLoss: mean softmax cross-entropy over the batch, int32 labels",
    "--init framework: Glorot-uniform kernels as UniformFill (Caffe2's XavierFill is uniform over "
    "+-sqrt(3/fan_in)), zero biases",
    "two nets over the same blobs: dropout in the training net, is_test=1 in the test net (FAIRNESS.md: eval-mode)",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(model, s, policy, is_test: bool, dropout: bool = True):
    """Add the network to `model` (blob "images" in, blob "logits" out)."""
    options = policy.operator_arguments  # cuDNN and its algorithm search on a GPU
    channels, flat = s.image_shape[0], s.conv2_filters * 8 * 8

    def conv(x, name, cin, cout):  # pad 1 on each side, as PyTorch's padding=1  # phrase: conv3x3-same
        return brew.conv(model, x, name, dim_in=cin, dim_out=cout, kernel=3, pad=1,
                         weight_init=runtime.glorot(cin * 9, cout * 9), bias_init=("ConstantFill", {}), **options)

    def drop(x, name, rate):  # the parity check trains with dropout off  # phrase: dropout
        return brew.dropout(model, x, name, ratio=rate, is_test=is_test) if dropout else x

    def pool(x, name):  # phrase: max-pool
        return brew.max_pool(model, x, name, kernel=2, stride=2, **options)

    x = brew.relu(model, conv("images", "conv1", channels, s.conv1_filters), "relu1")
    x = brew.relu(model, pool(conv(x, "conv2", s.conv1_filters, s.conv1_filters), "pool2"), "relu2")
    x = drop(x, "drop2", s.dropout_conv)
    x = brew.relu(model, conv(x, "conv3", s.conv1_filters, s.conv2_filters), "relu3")
    x = brew.relu(model, pool(conv(x, "conv4", s.conv2_filters, s.conv2_filters), "pool4"), "relu4")
    x = drop(x, "drop4", s.dropout_conv)
    # phrase: flatten, dense
    # FC flattens (N, C, H, W) to (N, C*H*W) in (C, H, W) order, the canonical one
    x = brew.fc(model, x, "dense1", dim_in=flat, dim_out=s.dense_units,
                weight_init=runtime.glorot(flat, s.dense_units), bias_init=("ConstantFill", {}))
    # end phrase
    x = drop(brew.relu(model, x, "relu5"), "drop5", s.dropout_dense)
    return brew.fc(model, x, "logits", dim_in=s.dense_units, dim_out=s.classes,  # softmax lives in the loss
                   weight_init=runtime.glorot(s.dense_units, s.classes), bias_init=("ConstantFill", {}))


# --- loss and optimizer ---------------------------------------------------------------------------

def add_loss_and_sgd(model, s) -> str:
    """SoftmaxWithLoss, the batch mean (FAIRNESS.md: softmax-in-loss), its gradient operators, and
    MomentumSGDUpdate: v = m*v + lr*g, w -= v, PyTorch's plain momentum (FAIRNESS.md: framework-defaults).
    Returns what update runs (FAIRNESS.md: fused-optimizers), read from the operators build_sgd added."""
    _, loss = model.net.SoftmaxWithLoss(["logits", "labels"], ["softmax", "loss"])  # phrase: softmax-cross-entropy
    model.AddGradientOperators([loss])
    before = runtime.count_ops(model.net)
    optimizer.build_sgd(model, base_learning_rate=s.learning_rate, policy="fixed", momentum=s.momentum,  # phrase: sgd-momentum
                        nesterov=False)
    added = [op.type for op in model.net.Proto().op[before:]]
    updates = added.count("MomentumSGDUpdate")
    assert updates == len(model.params), added
    return ("built-in op: MomentumSGDUpdate, one per parameter ({} of {} operators optimizer.build_sgd added; "
            "the rest are its iteration counter and fixed learning rate), plain momentum, no dampening").format(
                updates, len(added))


# --- the training and test nets ------------------------------------------------------------------

def build(run: Run, policy, dropout: bool = True):
    """The training model (forward, gradients, SGD updates) and the test model, over the same blobs,
    initialised and instantiated (shapes come from a first batch's blobs); records the optimizer."""
    s = run.settings
    train = model_helper.ModelHelper(name="cnn_train")
    test = model_helper.ModelHelper(name="cnn_test", init_params=False)
    with core.DeviceScope(policy.device):  # phrase: device-placement
        vgg_style_cnn(train, s, policy, is_test=False, dropout=dropout)
        run.set_provenance(extras={"optimizer": add_loss_and_sgd(train, s)})
        vgg_style_cnn(test, s, policy, is_test=True, dropout=dropout)
    feed_batch(np.zeros((s.batch_size, *s.image_shape), np.float32), policy)
    runtime.feed("labels", np.zeros(s.batch_size, np.int32), policy.device)
    workspace.RunNetOnce(train.param_init_net)
    runtime.create_net(run, policy, train.net)
    runtime.create_net(run, policy, test.net)
    return train, test


def feed_batch(images: np.ndarray, policy) -> None:
    """Images NCHW, as delivered (FAIRNESS.md: layouts)."""
    runtime.feed("images", images, policy.device)


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Blob name -> array in Caffe2's layout (numpy only): conv OIHW as is, FC weights (out, in)."""
    arrays = {}
    for name in ("conv1", "conv2", "conv3", "conv4"):
        arrays[name + "_w"], arrays[name + "_b"] = params[name + ".kernel"], params[name + ".bias"]
    for name, blob in (("dense1", "dense1"), ("dense2", "logits")):
        arrays[blob + "_w"] = canonical.dense_to_out_in(params[name + ".kernel"])
        arrays[blob + "_b"] = params[name + ".bias"]
    return arrays


def load_canonical(model, params: dict, policy) -> None:  # phrase: load-weights
    arrays = canonical_arrays(params)
    assert set(arrays) == {str(p) for p in model.params}, set(arrays) ^ {str(p) for p in model.params}
    for name, value in arrays.items():
        assert workspace.FetchBlob(name).shape == value.shape, name
        runtime.feed(name, value, policy.device)


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, dropout=True):
        train, test = build(run, policy, dropout)
        return runtime.Classifier(train, test, lambda images: feed_batch(images, policy), policy)

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too: dropout is random and frameworks' generators differ
        return self.build_model(run, policy, dropout=False)

    def load_canonical(self, classifier, params):
        load_canonical(classifier.train, params, classifier.policy)


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
