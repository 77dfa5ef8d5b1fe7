"""IMDB from Keras's imdb.npz, preprocessed and ordered exactly as keras.datasets.imdb.load_data does.

imdb.npz holds its reviews as object arrays, which numpy can only read by unpickling. So the file
is unpickled once, from bytes whose published digest was checked in this process right before
(``read_verified``), and converted into a cache that needs no pickle: per split, every review's
word ids back to back (``<split>_tokens``, int32), where each review starts (``<split>_offsets``,
int64, one more than the reviews) and the labels (``<split>_labels``, int64). Every later load,
the preprocessing for any settings, and the containers (which mount the data read-only) read
only that cache, with ``allow_pickle=False``.
"""
import io
import itertools
import os
import pathlib
import pickle
import zlib
from typing import List, Optional, Sequence, Union

import numpy as np

from .cache import read_cache, write_cache
from .checksum import read_verified
from .dataset import Dataset
from .download import fetch
from .errors import DataError, describe
from .published import IMDB, RemoteFile

# keras.datasets.imdb.load_data shuffles train, then test, with one RandomState(113).
_KERAS_IMDB_SHUFFLE_SEED = 113
_IMDB_SPLITS = ("train", "test")
_REVIEW_ARRAYS = tuple(f"{split}_{part}" for split in _IMDB_SPLITS for part in ("tokens", "offsets", "labels"))


def load_imdb(data_dir: Union[str, os.PathLike], *, settings, remote: RemoteFile = IMDB, offline: bool = False) -> Dataset:
    """IMDB as Keras preprocesses it: x int32 (N, sequence_length), y int64; 25k train / 25k test.

    Rows come in the order of ``keras.datasets.imdb.load_data`` (seed 113), so the file's
    sorted-by-label order never reaches a capped evaluation.
    """
    data_dir = pathlib.Path(data_dir)
    options = imdb_options(settings)
    cache_dir = data_dir / "cache" / ("imdb-{}-v{vocabulary}-len{sequence_length}-start{start_char}-oov{oov_char}"
                                      "-from{index_from}".format(remote.digest.lower()[:12], **options))
    fetch(remote, data_dir, offline=offline)
    arrays = read_cache(data_dir, cache_dir, lambda found: _check_imdb_arrays(found, options["sequence_length"]))
    if arrays is None:
        arrays = _preprocess_reviews(load_imdb_reviews(data_dir, remote=remote, offline=True), options)
        write_cache(data_dir, cache_dir, arrays)
    return Dataset(x_train=np.array(arrays["x_train"]), y_train=np.array(arrays["y_train"]),
                   x_test=np.array(arrays["x_test"]), y_test=np.array(arrays["y_test"]),
                   source="real", checksum=f"{remote.algorithm}:{remote.digest.lower()}")


def imdb_options(settings) -> dict:
    """The GRU settings that shape the preprocessed reviews (they also key the cache)."""
    return {name: getattr(settings, name)
            for name in ("vocabulary", "sequence_length", "start_char", "oov_char", "index_from")}


def load_imdb_reviews(data_dir: Union[str, os.PathLike], *, remote: RemoteFile = IMDB, offline: bool = False) -> dict:
    """The raw reviews in the pickle-free layout (``<split>_tokens``, ``_offsets``, ``_labels``; file order).

    Read from the converted cache; when it is absent or unusable, converted from imdb.npz after
    verifying its full digest on the bytes that are then unpickled (the stamp is not enough there).
    """
    data_dir = pathlib.Path(data_dir)
    archive = fetch(remote, data_dir, offline=offline)
    cache_dir = data_dir / "cache" / f"imdb-reviews-{remote.digest.lower()[:12]}"
    arrays = read_cache(data_dir, cache_dir, _check_review_arrays, names=_REVIEW_ARRAYS)
    if arrays is None:
        arrays = _convert_imdb_archive(remote, archive)
        write_cache(data_dir, cache_dir, arrays)
    return arrays


def reviews_of(tokens: np.ndarray, offsets: np.ndarray) -> List[np.ndarray]:
    """One split's reviews back as one array of word ids each."""
    return [tokens[start:end] for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def _convert_imdb_archive(remote: RemoteFile, archive: pathlib.Path) -> dict:
    try:
        content = read_verified(remote, archive)  # the digest of exactly these bytes is the published one
    except OSError as error:  # unreadable, or swapped for a link or a FIFO since fetch checked it
        raise DataError(f"{remote.name}: cannot read {archive} ({describe(error)}); "
                        f"delete it and run again to download it afresh") from None
    try:
        # allow_pickle is safe here only because `content` was verified just above, in this process.
        with np.load(io.BytesIO(content), allow_pickle=True) as npz:
            raw = {name: npz[name] for name in ("x_train", "y_train", "x_test", "y_test")}
        arrays = {}
        for split in _IMDB_SPLITS:
            tokens, offsets = _flatten_reviews(raw[f"x_{split}"])
            labels = np.asarray(raw[f"y_{split}"], dtype=np.int64)
            if labels.shape != (len(offsets) - 1,):
                raise ValueError(f"{len(offsets) - 1} {split} reviews but labels of shape {labels.shape}")
            arrays.update({f"{split}_tokens": tokens, f"{split}_offsets": offsets, f"{split}_labels": labels})
    except (KeyError, ValueError, TypeError, OverflowError, OSError, EOFError, pickle.UnpicklingError,
            zlib.error) as error:
        raise DataError(f"{remote.name}: cannot read {archive} as a Keras imdb.npz ({describe(error)}); "
                        f"delete it and run again to download it afresh") from None
    return arrays


def _flatten_reviews(reviews: Sequence[Sequence[int]]) -> tuple:
    """Word ids back to back (int32) and where each review starts (int64, len(reviews) + 1)."""
    lengths = np.fromiter((len(review) for review in reviews), dtype=np.int64, count=len(reviews))
    offsets = np.zeros(len(reviews) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    words = np.fromiter(itertools.chain.from_iterable(reviews), dtype=np.int64, count=int(offsets[-1]))
    if words.size and (words.min() < 0 or words.max() > np.iinfo(np.int32).max):
        raise ValueError(f"word ids outside 0..{np.iinfo(np.int32).max}")
    return words.astype(np.int32), offsets


def _check_review_arrays(arrays: dict) -> bool:
    for split in _IMDB_SPLITS:
        tokens, offsets, labels = (arrays[f"{split}_{part}"] for part in ("tokens", "offsets", "labels"))
        if not (tokens.dtype == np.int32 and tokens.ndim == 1 and offsets.dtype == np.int64 and offsets.ndim == 1
                and labels.dtype == np.int64 and labels.shape == (len(offsets) - 1,) and len(offsets) >= 1
                and offsets[0] == 0 and offsets[-1] == len(tokens) and bool(np.all(np.diff(offsets) >= 0))):
            return False
    return True


def _preprocess_reviews(reviews: dict, options: dict) -> dict:
    """Keras's preprocessing of both splits, rows shuffled as keras.datasets.imdb.load_data does."""
    shuffle = np.random.RandomState(_KERAS_IMDB_SHUFFLE_SEED)
    arrays = {}
    for split in _IMDB_SPLITS:
        offsets = np.asarray(reviews[f"{split}_offsets"])
        order = np.arange(len(offsets) - 1)
        shuffle.shuffle(order)
        arrays[f"x_{split}"] = _preprocess_flat(np.asarray(reviews[f"{split}_tokens"]), offsets, options)[order]
        arrays[f"y_{split}"] = np.asarray(reviews[f"{split}_labels"], dtype=np.int64)[order]
    return arrays


def _preprocess_flat(tokens: np.ndarray, offsets: np.ndarray, options: dict) -> np.ndarray:
    """preprocess_imdb on reviews stored back to back: only each review's surviving tail is gathered."""
    lengths = np.diff(offsets)
    kept = np.minimum(lengths, options["sequence_length"])
    tail_starts = offsets[1:] - kept
    rank = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    flat_words = tokens[np.repeat(tail_starts, kept) + rank].astype(np.int64)
    return pad_flat_reviews(flat_words, kept, lengths, **options)


def preprocess_imdb(sequences: Sequence[Sequence[int]], *, vocabulary: int, sequence_length: int,
                    start_char: Optional[int], oov_char: int, index_from: int) -> np.ndarray:
    """Keras preprocessing, vectorised: ``[start_char] + [w + index_from ...]``, indices
    ``>= vocabulary`` → ``oov_char``, keep the last ``sequence_length`` tokens, zero-pad at the end.

    Returns int32 (len(sequences), sequence_length).
    """
    lengths = np.fromiter((len(review) for review in sequences), dtype=np.int64, count=len(sequences))
    # Only a review's last sequence_length words can survive truncation, so only those are flattened:
    # this halves the Python-level work on real IMDB, whose reviews average ~230 words.
    kept_lengths = np.minimum(lengths, sequence_length)
    tails = (review[len(review) - sequence_length:] if len(review) > sequence_length else review
             for review in sequences)
    if len(sequences) and all(isinstance(review, np.ndarray) for review in sequences):
        flat_words = np.concatenate([np.asarray(tail, dtype=np.int64) for tail in tails] or [np.zeros(0, np.int64)])
    else:
        flat_words = np.fromiter(itertools.chain.from_iterable(tails), dtype=np.int64, count=int(kept_lengths.sum()))
    return pad_flat_reviews(flat_words, kept_lengths, lengths, vocabulary=vocabulary,
                            sequence_length=sequence_length, start_char=start_char, oov_char=oov_char,
                            index_from=index_from)


def pad_flat_reviews(flat_words: np.ndarray, flat_lengths: np.ndarray, full_lengths: np.ndarray, *,
                     vocabulary: int, sequence_length: int, start_char: Optional[int], oov_char: int,
                     index_from: int) -> np.ndarray:
    """Scatter concatenated reviews into padded rows without a per-review loop.

    ``flat_words`` holds each review's last ``flat_lengths[i]`` raw words back to back;
    ``full_lengths[i]`` is the review's length before that cut (it decides whether the start
    character survives truncation).
    """
    reviews = len(full_lengths)
    output = np.zeros((reviews, sequence_length), dtype=np.int32)
    if reviews == 0 or sequence_length == 0:
        return output
    has_start = start_char is not None
    token_counts = full_lengths + (1 if has_start else 0)  # tokens before truncation
    # The start character survives only when the whole review fits after it.
    start_kept = token_counts <= sequence_length if has_start else np.zeros(reviews, dtype=bool)
    words_kept = np.minimum(full_lengths, sequence_length - start_kept.astype(np.int64))
    # Within each review's flattened tail, the kept words are its last words_kept ones.
    tail_ends = np.cumsum(flat_lengths)
    total_kept = int(words_kept.sum())
    row_of_word = np.repeat(np.arange(reviews), words_kept)
    first_column = start_kept.astype(np.int64)
    # Rank of each kept word within its review: a running index minus where its review's run began.
    run_starts = np.cumsum(words_kept) - words_kept
    rank = np.arange(total_kept) - np.repeat(run_starts, words_kept)
    source = np.repeat(tail_ends - words_kept, words_kept) + rank
    words = flat_words[source] + index_from
    words[words >= vocabulary] = oov_char
    output[row_of_word, np.repeat(first_column, words_kept) + rank] = words
    if has_start:
        output[start_kept, 0] = start_char if start_char < vocabulary else oov_char
    return output


def _check_imdb_arrays(arrays: dict, sequence_length: int) -> bool:
    return (arrays["x_train"].dtype == np.int32 and arrays["x_train"].ndim == 2
            and arrays["x_train"].shape[1] == sequence_length
            and arrays["x_test"].dtype == np.int32 and arrays["x_test"].ndim == 2
            and arrays["x_test"].shape[1] == sequence_length
            and arrays["y_train"].dtype == np.int64 and arrays["y_train"].shape == arrays["x_train"].shape[:1]
            and arrays["y_test"].dtype == np.int64 and arrays["y_test"].shape == arrays["x_test"].shape[:1])
