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


def add_on_device(total, loss):
    """The epoch's running sum of step losses, ``loss`` where it is (a device scalar stays there)."""
    return loss if total is None else total + loss


def train(run, data, step: Callable, *, loss_value: Callable = float,
          end_epoch: Optional[Callable[[], None]] = None, add_losses: Callable = add_on_device,
          sum_value: Optional[Callable] = None) -> None:
    """Every epoch of shuffled, complete mini-batches.

    ``step(x, y)`` runs one optimizer step on a numpy batch and returns its loss, which may stay on
    the device: it is read (``loss_value``) once per epoch, after the epoch's clock has stopped.
    ``end_epoch`` runs after each epoch's clock stops too (e.g. Keras on JAX copies its state back).
    The very first step's loss is read at once (inside the first step's own time, which the
    harness keeps apart): the validity gate compares every epoch's loss with it. The loss sum's
    add is made once there too, its result dropped, so that a framework which compiles an
    operation on its first use (JAX's eager add: tens of milliseconds) pays for it in the first
    step, not in a timed one (docs/FAIRNESS.md: every-step-finite).

    Every step's loss is judged, not only the epoch's last (the validity gate, docs/FAIRNESS.md:
    every-step-finite): ``add_losses(total, loss)`` sums the epoch's losses where they are, on the
    device (a NaN or an infinity in any step makes the sum one), and the sum is read once with the
    last loss (``sum_value``, by default ``loss_value``), so the check adds no host sync per step. A
    runtime whose step returns no plain device value (Chainer's Variable keeps its graph, CNTK's
    Trainer holds its loss) gives its own ``add_losses`` and ``sum_value``.
    """
    sum_value = loss_value if sum_value is None else sum_value
    loss = None
    for _ in range(run.settings.epochs):
        total = None
        for x, y in run.train_batches(data.x_train, data.y_train):
            loss = step(x, y)
            total = add_losses(total, loss)
            if run.result.samples.first_loss is None:
                run.record_first_loss(loss_value(loss))
                add_losses(total, loss)  # the add every later step makes, first made here (see above)
        if end_epoch is not None:
            end_epoch()
        run.end_epoch(loss_value(loss), loss_sum=sum_value(total))


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
    Any timed batch whose features are not all finite numbers fails the cell (the validity gate,
    docs/FAIRNESS.md: every-step-finite), checked on the host copy after that batch's clock stopped."""
    settings = run.settings
    features = None
    with run.phase("warmup"):
        for batch in run.warmup_batches(images):
            features = to_host(forward(batch))
    assert features.shape == (settings.batch_size, settings.feature_size), features.shape
    not_finite = []  # the timed batches whose features hold NaN or infinite values

    def check() -> None:
        if not np.isfinite(features).all():
            not_finite.append(len(run.result.samples.batch_times_s))

    for batch in run.timed_batches(images, after_each=check):
        features = to_host(forward(batch))
    if not_finite:
        run.invalidate("diverged: the extracted features of timed batch {} (of {}) hold NaN or infinite "
                       "values".format(not_finite[0], settings.batches))


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
