"""VGG-style CNN trained on CIFAR-10, in PyTorch.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/common/hyperparams.py. Softmax is folded into the cross-entropy loss.
"""
import torch
from torch import nn

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import pytorch as env

MATCHED = (
    "dense kernels stored (out, in): canonical (in, out) transposed",
    "Glorot-uniform kernels and zero biases set explicitly (PyTorch's default init differs)",
    "SGD momentum is the plain form v = m*v + g, w -= lr*v (no dampening, no unit gain)",
    "padding=1 for 3x3 'same' convolutions; NCHW, so flatten is already in canonical order",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(nn.Module):
    def __init__(self, s):
        super().__init__()
        channels = s.image_shape[0]
        self.layers = nn.Sequential(
            nn.Conv2d(channels, s.conv1_filters, 3, padding=1), nn.ReLU(),  # padding=1: "same"
            nn.Conv2d(s.conv1_filters, s.conv1_filters, 3, padding=1),
            nn.MaxPool2d(2, 2), nn.ReLU(), nn.Dropout(s.dropout_conv),
            nn.Conv2d(s.conv1_filters, s.conv2_filters, 3, padding=1), nn.ReLU(),
            nn.Conv2d(s.conv2_filters, s.conv2_filters, 3, padding=1),
            nn.MaxPool2d(2, 2), nn.ReLU(), nn.Dropout(s.dropout_conv),
            nn.Flatten(),
            nn.Linear(s.conv2_filters * 8 * 8, s.dense_units), nn.ReLU(), nn.Dropout(s.dropout_dense),
            nn.Linear(s.dense_units, s.classes),  # logits: softmax lives in the loss
        )
        for layer in self.layers:
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(layer.weight)  # Glorot uniform, as Keras (PyTorch's default differs)
                nn.init.zeros_(layer.bias)

    def forward(self, images):
        return self.layers(images)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:
    """Convolution kernels are already OIHW; dense kernels are stored (out, in)."""
    convolutions = [layer for layer in model.layers if isinstance(layer, nn.Conv2d)]
    denses = [layer for layer in model.layers if isinstance(layer, nn.Linear)]
    with torch.no_grad():
        for layer, name in zip(convolutions, ("conv1", "conv2", "conv3", "conv4")):
            layer.weight.copy_(torch.from_numpy(params[f"{name}.kernel"]))
            layer.bias.copy_(torch.from_numpy(params[f"{name}.bias"]))
        for layer, name in zip(denses, ("dense1", "dense2")):
            layer.weight.copy_(torch.from_numpy(canonical.dense_to_out_in(params[f"{name}.kernel"])))
            layer.bias.copy_(torch.from_numpy(params[f"{name}.bias"]))


def make_train_step(model, optimizer, loss_function, scaler, device, precision):
    def train_step(images, labels):
        optimizer.zero_grad(set_to_none=True)
        with env.autocast(device, precision):
            loss = loss_function(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # stays on the device: no host sync per step
    return train_step


def make_optimizer(model, s, device):
    # PyTorch's momentum is the plain form v = m*v + g; w -= lr*v (no dampening, no unit gain).
    return torch.optim.SGD(model.parameters(), lr=s.learning_rate, momentum=s.momentum,
                           fused=env.fused_optimizer(device))


# --- run ----------------------------------------------------------------------------------------

def run(run: Run) -> None:
    s = run.settings
    device = env.select_device(run)
    precision = run.precision

    with run.phase("data_load"):
        data = run.load_cifar10()

    with run.phase("model_build"):
        model = VGGStyleCNN(s).to(device)
        optimizer = make_optimizer(model, s, device)
        train_step = make_train_step(model, optimizer, nn.CrossEntropyLoss(), env.grad_scaler(device, precision),
                                     device, precision)
    run.set_parameter_count(env.parameter_count(model))

    # --- train
    model.train()
    for _ in range(s.epochs):
        for images, labels in run.train_batches(data.x_train, data.y_train):
            loss = train_step(env.to_device(images, device), env.to_device(labels, device))
        run.end_epoch(loss.item())

    # --- evaluate
    with run.phase("evaluate"):
        model.eval()  # dropout off (lesson 5)
        correct, total = torch.zeros((), dtype=torch.int64, device=device), 0
        with torch.inference_mode(), env.autocast(device, precision):
            for images, labels in run.eval_batches(data.x_test, data.y_test):
                predictions = model(env.to_device(images, device)).argmax(dim=1)
                correct += (predictions == env.to_device(labels, device)).sum()
                total += len(labels)
    run.record_accuracy(correct.item(), total)
    env.record_peak_memory(run, device)


# --- parity -------------------------------------------------------------------------------------

def parity(run: Run, params: dict, batch: dict) -> dict:
    s = run.settings
    device = env.select_device(run)
    model = VGGStyleCNN(s).to(device)
    load_canonical(model, params)
    run.set_parameter_count(env.parameter_count(model))
    images, labels = env.to_device(batch["x"], device), env.to_device(batch["y"], device)
    model.eval()  # dropout off, for the steps too: dropout is random and frameworks' generators differ
    with torch.no_grad():
        logits = model(images).cpu().numpy()
    train_step = make_train_step(model, make_optimizer(model, s, device), nn.CrossEntropyLoss(),
                                 env.grad_scaler(device, "fp32"), device, "fp32")
    for _ in range(canonical.PARITY_STEPS):
        train_step(images, labels)
    with torch.no_grad():
        after = model(images).cpu().numpy()
    return {"logits": logits, "logits_after_training": after}
