"""GRU sentiment classifier trained on IMDB, in PyTorch.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/common/hyperparams.py. nn.GRU takes cuDNN's fused kernel on a GPU (lesson 2).
"""
import torch
from torch import nn

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import pytorch as env

MATCHED = (
    "GRU is cuDNN's reset-after form with gate order r, z, n: canonical as is",
    "GRU weights stored (3*hidden, in): canonical kernels transposed; two bias vectors per gate",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam adds epsilon after the square root of v-hat",
)


# --- model --------------------------------------------------------------------------------------

class GRUClassifier(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embedding = nn.Embedding(s.vocabulary, s.embedding_size)
        # Time-major (TNC) is cuDNN's native RNN layout (lesson 3). PyTorch's GRU is the
        # cuDNN form: reset gate applied after the recurrent matmul, two bias vectors per gate.
        self.gru = nn.GRU(s.embedding_size, s.hidden_size, num_layers=1, batch_first=False)
        self.dense = nn.Linear(s.hidden_size, s.classes)

    def forward(self, tokens):  # tokens: (batch, time)
        outputs, _ = self.gru(self.embedding(tokens.t()))
        return self.dense(outputs[-1])  # the last time step's output


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


def make_train_step(model, optimizer, loss_function, scaler, device, precision):
    def train_step(tokens, labels):
        optimizer.zero_grad(set_to_none=True)
        with env.autocast(device, precision):
            loss = loss_function(model(tokens), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # stays on the device: no host sync per step
    return train_step


def make_optimizer(model, s, device):
    # PyTorch adds epsilon after the square root of v-hat, as the Adam paper does (stock Keras adds
    # it to sqrt(v) before the bias correction: the Keras rows match PyTorch's form).
    return torch.optim.Adam(model.parameters(), lr=s.learning_rate, betas=(s.beta1, s.beta2), eps=s.epsilon,
                            fused=env.fused_optimizer(device))


# --- run ----------------------------------------------------------------------------------------

def run(run: Run) -> None:
    s = run.settings
    device = env.select_device(run)
    precision = run.precision

    with run.phase("data_load"):
        data = run.load_imdb()

    with run.phase("model_build"):
        model = GRUClassifier(s).to(device)
        optimizer = make_optimizer(model, s, device)
        train_step = make_train_step(model, optimizer, nn.CrossEntropyLoss(), env.grad_scaler(device, precision),
                                     device, precision)
    run.set_parameter_count(env.parameter_count(model))

    # --- train
    model.train()
    for _ in range(s.epochs):
        for tokens, labels in run.train_batches(data.x_train, data.y_train):
            loss = train_step(env.to_device(tokens, device).long(), env.to_device(labels, device))
        run.end_epoch(loss.item())

    # --- evaluate
    with run.phase("evaluate"):
        model.eval()
        correct, total = torch.zeros((), dtype=torch.int64, device=device), 0
        with torch.inference_mode(), env.autocast(device, precision):
            for tokens, labels in run.eval_batches(data.x_test, data.y_test):
                predictions = model(env.to_device(tokens, device).long()).argmax(dim=1)
                correct += (predictions == env.to_device(labels, device)).sum()
                total += len(labels)
    run.record_accuracy(correct.item(), total)
    env.record_peak_memory(run, device)


# --- parity -------------------------------------------------------------------------------------

def parity(run: Run, params: dict, batch: dict) -> dict:
    s = run.settings
    device = env.select_device(run)
    model = GRUClassifier(s).to(device)
    load_canonical(model, params)
    run.set_parameter_count(env.parameter_count(model))
    tokens, labels = env.to_device(batch["x"], device).long(), env.to_device(batch["y"], device)
    model.eval()
    with torch.no_grad():
        logits = model(tokens).cpu().numpy()
    train_step = make_train_step(model, make_optimizer(model, s, device), nn.CrossEntropyLoss(),
                                 env.grad_scaler(device, "fp32"), device, "fp32")
    for _ in range(canonical.PARITY_STEPS):
        train_step(tokens, labels)
    with torch.no_grad():
        after = model(tokens).cpu().numpy()
    return {"logits": logits, "logits_after_training": after}
