"""What is compared with what: the like-for-like groups and the rows in them.

A group is one (profile, data, device kind and model, precision): a CPU, an fp16 cell or another
GPU is never ranked against this one (FAIRNESS.md: like-for-like). A row is one (framework,
variant, mode, non-default options, init) in a group: the modes of one framework are ranked side
by side on one device and precision (FAIRNESS.md: modes-compared); its name (orchestrator/row_names.py)
says how it ran, the mode first, and, for a GRU, which kernel ran (FAIRNESS.md: gru-kernel-named).
The report, its energy section and `compare` read these keys from here.
"""
from __future__ import annotations

import math
import re

import pandas as pd


# What is ranked together: one table, one fastest row, one chart per group.
GROUP_KEY = ["profile", "data", "device_kind", "device_model", "precision"]
# A row of a group: the results of one configuration, whatever its repeat.
ROW_KEY = ["framework", "variant", "mode", "options", "init"]
SUMMARY_KEY = GROUP_KEY + ROW_KEY
GPU, CPU = "GPU", "CPU"
PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16")
# The configuration of a cell, whatever its device: what a repeat that recorded no device joins.
CONFIGURATION = ["workload", "framework", "variant", "precision", "mode", "profile", "data", "options", "init"]

# The GRU kernel a result records (extras["gru_kernel"]) starts with its kind: "cudnn: ...",
# "scan: ...", "fused-cpu: ...", "compiled-step: ..."; a fallback is recorded as
# "cudnn: ... | then: python-loop: ...".
# Only that kind, a short lower-case word, names the row: the record comes from the cell, so the
# rest is never put in a name (docs/RUN-GUARANTEES.md, the trust model).
KERNEL_KIND = re.compile(r"\s*([a-z][a-z0-9-]{0,23})\s*(?::|$)")
KERNEL_FALLBACK = " | then: "
LONGEST_KERNEL_RECORD = 4000  # characters of the record looked at


def kernel_kind(recorded) -> str:
    """"cudnn" for "cudnn: cuDNN's fused GRU ...", "cudnn+python-loop" for a recorded fallback, ""
    for none (or a record that does not start with a kind)."""
    if not isinstance(recorded, str) or not recorded.strip():
        return ""
    kinds = []
    for part in recorded[:LONGEST_KERNEL_RECORD].split(KERNEL_FALLBACK):
        match = KERNEL_KIND.match(part)
        if match and match.group(1) not in kinds:
            kinds.append(match.group(1))
    return "+".join(kinds)


def device_identity(device, gpu_name, cpu_model) -> tuple[str, str]:
    """(kind, model): ("GPU", its name) for a CUDA result, ("CPU", its model) for a CPU one;
    "" where the result does not say (a cell that failed before it recorded its device)."""
    device = str(device).strip().lower() if _text(device) else ""
    if device.startswith(("cuda", "gpu")):
        return GPU, str(gpu_name).strip() if _text(gpu_name) else ""
    if device == "cpu":
        return CPU, str(cpu_model).strip() if _text(cpu_model) else ""
    return (device.upper() if device else ""), ""


def with_devices(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its device_kind and device_model columns (device_identity per result; the
    GPU's name from nvidia-smi where the framework gave none). A repeat that recorded no device, or
    no device model (it failed first), joins its configuration's other repeats when they all ran
    on one device, so that its failure is counted in their row."""
    frame = frame.copy()
    if "gpu_model" not in frame:
        frame["gpu_model"] = None
    kinds, models = [], []
    for device, gpu_name, gpu_model, cpu_model in zip(frame["device"], frame["gpu_name"], frame["gpu_model"],
                                                      frame["cpu_model"]):
        kind, model = device_identity(device, gpu_name if _text(gpu_name) else gpu_model, cpu_model)
        kinds.append(kind)
        models.append(model)
    frame["device_kind"], frame["device_model"] = kinds, models
    known = frame[frame["device_model"] != ""]
    for key, group in frame[frame["device_model"] == ""].groupby(CONFIGURATION + ["device_kind"], dropna=False,
                                                                 sort=False):
        match = known
        for column, value in zip(CONFIGURATION, key):
            match = match[match[column] == value] if not _missing(value) else match[match[column].isna()]
        if key[-1]:  # the kind is known: only its model is missing
            match = match[match["device_kind"] == key[-1]]
        identities = match[["device_kind", "device_model"]].drop_duplicates()
        if len(identities) == 1:
            frame.loc[group.index, "device_kind"] = identities.iloc[0]["device_kind"]
            frame.loc[group.index, "device_model"] = identities.iloc[0]["device_model"]
    return frame


def group_label(profile, data, device_kind, device_model, precision) -> str:
    """"GPU NVIDIA H200 · fp32 · full profile · real data"."""
    return f"{device_label(device_kind, device_model)} · {precision} · {profile} profile · {data} data"


def device_label(device_kind, device_model) -> str:
    """"GPU NVIDIA H200", "CPU (model not recorded)", "device not recorded"."""
    if device_kind and device_model:
        return f"{device_kind} {device_model}"
    if device_kind:
        return f"{device_kind} (model not recorded)"
    return "device not recorded"


def kind_order(kind) -> int:
    """GPUs first, then CPUs, then other kinds, then rows whose device is not recorded."""
    return {GPU: 0, CPU: 1}.get(kind, 2 if kind else 3)


def precision_order(name) -> int:
    return PRECISION_ORDER.index(name) if name in PRECISION_ORDER else len(PRECISION_ORDER)


def group_order(key: tuple) -> tuple:
    """A GROUP_KEY tuple's place: profile, data, GPUs before CPUs, model, fp32 first."""
    profile, data, kind, model, precision = (str(value) for value in key)
    return profile, data, kind_order(kind), model, precision_order(precision), precision


def _text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
