"""The timing harness every framework shares: phases, epochs, batches, raw samples, metrics.

A workload file calls ``run.phase(...)`` around data loading and model building, iterates
``run.train_batches(...)`` / ``run.eval_batches(...)`` / ``run.timed_batches(...)``, and sets
``run.sync`` to its framework's device synchronisation. The harness synchronises the device
before every clock read, times the first training step apart from the rest (compilation and
autotuning land there), and keeps every raw sample. It never syncs inside a training epoch
except once after the very first step.
"""
import contextlib
import datetime
import os
import platform
import resource
import socket
import sys
import time
from typing import Callable, Iterator, List, Optional, Tuple, Union

import numpy as np

from workloads.common import data, hyperparams
from workloads.common.result import Cell, Result


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


def _no_sync() -> None:
    return None


class Run:
    """One cell's run: its settings, its result record and the clocks."""

    def __init__(self, cell: Cell, *, device: str = "auto", data_dir: Optional[Union[str, os.PathLike]] = None):
        self.cell = cell
        self.settings = hyperparams.settings(cell.workload, cell.profile)
        self.precision = cell.precision
        self.requested_device = device
        self.data_dir = data_dir or data.default_data_dir()
        self.sync: Callable[[], None] = _no_sync  # set by the framework once the device is known
        self.rng = np.random.default_rng(hyperparams.SEED)
        self.result = Result(cell=cell, settings=_as_dict(self.settings))
        self.result.started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self._fill_host_provenance()

    # --- phases ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; the device is synchronised before both clock reads."""
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        self.result.phases[name] = self.result.phases.get(name, 0.0) + time.perf_counter() - start

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
        """
        settings = self.settings
        samples = self.result.samples
        order = self.rng.permutation(len(x))
        steps = len(x) // settings.batch_size  # only complete batches
        if settings.max_train_batches is not None:
            steps = min(steps, settings.max_train_batches)
        if steps == 0:
            raise ValueError(f"{len(x)} training samples make no complete batch of {settings.batch_size}")
        self.sync()
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * settings.batch_size:(step + 1) * settings.batch_size]
            yield x[index], y[index]
            if step == 0 and samples.first_step_s is None:
                self.sync()
                samples.first_step_s = time.perf_counter() - start
        self.sync()
        samples.epoch_times_s.append(time.perf_counter() - start)
        samples.epoch_steps.append(steps)
        self.result.phases["train"] = sum(samples.epoch_times_s)

    def end_epoch(self, loss: float) -> None:
        """Record the epoch's last training loss (read after the epoch's clock stopped)."""
        self.result.samples.epoch_losses.append(float(loss))
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

    def timed_batches(self, images: np.ndarray) -> Iterator[np.ndarray]:
        """The timed forward-only pass: one synchronised sample per batch."""
        size = self.settings.batch_size
        samples = self.result.samples
        for batch in range(self.settings.batches):
            self.sync()
            start = time.perf_counter()
            yield images[batch * size:(batch + 1) * size]
            self.sync()
            samples.batch_times_s.append(time.perf_counter() - start)
        self.result.phases["inference"] = sum(samples.batch_times_s)

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

    def finish(self) -> Result:
        """Derive the metrics from the raw samples."""
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
        if samples.batch_times_s:
            images = len(samples.batch_times_s) * settings.batch_size
            timed = sum(samples.batch_times_s)
            metrics.seconds_per_1000_images = timed / images * 1000.0
            metrics.images_per_s = images / timed
        metrics.peak_host_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        return self.result

    def _fill_host_provenance(self) -> None:
        provenance = self.result.provenance
        provenance.python_version = platform.python_version()
        provenance.numpy_version = np.__version__
        provenance.platform = platform.platform()
        provenance.hostname = socket.gethostname()
        provenance.cpu_model = cpu_model()
        provenance.cpu_count = os.cpu_count()
        provenance.git_revision = os.environ.get("ROSETTA_GIT_REVISION") or None
        provenance.gpu_driver = nvidia_driver_version()
        provenance.interpreter = sys.executable
        provenance.user_id = os.getuid()
        provenance.network_interfaces = network_interfaces()


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def network_interfaces() -> List[str]:
    """The interfaces this process sees; a container run without network has only loopback."""
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


def nvidia_driver_version() -> Optional[str]:
    """The kernel driver's version, readable inside a container without nvidia-smi."""
    try:
        with open("/proc/driver/nvidia/version") as stream:
            first = stream.readline()
    except OSError:
        return None
    words = first.split()
    for word in words:
        if word[:1].isdigit() and "." in word:
            return word
    return first.strip() or None


def _as_dict(settings) -> dict:
    import dataclasses  # novermin (Python 3.6: the backport)

    return {key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(settings).items()}
