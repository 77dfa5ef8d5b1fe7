"""GRU sentiment classifier trained on IMDB, in Keras 3: one file for the TensorFlow, JAX and PyTorch backends.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. keras.layers.GRU(reset_after=True) is the cuDNN form: on a GPU the
TensorFlow and PyTorch backends run cuDNN's fused kernel (FAIRNESS.md: fused-rnn); JAX has no fused GRU, so
Keras runs a lax.scan with the input projections of all time steps hoisted into one matmul. On the
CPU, TensorFlow runs its generic tf.while_loop over GRUCell and torch a Python loop; extras
"gru_kernel" records what actually ran (runtime.watch_gru_kernel), fallbacks included.
"""
import keras
import numpy as np
from keras import layers

from workloads.common import canonical
from workloads.runtime import keras as runtime

MATCHED = (
    "GRU reset_after=True is the canonical (cuDNN) form; Keras orders gates z, r, n: canonical r, z, n "
    "reordered (canonical.gru_gates_rzn_to_zrn); kernels (in, 3*hidden) as is",
    "GRU biases stacked (2, 3*hidden): row 0 the input bias, row 1 the recurrent bias",
    "batch-major (batch, time, features) input, Keras' only RNN layout (the cuDNN path transposes "
    "inside); return_sequences=False gives the last time step's output; no masking of padding",
    "Adam: Keras adds epsilon to sqrt(v) (the paper's efficient form, an effective epsilon of "
    "eps/sqrt(1-b2^t)); runtime.adam adds it to sqrt(v-hat), as PyTorch and the paper's Algorithm 1 "
    "(stock Keras Adam: 8e-4 relative difference after two steps, beyond tolerance): TensorFlow's "
    "ResourceApplyAdam with epsilon*sqrt(1-b2^t), PyTorch's own fused Adam on torch, Keras ops on JAX",
    "Adam on TensorFlow: the embedding's IndexedSlices gradient is summed to a dense gradient before "
    "it is squared (stock Keras squares each token occurrence's slice: a wrong second moment for "
    "tokens repeated in a batch, 4e-2 relative difference after two steps)",
    "Keras' default initialisers: Glorot-uniform kernel, orthogonal recurrent kernel, zero biases, "
    "uniform(-0.05, 0.05) embedding",
)


# --- model --------------------------------------------------------------------------------------

def gru_classifier(s) -> keras.Model:
    tokens = keras.Input(shape=(s.sequence_length,), dtype="int32")  # (batch, time)
    x = layers.Embedding(s.vocabulary, s.embedding_size, name="embedding")(tokens)  # phrase: embedding
    # reset_after=True (Keras' default): reset gate applied after the recurrent matmul, two
    # bias vectors per gate, the form cuDNN implements. Returns the last time step's output.
    x = layers.GRU(s.hidden_size, reset_after=True, name="gru")(x)  # phrase: gru, last-time-step
    logits = layers.Dense(s.classes, name="dense")(x)  # logits: softmax lives in the loss
    return keras.Model(tokens, logits, name="gru_classifier")


# --- loss and optimizer -------------------------------------------------------------------------

def compile_model(model: keras.Model, s, policy: runtime.KerasPolicy) -> keras.Model:
    # jit_compile from the policy, as the CNN; Keras turns it off for TensorFlow's cuDNN GRU (cuDNN's
    # RNN ops are not XLA ops): the result's jit_compile extra records what it ended as. Adam in
    # PyTorch's epsilon form, through each backend's own Adam op where it has one (runtime.adam).
    model.compile(optimizer=runtime.adam(learning_rate=s.learning_rate, beta_1=s.beta1, beta_2=s.beta2,
                                         epsilon=s.epsilon),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=policy.jit_compile)
    return model


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: keras.Model, params: dict) -> None:
    """Gates r, z, n -> z, r, n; the two bias vectors stacked as one (2, 3*hidden) weight."""
    reorder = canonical.gru_gates_rzn_to_zrn
    model.get_layer("embedding").set_weights([params["embedding.embeddings"]])
    model.get_layer("gru").set_weights([
        reorder(params["gru.kernel"]),
        reorder(params["gru.recurrent_kernel"]),
        np.stack([reorder(params["gru.input_bias"]), reorder(params["gru.recurrent_bias"])]),
    ])
    model.get_layer("dense").set_weights([params["dense.kernel"], params["dense.bias"]])


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def select_device(self, run):
        return runtime.select_device(run, recurrent=True)  # the compiled mode on torch: unsupported

    def build_model(self, run, policy, watch_kernel=True):
        if watch_kernel:  # which GRU kernel actually runs (extras gru_kernel), fallbacks included
            runtime.watch_gru_kernel(run)
        return compile_model(gru_classifier(run.settings), run.settings, policy)

    def build_parity_model(self, run, policy, batch):
        return self.build_model(run, policy, watch_kernel=False)  # the parity check records no kernel

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
