"""GRU sentiment classifier trained on IMDB, in Chainer.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. L.NStepGRU takes cuDNN's fused kernel on a GPU (FAIRNESS.md:
fused-rnn); it takes a list of sequences and returns the final hidden state, which for these
equal-length (padded) sequences is the last time step's output.
"""
import math

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from workloads.common import canonical
from workloads.runtime import chainer as runtime

MATCHED = (
    "NStepGRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "NStepGRU keeps one (hidden, in) matrix and one bias per gate: w0-w2/b0-b2 input, w3-w5/b3-b5 recurrent",
    "a list of equal-length sequences in, transposed to time-major (TNC) inside; the final hidden state "
    "is the last time step's output",
    "Adam: Chainer adds epsilon to sqrt(v) before the bias correction (stock Keras' form); epsilon is "
    "rescaled each step by sqrt(1 - beta2^t) to give PyTorch's m_hat / (sqrt(v_hat) + eps)",
    "labels int32, as F.softmax_cross_entropy requires",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(chainer.Chain):
    def __init__(self, s):
        super().__init__()
        with self.init_scope():
            self.embedding = L.EmbedID(s.vocabulary, s.embedding_size)  # phrase: embedding
            # one layer, unidirectional, no dropout; cuDNN's fused GRU on a GPU
            self.gru = L.NStepGRU(1, s.embedding_size, s.hidden_size, dropout=0.0)  # phrase: gru
            self.dense = L.Linear(s.hidden_size, s.classes)
        self.gru_kernel = None  # what the GRU ran, read from the first graph built (runtime.gru_kernel_of)

    def forward(self, tokens):  # tokens: (batch, time) int32
        sequences = F.separate(self.embedding(tokens), axis=0)  # batch x (time, embedding)
        last, _ = self.gru(None, list(sequences))  # final hidden state: (layers, batch, hidden)  # phrase: last-time-step
        if self.gru_kernel is None:
            self.gru_kernel = runtime.gru_kernel_of(last)  # cuDNN's node or the per-step loop's; None without a graph
        return self.dense(last[-1])


class PaperAdam(chainer.optimizers.Adam):  # phrase: adam
    """Chainer's Adam with PyTorch's (the Adam paper's) epsilon placement.

    Chainer computes alpha_t * m / (sqrt(v) + eps) with alpha_t = alpha * sqrt(1 - beta2^t) / (1 - beta1^t);
    with eps_t = eps * sqrt(1 - beta2^t) that equals alpha * m_hat / (sqrt(v_hat) + eps) exactly.
    """

    def __init__(self, alpha, beta1, beta2, eps):
        super().__init__(alpha=alpha, beta1=beta1, beta2=beta2, eps=eps)
        self.paper_eps = eps

    def update(self, lossfun=None, *args, **kwds):
        step = self.t + 1  # the update rules count this step as t inside update()
        self.hyperparam.eps = self.paper_eps * math.sqrt(1.0 - self.hyperparam.beta2 ** step)
        super().update(lossfun, *args, **kwds)


def make_optimizer(model, s):
    optimizer = PaperAdam(alpha=s.learning_rate, beta1=s.beta1, beta2=s.beta2, eps=s.epsilon)
    optimizer.setup(model)
    return optimizer


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """Canonical [r, z, n] blocks split into NStepGRU's per-gate matrices, stored (out, in)."""
    xp = model.xp
    model.embedding.W.array[...] = xp.asarray(params["embedding.embeddings"])
    cell = model.gru[0]
    for offset, (kernel, bias) in enumerate((("gru.kernel", "gru.input_bias"),
                                             ("gru.recurrent_kernel", "gru.recurrent_bias"))):
        kernels = np.split(params[kernel], 3, axis=1)  # r, z, n: each (in, hidden)
        biases = np.split(params[bias], 3)
        for gate in range(3):
            index = 3 * offset + gate
            getattr(cell, f"w{index}").array[...] = xp.asarray(canonical.dense_to_out_in(kernels[gate]))
            getattr(cell, f"b{index}").array[...] = xp.asarray(biases[gate])
    model.dense.W.array[...] = xp.asarray(canonical.dense_to_out_in(params["dense.kernel"]))
    model.dense.b.array[...] = xp.asarray(params["dense.bias"])


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        model = GRUClassifier(run.settings)
        model.to_device(policy.device)
        return model

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return F.softmax_cross_entropy

    def train(self, run, policy, model, optimizer, data):
        super().train(run, policy, model, optimizer, data)
        run.set_provenance(extras={"gru_kernel": model.gru_kernel or "unknown: no training step built a graph"})


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
