"""The loops every framework shares: the harness owns iteration, a framework supplies its steps.

Each framework's runtime module (`workloads/runtime/<framework>.py`) adapts these once, for all of
its workloads, so a workload file shows only what readers compare: the model, the loss, the
optimizer, the canonical-weight loading, and one call into its runtime's loop. Numpy only.

The clocks stay where they were: `run.train_batches` times each epoch (the device synchronised
at its start and end, and once after the very first step), `run.phase("evaluate")` the test pass,
`run.phase("warmup")` the untimed warm pass and `run.timed_batches` each timed inference batch.
"""
from typing import Callable, Dict, Optional

import numpy as np

from workloads.common import canonical


def train(run, data, step: Callable, *, loss_value: Callable = float,
          end_epoch: Optional[Callable[[], None]] = None) -> None:
    """Every epoch of shuffled, complete mini-batches.

    ``step(x, y)`` runs one optimizer step on a numpy batch and returns its loss, which may stay on
    the device: it is read (``loss_value``) once per epoch, after the epoch's clock has stopped.
    ``end_epoch`` runs after each epoch's clock stops too (e.g. Keras on JAX copies its state back).
    The very first step's loss is read at once (inside the first step's own time, which the
    harness keeps apart): the validity gate compares every epoch's loss with it.
    """
    loss = None
    for _ in range(run.settings.epochs):
        for x, y in run.train_batches(data.x_train, data.y_train):
            loss = step(x, y)
            if run.result.samples.first_loss is None:
                run.record_first_loss(loss_value(loss))
        if end_epoch is not None:
            end_epoch()
        run.end_epoch(loss_value(loss))


def evaluate(run, data, count_correct: Callable, *, to_int: Callable = int) -> None:
    """The test set in inference mode (dropout off, batch norm on its moving statistics; see
    docs/FAIRNESS.md, "eval-mode"): ``count_correct(x, y)`` returns how many predictions were
    right, possibly as a device scalar that is summed on the device and read once at the end."""
    with run.phase("evaluate"):
        correct, total = 0, 0
        for x, y in run.eval_batches(data.x_test, data.y_test):
            correct = correct + count_correct(x, y)
            total += len(y)
    run.record_accuracy(to_int(correct), total)


def infer(run, images: np.ndarray, forward: Callable, *, to_host: Callable = np.asarray) -> None:
    """The untimed warm pass over ``settings.warmup_batches`` batches (its own phase: tracing,
    compilation, autotuning, allocation), then the timed forward-only pass, one synchronised
    sample per batch. ``forward(batch)`` returns the features, possibly on the device;
    ``to_host(features)`` copies them into a numpy array, inside every timed batch, for every
    framework alike (docs/FAIRNESS.md: host-copy): a feature extractor's user needs them there.
    Features that are not all finite numbers fail the cell (the validity gate)."""
    settings = run.settings
    features = None
    with run.phase("warmup"):
        for batch in run.warmup_batches(images):
            features = to_host(forward(batch))
    assert features.shape == (settings.batch_size, settings.feature_size), features.shape
    for batch in run.timed_batches(images):
        features = to_host(forward(batch))
    if not np.isfinite(features).all():
        run.invalidate("diverged: the extracted features hold NaN or infinite values")


def parity_outputs(forward: Callable, step: Callable, batch: Dict[str, np.ndarray], *,
                   to_numpy: Callable = np.asarray) -> Dict[str, np.ndarray]:
    """The training workloads' parity outputs: the logits on the canonical weights, then again
    after ``canonical.PARITY_STEPS`` optimizer steps on the same batch (dropout off in the steps:
    it is random, and frameworks' generators differ)."""
    x, y = batch["x"], batch["y"]
    before = to_numpy(forward(x))
    for _ in range(canonical.PARITY_STEPS):
        step(x, y)
    return {"logits": before, "logits_after_training": to_numpy(forward(x))}
