"""The layout, model and optimizer facts the JAX (Flax + Optax) rows rely on, checked in numpy on tiny arrays.

No JAX import: what the JAX files compute (and what optax 0.2.8 / flax 0.12.8 compute, as their
source writes it) is restated here in numpy and compared with the canonical (PyTorch) computation,
so these tests run in the host environment; the parity check runs the real thing. The tests marked
e2e run real cells in JAX's cached CPU environment (tests/support/compiled_step_checks.py): trace counts
after 20 training steps, what ran, the canonical start.
"""
import numpy as np
import pytest

from support.compiled_step_checks import assert_each_step_traced_once, run_checks
from support.framework_cells import expected_first_loss
from support.numpy_reference import conv_nchw_oihw, conv_nhwc_hwio, gru_step_canonical, same_padding, sigmoid, to_nhwc
from workloads.common import canonical, hyperparams

RNG = np.random.default_rng(0)


# --- convolutions and pooling, NHWC with explicit padding ------------------------------------------

@pytest.mark.parametrize("size, kernel, stride", [(224, 7, 2), (56, 3, 2), (112, 3, 2), (8, 3, 2)])
def test_explicit_symmetric_padding_is_pytorchs_and_strided_same_is_not(size, kernel, stride):
    """resnet50/jax.py pads (k//2, k//2) explicitly; "SAME" with stride 2 on even sizes pads less before."""
    assert same_padding(size, kernel, stride) != (kernel // 2, kernel // 2)
    x, weights = RNG.normal(size=(1, 2, 8, 8)), RNG.normal(size=(3, 2, 3, 3))
    expected = to_nhwc(conv_nchw_oihw(x, weights, stride=2, pad=1))
    explicit = conv_nhwc_hwio(to_nhwc(x), canonical.oihw_to_hwio(weights), stride=2, pads=((1, 1), (1, 1)))
    np.testing.assert_allclose(explicit, expected, rtol=1e-12, atol=1e-12)
    same = conv_nhwc_hwio(to_nhwc(x), canonical.oihw_to_hwio(weights), stride=2, pads=(same_padding(8, 3, 2),) * 2)
    assert same.shape == expected.shape and not np.allclose(same, expected)


def test_max_pool_padding_with_minus_infinity_is_pytorchs():
    """nn.max_pool(padding=((1, 1), (1, 1))) pads with -inf, as PyTorch's MaxPool2d(3, 2, padding=1)."""
    x = RNG.normal(size=(7, 7))  # any sign: -inf never wins, so the pad is invisible
    padded = np.pad(x, 1, constant_values=-np.inf)
    pool = np.array([[padded[i:i + 3, j:j + 3].max() for j in range(0, 7, 2)] for i in range(0, 7, 2)])
    torch_like = np.array([[x[max(i - 1, 0):i + 2, max(j - 1, 0):j + 2].max() for j in range(0, 7, 2)]
                           for i in range(0, 7, 2)])
    np.testing.assert_array_equal(pool, torch_like)


def test_nhwc_transposed_back_before_the_flatten_keeps_dense1_canonical():
    """cnn/jax.py transposes NHWC -> NCHW before reshape, so dense1's canonical rows load as is."""
    features, kernel = RNG.normal(size=(2, 4, 3, 3)), RNG.normal(size=(4 * 3 * 3, 5))
    expected = features.reshape(2, -1) @ kernel
    nhwc = to_nhwc(features)
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2).reshape(2, -1) @ kernel, expected, rtol=1e-12)
    assert not np.allclose(nhwc.reshape(2, -1) @ kernel, expected)


def test_batch_norm_inference_with_moving_statistics():
    """flax BatchNorm(use_running_average=True): (x - mean) / sqrt(var + eps) * scale + bias, channels last."""
    x = RNG.normal(size=(2, 3, 4, 4))
    gamma, beta, mean, var = RNG.uniform(0.5, 1.5, 3), RNG.normal(size=3), RNG.normal(size=3), RNG.uniform(0.5, 1.5, 3)
    shape = (1, 3, 1, 1)
    expected = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + canonical.BN_EPSILON) * gamma.reshape(shape) \
        + beta.reshape(shape)
    flax_form = (to_nhwc(x) - mean) * (gamma / np.sqrt(var + canonical.BN_EPSILON)) + beta
    np.testing.assert_allclose(flax_form, to_nhwc(expected), rtol=1e-12)


# --- GRU ------------------------------------------------------------------------------------------

def gru_jax_file(x_tnc, kernel, recurrent_kernel, input_bias, recurrent_bias):
    """gru/jax.py's GRU: every step's input projection hoisted into one matmul, then a scan over time."""
    projected = x_tnc @ kernel + input_bias
    h = np.zeros((x_tnc.shape[1], recurrent_kernel.shape[0]))
    for projected_t in projected:  # jax.lax.scan
        xr, xz, xn = np.split(projected_t, 3, axis=-1)
        hr, hz, hn = np.split(h @ recurrent_kernel + recurrent_bias, 3, axis=-1)
        r, z = sigmoid(xr + hr), sigmoid(xz + hz)
        h = (1 - z) * np.tanh(xn + r * hn) + z * h
    return h


def gru_weights(features=5, hidden=4):
    return (RNG.normal(size=(features, 3 * hidden)), RNG.normal(size=(hidden, 3 * hidden)),
            RNG.normal(size=3 * hidden), RNG.normal(size=3 * hidden))


def test_hoisted_scan_gru_equals_the_canonical_recurrence():
    weights = gru_weights()
    x = RNG.normal(size=(6, 3, 5))  # (time, batch, features)
    h = np.zeros((3, 4))
    for x_t in x:
        h = gru_step_canonical(x_t, h, *weights)
    np.testing.assert_allclose(gru_jax_file(x, *weights), h, rtol=1e-12)


def test_time_major_tokens_last_step_is_the_batch_major_last_step():
    """The embedding of tokens.T is the batch-major embedding transposed to (time, batch, features)."""
    table, tokens = RNG.normal(size=(10, 3)), RNG.integers(0, 10, size=(2, 5))
    np.testing.assert_array_equal(table[tokens.T], table[tokens].transpose(1, 0, 2))


def test_flax_gru_cell_has_fewer_biases_so_it_is_not_the_canonical_model():
    """flax.linen.GRUCell: r, z with an input bias only; n with b_in and b_hn (4 bias vectors, not 6)."""
    kernel, recurrent_kernel, input_bias, recurrent_bias = gru_weights()
    x, h = RNG.normal(size=(2, 5)), RNG.normal(size=(2, 4))
    hidden = 4
    folded = input_bias.copy()
    folded[:2 * hidden] += recurrent_bias[:2 * hidden]  # the forward matches only with b_hr, b_hz folded in
    flax_recurrent_bias = np.concatenate([np.zeros(2 * hidden), recurrent_bias[2 * hidden:]])
    np.testing.assert_allclose(gru_step_canonical(x, h, kernel, recurrent_kernel, folded, flax_recurrent_bias),
                               gru_step_canonical(x, h, kernel, recurrent_kernel, input_bias, recurrent_bias),
                               rtol=1e-12)
    # ... but it trains one bias where the canonical model trains two (b_ir + b_hr, b_iz + b_hz):
    # each gets the gradient, so the sum moves twice as far under SGD, and the count is 2*hidden short
    s = hyperparams.settings("gru", "full")
    flax_cell = 3 * s.embedding_size * s.hidden_size + 3 * s.hidden_size ** 2 + 4 * s.hidden_size
    canonical_cell = 3 * s.embedding_size * s.hidden_size + 3 * s.hidden_size ** 2 + 6 * s.hidden_size
    assert canonical_cell - flax_cell == 2 * s.hidden_size == 200


# --- optimizers (optax 0.2.8 as its source computes) ---------------------------------------------

def test_optax_sgd_momentum_is_pytorchs_plain_momentum():
    """optax.sgd(lr, momentum): trace t = g + m*t (optax.trace), update = -lr*t; PyTorch: v = m*v + g, w -= lr*v."""
    lr, momentum = 0.01, 0.9
    w_optax = w_torch = RNG.normal(size=5)
    t = v = np.zeros(5)
    for g in RNG.normal(size=(6, 5)):
        t = g + momentum * t
        w_optax = w_optax + (-lr) * t
        v = momentum * v + g
        w_torch = w_torch - lr * v
    np.testing.assert_allclose(w_optax, w_torch, rtol=1e-12)


def test_optax_adam_adds_epsilon_after_the_square_root_of_v_hat():
    """optax.scale_by_adam(eps, eps_root=0): m_hat / (sqrt(v_hat + eps_root) + eps), as torch.optim.Adam."""
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    gradients = RNG.normal(size=(3, 6)) * np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0])
    w_optax = w_torch = np.zeros(6)
    m = v = mt = vt = np.zeros(6)
    for step, g in enumerate(gradients, start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g  # optax: update_moment(_per_elem_norm)
        m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)  # bias_correction
        w_optax = w_optax - lr * (m_hat / (np.sqrt(v_hat + 0.0) + eps))
        mt = mt * b1 + g * (1 - b1)  # torch.optim.adam._single_tensor_adam
        vt = vt * b2 + g * g * (1 - b2)
        denominator = np.sqrt(vt) / np.sqrt(1 - b2 ** step) + eps
        w_torch = w_torch - lr / (1 - b1 ** step) * mt / denominator
    np.testing.assert_allclose(w_optax, w_torch, rtol=1e-10)


def test_mean_softmax_cross_entropy_with_integer_labels():
    """optax.softmax_cross_entropy_with_integer_labels(...).mean() = PyTorch's CrossEntropyLoss (mean)."""
    logits, labels = RNG.normal(size=(4, 10)) * 5, np.array([0, 3, 9, 3])
    shifted = logits - logits.max(axis=1, keepdims=True)
    optax_form = np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(4), labels]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(optax_form.mean(), -np.log(probabilities[np.arange(4), labels]).mean(), rtol=1e-12)


# --- fp16 loss scaling (runtime/jax.py) -----------------------------------------------------------

def loss_scale_update(scale, good, finite, interval=2000):
    """runtime/jax.py's dynamic loss scale, as PyTorch's GradScaler: halve and skip on overflow."""
    good = good + 1 if finite else 0
    grow = good >= interval
    scale = (scale * 2.0 if grow else scale) if finite else scale * 0.5
    return scale, 0 if grow else good


def test_loss_scale_halves_on_overflow_and_doubles_after_the_interval():
    assert loss_scale_update(2.0**16, 5, finite=False) == (2.0**15, 0)
    assert loss_scale_update(2.0**16, 1998, finite=True) == (2.0**16, 1999)
    assert loss_scale_update(2.0**16, 1999, finite=True) == (2.0**17, 0)


def test_int64_labels_become_int32_without_changing_them():
    labels = np.arange(64, dtype=np.int64) % 10
    np.testing.assert_array_equal(labels.astype(np.int32), labels)


# --- the real thing, in JAX's cached CPU environment ----------------------------------------------

@pytest.fixture(scope="module")
def jax_checks():
    """One JAX process for every check below (tests/support/compiled_step_checks.py)."""
    return run_checks("jax", ["training:cnn", "training:gru", "inference", "first_loss:canonical",
                              "first_loss:framework", "initial_variables"])


@pytest.mark.e2e
@pytest.mark.parametrize("check", ["training:cnn", "training:gru"])
def test_every_jitted_step_traces_once_in_20_training_steps(jax_checks, check):
    """The train step, and the evaluation step over a test set ending in a partial batch (padded to
    the one shape, so no second trace and compilation), each trace exactly once."""
    assert_each_step_traced_once(jax_checks[check])


@pytest.mark.e2e
@pytest.mark.parametrize("check", ["training:cnn", "training:gru"])
def test_no_xla_compilation_lands_in_a_timed_training_step(jax_checks, check):
    """Every compilation (the step's, the loss sum's eager add) is in the first step, timed apart:
    the loss sum's add, first made in the second step, once cost it tens of milliseconds there,
    and the report flagged the row for slow steps (docs/FAIRNESS.md: every-step-finite)."""
    found = jax_checks[check]
    assert found["status"] == "ok", found["reason"]
    assert found["timed_step_compiles"] == 0


@pytest.mark.e2e
def test_the_inference_forward_traces_once_and_copies_features_to_the_host(jax_checks):
    found = jax_checks["inference"]
    assert found["status"] == "ok", found["reason"]
    assert found["traces"] == {"forward": 1} and found["timed_batches"] == 4


@pytest.mark.e2e
def test_what_ran_is_recorded(jax_checks):
    cnn, gru = jax_checks["training:cnn"]["extras"], jax_checks["training:gru"]["extras"]
    assert cnn["optimizer"].startswith("optax.sgd(momentum=0.9)") and "jit-fused" in cnn["optimizer"]
    assert gru["optimizer"].startswith("optax.adam(eps_root=0)") and "jit-fused" in gru["optimizer"]
    assert gru["gru_kernel"].startswith("scan: lax.scan over 150 time steps")
    assert "gru_kernel" not in cnn
    assert cnn["tf32"] == gru["tf32"] == "n/a (CPU)" and cnn["matmul_precision"] == "highest"
    assert cnn["init"] == "canonical"


@pytest.mark.e2e
def test_training_starts_from_the_canonical_weights_unless_told_otherwise(jax_checks):
    """The GRU has no dropout: its first loss is the canonical model's on the first batch, in numpy."""
    canonical_start, framework_start = jax_checks["first_loss:canonical"], jax_checks["first_loss:framework"]
    assert canonical_start["status"] == framework_start["status"] == "ok"
    assert canonical_start["extras"]["init"] == "canonical" and framework_start["extras"]["init"] == "framework"
    expected = expected_first_loss("gru")
    assert canonical_start["first_loss"] == pytest.approx(expected, rel=1e-5)
    assert framework_start["first_loss"] != pytest.approx(expected, rel=1e-3)


@pytest.mark.e2e
@pytest.mark.parametrize("workload", ["cnn", "gru", "resnet50"])
def test_from_the_canonical_weights_the_model_build_computes_no_initial_variable(jax_checks, workload):
    """The canonical weights replace Flax's initial variables (docs/FAIRNESS.md: same-start), so
    build_model only traces the initialiser for their shapes (jax.eval_shape), never compiling or
    running it for values thrown away; with --init framework they are computed, arrays of the same shapes."""
    canonical_build = jax_checks["initial_variables"][f"{workload}:canonical"]
    framework_build = jax_checks["initial_variables"][f"{workload}:framework"]
    assert canonical_build["kinds"] == ["shape"] and framework_build["kinds"] == ["array"]
    assert canonical_build["shapes"] == framework_build["shapes"] and canonical_build["shapes"]
