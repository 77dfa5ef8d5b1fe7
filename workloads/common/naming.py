"""Which module implements a framework's workloads, and what it sets before its framework is imported.

A framework registers both in images/<fw>/metadata.toml (`module`; `import_env`, e.g. the Keras 3
rows' KERAS_BACKEND), where the host reads them (orchestrator/frameworks.py). The image side reads
them from workloads/frameworks.json, which is generated from the metadata (`python -m
orchestrator.frameworks > workloads/frameworks.json`; tests/test_images.py keeps it current). JSON,
because a Python 3.6 image (CNTK's) has no TOML parser; a file in the workloads package, because
every copy of the package needs it before any cell document exists: a checkout (the local backend's
cells, `python -m workloads ...` by hand) and every image, whose build context writes it with the
image's own framework only (orchestrator/images.py). A framework it does not name has the
defaults: its name with dashes as underscores, and no variables.
"""
import json
import os
from typing import Dict, List

FACTS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "frameworks.json")
_loaded = []  # type: List[Dict[str, dict]]


def _frameworks() -> Dict[str, dict]:
    if not _loaded:
        try:
            with open(FACTS_FILE) as stream:
                _loaded.append(json.load(stream)["frameworks"])
        except FileNotFoundError:
            raise RuntimeError("{} is missing: write it from the frameworks' metadata with `python -m "
                               "orchestrator.frameworks > workloads/frameworks.json`".format(FACTS_FILE)) from None
    return _loaded[0]


def module_name(framework: str) -> str:
    """The workload files of `framework`: workloads/<workload>/<this>.py (or its language's suffix)."""
    return _frameworks().get(framework, {}).get("module") or framework.replace("-", "_")


def frameworks_of(module: str) -> List[str]:
    """The framework names a module file serves."""
    named = sorted(name for name, facts in _frameworks().items() if facts.get("module") == module)
    return named or [module.replace("_", "-")]


def environment(framework: str) -> Dict[str, str]:
    """Variables to set before the framework is imported (baked into its image too)."""
    return dict(_frameworks().get(framework, {}).get("import_env", {}))


def precision_environment(precision: str) -> Dict[str, str]:
    """Variables a cell of ``precision`` sets before its framework is imported, so before any CUDA
    handle exists. fp32 means true fp32 (docs/FAIRNESS.md: true-precision): NVIDIA_TF32_OVERRIDE=0
    makes cuBLAS and cuDNN refuse TF32 tensor-core math whatever a framework's own switches say
    (Chainer has none, MXNet reads its own too late). Every other precision leaves TF32 to the
    framework's switch (on in tf32 cells, irrelevant to the half-precision ones)."""
    return {"NVIDIA_TF32_OVERRIDE": "0"} if precision == "fp32" else {}
