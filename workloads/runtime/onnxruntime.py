"""ONNX Runtime's switches: the exported model it runs, its execution providers, precision, provenance.

ONNX Runtime defines no model. It runs the ResNet-50 that PyTorch's environment exported to ONNX
(the orchestrator runs `python -m workloads resnet50 --framework pytorch --parity DIR --export-onnx
OUT` once), passed here as `--onnx-model DIR` (or $ROSETTA_ONNX_MODEL): model.onnx, its weights in
model.onnx.data beside it, and export.json saying how it was made. `InferenceSession.run` returns
host arrays only after the device has finished, so its declared sync waits for nothing (`no_wait`).

The model's weights are the canonical ones, always (`initial_weights`: --init framework is refused).
`select_device(run)` returns an `OrtPolicy` (device, precision, the execution providers);
`session(...)` loads the graph as a `Session`, and `extract_features` / `parity_features` run it
through the shared loop of workloads/common/loop.py. `FeatureExtraction` is the whole scaffold of
ONNX Runtime's one workload (workloads/common/scaffold.py): there is no model to write.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.data.checksum import file_digest
from workloads.common.harness import Policy, Run, Unsupported, no_wait
from workloads.common.result import CANONICAL_INIT

MODEL_VARIABLE = "ROSETTA_ONNX_MODEL"  # set from --onnx-model by workloads/__main__.py
CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
INPUT, OUTPUT = "images", "features"  # the names the export gives the graph's input and output


# --- the exported model ---------------------------------------------------------------------------

@dataclass
class ExportedModel:
    path: Path  # model.onnx; ONNX Runtime reads model.onnx.data from the same folder
    record: dict  # export.json

    @property
    def parameter_count(self) -> int:
        """The exported PyTorch model's trainable parameters (export.json). The ONNX graph itself
        holds batch norm folded into the convolutions, so its initializers count differently."""
        return int(self.record["parameter_count"])


def exported_model(run: Run, *, check_files: bool = True) -> ExportedModel:
    """The exported model the orchestrator named, its files checked against export.json; its
    provenance is copied into the result."""
    folder = os.environ.get(MODEL_VARIABLE)
    if not folder:
        raise RuntimeError("no exported ONNX model: pass --onnx-model DIR (the orchestrator exports "
                           "PyTorch's ResNet-50 there before ONNX Runtime's cells run)")
    folder = Path(folder)
    try:
        record = json.loads((folder / "export.json").read_text())
    except (OSError, ValueError) as error:
        raise RuntimeError(f"{folder}/export.json cannot be read ({error}); delete {folder} so that the "
                           f"orchestrator exports the model again") from error
    files = record["files"]
    if check_files:
        for name, expected in files.items():
            if file_digest(folder / name, "sha256") != expected:
                raise RuntimeError(f"{folder / name} does not match the sha256 in export.json; delete {folder} "
                                   f"so that the orchestrator exports the model again")
    run.set_provenance(extras={
        "onnx_model": str(folder),
        "onnx_model_sha256": files["model.onnx"],
        "onnx_exporter": record.get("exporter", "?"),
        "onnx_opset": record.get("opset", "?"),
        "onnx_exported_with": f"torch {record.get('torch_version', '?')}, onnx {record.get('onnx_version', '?')}, "
                              f"onnxscript {record.get('onnxscript_version', '?')}",
        "onnx_exported_by": record.get("exported_by", "?"),
        "onnx_canonical_weights_sha256": record.get("canonical_weights_sha256", "?"),
    })
    return ExportedModel(path=folder / "model.onnx", record=record)



def initial_weights(run: Run) -> None:
    """The start (--init): ONNX Runtime defines no model and has no initialisers of its own. The graph
    it runs is PyTorch's ResNet-50 exported on the canonical weights (the orchestrator exports from them
    only; export.json records their sha256, copied into the result as onnx_canonical_weights_sha256),
    so --init canonical is what runs, and --init framework is refused rather than run as canonical."""
    if run.init != CANONICAL_INIT:
        raise Unsupported(f"--init {run.init}: ONNX Runtime has no initialisers of its own; it runs PyTorch's "
                          f"ResNet-50 exported on the canonical weights only")
    run.set_provenance(extras={"init": CANONICAL_INIT,
                               "init_source": "in the exported graph: PyTorch's model on the canonical weights"})


# --- execution providers and precision -------------------------------------------------------------

def _gpu_names() -> list[str]:
    """The NVIDIA GPUs the kernel driver lists (readable inside a container; ONNX Runtime has no
    API for the device name)."""
    names = []
    for information in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in information.read_text().splitlines():
                if line.startswith("Model:"):
                    names.append(line.split(":", 1)[1].strip())
        except OSError:
            continue
    return names


class OrtPolicy(Policy):
    """The device ("cuda" or "cpu"), the precision, and the execution providers, best first."""

    def __init__(self, device: str, precision: str, providers: list):
        super().__init__(device, precision)
        self.providers = providers


def select_device(run: Run) -> OrtPolicy:
    """Pick the execution providers, best first; refuses what they cannot do (before any work)."""
    available = ort.get_available_providers()
    gpus = _gpu_names()
    if run.requested_device == "cuda":
        if CUDA not in available:
            raise Unsupported("this onnxruntime build has no CUDA execution provider (the cpu variant installs "
                              "the CPU-only onnxruntime package; the cu130 variant, onnxruntime-gpu)")
        if not gpus:
            raise Unsupported("no CUDA GPU visible on this host (no /proc/driver/nvidia/gpus)")
    use_cuda = run.requested_device != "cpu" and CUDA in available and bool(gpus)
    precision = run.precision
    precision_rules.check("onnxruntime", precision, "cuda" if use_cuda else "cpu")
    if use_cuda:  # phrase: device-placement
        ort.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels (requirements-cu130.txt)
        options = {"device_id": 0,
                   "cudnn_conv_algo_search": "EXHAUSTIVE",  # cuDNN autotuning (FAIRNESS.md: autotune), in the warm pass
                   "use_tf32": "1" if precision == "tf32" else "0"}  # fp32 means true fp32
        providers = [(CUDA, options), CPU]  # shape arithmetic may stay on the CPU
    else:
        providers = [CPU]
    run.declare_sync(no_wait, "nothing: InferenceSession.run returns the outputs as host arrays, after every "  # phrase: device-sync
                     "execution provider (a GPU's included) has finished and copied them back")
    run.set_provenance(
        framework_version=ort.__version__,
        device="cuda" if use_cuda else "cpu",
        cuda_version=(ort.cuda_version or None) if use_cuda else None,
        cudnn_version=_package_version("nvidia-cudnn-cu13") if use_cuda else None,
        gpu_name=gpus[0] if use_cuda else None,
        extras={"package": ort.package_name, "layout": "NCHW (as exported)",
                "providers_requested": ", ".join(p if isinstance(p, str) else f"{p[0]} {p[1]}" for p in providers)},
    )
    return OrtPolicy("cuda" if use_cuda else "cpu", precision, providers)


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Session:
    """An exported model loaded into ONNX Runtime: what the workload's model_build made."""
    inference: ort.InferenceSession
    model: ExportedModel

    def features(self, images: np.ndarray) -> np.ndarray:  # phrase: eval-mode
        """One forward pass; returns once the features are on the host."""
        return self.inference.run([OUTPUT], {INPUT: np.ascontiguousarray(images)})[0]


def session(run: Run, policy: OrtPolicy, model: ExportedModel) -> Session:  # phrase: compile-step
    """Load the graph, optimise it (ORT_ENABLE_ALL: constant folding, fusions, layout choices) and
    bind it to the providers; refuses a CUDA cell that ONNX Runtime quietly moved to the CPU."""
    providers = policy.providers
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # the default, stated
    options.intra_op_num_threads = options.inter_op_num_threads = run.threads  # FAIRNESS.md: same-threads
    created = ort.InferenceSession(str(model.path), options, providers=providers)
    used = created.get_providers()
    wanted = providers[0] if isinstance(providers[0], str) else providers[0][0]
    if used[0] != wanted:
        raise Unsupported(f"ONNX Runtime could not create the {wanted} (it fell back to {', '.join(used)}); the "
                          f"log above names the CUDA or cuDNN library it could not load")
    run.set_provenance(extras={"providers": ", ".join(used),
                               "graph_optimization_level": "ORT_ENABLE_ALL",
                               "tf32": tf32_report(created)})
    applied = created.get_session_options()  # read back from the session
    run.record_threads(applied.intra_op_num_threads, applied.inter_op_num_threads,
                       "SessionOptions.intra_op_num_threads, inter_op_num_threads (the inter-op pool runs "
                       "independent nodes only in ORT_PARALLEL mode; the default, sequential, leaves it idle)")
    return Session(inference=created, model=model)


def tf32_report(created: ort.InferenceSession) -> str:
    """What the session says about TF32: the CUDA provider's use_tf32 as it reads its options back
    (InferenceSession.get_provider_options), and the NVIDIA_TF32_OVERRIDE this process was given."""
    cuda = created.get_provider_options().get(CUDA)
    if cuda is None:
        return "n/a (CPU)"
    return (f"use_tf32={cuda.get('use_tf32', '?')} (CUDAExecutionProvider options, read back); "
            f"NVIDIA_TF32_OVERRIDE={os.environ.get('NVIDIA_TF32_OVERRIDE', 'unset')}")


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: OrtPolicy, session: Session, images: np.ndarray) -> None:
    """The warm pass (the first run allocates and autotunes), then the timed pass. An inference
    engine has no gradients, and batch norm is folded into the graph: always eval mode. ONNX
    Runtime reports no peak device memory of its own, so none is recorded."""
    run.set_parameter_count(session.model.parameter_count)
    # InferenceSession.run returns host arrays (a CUDA provider copies them back inside it): already numpy
    loop.infer(run, images, session.features, to_host=np.asarray)


def parity_features(run: Run, policy: OrtPolicy, session: Session, batch: dict) -> dict:
    run.set_parameter_count(session.model.parameter_count)
    return {"features": session.features(batch["x"])}


# --- the scaffold's ONNX Runtime part (workloads/common/scaffold.py) ----------------------------------

class FeatureExtraction(scaffold.FeatureExtraction):
    """ONNX Runtime's side of the scaffold, and its workload's too: it defines no model. Building the
    model is creating a session on the exported graph; the canonical weights are in that graph
    already, so there is nothing to load; and a benchmark cell checks its start (--init) before
    anything, and reads the exported model before its data_load phase, so `run` keeps that order."""

    def select_device(self, run: Run) -> OrtPolicy:
        return select_device(run)  # may raise Unsupported

    def build_model(self, run: Run, policy: OrtPolicy) -> Session:
        return session(run, policy, exported_model(run))

    def load_canonical(self, model: Session, params: dict) -> None:
        """Nothing to load: the graph was exported from the same canonical arrays (export.json records
        their sha256), so the parity check's `params` are in it already."""

    def extract(self, run: Run, policy: OrtPolicy, model: Session, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: OrtPolicy, model: Session, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)

    def run(self, run: Run) -> None:
        initial_weights(run)  # the canonical weights, in the exported graph; --init framework: unsupported
        policy = self.select_device(run)
        model = exported_model(run)
        with run.phase("data_load"):
            images = self.load_data(run)
        with run.phase("model_build"):  # session creation: graph load, optimisation, kernel choice
            created = session(run, policy, model)
        self.extract(run, policy, created, images)
