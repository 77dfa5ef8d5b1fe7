"""Keras 3's runtime: device, precision and provenance switches, and the one training, evaluation
and inference loop the three Keras workloads share.

One implementation serves three rows: `python -m workloads` sets KERAS_BACKEND to tensorflow, jax
or torch before `import keras`. Everything that differs between the backends (seeing a GPU,
synchronising it, TF32, the convolution layout, versions) is here; the workload files are pure
Keras. A workload hands this module its compiled model (the loss and optimizer are compile()'s,
the optimizers from `sgd_momentum` and `adam`: each backend's own built-in or fused op where one
computes PyTorch's update); the training step is Keras' own compiled `train_function` (see
TrainStep), traced once per input shape and counted (`run.note_trace`). `Training` and
`FeatureExtraction` are Keras' side of the scaffold every workload file fills in
(workloads/common/scaffold.py).

One module per concern: `backends` (what differs between TensorFlow, JAX and torch), `device`
(select_device and what the model ran), `optimizers`, `gru_watch` (which GRU kernel ran) and
`loops` (the training step and the loops). This package is the runtime's one face: workload files,
the R rows and the tests use what it exports.
"""
from __future__ import annotations

import keras
import numpy as np

from workloads.common import scaffold
from workloads.common.harness import Run
from workloads.runtime.keras.backends import BACKEND
from workloads.runtime.keras.device import KerasPolicy, parameter_count, select_device
from workloads.runtime.keras.gru_watch import watch_gru_kernel
from workloads.runtime.keras.loops import (TrainStep, count_correct, extract_features, parity_features, parity_steps,
                                           train_and_evaluate)
from workloads.runtime.keras.optimizers import adam, dense_gradient, describe_optimizer, sgd_momentum

__all__ = ["BACKEND", "KerasPolicy", "select_device", "parameter_count", "watch_gru_kernel", "TrainStep",
           "count_correct", "train_and_evaluate", "parity_steps", "extract_features", "parity_features",
           "sgd_momentum", "adam", "describe_optimizer", "dense_gradient", "Training", "FeatureExtraction"]


# --- the scaffold's Keras part (workloads/common/scaffold.py) -----------------------------------------

class Training(scaffold.Training):
    """A Keras training workload: its file gives build_model (compiled: the loss and the optimizer
    are compile()'s, so make_optimizer keeps the scaffold's None) and load_canonical."""

    def select_device(self, run: Run) -> KerasPolicy:
        return select_device(run)

    def train(self, run: Run, policy: KerasPolicy, model: keras.Model, optimizer, data) -> None:
        train_and_evaluate(run, policy, model, data)

    def parity_steps(self, run: Run, policy: KerasPolicy, model: keras.Model, optimizer, batch: dict) -> dict:
        return parity_steps(run, policy, model, batch)


class FeatureExtraction(scaffold.FeatureExtraction):
    """A Keras inference workload: its file gives build_model and load_canonical."""

    def select_device(self, run: Run) -> KerasPolicy:
        return select_device(run)

    def extract(self, run: Run, policy: KerasPolicy, model: keras.Model, images: np.ndarray) -> None:
        extract_features(run, policy, model, images)

    def parity_features(self, run: Run, policy: KerasPolicy, model: keras.Model, batch: dict) -> dict:
        return parity_features(run, policy, model, batch)
