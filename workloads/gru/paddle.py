"""GRU sentiment classifier trained on IMDB, in PaddlePaddle (dynamic graph).

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. nn.GRU is Paddle's fused rnn operator (cuDNN's kernel on a GPU,
FAIRNESS.md: fused-rnn). What to notice: Paddle's GRU is the cuDNN / PyTorch form exactly (reset gate applied
after the recurrent matmul, gates r, z, n, two bias vectors per gate, weights (3*hidden, in)), so
only the dense kernel's layout differs from PyTorch's, and in Paddle's favour: it is (in, out).
"""
import paddle
from paddle import nn

from workloads.common import canonical
from workloads.runtime import paddle as runtime

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n (checked against numpy): canonical as is",
    "GRU weights stored (3*hidden, in): canonical kernels transposed; two bias vectors per gate",
    "dense kernel stored (in, out): canonical as is",
    "time-major (TNC) input to the GRU (time_major=True); the last time step's output feeds the dense layer",
    "Adam adds epsilon after the square root of v-hat (Paddle scales it by sqrt(1 - beta2^t) inside "
    "its bias-folded update: the same); lazy_mode=False, dense gradients: every embedding row's moments "
    "decay each step, as PyTorch's; use_multi_tensor=True updates every parameter in one merged_adam_ op "
    "(the same update)",
    "token ids and labels int64",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(nn.Layer):
    def __init__(self, s):
        super().__init__()
        # Paddle's default initialisers, as the PyTorch row keeps PyTorch's: the GRU's uniform(-1/sqrt(hidden),
        # 1/sqrt(hidden)) is PyTorch's too; the embedding and dense use Xavier-normal (PyTorch: normal, Kaiming-uniform).
        self.embedding = nn.Embedding(s.vocabulary, s.embedding_size)  # phrase: embedding
        # Time-major (TNC) is cuDNN's native RNN layout (FAIRNESS.md: layouts). Paddle's GRU is the cuDNN form:
        # reset gate applied after the recurrent matmul, two bias vectors per gate.
        self.gru = nn.GRU(s.embedding_size, s.hidden_size, num_layers=1, direction="forward", time_major=True)  # phrase: gru
        self.dense = nn.Linear(s.hidden_size, s.classes)

    def forward(self, tokens):  # tokens: (batch, time)
        outputs, _ = self.gru(self.embedding(tokens.t()))  # (time, batch, hidden); h0 = 0
        return self.dense(outputs[-1])  # the last time step's output  # phrase: last-time-step


def make_optimizer(model, s):  # phrase: adam
    # Paddle folds both bias corrections into the step size and scales epsilon by sqrt(1 - beta2^t):
    # exactly w -= lr * m_hat / (sqrt(v_hat) + eps), PyTorch's and the paper's form. use_multi_tensor: one
    # merged_adam_ op updates every parameter (the same update, FAIRNESS.md: optimizers).
    return paddle.optimizer.Adam(learning_rate=s.learning_rate, beta1=s.beta1, beta2=s.beta2, epsilon=s.epsilon,
                                 parameters=model.parameters(), lazy_mode=False, use_multi_tensor=True)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """Paddle keeps gates in the canonical order r, z, n; GRU matrices are (out, in), dense kernels (in, out)."""
    gru = model.gru
    for parameter, array in (
        (model.embedding.weight, params["embedding.embeddings"]),
        (gru.weight_ih_l0, canonical.dense_to_out_in(params["gru.kernel"])),
        (gru.weight_hh_l0, canonical.dense_to_out_in(params["gru.recurrent_kernel"])),
        (gru.bias_ih_l0, params["gru.input_bias"]),
        (gru.bias_hh_l0, params["gru.recurrent_bias"]),
        (model.dense.weight, params["dense.kernel"]),
        (model.dense.bias, params["dense.bias"]),
    ):
        assert tuple(parameter.shape) == array.shape, (parameter.name, parameter.shape, array.shape)
        parameter.set_value(array)


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return GRUClassifier(run.settings)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings)

    def loss_function(self):
        return nn.CrossEntropyLoss()

    def train(self, run, policy, model, optimizer, data):
        run.set_provenance(extras={"gru_kernel": runtime.describe_gru_kernel(policy, model.gru)})
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
