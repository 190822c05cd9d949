"""Batching: cutting a split's ids into the segments a model reads, for training and for evaluation.

This module owns the order in which tokens reach a model. :func:`batchify` and :func:`iter_segments`
reproduce the reference's LMOrderedIterator (B contiguous streams, segments of tgt_len, optional
variable length drawn by :func:`varlen_length`) with a resumable position, so a resumed run reads
exactly the segments it would have read. :func:`eval_segments` scores every token of a split exactly
once, remainder included (or, on request, exactly the targets the reference's evaluation scores).
It works on plain id arrays and knows nothing of where they came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from txlab.errors import TxlabError


def batchify(data: np.ndarray, batch_size: int) -> np.ndarray:
    """[B, n] view: B contiguous streams, stream b = data[b*n : (b+1)*n]; the last len % B tokens dropped."""
    n = len(data) // batch_size if batch_size > 0 else 0
    if n < 2:
        raise TxlabError(f"cannot cut {len(data)} tokens into {batch_size} streams of at least 2 tokens")
    return data[: n * batch_size].reshape(batch_size, n)


class Segment(NamedTuple):
    inputs: np.ndarray
    """[B, T] int64 ids."""
    targets: np.ndarray
    """[B, T] int64: the next token of each input."""
    position: int
    """Column of the streams where these inputs start."""
    next_position: int
    """Where the following segment starts: save it to resume with ``iter_segments(start=...)``."""


def varlen_length(tgt_len: int, position: int, seed: int, std: float = 5.0, min_len: int = 5, max_deviation: float = 3.0) -> int:
    """The reference's variable segment length: N(tgt_len, std) with probability 0.95, else
    N(tgt_len / 2, std); clipped to [min_len, tgt_len + max_deviation * std].

    Drawn from a generator seeded by (seed, position), so a resumed run draws the same lengths.
    """
    rng = np.random.default_rng([seed, position])
    mean = tgt_len if rng.random() < 0.95 else tgt_len / 2.0
    return int(min(tgt_len + max_deviation * std, max(min_len, int(rng.normal(mean, std)))))


def iter_segments(streams: np.ndarray, tgt_len: int, start: int = 0, varlen: bool = False, seed: int = 0) -> Iterator[Segment]:
    """Consecutive segments of [B, n] streams, from column ``start`` to the end (the last may be shorter).

    Segment i covers columns [p, p + T) as inputs and [p + 1, p + T + 1) as targets, so every target
    column 1 .. n-1 is visited once per pass. With ``varlen`` T is drawn by :func:`varlen_length`.
    """
    if tgt_len <= 0:
        raise TxlabError(f"segment length must be positive, got {tgt_len}")
    n = streams.shape[1]
    position = start
    while position < n - 1:
        length = varlen_length(tgt_len, position, seed) if varlen else tgt_len
        length = min(length, n - 1 - position)
        inputs = np.asarray(streams[:, position : position + length], dtype=np.int64)
        targets = np.asarray(streams[:, position + 1 : position + 1 + length], dtype=np.int64)
        yield Segment(inputs, targets, position, position + length)
        position += length


class EvalSegment(NamedTuple):
    inputs: np.ndarray
    """[B, T] int64 ids (0 where padded)."""
    targets: np.ndarray
    """[B, T] int64 (0 where padded)."""
    mask: np.ndarray
    """[B, T] bool: True for real targets; sum losses only where True."""
    target_index: np.ndarray
    """[B, T] int64: the position in the split of each target (-1 where padded)."""


def eval_segments(data: np.ndarray, batch_size: int, tgt_len: int, reference_streams: bool = False) -> Iterator[EvalSegment]:
    """Segments that score every token of ``data`` except the first exactly once, remainder included.

    The len(data) - 1 targets are cut into B contiguous streams of ceil((len - 1) / B) targets; the
    last stream is shorter and padded at its end (padding comes after every real token of its stream,
    so causal models give the real tokens the same losses). Each stream starts from a fresh state.

    ``reference_streams``: the streams of the authors' eval.py instead (:func:`batchify`): B streams
    of len // B tokens, the last len % B tokens dropped, each stream's first token read but not
    scored. That leaves B - 1 targets at the stream boundaries and the dropped tail unscored.
    """
    if tgt_len <= 0 or batch_size <= 0:
        raise TxlabError(f"batch size and segment length must be positive, got {batch_size} and {tgt_len}")
    n_targets = len(data) - 1
    if n_targets < 1:
        raise TxlabError(f"cannot evaluate a split of {len(data)} token(s)")
    batch = min(batch_size, n_targets)
    if reference_streams:
        stream_len = batchify(data, batch).shape[1]
        index = np.arange(batch)[:, None] * stream_len + np.arange(stream_len - 1)  # [B, n - 1] input positions
        mask = np.ones(index.shape, dtype=bool)
    else:
        per_stream = -(-n_targets // batch)
        index = np.arange(batch)[:, None] * per_stream + np.arange(per_stream)  # [B, n] input positions
        mask = index < n_targets
        index = np.where(mask, index, 0)
    per_stream = index.shape[1]
    for lo in range(0, per_stream, tgt_len):
        cols = slice(lo, min(lo + tgt_len, per_stream))
        where, real = index[:, cols], mask[:, cols]
        yield EvalSegment(
            np.where(real, np.asarray(data[where], dtype=np.int64), 0),
            np.where(real, np.asarray(data[where + 1], dtype=np.int64), 0),
            real,
            np.where(real, where + 1, -1),
        )
