"""Strided collection for long contexts: a run of s targets read from one window, so a context lies in [c, c + s).

The exact methods (txlab.measure.losses) give every target exactly c tokens of context, at a cost of about
(T + c) x c (the window method) or T x c (one window per (c, t)) token-steps per c: (T + 32k) x 32k for a grid up to
32k. Researchers measuring perplexity against context length read strided instead, as here: the T targets of a
block are cut into consecutive runs of s, and each run is read ONCE, from a fresh state, starting c tokens before
its first target, t_first. Target t of the run is then predicted after c + (t - t_first) tokens, in [c, c + s), and
the block costs about T x (c / s + 1) token-steps (txlab.measure.collection.strided_cost). s is a whole number of
tokens, or a fraction of c (txlab.measure.collection.stride_tokens).

Each strided loss is exactly the exact loss of target t at context c + (t - t_first), read as the definition reads
it (the window starts at t - c - i and is chunked from there), provided a prediction does not depend on the tokens
after it in its window: the prefix-causal property the window method needs (txlab.measure.losses.is_prefix_causal).
A model without it is refused. A model with a maximum context L_max never reads past it: at c, runs are
min(s, L_max - c + 1) long, so contexts near the cap are exact.

Placebo under a stride: the step c -> c' is read run by run as the main table at c, with the far span of c' - c
tokens (txlab.measure.losses.far_starts of the run's near start) before each run's window, read once per run. Each
target's near part is then exactly its context in the main table at c, c + (t - t_first) tokens, and the cell is
the exact placebo loss of the step c + i -> c' + i (i = t - t_first). A placebo window that would pass a model's
L_max is refused (cutting it would move every run's start): collect such a model with placebo=false.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from txlab.errors import TxlabError
from txlab.measure.collection import stride_tokens
from txlab.measure.reading import (
    OnBatch,
    check_far,
    context_lengths,
    far_starts,
    read_fresh,
    target_nll,
)
from txlab.models.interface import LanguageModel


def run_lengths(lengths: Sequence[int], stride: float, max_context: int | None) -> np.ndarray:
    """Targets per run at each context length read (ascending, already capped): s, at most L_max - c + 1."""
    runs = [stride_tokens(stride, int(c)) for c in lengths]
    return np.array([min(r, max_context - int(c) + 1) if max_context else r for c, r in zip(lengths, runs)], dtype=np.int64)


def strided_rows(model: LanguageModel, tokens: np.ndarray, lengths: Sequence[int], runs: Sequence[int], extras: Sequence[int],
                 start: int, stop: int, chunk_len: int | None, batch_size: int, offset: int, on_batch: OnBatch | None = None) -> np.ndarray:
    """Losses [len(lengths), stop - start]: row j reads the targets of [start, stop) in runs of runs[j], each run's window
    the far span of extras[j] tokens (none when 0) then x[t_first - c : t_last], c = lengths[j], from a fresh state in
    chunks of ``chunk_len``; target t_first + i is scored after the far span and c + i near tokens."""
    n = len(tokens)
    out = np.full((len(lengths), stop - start), np.nan, dtype=np.float32)
    for j, (c, r, extra) in enumerate(zip(map(int, lengths), map(int, runs), map(int, extras))):
        firsts = np.arange(start, stop, r)  # [R] each run's first target
        sizes = np.minimum(r, stop - firsts)  # [R] the block's last run may be shorter
        for size in np.unique(sizes).tolist():  # runs of one size share a window length, so they batch
            group = firsts[sizes == size]
            for b in range(0, len(group), batch_size):
                first = group[b : b + batch_size]  # [B]
                windows = tokens[(first - c)[:, None] + np.arange(c + size - 1)].astype(np.int64)  # [B, c + size - 1]
                if extra:
                    far = far_starts(n, first - c, extra, offset)  # [B]: where the exact placebo of each run's first target reads
                    check_far(n, far, first - c, first + size - 1, extra)
                    windows = np.concatenate([tokens[far[:, None] + np.arange(extra)].astype(np.int64), windows], axis=1)  # [B, extra + c + size - 1]
                hidden = read_fresh(model, windows, chunk_len)  # [B, L, d]
                rows = hidden[:, extra + c - 1 :].reshape(-1, hidden.size(-1))  # [B * size, d]: after c + i near tokens, i < size
                t = (first[:, None] + np.arange(size)).reshape(-1)  # [B * size], in the order of rows
                out[j, t - start] = target_nll(model, rows, tokens[t])
                if on_batch:
                    on_batch(len(first))
    assert not np.isnan(out).any(), "a strided (c, t) cell was never scored"
    return out


def strided_block_losses(model: LanguageModel, tokens: np.ndarray, grid: Sequence[int], stride: float, start: int, stop: int,
                         chunk_len: int | None, batch_size: int, on_batch: OnBatch | None = None, *, placebo: bool = False,
                         offset: int = 0) -> np.ndarray:
    """One block's strided table [G, stop - start] (grid values past a model's cap share its L_max column, as the exact
    table does), or with ``placebo`` its [G-1, stop - start] placebo losses, far spans ``offset`` away (the block's
    own, txlab.measure.reading.placebo_offsets), each step c -> c' read in the runs of the main table at c."""
    lengths, column = context_lengths(grid, model.max_context)
    runs = run_lengths(lengths, stride, model.max_context)
    if not placebo:
        return strided_rows(model, tokens, lengths, runs, [0] * len(lengths), start, stop, chunk_len, batch_size, offset, on_batch)[column]
    near = [int(lengths[k]) for k in column[:-1]]
    near_runs = [int(runs[k]) for k in column[:-1]]
    extras = [c2 - c for c, c2 in zip(grid, grid[1:])]
    check_placebo_fits(near, near_runs, extras, model.max_context)
    return strided_rows(model, tokens, near, near_runs, extras, start, stop, chunk_len, batch_size, offset, on_batch)


def check_placebo_fits(near: Sequence[int], runs: Sequence[int], extras: Sequence[int], max_context: int | None) -> None:
    """Refuse strided placebo windows (extra + c + run - 1 tokens) longer than a model's maximum context."""
    longest = max(e + c + r - 1 for c, r, e in zip(near, runs, extras))
    if max_context and longest > max_context:
        raise TxlabError(f"strided placebo windows of up to {longest} tokens pass this model's maximum context of {max_context}: "
                         "collect it with --set placebo=false, or a grid whose steps and stride stay within it")


def strided_windows(grid: Sequence[int], stride: float, block_len: int, max_context: int | None, placebo: bool) -> int:
    """Windows :func:`strided_block_losses` reads for one block (its progress): one per run."""
    lengths, column = context_lengths(grid, max_context)
    runs = run_lengths(lengths, stride, max_context)
    rows = runs[column[:-1]] if placebo else runs
    return int(sum(-(-block_len // int(r)) for r in rows))
