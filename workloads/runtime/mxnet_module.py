"""The loops of MXNet's symbolic Module API, on the device switches the Gluon row uses (runtime/mxnet.py).

A Module workload hands its Module, bound to the batch shape with its optimizer initialised; its
symbol ends in SoftmaxOutput, whose forward gives probabilities and whose backward gives the
cross-entropy gradient (FAIRNESS.md: softmax-in-loss). The step (forward_backward, update) is
written once here. Like Gluon, MXNet 1.9.1 reports no peak device memory of its own.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from workloads.common import loop
from workloads.common.harness import Run
from workloads.runtime import mxnet as mxnet_runtime

MXNetPolicy = mxnet_runtime.MXNetPolicy
select_device = mxnet_runtime.select_device  # the context, precision and provenance: the Gluon row's
to_device = mxnet_runtime.to_device
gru_packed_parameters = mxnet_runtime.gru_packed_parameters  # the RNN operator's one parameter vector


def parameter_count(module: mx.mod.Module) -> int:
    """Arguments only: batch norm's moving statistics are auxiliary states."""
    return sum(int(array.size) for array in module.get_params()[0].values())


def _train_step(policy: MXNetPolicy, module: mx.mod.Module):
    def step(x: np.ndarray, y: np.ndarray):
        labels = to_device(y, policy)
        module.forward_backward(mx.io.DataBatch(data=[to_device(x, policy)], label=[labels]))
        module.update()
        probabilities = module.get_outputs()[0]
        return -mx.nd.log(mx.nd.pick(probabilities, labels)).mean()  # stays on the device: no host sync
    return step


def train_and_evaluate(run: Run, policy: MXNetPolicy, module: mx.mod.Module, data) -> None:
    """Train the bound `module`, then count correct test predictions with it (is_train=False:
    dropout off, FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(module))
    loop.train(run, data, _train_step(policy, module), loss_value=lambda loss: loss.asscalar())

    def count_correct(x: np.ndarray, y: np.ndarray):
        labels = to_device(y, policy)  # a smaller last batch makes the Module reshape itself
        module.forward(mx.io.DataBatch(data=[to_device(x, policy)], label=[labels]), is_train=False)
        return (module.get_outputs()[0].argmax(axis=1) == labels).sum()

    loop.evaluate(run, data, count_correct, to_int=lambda correct: int(correct.asscalar()))


def _logits(policy: MXNetPolicy, module: mx.mod.Module, logits_symbol: mx.sym.Symbol):
    """A forward-only Module on `logits_symbol` (the graph before SoftmaxOutput) that shares the
    trained Module's parameters."""
    def forward(x: np.ndarray):
        x = to_device(x, policy)
        inference = mx.mod.Module(logits_symbol, data_names=("data",), label_names=None, context=policy.device)
        inference.bind(data_shapes=[("data", x.shape)], for_training=False, shared_module=module)
        inference.forward(mx.io.DataBatch(data=[x]), is_train=False)
        return inference.get_outputs()[0]
    return forward


def parity_steps(run: Run, policy: MXNetPolicy, module: mx.mod.Module, logits_symbol: mx.sym.Symbol,
                 batch: dict) -> dict:
    run.set_parameter_count(parameter_count(module))
    return loop.parity_outputs(_logits(policy, module, logits_symbol), _train_step(policy, module), batch,
                               to_numpy=lambda logits: logits.asnumpy())


def _features(policy: MXNetPolicy, module: mx.mod.Module):
    """The Module bound for_training=False, run with is_train=False: no gradients, batch norm on its
    moving statistics (FAIRNESS.md: eval-mode)."""
    def forward(batch: np.ndarray):
        module.forward(mx.io.DataBatch(data=[to_device(batch, policy)]), is_train=False)
        return module.get_outputs()[0]
    return forward


def extract_features(run: Run, policy: MXNetPolicy, module: mx.mod.Module, images: np.ndarray) -> None:
    run.set_parameter_count(parameter_count(module))
    loop.infer(run, images, _features(policy, module))


def parity_features(run: Run, policy: MXNetPolicy, module: mx.mod.Module, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(module))
    return {"features": _features(policy, module)(batch["x"]).asnumpy()}
