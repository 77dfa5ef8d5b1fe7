"""VGG-style CNN trained on CIFAR-10, in MXNet's symbolic Module API.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum,
settings from workloads/cnn/__init__.py. The model is a symbol graph (mx.sym); a Module binds
it to fixed shapes once and runs forward_backward + update: the API the 2018 study timed fastest.
Softmax is folded into the loss (SoftmaxOutput: forward gives probabilities, backward the
cross-entropy gradient).
"""
import mxnet as mx

from workloads.common import canonical
from workloads.runtime import mxnet_module as runtime

MATCHED = (
    "dense weights stored (out, in): canonical (in, out) transposed",
    "Glorot-uniform kernels (Xavier uniform, avg fan, magnitude 3) and zero biases (MXNet's default bias)",
    "SGD momentum is v = m*v - lr*g, w += v: the plain form (PyTorch's) for a constant learning rate",
    "SoftmaxOutput's gradient is summed over the batch; the Module sets rescale_grad = 1/batch: "
    "the mean loss's gradient",
    "pad=(1, 1) for 3x3 'same' convolutions; NCHW, so flatten is already in canonical order",
)


# --- model --------------------------------------------------------------------------------------

def vgg_style_cnn(s, dropout=True) -> mx.sym.Symbol:
    """The logits symbol; parameters are named <layer>_weight / <layer>_bias."""
    def conv(x, name, filters):  # phrase: conv3x3-same
        return mx.sym.Convolution(x, num_filter=filters, kernel=(3, 3), pad=(1, 1), name=name)  # "same"

    def drop(x, rate):  # phrase: dropout
        return mx.sym.Dropout(x, p=rate) if dropout else x  # active only in forward(is_train=True)

    x = mx.sym.var("data")
    x = mx.sym.relu(conv(x, "conv1", s.conv1_filters))
    x = conv(x, "conv2", s.conv1_filters)
    x = drop(mx.sym.relu(mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")), s.dropout_conv)  # phrase: max-pool
    x = mx.sym.relu(conv(x, "conv3", s.conv2_filters))
    x = conv(x, "conv4", s.conv2_filters)
    x = drop(mx.sym.relu(mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")), s.dropout_conv)
    x = mx.sym.Flatten(x)  # phrase: flatten
    x = drop(mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=s.dense_units, name="dense1")), s.dropout_dense)  # phrase: dense
    return mx.sym.FullyConnected(x, num_hidden=s.classes, name="dense2")  # logits: softmax lives in the loss


def build(s, context, batch_size, dropout=True) -> mx.mod.Module:
    module = mx.mod.Module(mx.sym.SoftmaxOutput(vgg_style_cnn(s, dropout), name="softmax"),  # phrase: softmax-cross-entropy, device-placement
                           data_names=("data",), label_names=("softmax_label",), context=context)
    module.bind(data_shapes=[("data", (batch_size, *s.image_shape))], label_shapes=[("softmax_label", (batch_size,))])  # phrase: compile-step
    module.init_params(mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3))  # Glorot uniform
    # phrase: sgd-momentum
    # MXNet's momentum: v = m*v - lr*g; w += v. For a constant lr this is PyTorch's plain form.
    # The Module sets rescale_grad = 1/batch_size itself.
    module.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": s.learning_rate, "momentum": s.momentum})
    # end phrase
    return module


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(module: mx.mod.Module, params: dict) -> None:  # phrase: load-weights
    """Convolution kernels are already OIHW; dense weights are stored (out, in)."""
    arguments = {}
    for name in ("conv1", "conv2", "conv3", "conv4", "dense1", "dense2"):
        kernel = params[f"{name}.kernel"]
        arguments[f"{name}_weight"] = mx.nd.array(canonical.dense_to_out_in(kernel) if kernel.ndim == 2 else kernel)
        arguments[f"{name}_bias"] = mx.nd.array(params[f"{name}.bias"])
    module.set_params(arguments, {}, allow_missing=False, allow_extra=False)


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, batch_size=None, dropout=True):
        return build(run.settings, policy.device, batch_size or run.settings.batch_size, dropout)

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too (dropout is random and frameworks' generators differ): the model
        # is built without its Dropout operators; forward_backward runs in training mode.
        return self.build_model(run, policy, len(batch["y"]), dropout=False)

    def load_canonical(self, module, params):
        load_canonical(module, params)

    def logits_symbol(self, run):
        return vgg_style_cnn(run.settings, dropout=False)


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
