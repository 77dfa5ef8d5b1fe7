"""ResNet-50 v1.5 feature extraction (inference) in ONNX Runtime: PyTorch's model, exported to ONNX once.

ONNX Runtime is an inference engine: it runs a graph, it does not define one. So this file holds no
model section. The model is workloads/resnet50/pytorch.py's, on the canonical weights, exported
with torch.onnx.export in PyTorch's own environment before these cells run (its export.json is
copied into every result), and this file runs it with an execution provider: CPU, or CUDA on a GPU.
What to notice: building the model is creating an InferenceSession (loading the graph, optimising
it, choosing kernels), timed as model_build; the first run (cuDNN's algorithm search on a GPU)
lands in the warm pass.
"""
from workloads.runtime import onnxruntime as runtime

MATCHED = (
    "the model is PyTorch's (workloads/resnet50/pytorch.py, v1.5), exported once with torch.onnx.export "
    "(torch.export + onnxscript) on the canonical weights: nothing to convert by hand",
    "batch norm on the moving statistics, folded into the convolutions by the exporter's optimizer",
    "input NCHW float32 as every framework, with a dynamic batch axis (32 timed, 2 for parity)",
    "parameter count: the exported PyTorch model's (export.json); the ONNX graph holds the folded conv weights",
    "fp32 means true fp32: the CUDA provider runs with use_tf32=0 unless tf32 is asked for",
    "the same start: the graph carries the canonical weights (--init framework is unsupported: no initialisers)",
)


# --- run ----------------------------------------------------------------------------------------

# Nothing of this workload is ONNX Runtime's own but the execution provider: the scaffold is the runtime's, whole.
IMPLEMENTATION = runtime.FeatureExtraction()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
