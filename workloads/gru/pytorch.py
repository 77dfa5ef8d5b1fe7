"""GRU sentiment classifier trained on IMDB, in PyTorch.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. nn.GRU takes cuDNN's fused kernel on a GPU (FAIRNESS.md: fused-rnn); the
compiled mode runs the same parameters as a loop over one compiled GRU step (runtime.gru_layer).
"""
import torch
from torch import nn

from workloads.common import canonical
from workloads.runtime import pytorch as runtime

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "GRU weights stored (3*hidden, in): canonical kernels transposed; two bias vectors per gate",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam adds epsilon after the square root of v-hat",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(nn.Module):
    def __init__(self, s, policy):
        super().__init__()
        self.embedding = nn.Embedding(s.vocabulary, s.embedding_size)  # phrase: embedding
        # Time-major (TNC) is cuDNN's native RNN layout (FAIRNESS.md: layouts). PyTorch's GRU is the
        # cuDNN form: reset gate applied after the recurrent matmul, two bias vectors per gate.
        self.gru = runtime.gru_layer(policy, s.embedding_size, s.hidden_size)  # phrase: gru
        self.dense = nn.Linear(s.hidden_size, s.classes)

    def forward(self, tokens):  # tokens: (batch, time)
        outputs, _ = self.gru(self.embedding(tokens.t()))
        return self.dense(outputs[-1])  # the last time step's output  # phrase: last-time-step


def make_optimizer(model, s, policy):
    # PyTorch adds epsilon after the square root of v-hat, as the Adam paper does (stock Keras adds
    # it to sqrt(v) before the bias correction: the Keras rows match PyTorch's form).
    # fused: PyTorch's fused kernel where it has one (runtime.TorchPolicy; FAIRNESS.md: fused optimizers).
    return torch.optim.Adam(model.parameters(), lr=s.learning_rate, betas=(s.beta1, s.beta2), eps=s.epsilon,  # phrase: adam
                            fused=policy.fused_optimizer)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """PyTorch keeps gates in the canonical order r, z, n; its matrices are (out, in)."""
    tensor = lambda name, transpose=False: torch.from_numpy(  # noqa: E731
        canonical.dense_to_out_in(params[name]) if transpose else params[name])
    with torch.no_grad():
        model.embedding.weight.copy_(tensor("embedding.embeddings"))
        model.gru.weight_ih_l0.copy_(tensor("gru.kernel", transpose=True))
        model.gru.weight_hh_l0.copy_(tensor("gru.recurrent_kernel", transpose=True))
        model.gru.bias_ih_l0.copy_(tensor("gru.input_bias"))
        model.gru.bias_hh_l0.copy_(tensor("gru.recurrent_bias"))
        model.dense.weight.copy_(tensor("dense.kernel", transpose=True))
        model.dense.bias.copy_(tensor("dense.bias"))


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def select_device(self, run):
        return runtime.select_device(run, convolutions=False)  # channels_last: unsupported

    def build_model(self, run, policy):
        return GRUClassifier(run.settings, policy).to(policy.device)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings, policy)

    def loss_function(self):
        return nn.CrossEntropyLoss()

    def train(self, run, policy, model, optimizer, data):
        runtime.watch_gru_kernel(run, model.gru)  # which kernel ran, read from the first training step
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
