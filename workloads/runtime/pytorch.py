"""PyTorch's runtime for the three PyTorch workloads: the device policy and the loops, written once.

`select_device(run)` picks the device, refuses what it cannot do and returns a `TorchPolicy`
(device, precision, autocast, loss scaler, fused optimizers); the workloads read those choices
from it. `train_and_evaluate`, `parity_steps`, `extract_features` and `parity_features` run a
workload's model through the shared loops of workloads/common/loop.py.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from workloads.common import loop
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED

_AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


# --- device and precision -------------------------------------------------------------------------

class TorchPolicy(Policy):
    """The device (a torch.device) and what the cell's precision asks of PyTorch."""

    def __init__(self, device: torch.device, precision: str):
        super().__init__(device, precision)
        self.autocast_dtype = _AUTOCAST_DTYPES.get(precision)  # None: no autocast (fp32, tf32)
        # Fused optimizers check fp16 overflow on the device, so no step waits for the host.
        self.fused_optimizer = device.type == "cuda"

    def autocast(self):
        """Mixed precision through PyTorch's own autocast; fp32 and tf32 run without it."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Loss scaling for fp16 only; a disabled scaler passes everything through."""
        return torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")


def select_device(run: Run) -> TorchPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    cuda_available = torch.cuda.is_available()
    if run.requested_device == "cuda" and not cuda_available:
        if torch.version.cuda is None:  # e.g. a CPU wheel from a wheelhouse matched torch==X in a CUDA variant
            raise Unsupported(f"this PyTorch ({torch.__version__}) is a CPU-only build: it cannot use a GPU")
        raise Unsupported("no CUDA GPU visible to PyTorch on this host")
    device = torch.device("cuda" if cuda_available and run.requested_device != "cpu" else "cpu")
    precision = run.precision
    if device.type == "cpu" and precision in ("tf32", "fp16"):
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU")
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if precision in ("tf32", "bf16") and major < 8:
            raise Unsupported(f"{precision} needs compute capability 8.0 or newer; this GPU has {major}.{minor}")
    # fp32 means true fp32: TF32 tensor-core math only when asked for (FAIRNESS.md: true-precision).
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = True  # cuDNN autotuning (FAIRNESS.md: autotune); its cost lands in the first step
    torch.manual_seed(SEED)
    if device.type == "cuda":
        run.sync = torch.cuda.synchronize
    run.set_provenance(
        framework_version=torch.__version__,
        device=device.type,
        cuda_version=torch.version.cuda if device.type == "cuda" else None,
        cudnn_version=str(torch.backends.cudnn.version()) if device.type == "cuda" else None,
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        extras={"layout": "NCHW / TNC", "cudnn_benchmark": "true",
                "allow_tf32": str(precision == "tf32").lower(),
                "autocast": str(_AUTOCAST_DTYPES.get(precision, "none")),
                "threads": str(torch.get_num_threads())},
    )
    return TorchPolicy(device, precision)


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A numpy batch on the device; integer arrays (labels, token ids) as int64, the index type of
    PyTorch's embeddings and losses."""
    tensor = torch.from_numpy(array).to(device, non_blocking=True)
    return tensor if tensor.is_floating_point() else tensor.long()


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _peak_device_memory_mb(device: torch.device):
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


# --- training -------------------------------------------------------------------------------------

def _train_step(policy: TorchPolicy, model, optimizer, loss_function):
    """One optimizer step on a numpy batch, under the policy's autocast and loss scaler."""
    scaler = policy.grad_scaler()

    def step(x: np.ndarray, y: np.ndarray) -> torch.Tensor:
        inputs, labels = to_device(x, policy.device), to_device(y, policy.device)
        optimizer.zero_grad(set_to_none=True)
        with policy.autocast():
            loss = loss_function(model(inputs), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()  # stays on the device: no host sync per step
    return step


def train_and_evaluate(run: Run, policy: TorchPolicy, model, optimizer, loss_function, data) -> None:
    """Train `model` on `data` with `optimizer` and `loss_function`, then measure its test accuracy."""
    with run.phase("model_build"):  # added to the workload's model_build
        step = _train_step(policy, model, optimizer, loss_function)
    run.set_parameter_count(parameter_count(model))
    model.train()
    loop.train(run, data, step)  # the loss is read (float) once per epoch
    model.eval()  # dropout off (FAIRNESS.md: eval-mode)

    def count_correct(x: np.ndarray, y: np.ndarray) -> torch.Tensor:
        predictions = model(to_device(x, policy.device)).argmax(dim=1)
        return (predictions == to_device(y, policy.device)).sum()  # summed on the device

    with torch.inference_mode(), policy.autocast():
        loop.evaluate(run, data, count_correct)
    run.record_peak_device_memory(_peak_device_memory_mb(policy.device))


def parity_steps(run: Run, policy: TorchPolicy, model, optimizer, loss_function, batch: dict) -> dict:
    """The logits on the canonical weights, and after the parity steps (FAIRNESS.md: parity)."""
    run.set_parameter_count(parameter_count(model))
    model.eval()  # dropout off, for the steps too: dropout is random and frameworks' generators differ

    def forward(x: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return model(to_device(x, policy.device))

    return loop.parity_outputs(forward, _train_step(policy, model, optimizer, loss_function), batch,
                               to_numpy=lambda logits: logits.cpu().numpy())


# --- inference ------------------------------------------------------------------------------------

def extract_features(run: Run, policy: TorchPolicy, model, images: np.ndarray) -> None:
    """The warm pass, then the timed forward-only pass, with no gradients (FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(model))
    model.eval()  # batch norm on its running statistics
    with torch.inference_mode(), policy.autocast():
        loop.infer(run, images, lambda batch: model(to_device(batch, policy.device)))
    run.record_peak_device_memory(_peak_device_memory_mb(policy.device))


def parity_features(run: Run, policy: TorchPolicy, model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    with torch.inference_mode():
        return {"features": model.eval()(to_device(batch["x"], policy.device)).cpu().numpy()}
