"""Plain-numpy definitions of the canonical models and their pieces: what every framework is held to.

Slow and simple on purpose; used on the small parity batches and the unit tests' tiny arrays.
One copy of each reference: the framework unit tests import these instead of restating them.
"""
import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def conv_nchw_oihw(x: np.ndarray, kernel: np.ndarray, stride: int = 1, pad: int = 0, pads=None) -> np.ndarray:
    """The canonical convolution (cross-correlation): NCHW input, OIHW kernel, no bias. Padding is
    `pad` on every side, or `pads` = ((top, bottom), (left, right)) for asymmetric padding."""
    pads = pads if pads is not None else ((pad, pad), (pad, pad))
    x = np.pad(x, ((0, 0), (0, 0), *pads))
    out_c, _, kh, kw = kernel.shape
    height, width = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], out_c, height, width))
    for i in range(height):
        for j in range(width):
            window = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", window, kernel)
    return out


def conv_nhwc_hwio(x: np.ndarray, kernel: np.ndarray, stride: int = 1, pads=((0, 0), (0, 0))) -> np.ndarray:
    """The NHWC form (TensorFlow, Flax): NHWC input, HWIO kernel, pads ((top, bottom), (left, right))."""
    x = np.pad(x, ((0, 0), *pads, (0, 0)))
    kh, kw, _, out_c = kernel.shape
    height, width = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], height, width, out_c))
    for i in range(height):
        for j in range(width):
            window = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", window, kernel)
    return out


def to_nhwc(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1)


def conv2d_same(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """x (N, C, H, W), kernel OIHW 3x3, stride 1, zero padding 1."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    columns = np.stack([padded[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=2)  # N,C,9,H,W
    out = np.einsum("ncklm,ock->nolm", columns, kernel.reshape(kernel.shape[0], c, 9))
    return out + bias[None, :, None, None]


def max_pool_2x2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def cnn_logits(params: dict, images: np.ndarray) -> np.ndarray:
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    x = relu(conv2d_same(images, params["conv1.kernel"], params["conv1.bias"]))
    x = relu(max_pool_2x2(conv2d_same(x, params["conv2.kernel"], params["conv2.bias"])))
    x = relu(conv2d_same(x, params["conv3.kernel"], params["conv3.bias"]))
    x = relu(max_pool_2x2(conv2d_same(x, params["conv4.kernel"], params["conv4.bias"])))
    x = x.reshape(len(x), -1)  # NCHW flatten: the canonical order
    x = relu(x @ params["dense1.kernel"] + params["dense1.bias"])
    return x @ params["dense2.kernel"] + params["dense2.bias"]


def gru_step_canonical(x: np.ndarray, h: np.ndarray, kernel: np.ndarray, recurrent_kernel: np.ndarray,
                       input_bias: np.ndarray, recurrent_bias: np.ndarray) -> np.ndarray:
    """One step of canonical.py's reset-after GRU (cuDNN / PyTorch), gates r, z, n."""
    x_r, x_z, x_n = np.split(x @ kernel + input_bias, 3, axis=-1)
    h_r, h_z, h_n = np.split(h @ recurrent_kernel + recurrent_bias, 3, axis=-1)
    reset, update = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
    new = np.tanh(x_n + reset * h_n)
    return (1 - update) * new + update * h


def gru_step(x: np.ndarray, h: np.ndarray, params: dict) -> np.ndarray:
    """The same step on the canonical parameter names (gru.kernel, gru.recurrent_kernel, ...)."""
    return gru_step_canonical(x, h, params["gru.kernel"], params["gru.recurrent_kernel"],
                              params["gru.input_bias"], params["gru.recurrent_bias"])


def gru_logits(params: dict, tokens: np.ndarray) -> np.ndarray:
    embedded = params["embedding.embeddings"][tokens]  # (N, T, E)
    hidden = np.zeros((len(tokens), params["gru.recurrent_kernel"].shape[0]))
    for step in range(tokens.shape[1]):
        hidden = gru_step(embedded[:, step], hidden, params)
    return hidden @ params["dense.kernel"] + params["dense.bias"]


def assert_training_parity_in(python: str, framework: str, folder, timeout: float = 1800,
                              env: dict | None = None) -> None:
    """Run `framework`'s cnn and gru parity cells with the interpreter `python` (one that has the
    framework installed) and hold their logits to the definitions above; the steps must train."""
    import json
    import os
    import subprocess
    from pathlib import Path

    from workloads.common import canonical

    root = Path(__file__).resolve().parents[2]
    for workload, definition in (("cnn", cnn_logits), ("gru", gru_logits)):
        weights_folder = canonical.write(Path(folder) / workload, workload)
        out = Path(folder) / f"{workload}.json"
        completed = subprocess.run([python, "-m", "workloads", workload, "--framework", framework, "--parity",
                                    str(weights_folder), "--out", str(out)], capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=str(root), **(env or {})), timeout=timeout)
        assert completed.returncode == 0, completed.stderr[-3000:]
        outputs = json.loads(out.read_text())["outputs"]
        weights, batch = canonical.load(weights_folder)
        expected = definition(weights, batch["x"])
        got = np.asarray(outputs["logits"])
        assert np.max(np.abs(got - expected)) / np.max(np.abs(expected)) < canonical.PARITY_TOLERANCE
        assert not np.allclose(outputs["logits_after_training"], got)  # the steps did train


# --- SGD with momentum as PyTorch writes it, which every framework's momentum is held to ----------

def momentum_steps(update, lr: float, momentum: float, seed: int = 0) -> np.ndarray:
    """The weights after `update(weights, velocity, gradient, lr, momentum) -> (weights, velocity)`
    over six random gradients, from random weights and zero velocity (the same ones for every update)."""
    rng = np.random.default_rng(seed)
    weights, velocity = rng.normal(size=5), np.zeros(5)
    for gradient in rng.normal(size=(6, 5)):
        weights, velocity = update(weights, velocity, gradient, lr, momentum)
    return weights


def pytorch_momentum(weights, velocity, gradient, lr, momentum):
    """torch.optim.SGD(momentum, dampening=0, nesterov=False): v = m*v + g; w -= lr*v."""
    velocity = momentum * velocity + gradient
    return weights - lr * velocity, velocity


def assert_pytorchs_momentum(update, lr: float = 0.01, momentum: float = 0.9) -> None:
    """`update` (a framework's momentum, written out as its source computes it) lands where PyTorch's does."""
    np.testing.assert_allclose(momentum_steps(update, lr, momentum), momentum_steps(pytorch_momentum, lr, momentum),
                               rtol=1e-12)


def same_padding(size: int, kernel: int, stride: int) -> tuple:
    """padding="SAME" as XLA (so Flax and TensorFlow) and MindSpore's pad_mode='same' compute it: all
    the padding the output size needs, the odd one after; PyTorch's models pad (k//2, k//2)."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2
