"""How fast the real loaders are on full-size data: ``python benchmarks/data_load.py``.

Builds a full-size fake CIFAR-10 tarball (60k random images, the real format) and a full-size
fake Keras imdb.npz (50k reviews, realistic lengths) in a temp dir, places them in a data dir
with matching digests, and times the real loaders: first load (verify + parse + cache) and the
cached load. Prints figures beside their targets; asserts nothing.
"""
from __future__ import annotations

import hashlib
import io
import pathlib
import pickle
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from workloads.common import data, hyperparams  # noqa: E402

CIFAR_CACHED_TARGET_S = 1.0
IMDB_PREPROCESS_TARGET_S = 2.0
IMDB_CACHED_TARGET_S = 1.0


def build_fake_cifar10(path: pathlib.Path, rng: np.random.Generator) -> None:
    """60k random uint8 images in the real layout: cifar-10-batches-py/data_batch_1..5, test_batch."""
    batches = [f"data_batch_{index}" for index in range(1, 6)] + ["test_batch"]
    # Random pixels do not compress; level 1 keeps building the tarball quick.
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name in batches:
            batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, 10_000).tolist(),
                     b"data": rng.integers(0, 256, (10_000, 3072), dtype=np.uint8),
                     b"filenames": [f"{index}.png".encode() for index in range(10_000)]}
            payload = pickle.dumps(batch, protocol=2)
            member = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            member.size = len(payload)
            tar.addfile(member, io.BytesIO(payload))


def fake_reviews(count: int, rng: np.random.Generator) -> list:
    """Reviews as lists of Python ints, like imdb.npz: mean ~230 words, a long tail, ids up to ~88k."""
    lengths = np.clip(rng.lognormal(mean=5.25, sigma=0.65, size=count), 10, 2500).astype(np.int64)
    words = np.minimum(rng.zipf(1.25, size=int(lengths.sum())), 88_584)
    return [chunk.tolist() for chunk in np.split(words, np.cumsum(lengths)[:-1])]


def object_array(items: list) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


def build_fake_imdb(path: pathlib.Path, rng: np.random.Generator) -> list:
    reviews = fake_reviews(50_000, rng)
    labels = np.repeat(np.arange(2, dtype=np.int64), 12_500)
    np.savez_compressed(path, x_train=object_array(reviews[:25_000]), y_train=labels,
                        x_test=object_array(reviews[25_000:]), y_test=labels)
    return reviews


def local_remote(template: data.RemoteFile, path: pathlib.Path) -> data.RemoteFile:
    """The same dataset, with the digest of the fake file placed in the data dir."""
    digest = hashlib.new(template.algorithm, path.read_bytes()).hexdigest()
    return data.RemoteFile(template.name, template.filename, path.as_uri(), template.algorithm, digest)


def timed_in_fresh_process(loader: str, data_dir: pathlib.Path, remote: data.RemoteFile) -> float:
    """A cached load as a workload sees it: a new interpreter, nothing warm but the OS page cache."""
    script = (
        "import pathlib, sys, time\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from workloads.common import data, hyperparams\n"
        f"remote = data.RemoteFile(*{tuple(vars(remote).values())!r})\n"
        "keywords = {'settings': hyperparams.settings(\"gru\", \"full\")} if '" + loader + "' == 'load_imdb' else {}\n"
        "start = time.perf_counter()\n"
        f"data.{loader}(pathlib.Path({str(data_dir)!r}), remote=remote, offline=True, **keywords)\n"
        "print(time.perf_counter() - start)\n")
    output = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    return float(output.strip().splitlines()[-1])


def report_fresh_processes(label: str, loader: str, data_dir: pathlib.Path, remote: data.RemoteFile,
                           target: float, runs: int = 3) -> None:
    """Median of a few fresh-process loads, every run shown.

    On a VM the first touch of memory the guest has not used before can cost seconds
    (the hypervisor backs it page by page); that is the host, not the loader, hence a median.
    """
    times = sorted(timed_in_fresh_process(loader, data_dir, remote) for _ in range(runs))
    report(label, times[len(times) // 2], target)
    print(f"    runs: {', '.join(f'{seconds:.3f}' for seconds in times)} s")


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def report(label: str, seconds: float, target: float | None = None) -> None:
    verdict = "" if target is None else f"  (target <= {target:.1f} s: {'met' if seconds <= target else 'MISSED'})"
    print(f"{label:<50} {seconds:7.3f} s{verdict}", flush=True)


def main() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="rosetta-data-bench-") as temp:
        data_dir = pathlib.Path(temp)

        print("building a full-size fake CIFAR-10 tarball (60k images)...", flush=True)
        cifar_path = data_dir / data.CIFAR10.filename
        build_fake_cifar10(cifar_path, rng)
        cifar = local_remote(data.CIFAR10, cifar_path)
        dataset, first = timed(data.load_cifar10, data_dir, remote=cifar, offline=True)
        report("CIFAR-10 first load (verify + parse + cache)", first)
        del dataset
        dataset, cached = timed(data.load_cifar10, data_dir, remote=cifar, offline=True)
        report("CIFAR-10 cached load (60k images to float32)", cached, CIFAR_CACHED_TARGET_S)
        report_fresh_processes("CIFAR-10 cached load, fresh process (median)", "load_cifar10", data_dir, cifar,
                               CIFAR_CACHED_TARGET_S)
        print(f"    x_train {dataset.x_train.shape} {dataset.x_train.dtype}, "
              f"x_test {dataset.x_test.shape} {dataset.x_test.dtype}")
        del dataset

        print("building a full-size fake imdb.npz (50k reviews)...", flush=True)
        imdb_path = data_dir / data.IMDB.filename
        reviews = build_fake_imdb(imdb_path, rng)
        tokens = sum(len(review) for review in reviews)
        print(f"    {len(reviews)} reviews, {tokens / 1e6:.1f} M tokens, mean {tokens / len(reviews):.0f} per review")
        settings = hyperparams.settings("gru", "full")
        options = dict(vocabulary=settings.vocabulary, sequence_length=settings.sequence_length,
                       start_char=settings.start_char, oov_char=settings.oov_char, index_from=settings.index_from)
        _, preprocess = timed(data.preprocess_imdb, object_array(reviews), **options)
        report("preprocess_imdb on 50k reviews", preprocess, IMDB_PREPROCESS_TARGET_S)
        del reviews

        imdb = local_remote(data.IMDB, imdb_path)
        _, first = timed(data.load_imdb, data_dir, settings=settings, remote=imdb, offline=True)
        report("IMDB first load (verify + unpickle + preprocess)", first)
        dataset, cached = timed(data.load_imdb, data_dir, settings=settings, remote=imdb, offline=True)
        report("IMDB cached load", cached, IMDB_CACHED_TARGET_S)
        report_fresh_processes("IMDB cached load, fresh process (median)", "load_imdb", data_dir, imdb,
                               IMDB_CACHED_TARGET_S)
        print(f"    x_train {dataset.x_train.shape} {dataset.x_train.dtype}, "
              f"y_train {dataset.y_train.shape} {dataset.y_train.dtype}")


if __name__ == "__main__":
    main()
