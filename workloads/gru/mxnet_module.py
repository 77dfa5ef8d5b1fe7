"""GRU sentiment classifier trained on IMDB, in MXNet's symbolic Module API.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. mx.sym.RNN(mode="gru") is MXNet's fused RNN operator (cuDNN's on a
GPU, FAIRNESS.md: fused-rnn); it takes all its weights as one packed parameter vector.
"""
import math

import mxnet as mx

from workloads.common import canonical
from workloads.runtime import mxnet_module as runtime

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "the RNN operator's one packed vector: [W_i2h (3H, in), W_h2h (3H, H), b_i2h, b_h2h] flattened "
    "(runtime.gru_packed_parameters); two bias vectors per gate",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam adds epsilon after the square root of v-hat: a registered PyTorchAdam (stock MXNet adds it "
    "to the uncorrected sqrt(v))",
    "SoftmaxOutput's gradient is summed over the batch; the Module sets rescale_grad = 1/batch: "
    "the mean loss's gradient",
    "token ids fed as float32 (MXNet's Embedding takes float indices; exact below 2^24)",
)


# --- model --------------------------------------------------------------------------------------

def gru_classifier(s) -> mx.sym.Symbol:
    """The logits symbol: embedding_weight, gru_parameters (packed), dense_weight, dense_bias."""
    tokens = mx.sym.var("data")  # (batch, time)
    # Time-major (TNC) is cuDNN's native RNN layout (FAIRNESS.md: layouts)
    embedded = mx.sym.Embedding(mx.sym.transpose(tokens), input_dim=s.vocabulary, output_dim=s.embedding_size,  # phrase: embedding
                                name="embedding")
    h0 = mx.sym.zeros(shape=(1, 0, s.hidden_size))  # (layers, batch, hidden); 0: batch size inferred at bind
    # the packed GRU vector: uniform(+-1/sqrt(hidden)), cuDNN's and PyTorch's default
    packed = mx.sym.var("gru_parameters", init=mx.init.Uniform(1 / math.sqrt(s.hidden_size)))
    outputs = mx.sym.RNN(embedded, packed, h0, mode="gru", state_size=s.hidden_size,  # phrase: gru
                         num_layers=1, name="gru")  # (time, batch, hidden)
    last = mx.sym.squeeze(mx.sym.slice_axis(outputs, axis=0, begin=-1, end=None), axis=0)  # the last time step  # phrase: last-time-step
    return mx.sym.FullyConnected(last, num_hidden=s.classes, name="dense")


def build(s, context, batch_size) -> mx.mod.Module:
    module = mx.mod.Module(mx.sym.SoftmaxOutput(gru_classifier(s), name="softmax"),
                           data_names=("data",), label_names=("softmax_label",), context=context)
    module.bind(data_shapes=[("data", (batch_size, s.sequence_length))],
                label_shapes=[("softmax_label", (batch_size,))])
    module.init_params(mx.init.Xavier())  # the packed GRU vector has its own initializer (its symbol's init)
    # runtime/mxnet.py's PyTorchAdam: epsilon added after the square root of v-hat, as PyTorch and the Adam paper.
    module.init_optimizer(optimizer="pytorchadam", optimizer_params={  # phrase: adam
        "learning_rate": s.learning_rate, "beta1": s.beta1, "beta2": s.beta2, "epsilon": s.epsilon})
    return module


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(module: mx.mod.Module, params: dict) -> None:
    """Embedding as is; the GRU packed into one vector (gate order r, z, n kept); dense stored (out, in)."""
    module.set_params({
        "embedding_weight": mx.nd.array(params["embedding.embeddings"]),
        "gru_parameters": mx.nd.array(runtime.gru_packed_parameters(params)),
        "dense_weight": mx.nd.array(canonical.dense_to_out_in(params["dense.kernel"])),
        "dense_bias": mx.nd.array(params["dense.bias"]),
    }, {}, allow_missing=False, allow_extra=False)


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy, batch_size=None):
        return build(run.settings, policy.device, batch_size or run.settings.batch_size)

    def build_parity_model(self, run, policy, batch):
        return self.build_model(run, policy, len(batch["y"]))

    def load_canonical(self, module, params):
        load_canonical(module, params)

    def logits_symbol(self, run):
        return gru_classifier(run.settings)

    def train(self, run, policy, module, optimizer, data):
        run.set_provenance(extras={"gru_kernel": runtime.gru_kernel(policy)})
        super().train(run, policy, module, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
