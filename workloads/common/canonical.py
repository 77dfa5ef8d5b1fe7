"""Canonical, framework-neutral parameters and fixed input batches: the parity check's ground truth.

Every framework loads these numpy arrays into its own model, converting layouts where it differs,
runs a forward pass (and, for the training workloads, one optimizer step) on the same batch, and
the outputs are compared. Numpy only.

Canonical layouts (each framework converts FROM these):

- convolution kernel ``<layer>.kernel``: (out_channels, in_channels, kernel_h, kernel_w), "OIHW";
  bias ``<layer>.bias``: (out_channels,)
- dense kernel ``<layer>.kernel``: (in_features, out_features), so y = x @ kernel + bias
- the CNN flattens its last feature map in (channels, height, width) order (NCHW); a framework
  that runs NHWC must flatten in that same order (transpose first) or permute dense1's rows
- batch norm ``<layer>.gamma/.beta/.moving_mean/.moving_variance``, epsilon ``BN_EPSILON``
  (1e-5; Keras' default is 1e-3), inference uses the moving statistics
- embedding ``embedding.embeddings``: (vocabulary, embedding_size)
- GRU, the cuDNN / PyTorch "reset-after" form, gate order [reset, update, new]:
  ``gru.kernel`` (input, 3*hidden), ``gru.recurrent_kernel`` (hidden, 3*hidden),
  ``gru.input_bias`` (3*hidden,), ``gru.recurrent_bias`` (3*hidden,):
      r  = sigmoid(x W_r + b_ir + h U_r + b_hr)
      z  = sigmoid(x W_z + b_iz + h U_z + b_hz)
      n  = tanh(x W_n + b_in + r * (h U_n + b_hn))
      h' = (1 - z) * n + z * h          (h0 = 0)
  Keras orders gates [update, reset, new] and stacks the two biases as a (2, 3*hidden) array.

Parity outputs (what ``parity()`` in each workload file returns, as float arrays):
- cnn:      "logits" (batch, 10) in inference mode; "logits_after_training" after PARITY_STEPS
            SGD-momentum steps on the batch with dropout OFF (inference-mode forward inside the
            step: dropout is random and frameworks' generators differ). Two steps, because the
            momentum variant (plain vs "unit gain", sign conventions) only shows from step two.
- gru:      "logits" (batch, 2); "logits_after_training" after PARITY_STEPS Adam steps
- resnet50: "features" (batch, 2048) in inference mode (batch norm on moving statistics)
All in fp32, loss = mean softmax cross-entropy over the batch, the workload's own learning rate.
"""
from pathlib import Path
from typing import Dict, Tuple, Union

import numpy as np

from workloads.common import hyperparams

BN_EPSILON = 1e-5
PARITY_BATCH = {"cnn": 8, "resnet50": 2, "gru": 8}
PARITY_STEPS = 2
PARITY_TOLERANCE = 1e-4  # max |a - b| / max |reference|, fp32
WEIGHTS_FILE, BATCH_FILE = "weights.npz", "batch.npz"
# ResNet-50 v1.5: (width, blocks, stride of the first block), as in the workload files
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))


def _glorot(rng, shape, fan_in, fan_out) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def _small(rng, shape, scale=0.1) -> np.ndarray:
    return rng.uniform(-scale, scale, size=shape).astype(np.float32)


def _conv(rng, params, name, out_channels, in_channels, size, bias=True):
    fan_in, fan_out = in_channels * size * size, out_channels * size * size
    params[f"{name}.kernel"] = _glorot(rng, (out_channels, in_channels, size, size), fan_in, fan_out)
    if bias:
        params[f"{name}.bias"] = _small(rng, (out_channels,))


def _dense(rng, params, name, in_features, out_features):
    params[f"{name}.kernel"] = _glorot(rng, (in_features, out_features), in_features, out_features)
    params[f"{name}.bias"] = _small(rng, (out_features,))


def _batch_norm(rng, params, name, channels, gamma_scale=1.0):
    params[f"{name}.gamma"] = (gamma_scale * rng.uniform(0.5, 1.5, size=channels)).astype(np.float32)
    params[f"{name}.beta"] = _small(rng, (channels,))
    params[f"{name}.moving_mean"] = _small(rng, (channels,))
    params[f"{name}.moving_variance"] = rng.uniform(0.5, 1.5, size=channels).astype(np.float32)


def cnn_parameters(seed: int = hyperparams.SEED) -> Dict[str, np.ndarray]:
    s = hyperparams.settings("cnn", "full")
    rng = np.random.default_rng(seed)
    params: Dict[str, np.ndarray] = {}
    channels = s.image_shape[0]
    _conv(rng, params, "conv1", s.conv1_filters, channels, 3)
    _conv(rng, params, "conv2", s.conv1_filters, s.conv1_filters, 3)
    _conv(rng, params, "conv3", s.conv2_filters, s.conv1_filters, 3)
    _conv(rng, params, "conv4", s.conv2_filters, s.conv2_filters, 3)
    _dense(rng, params, "dense1", s.conv2_filters * 8 * 8, s.dense_units)
    _dense(rng, params, "dense2", s.dense_units, s.classes)
    return params


def resnet50_parameters(seed: int = hyperparams.SEED) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    params: Dict[str, np.ndarray] = {}
    _conv(rng, params, "stem.conv", 64, 3, 7, bias=False)
    _batch_norm(rng, params, "stem.bn", 64)
    in_channels = 64
    for stage, (width, blocks, _) in enumerate(RESNET50_STAGES, start=1):
        for block in range(blocks):
            prefix = f"stage{stage}.block{block}"
            out_channels = width * 4
            _conv(rng, params, f"{prefix}.conv1", width, in_channels, 1, bias=False)
            _batch_norm(rng, params, f"{prefix}.bn1", width)
            _conv(rng, params, f"{prefix}.conv2", width, width, 3, bias=False)
            _batch_norm(rng, params, f"{prefix}.bn2", width)
            _conv(rng, params, f"{prefix}.conv3", out_channels, width, 1, bias=False)
            # a small last gamma keeps 16 random residual blocks from blowing activations up
            _batch_norm(rng, params, f"{prefix}.bn3", out_channels, gamma_scale=0.2)
            if block == 0:
                _conv(rng, params, f"{prefix}.shortcut.conv", out_channels, in_channels, 1, bias=False)
                _batch_norm(rng, params, f"{prefix}.shortcut.bn", out_channels)
            in_channels = out_channels
    return params


def gru_parameters(seed: int = hyperparams.SEED) -> Dict[str, np.ndarray]:
    s = hyperparams.settings("gru", "full")
    rng = np.random.default_rng(seed)
    hidden = s.hidden_size
    params = {
        "embedding.embeddings": rng.uniform(-0.05, 0.05, size=(s.vocabulary, s.embedding_size)).astype(np.float32),
        "gru.kernel": _glorot(rng, (s.embedding_size, 3 * hidden), s.embedding_size, 3 * hidden),
        "gru.recurrent_kernel": _glorot(rng, (hidden, 3 * hidden), hidden, 3 * hidden),
        "gru.input_bias": _small(rng, (3 * hidden,)),
        "gru.recurrent_bias": _small(rng, (3 * hidden,)),
    }
    _dense(rng, params, "dense", hidden, s.classes)
    return params


def parameters(workload: str, seed: int = hyperparams.SEED) -> Dict[str, np.ndarray]:
    return {"cnn": cnn_parameters, "resnet50": resnet50_parameters, "gru": gru_parameters}[workload](seed)


def parity_batch(workload: str, seed: int = hyperparams.SEED + 1) -> Dict[str, np.ndarray]:
    """A fixed input batch (and labels for the training workloads)."""
    rng = np.random.default_rng(seed)
    size = PARITY_BATCH[workload]
    s = hyperparams.settings(workload, "full")
    if workload == "gru":
        tokens = rng.integers(1, s.vocabulary, size=(size, s.sequence_length)).astype(np.int32)
        tokens[: size // 2, -20:] = 0  # some post-padding, as real reviews have
        return {"x": tokens, "y": (np.arange(size) % s.classes).astype(np.int64)}
    images = rng.uniform(0.0, 1.0, size=(size, *s.image_shape)).astype(np.float32)
    batch = {"x": images}
    if workload == "cnn":
        batch["y"] = (np.arange(size) % s.classes).astype(np.int64)
    return batch


def parameter_count(params: Dict[str, np.ndarray]) -> int:
    """Trainable parameters only: batch norm's moving statistics are state, not parameters."""
    return int(sum(a.size for name, a in params.items() if not name.endswith((".moving_mean", ".moving_variance"))))


def write(folder: Union[str, Path], workload: str) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / WEIGHTS_FILE, **parameters(workload))
    np.savez(folder / BATCH_FILE, **parity_batch(workload))
    return folder


def load(folder: Union[str, Path]) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """Canonical weights and batch; plain arrays only (never unpickled)."""
    folder = Path(folder)
    with np.load(folder / WEIGHTS_FILE, allow_pickle=False) as weights, \
            np.load(folder / BATCH_FILE, allow_pickle=False) as batch:
        return {k: weights[k] for k in weights.files}, {k: batch[k] for k in batch.files}


# --- layout conversions, numpy only: each framework file names the ones it uses -------------------

def oihw_to_hwio(kernel: np.ndarray) -> np.ndarray:
    """Convolution kernel for TensorFlow / Keras / JAX (height, width, in, out)."""
    return np.ascontiguousarray(kernel.transpose(2, 3, 1, 0))


def dense_to_out_in(kernel: np.ndarray) -> np.ndarray:
    """Dense kernel for frameworks that store (out, in) and compute x @ W.T (PyTorch, MXNet, Chainer)."""
    return np.ascontiguousarray(kernel.T)


def nchw_rows_to_nhwc_rows(kernel: np.ndarray, channels: int, height: int, width: int) -> np.ndarray:
    """Permute dense1's input rows for a model that flattens NHWC feature maps."""
    out = kernel.shape[1]
    return np.ascontiguousarray(kernel.reshape(channels, height, width, out).transpose(1, 2, 0, 3).reshape(-1, out))


def gru_gates_rzn_to_zrn(matrix: np.ndarray) -> np.ndarray:
    """Reorder the last axis's three gate blocks from canonical [r, z, n] to Keras' [z, r, n]."""
    r, z, n = np.split(matrix, 3, axis=-1)
    return np.ascontiguousarray(np.concatenate([z, r, n], axis=-1))
