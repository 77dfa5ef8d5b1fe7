"""GRU sentiment classifier trained on IMDB, in MXNet Gluon.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. gluon.rnn.GRU is MXNet's fused RNN operator (cuDNN's on a GPU,
FAIRNESS.md: fused-rnn).
"""
import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn, rnn

from workloads.common import canonical
from workloads.runtime import mxnet as runtime

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "GRU weights stored (3*hidden, in): canonical kernels transposed; two bias vectors per gate",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam adds epsilon after the square root of v-hat: a registered PyTorchAdam (stock MXNet adds it "
    "to the uncorrected sqrt(v))",
    "the loss is per sample and Trainer.step(batch_size) rescales gradients by 1/batch: the mean loss's gradient",
    "token ids fed as float32 (MXNet's Embedding takes float indices; exact below 2^24)",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(nn.HybridBlock):
    def __init__(self, s, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embedding = nn.Embedding(s.vocabulary, s.embedding_size)  # phrase: embedding
            # Time-major (TNC) is cuDNN's native RNN layout (FAIRNESS.md: layouts). MXNet's GRU is the cuDNN form:
            # reset gate applied after the recurrent matmul, two bias vectors per gate.
            self.gru = rnn.GRU(s.hidden_size, num_layers=1, layout="TNC", input_size=s.embedding_size)  # phrase: gru
            self.dense = nn.Dense(s.classes, in_units=s.hidden_size, flatten=False)

    def hybrid_forward(self, F, tokens):  # tokens: (batch, time)
        outputs = self.gru(self.embedding(F.transpose(tokens)))  # (time, batch, hidden); h0 = 0
        # phrase: last-time-step
        # the last time step's output (slice_axis: SequenceLast's CPU backward crashes in MXNet 1.9.1)
        return self.dense(F.squeeze(F.slice_axis(outputs, axis=0, begin=-1, end=None), axis=0))
        # end phrase


def build(s, context):
    model = GRUClassifier(s)
    model.initialize(mx.init.Xavier(), ctx=context)
    return model


def make_trainer(model, s):
    # runtime.PyTorchAdam: epsilon added after the square root of v-hat, as PyTorch and the Adam paper
    # (stock MXNet "adam" adds it to the uncorrected sqrt(v)).
    return gluon.Trainer(model.collect_params(), "pytorchadam",  # phrase: adam
                         {"learning_rate": s.learning_rate, "beta1": s.beta1, "beta2": s.beta2, "epsilon": s.epsilon})


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """MXNet keeps gates in the canonical order r, z, n; its matrices are (out, in)."""
    array = lambda name, transpose=False: mx.nd.array(  # noqa: E731
        canonical.dense_to_out_in(params[name]) if transpose else params[name])
    model.embedding.weight.set_data(array("embedding.embeddings"))
    model.gru.l0_i2h_weight.set_data(array("gru.kernel", transpose=True))
    model.gru.l0_h2h_weight.set_data(array("gru.recurrent_kernel", transpose=True))
    model.gru.l0_i2h_bias.set_data(array("gru.input_bias"))
    model.gru.l0_h2h_bias.set_data(array("gru.recurrent_bias"))
    model.dense.weight.set_data(array("dense.kernel", transpose=True))
    model.dense.bias.set_data(array("dense.bias"))


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return build(run.settings, policy.device)  # no dropout in this model

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_trainer(model, run.settings)

    def loss_function(self):
        return gluon.loss.SoftmaxCrossEntropyLoss()

    def train(self, run, policy, model, optimizer, data):
        run.set_provenance(extras={"gru_kernel": runtime.gru_kernel(policy)})
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
