"""Which module implements a framework's workloads, and what it needs set before its import.

Most frameworks are `workloads/<workload>/<framework>.py` (dashes become underscores). The Keras 3
rows are one implementation, `workloads/<workload>/keras.py`, run on three backends: the modern
form of the original study's Keras(TF) / Keras(CNTK) rows. The keras-cntk row is that study's own
Keras 2.2 on CNTK, whose API differs from Keras 3: its own files, `workloads/<workload>/keras_cntk.py`.
"""
from typing import Dict, List

KERAS_BACKENDS = {"keras-tf": "tensorflow", "keras-jax": "jax", "keras-torch": "torch"}
KERAS2_BACKENDS = {"keras-cntk": "cntk"}  # Keras 2.2, chosen by the same variable
# R's Keras is the Python Keras 3 reached through reticulate (workloads/<workload>/r_keras.R): the
# embedded Python reads the same variable before its import.
R_KERAS_BACKENDS = {"r-keras": "tensorflow"}


def module_name(framework: str) -> str:
    return "keras" if framework in KERAS_BACKENDS else framework.replace("-", "_")


def frameworks_of(module: str) -> List[str]:
    """The framework names a module file serves."""
    if module == "keras":
        return list(KERAS_BACKENDS)
    return [module.replace("_", "-")]


def environment(framework: str) -> Dict[str, str]:
    """Variables to set before the framework is imported (baked into its image too)."""
    backend = KERAS_BACKENDS.get(framework) or KERAS2_BACKENDS.get(framework) or R_KERAS_BACKENDS.get(framework)
    return {"KERAS_BACKEND": backend} if backend else {}


def precision_environment(precision: str) -> Dict[str, str]:
    """Variables a cell of ``precision`` sets before its framework is imported, so before any CUDA
    handle exists. fp32 means true fp32 (docs/FAIRNESS.md: true-precision): NVIDIA_TF32_OVERRIDE=0
    makes cuBLAS and cuDNN refuse TF32 tensor-core math whatever a framework's own switches say
    (Chainer has none, MXNet reads its own too late). Every other precision leaves TF32 to the
    framework's switch (on in tf32 cells, irrelevant to the half-precision ones)."""
    return {"NVIDIA_TF32_OVERRIDE": "0"} if precision == "fp32" else {}
