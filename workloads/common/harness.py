"""The timing harness every framework shares: phases, epochs, batches, raw samples, metrics.

The scaffold calls ``run.phase(...)`` around data loading and model building and iterates
``run.train_batches`` / ``eval_batches`` / ``timed_batches``; each runtime declares its device sync
(``run.declare_sync``). The harness syncs the device before every clock read, times the first
training step apart (compilation and autotuning land there), keeps every raw sample, and never
syncs inside a training epoch except once after the very first step.
"""
import contextlib
import datetime
import math
import os
import resource
import sys
import time
from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from workloads.common import (canonical, data, declaration, flops, hyperparams, modes, options,
                              threads as thread_rules)
from workloads.common.provenance import fill_host_facts, process_threads
from workloads.common.result import CANONICAL_INIT, Cell, Result

# The validity gate: a training loss that ends an epoch above this multiple of the first step's
# loss (or is not a finite number at all) marks the cell failed, "diverged", instead of ranking it.
DIVERGED_LOSS_RATIO = 2.0


class Unsupported(Exception):
    """This cell cannot run here (precision, device, GPU...); the message says why."""


class Policy:
    """What a framework's ``select_device(run)`` decided for a cell, handed to its workloads.

    ``device`` is the framework's own device object (or name), ``precision`` the cell's precision.
    Each runtime subclasses it with its own switches (autocast, loss scaling, layout, ...), so a
    workload reads them from one place instead of re-deriving them from ``run.precision``.
    """

    def __init__(self, device, precision: str):
        self.device = device
        self.precision = precision

    def __repr__(self) -> str:
        fields = ", ".join("{}={!r}".format(key, value) for key, value in vars(self).items())
        return "{}({})".format(type(self).__name__, fields)


def no_wait() -> None:
    """The sync of a framework whose calls return only when their work is done (its runtime says why)."""
    return None


class Run:
    """One cell's run: its settings, its result record and the clocks."""

    def __init__(self, cell: Cell, *, device: str = "auto", data_dir: Optional[Union[str, os.PathLike]] = None,
                 threads: Optional[int] = None):
        self.cell = cell
        self.settings = hyperparams.settings(cell.workload, cell.profile)
        self.precision = cell.precision
        self.requested_device = device
        self.data_dir = data_dir or data.default_data_dir()
        self.threads = thread_rules.resolve(threads)  # every pool's threads (docs/FAIRNESS.md: same-threads)
        self.sync_waits_for: Optional[str] = None  # what the device sync waits for, as the runtime declared it
        self._wait: Callable[[], None] = no_wait  # the declared sync (declare_sync)
        self.rng = np.random.default_rng(hyperparams.SEED)
        self._step_not_finite: Optional[int] = None  # the first epoch in which a step's loss was not finite
        self.init = cell.init
        self.options = options.resolve(cell.framework, cell.options)  # every declared option, defaults included
        self.mode = modes.resolve(cell.framework, cell.mode)  # eager, graph or compiled: the runtime reads it here
        self.result = Result(cell=cell, settings=_as_dict(self.settings))
        self.result.started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.result.provenance.extras.update({"option." + name: value for name, value in self.options.items()})
        if self.mode:
            self.result.provenance.extras["mode"] = "{}: {}".format(self.mode, modes.meaning(cell.framework, self.mode))
        fill_host_facts(self.result.provenance)
        self.result.provenance.numpy_version = np.__version__
        self.result.provenance.threads_requested = self.threads

    # --- the cell's choices -----------------------------------------------------------------------

    def option(self, name: str) -> str:
        """A framework option's value for this cell (workloads/common/options.py), its default if not given."""
        return self.options[name]

    def initial_weights(self) -> Optional[dict]:
        """The canonical weights (workloads/common/canonical.py) the model starts training from, so
        that every framework starts from the same point (--init canonical, the default;
        docs/FAIRNESS.md: same-start), or None with --init framework: keep the framework's own
        initialisers. The scaffold (workloads/common/scaffold.py) calls it inside the model_build
        phase and loads what it returns the way ``parity()`` does."""
        self.result.provenance.extras["init"] = self.init
        if self.init != CANONICAL_INIT:
            return None
        return canonical.parameters(self.cell.workload)

    def declare_sync(self, wait: Callable[[], None], waits_for: str) -> None:
        """The framework's device synchronisation, and in words what it waits for (recorded as
        extras["sync"]; docs/FAIRNESS.md: explicit-sync): every runtime's ``select_device`` declares
        one, ``no_wait`` included, and the scaffold (workloads/common/scaffold.py) refuses one that did not."""
        if not waits_for:
            raise ValueError("a device sync says what it waits for")
        self._wait, self.sync_waits_for = wait, waits_for
        self.result.provenance.extras["sync"] = waits_for

    def sync(self) -> None:
        """Wait for the device with the declared sync."""
        self._wait()

    def record_threads(self, intra_op: Optional[int], inter_op: Optional[int], how: str, note: str = "") -> None:
        """The framework's switches that set ``self.threads`` (``how``: extras["threads"]), the intra-op
        and inter-op counts it reports back (None: none reported, or no such pool) and why it cannot
        obey or report, if so (docs/FAIRNESS.md: same-threads): the report flags a count or a note."""
        provenance = self.result.provenance
        provenance.extras["threads"] = how
        provenance.threads_intra_op, provenance.threads_inter_op = intra_op, inter_op
        provenance.threads_note = thread_rules.problem(self.threads, intra_op, inter_op, note) or None

    def note_trace(self, function: str) -> None:
        """Count one Python trace of a compiled step. Call it inside the traced function's body,
        which Python runs only while tracing: more than one trace per input shape is a retrace."""
        traces = self.result.samples.traces
        traces[function] = traces.get(function, 0) + 1

    # --- phases ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; the device is synchronised before both clock reads."""
        self.sync()
        start, wall_start = time.perf_counter(), time.time()
        yield
        self.sync()
        self.result.phases[name] = self.result.phases.get(name, 0.0) + time.perf_counter() - start
        self.record_span(name, wall_start, time.time())

    def record_span(self, name: str, start: float, end: float) -> None:
        """One stretch of a phase in wall-clock time (time.time(), the host's clock too), so the
        host can attribute the energy it sampled to the phase (orchestrator/telemetry/)."""
        self.result.phase_spans.setdefault(name, []).append([start, end])

    # --- data -----------------------------------------------------------------------------------

    def load_cifar10(self) -> data.Dataset:
        settings = self.settings
        if self.cell.data == "synthetic":
            dataset = data.synthetic_cifar10(*self._synthetic_sizes(50_000, 10_000), seed=hyperparams.SEED)
        else:
            dataset = data.load_cifar10(self.data_dir)
        assert dataset.x_train.shape[1:] == settings.image_shape
        return self._record_data(dataset)

    def load_imdb(self) -> data.Dataset:
        settings = self.settings
        if self.cell.data == "synthetic":
            dataset = data.synthetic_imdb(*self._synthetic_sizes(25_000, 25_000), settings=settings,
                                          seed=hyperparams.SEED)
        else:
            dataset = data.load_imdb(self.data_dir, settings=settings)
        return self._record_data(dataset)

    def random_images(self) -> np.ndarray:
        """ResNet-50 input: random data is fine for timing (seed 0): weights and pixel values do not change it."""
        settings = self.settings
        self.result.provenance.data_source = "random"
        count = settings.batch_size * max(settings.batches, settings.warmup_batches)
        return data.random_images(count, settings.image_shape, seed=hyperparams.SEED)

    def _synthetic_sizes(self, full_train: int, full_test: int) -> Tuple[int, int]:
        """Synthetic data only as large as the profile consumes, so smoke runs stay quick."""
        settings = self.settings
        train = full_train if settings.max_train_batches is None else settings.max_train_batches * settings.batch_size
        test = full_test if settings.max_eval_batches is None else settings.max_eval_batches * settings.batch_size
        return min(train, full_train), min(test, full_test)

    def _record_data(self, dataset: data.Dataset) -> data.Dataset:
        self.result.provenance.data_source = dataset.source
        self.result.provenance.data_checksum = dataset.checksum
        return dataset

    # --- training -------------------------------------------------------------------------------

    def train_batches(self, x: np.ndarray, y: np.ndarray) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """One epoch of shuffled, complete mini-batches, timed as a whole.

        The device is synchronised when the epoch starts and ends, and once after the very first
        step of the run, whose time (compilation, autotuning) is kept apart as ``first_step_s``.
        Each step's time as the host saw it goes to ``batch_times_s`` (the epoch's final wait for
        the device is the last step's), so an epoch's steps add up to its time.
        """
        settings = self.settings
        samples = self.result.samples
        order = self.rng.permutation(len(x))
        steps = len(x) // settings.batch_size  # only complete batches
        if settings.max_train_batches is not None:
            steps = min(steps, settings.max_train_batches)
        if steps == 0:
            raise ValueError(f"{len(x)} training samples make no complete batch of {settings.batch_size}")
        step_times = []
        self.sync()
        start = last = time.perf_counter()
        wall_start = steady_start = time.time()
        for step in range(steps):
            index = order[step * settings.batch_size:(step + 1) * settings.batch_size]
            yield x[index], y[index]
            if step == 0 and samples.first_step_s is None:
                self.sync()
                samples.first_step_s = time.perf_counter() - start
                steady_start = time.time()
                self.record_span("first_step", wall_start, steady_start)
            now = time.perf_counter()
            step_times.append(now - last)
            last = now
        self.sync()
        end = time.perf_counter()
        wall_end = time.time()
        self.record_span("train", wall_start, wall_end)
        if steady_start < wall_end:  # the steps after the very first: the steady phase
            self.record_span("steady", steady_start, wall_end)
        step_times[-1] += end - last
        samples.batch_times_s.extend(step_times)
        samples.epoch_times_s.append(end - start)
        samples.epoch_steps.append(steps)
        self.result.phases["train"] = sum(samples.epoch_times_s)

    def record_first_loss(self, loss: float) -> None:
        """The first training step's loss, the validity gate's baseline (read once, inside that step's time)."""
        self.result.samples.first_loss = float(loss)

    def end_epoch(self, loss: float, loss_sum: Optional[float] = None) -> None:
        """Record the epoch's last training loss (read after the epoch's clock stopped); ``loss_sum``, the
        sum of its steps' losses, not finite fails the cell (docs/FAIRNESS.md: every-step-finite)."""
        self.result.samples.epoch_losses.append(float(loss))
        if loss_sum is not None and not math.isfinite(float(loss_sum)) and self._step_not_finite is None:
            self._step_not_finite = len(self.result.samples.epoch_losses)
        print(f"epoch {len(self.result.samples.epoch_losses)}: {self.result.samples.epoch_times_s[-1]:.2f} s, "
              f"loss {float(loss):.4f}", file=sys.stderr)

    def eval_batches(self, x: np.ndarray, y: np.ndarray) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The test set in order, the last partial batch included (capped by the profile)."""
        settings = self.settings
        batches = -(-len(x) // settings.batch_size)
        if settings.max_eval_batches is not None:
            batches = min(batches, settings.max_eval_batches)
        for batch in range(batches):
            window = slice(batch * settings.batch_size, (batch + 1) * settings.batch_size)
            yield x[window], y[window]

    def record_accuracy(self, correct: int, total: int) -> None:
        self.result.metrics.test_accuracy = float(correct) / float(total)

    # --- inference ------------------------------------------------------------------------------

    def warmup_batches(self, images: np.ndarray) -> Iterator[np.ndarray]:
        """The untimed warm pass (timed as its own phase by the caller)."""
        size = self.settings.batch_size
        for batch in range(self.settings.warmup_batches):
            yield images[batch * size:(batch + 1) * size]

    def timed_batches(self, images: np.ndarray, after_each: Optional[Callable[[], None]] = None) -> Iterator[np.ndarray]:
        """The timed forward-only pass: one synchronised sample per batch (the copy of the
        features to the host included: workloads/common/loop.py, infer). ``after_each`` runs after
        each batch's clock has stopped, outside its sample (the validity gate's check of its output)."""
        size = self.settings.batch_size
        samples = self.result.samples
        wall_start = None
        for batch in range(self.settings.batches):
            self.sync()
            start = time.perf_counter()
            wall_start = time.time() if wall_start is None else wall_start
            yield images[batch * size:(batch + 1) * size]
            self.sync()
            samples.batch_times_s.append(time.perf_counter() - start)
            if after_each is not None:
                after_each()
        self.result.phases["inference"] = sum(samples.batch_times_s)
        if wall_start is not None:  # one span, first timed batch to last: nothing else runs between
            self.record_span("inference", wall_start, time.time())

    # --- recording ------------------------------------------------------------------------------

    def set_provenance(self, **fields) -> None:
        """Record provenance fields; `extras` is merged into what is already recorded."""
        for name, value in fields.items():
            if name == "extras":
                self.result.provenance.extras.update({key: str(item) for key, item in value.items()})
            else:
                setattr(self.result.provenance, name, value)

    def set_parameter_count(self, count: int) -> None:
        self.result.metrics.parameter_count = int(count)

    def record_peak_device_memory(self, megabytes: Optional[float]) -> None:
        """The framework's own figure for its peak device allocation (None where it has none)."""
        if megabytes is not None:
            self.result.metrics.peak_device_memory_mb = float(megabytes)

    def invalidate(self, reason: str) -> None:
        """Mark an otherwise finished cell failed: its figures must not be ranked (the validity gate)."""
        if self.result.status == "ok":
            self.result.status, self.result.reason = "failed", reason

    def finish(self) -> Result:
        """Derive the metrics from the raw samples, then apply the validity gate."""
        metrics, samples, settings = self.result.metrics, self.result.samples, self.settings
        if samples.epoch_times_s:
            steps = sum(samples.epoch_steps)
            metrics.train_time_s = sum(samples.epoch_times_s)
            metrics.samples_per_s = steps * settings.batch_size / metrics.train_time_s
            if samples.first_step_s is not None and steps > 1:
                metrics.steady_state_time_s = metrics.train_time_s - samples.first_step_s
                metrics.steady_samples_per_s = (steps - 1) * settings.batch_size / metrics.steady_state_time_s
            if samples.epoch_losses:
                metrics.final_loss = samples.epoch_losses[-1]
        elif samples.batch_times_s:  # inference: the median batch, robust to a stray slow one
            median = float(np.median(samples.batch_times_s))
            metrics.seconds_per_1000_images = median / settings.batch_size * 1000.0
            metrics.images_per_s = settings.batch_size / median
        flops.record(declaration.get(self.cell.workload), self.result)
        metrics.peak_host_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        self.result.provenance.process_threads = process_threads()
        problem = divergence(samples.first_loss, samples.epoch_losses)
        if problem is None and self._step_not_finite is not None:
            problem = "diverged: a training step's loss in epoch {} is not a finite number (the sum of the " \
                      "epoch's step losses is not)".format(self._step_not_finite)
        if problem:
            self.invalidate(problem)
        return self.result

def divergence(first_loss: Optional[float], epoch_losses: List[Optional[float]]) -> Optional[str]:
    """Why a training run diverged ("diverged: ..."), or None: a loss that is not a finite number,
    or an epoch that ends above DIVERGED_LOSS_RATIO times the first step's loss."""
    for where, loss in [("the first step", first_loss)] + [("epoch {}".format(n), loss)
                                                           for n, loss in enumerate(epoch_losses, start=1)]:
        if where != "the first step" and loss is None:
            return "diverged: the training loss at the end of {} is not a finite number".format(where)
        if loss is not None and not math.isfinite(loss):
            return "diverged: the training loss after {} is not a finite number ({})".format(where, loss)
    if first_loss is not None and first_loss > 0:
        for number, loss in enumerate(epoch_losses, start=1):
            if loss is not None and loss > DIVERGED_LOSS_RATIO * first_loss:
                return ("diverged: the training loss rose from {:.4g} (first step) to {:.4g} (end of epoch {}), "
                        "more than {:g}x its start".format(first_loss, loss, number, DIVERGED_LOSS_RATIO))
    return None


def _as_dict(settings) -> dict:
    import dataclasses  # novermin (Python 3.6: the backport)

    return {key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(settings).items()}
