"""The run-wide choices every workload shares; each workload's own settings live in its declaration.

A workload's settings (the study's settings as the `full` profile, and its smoke overrides) are
declared once in `workloads/<workload>/__init__.py`; ``settings()`` reads them from there. Profile
``smoke`` runs the same models on a few batches so that one cell takes seconds on a CPU: it changes
only how much work is done (batches, epochs), never the model or the optimizer.
"""
from workloads.common import declaration

PROFILES = ("smoke", "full")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
DATA_SOURCES = ("real", "synthetic")

SEED = 0

WORKLOADS = tuple(declaration.declared())  # in declared order: cnn, resnet50, gru


def settings(workload: str, profile: str):
    """Return the frozen settings of ``workload`` under ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    return declaration.get(workload).settings_for(profile)
