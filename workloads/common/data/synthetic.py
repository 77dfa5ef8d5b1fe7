"""Synthetic stand-ins shaped like the real datasets, with a signal a model can learn; random images."""
from typing import Iterable

import numpy as np

from .dataset import Dataset
from .imdb import imdb_options, pad_flat_reviews

_SYNTHETIC_BLOCK = 2048


def synthetic_cifar10(n_train: int, n_test: int, *, seed: int) -> Dataset:
    """CIFAR-10-shaped data with a learnable signal: a smooth per-class colour/spatial pattern in noise."""
    rng = np.random.default_rng(seed)
    classes = 10
    # 4x4 blocks of colour per class, upsampled to 32x32: coarse enough for any CNN to pick up.
    coarse = rng.random((classes, 3, 4, 4), dtype=np.float32)
    patterns = coarse.repeat(8, axis=2).repeat(8, axis=3)

    def split(count: int):
        labels = _balanced_labels(rng, count, classes)
        images = np.empty((count, 3, 32, 32), dtype=np.float32)
        # In blocks, so the full-size set (600 MB) needs no full-size temporaries.
        for start in range(0, count, _SYNTHETIC_BLOCK):
            block = images[start:start + _SYNTHETIC_BLOCK]
            rng.random(dtype=np.float32, out=block)
            block *= np.float32(0.6)
            block += np.float32(0.4) * patterns[labels[start:start + _SYNTHETIC_BLOCK]]
            np.clip(block, 0.0, 1.0, out=block)
        return images, labels

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(x_train, y_train, x_test, y_test, source="synthetic", checksum=None)


def synthetic_imdb(n_train: int, n_test: int, *, settings, seed: int) -> Dataset:
    """IMDB-shaped data with a learnable signal: shared Zipf-like words plus class "sentiment" words.

    Reviews of random length go through the same truncation/padding as the real data.
    """
    options = imdb_options(settings)
    rng = np.random.default_rng(seed)
    # Raw (unshifted) word ids, as in imdb.npz: 1 is the most frequent word. Some exceed the
    # vocabulary so that out-of-vocabulary tokens appear too.
    raw_vocabulary = max(int(options["vocabulary"] * 1.5), 10)
    in_vocabulary = max(options["vocabulary"] - options["index_from"], 2)
    sentiment_words = rng.choice(np.arange(1, in_vocabulary), size=(2, 40), replace=False)

    def split(count: int):
        labels = _balanced_labels(rng, count, 2)
        # Lengths spread like real reviews: median ~175 words, a long tail, at least 10.
        lengths = np.clip(rng.lognormal(mean=5.15, sigma=0.7, size=count), 10, 2500).astype(np.int64)
        total = int(lengths.sum())
        # Log-uniform ids: P(id) ~ 1/id, Zipf's law for word frequencies, and fast to draw.
        words = np.exp(rng.random(total) * np.log(raw_vocabulary)).astype(np.int64)
        review_of_word = np.repeat(np.arange(count), lengths)
        sentiment = rng.random(total) < 0.08
        choices = rng.integers(0, sentiment_words.shape[1], size=int(sentiment.sum()))
        words[sentiment] = sentiment_words[labels[review_of_word[sentiment]], choices]
        # A review's tail is what survives truncation; cut it out of the flat array without a loop.
        kept = np.minimum(lengths, options["sequence_length"])
        ends = np.cumsum(lengths)
        keep = np.arange(total) >= np.repeat(ends - kept, lengths)
        images = pad_flat_reviews(words[keep], kept, lengths, **options)
        return images, labels

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(x_train, y_train, x_test, y_test, source="synthetic", checksum=None)


def _balanced_labels(rng: np.random.Generator, count: int, classes: int) -> np.ndarray:
    """Every class equally often (±1), in random order."""
    return rng.permutation(np.arange(count, dtype=np.int64) % classes)


def random_images(count: int, shape: Iterable[int], *, seed: int) -> np.ndarray:
    """float32 (count, *shape), uniform in [0, 1), from ``np.random.default_rng(seed)``."""
    return np.random.default_rng(seed).random((count, *tuple(shape)), dtype=np.float32)
