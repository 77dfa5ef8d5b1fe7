"""The loops of MXNet's symbolic Module API, on the device switches the Gluon row uses (runtime/mxnet.py).

A Module workload hands its Module, bound to the batch shape with its optimizer initialised; its
symbol ends in SoftmaxOutput, whose forward gives probabilities and whose backward gives the
cross-entropy gradient (FAIRNESS.md: softmax-in-loss). The step (forward_backward, update) is
written once here. Like Gluon, MXNet 1.9.1 reports no peak device memory of its own.

A Module's graph is composed in Python once (the symbol) and bound to executors for one input
shape; a batch of another shape makes the Module re-bind (``reshape``). Each executor the timed
steps run on is counted in ``samples.traces`` (see ``_BindCounter``): 1 when nothing re-binds.
`Training` and `FeatureExtraction` are the Module rows' side of the scaffold every workload file
fills in (workloads/common/scaffold.py).
"""
from __future__ import annotations

import abc
from typing import Optional

import mxnet as mx
import numpy as np

from workloads.common import loop, scaffold
from workloads.common.harness import Run
from workloads.runtime import mxnet as mxnet_runtime

MXNetPolicy = mxnet_runtime.MXNetPolicy
select_device = mxnet_runtime.select_device  # the context, precision and provenance: the Gluon row's
to_device = mxnet_runtime.to_device
gru_packed_parameters = mxnet_runtime.gru_packed_parameters  # the RNN operator's one parameter vector
gru_kernel = mxnet_runtime.gru_kernel  # mx.sym.RNN is the operator gluon.rnn.GRU runs
to_host = mxnet_runtime.to_host


def parameter_count(module: mx.mod.Module) -> int:
    """Arguments only: batch norm's moving statistics are auxiliary states."""
    return sum(int(array.size) for array in module.get_params()[0].values())


class _BindCounter:
    """Counts the executors `module` runs on, in ``samples.traces[name]``: the first step's, then one
    more each time the Module re-binds (a new input shape, or anything else that rebuilds its
    executor). The Module API exposes its executors only through its executor group."""

    def __init__(self, run: Run, module: mx.mod.Module, name: str):
        self.run, self.module, self.name, self.executor = run, module, name, None

    def check(self) -> None:
        executor = self.module._exec_group.execs[0]
        if executor is not self.executor:
            self.executor = executor
            self.run.note_trace(self.name)


def _train_step(policy: MXNetPolicy, module: mx.mod.Module, binds: Optional[_BindCounter] = None):  # phrase: train-step
    def step(x: np.ndarray, y: np.ndarray):
        labels = to_device(y, policy)
        module.forward_backward(mx.io.DataBatch(data=[to_device(x, policy)], label=[labels]))
        if binds is not None:
            binds.check()
        module.update()
        probabilities = module.get_outputs()[0]
        return -mx.nd.log(mx.nd.pick(probabilities, labels)).mean()  # stays on the device: no host sync
    return step


def train_and_evaluate(run: Run, policy: MXNetPolicy, module: mx.mod.Module, data) -> None:
    """Train the bound `module`, then count correct test predictions with it (is_train=False:
    dropout off, FAIRNESS.md: eval-mode)."""
    run.set_parameter_count(parameter_count(module))
    weights = [arrays[0] for arrays in module._exec_group.param_arrays]  # the bound parameters, on the device
    run.set_provenance(extras={"optimizer": mxnet_runtime.optimizer_description(module._optimizer, weights)})
    loop.train(run, data, _train_step(policy, module, _BindCounter(run, module, "train_step")),
               loss_value=lambda loss: loss.asscalar())

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
                               to_numpy=to_host)


def _features(policy: MXNetPolicy, module: mx.mod.Module, binds: Optional[_BindCounter] = None):  # phrase: eval-mode
    """The Module bound for_training=False, run with is_train=False: no gradients, batch norm on its
    moving statistics (FAIRNESS.md: eval-mode)."""
    def forward(batch: np.ndarray):
        module.forward(mx.io.DataBatch(data=[to_device(batch, policy)]), is_train=False)
        if binds is not None:
            binds.check()
        return module.get_outputs()[0]
    return forward


def extract_features(run: Run, policy: MXNetPolicy, module: mx.mod.Module, images: np.ndarray) -> None:
    run.set_parameter_count(parameter_count(module))
    loop.infer(run, images, _features(policy, module, _BindCounter(run, module, "forward")),
               to_host=to_host)  # asnumpy: inside every timed batch


def parity_features(run: Run, policy: MXNetPolicy, module: mx.mod.Module, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(module))
    return {"features": to_host(_features(policy, module)(batch["x"]))}


# --- the scaffold's Module API part (workloads/common/scaffold.py) ------------------------------------

class Training(scaffold.Training):
    """A Module training workload: its file gives build_model (a Module bound to the batch shape with
    its optimizer initialised, so make_optimizer keeps the scaffold's None), load_canonical and
    logits_symbol."""

    @abc.abstractmethod
    def logits_symbol(self, run: Run) -> mx.sym.Symbol:
        """The graph before SoftmaxOutput, without dropout: the parity check's forward passes."""

    def select_device(self, run: Run) -> MXNetPolicy:
        return select_device(run)

    def train(self, run: Run, policy: MXNetPolicy, module: mx.mod.Module, optimizer, data) -> None:
        train_and_evaluate(run, policy, module, data)

    def parity_steps(self, run: Run, policy: MXNetPolicy, module: mx.mod.Module, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, module, self.logits_symbol(run), batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Module inference workload: its file gives build_model (a Module bound for_training=False)
    and load_canonical."""

    def select_device(self, run: Run) -> MXNetPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: MXNetPolicy, module: mx.mod.Module, images: np.ndarray) -> None:
        extract_features(run, policy, module, images)

    def parity_features(self, run: Run, policy: MXNetPolicy, module: mx.mod.Module, batch: dict) -> dict:
        return parity_features(run, policy, module, batch)
