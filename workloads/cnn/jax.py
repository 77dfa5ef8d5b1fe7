"""VGG-style CNN trained on CIFAR-10, in JAX: a Flax linen model, an Optax optimizer, one jax.jit step.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
What to notice: the model is a pure function of an explicit parameter pytree; the step (forward,
gradient, optimizer update) is one compiled XLA program, and dropout takes an explicit PRNG key.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from workloads.common import canonical
from workloads.runtime import jax as runtime

MATCHED = (
    "input NCHW as every framework; the model transposes it to NHWC (Flax's layout) in the graph, "
    "and back to NCHW before the flatten, so dense1's rows keep the canonical (C, H, W) order",
    "convolution kernels stored HWIO: canonical OIHW transposed; dense kernels (in, out) as is",
    "explicit padding ((1, 1), (1, 1)) on the 3x3 convolutions, as PyTorch's padding=1",
    "Glorot-uniform kernels (Flax's default is LeCun-normal) and zero biases",
    "optax.sgd(momentum=0.9) is the plain form v = m*v + g, w -= lr*v (no dampening, no unit gain)",
    "loss optax.softmax_cross_entropy_with_integer_labels, mean over the batch",
    "dropout takes an explicit PRNG key, split off anew inside every step",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(nn.Module):
    s: object
    dtype: object = jnp.float32  # compute dtype; parameters stay float32

    @nn.compact
    def __call__(self, images, train: bool = False):  # images: (N, C, H, W); inference by default
        s = self.s

        def conv(filters, name):  # padding 1 on each side: "same", as PyTorch's padding=1  # phrase: conv3x3-same
            return nn.Conv(filters, (3, 3), padding=((1, 1), (1, 1)), kernel_init=nn.initializers.glorot_uniform(),
                           dtype=self.dtype, name=name)

        def dense(units, name):  # phrase: dense
            return nn.Dense(units, kernel_init=nn.initializers.glorot_uniform(), dtype=self.dtype, name=name)

        def pool(x):  # phrase: max-pool
            return nn.max_pool(x, (2, 2), strides=(2, 2))

        def drop(x, rate):  # off at inference (FAIRNESS.md: eval-mode), and in the parity steps  # phrase: dropout
            return nn.Dropout(rate, deterministic=not train)(x)

        x = jnp.transpose(images, (0, 2, 3, 1)).astype(self.dtype)  # -> NHWC
        x = nn.relu(conv(s.conv1_filters, "conv1")(x))
        x = conv(s.conv1_filters, "conv2")(x)
        x = drop(nn.relu(pool(x)), s.dropout_conv)
        x = nn.relu(conv(s.conv2_filters, "conv3")(x))
        x = conv(s.conv2_filters, "conv4")(x)
        x = drop(nn.relu(pool(x)), s.dropout_conv)
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)  # flatten in (C, H, W) order  # phrase: flatten
        x = drop(nn.relu(dense(s.dense_units, "dense1")(x)), s.dropout_dense)
        return dense(s.classes, "dense2")(x).astype(jnp.float32)  # logits: softmax lives in the loss


def init_params(model, run):
    images = jnp.zeros((1, *run.settings.image_shape), jnp.float32)
    return runtime.initial_variables(run, model, images)["params"]


OPTIMIZER = "optax.sgd(momentum=0.9), the plain form v = m*v + g, w -= lr*v"


def make_optimizer(s) -> optax.GradientTransformation:
    # optax's momentum is the plain form v = m*v + g; w -= lr*v, as PyTorch's.
    return optax.sgd(s.learning_rate, momentum=s.momentum)  # phrase: sgd-momentum


def make_loss(model, dropout: bool = True):
    def loss_of(params, images, labels, dropout_key):
        logits = model.apply({"params": params}, images, train=dropout, rngs={"dropout": dropout_key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()  # phrase: softmax-cross-entropy
    return loss_of


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(params: dict, canonical_params: dict) -> dict:  # phrase: load-weights
    """Convolution kernels OIHW -> HWIO; dense kernels are already (in, out). Returns new params."""
    loaded = {}
    for name in ("conv1", "conv2", "conv3", "conv4"):
        loaded[name] = {"kernel": jnp.asarray(canonical.oihw_to_hwio(canonical_params[f"{name}.kernel"])),
                        "bias": jnp.asarray(canonical_params[f"{name}.bias"])}
    for name in ("dense1", "dense2"):
        loaded[name] = {"kernel": jnp.asarray(canonical_params[f"{name}.kernel"]),
                        "bias": jnp.asarray(canonical_params[f"{name}.bias"])}
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
    for new, old in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(params)):
        assert new.shape == old.shape, (new.shape, old.shape)
    return loaded


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, dropout=True):
        model = VGGStyleCNN(run.settings, dtype=policy.compute_dtype)
        return runtime.Model(model, init_params(model, run), make_loss(model, dropout))

    def build_parity_model(self, run, policy, batch):
        # dropout off for the steps too: dropout is random and frameworks' generators differ
        return self.build_model(run, policy, dropout=False)

    def load_canonical(self, model, params):
        model.params = load_canonical(model.params, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(run.settings)

    def describe_optimizer(self):
        return OPTIMIZER


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
