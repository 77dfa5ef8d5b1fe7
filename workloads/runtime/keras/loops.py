"""Keras 3's training step and loops, on the shared loops of workloads/common/loop.py."""
from __future__ import annotations

import keras
import numpy as np

from workloads.common import loop
from workloads.common.harness import Run
from workloads.runtime.keras.backends import BACKEND, FACTS, last_outputs
from workloads.runtime.keras.device import (KerasPolicy, compiles_steps, count_traces, parameter_count,
                                            record_compiled, record_peak_memory)


# --- the training step ----------------------------------------------------------------------------

class TrainStep:
    """`model.train_on_batch(x, y)` without its host fetch: the step's loss stays on the device.

    Keras 3's train_on_batch ends every step with a float() of the loss (`pythonify_logs`), which
    waits for the device: one host round trip per step, which a GPU pays in idle time. This calls
    the same compiled `model.train_function` that train_on_batch calls (traced once by Keras, with
    compile()'s jit_compile), after the same metric reset, so the returned loss is this batch's.
    On JAX, whose train_function is stateless, the state is carried from step to step and written
    back to the model's variables by `sync_weights()`, as Keras' own fit() does once per epoch.
    The first call is train_on_batch itself: it builds the model and the function (on torch in
    the compiled mode the function is made, not compiled, before: count_traces).

    The optimizer's variables are built here, before the first step: TensorFlow's Keras would create
    them inside the first trace of the train function, and a tf.function that creates variables
    while tracing traces a second time. With ``run``, every trace of the step is counted
    (samples.traces["train_step"]; one per input shape, as the tests check).
    """

    def __init__(self, model: keras.Model, run: Run | None = None):
        self.model = model
        self.started = False  # the first call is train_on_batch
        self.state = None  # JAX only: (trainable, non-trainable, optimizer, metrics) variables
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)  # as Keras' own symbolic build would
        if run is not None and compiles_steps(model):
            count_traces(run, model, "train_step")

    def __call__(self, x: np.ndarray, y: np.ndarray):  # phrase: train-step
        model = self.model
        x, y = FACTS.batch(x), FACTS.batch(y)
        if not self.started:
            self.started = True
            return self._first_step(x, y)
        if BACKEND == "jax":
            return self._jax_step(x, y)
        model.reset_metrics()  # the loss tracker is a running mean: this batch's loss only
        # A plain list: Keras' TensorFlow train_function then calls its tf.function on the batch
        # itself (a tf.data iterator would go through a second function); the batch's numpy arrays
        # are traced as tensors by shape and dtype, so the step is traced once per shape.
        logs = model.train_function([(x, y, None)])
        return logs["loss"]

    def _first_step(self, x, y):
        """train_on_batch. On JAX, the state the later steps carry and the loss as they return it (a
        device scalar) are made here too, inside this first step's time, kept apart: no steady step
        pays for them (FAIRNESS.md: every-step-finite, per-step-times)."""
        loss = np.float32(self.model.train_on_batch(x, y))
        if BACKEND != "jax":
            return loss
        import jax.numpy as jnp

        self._take_jax_state()
        return jnp.asarray(loss)

    def _jax_step(self, x, y):
        import jax
        import jax.numpy as jnp

        model = self.model
        if self.state is None:
            self._take_jax_state()
        trainable, non_trainable, optimizer, metrics = self.state
        metrics = [jnp.zeros_like(value) for value in metrics]  # = reset_metrics()
        model._jax_state_synced = False
        data = jax.tree_util.tree_map(jax.device_put, (x, y))
        logs, self.state = model.train_function((trainable, non_trainable, optimizer, metrics),
                                                iter([(*data, None)]))
        last_outputs[0] = self.state
        return logs["loss"]

    def _take_jax_state(self) -> None:
        """JAX: the model's variables become the state the steps carry (the model's own copies purged)."""
        self.state = self.model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                               optimizer_variables=True, metrics_variables=True,
                                               purge_model_variables=True)

    def sync_weights(self) -> None:
        """Write the JAX state back to the model's variables (a no-op on the other backends)."""
        if BACKEND != "jax" or self.state is None:
            return
        trainable, non_trainable, optimizer, metrics = self.state
        self.model._jax_state = {"trainable_variables": trainable, "non_trainable_variables": non_trainable,
                                 "optimizer_variables": optimizer, "metrics_variables": metrics}
        self.model._jax_state_synced = False
        self.model.jax_state_sync()
        self.state = None
        last_outputs[0] = None


# --- the loops ------------------------------------------------------------------------------------

def count_correct(model: keras.Model, inputs: np.ndarray, labels: np.ndarray) -> int:  # phrase: eval-mode
    """predict_on_batch: inference mode, dropout off (FAIRNESS.md: eval-mode); it returns numpy."""
    return int((predict(model, inputs).argmax(axis=1) == labels).sum())


def count_torch_predict_traces(run: Run, model: keras.Model) -> None:
    """On torch in the compiled mode, Keras' predict function is made here, its graphs counted
    (count_traces), before its first call. TensorFlow and JAX count the training step's traces and
    ResNet-50's predict step only (their predict functions trace once per shape as well)."""
    if BACKEND == "torch" and compiles_steps(model):
        count_traces(run, model, "predict_step")


def record_dynamo(run: Run, model: keras.Model) -> None:
    """On torch in the compiled mode, what TorchDynamo compiled and what it left eager (extras "torch_compile")."""
    if BACKEND == "torch" and compiles_steps(model):
        FACTS.record_dynamo(run)


def predict(model: keras.Model, inputs: np.ndarray) -> np.ndarray:
    """``model.predict_on_batch`` on a numpy batch (a tensor on torch, which compiles no numpy)."""
    return model.predict_on_batch(FACTS.batch(inputs))


def train_and_evaluate(run: Run, policy: KerasPolicy, model: keras.Model, data) -> None:
    """Train a compiled model with `loop.train` (TrainStep: train_on_batch without a host sync per
    step), then evaluate it on the test set."""
    with run.phase("model_build"):
        train_step = TrainStep(model, run)
        count_torch_predict_traces(run, model)  # the evaluation's, compiled on its first batch
    run.set_parameter_count(parameter_count(model))
    record_compiled(run, policy, model)
    # JAX: each epoch's state is written back into the model's variables after its clock stops
    loop.train(run, data, train_step, end_epoch=train_step.sync_weights)
    loop.evaluate(run, data, lambda inputs, labels: count_correct(model, inputs, labels))
    record_peak_memory(run, policy)
    record_dynamo(run, model)


def parity_steps(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    """The logits on the canonical weights, and after `canonical.PARITY_STEPS` of the benchmark's own
    step (train_on_batch first, then the fast path)."""
    run.set_parameter_count(parameter_count(model))
    train_step = TrainStep(model, run)
    count_torch_predict_traces(run, model)

    def forward(inputs):
        train_step.sync_weights()  # JAX: the steps' state back into the model (none yet: a no-op)
        return predict(model, inputs)

    return loop.parity_outputs(forward, train_step, batch)


def extract_features(run: Run, policy: KerasPolicy, model: keras.Model, images: np.ndarray) -> None:
    """ResNet-50's timed inference. predict_on_batch: inference mode (batch norm on its moving
    statistics), no gradients (FAIRNESS.md: eval-mode), compiled (XLA on JAX, and on TensorFlow with
    the compiled mode; a tf.function on TensorFlow otherwise; torch.compile on torch in the compiled
    mode, else eager under torch.no_grad); it converts the features to numpy itself
    (backend.convert_to_numpy), so each batch ends on the host; ``to_host`` states it
    (keras.ops.convert_to_numpy, a no-op on numpy)."""
    run.set_parameter_count(parameter_count(model))
    model.jit_compile = policy.jit_compile  # the model is not compiled: set what compile() would
    if compiles_steps(model):
        count_traces(run, model, "predict_step")
    record_compiled(run, policy, model)
    loop.infer(run, images, lambda batch: predict(model, batch), to_host=keras.ops.convert_to_numpy)
    record_peak_memory(run, policy)
    record_dynamo(run, model)


def parity_features(run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
    run.set_parameter_count(parameter_count(model))
    model.jit_compile = policy.jit_compile
    count_torch_predict_traces(run, model)
    return {"features": keras.ops.convert_to_numpy(predict(model, batch["x"]))}
