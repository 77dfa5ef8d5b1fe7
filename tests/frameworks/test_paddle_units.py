"""The layout, model and optimizer facts the PaddlePaddle rows rely on, checked in numpy on tiny arrays.

No Paddle import in the first part: what Paddle computes (paddlepaddle 3.3.1, as its Python source
writes it, or as measured where its C++ kernel and its docstring disagree) is restated in numpy and
compared with the canonical (PyTorch) computation, so these tests run in the host environment.
The last parts run the same facts on the real operators, and the fairness rules (the same start,
channels_last, the fused optimizers, the records), in Paddle's own environment (built once per test
session, tests/support/framework_cells.py).
The parity check runs the whole models.
"""
import json

import numpy as np
import pytest

from support.framework_cells import run_script
from support.numpy_reference import assert_pytorchs_momentum, gru_step_canonical, sigmoid
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
    def paddle_momentum(weights, velocity, gradient, lr, mu):
        """paddle.optimizer.Momentum(use_nesterov=False): velocity = mu*velocity + g; param -= lr*velocity."""
        velocity = mu * velocity + gradient
        return weights - lr * velocity, velocity

    def unit_gain(weights, velocity, gradient, lr, mu):
        """Keras 2 / CNTK's "unit gain" form, which would differ: the check can fail."""
        velocity = mu * velocity + (1 - mu) * gradient
        return weights - lr * velocity, velocity

    assert_pytorchs_momentum(paddle_momentum)
    with pytest.raises(AssertionError):
        assert_pytorchs_momentum(unit_gain)


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


# --- the same facts on the real operators, in Paddle's own environment ----------------------------------

REAL_OPERATORS = """
import inspect, json
import numpy as np
import paddle
from workloads.common import canonical
paddle.set_device("cpu")
kernel, recurrent_kernel, input_bias, recurrent_bias, x, gradients, lr, beta1, beta2, eps = (
    json.loads(INPUT)[name] for name in ("kernel", "recurrent_kernel", "input_bias", "recurrent_bias", "x",
                                         "gradients", "lr", "beta1", "beta2", "eps"))
as32 = lambda value: np.asarray(value, dtype=np.float32)
gru = paddle.nn.GRU(5, 4, time_major=True)
gru.weight_ih_l0.set_value(canonical.dense_to_out_in(as32(kernel)))
gru.weight_hh_l0.set_value(canonical.dense_to_out_in(as32(recurrent_kernel)))
gru.bias_ih_l0.set_value(as32(input_bias))
gru.bias_hh_l0.set_value(as32(recurrent_bias))
outputs, _ = gru(paddle.to_tensor(as32(x)))
weight = paddle.create_parameter([6], "float32", default_initializer=paddle.nn.initializer.Constant(0.0))
optimizer = paddle.optimizer.Adam(learning_rate=lr, beta1=beta1, beta2=beta2, epsilon=eps, parameters=[weight])
for g in gradients:
    (weight * paddle.to_tensor(as32(g))).sum().backward()
    optimizer.step()
    optimizer.clear_grad()
norm = paddle.nn.BatchNorm2D(3)
scaler = {name: parameter.default
          for name, parameter in inspect.signature(paddle.amp.GradScaler.__init__).parameters.items()
          if parameter.default is not inspect.Parameter.empty}
print("RESULT " + json.dumps({"gru_last": outputs.numpy()[-1].tolist(), "adam": weight.numpy().tolist(),
                              "bn_epsilon": norm._epsilon,
                              "bn_trainable": {name: p.trainable for name, p in norm.named_parameters()},
                              "grad_scaler": scaler}, default=str))
"""


@pytest.fixture(scope="module")
def real_paddle():
    """What the real operators compute on this module's tiny inputs, run once in Paddle's environment."""
    kernel, recurrent_kernel, input_bias, recurrent_bias = (a.astype(np.float32) for a in gru_weights())
    inputs = {"kernel": kernel, "recurrent_kernel": recurrent_kernel, "input_bias": input_bias,
              "recurrent_bias": recurrent_bias, "x": RNG.normal(size=(6, 3, 5)).astype(np.float32),
              "gradients": [(TINY_TO_LARGE * sign).astype(np.float32) for sign in (1.0, -0.5)],
              "lr": LR, "beta1": BETA1, "beta2": BETA2, "eps": EPS}
    encoded = json.dumps({name: np.asarray(value).tolist() if not isinstance(value, float) else value
                          for name, value in inputs.items()})
    return inputs, in_paddle(f"INPUT = {encoded!r}\n" + REAL_OPERATORS)


def test_real_nn_gru_is_the_canonical_reset_after_form(real_paddle):
    inputs, found = real_paddle
    h = np.zeros((3, 4))
    for x_t in inputs["x"]:
        h = gru_step_canonical(x_t, h, inputs["kernel"], inputs["recurrent_kernel"], inputs["input_bias"],
                               inputs["recurrent_bias"])
    np.testing.assert_allclose(found["gru_last"], h, rtol=1e-5, atol=1e-6)


def test_real_adam_is_pytorchs(real_paddle):
    inputs, found = real_paddle
    expected = adam_pytorch([g.astype(np.float64) for g in inputs["gradients"]])
    np.testing.assert_allclose(found["adam"], expected, rtol=1e-4)


def test_real_batch_norm_defaults_and_trainable_flags(real_paddle):
    _, found = real_paddle
    assert found["bn_epsilon"] == canonical.BN_EPSILON
    assert found["bn_trainable"] == {"weight": True, "bias": True, "_mean": False, "_variance": False}


def test_real_grad_scaler_defaults_are_the_ones_runtime_writes_out(real_paddle):
    """runtime/paddle.py passes PyTorch GradScaler's settings; they are paddle.amp.GradScaler's defaults
    (read from the signature: on a CPU the scaler disables itself and keeps none of them)."""
    defaults = real_paddle[1]["grad_scaler"]
    assert defaults["init_loss_scaling"] == 2.0**16 and defaults["incr_every_n_steps"] == 2000
    assert defaults["decr_every_n_nan_or_inf"] == 1 and defaults["decr_ratio"] == 0.5 and defaults["incr_ratio"] == 2.0


# --- fairness rules, run in Paddle's environment -------------------------------------------------------

def in_paddle(script: str) -> dict:
    """Run a script in Paddle's environment (support.framework_cells.run_script)."""
    return run_script("paddle", script)[0]


def test_channels_last_computes_what_nchw_computes_and_says_so():
    """--option channels_last=on: NHWC convolutions, pools and batch norms, the input transposed once per
    batch, dense1's rows permuted for the (H, W, C) flatten. The CNN's logits before and after the parity
    steps and ResNet-50's features agree with NCHW's; dropping the row permutation would not."""
    found = in_paddle("""
out = {}
for workload in ("cnn", "resnet50"):
    module = importlib.import_module(f"workloads.{workload}.paddle")
    params, batch = canonical.parameters(workload), canonical.parity_batch(workload)
    runs = {value: cell_run(workload, options={"channels_last": value}) for value in ("off", "on")}
    outputs = {value: module.parity(run, params, batch) for value, run in runs.items()}
    out[workload] = {name: [float(np.abs(outputs["on"][name] - outputs["off"][name]).max()),
                            float(np.abs(outputs["off"][name]).max())] for name in outputs["off"]}
    out[workload + " layout"] = [runs[v].result.provenance.extras["layout"] for v in ("off", "on")]
# the flatten order matters: NHWC with dense1's rows left in canonical (C, H, W) order differs
module = importlib.import_module("workloads.cnn.paddle")
run = cell_run("cnn", options={"channels_last": "on"})
policy = module.runtime.select_device(run)
model = module.VGGStyleCNN(run.settings, policy.data_format)
params, batch = canonical.parameters("cnn"), canonical.parity_batch("cnn")
module.load_canonical(model, params)
dense1 = [layer for layer in model.layers if type(layer).__name__ == "Linear"][0]
dense1.weight.set_value(params["dense1.kernel"])  # its rows left in the canonical (C, H, W) order
model.eval()
wrong = model(module.runtime.to_device(batch["x"])).numpy()
reference = module.parity(cell_run("cnn"), params, batch)["logits"]
out["unpermuted"] = float(np.abs(wrong - reference).max())
say(out)
""")
    for workload in ("cnn", "resnet50"):
        assert found[workload + " layout"] == ["NCHW / TNC", "NHWC (channels_last)"]
        for name, (difference, scale) in found[workload].items():
            assert difference <= 1e-5 * max(scale, 1.0), (workload, name, difference)
    assert set(found["cnn"]) == {"logits", "logits_after_training"}
    assert found["unpermuted"] > 1e-3


def test_multi_tensor_optimizers_compute_the_per_parameter_update():
    """Momentum and Adam with use_multi_tensor=True (one merged op for every parameter, what the CNN and
    GRU use) give the per-parameter ops' weights bit for bit, on gradients from 1e-9 to 1."""
    found = in_paddle("""
import paddle
paddle.set_device("cpu")
TINY = np.array([1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 1.0], np.float32)
def weights(kind, multi):
    ws = [paddle.create_parameter([6], "float32", default_initializer=paddle.nn.initializer.Constant(0.5))
          for _ in range(3)]
    if kind == "Adam":
        opt = paddle.optimizer.Adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=ws,
                                    lazy_mode=False, use_multi_tensor=multi)
    else:
        opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9, parameters=ws, use_multi_tensor=multi)
    for sign in (1.0, -0.5, 2.0, 1.0):
        sum((w * paddle.to_tensor(TINY * sign * (i + 1))).sum() for i, w in enumerate(ws)).backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
    return np.stack([w.numpy() for w in ws])
say({kind: [weights(kind, True).tolist(), weights(kind, False).tolist()] for kind in ("Adam", "Momentum")})
""")
    for kind, (merged, per_parameter) in found.items():
        assert merged == per_parameter, kind
        assert not np.allclose(merged, 0.5), kind  # the steps moved the weights


def test_cells_start_from_the_canonical_weights_and_record_what_ran():
    """--init canonical (the default) loads the canonical weights in run(), as parity() does; --init
    framework keeps Paddle's initialisers. The result records init, the optimizer, the GRU kernel that
    ran, the eager graph and TF32; channels_last on the GRU (no convolution) is refused."""
    found = in_paddle("""
out = {}
for workload in ("cnn", "gru"):
    module = importlib.import_module(f"workloads.{workload}.paddle")
    for init in ("canonical", "framework"):
        loaded = []
        original = module.load_canonical
        def spy(model, params, original=original, loaded=loaded):
            loaded.append(float(np.abs(params["dense1.kernel" if workload == "cnn" else "dense.kernel"]).sum()))
            return original(model, params)
        module.load_canonical = spy
        run = cell_run(workload, init=init, max_train_batches=2, max_eval_batches=1)
        module.run(run)
        module.load_canonical = original
        result = run.finish()
        out[f"{workload} {init}"] = {"loaded": loaded, "status": result.status, "extras": result.provenance.extras,
                                     "first_loss": result.samples.first_loss}
out["canonical sums"] = {w: float(np.abs(canonical.parameters(w)[k]).sum())
                         for w, k in (("cnn", "dense1.kernel"), ("gru", "dense.kernel"))}
try:
    importlib.import_module("workloads.runtime.paddle").select_device(cell_run("gru", options={"channels_last": "on"}))
    out["gru channels_last"] = "ran"
except Unsupported as error:
    out["gru channels_last"] = str(error)
say(out)
""")
    for workload in ("cnn", "gru"):
        canonical_run, framework_run = found[f"{workload} canonical"], found[f"{workload} framework"]
        assert canonical_run["loaded"] == [found["canonical sums"][workload]] and framework_run["loaded"] == []
        assert canonical_run["extras"]["init"] == "canonical" and framework_run["extras"]["init"] == "framework"
        assert canonical_run["first_loss"] != framework_run["first_loss"]
        for run in (canonical_run, framework_run):
            assert run["status"] == "ok"
            extras = run["extras"]
            assert extras["tf32"] == "n/a (CPU)" and extras["graph"].startswith("dynamic (eager)")
            assert "use_multi_tensor=True" in extras["optimizer"]
    assert "merged_momentum_" in found["cnn canonical"]["extras"]["optimizer"]
    assert "merged_adam_" in found["gru canonical"]["extras"]["optimizer"]
    assert found["gru canonical"]["extras"]["gru_kernel"].startswith("fused-cpu: ")
    assert "gru_kernel" not in found["cnn canonical"]["extras"]
    assert "no" in found["gru channels_last"] and "channels_last" in found["gru channels_last"]


def test_graph_mode_converts_each_program_once_and_computes_what_eager_computes():
    """The graph mode (paddle.jit.to_static, docs/FAIRNESS.md: modes-compared): a short CNN cell builds
    its train and eval programs once each (samples.traces) and says what ran; the CNN's and the GRU's
    parity outputs through the converted forward (the logits, and after the parity steps, whose
    backward is the converted program's) are the eager mode's; the steps did train."""
    found = in_paddle("""
out = {}
for workload in ("cnn", "gru"):
    module = importlib.import_module(f"workloads.{workload}.paddle")
    params, batch = canonical.parameters(workload), canonical.parity_batch(workload)
    runs = {mode: cell_run(workload, mode=mode) for mode in ("eager", "graph")}
    outputs = {mode: module.parity(run, params, batch) for mode, run in runs.items()}
    out[workload] = {name: float(np.abs(outputs["graph"][name] - outputs["eager"][name]).max()
                                 / np.abs(outputs["eager"][name]).max()) for name in outputs["eager"]}
    out[workload + " trained"] = float(np.abs(outputs["graph"]["logits_after_training"]
                                              - outputs["graph"]["logits"]).max())
    out[workload + " traces"] = {mode: run.result.samples.traces for mode, run in runs.items()}
run = cell_run("cnn", mode="graph", max_train_batches=3, max_eval_batches=2)
importlib.import_module("workloads.cnn.paddle").run(run)
result = run.finish()
out["cnn run"] = {"status": result.status, "traces": result.samples.traces, "steps": result.samples.epoch_steps,
                  "extras": {k: result.provenance.extras[k] for k in ("mode", "graph")}}
say(out)
""")
    for workload in ("cnn", "gru"):
        assert set(found[workload]) == {"logits", "logits_after_training"}
        assert all(difference <= 1e-5 for difference in found[workload].values()), (workload, found[workload])
        assert found[workload + " trained"] > 1e-3
        assert found[workload + " traces"] == {"eager": {}, "graph": {"to_static program 1 (eval)": 1,
                                                                      "to_static program 2 (train)": 1}}
    run = found["cnn run"]
    assert run["status"] == "ok" and run["steps"] == [3]
    assert run["traces"] == {"to_static program 1 (train)": 1, "to_static program 2 (eval)": 1}
    assert run["extras"]["mode"].startswith("graph: paddle.jit.to_static(full_graph=True)")
    assert run["extras"]["graph"].startswith("static: paddle.jit.to_static(full_graph=True)")


def test_gru_kernel_names_the_per_step_fallback_and_features_reach_the_host_as_numpy():
    """describe_gru_kernel reads nn.GRU's own dispatch (could_use_cudnn: its rnn operator, else a GRUCell
    looped in Python). to_host hands numpy float32 over,
    bfloat16 included (whose .numpy() is raw uint16), and the inference loop times the host copy."""
    found = in_paddle("""
import paddle
from workloads.runtime import paddle as runtime
run = cell_run("resnet50")
policy = runtime.select_device(run)
looping = paddle.nn.GRU(4, 3, time_major=True)
looping.could_use_cudnn = False  # what nn.GRU sets for layers it cannot hand its rnn operator
kernels = [runtime.describe_gru_kernel(policy, paddle.nn.GRU(4, 3, time_major=True)),
           runtime.describe_gru_kernel(policy, looping)]
half = runtime.to_host(paddle.to_tensor(np.array([[1.5, -2.0]], np.float32)).astype("bfloat16"))

class Tiny(paddle.nn.Layer):  # (N, 3, H, W) -> (N, 2048) in no time
    def __init__(self):
        super().__init__()
        self.dense = paddle.nn.Linear(3, 2048)
    def forward(self, images):
        return self.dense(images.mean(axis=[2, 3]))

runtime.extract_features(run, policy, Tiny(), run.random_images())
result = run.finish()
say({"kernels": kernels, "half": [type(half).__name__, str(half.dtype), half.tolist()],
     "batches": len(result.samples.batch_times_s), "status": result.status})
""")
    assert found["kernels"][0].startswith("fused-cpu: ") and found["kernels"][1].startswith("python-loop: ")
    assert found["half"] == ["ndarray", "float32", [[1.5, -2.0]]]
    assert found["batches"] == 3 and found["status"] == "ok"
