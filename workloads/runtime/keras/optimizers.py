"""Keras 3's optimizers: PyTorch's updates through each backend's own built-in or fused op."""
from __future__ import annotations

import keras

from workloads.runtime.keras.backends import BACKEND, FACTS, selected_device


def dense_gradient(gradient):
    """A dense gradient: TensorFlow's IndexedSlices (an embedding's) summed into a tensor, else as is."""
    if BACKEND == "tensorflow" and isinstance(gradient, FACTS.tf.IndexedSlices):
        return FACTS.tf.convert_to_tensor(gradient)  # sums the slices of repeated indices
    return gradient


# --- optimizers -----------------------------------------------------------------------------------
#
# The same update as the PyTorch row, through each backend's own built-in or fused op where one
# computes it (FAIRNESS.md: fused optimizers), else written out, and recorded (extras "optimizer"):
#
#               SGD, plain momentum                          Adam, PyTorch's epsilon form
#   tensorflow  tf.raw_ops.ResourceApplyKerasMomentum        tf.raw_ops.ResourceApplyAdam, epsilon*sqrt(1-b2^t)
#   torch       torch.optim.sgd.sgd(fused=True)              torch.optim.adam.adam(fused=True)
#   jax         Keras' SGD in Keras ops                      written out in Keras ops (_WrittenOutAdam)
#
# On JAX both are Keras ops inside the one jax.jit-compiled train step, which XLA fuses; JAX has no
# optimizer ops of its own to call.

def sgd_momentum(learning_rate: float, momentum: float) -> keras.optimizers.Optimizer:  # phrase: sgd-momentum
    """SGD with plain momentum. Keras' form v = m*v - lr*g, w += v (TensorFlow's op computes it)
    equals PyTorch's v = m*v + g, w -= lr*v at a constant learning rate."""
    cls = {"tensorflow": _tensorflow_sgd, "torch": _torch_sgd}.get(BACKEND, lambda: keras.optimizers.SGD)()
    return cls(learning_rate=learning_rate, momentum=momentum)


def adam(learning_rate: float, beta_1: float, beta_2: float, epsilon: float) -> keras.optimizers.Optimizer:  # phrase: adam
    """Adam with epsilon added to sqrt(v-hat), as PyTorch and the Adam paper's Algorithm 1 (Keras'
    own adds it to sqrt(v): in effect eps/sqrt(1-b2^t), 32x larger at step 1), with a dense
    gradient (see _WrittenOutAdam)."""
    cls = {"tensorflow": _tensorflow_adam, "torch": _torch_adam}.get(BACKEND, lambda: _WrittenOutAdam)()
    return cls(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)


def describe_optimizer(optimizer) -> str:
    """What implements the update (extras "optimizer"): "fused", "built-in op" or "written out"."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # fp16: under Keras' LossScaleOptimizer
    description = getattr(type(inner), "DESCRIPTION", None)
    if description:
        return description
    if BACKEND == "jax":
        return (f"Keras' {type(inner).__name__} in Keras ops, XLA-fused inside the jax.jit-compiled train step "
                f"(JAX has no optimizer op to call)")
    return f"written out: Keras' {type(inner).__name__} in Keras ops"


class _WrittenOutAdam(keras.optimizers.Adam):
    """Keras' Adam with epsilon added to sqrt(v-hat), as the Adam paper's Algorithm 1 and PyTorch.

    Keras' own update, w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v) + eps), is the paper's
    "efficient" reordering, whose epsilon is in effect eps/sqrt(1-b2^t): 32x larger at step 1.
    The embedding's gradient is made dense first: on TensorFlow it arrives as IndexedSlices, one
    slice per token occurrence, and Keras' ops.square squares those slices before they are summed,
    so a token seen twice in a batch would get a wrong second moment.
    """

    DESCRIPTION = ("written out: Keras ops in PyTorch's epsilon form, about 10 per variable, XLA-fused inside the "
                   "jax.jit-compiled train step (JAX has no Adam op; Keras' own Adam adds epsilon to sqrt(v))"
                   if BACKEND == "jax" else
                   "written out: Keras ops in PyTorch's epsilon form, about 10 per variable")

    def update_step(self, gradient, variable, learning_rate):
        from keras import ops

        dtype = variable.dtype
        gradient = ops.cast(dense_gradient(gradient), dtype)
        step = ops.cast(self.iterations + 1, dtype)
        correction1 = 1 - ops.power(ops.cast(self.beta_1, dtype), step)
        correction2 = 1 - ops.power(ops.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(correction2)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, ops.cast(learning_rate, dtype) / correction1),
                                             denominator))


def _tensorflow_sgd():
    tf = FACTS.tf

    class SGD(keras.optimizers.SGD):
        DESCRIPTION = ("tf.raw_ops.ResourceApplyKerasMomentum: TensorFlow's built-in momentum op, one per variable "
                       "(Keras' form v = m*v - lr*g, w += v)")

        def update_step(self, gradient, variable, learning_rate):
            if self.momentum == 0 or self.nesterov:
                return super().update_step(gradient, variable, learning_rate)
            dtype = variable.dtype
            tf.raw_ops.ResourceApplyKerasMomentum(
                var=variable.handle, accum=self.momentums[self._get_variable_index(variable)].handle,
                lr=tf.cast(learning_rate, dtype), grad=tf.cast(dense_gradient(gradient), dtype),
                momentum=tf.cast(self.momentum, dtype), use_locking=False, use_nesterov=False)

    return SGD


def _tensorflow_adam():
    tf = FACTS.tf

    class Adam(keras.optimizers.Adam):
        """TensorFlow's ResourceApplyAdam computes Keras' form, w -= lr*sqrt(1-b2^t)/(1-b1^t) *
        m/(sqrt(v) + eps'); with eps' = eps*sqrt(1-b2^t), given afresh each step, that is exactly
        PyTorch's w -= lr/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps). The gradient is made dense first
        (the embedding's IndexedSlices summed: see _WrittenOutAdam)."""

        DESCRIPTION = ("tf.raw_ops.ResourceApplyAdam: TensorFlow's built-in Adam op, one per variable, epsilon "
                       "given as eps*sqrt(1-beta2^t) each step, which is PyTorch's epsilon form")

        def update_step(self, gradient, variable, learning_rate):
            dtype = variable.dtype
            index = self._get_variable_index(variable)
            step = tf.cast(self.iterations + 1, dtype)
            beta1_power = tf.pow(tf.cast(self.beta_1, dtype), step)
            beta2_power = tf.pow(tf.cast(self.beta_2, dtype), step)
            tf.raw_ops.ResourceApplyAdam(
                var=variable.handle, m=self._momentums[index].handle, v=self._velocities[index].handle,
                beta1_power=beta1_power, beta2_power=beta2_power, lr=tf.cast(learning_rate, dtype),
                beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
                epsilon=tf.cast(self.epsilon, dtype) * tf.sqrt(1 - beta2_power),
                grad=tf.cast(dense_gradient(gradient), dtype), use_locking=False, use_nesterov=False)

    return Adam


def _torch_update_kind() -> tuple[bool, str]:
    """(fused, how): PyTorch's fused optimizer kernels where this device has them, else foreach."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
        devices = _get_fused_kernels_supported_devices()
    except ImportError:
        devices = ["cuda"]
    device = selected_device[0]  # select_device's choice
    if device in devices:
        return True, f"fused=True): PyTorch's fused kernel, one per step for every variable (fused, on {device}"
    return False, f"foreach=True): PyTorch's multi-tensor ops (built-in op; no fused kernel on {device}"


def _torch_sgd():
    import torch
    from keras.src.backend.torch.optimizers.torch_parallel_optimizer import TorchParallelOptimizer
    from torch.optim import sgd as functional_sgd

    fused, words = _torch_update_kind()

    class SGD(TorchParallelOptimizer, keras.optimizers.SGD):
        """PyTorch's own SGD kernel (the PyTorch row's) on the Keras variables; the momentum buffer
        then holds PyTorch's v (Keras' own holds -lr*v), which gives the same weights."""

        DESCRIPTION = f"torch.optim.sgd.sgd({words}; the PyTorch row's own kernel)"

        def __init__(self, learning_rate, **kwargs):
            super().__init__(learning_rate=learning_rate, **kwargs)
            self._constant_rate = float(learning_rate)  # no schedule: no device read per step

        def _parallel_update_step(self, grads, variables, learning_rate):
            if self.momentum == 0 or self.nesterov:
                raise NotImplementedError("the benchmark's SGD has plain momentum")
            buffers = [self.momentums[self._get_variable_index(variable)].value for variable in variables]
            with torch.no_grad():
                functional_sgd.sgd([variable.value for variable in variables], list(grads), buffers,
                                   fused=fused or None, foreach=None if fused else True, weight_decay=0.0,
                                   momentum=self.momentum, lr=self._constant_rate, dampening=0.0,
                                   nesterov=False, maximize=False)

    return SGD


def _torch_adam():
    import torch
    from keras.src.backend.torch.optimizers.torch_parallel_optimizer import TorchParallelOptimizer
    from torch.optim import adam as functional_adam

    fused, words = _torch_update_kind()

    class Adam(TorchParallelOptimizer, keras.optimizers.Adam):
        """PyTorch's own Adam kernel (the PyTorch row's, PyTorch's epsilon form) on the Keras
        variables; its step counts are PyTorch's per-parameter tensors (they follow iterations)."""

        DESCRIPTION = f"torch.optim.adam.adam({words}; the PyTorch row's own kernel, PyTorch's epsilon form)"

        def __init__(self, learning_rate, **kwargs):
            super().__init__(learning_rate=learning_rate, **kwargs)
            self._constant_rate = float(learning_rate)  # no schedule: no device read per step

        def build(self, variables):
            super().build(variables)
            self._steps = [torch.zeros((), dtype=torch.float32, device=variable.value.device) for variable in variables]

        def _parallel_update_step(self, grads, variables, learning_rate):
            index = [self._get_variable_index(variable) for variable in variables]
            with torch.no_grad():
                functional_adam.adam([variable.value for variable in variables], list(grads),
                                     [self._momentums[i].value for i in index],
                                     [self._velocities[i].value for i in index],
                                     [], [self._steps[i] for i in index], fused=fused or None,
                                     foreach=None if fused else True, amsgrad=False, beta1=self.beta_1,
                                     beta2=self.beta_2, lr=self._constant_rate, weight_decay=0.0, eps=self.epsilon,
                                     maximize=False)

    return Adam
