"""GRU sentiment classifier trained on IMDB, in CNTK 2.7's own API (sequence axes, Recurrence, optimized_rnnstack).

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. Reviews are CNTK sequences (its dynamic sequence axis), so the
recurrence runs over time without any transposing by hand.
What to notice: on a GPU the GRU is C.optimized_rnnstack(recurrent_op='gru'), cuDNN's fused kernel
(FAIRNESS.md: fused-rnn), whose one weight is cuDNN's packed parameter buffer. It has no CPU kernel, and CNTK's
own layers.GRU is the other GRU (reset gate applied to h before its matmul, one bias per gate),
so on the CPU the canonical reset-after cell is written out and run by layers.Recurrence. Which one
runs is probed on the device (runtime.choose_gru), checked in the built graph and recorded (gru_kernel).
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import cntk as runtime

import cntk as C
import numpy as np

from workloads.common.hyperparams import SEED

MATCHED = (
    "GPU: optimized_rnnstack(recurrent_op='gru'), cuDNN's reset-after GRU, gates r, z, n as canonical; "
    "its weight is the six matrices (each transposed to hidden x in) then the six biases, packed in "
    "cuDNN's order (runtime/cntk.py pack_cudnn_gru)",
    "CPU: optimized_rnnstack has no CPU kernel and layers.GRU is the reset-before form, so the canonical "
    "reset-after cell (two biases per gate) is written out and run by layers.Recurrence",
    "reviews are sequences on CNTK's dynamic axis (time-major inside; FAIRNESS.md: layouts); sequence.last gives "
    "the last step's output; no masking of padding",
    "embedding as C.gather on token indices: a dense gradient, as PyTorch's nn.Embedding (layers.Embedding "
    "multiplies sparse one-hot rows and yields a sparse gradient)",
    "Adam written as a C.universal learner in PyTorch's form, epsilon added to sqrt(v-hat); CNTK's "
    "C.adam adds it to sqrt(v), Keras' form (8.1e-4 relative difference after two steps: beyond tolerance)",
    "C.universal gets the gradient summed over the batch (the built-in learners average it): divided by "
    "the batch size in the update, so Adam's epsilon acts as in PyTorch; loss cross_entropy_with_softmax "
    "on one-hot labels",
    "--init framework: initial weights drawn in numpy (the packed cuDNN weight has no per-matrix initialiser): "
    "Glorot-uniform kernels, zero biases, uniform(-0.05, 0.05) embedding",
)


# --- model --------------------------------------------------------------------------------------

def initial_weights(s) -> dict:
    """Canonical-layout starting weights (seeded), for both GRU paths alike."""
    rng = np.random.default_rng(SEED)

    def glorot(rows, columns):
        limit = np.sqrt(6.0 / (rows + columns))
        return rng.uniform(-limit, limit, size=(rows, columns)).astype(np.float32)

    hidden, gates = s.hidden_size, 3 * s.hidden_size
    return {"embedding.embeddings": rng.uniform(-0.05, 0.05, (s.vocabulary, s.embedding_size)).astype(np.float32),
            "gru.kernel": glorot(s.embedding_size, gates), "gru.recurrent_kernel": glorot(hidden, gates),
            "gru.input_bias": np.zeros(gates, np.float32), "gru.recurrent_bias": np.zeros(gates, np.float32),
            "dense.kernel": glorot(hidden, s.classes), "dense.bias": np.zeros(s.classes, np.float32)}


def gru_classifier(s, fused: bool):
    """The network as a CNTK function of its one input, the token sequences; returns (logits, parameters by name)."""
    hidden, start = s.hidden_size, initial_weights(s)
    weights = {"embedding.embeddings": C.parameter(init=start["embedding.embeddings"]),
               "dense.kernel": C.parameter(init=start["dense.kernel"]),
               "dense.bias": C.parameter(init=start["dense.bias"])}
    tokens = C.sequence.input_variable((), name="tokens")  # one word index per step
    x = C.gather(weights["embedding.embeddings"], tokens)  # (embedding_size,) per step  # phrase: embedding
    if fused:  # cuDNN's GRU: one packed weight, its size inferred from the input (FAIRNESS.md: fused-rnn)  # phrase: gru
        weights["gru.packed"] = C.parameter((C.InferredDimension, hidden))
        outputs = C.optimized_rnnstack(x, weights["gru.packed"], hidden, 1, recurrent_op="gru")
        weights["gru.packed"].value = runtime.pack_cudnn_gru(start["gru.kernel"], start["gru.recurrent_kernel"],
                                                         start["gru.input_bias"], start["gru.recurrent_bias"])
    else:
        for name in ("gru.kernel", "gru.recurrent_kernel", "gru.input_bias", "gru.recurrent_bias"):
            weights[name] = C.parameter(init=start[name])
        kernel, recurrent_kernel = weights["gru.kernel"], weights["gru.recurrent_kernel"]
        recurrent_bias = weights["gru.recurrent_bias"]
        projected = C.times(x, kernel) + weights["gru.input_bias"]  # every step's x @ W at once

        def gru_step(h, x_projected):  # canonical reset-after form, gates r, z, n
            h_projected = C.times(h, recurrent_kernel) + recurrent_bias
            r = C.sigmoid(x_projected[0:hidden] + h_projected[0:hidden])
            z = C.sigmoid(x_projected[hidden:2 * hidden] + h_projected[hidden:2 * hidden])
            n = C.tanh(x_projected[2 * hidden:] + r * h_projected[2 * hidden:])  # r scales (h U_n + b_hn)
            return (1 - z) * n + z * h

        outputs = C.layers.Recurrence(gru_step)(projected)  # h0 = 0
    last = C.sequence.last(outputs)  # the last time step's output  # phrase: last-time-step
    logits = C.times(last, weights["dense.kernel"]) + weights["dense.bias"]  # softmax lives in the loss  # phrase: dense
    return logits, weights


# --- loss and optimizer ---------------------------------------------------------------------------

def loss(logits, labels):
    """Softmax folded into the loss (FAIRNESS.md: softmax-in-loss), per sample, on one-hot labels."""
    return C.cross_entropy_with_softmax(logits, labels)


def adam(parameters, gradients, s, batch_size: int):  # phrase: adam
    """Adam as PyTorch computes it, w -= lr * m_hat / (sqrt(v_hat) + eps), in CNTK ops (C.universal).

    C.universal hands this update the gradient summed over the minibatch's samples (CNTK's built-in
    learners average it themselves), so it is divided by the batch size first: scaling g scales m and
    sqrt(v) alike, and only epsilon would notice. `step` is one shared assign node, so it counts once
    per minibatch; m and v are per parameter."""
    step = C.constant(0.0, name="adam_step")
    t = C.assign(step, step + 1)
    correction1, correction2 = 1 - C.pow(s.beta1, t), 1 - C.pow(s.beta2, t)
    updates = []
    for parameter, gradient in zip(parameters, gradients):
        gradient = gradient / batch_size  # the batch's mean gradient, as PyTorch's mean loss gives
        m = C.constant(0.0, shape=parameter.shape, dtype=parameter.dtype)
        v = C.constant(0.0, shape=parameter.shape, dtype=parameter.dtype)
        m_new = C.assign(m, s.beta1 * m + (1 - s.beta1) * gradient)
        v_new = C.assign(v, s.beta2 * v + (1 - s.beta2) * C.square(gradient))
        update = s.learning_rate * (m_new / correction1) / (C.sqrt(v_new / correction2) + s.epsilon)
        updates.append(C.assign(parameter, parameter - update))
    return C.combine(updates)


# CNTK's own C.adam (its C++ learner) adds epsilon to sqrt(v), not to sqrt(v-hat): the parity run with it
# gives 8.1e-4 relative difference after the two steps, beyond the 1e-4 tolerance (FAIRNESS.md: fused-optimizers)
WHY_WRITTEN_OUT = ("CNTK's C.adam adds epsilon to sqrt(v), Keras' form: 8.1e-4 relative difference from PyTorch "
                   "after the two parity steps, beyond the 1e-4 tolerance")


def make_learner(logits, s, batch_size: int):
    """The Adam above as a CNTK learner, and what it is (for extras["optimizer"]: the ops counted in the
    update graph C.universal was given). Every training batch has batch_size samples (the harness
    yields complete batches only, and runtime.Classifier checks it)."""
    built = []

    def update(parameters, gradients):
        built.append(adam(parameters, gradients, s, batch_size))
        return built[-1]

    learner = C.universal(update, logits.parameters)
    description = "written out: PyTorch's Adam as {} CNTK ops for {} parameters, one C.universal learner ({})".format(
        runtime.count_ops(built[-1]), len(logits.parameters), WHY_WRITTEN_OUT)
    return learner, description


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict, fused: bool) -> dict:
    """Canonical arrays by this model's parameter names (numpy only): as they are, or cuDNN-packed."""
    arrays = {name: params[name] for name in ("embedding.embeddings", "dense.kernel", "dense.bias")}
    gru = ("gru.kernel", "gru.recurrent_kernel", "gru.input_bias", "gru.recurrent_bias")
    if fused:
        arrays["gru.packed"] = runtime.pack_cudnn_gru(*(params[name] for name in gru))
    else:
        arrays.update({name: params[name] for name in gru})
    return arrays


def load_canonical(weights: dict, params: dict, fused: bool) -> None:
    arrays = canonical_arrays(params, fused)
    assert set(arrays) == set(weights), set(arrays) ^ set(weights)
    for name, value in arrays.items():
        assert weights[name].shape == value.shape, (name, weights[name].shape, value.shape)
        weights[name].value = value


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def select_device(self, run):
        return runtime.select_device(run, probe_gru=True)  # which GRU runs here, probed (FAIRNESS.md: fused-rnn)

    def build_model(self, run, policy, batch_size=None):
        logits, parameters = gru_classifier(run.settings, policy.fused_gru)
        runtime.check_gru_graph(logits, policy.fused_gru)
        return runtime.Network(logits, parameters, batch_size or run.settings.batch_size)

    def build_parity_model(self, run, policy, batch):
        return self.build_model(run, policy, batch_size=len(batch["x"]))  # Adam divides by the batch size

    def load_canonical(self, network, params):
        load_canonical(network.parameters, params, fused="gru.packed" in network.parameters)

    def make_learner(self, network, run, policy):
        learner, optimizer = make_learner(network.output, run.settings, network.batch_size)
        run.set_provenance(extras={"gru_kernel": policy.gru_kernel, "optimizer": optimizer})
        return learner

    def loss(self, logits, labels):
        return loss(logits, labels)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
