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

What each workload's parameters are, what its parity batch holds and which outputs its
``parity()`` returns are in its declaration (`workloads/<workload>/__init__.py`: ``canonical_layers``,
``parity_batch`` / ``parity_input``, ``parity_outputs``); this module only draws the arrays.
Parity outputs, as float arrays, in fp32:
- a training workload: "logits" in inference mode, and "logits_after_training" after PARITY_STEPS
  optimizer steps on the batch with dropout OFF (inference-mode forward inside the step: dropout is
  random and frameworks' generators differ). Two steps, because an optimizer's variant (e.g. plain
  vs "unit gain" momentum, sign conventions) only shows from step two. Loss = mean softmax
  cross-entropy over the batch, the workload's own learning rate.
- an inference workload: "features" in inference mode (batch norm on moving statistics).
"""
from pathlib import Path
from typing import Dict, Tuple, Union

import numpy as np

from workloads.common import declaration, hyperparams, safe_files

BN_EPSILON = 1e-5
PARITY_STEPS = 2
PARITY_TOLERANCE = 1e-4  # max |a - b| / max |reference|, fp32
WEIGHTS_FILE, BATCH_FILE = "weights.npz", "batch.npz"


def _glorot(rng, shape, fan_in, fan_out) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def _small(rng, shape, scale=0.1) -> np.ndarray:
    return rng.uniform(-scale, scale, size=shape).astype(np.float32)


class Layers:
    """Draws canonical parameters, layer by layer, in the order a declaration names them.

    A workload's declaration (``canonical_layers(layers, settings)`` in
    `workloads/<workload>/__init__.py`) calls these methods; the random draws follow its order,
    so the same declaration always gives the same arrays.
    """

    def __init__(self, rng):
        self.rng = rng
        self.arrays = {}  # type: Dict[str, np.ndarray]

    def conv(self, name: str, out_channels: int, in_channels: int, size: int, bias: bool = True) -> None:
        """``<name>.kernel`` (OIHW) and, unless ``bias=False``, ``<name>.bias``."""
        fan_in, fan_out = in_channels * size * size, out_channels * size * size
        self.arrays[name + ".kernel"] = _glorot(self.rng, (out_channels, in_channels, size, size), fan_in, fan_out)
        if bias:
            self.arrays[name + ".bias"] = _small(self.rng, (out_channels,))

    def dense(self, name: str, in_features: int, out_features: int) -> None:
        """``<name>.kernel`` (in, out) and ``<name>.bias``."""
        self.arrays[name + ".kernel"] = _glorot(self.rng, (in_features, out_features), in_features, out_features)
        self.arrays[name + ".bias"] = _small(self.rng, (out_features,))

    def batch_norm(self, name: str, channels: int, gamma_scale: float = 1.0) -> None:
        """``<name>.gamma/.beta/.moving_mean/.moving_variance``."""
        rng = self.rng
        self.arrays[name + ".gamma"] = (gamma_scale * rng.uniform(0.5, 1.5, size=channels)).astype(np.float32)
        self.arrays[name + ".beta"] = _small(rng, (channels,))
        self.arrays[name + ".moving_mean"] = _small(rng, (channels,))
        self.arrays[name + ".moving_variance"] = rng.uniform(0.5, 1.5, size=channels).astype(np.float32)

    def embedding(self, name: str, vocabulary: int, size: int, scale: float = 0.05) -> None:
        """``<name>.embeddings`` (vocabulary, size)."""
        self.arrays[name + ".embeddings"] = self.rng.uniform(-scale, scale, size=(vocabulary, size)).astype(np.float32)

    def gru(self, name: str, input_size: int, hidden: int) -> None:
        """The reset-after GRU's ``<name>.kernel/.recurrent_kernel/.input_bias/.recurrent_bias``."""
        rng = self.rng
        self.arrays[name + ".kernel"] = _glorot(rng, (input_size, 3 * hidden), input_size, 3 * hidden)
        self.arrays[name + ".recurrent_kernel"] = _glorot(rng, (hidden, 3 * hidden), hidden, 3 * hidden)
        self.arrays[name + ".input_bias"] = _small(rng, (3 * hidden,))
        self.arrays[name + ".recurrent_bias"] = _small(rng, (3 * hidden,))


def parameters(workload: str, seed: int = hyperparams.SEED) -> Dict[str, np.ndarray]:
    """The workload's canonical parameters, as its declaration lists its layers (full settings)."""
    declared = declaration.get(workload)
    if declared.canonical_layers is None:
        raise ValueError("workload {!r} declares no canonical_layers: it has no parity check".format(workload))
    layers = Layers(np.random.default_rng(seed))
    declared.canonical_layers(layers, declared.settings_for("full"))
    return layers.arrays


def parity_batch(workload: str, seed: int = hyperparams.SEED + 1) -> Dict[str, np.ndarray]:
    """A fixed input batch of what the declaration says it holds, with labels for a training workload."""
    declared = declaration.get(workload)
    s = declared.settings_for("full")
    rng = np.random.default_rng(seed)
    size = declared.parity_batch
    if declared.parity_input == declaration.TOKENS:
        tokens = rng.integers(1, s.vocabulary, size=(size, s.sequence_length)).astype(np.int32)
        tokens[: size // 2, -20:] = 0  # some post-padding, as real reviews have
        batch = {"x": tokens}
    else:
        batch = {"x": rng.uniform(0.0, 1.0, size=(size,) + tuple(s.image_shape)).astype(np.float32)}
    if declared.parity_labels:
        batch["y"] = (np.arange(size) % s.classes).astype(np.int64)
    return batch


def parameter_count(params: Dict[str, np.ndarray]) -> int:
    """Trainable parameters only: batch norm's moving statistics are state, not parameters."""
    return int(sum(a.size for name, a in params.items() if not name.endswith((".moving_mean", ".moving_variance"))))


def write(folder: Union[str, Path], workload: str) -> Path:
    """The workload's canonical weights and batch as .npz files in `folder`, each written atomically
    and durably (safe_files.write_atomic): concurrent parity runs and Ray tasks share the folder, so
    a reader finds the previous complete file or the new one, never half of one, and a link planted
    at a file's name is replaced, never written through."""
    folder = Path(folder)
    for name, arrays in ((WEIGHTS_FILE, parameters(workload)), (BATCH_FILE, parity_batch(workload))):
        safe_files.write_atomic(folder / name, lambda stream, arrays=arrays: np.savez(stream, **arrays))
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
