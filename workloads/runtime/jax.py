"""JAX's device, precision and provenance switches, and the jitted training step the three JAX workloads share.

JAX dispatches asynchronously and has no device-wide synchronise: every jitted call returns at
once, and the work it queued finishes later. So the harness's `run.sync` blocks on the outputs of
the last dispatched call (`track`), which, the calls being chained through their state, finishes
only after every call before it. Mixed precision is Flax's own control: layers compute in `dtype`
and keep their parameters in float32 (`param_dtype`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from workloads.common.harness import Run, Unsupported
from workloads.common.hyperparams import SEED

_COMPUTE_DTYPES = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}
_last_outputs: list = [None]  # what the last dispatched jitted call returned, for run.sync
_device: list = ["cpu"]


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


def sync() -> None:
    """Block until the last dispatched call (and so every call it depends on) has finished."""
    if _last_outputs[0] is not None:
        jax.block_until_ready(_last_outputs[0])


def track(outputs):
    """Remember what a jitted call returned, so `run.sync` can wait for it; returns it unchanged."""
    _last_outputs[0] = outputs
    return outputs


def select_device(run: Run) -> jax.Device:
    """Pick the device, refuse what it cannot do (before any work), set the global switches."""
    import flax

    gpus = _gpus()
    if run.requested_device == "cuda" and not gpus:
        raise Unsupported("no CUDA GPU visible to JAX on this host (CPU jaxlib, or no GPU)")
    device_type = "cuda" if gpus and run.requested_device != "cpu" else "cpu"
    precision = run.precision
    if device_type == "cpu" and precision in ("tf32", "fp16"):
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU")
    if device_type == "cuda":
        major, _, minor = str(gpus[0].compute_capability).partition(".")
        if precision in ("tf32", "bf16") and int(major) < 8:
            raise Unsupported(f"{precision} needs compute capability 8.0 or newer; this GPU has {major}.{minor or 0}")
    device = gpus[0] if device_type == "cuda" else jax.devices("cpu")[0]
    jax.config.update("jax_default_device", device)
    # XLA's default fp32 matmul/convolution precision on a GPU may use TF32 (or bf16 passes):
    # "highest" is true fp32, and TF32 only when asked for.
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if precision == "tf32" else "highest")
    _device[0] = device_type
    run.sync = sync  # asynchronous dispatch on the CPU too
    cuda_version, cudnn_version = _cuda_versions() if device_type == "cuda" else (None, None)
    run.set_provenance(
        framework_version=f"jax {jax.__version__} / flax {flax.__version__} / optax {optax.__version__}",
        device=device_type,
        cuda_version=cuda_version,
        cudnn_version=cudnn_version,
        gpu_name=device.device_kind if device_type == "cuda" else None,
        extras={"layout": "NHWC / TNC", "jaxlib": _jaxlib_version(),
                "compute_dtype": jnp.dtype(compute_dtype(precision)).name,
                "matmul_precision": "tensorfloat32" if precision == "tf32" else "highest",
                "loss_scaling": "dynamic" if precision == "fp16" else "none",
                "autotune": "XLA's GPU autotuning (its default)" if device_type == "cuda" else "none (CPU)",
                "jit": "jax.jit: one XLA program per step, compiled in the first step"},
    )
    return device


def _jaxlib_version() -> str:
    import jaxlib
    return jaxlib.__version__


def compute_dtype(precision: str):
    """The dtype Flax layers compute in; their parameters stay float32 (param_dtype)."""
    return _COMPUTE_DTYPES[precision]


def to_device(array: np.ndarray) -> jax.Array:
    """Labels and token indices as int32 (JAX's default integer without x64), images as they are."""
    if array.dtype == np.int64:
        array = array.astype(np.int32)
    return jax.device_put(array)


def record_peak_memory(run: Run) -> None:
    if _device[0] == "cuda":
        stats = _gpus()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            run.result.metrics.peak_device_memory_mb = stats["peak_bytes_in_use"] / 2**20


# --- model facts ----------------------------------------------------------------------------------

def parameter_count(params) -> int:
    """Trainable parameters (the "params" collection), as PyTorch's parameters(): batch-norm statistics are state."""
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params)))


# --- the training step ----------------------------------------------------------------------------

_GROWTH_INTERVAL = 2000  # fp16 loss scale: doubled after this many finite steps, halved on overflow


def init_train_state(params, optimizer: optax.GradientTransformation, precision: str, seed: int = SEED) -> dict:
    """Everything a step changes, as one pytree: parameters, optimizer state, dropout key, loss scale."""
    state = {"params": params, "opt_state": optimizer.init(params), "key": jax.random.key(seed)}
    if precision == "fp16":
        state["loss_scale"] = jnp.float32(2.0**16)  # PyTorch GradScaler's initial scale
        state["good_steps"] = jnp.int32(0)
    return track(state)  # so the model_build phase waits for the initialisation it dispatched


def make_train_step(loss_of, optimizer: optax.GradientTransformation, precision: str):
    """One jitted step: `step(state, x, y) -> (state, loss)`, the loss left on the device.

    `loss_of(params, x, y, dropout_key)` is the workload's mean loss. Each step splits a fresh
    dropout key off the state's key, inside the compiled function. The state's buffers are donated
    (updated in place on a GPU). fp16 scales the loss dynamically, as PyTorch's GradScaler: a step
    whose gradients overflow is skipped and the scale halved. The first call compiles (it lands in
    the harness's first_step_s).
    """
    fp16 = precision == "fp16"

    def step(state, x, y):
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

    compiled = jax.jit(step, donate_argnums=0)

    def call(state, x, y):
        return track(compiled(state, to_device(x), to_device(y)))

    return call
