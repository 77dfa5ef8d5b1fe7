"""Which module implements a framework's workloads, and what it needs set before its import.

Most frameworks are `workloads/<workload>/<framework>.py` (dashes become underscores). The Keras 3
rows are one implementation, `workloads/<workload>/keras.py`, run on three backends: the modern
form of the original study's Keras(TF) / Keras(CNTK) rows.
"""
from typing import Dict, List

KERAS_BACKENDS = {"keras-tf": "tensorflow", "keras-jax": "jax", "keras-torch": "torch"}


def module_name(framework: str) -> str:
    return "keras" if framework in KERAS_BACKENDS else framework.replace("-", "_")


def frameworks_of(module: str) -> List[str]:
    """The framework names a module file serves."""
    if module == "keras":
        return list(KERAS_BACKENDS)
    return [module.replace("_", "-")]


def environment(framework: str) -> Dict[str, str]:
    """Variables to set before the framework is imported."""
    if framework in KERAS_BACKENDS:
        return {"KERAS_BACKEND": KERAS_BACKENDS[framework]}
    return {}
