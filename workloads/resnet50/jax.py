"""ResNet-50 v1.5 feature extraction (inference), in JAX: a Flax linen model, written out (Flax has no model zoo).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
The canonical weights (--init canonical, the default) and random inputs (seed 0): weights do not
change the timing. What to notice:
batch norm's moving statistics are a separate collection ("batch_stats") beside "params", and
inference is one jitted forward function; its first call (the warm pass) compiles it.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from workloads.common import canonical
from workloads.runtime import jax as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "every convolution pads explicitly on both sides (k//2), as PyTorch's padding=k//2; "
    "XLA's 'SAME' with stride 2 would pad only after",
    "max pool 3x3/2 pads ((1, 1), (1, 1)) with -inf (nn.max_pool), as PyTorch's padding=1",
    "batch-norm epsilon 1e-5 (Flax's default too), momentum 0.9 (= PyTorch's 0.1); "
    "use_running_average=True at inference: the moving statistics",
    "input NCHW as every framework; the model transposes it to NHWC (Flax's layout) in the graph",
    "convolution kernels stored HWIO: canonical OIHW transposed; batch norm gamma/beta -> scale/bias, "
    "moving mean/variance -> batch_stats mean/var",
    "parameter count: the 'params' collection only (batch_stats are state, as PyTorch's buffers)",
)


# --- model --------------------------------------------------------------------------------------

STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
EXPANSION = 4


def conv(filters, size, stride, name, dtype):
    pad = size // 2  # symmetric, as PyTorch's padding=size//2
    return nn.Conv(filters, (size, size), strides=(stride, stride), padding=((pad, pad), (pad, pad)),
                   use_bias=False, dtype=dtype, name=name)


def batch_norm(name, dtype):  # phrase: batch-norm
    return nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=canonical.BN_EPSILON, dtype=dtype, name=name)


class Bottleneck(nn.Module):
    width: int
    stride: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x):  # phrase: residual-block
        out_channels, dtype = self.width * EXPANSION, self.dtype
        y = nn.relu(batch_norm("bn1", dtype)(conv(self.width, 1, 1, "conv1", dtype)(x)))
        y = nn.relu(batch_norm("bn2", dtype)(conv(self.width, 3, self.stride, "conv2", dtype)(y)))  # v1.5 stride
        y = batch_norm("bn3", dtype)(conv(out_channels, 1, 1, "conv3", dtype)(y))
        shortcut = x
        if self.stride != 1 or x.shape[-1] != out_channels:
            shortcut = batch_norm("shortcut_bn", dtype)(conv(out_channels, 1, self.stride, "shortcut_conv", dtype)(x))
        return nn.relu(y + shortcut)


class ResNet50Features(nn.Module):
    dtype: object = jnp.float32  # compute dtype; parameters stay float32

    @nn.compact
    def __call__(self, images):  # images: (N, C, H, W)
        x = jnp.transpose(images, (0, 2, 3, 1)).astype(self.dtype)  # -> NHWC
        x = nn.relu(batch_norm("stem_bn", self.dtype)(conv(64, 7, 2, "stem_conv", self.dtype)(x)))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))  # pads with -inf
        for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
            for block in range(blocks):
                x = Bottleneck(width, stride if block == 0 else 1, self.dtype, name=f"stage{stage}_block{block}")(x)
        return jnp.mean(x, axis=(1, 2)).astype(jnp.float32)  # global average pool -> (N, 2048)  # phrase: global-avg-pool


def init_variables(model, run):
    images = jnp.zeros((1, *run.settings.image_shape), jnp.float32)
    return runtime.initial_variables(run, model, images)  # {"params": ..., "batch_stats": ...}


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(variables: dict, params: dict) -> dict:
    """Kernels OIHW -> HWIO; batch norm gamma/beta -> params scale/bias, moving statistics -> batch_stats.

    Canonical "stage1.block0.shortcut.conv" is module "stage1_block0" / "shortcut_conv";
    "stem.conv" is top-level "stem_conv". Returns new variables.
    """
    loaded = {"params": {}, "batch_stats": {}}

    def place(collection, name, leaves):
        first, _, rest = name.partition(".")
        if first == "stem":
            loaded[collection][name.replace(".", "_")] = leaves
        else:  # stageS.blockB.<layer>[.<sub>]
            block, _, layer = rest.partition(".")
            loaded[collection].setdefault(f"{first}_{block}", {})[layer.replace(".", "_")] = leaves

    used = 0
    for name in sorted({key.rsplit(".", 1)[0] for key in params}):
        if f"{name}.kernel" in params:
            place("params", name, {"kernel": jnp.asarray(canonical.oihw_to_hwio(params[f"{name}.kernel"]))})
            used += 1
        else:
            place("params", name, {"scale": jnp.asarray(params[f"{name}.gamma"]),
                                   "bias": jnp.asarray(params[f"{name}.beta"])})
            place("batch_stats", name, {"mean": jnp.asarray(params[f"{name}.moving_mean"]),
                                        "var": jnp.asarray(params[f"{name}.moving_variance"])})
            used += 4
    assert used == len(params), f"loaded {used} of {len(params)} canonical arrays"
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(variables)
    for new, old in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(variables)):
        assert new.shape == old.shape, (new.shape, old.shape)
    return loaded


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. Inference only:
    no gradient is ever taken (FAIRNESS.md: eval-mode); batch norm on its moving statistics."""

    def build_model(self, run, policy):
        model = ResNet50Features(dtype=policy.compute_dtype)
        return runtime.Model(model, init_variables(model, run))

    def load_canonical(self, model, params):
        model.params = load_canonical(model.params, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
