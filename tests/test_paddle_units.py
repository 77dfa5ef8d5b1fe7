"""The layout, model and optimizer facts the PaddlePaddle rows rely on, checked in numpy on tiny arrays.

No Paddle import in the first part: what Paddle computes (paddlepaddle 3.3.1, as its Python source
writes it, or as measured where its C++ kernel and its docstring disagree) is restated in numpy and
compared with the canonical (PyTorch) computation, so these tests run in the host environment.
The last part runs the same facts on the real operators, where Paddle is importable (its own
environment: `<paddle venv>/bin/python -m pytest tests/test_paddle_units.py`); elsewhere it skips.
The parity check runs the whole models.
"""
import numpy as np
import pytest

from numpy_reference import gru_step_canonical, sigmoid
from workloads.common import canonical, hyperparams

RNG = np.random.default_rng(0)


# --- GRU: Paddle's cell vs the canonical reset-after form ------------------------------------------

def gru_step_paddle(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    """paddle/nn/layer/rnn.py GRUCell.forward: weights (3*hidden, in) split r, z, c; reset after the matmul."""
    x_r, x_z, x_c = np.split(x @ weight_ih.T + bias_ih, 3, axis=1)
    h_r, h_z, h_c = np.split(h @ weight_hh.T + bias_hh, 3, axis=1)
    r = sigmoid(x_r + h_r)
    z = sigmoid(x_z + h_z)
    c = np.tanh(x_c + r * h_c)
    return (h - c) * z + c


def gru_weights(features=5, hidden=4):
    return (RNG.normal(size=(features, 3 * hidden)), RNG.normal(size=(hidden, 3 * hidden)),
            RNG.normal(size=3 * hidden), RNG.normal(size=3 * hidden))


def test_paddle_gru_cell_with_transposed_canonical_kernels_is_the_canonical_step():
    """gru/paddle.py loads the kernels transposed and the biases as they are: nothing else to convert."""
    kernel, recurrent_kernel, input_bias, recurrent_bias = gru_weights()
    x, h = RNG.normal(size=(3, 5)), RNG.normal(size=(3, 4))
    expected = gru_step_canonical(x, h, kernel, recurrent_kernel, input_bias, recurrent_bias)
    paddle_form = gru_step_paddle(x, h, canonical.dense_to_out_in(kernel), canonical.dense_to_out_in(recurrent_kernel),
                                  input_bias, recurrent_bias)
    np.testing.assert_allclose(paddle_form, expected, rtol=1e-12, atol=1e-12)
    # Keras' gate order [z, r, n] would be wrong here: the test can fail
    keras_order = gru_step_paddle(x, h, canonical.gru_gates_rzn_to_zrn(kernel).T,
                                  canonical.gru_gates_rzn_to_zrn(recurrent_kernel).T, input_bias, recurrent_bias)
    assert not np.allclose(keras_order, expected, atol=1e-3)


def test_gru_parameter_count_is_the_cudnn_form():
    """nn.GRU: weight_ih (3h, in), weight_hh (3h, h), bias_ih and bias_hh (3h,): two bias vectors per gate."""
    s = hyperparams.settings("gru", "full")
    gru = 3 * s.hidden_size * s.embedding_size + 3 * s.hidden_size ** 2 + 2 * 3 * s.hidden_size
    total = s.vocabulary * s.embedding_size + gru + s.hidden_size * s.classes + s.classes
    assert total == s.parameter_count


# --- dense layers, initialisers ---------------------------------------------------------------------

def test_linear_kernel_in_out_takes_the_canonical_kernel_as_is():
    """paddle.nn.Linear computes x @ weight + bias with weight (in, out): canonical.py's own layout."""
    x, kernel, bias = RNG.normal(size=(2, 6)), RNG.normal(size=(6, 3)), RNG.normal(size=3)
    torch_form = x @ canonical.dense_to_out_in(kernel).T + bias  # PyTorch stores (out, in)
    np.testing.assert_allclose(x @ kernel + bias, torch_form, rtol=1e-12)


def paddle_fans(shape):
    """paddle/nn/initializer/initializer.py _compute_fans: 2-D (in, out); conv (out, in, *kernel)."""
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[2:]))
    return shape[1] * receptive, shape[0] * receptive


@pytest.mark.parametrize("shape, fans", [((50, 3, 3, 3), (27, 450)), ((100, 50, 3, 3), (450, 900)),
                                         ((6400, 512), (6400, 512)), ((512, 10), (512, 10))])
def test_xavier_uniform_fans_are_glorots_for_paddles_layouts(shape, fans):
    """XavierUniform on Conv2D (OIHW) and Linear (in, out) weights uses Keras' Glorot fans."""
    assert paddle_fans(shape) == fans
    s = hyperparams.settings("cnn", "full")
    conv_in, conv_out = paddle_fans((s.conv1_filters, s.image_shape[0], 3, 3))
    assert (conv_in, conv_out) == (s.image_shape[0] * 9, s.conv1_filters * 9)  # as canonical.Layers.conv's fans


# --- optimizers ------------------------------------------------------------------------------------

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
TINY_TO_LARGE = np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])  # epsilon's form shows on the small ones


def adam_pytorch(gradients):
    """torch.optim.Adam (single tensor): epsilon added after the bias correction of sqrt(v)."""
    w = m = v = np.zeros_like(gradients[0])
    for step, g in enumerate(gradients, start=1):
        m, v = BETA1 * m + (1 - BETA1) * g, BETA2 * v + (1 - BETA2) * g * g
        w = w - LR / (1 - BETA1 ** step) * m / (np.sqrt(v) / np.sqrt(1 - BETA2 ** step) + EPS)
    return w


def adam_paddle(gradients, scale_epsilon=True):
    """Paddle's adam kernel: both corrections folded into the step size, epsilon scaled by sqrt(1 - beta2^t).

    Its docstring's formula leaves that scaling out (scale_epsilon=False), which would be stock MXNet's
    form; the kernel has it (measured: a 1e-9 gradient moves the weight lr/11, PyTorch's figure).
    """
    w = m = v = np.zeros_like(gradients[0])
    for step, g in enumerate(gradients, start=1):
        m, v = BETA1 * m + (1 - BETA1) * g, BETA2 * v + (1 - BETA2) * g * g
        lr = LR * np.sqrt(1 - BETA2 ** step) / (1 - BETA1 ** step)
        epsilon = EPS * np.sqrt(1 - BETA2 ** step) if scale_epsilon else EPS
        w = w - lr * m / (np.sqrt(v) + epsilon)
    return w


def test_paddle_adam_is_pytorchs_and_its_docstring_form_is_not():
    gradients = [TINY_TO_LARGE * sign for sign in (1.0, -0.5, 2.0)]
    np.testing.assert_allclose(adam_paddle(gradients), adam_pytorch(gradients), rtol=1e-10)
    docstring_form = adam_paddle(gradients, scale_epsilon=False)
    assert not np.allclose(docstring_form[:2], adam_pytorch(gradients)[:2], rtol=1e-2)


def test_paddle_momentum_is_pytorchs_plain_momentum():
    """paddle.optimizer.Momentum(use_nesterov=False): velocity = mu*velocity + g; param -= lr*velocity."""
    lr, mu = 0.01, 0.9
    w_paddle = w_torch = RNG.normal(size=5)
    velocity = buffer = np.zeros(5)
    for g in RNG.normal(size=(4, 5)):
        velocity = mu * velocity + g
        w_paddle = w_paddle - lr * velocity
        buffer = buffer * mu + g  # torch.optim.SGD, dampening 0, nesterov False
        w_torch = w_torch - lr * buffer
    np.testing.assert_allclose(w_paddle, w_torch, rtol=1e-12)
    unit_gain = np.zeros(5)  # Keras 2 / CNTK's "unit gain" form would differ: the test can fail
    for g in RNG.normal(size=(2, 5)):
        unit_gain = mu * unit_gain + (1 - mu) * g
    assert not np.allclose(unit_gain, velocity)


# --- ResNet-50 from the zoo: parameter count without the moving statistics --------------------------

def test_resnet50_trainable_count_leaves_the_moving_statistics_out():
    """Paddle's BatchNorm2D makes _mean/_variance parameters (trainable=False): counting every parameter
    would add two per channel; runtime/paddle.py counts the trainable ones, as canonical.parameter_count."""
    params = canonical.parameters("resnet50")
    everything = sum(a.size for a in params.values())
    trainable = canonical.parameter_count(params)
    assert trainable == hyperparams.settings("resnet50", "full").parameter_count
    statistics = sum(a.size for name, a in params.items() if name.endswith((".moving_mean", ".moving_variance")))
    assert everything - trainable == statistics > 0


# --- the same facts on the real operators (only where Paddle is importable) ------------------------

@pytest.fixture(scope="module")
def paddle():
    module = pytest.importorskip("paddle", reason="Paddle is not installed in this interpreter (its own environment has it)")
    module.set_device("cpu")
    return module


def test_real_nn_gru_is_the_canonical_reset_after_form(paddle):
    kernel, recurrent_kernel, input_bias, recurrent_bias = (a.astype(np.float32) for a in gru_weights())
    gru = paddle.nn.GRU(5, 4, time_major=True)
    gru.weight_ih_l0.set_value(canonical.dense_to_out_in(kernel))
    gru.weight_hh_l0.set_value(canonical.dense_to_out_in(recurrent_kernel))
    gru.bias_ih_l0.set_value(input_bias)
    gru.bias_hh_l0.set_value(recurrent_bias)
    x = RNG.normal(size=(6, 3, 5)).astype(np.float32)
    h = np.zeros((3, 4))
    for x_t in x:
        h = gru_step_canonical(x_t, h, kernel, recurrent_kernel, input_bias, recurrent_bias)
    outputs, _ = gru(paddle.to_tensor(x))
    np.testing.assert_allclose(outputs.numpy()[-1], h, rtol=1e-5, atol=1e-6)


def test_real_adam_is_pytorchs(paddle):
    gradients = [(TINY_TO_LARGE * sign).astype(np.float32) for sign in (1.0, -0.5)]
    weight = paddle.create_parameter([6], "float32", default_initializer=paddle.nn.initializer.Constant(0.0))
    optimizer = paddle.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS, parameters=[weight])
    for g in gradients:
        (weight * paddle.to_tensor(g)).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
    np.testing.assert_allclose(weight.numpy(), adam_pytorch([g.astype(np.float64) for g in gradients]), rtol=1e-4)


def test_real_batch_norm_defaults_and_trainable_flags(paddle):
    norm = paddle.nn.BatchNorm2D(3)
    assert norm._epsilon == canonical.BN_EPSILON
    assert {name: p.trainable for name, p in norm.named_parameters()} == {
        "weight": True, "bias": True, "_mean": False, "_variance": False}


def test_real_grad_scaler_defaults_are_the_ones_runtime_writes_out(paddle):
    """runtime/paddle.py passes PyTorch GradScaler's settings; they are paddle.amp.GradScaler's defaults
    (read from the signature: on a CPU the scaler disables itself and keeps none of them)."""
    import inspect

    defaults = {name: parameter.default
                for name, parameter in inspect.signature(paddle.amp.GradScaler.__init__).parameters.items()}
    assert defaults["init_loss_scaling"] == 2.0**16 and defaults["incr_every_n_steps"] == 2000
    assert defaults["decr_every_n_nan_or_inf"] == 1 and defaults["decr_ratio"] == 0.5 and defaults["incr_ratio"] == 2.0
