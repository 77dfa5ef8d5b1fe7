"""GRU sentiment classifier trained on IMDB, in Caffe2 (gru_cell over a RecurrentNetwork operator).

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. What to notice: gru_cell.GRU(linear_before_reset=True) is the
cuDNN form ("matches cudnn semantics", says its source); Caffe2's default is the other GRU. Its
weights are four FC layers: one input projection for all three gates, one recurrent FC per gate.
Caffe2's own Adam operator adds epsilon to sqrt(v), Keras' form (8.1e-4 relative difference from
PyTorch after the two parity steps, beyond the 1e-4 tolerance), so Adam is written out in
operators, and the embedding's sparse gradient (from Gather) is made dense first, as PyTorch's.
"""
import numpy as np
from caffe2.python import brew, core, gru_cell, model_helper, workspace
from caffe2.python.modeling.initializers import Initializer

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import caffe2 as runtime

MATCHED = (
    "gru_cell.GRU(linear_before_reset=True): the canonical reset-after form, gates r, z, n in that order; "
    "Caffe2's default linear_before_reset=False is the other GRU",
    "weights: i2h (3*hidden, in) = canonical kernel transposed, with the input bias; reset/update/output "
    "FCs (hidden, hidden) = the recurrent kernel's three blocks transposed, each with its recurrent bias",
    "time-major (TNC) input to the RecurrentNetwork operator (FAIRNESS.md: layouts); every sequence length = 150, so "
    "nothing is masked; the last time step's output feeds the dense layer",
    "Adam written out in operators in PyTorch's form, epsilon added to sqrt(v-hat); Caffe2's Adam operator "
    "adds it to sqrt(v) (Keras' form), and SparseAdam would update only the rows in the batch",
    "the embedding's gradient from Gather (a sparse slice) summed into a dense gradient (SparseToDense)",
    "SoftmaxWithLoss: mean cross-entropy over the batch; --init framework: Caffe2's default initialisers (XavierFill), "
    "uniform(-0.05, 0.05) embedding",
    "no cuDNN GRU: Caffe2's cuDNN Recurrent operator has no Python helper for GRU; GRUUnit per step on a GPU too",
)


# --- model --------------------------------------------------------------------------------------

def gru_classifier(model, s):
    """Add the network to `model`: blobs "tokens" (time, batch) int32, "seq_lengths", "h0" in; "logits" out."""
    embeddings = model.create_param("embeddings", shape=[s.vocabulary, s.embedding_size],
                                    initializer=Initializer("UniformFill", min=-0.05, max=0.05))
    x = model.net.Gather([embeddings, "tokens"], "embedded")  # (time, batch, embedding_size)  # phrase: embedding
    # linear_before_reset=True: the reset gate scales (h U_n + b_hn), the cuDNN / canonical form
    _, last = gru_cell.GRU(model, x, "seq_lengths", ["h0"], dim_in=s.embedding_size, dim_out=s.hidden_size,  # phrase: gru
                           scope="gru", outputs_with_grads=(1,), linear_before_reset=True)
    last = model.net.Squeeze(last, "last", dims=[0])  # (1, batch, hidden) -> (batch, hidden)  # phrase: last-time-step
    return brew.fc(model, last, "logits", dim_in=s.hidden_size, dim_out=s.classes)  # softmax lives in the loss


# --- loss and optimizer ---------------------------------------------------------------------------

# Caffe2's Adam operator (and optimizer.build_adam) computes w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v) + eps):
# epsilon added to sqrt(v), not to sqrt(v-hat). Measured with it in place of the operators below: 8.1e-4 relative
# difference from PyTorch after the two parity steps, beyond the 1e-4 tolerance (FAIRNESS.md: fused-optimizers).
# build_adam also counts its steps from 1 before the first update (bias correction at t = 2 on the first step).
WHY_WRITTEN_OUT = ("Caffe2's Adam operator adds epsilon to sqrt(v), Keras' form: 8.1e-4 relative difference from "
                   "PyTorch after the two parity steps, beyond the 1e-4 tolerance")


def add_loss_and_adam(model, s) -> str:
    """SoftmaxWithLoss, the batch mean (FAIRNESS.md: softmax-in-loss), its gradients, then Adam.
    Returns what update runs (FAIRNESS.md: fused-optimizers): the operators add_adam added, counted."""
    _, loss = model.net.SoftmaxWithLoss(["logits", "labels"], ["softmax", "loss"])
    gradients = model.AddGradientOperators([loss])
    before = runtime.count_ops(model.net)
    add_adam(model, gradients, s)
    added = runtime.count_ops(model.net) - before
    return "written out: PyTorch's Adam as {} Caffe2 operators per step for {} parameters ({})".format(
        added, len(model.params), WHY_WRITTEN_OUT)


def add_adam(model, gradients: dict, s) -> None:  # phrase: adam
    """Adam as PyTorch computes it, w -= lr * m_hat / (sqrt(v_hat) + eps), for every parameter."""
    init, net = model.param_init_net, model.net

    def constant(name, value):
        return init.ConstantFill([], name, shape=[1], value=float(value))

    beta1, beta2 = constant("adam_beta1", s.beta1), constant("adam_beta2", s.beta2)
    one_minus_beta1, one_minus_beta2 = constant("adam_1_beta1", 1 - s.beta1), constant("adam_1_beta2", 1 - s.beta2)
    one, epsilon, rate = constant("adam_one", 1.0), constant("adam_epsilon", s.epsilon), constant("adam_lr", s.learning_rate)
    power1, power2 = constant("adam_beta1_power", 1.0), constant("adam_beta2_power", 1.0)
    net.Mul([power1, beta1], power1)  # beta1^t, once per step
    net.Mul([power2, beta2], power2)
    correction1, correction2 = net.Sub([one, power1], "adam_correction1"), net.Sub([one, power2], "adam_correction2")
    for parameter in model.params:
        gradient = gradients[parameter]
        name = str(parameter)
        if isinstance(gradient, core.GradientSlice):  # the embedding's: one row per token occurrence
            indices = net.FlattenToVec(gradient.indices, name + "_grad_indices")  # (time, batch) -> flat
            rows, _ = net.Reshape(gradient.values, [name + "_grad_rows", name + "_grad_shape"], shape=(-1, s.embedding_size))
            gradient = net.SparseToDense([indices, rows, parameter], name + "_dense_grad")  # sums repeated tokens
        m = init.ConstantFill([parameter], name + "_adam_m", value=0.0)
        v = init.ConstantFill([parameter], name + "_adam_v", value=0.0)
        net.WeightedSum([m, beta1, gradient, one_minus_beta1], m)  # m = b1*m + (1-b1)*g
        net.WeightedSum([v, beta2, net.Sqr(gradient, name + "_adam_g2"), one_minus_beta2], v)
        m_hat = net.Div([m, correction1], name + "_adam_m_hat")
        denominator = net.Add([net.Sqrt(net.Div([v, correction2], name + "_adam_v_hat"), name + "_adam_sqrt"),
                               epsilon], name + "_adam_denominator")
        step = net.Mul([net.Div([m_hat, denominator], name + "_adam_ratio"), rate], name + "_adam_step")
        net.Sub([parameter, step], parameter)


# --- the training and test nets ------------------------------------------------------------------

def build(run: Run, policy, batch_size: int):
    """The training model (forward, gradients, Adam) and the test model, over the same blobs,
    initialised and instantiated (shapes come from a first batch's blobs); records the optimizer
    and the GRU's kernel, read from the nets."""
    s = run.settings
    train = model_helper.ModelHelper(name="gru_train")
    test = model_helper.ModelHelper(name="gru_test", init_params=False)
    with core.DeviceScope(policy.device):
        gru_classifier(train, s)
        optimizer = add_loss_and_adam(train, s)
        gru_classifier(test, s)  # the same blobs: "gru/..." parameters are shared by name
    run.set_provenance(extras={"optimizer": optimizer,
                               "gru_kernel": runtime.recurrent_kernel(train.net, s.sequence_length)})
    feed_batch(np.zeros((batch_size, s.sequence_length), np.int32), s, policy)
    runtime.feed("labels", np.zeros(batch_size, np.int32), policy.device)
    workspace.RunNetOnce(train.param_init_net)
    runtime.create_net(run, policy, train.net)
    runtime.create_net(run, policy, test.net)
    return train, test


def feed_batch(tokens: np.ndarray, s, policy) -> None:
    """Tokens time-major (TNC; FAIRNESS.md: layouts); every review runs all its steps, padding included."""
    runtime.feed("tokens", np.ascontiguousarray(tokens.T, dtype=np.int32), policy.device)
    runtime.feed("seq_lengths", np.full(len(tokens), tokens.shape[1], np.int32), policy.device)
    runtime.feed("h0", np.zeros((1, len(tokens), s.hidden_size), np.float32), policy.device)


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Blob name -> array (numpy only): FC weights (out, in), so the canonical kernels transposed."""
    hidden = params["gru.recurrent_kernel"].shape[0]
    arrays = {"embeddings": params["embedding.embeddings"],
              "gru/i2h_w": canonical.dense_to_out_in(params["gru.kernel"]),  # rows r, z, n
              "gru/i2h_b": params["gru.input_bias"],
              "logits_w": canonical.dense_to_out_in(params["dense.kernel"]), "logits_b": params["dense.bias"]}
    for index, gate in enumerate(("reset_gate_t", "update_gate_t", "output_gate_t")):  # r, z, n
        block = slice(index * hidden, (index + 1) * hidden)
        arrays["gru/{}_w".format(gate)] = canonical.dense_to_out_in(params["gru.recurrent_kernel"][:, block])
        arrays["gru/{}_b".format(gate)] = np.ascontiguousarray(params["gru.recurrent_bias"][block])
    return arrays


def load_canonical(model, params: dict, policy) -> None:
    arrays = canonical_arrays(params)
    assert set(arrays) == {str(p) for p in model.params}, set(arrays) ^ {str(p) for p in model.params}
    for name, value in arrays.items():
        assert workspace.FetchBlob(name).shape == value.shape, name
        runtime.feed(name, value, policy.device)


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, batch_size=None):
        s = run.settings
        train, test = build(run, policy, batch_size or s.batch_size)
        return runtime.Classifier(train, test, lambda tokens: feed_batch(tokens, s, policy), policy)

    def build_parity_model(self, run, policy, batch):
        return self.build_model(run, policy, batch_size=len(batch["x"]))

    def load_canonical(self, classifier, params):
        load_canonical(classifier.train, params, classifier.policy)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
