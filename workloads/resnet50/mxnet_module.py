"""ResNet-50 v1.5 feature extraction (inference), in MXNet's symbolic Module API.

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
The symbol graph is bound once for inference (for_training=False: no gradient buffers).
Random weights and random inputs (seed 0): weights do not change the timing.
"""
import mxnet as mx

from workloads.common import canonical
from workloads.runtime import mxnet_module as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "BatchNorm(fix_gamma=False, eps=1e-5, use_global_stats=True): learned gamma, moving statistics at inference",
    "convolution kernels OIHW and NCHW input: canonical as is; layer names are canonical's with '.' -> '_'",
)
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)


# --- model --------------------------------------------------------------------------------------

def conv(x, name, channels, kernel, stride=1):
    return mx.sym.Convolution(x, num_filter=channels, kernel=(kernel, kernel), stride=(stride, stride),
                              pad=(kernel // 2, kernel // 2), no_bias=True, name=name)


def batch_norm(x, name):  # phrase: batch-norm
    # fix_gamma=False: MXNet's BatchNorm symbol otherwise pins gamma to 1
    return mx.sym.BatchNorm(x, fix_gamma=False, eps=canonical.BN_EPSILON, use_global_stats=True, name=name)


def bottleneck(x, prefix, in_channels, width, stride):  # phrase: residual-block
    out_channels = width * 4
    out = mx.sym.relu(batch_norm(conv(x, f"{prefix}_conv1", width, 1), f"{prefix}_bn1"))
    out = mx.sym.relu(batch_norm(conv(out, f"{prefix}_conv2", width, 3, stride), f"{prefix}_bn2"))  # v1.5 stride
    out = batch_norm(conv(out, f"{prefix}_conv3", out_channels, 1), f"{prefix}_bn3")
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        shortcut = batch_norm(conv(x, f"{prefix}_shortcut_conv", out_channels, 1, stride), f"{prefix}_shortcut_bn")
    return mx.sym.relu(out + shortcut)


def resnet50_features() -> mx.sym.Symbol:
    x = mx.sym.relu(batch_norm(conv(mx.sym.var("data"), "stem_conv", 64, 7, 2), "stem_bn"))
    x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    in_channels = 64
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for block in range(blocks):
            x = bottleneck(x, f"stage{stage}_block{block}", in_channels, width, stride if block == 0 else 1)
            in_channels = width * 4
    x = mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg")  # global average pool  # phrase: global-avg-pool
    return mx.sym.Flatten(x)  # (N, 2048)


def build(s, context, batch_size) -> mx.mod.Module:
    module = mx.mod.Module(resnet50_features(), data_names=("data",), label_names=None, context=context)
    module.bind(data_shapes=[("data", (batch_size, *s.image_shape))], for_training=False)
    module.init_params(mx.init.Xavier())  # gamma 1, beta 0, moving mean 0, moving variance 1
    return module


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(module: mx.mod.Module, params: dict) -> None:
    """kernel -> _weight, gamma/beta arguments; moving_mean/moving_variance -> auxiliary _moving_mean/_moving_var."""
    arguments, auxiliaries = {}, {}
    for name, value in params.items():
        layer, field = name.rsplit(".", 1)
        layer = layer.replace(".", "_")
        if field == "kernel":
            arguments[f"{layer}_weight"] = mx.nd.array(value)
        elif field in ("gamma", "beta"):
            arguments[f"{layer}_{field}"] = mx.nd.array(value)
        else:
            auxiliaries[f"{layer}_{'moving_mean' if field == 'moving_mean' else 'moving_var'}"] = mx.nd.array(value)
    module.set_params(arguments, auxiliaries, allow_missing=False, allow_extra=False)


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload. Bound
    for_training=False and run forward(is_train=False): no gradients (FAIRNESS.md: eval-mode)."""

    def build_model(self, run, policy, batch_size=None):
        return build(run.settings, policy.device, batch_size or run.settings.batch_size)

    def build_parity_model(self, run, policy, batch):
        return self.build_model(run, policy, len(batch["x"]))

    def load_canonical(self, module, params):
        load_canonical(module, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
