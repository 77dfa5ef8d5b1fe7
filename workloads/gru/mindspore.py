"""GRU sentiment classifier trained on IMDB, in MindSpore: nn.Embedding, nn.GRU, nn.Dense, ops.Adam.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. On a GPU nn.GRU runs cuDNN's fused GRU (FAIRNESS.md: fused-rnn); on the CPU
MindSpore has no fused GRU kernel: nn.GRU is a loop over time steps of its GRU cell function,
which graph mode unrolls into one compiled graph (150 steps, forward and backward) and PyNative
mode runs from Python.
"""
from mindspore import nn
from mindspore.common.initializer import Uniform

from workloads.common import canonical
from workloads.runtime import mindspore as runtime

MATCHED = (
    "nn.GRU is the cuDNN / PyTorch reset-after form with gate order r, z, n and two bias vectors per "
    "gate: canonical as is",
    "GRU weights stored (3*hidden, in) (weight_ih_l0, weight_hh_l0): canonical kernels transposed",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam is the built-in ApplyAdam op (ops.Adam, runtime.Adam) handed epsilon * sqrt(1 - beta2^t), which "
    "adds epsilon after the square root of v-hat as PyTorch (nn.Adam and experimental.optim.Adam add the "
    "unscaled epsilon to sqrt(v), as TensorFlow's; mint.optim.Adam is PyTorch's form written out in ~10 ops)",
    "PyTorch's default initialisers (nn.GRU's and nn.Dense's are the same in MindSpore), embedding "
    "uniform(-0.05, 0.05)",
    "token indices and labels int32 (MindSpore's Embedding and losses take int32)",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(nn.Cell):
    def __init__(self, s):
        super().__init__()
        self.embedding = nn.Embedding(s.vocabulary, s.embedding_size, embedding_table=Uniform(0.05))  # phrase: embedding
        # Time-major (TNC) is cuDNN's native RNN layout (FAIRNESS.md: layouts). MindSpore's GRU is the cuDNN form:
        # reset gate applied after the recurrent matmul, two bias vectors per gate.
        self.gru = nn.GRU(s.embedding_size, s.hidden_size, num_layers=1, batch_first=False)  # phrase: gru
        self.dense = nn.Dense(s.hidden_size, s.classes)

    def construct(self, tokens):  # tokens: (batch, time)
        outputs, _ = self.gru(self.embedding(tokens.T))  # (time, batch, hidden); h0 = 0
        return self.dense(outputs[-1])  # the last time step's output; logits: softmax lives in the loss  # phrase: last-time-step


def make_optimizer(model, s):  # phrase: adam
    # The built-in ApplyAdam op per parameter, epsilon added after the square root of v-hat as PyTorch and
    # the Adam paper (FAIRNESS.md: optimizers): runtime.Adam hands ops.Adam the epsilon that makes it so.
    return runtime.Adam(model.trainable_params(), lr=s.learning_rate, betas=(s.beta1, s.beta2), eps=s.epsilon)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """MindSpore keeps gates in the canonical order r, z, n; its matrices are (out, in)."""
    runtime.set_parameter(model.embedding.embedding_table, params["embedding.embeddings"])
    runtime.set_parameter(model.gru.w_ih_list[0], canonical.dense_to_out_in(params["gru.kernel"]))
    runtime.set_parameter(model.gru.w_hh_list[0], canonical.dense_to_out_in(params["gru.recurrent_kernel"]))
    runtime.set_parameter(model.gru.b_ih_list[0], params["gru.input_bias"])
    runtime.set_parameter(model.gru.b_hh_list[0], params["gru.recurrent_bias"])
    runtime.set_parameter(model.dense.weight, canonical.dense_to_out_in(params["dense.kernel"]))
    runtime.set_parameter(model.dense.bias, params["dense.bias"])


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return GRUClassifier(run.settings)  # no dropout in this model: its train mode changes only the graph's key

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return nn.CrossEntropyLoss()

    def train(self, run, policy, model, optimizer, data):
        run.set_provenance(extras={"gru_kernel": runtime.describe_gru_kernel(model.gru)})
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
