"""ResNet-50 v1.5 feature extraction (inference), in plain PyTorch (no torchvision needed).

The network is cut after the global average pool: one 2048-D feature per 224x224 image.
v1.5 puts the stride of each downsampling block on the 3x3 convolution (v1 had it on the 1x1).
Random inputs (seed 0); the canonical weights by default (--init canonical), PyTorch's own with --init framework.
"""
import torch
from torch import nn

from workloads.common import canonical
from workloads.common.harness import Run
from workloads.runtime import pytorch as runtime

MATCHED = (
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "batch-norm epsilon 1e-5 (PyTorch's default); eval mode uses the moving statistics",
    "convolution kernels OIHW and NCHW input: canonical as is (channels_last=on changes the memory "
    "layout only, not the logical NCHW shape the weights load into)",
)


# --- model --------------------------------------------------------------------------------------

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels, width, stride):
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)  # eps 1e-5, PyTorch's default  # phrase: batch-norm
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)  # v1.5 stride
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(out_channels))

    def forward(self, x):  # phrase: residual-block
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


class ResNet50Features(nn.Module):
    stages = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)

    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                  nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
        in_channels = 64
        for width, blocks, stride in self.stages:
            for block in range(blocks):
                layers.append(Bottleneck(in_channels, width, stride if block == 0 else 1))
                in_channels = width * Bottleneck.expansion
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]  # global average pool -> (N, 2048)  # phrase: global-avg-pool
        self.layers = nn.Sequential(*layers)

    def forward(self, images):
        return self.layers(images)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: ResNet50Features, params: dict) -> None:
    """Kernels are already OIHW; batch norm: gamma -> weight, beta -> bias, moving statistics -> running."""
    def load_conv(conv: nn.Conv2d, name: str) -> None:
        conv.weight.copy_(torch.from_numpy(params[f"{name}.kernel"]))

    def load_batch_norm(norm: nn.BatchNorm2d, name: str) -> None:
        assert norm.eps == canonical.BN_EPSILON
        norm.weight.copy_(torch.from_numpy(params[f"{name}.gamma"]))
        norm.bias.copy_(torch.from_numpy(params[f"{name}.beta"]))
        norm.running_mean.copy_(torch.from_numpy(params[f"{name}.moving_mean"]))
        norm.running_var.copy_(torch.from_numpy(params[f"{name}.moving_variance"]))

    with torch.no_grad():
        load_conv(model.layers[0], "stem.conv")
        load_batch_norm(model.layers[1], "stem.bn")
        blocks = iter(layer for layer in model.layers if isinstance(layer, Bottleneck))
        for stage, (_, count, _) in enumerate(model.stages, start=1):
            for index in range(count):
                block, prefix = next(blocks), f"stage{stage}.block{index}"
                for number in (1, 2, 3):
                    load_conv(getattr(block, f"conv{number}"), f"{prefix}.conv{number}")
                    load_batch_norm(getattr(block, f"bn{number}"), f"{prefix}.bn{number}")
                if isinstance(block.shortcut, nn.Sequential):
                    load_conv(block.shortcut[0], f"{prefix}.shortcut.conv")
                    load_batch_norm(block.shortcut[1], f"{prefix}.shortcut.bn")


# --- run ----------------------------------------------------------------------------------------

class ResNet50Workload(runtime.FeatureExtraction):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        model = ResNet50Features().to(policy.device, memory_format=policy.memory_format)
        return model.eval()  # eval: batch-norm uses running statistics

    def load_canonical(self, model, params):
        load_canonical(model, params)


IMPLEMENTATION = ResNet50Workload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls


# --- ONNX export (the model ONNX Runtime's row runs) ----------------------------------------------

ONNX_OPSET = 20  # torch 2.13's default, pinned so that another torch cannot change it silently


def export_onnx(run: Run, params: dict, batch: dict, folder: str) -> dict:
    """Export the model on the canonical weights with torch.onnx.export's default exporter
    (torch.export, then onnxscript's translation and graph optimizer) into `folder`: model.onnx (the
    graph), model.onnx.data (the weights) and export.json (how). Returns the parity outputs too."""
    import json
    import os

    from workloads.common.data.checksum import file_digest

    try:
        import onnx
        import onnxscript
    except ImportError as missing:
        raise RuntimeError(f"torch.onnx.export needs the {missing.name} package, which this PyTorch environment "
                           f"lacks: rebuild it from images/pytorch/requirements-cpu.txt (image: `python -m "
                           f"orchestrator build pytorch --variant cpu`)") from missing
    runtime.select_device(run)
    model = ResNet50Features().eval()  # exported from the CPU: the graph does not depend on the device
    load_canonical(model, params)
    run.set_parameter_count(runtime.parameter_count(model))
    example = torch.from_numpy(batch["x"])
    path = os.path.join(folder, "model.onnx")
    with run.phase("export"):
        torch.onnx.export(model, (example,), path, input_names=["images"], output_names=["features"],
                          dynamic_shapes={"images": {0: torch.export.Dim("batch")}},  # any batch size
                          opset_version=ONNX_OPSET, external_data=True)  # weights in model.onnx.data
    with torch.inference_mode():
        features = model(example).numpy()

    record = {
        "model": "ResNet50Features (workloads/resnet50/pytorch.py) on the canonical resnet50 weights",
        "exporter": "torch.onnx.export(dynamo=True, optimize=True): torch.export + onnxscript",
        "opset": ONNX_OPSET,
        "torch_version": torch.__version__, "onnx_version": onnx.__version__,
        "onnxscript_version": onnxscript.__version__,
        "input": {"name": "images", "shape": ["batch", *example.shape[1:]], "dtype": "float32"},
        "output": {"name": "features", "shape": ["batch", features.shape[1]], "dtype": "float32"},
        "parameter_count": runtime.parameter_count(model),
        "export_s": run.result.phases["export"],
        "files": {name: file_digest(os.path.join(folder, name), "sha256") for name in sorted(os.listdir(folder)) if name.startswith("model.onnx")},
    }
    assert set(record["files"]) == {"model.onnx", "model.onnx.data"}, record["files"]
    with open(os.path.join(folder, "export.json"), "w") as stream:
        json.dump(record, stream, indent=2)
    run.set_provenance(extras={"onnx_export": os.path.join(folder, "export.json")})
    return {"features": features}
