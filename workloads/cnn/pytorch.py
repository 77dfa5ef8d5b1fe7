"""VGG-style CNN trained on CIFAR-10, in PyTorch.

conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with plain momentum,
settings from workloads/cnn/__init__.py. Softmax is folded into the cross-entropy loss.
"""
import torch
from torch import nn

from workloads.common import canonical
from workloads.runtime import pytorch as runtime

MATCHED = (
    "dense kernels stored (out, in): canonical (in, out) transposed",
    "Glorot-uniform kernels and zero biases set explicitly (PyTorch's default init differs)",
    "SGD momentum is the plain form v = m*v + g, w -= lr*v (no dampening, no unit gain)",
    "padding=1 for 3x3 'same' convolutions; NCHW, so flatten is already in canonical order "
    "(channels_last=on changes the memory layout only: flatten still reads the logical NCHW order)",
)


# --- model --------------------------------------------------------------------------------------

class VGGStyleCNN(nn.Module):
    def __init__(self, s):
        super().__init__()
        channels = s.image_shape[0]
        self.layers = nn.Sequential(
            nn.Conv2d(channels, s.conv1_filters, 3, padding=1), nn.ReLU(),  # padding=1: "same"  # phrase: conv3x3-same
            nn.Conv2d(s.conv1_filters, s.conv1_filters, 3, padding=1),
            nn.MaxPool2d(2, 2), nn.ReLU(), nn.Dropout(s.dropout_conv),  # phrase: max-pool, dropout
            nn.Conv2d(s.conv1_filters, s.conv2_filters, 3, padding=1), nn.ReLU(),
            nn.Conv2d(s.conv2_filters, s.conv2_filters, 3, padding=1),
            nn.MaxPool2d(2, 2), nn.ReLU(), nn.Dropout(s.dropout_conv),
            nn.Flatten(),  # phrase: flatten
            nn.Linear(s.conv2_filters * 8 * 8, s.dense_units), nn.ReLU(), nn.Dropout(s.dropout_dense),  # phrase: dense
            nn.Linear(s.dense_units, s.classes),  # logits: softmax lives in the loss
        )
        for layer in self.layers:
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(layer.weight)  # Glorot uniform, as Keras (PyTorch's default differs)
                nn.init.zeros_(layer.bias)

    def forward(self, images):
        return self.layers(images)


def make_optimizer(model, s, policy):
    # PyTorch's momentum is the plain form v = m*v + g; w -= lr*v (no dampening, no unit gain).
    # fused: PyTorch's fused kernel where it has one (runtime.TorchPolicy; FAIRNESS.md: fused optimizers).
    return torch.optim.SGD(model.parameters(), lr=s.learning_rate, momentum=s.momentum,  # phrase: sgd-momentum
                           fused=policy.fused_optimizer)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: VGGStyleCNN, params: dict) -> None:  # phrase: load-weights
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


# --- run ----------------------------------------------------------------------------------------

class CNNWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return VGGStyleCNN(run.settings).to(policy.device, memory_format=policy.memory_format)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(model, run.settings, policy)

    def loss_function(self):
        return nn.CrossEntropyLoss()  # phrase: softmax-cross-entropy


IMPLEMENTATION = CNNWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
