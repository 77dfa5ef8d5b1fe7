"""JAX's device, precision and provenance switches, and the loops the three JAX workloads share:
one jitted training step, training and evaluation, inference, and the parity runs.

JAX dispatches asynchronously and has no device-wide synchronise: every jitted call returns at
once, and the work it queued finishes later. So the harness's `run.sync` blocks on the outputs of
the last dispatched call (`track`), which, the calls being chained through their state, finishes
only after every call before it. Mixed precision is Flax's own control: layers compute in `dtype`
and keep their parameters in float32 (`param_dtype`).

A workload hands its Flax model (whose ``__call__`` defaults to inference mode: dropout off, batch
norm on its moving statistics), its parameters, its Optax optimizer and its loss function
``loss_of(params, x, y, dropout_key)``; this module builds the state and the step from them.
Every jitted function counts its Python traces (``run.note_trace``): each traces once, evaluation
included (its last partial batch is padded to the batch size, so it keeps the one shape).
`Training` and `FeatureExtraction` are JAX's side of the scaffold every workload file fills in
(workloads/common/scaffold.py); what a JAX workload builds is a `Model`.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from workloads.common import loop, precision as precision_rules, scaffold
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.threads import JAX_THREADS
from workloads.common.hyperparams import SEED
from workloads.common.result import CANONICAL_INIT

_COMPUTE_DTYPES = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}
_last_outputs: list = [None]  # what the last dispatched jitted call returned, for run.sync


# --- device and precision -------------------------------------------------------------------------

def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no CUDA plugin, or no GPU
        return []


def _cuda_versions() -> tuple[str | None, str | None]:
    try:
        from jax._src.lib import cuda_versions  # present with the CUDA plugin only
        return str(cuda_versions.cuda_runtime_get_version()), str(cuda_versions.cudnn_get_version())
    except Exception:  # noqa: BLE001 - provenance only
        return None, None


def sync() -> None:  # phrase: device-sync
    """Block until the last dispatched call (and so every call it depends on) has finished."""
    if _last_outputs[0] is not None:
        jax.block_until_ready(_last_outputs[0])


def track(outputs):
    """Remember what a jitted call returned, so `run.sync` can wait for it; returns it unchanged."""
    _last_outputs[0] = outputs
    return outputs


class JaxPolicy(Policy):
    """``device`` is the jax.Device; ``device_type`` "cuda" or "cpu"; Flax layers compute in
    ``compute_dtype`` (parameters stay float32); ``loss_scaling``: fp16's dynamic loss scale."""

    def __init__(self, device, precision: str, device_type: str):
        super().__init__(device, precision)
        self.device_type = device_type
        self.compute_dtype = _COMPUTE_DTYPES[precision]  # phrase: autocast
        self.loss_scaling = precision == "fp16"


def select_device(run: Run) -> JaxPolicy:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    import flax

    gpus = _gpus()
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to JAX on this host (CPU jaxlib, or no GPU)")
    device_type = "cuda" if gpus and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    capability = None
    if device_type == "cuda":
        major, _, minor = str(gpus[0].compute_capability).partition(".")  # e.g. "9.0"
        capability = (int(major), int(minor or 0))
    precision_rules.check("jax", precision, device_type, capability)
    device = gpus[0] if device_type == "cuda" else jax.devices("cpu")[0]
    jax.config.update("jax_default_device", device)
    # XLA's default fp32 matmul/convolution precision on a GPU may use TF32 (or bf16 passes):
    # "highest" is true fp32, and TF32 only when asked for.
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if precision == "tf32" else "highest")
    matmul_precision = str(jax.config.jax_default_matmul_precision)  # read back, as JAX reports it
    policy = JaxPolicy(device, precision, device_type)
    run.record_threads(None, None, "none (JAX has no thread switch)", note=JAX_THREADS)  # FAIRNESS.md: same-threads
    run.declare_sync(sync, "jax.block_until_ready on the last dispatched jitted call's outputs (JAX has no "
                     "device-wide synchronise; each call depends on the one before; asynchronous on the CPU too)")
    cuda_version, cudnn_version = _cuda_versions() if device_type == "cuda" else (None, None)
    run.set_provenance(
        framework_version=f"jax {jax.__version__} / flax {flax.__version__} / optax {optax.__version__}",
        device=device_type,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        gpu_name=(device.device_kind or run.result.provenance.gpu.get("name")) if device_type == "cuda" else None,
        extras={"layout": "NHWC / TNC", "jaxlib": _jaxlib_version(),
                "compute_dtype": jnp.dtype(policy.compute_dtype).name,
                "matmul_precision": matmul_precision,
                "tf32": f"jax_default_matmul_precision={matmul_precision}" if device_type == "cuda" else "n/a (CPU)",
                "loss_scaling": "dynamic" if policy.loss_scaling else "none",
                "autotune": "XLA's GPU autotuning (its default)" if device_type == "cuda" else "none (CPU)",
                "jit": "jax.jit: one XLA program per step, compiled in the first step"},
    )
    return policy


def _jaxlib_version() -> str:
    import jaxlib
    return jaxlib.__version__


def to_device(array: np.ndarray) -> jax.Array:  # phrase: device-placement
    """Labels and token indices as int32 (JAX's default integer without x64), images as they are."""
    if array.dtype == np.int64:
        array = array.astype(np.int32)
    return jax.device_put(array)


def peak_memory_mb(policy: JaxPolicy) -> float | None:
    """XLA's allocator's peak on the GPU; None on the CPU (no device allocator to ask)."""
    if policy.device_type == "cuda":
        stats = policy.device.memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            return stats["peak_bytes_in_use"] / 2**20
    return None


# --- model facts ----------------------------------------------------------------------------------

def initial_variables(run: Run, model: nn.Module, sample: jax.Array) -> dict:
    """Flax's initial variables of `model`, traced on one `sample`. From the canonical weights
    (docs/FAIRNESS.md: same-start), the default and every parity cell, they are replaced before
    any use, so only their shapes and structure are made (jax.eval_shape: traced, never compiled
    or run; the compiled initialiser took 2 to 8 s of the CPU's model_build); with --init framework
    they are Flax's own values, computed in one jitted call."""
    key = jax.random.key(SEED)
    if run.init == CANONICAL_INIT:
        return jax.eval_shape(model.init, key, sample)
    return jax.jit(model.init)(key, sample)


def parameter_count(params) -> int:
    """Trainable parameters (the "params" collection), as PyTorch's parameters(): batch-norm statistics are state."""
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params)))


# --- the training step ----------------------------------------------------------------------------

_GROWTH_INTERVAL = 2000  # fp16 loss scale: doubled after this many finite steps, halved on overflow


def init_train_state(params, optimizer: optax.GradientTransformation, policy: JaxPolicy, seed: int = SEED) -> dict:
    """Everything a step changes, as one pytree: parameters, optimizer state, dropout key, loss scale."""
    state = {"params": params, "opt_state": optimizer.init(params), "key": jax.random.key(seed)}  # phrase: seeding
    if policy.loss_scaling:
        state["loss_scale"] = jnp.float32(2.0**16)  # PyTorch GradScaler's initial scale
        state["good_steps"] = jnp.int32(0)
    return track(state)  # so the model_build phase waits for the initialisation it dispatched


def make_train_step(run: Run, loss_of, optimizer: optax.GradientTransformation, policy: JaxPolicy):
    """One jitted step: `step(state, x, y) -> (state, loss)`, the loss left on the device.

    `loss_of(params, x, y, dropout_key)` is the workload's mean loss. Each step splits a fresh
    dropout key off the state's key, inside the compiled function. The state's buffers are donated
    (updated in place on a GPU). fp16 scales the loss dynamically, as PyTorch's GradScaler: a step
    whose gradients overflow is skipped and the scale halved. The first call compiles (it lands in
    the harness's first_step_s).
    """
    fp16 = policy.loss_scaling

    def step(state, x, y):  # phrase: train-step
        run.note_trace("train_step")  # Python runs this line only while tracing: a retrace shows in the count
        params = state["params"]
        key, dropout_key = jax.random.split(state["key"])
        if fp16:
            scale = state["loss_scale"]

            def scaled(p):
                loss = loss_of(p, x, y, dropout_key)
                return loss * scale, loss

            grads, loss = jax.grad(scaled, has_aux=True)(params)
            grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
        else:
            loss, grads = jax.value_and_grad(loss_of)(params, x, y, dropout_key)
        updates, opt_state = optimizer.update(grads, state["opt_state"], params)
        new = {"params": optax.apply_updates(params, updates), "opt_state": opt_state, "key": key}
        if fp16:
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
            keep = lambda a, b: jnp.where(finite, a, b)  # noqa: E731
            new["params"] = jax.tree_util.tree_map(keep, new["params"], params)
            new["opt_state"] = jax.tree_util.tree_map(keep, new["opt_state"], state["opt_state"])
            good = jnp.where(finite, state["good_steps"] + 1, 0)
            grow = good >= _GROWTH_INTERVAL
            new["loss_scale"] = jnp.where(finite, jnp.where(grow, scale * 2.0, scale), scale * 0.5)
            new["good_steps"] = jnp.where(grow, 0, good)
        return new, loss

    compiled = jax.jit(step, donate_argnums=0)  # phrase: compile-step

    def call(state, x, y):
        return track(compiled(state, to_device(x), to_device(y)))

    return call


# --- the loops ------------------------------------------------------------------------------------

class _Trainer:
    """The training state and its jitted step, as the one callable the shared loops drive."""

    def __init__(self, run: Run, params, optimizer: optax.GradientTransformation, loss_of, policy: JaxPolicy):
        self.state = init_train_state(params, optimizer, policy)
        self._step = make_train_step(run, loss_of, optimizer, policy)

    def step(self, x: np.ndarray, y: np.ndarray):
        self.state, loss = self._step(self.state, x, y)
        return loss  # stays on the device: read once per epoch

    @property
    def params(self):
        return self.state["params"]


def _inference(model: nn.Module):  # phrase: eval-mode
    """The jitted forward pass in inference mode: a model's ``__call__`` defaults to it (dropout off,
    batch norm on its moving statistics; FAIRNESS.md: eval-mode)."""
    return jax.jit(lambda params, x: model.apply({"params": params}, x))


def pad_batch(x: np.ndarray, y: np.ndarray, batch_size: int):
    """The test set's last, partial batch padded to the batch size, so evaluation keeps the one
    compiled shape (no second trace and XLA compilation inside the timed test pass): the padding
    rows are zeros labelled -1, which no prediction equals."""
    missing = batch_size - len(y)
    if missing <= 0:
        return x, y
    return (np.concatenate([x, np.zeros((missing,) + x.shape[1:], x.dtype)]),
            np.concatenate([y, np.full(missing, -1, y.dtype)]))


def optimizer_description(name: str) -> str:
    """The "optimizer" extra: what the update is, and how it runs."""
    return (f"{name}; jit-fused: its element-wise update is compiled by XLA into the one jitted step "
            "(no separate optimizer op)")


def train_and_evaluate(run: Run, policy: JaxPolicy, model: nn.Module, params, optimizer: optax.GradientTransformation,
                       loss_of, data, *, optimizer_name: str) -> None:
    """Train `params` with `optimizer` on `loss_of`, then count the test set's correct predictions."""
    with run.phase("model_build"):  # the phase adds up: the optimizer state is built, and waited for, here
        trainer = _Trainer(run, params, optimizer, loss_of, policy)
    run.set_parameter_count(parameter_count(params))
    run.set_provenance(extras={"optimizer": optimizer_description(optimizer_name)})
    loop.train(run, data, trainer.step)

    @jax.jit
    def count_correct(params, x, y):
        run.note_trace("eval_step")
        return jnp.sum(jnp.argmax(model.apply({"params": params}, x), axis=1) == y)

    def count_batch(x, y):
        x, y = pad_batch(x, y, run.settings.batch_size)
        return track(count_correct(trainer.params, to_device(x), to_device(y)))

    # the count stays on the device; run.sync waits for the last batch's
    loop.evaluate(run, data, count_batch)
    run.record_peak_device_memory(peak_memory_mb(policy))


def parity_steps(run: Run, policy: JaxPolicy, model: nn.Module, params, optimizer: optax.GradientTransformation,
                 loss_of, batch: dict, *, optimizer_name: str) -> dict:
    """The logits on the canonical `params`, and after the parity steps (`loss_of` without dropout)."""
    run.set_parameter_count(parameter_count(params))
    run.set_provenance(extras={"optimizer": optimizer_description(optimizer_name)})
    trainer = _Trainer(run, params, optimizer, loss_of, policy)
    forward = _inference(model)
    return loop.parity_outputs(lambda x: forward(trainer.params, to_device(x)), trainer.step, batch,
                               to_numpy=jax.device_get)


def make_forward(run: Run, model: nn.Module):
    """ResNet-50's jitted forward pass, ``forward(variables, images)``: no gradient is ever taken."""
    def forward(variables, images):
        run.note_trace("forward")
        return model.apply(variables, images)
    return jax.jit(forward)


def extract_features(run: Run, policy: JaxPolicy, model: nn.Module, variables: dict, images: np.ndarray) -> None:
    """Forward-only passes of `model` with `variables` ("params" and "batch_stats"); no gradient is
    ever taken (FAIRNESS.md: eval-mode). The warm pass's first call compiles the jitted forward.
    Every batch's features are copied to the host inside its time (FAIRNESS.md: host-copy)."""
    run.set_parameter_count(parameter_count(variables["params"]))
    forward = make_forward(run, model)
    loop.infer(run, images, lambda batch: track(forward(variables, to_device(batch))),
               to_host=lambda features: np.asarray(jax.device_get(features)))
    run.record_peak_device_memory(peak_memory_mb(policy))


def parity_features(run: Run, policy: JaxPolicy, model: nn.Module, variables: dict, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(variables["params"]))
    return {"features": jax.device_get(make_forward(run, model)(variables, to_device(batch["x"])))}


# --- the scaffold's JAX part (workloads/common/scaffold.py) -------------------------------------------

@dataclass
class Model:
    """What a JAX workload builds: its Flax module and the module's parameters (ResNet-50: its whole
    variables dict, params and batch_stats). Pytrees are immutable, so loading the canonical weights
    replaces `params`. `loss_of(params, x, y, dropout_key)` is a training workload's loss."""
    module: nn.Module
    params: dict
    loss_of: Optional[Callable] = None


class Training(scaffold.Training):
    """A JAX training workload: its file gives build_model (a Model with its loss), load_canonical,
    make_optimizer and describe_optimizer; the device policy and the loops are this module's."""

    @abc.abstractmethod
    def make_optimizer(self, model: Model, run: Run, policy: JaxPolicy) -> optax.GradientTransformation:
        """The Optax optimizer; XLA compiles its update into the jitted step."""

    @abc.abstractmethod
    def describe_optimizer(self) -> str:
        """What the optimizer computes, for extras["optimizer"] (an Optax chain has no name of its own)."""

    def select_device(self, run: Run) -> JaxPolicy:
        return select_device(run)

    def train(self, run: Run, policy: JaxPolicy, model: Model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model.module, model.params, optimizer, model.loss_of, data,
                           optimizer_name=self.describe_optimizer())

    def parity_steps(self, run: Run, policy: JaxPolicy, model: Model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model.module, model.params, optimizer, model.loss_of, batch,
                            optimizer_name=self.describe_optimizer())


class FeatureExtraction(scaffold.FeatureExtraction):
    """A JAX inference workload: its file gives build_model (a Model of the module and its variables)
    and load_canonical."""

    def select_device(self, run: Run) -> JaxPolicy:
        return select_device(run)

    def start_from_initial_weights(self, run: Run, model: Model) -> None:
        super().start_from_initial_weights(run, model)
        track(model.params)  # the model_build phase waits for the variables (run.sync)

    def extract(self, run: Run, policy: JaxPolicy, model: Model, images: np.ndarray) -> None:
        extract_features(run, policy, model.module, model.params, images)

    def parity_features(self, run: Run, policy: JaxPolicy, model: Model, batch: dict) -> dict:
        return parity_features(run, policy, model.module, model.params, batch)
