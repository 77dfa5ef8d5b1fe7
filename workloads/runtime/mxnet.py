"""MXNet's device, precision and provenance switches, shared by its Gluon and Module workloads, and
the Gluon workloads' loops (the Module API's are in runtime/mxnet_module.py, on these switches).

MXNet runs every operator asynchronously on its dependency engine: a Python call returns before
the work is done, so honest timing needs ``mx.nd.waitall`` (``run.sync``) before each clock read.
A Gluon workload hands its hybridized block, its ``gluon.Trainer`` and its per-sample loss; the
step (record, backward, ``Trainer.step``) is written once here. MXNet 1.9.1 reports no peak device
memory of its own, so none is recorded. The numpy-only helpers at the end (the RNN operator's
packed parameter vector) stay importable without MXNet, for the unit tests.
"""
from __future__ import annotations

import math
import os

import numpy as np

try:
    import mxnet as mx
except ImportError:  # only the numpy helpers below are usable (tests/test_mxnet_units.py)
    mx = None

from workloads.common import loop
from workloads.common.harness import Policy, Run, Unsupported
from workloads.common.hyperparams import SEED


class MXNetPolicy(Policy):
    """``device`` is the MXNet context (``mx.cpu()`` or ``mx.gpu(0)``) arrays and parameters live on.
    fp32 only (see select_device)."""


def select_device(run: Run) -> MXNetPolicy:
    """Pick the context, refuse what it cannot do (before any work), set the global switches."""
    gpus = mx.context.num_gpus()
    if run.requested_device == "cuda" and gpus == 0:
        raise Unsupported("no CUDA GPU visible to MXNet on this host (or this is the CPU build)")
    context = mx.gpu(0) if gpus > 0 and run.requested_device != "cpu" else mx.cpu()
    precision = run.precision
    if context.device_type == "cpu" and precision != "fp32":
        raise Unsupported(f"{precision} needs a CUDA GPU; this cell runs on the CPU")
    if precision != "fp32":
        # MXNet 1.9.1 has AMP (mxnet.contrib.amp) for fp16 and no TF32 / bf16 GPU switch; not wired up here.
        raise Unsupported(f"{precision} is not implemented for MXNet (fp32 only)")
    # fp32 means true fp32: cuDNN 8 uses TF32 convolutions on Ampere by default; this turns it off.
    os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    os.environ.setdefault("MXNET_CUDNN_AUTOTUNE_DEFAULT", "1")  # cuDNN autotuning (FAIRNESS.md: autotune)
    mx.random.seed(SEED)
    np.random.seed(SEED)
    run.sync = mx.nd.waitall  # the engine is asynchronous: wait for every pending operator
    features = mx.runtime.Features()
    on_gpu = context.device_type == "gpu"
    run.set_provenance(
        framework_version=mx.__version__,
        device="cuda" if on_gpu else "cpu",
        cuda_version=None,  # MXNet 1.9.1 does not report its CUDA version at run time; the variant names it
        cudnn_version=None,
        gpu_name=None,
        extras={"layout": "NCHW / TNC", "cudnn_autotune": os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"],
                "nvidia_tf32_override": "0",
                "built_with": ", ".join(f"{name}={str(features.is_enabled(name)).lower()}"
                                        for name in ("CUDA", "CUDNN", "MKLDNN", "OPENMP")),
                "context": str(context)},
    )
    return MXNetPolicy(context, precision)


def to_device(array: np.ndarray, policy: MXNetPolicy):
    return mx.nd.array(array, ctx=policy.device, dtype=np.float32)  # labels and token ids too: MXNet indexes with floats


def parameter_count(parameters) -> int:
    """Trainable parameters only: batch norm's running statistics have grad_req 'null'."""
    return int(sum(np.prod(p.shape) for p in parameters.values() if p.grad_req != "null"))


if mx is not None:
    @mx.optimizer.register
    class PyTorchAdam(mx.optimizer.Adam):
        """Adam with epsilon added after the bias correction of sqrt(v), as PyTorch and the paper do.

        Stock MXNet folds both bias corrections into the learning rate and adds epsilon to the
        uncorrected sqrt(v): w -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps). Scaling epsilon by
        sqrt(1-b2^t) makes that exactly w -= lr * m_hat / (sqrt(v_hat) + eps).
        """

        def update(self, index, weight, grad, state):
            self._update_count(index)
            lr, wd = self._get_lr(index), self._get_wd(index)
            t = self._index_update_count[index]
            coef1, coef2 = 1.0 - self.beta1 ** t, 1.0 - self.beta2 ** t
            mean, var = state
            mx.nd.adam_update(weight, grad, mean, var, out=weight, lazy_update=self.lazy_update,
                              lr=lr * math.sqrt(coef2) / coef1, wd=wd, beta1=self.beta1, beta2=self.beta2,
                              epsilon=self.epsilon * math.sqrt(coef2), rescale_grad=self.rescale_grad,
                              **({"clip_gradient": self.clip_gradient} if self.clip_gradient else {}))


# --- the Gluon loops ------------------------------------------------------------------------------

def _train_step(policy: MXNetPolicy, net, trainer, loss_function):
    def step(x: np.ndarray, y: np.ndarray):
        x, y = to_device(x, policy), to_device(y, policy)
        with mx.autograd.record():  # train mode: dropout on
            loss = loss_function(net(x), y)  # per-sample losses
        loss.backward()
        trainer.step(len(y))  # gradients / batch size: the mean loss's gradient
        return loss  # stays on the device: no host sync per step
    return step


def _logits(policy: MXNetPolicy, net):
    """Outside autograd.record: no gradients, dropout off and batch norm on its moving statistics
    (FAIRNESS.md: eval-mode)."""
    return lambda x: net(to_device(x, policy))


def train_and_evaluate(run: Run, policy: MXNetPolicy, net, trainer, loss_function, data) -> None:
    """Train with `trainer` on the per-sample `loss_function`, then count correct test predictions."""
    run.set_parameter_count(parameter_count(net.collect_params()))
    loop.train(run, data, _train_step(policy, net, trainer, loss_function),
               loss_value=lambda loss: loss.mean().asscalar())
    forward = _logits(policy, net)
    loop.evaluate(run, data, lambda x, y: (forward(x).argmax(axis=1) == to_device(y, policy)).sum(),
                  to_int=lambda correct: int(correct.asscalar()))


def parity_steps(run: Run, policy: MXNetPolicy, net, trainer, loss_function, batch: dict) -> dict:
    """The steps run in train mode: `net` is built without dropout for them (MXNet 1.9.1's CPU backward
    in predict mode, autograd.record(train_mode=False), returns wrong gradients for pooling)."""
    run.set_parameter_count(parameter_count(net.collect_params()))
    return loop.parity_outputs(_logits(policy, net), _train_step(policy, net, trainer, loss_function), batch,
                               to_numpy=lambda logits: logits.asnumpy())


def extract_features(run: Run, policy: MXNetPolicy, net, images: np.ndarray) -> None:
    run.set_parameter_count(parameter_count(net.collect_params()))
    loop.infer(run, images, _logits(policy, net))


def parity_features(run: Run, policy: MXNetPolicy, net, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(net.collect_params()))
    return {"features": _logits(policy, net)(batch["x"]).asnumpy()}


# --- numpy-only helpers (no MXNet needed) ---------------------------------------------------------

def gru_packed_parameters(params: dict) -> np.ndarray:
    """Canonical GRU weights -> the RNN operator's packed vector (one layer, one direction).

    Layout (as Gluon's rnn layer concatenates it): every weight, then every bias; weights stored
    (3*hidden, in) with gate order r, z, n (canonical's): [W_i2h, W_h2h, b_i2h, b_h2h], flattened.
    """
    return np.ascontiguousarray(np.concatenate([
        params["gru.kernel"].T.reshape(-1), params["gru.recurrent_kernel"].T.reshape(-1),
        params["gru.input_bias"], params["gru.recurrent_bias"]]).astype(np.float32))


def gru_unpack_parameters(packed: np.ndarray, input_size: int, hidden: int) -> dict:
    """The inverse of ``gru_packed_parameters``: canonical layouts back from the packed vector."""
    sizes = (3 * hidden * input_size, 3 * hidden * hidden, 3 * hidden, 3 * hidden)
    if packed.size != sum(sizes):
        raise ValueError(f"packed GRU vector has {packed.size} values, expected {sum(sizes)}")
    w_i2h, w_h2h, b_i2h, b_h2h = np.split(packed, np.cumsum(sizes)[:-1])
    return {"gru.kernel": w_i2h.reshape(3 * hidden, input_size).T,
            "gru.recurrent_kernel": w_h2h.reshape(3 * hidden, hidden).T,
            "gru.input_bias": b_i2h, "gru.recurrent_bias": b_h2h}
