"""Plain-numpy forward passes of the canonical models: the definition every framework is held to.

Slow and simple on purpose; used on the small parity batches only.
"""
import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


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


def gru_logits(params: dict, tokens: np.ndarray) -> np.ndarray:
    embedded = params["embedding.embeddings"][tokens]  # (N, T, E)
    hidden = np.zeros((len(tokens), params["gru.recurrent_kernel"].shape[0]))
    W, U = params["gru.kernel"], params["gru.recurrent_kernel"]
    b_i, b_h = params["gru.input_bias"], params["gru.recurrent_bias"]
    for step in range(tokens.shape[1]):
        x_r, x_z, x_n = np.split(embedded[:, step] @ W + b_i, 3, axis=-1)
        h_r, h_z, h_n = np.split(hidden @ U + b_h, 3, axis=-1)
        reset, update = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
        new = np.tanh(x_n + reset * h_n)
        hidden = (1 - update) * new + update * hidden
    return hidden @ params["dense.kernel"] + params["dense.bias"]
