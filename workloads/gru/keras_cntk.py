"""GRU sentiment classifier trained on IMDB, in Keras 2.2 on CNTK (the original study's Keras(CNTK) row).

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. Compare with workloads/gru/keras.py (Keras 3): Keras 2.2's GRU
defaults to the other GRU (reset_after=False) with a hard sigmoid, so both are set here; its
fused cuDNN layer (CuDNNGRU) exists for TensorFlow only, so on CNTK the GRU is Keras' own
recurrence on a GPU too (FAIRNESS.md: fused-rnn cannot be followed from Keras on CNTK).
"""
# The runtime comes first: it imports CNTK, and reports a host without the OpenMPI libraries
# CNTK is linked against as an unsupported cell rather than a crash.
from workloads.runtime import keras_cntk as runtime

import keras
import numpy as np
from keras import backend as K
from keras import layers

from workloads.common import canonical

MATCHED = (
    "GRU(reset_after=True, recurrent_activation='sigmoid'): the canonical (cuDNN) form; Keras 2.2's "
    "defaults are reset_after=False and a hard sigmoid, a different model",
    "Keras orders gates z, r, n: canonical r, z, n reordered (canonical.gru_gates_rzn_to_zrn); kernels "
    "(in, 3*hidden) as is; the two bias vectors stacked (2, 3*hidden), row 0 input, row 1 recurrent",
    "no fused cuDNN GRU: Keras 2.2's CuDNNGRU is TensorFlow-only, so Keras' CNTK recurrence runs on the "
    "GPU as on the CPU; batch-major input; the last time step's output; no masking of padding",
    "Adam: Keras 2.2 adds epsilon to sqrt(v) (an effective eps/sqrt(1-b2^t)); a subclass adds it to "
    "sqrt(v-hat), as PyTorch and the paper's Algorithm 1 (stock Keras 2.2 Adam: 8.2e-4 relative "
    "difference after two steps, beyond tolerance)",
    "loss: categorical_crossentropy(from_logits=True) on one-hot labels, the batch mean",
    "--init framework: Keras' default initialisers, Glorot-uniform kernel, orthogonal recurrent kernel, zero biases, "
    "uniform(-0.05, 0.05) embedding",
)


# --- model --------------------------------------------------------------------------------------

def gru_classifier(s) -> "keras.Model":
    tokens = keras.Input(shape=(s.sequence_length,), dtype="int32")  # (batch, time)
    x = layers.Embedding(s.vocabulary, s.embedding_size, name="embedding")(tokens)  # phrase: embedding
    # reset_after=True: reset gate applied after the recurrent matmul, two bias vectors per gate,
    # the form cuDNN implements; sigmoid gates (Keras 2.2 defaults to a hard sigmoid).
    x = layers.GRU(s.hidden_size, reset_after=True, recurrent_activation="sigmoid", name="gru")(x)  # phrase: gru, last-time-step
    logits = layers.Dense(s.classes, name="dense")(x)  # logits: softmax lives in the loss
    return keras.Model(tokens, logits, name="gru_classifier")


# --- loss and optimizer -------------------------------------------------------------------------

class Adam(keras.optimizers.Adam):  # phrase: adam
    """Keras 2.2's Adam with epsilon added to sqrt(v-hat), as the Adam paper's Algorithm 1 and PyTorch.

    Keras' own update, w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v) + eps), is the paper's "efficient"
    reordering, whose epsilon is in effect eps/sqrt(1-b2^t): 32x larger at step 1.
    """

    def get_updates(self, loss, params):
        grads = self.get_gradients(loss, params)
        self.updates = [K.update_add(self.iterations, 1)]
        t = K.cast(self.iterations, K.floatx()) + 1
        correction1, correction2 = 1. - K.pow(self.beta_1, t), 1. - K.pow(self.beta_2, t)
        ms = [K.zeros(K.int_shape(p), dtype=K.dtype(p)) for p in params]
        vs = [K.zeros(K.int_shape(p), dtype=K.dtype(p)) for p in params]
        self.weights = [self.iterations] + ms + vs
        for p, g, m, v in zip(params, grads, ms, vs):
            m_t = self.beta_1 * m + (1. - self.beta_1) * g
            v_t = self.beta_2 * v + (1. - self.beta_2) * K.square(g)
            self.updates += [K.update(m, m_t), K.update(v, v_t),
                             K.update(p, p - self.lr * (m_t / correction1) / (K.sqrt(v_t / correction2) + self.epsilon))]
        return self.updates


# what update ran (FAIRNESS.md: fused-optimizers); Keras 2.2's own Adam would be written out too, in Keras' form
OPTIMIZER = runtime.WRITTEN_OUT.format("Adam, a Keras 2.2 Adam subclass with PyTorch's epsilon placement,")


def compile_model(model: "keras.Model", s) -> "keras.Model":
    model.compile(optimizer=Adam(lr=s.learning_rate, beta_1=s.beta1, beta_2=s.beta2, epsilon=s.epsilon),
                  loss=runtime.cross_entropy_from_logits)
    return model


# --- canonical weights --------------------------------------------------------------------------

def canonical_arrays(params: dict) -> dict:
    """Each layer's weights in Keras' order (numpy only): gates r, z, n -> z, r, n; biases stacked."""
    reorder = canonical.gru_gates_rzn_to_zrn
    return {
        "embedding": [params["embedding.embeddings"]],
        "gru": [reorder(params["gru.kernel"]), reorder(params["gru.recurrent_kernel"]),
                np.stack([reorder(params["gru.input_bias"]), reorder(params["gru.recurrent_bias"])])],
        "dense": [params["dense.kernel"], params["dense.bias"]],
    }


def load_canonical(model: "keras.Model", params: dict) -> None:
    for name, weights in canonical_arrays(params).items():
        model.get_layer(name).set_weights(weights)


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return compile_model(gru_classifier(run.settings), run.settings)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def train(self, run, policy, model, optimizer, data):
        record_what_runs(run, model)
        super().train(run, policy, model, optimizer, data)

    def parity_steps(self, run, policy, model, optimizer, batch):
        record_what_runs(run, model)
        return super().parity_steps(run, policy, model, optimizer, batch)


def record_what_runs(run, model) -> None:
    """The optimizer, and the GRU kernel read from the model's graph (FAIRNESS.md: fused-rnn)."""
    run.set_provenance(extras={"optimizer": OPTIMIZER,
                               "gru_kernel": runtime.gru_kernel(model, run.settings.sequence_length)})


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
