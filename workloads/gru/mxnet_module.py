"""GRU sentiment classifier trained on IMDB, in MXNet's symbolic Module API.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/common/hyperparams.py. mx.sym.RNN(mode="gru") is MXNet's fused RNN operator (cuDNN's on a
GPU, lesson 2); it takes all its weights as one packed parameter vector.
"""
import math

import mxnet as mx

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import mxnet as env

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "the RNN operator's one packed vector: [W_i2h (3H, in), W_h2h (3H, H), b_i2h, b_h2h] flattened "
    "(env.gru_packed_parameters); two bias vectors per gate",
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
    # Time-major (TNC) is cuDNN's native RNN layout (lesson 3)
    embedded = mx.sym.Embedding(mx.sym.transpose(tokens), input_dim=s.vocabulary, output_dim=s.embedding_size,
                                name="embedding")
    h0 = mx.sym.zeros(shape=(1, 0, s.hidden_size))  # (layers, batch, hidden); 0: batch size inferred at bind
    # the packed GRU vector: uniform(+-1/sqrt(hidden)), cuDNN's and PyTorch's default
    packed = mx.sym.var("gru_parameters", init=mx.init.Uniform(1 / math.sqrt(s.hidden_size)))
    outputs = mx.sym.RNN(embedded, packed, h0, mode="gru", state_size=s.hidden_size,
                         num_layers=1, name="gru")  # (time, batch, hidden)
    last = mx.sym.squeeze(mx.sym.slice_axis(outputs, axis=0, begin=-1, end=None), axis=0)  # the last time step
    return mx.sym.FullyConnected(last, num_hidden=s.classes, name="dense")


def build(s, context, batch_size) -> mx.mod.Module:
    module = mx.mod.Module(mx.sym.SoftmaxOutput(gru_classifier(s), name="softmax"),
                           data_names=("data",), label_names=("softmax_label",), context=context)
    module.bind(data_shapes=[("data", (batch_size, s.sequence_length))],
                label_shapes=[("softmax_label", (batch_size,))])
    module.init_params(mx.init.Xavier())  # the packed GRU vector has its own initializer (its symbol's init)
    # env.PyTorchAdam: epsilon added after the square root of v-hat, as PyTorch and the Adam paper.
    module.init_optimizer(optimizer="pytorchadam", optimizer_params={
        "learning_rate": s.learning_rate, "beta1": s.beta1, "beta2": s.beta2, "epsilon": s.epsilon})
    return module


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(module: mx.mod.Module, params: dict) -> None:
    """Embedding as is; the GRU packed into one vector (gate order r, z, n kept); dense stored (out, in)."""
    module.set_params({
        "embedding_weight": mx.nd.array(params["embedding.embeddings"]),
        "gru_parameters": mx.nd.array(env.gru_packed_parameters(params)),
        "dense_weight": mx.nd.array(canonical.dense_to_out_in(params["dense.kernel"])),
        "dense_bias": mx.nd.array(params["dense.bias"]),
    }, {}, allow_missing=False, allow_extra=False)


def make_train_step(module):
    def train_step(tokens, labels):
        module.forward_backward(mx.io.DataBatch(data=[tokens], label=[labels]))
        module.update()
        probabilities = module.get_outputs()[0]
        return -mx.nd.log(mx.nd.pick(probabilities, labels)).mean()  # stays on the device: no host sync
    return train_step


def logits(module, s, tokens, context):
    """A forward-only Module on the logits symbol that shares the trained Module's parameters."""
    inference = mx.mod.Module(gru_classifier(s), data_names=("data",), label_names=None, context=context)
    inference.bind(data_shapes=[("data", tokens.shape)], for_training=False, shared_module=module)
    inference.forward(mx.io.DataBatch(data=[tokens]), is_train=False)
    return inference.get_outputs()[0]


# --- run ----------------------------------------------------------------------------------------

def run(run: Run) -> None:
    s = run.settings
    context = env.select_device(run)

    with run.phase("data_load"):
        data = run.load_imdb()

    with run.phase("model_build"):
        module = build(s, context, s.batch_size)
        train_step = make_train_step(module)
    run.set_parameter_count(sum(int(a.size) for a in module.get_params()[0].values()))

    # --- train
    for _ in range(s.epochs):
        for tokens, labels in run.train_batches(data.x_train, data.y_train):
            loss = train_step(env.to_device(tokens, context), env.to_device(labels, context))
        run.end_epoch(loss.asscalar())

    # --- evaluate
    with run.phase("evaluate"):
        correct, total = mx.nd.zeros((1,), ctx=context), 0
        for tokens, labels in run.eval_batches(data.x_test, data.y_test):
            labels = env.to_device(labels, context)  # a smaller last batch makes the Module reshape itself
            module.forward(mx.io.DataBatch(data=[env.to_device(tokens, context)], label=[labels]), is_train=False)
            correct += (module.get_outputs()[0].argmax(axis=1) == labels).sum()
            total += len(labels)
    run.record_accuracy(int(correct.asscalar()), total)


# --- parity -------------------------------------------------------------------------------------

def parity(run: Run, params: dict, batch: dict) -> dict:
    s = run.settings
    context = env.select_device(run)
    module = build(s, context, len(batch["y"]))
    load_canonical(module, params)
    run.set_parameter_count(sum(int(a.size) for a in module.get_params()[0].values()))
    tokens, labels = env.to_device(batch["x"], context), env.to_device(batch["y"], context)
    before = logits(module, s, tokens, context).asnumpy()
    train_step = make_train_step(module)
    for _ in range(canonical.PARITY_STEPS):
        train_step(tokens, labels)
    after = logits(module, s, tokens, context).asnumpy()
    return {"logits": before, "logits_after_training": after}
