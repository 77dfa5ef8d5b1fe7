"""Which GRU kernel Keras 3 ran: its fast path, cuDNN, or a fallback loop, detected, not assumed
(FAIRNESS.md: fused-rnn)."""
from __future__ import annotations

import importlib

from workloads.common.harness import Run
from workloads.runtime.keras.backends import BACKEND, FACTS


# --- which GRU kernel ran -------------------------------------------------------------------------

class _GRUKernelWatch:
    """Records, in extras "gru_kernel", what Keras' GRU layer actually ran. keras.layers.GRU asks
    the backend's ``gru`` for its fast path and falls back to its generic RNN loop when that raises
    NotImplementedError; the torch backend's ``gru`` itself falls back to a per-step Python loop,
    silently, when its cuDNN call raises. Thin wrappers around those functions (they call the
    originals unchanged) see which path returned, and the error that caused a fallback."""

    def __init__(self):
        self.run, self.seen, self.error = None, [], None

    def note(self, kernel: str) -> None:
        if self.run is not None and kernel not in self.seen:  # several: each in the order it first ran
            self.seen.append(kernel)
            self.run.set_provenance(extras={"gru_kernel": " | then: ".join(self.seen)})

    def take_error(self, otherwise: str) -> str:
        error, self.error = self.error, None
        return f"cuDNN path raised {error}" if error else otherwise


_GRU_WATCH: list = []  # the one watch, once its wrappers are installed


def watch_gru_kernel(run: Run) -> None:
    """Record which GRU kernel runs from now on into ``run``'s extras (install the wrappers once)."""
    if not _GRU_WATCH:
        _GRU_WATCH.append(_install_gru_watch())
    watch = _GRU_WATCH[0]
    watch.run, watch.seen, watch.error = run, [], None


def _install_gru_watch() -> _GRUKernelWatch:
    import keras.src.backend as backend_module

    watch = _GRUKernelWatch()
    fast_path = backend_module.gru
    no_gpu = "no GPU for cuDNN here"

    def gru(inputs, *args, **kwargs):
        steps = inputs.shape[1]
        try:
            result = fast_path(inputs, *args, **kwargs)
        except NotImplementedError:  # the layer now runs its generic loop over GRUCell
            why = watch.take_error(no_gpu if not FACTS.gpus() else "the backend's gru declined")
            watch.note({"tensorflow": f"scan: tf.while_loop over {steps} steps of Keras' GRUCell ops "
                                      f"(TensorFlow's generic kernel; {why})",
                        "jax": f"scan: lax.scan over {steps} steps of Keras' GRUCell (Keras' generic RNN loop; {why})",
                        "torch": f"python-loop: Keras' generic RNN loop, a Python loop over {steps} steps of "
                                 f"GRUCell ({why})"}[BACKEND])
            raise
        if BACKEND == "tensorflow":
            watch.note("cudnn: cuDNN's fused GRU (tf.raw_ops.CudnnRNNV3, Keras' TensorFlow gru)")
        elif BACKEND == "jax":
            watch.note(f"scan: Keras' JAX gru, a lax.scan over {steps} steps with the input projections in one "
                       f"matmul (JAX has no fused GRU)")
        return result  # torch: _cudnn_gru or _fallback_gru noted which

    backend_module.gru = gru
    if BACKEND == "jax":  # Keras' JAX gru has no cuDNN path to fall back from
        return watch
    rnn = importlib.import_module(f"keras.src.backend.{BACKEND}.rnn")
    cudnn = rnn._cudnn_gru

    def cudnn_gru(*args, **kwargs):
        try:
            result = cudnn(*args, **kwargs)
        except Exception as error:  # the caller decides: TensorFlow's raises NotImplementedError, torch's falls back
            watch.error = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
            raise
        if BACKEND == "torch":
            watch.note("cudnn: cuDNN's fused GRU (torch._VF.gru, Keras' torch gru)")
        return result

    rnn._cudnn_gru = cudnn_gru
    if BACKEND == "torch":
        fallback = rnn._fallback_gru

        def fallback_gru(inputs, *args, **kwargs):
            on_cuda = getattr(getattr(inputs, "device", None), "type", "cpu") == "cuda"
            why = watch.take_error("Keras' torch gru takes cuDNN for CUDA inputs only" if not on_cuda
                                   else "cuDNN not eligible here")
            watch.note(f"python-loop: Keras' torch gru fallback, a Python loop over {inputs.shape[1]} steps with the "
                       f"input projections in one matmul ({why})")
            return fallback(inputs, *args, **kwargs)

        rnn._fallback_gru = fallback_gru
    return watch
