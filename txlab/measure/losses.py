"""Per-token losses at controlled context lengths: the loss tables that txlab.analysis.recl reads.

What is measured
----------------
l(c, t) = -ln P(x_t | x_{t-c} .. x_{t-1}), in nats, with exactly c tokens of context and a fresh
state, for every c of a grid (default 100, 200, ..., 1000) and every target t of some contiguous
blocks of a token stream. "Reading c tokens" follows docs/recl.md and uses only the
LanguageModel interface, never the model family:

- The c tokens are fed from ``model.init_state`` (txlab.measure.reading) in chunks of the model's *evaluation* segment
  length (tgt_len), carrying the state, with the evaluation mem_len / same_length / clamp_len set
  through ``model.set_context``. The first chunk starts at x_{t-c}; the last one ends at x_{t-1}
  (it may be short). For Transformer-XL this is "empty memory at t-c, then stream the c tokens in
  segments", so recurrence may reach back beyond mem_len, as it does when the model is evaluated.
  With same_length (the paper's evaluation setting) the chunk length does not even matter: every
  query attends to the keys at distances 0 .. mem_len-1 of each layer, which the memory always holds.
- A model without memory (``context.mem_len == 0``: XL without recurrence, the vanilla
  Transformer) reads the c tokens as one segment. RNNs carry their state exactly, so their chunking
  does not matter.
- A model with a maximum context L_max (``model.max_context``, the vanilla Transformer) reads
  min(c, L_max) tokens: l(c, t) = l(L_max, t) for c > L_max. Its table stores l(L_max, t) in every
  such column, computed once, so txlab.analysis.recl can report min(RECL, L_max) even when L_max is not a
  grid value (the paper's 128).

The window method (how it is computed, exactly)
----------------------------------------------
Reading the window x[s : s + c_max] from a fresh state, the prediction after k + 1 tokens is
l(k + 1, s + k + 1): the window *is* the definition's stream for every pair (c, t) with t - c = s,
chunk grid included, because its chunks are laid from s = t - c just as the definition lays them
from x_{t-c}. A given t gets its different c from different windows (s = t - c), each chunked from
its own start, so no chunk alignment is shared between context lengths. Windows starting at every
s in [t0 - c_max, t1 - c_min) give the whole [c, t] table of the target block [t0, t1) in one sweep,
each read only to the longest c whose target s + c lies in the block: at most (T + c_max) * c_max token-steps
instead of T * sum(c) for one window per (c, t).

Exactness needs one property: a prediction must not depend on the tokens *after* it in the window
(the rest of its chunk, later chunks). Causal attention and a memory of the past give that for
relative encodings (the paper's and Shaw's), for the vanilla Transformer (positions counted from the
window start) and for RNNs. Transformer-XL with absolute positions counts them back from the last
token of each chunk, so the length of a short last chunk moves every position; such a model fails
:func:`is_prefix_causal` and is collected per context length instead (one window x[t-c : t] per
(c, t)), exact by construction and ``sum(c) / (c_max + c_max^2 / T)`` times slower.

Only the target's log-probability at the needed rows is computed (``model.log_prob`` on the hidden
states of those rows), in float32 or float64: noise in l turns into spurious gain through RECL's min().
The forward passes run in the precision asked for (a run's ``eval.precision``, fp32 by default; under
bf16 or fp16 autocast the log-softmax stays fp32, txlab.precision), recorded as ``precision`` in meta.json.

Which method: ``auto`` takes the exact one that reads fewer token-steps for the grid and block
(txlab.measure.collection.cheaper_method). The window method reads each window to its own longest needed
context (txlab.measure.collection.window_runs), so it never reads more than one window per (c, t), and as
much on a sparse grid whose every gap is at least the block. A table on disk keeps the method it began with.

Placebo
-------
For a step c -> c', :func:`placebo_block_losses` scores x_t after a context whose nearest c tokens
are the true x_{t-c} .. x_{t-1} and whose extra c' - c tokens are a span of the same stream far
away: ``offset`` tokens after the window's start, wrapped, each target block at its own offset drawn by the
collection's seed in [n/4, 3n/4) (txlab.measure.reading.placebo_offsets, recorded as ``placebo_offsets`` in
meta.json), so the block bootstrap resamples where far spans were read. Fed to txlab.analysis.recl.placebo_gain it
should give ~0.
The far span depends only on the near part's start s = t - c and on its size c' - c, so for a
prefix-causal model the window "far span of s, then x[s : s + c_max]" serves every step of that size,
as the window method does for the main table (:func:`window_placebo_losses`); on a uniform grid the
placebo then costs a little less than the main table instead of about sum(c') / c_max times more.
Steps past a capped model's window, and models that are not prefix-causal, are read one window per
(c, t) (:func:`naive_placebo_losses`, the definition).

Strided (opt-in, for long contexts)
-----------------------------------
With a collection's ``stride``, a block's targets are read in runs of s, each run once from c tokens before its first
target, so a target's context lies in [c, c + s): about T x (c / s + 1) token-steps per c (txlab.measure.strided,
which also says how placebo is read then). Prefix-causal models only; the table has the same shape.

On disk
-------
``run_dir/losses/<split>-<key>/`` where key = 12 hex digits of the sha256 of (token stream, grid,
target blocks, and the stride when there is one), so every model of a group scored on the same targets uses the same name:

    meta.json            split, token_stream_sha256, grid, block_starts, block_len, seed, the model's
                         max_context, the evaluation settings (tgt_len, context, precision), method,
                         placebo_method (absent in tables written before it: read as naive), stride
                         (only in a strided table, whose methods are "strided"), model step
    block-00000.npy      float32 [G, block_len]: l(grid[j], block_start + i), nats
    placebo-00000.npy    float32 [G-1, block_len]: placebo losses of step grid[j] -> grid[j+1]

Each block is written atomically once it is complete; rerunning skips finished blocks, so an
interrupted collection resumes where it stopped and every (model, c, t) is computed exactly once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from txlab.data.corpus import Corpus, load_corpus, load_corpus_for_model
from txlab.errors import TxlabError
from txlab.fileio import load_npy, read_json, write_atomic, write_json_atomic
from txlab.measure.collection import (
    METHODS,
    Collection,
    cheaper_method,
    check_stride,
    placebo_groups,
    window_runs,
)
from txlab.measure.reading import (
    OnBatch,
    ScoredCells,
    check_far,
    chunk_length,
    context_lengths,
    far_starts,
    gather_windows,
    is_prefix_causal,
    placebo_offsets,
    read_fresh,
    target_nll,
)
from txlab.measure.strided import strided_block_losses, strided_windows
from txlab.models.compiled import compiled_layers
from txlab.models.interface import Context, LanguageModel
from txlab.precision import check_precision, scoring_precision
from txlab.progress import Progress
from txlab.runs.capacity import check_fits
from txlab.runs.checkpoint import read_meta, saved_config, saved_vocab
from txlab.runs.evaluate import using_context
from txlab.runs.scored import ScoredModel, load_model

# --------------------------------------------------------------------------------------------------
# One block of targets, three ways


def window_batches(lengths: np.ndarray, start: int, stop: int, batch_size: int, on_batch: OnBatch | None) -> Iterator[tuple[np.ndarray, int]]:
    """The window method's batches for targets [start, stop): window starts [B] and the one length they are all read to,
    each window's own longest needed context (txlab.measure.collection.window_runs, which the plans count). Windows that
    serve no target are not read, only counted to ``on_batch`` with the rest, so the progress covers every start."""
    unread = stop - start + int(lengths[-1] - lengths[0])
    for first, count, n_read in window_runs(lengths.tolist(), stop - start):
        first += start
        for s0 in range(first, first + count, batch_size):
            starts = np.arange(s0, min(s0 + batch_size, first + count))
            yield starts, n_read
            unread -= len(starts)
            if on_batch:
                on_batch(len(starts))
    if on_batch and unread:
        on_batch(unread)


def window_block_losses(
    model: LanguageModel, tokens: np.ndarray, lengths: np.ndarray, start: int, stop: int,
    chunk_len: int | None, batch_size: int, on_batch: OnBatch | None = None,
) -> np.ndarray:
    """l(c, t) [C, stop - start] for every c in ``lengths`` (ascending) and t in [start, stop), by
    the window method: one fresh window per start s, each serving every (c, s + c) in the block."""
    scored = ScoredCells((len(lengths), stop - start))
    for starts, n_read in window_batches(lengths, start, stop, batch_size, on_batch):
        windows = gather_windows(tokens, int(starts[0]), len(starts), n_read, end=stop - 1)  # [B, n_read]
        hidden = read_fresh(model, windows, chunk_len)  # [B, n_read, d]
        targets = starts[:, None] + lengths[None, :]  # [B, C]: x_t predicted after reading c tokens
        b_idx, c_idx = np.nonzero((targets >= start) & (targets < stop))
        t = targets[b_idx, c_idx]
        scored.add(model, hidden, b_idx, lengths[c_idx] - 1, (c_idx, t - start), tokens[t])
    return scored.table()


def naive_block_losses(
    model: LanguageModel, tokens: np.ndarray, lengths: np.ndarray, start: int, stop: int,
    chunk_len: int | None, batch_size: int, on_batch: OnBatch | None = None,
) -> np.ndarray:
    """The same [C, stop - start] table with one window x[t-c : t] per (c, t): T * sum(c) token-steps."""
    out = np.empty((len(lengths), stop - start), dtype=np.float32)
    for ci, c in enumerate(lengths.tolist()):
        for t0 in range(start, stop, batch_size):
            t = np.arange(t0, min(t0 + batch_size, stop))  # [B]
            windows = gather_windows(tokens, t0 - c, len(t), c, end=stop - 1)  # [B, c]: x_{t-c} .. x_{t-1}
            hidden = read_fresh(model, windows, chunk_len)  # [B, c, d]
            out[ci, t - start] = target_nll(model, hidden[:, -1], tokens[t])
            if on_batch:
                on_batch(len(t))
    return out


def naive_placebo_losses(
    model: LanguageModel, tokens: np.ndarray, steps: Sequence[tuple[int, int]], start: int, stop: int,
    chunk_len: int | None, batch_size: int, offset: int, on_batch: OnBatch | None = None,
) -> np.ndarray:
    """Placebo losses [len(steps), stop - start], the definition read one window per (c, t): row j scores x_t
    after a context of c' tokens (steps[j] = (c, c')) whose nearest c are x_{t-c} .. x_{t-1} and whose extra
    c' - c are the far span (:func:`far_starts`). A capped model sees only the nearest L_max tokens of it."""
    n = len(tokens)
    out = np.empty((len(steps), stop - start), dtype=np.float32)
    for j, (c, c2) in enumerate(steps):
        extra = c2 - c
        for t0 in range(start, stop, batch_size):
            t = np.arange(t0, min(t0 + batch_size, stop))  # [B]
            far = far_starts(n, t - c, extra, offset)  # [B]
            check_far(n, far, t - c, t, extra)
            distant = tokens[far[:, None] + np.arange(extra)].astype(np.int64)  # [B, extra]
            near = gather_windows(tokens, t0 - c, len(t), c, end=stop - 1)  # [B, c]
            windows = np.concatenate([distant, near], axis=1)  # [B, c2]
            if model.max_context:
                windows = windows[:, -model.max_context :]  # a capped model sees only the nearest L_max
            hidden = read_fresh(model, windows, chunk_len)
            out[j, t - start] = target_nll(model, hidden[:, -1], tokens[t])
            if on_batch:
                on_batch(len(t))
    return out


def window_placebo_losses(
    model: LanguageModel, tokens: np.ndarray, near: np.ndarray, extra: int, start: int, stop: int,
    chunk_len: int | None, batch_size: int, offset: int, on_batch: OnBatch | None = None,
) -> np.ndarray:
    """The placebo losses [len(near), stop - start] of the steps c -> c + extra for every c of ``near`` (ascending)
    by the window method: the window for near start s is the far span of s followed by x[s : s + c_max], and its
    prediction after extra + c tokens is the placebo loss of (c, s + c). Exact for a prefix-causal model, as
    :func:`window_block_losses` is, since the definition's window is this one's prefix, chunked from the same start."""
    n = len(tokens)
    scored = ScoredCells((len(near), stop - start))
    for starts, n_read in window_batches(near, start, stop, batch_size, on_batch):  # [B] near starts
        far = far_starts(n, starts, extra, offset)  # [B]
        distant = tokens[far[:, None] + np.arange(extra)].astype(np.int64)  # [B, extra]
        windows = np.concatenate([distant, gather_windows(tokens, int(starts[0]), len(starts), n_read, end=stop - 1)], axis=1)  # [B, extra + n_read]
        targets = starts[:, None] + near[None, :]  # [B, C]: x_t predicted after the far span and c near tokens
        b_idx, c_idx = np.nonzero((targets >= start) & (targets < stop))
        t = targets[b_idx, c_idx]
        check_far(n, far[b_idx], starts[b_idx], t, extra)
        hidden = read_fresh(model, windows, chunk_len)  # [B, extra + n_read, d]
        scored.add(model, hidden, b_idx, extra + near[c_idx] - 1, (c_idx, t - start), tokens[t])
    return scored.table()


def placebo_block_losses(
    model: LanguageModel, tokens: np.ndarray, grid: Sequence[int], start: int, stop: int,
    chunk_len: int | None, batch_size: int, method: str, offset: int, on_batch: OnBatch | None = None,
) -> np.ndarray:
    """Placebo losses [G-1, stop - start]: row j is the step grid[j] -> grid[j+1] (:func:`naive_placebo_losses`),
    far spans ``offset`` away (the block's own, txlab.measure.reading.placebo_offsets). With ``method`` window, each
    group of steps of one size (txlab.measure.collection.placebo_groups) is read by the cheaper exact method; with
    naive, one window per (c, t)."""
    out = np.empty((len(grid) - 1, stop - start), dtype=np.float32)
    groups, alone = placebo_groups(grid, model.max_context)
    steps = list(zip(grid, grid[1:]))
    if method == "naive":
        groups, alone = {}, tuple(range(len(steps)))
    for extra, near in groups.items():
        rows = [j for j, (c, c2) in enumerate(steps) if c2 - c == extra and j not in alone]  # in the order of near
        if cheaper_method(near, stop - start, extra) == "window":
            out[rows] = window_placebo_losses(model, tokens, np.asarray(near, dtype=np.int64), extra, start, stop, chunk_len, batch_size, offset, on_batch)
        else:
            out[rows] = naive_placebo_losses(model, tokens, [steps[j] for j in rows], start, stop, chunk_len, batch_size, offset, on_batch)
    if alone:
        out[list(alone)] = naive_placebo_losses(model, tokens, [steps[j] for j in alone], start, stop, chunk_len, batch_size, offset, on_batch)
    return out


# --------------------------------------------------------------------------------------------------
# Collection in memory


@contextmanager
def scoring(model: LanguageModel, context: Context, precision: str = "fp32", compile: str = "auto") -> Iterator[bool]:
    """Evaluation mode, no autograd, the given memory settings, forward passes in ``precision``
    (txlab.precision), the layers compiled where ``compile`` says so (txlab.models.compiled; yields whether they are).
    Weights in reduced precision are refused unless that precision is asked for (a user's explicit choice, recorded
    with the losses)."""
    check_precision(precision, model.device)
    dtype = next(model.parameters()).dtype
    if dtype not in (torch.float32, torch.float64) and precision == "fp32":
        raise TxlabError(f"losses for RECL need float32 or better (noise becomes gain through the min()); the model is {dtype}")
    was_training = model.training
    model.eval()
    try:
        with ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            stack.enter_context(using_context(model, context))
            stack.enter_context(scoring_precision(precision, model.device, dtype))
            yield stack.enter_context(compiled_layers(model, compile))
    finally:
        model.train(was_training)


def choose_method(model: LanguageModel, probe: np.ndarray, lengths: Sequence[int], chunk_len: int | None, method: str, block_len: int) -> str:
    """'window' or 'naive' for the main table, in tokens or in words alike: a method asked is kept; 'auto' picks the exact
    method that reads fewer steps for ``block_len`` targets at context ``lengths`` (txlab.measure.collection.cheaper_method),
    the window method only when the model is prefix-causal, probed (only then) on the tokens ``probe``, read whole."""
    if method not in METHODS:
        raise TxlabError(f"unknown collection method {method!r}; choose {', '.join(METHODS)}")
    if method != "auto":
        return method
    if cheaper_method([int(c) for c in lengths], block_len) == "naive":
        return "naive"
    return "window" if is_prefix_causal(model, probe, len(probe), chunk_len) else "naive"


def choose_placebo_method(model: LanguageModel, tokens: np.ndarray, lengths: np.ndarray, chunk_len: int | None, method: str) -> str:
    """'window' (each group of steps of one size by the cheaper exact method, :func:`placebo_block_losses`) or 'naive'
    (one window per (c, t)): 'auto' and 'window' take windows where the model is prefix-causal; 'naive' never does."""
    if method == "naive":
        return "naive"
    return "window" if is_prefix_causal(model, tokens, int(lengths[-1]), chunk_len) else "naive"


def check_strided(model: LanguageModel, tokens: np.ndarray, lengths: np.ndarray, chunk_len: int | None) -> str:
    """'strided', for a model whose predictions ignore the tokens after them in a window (:func:`is_prefix_causal`):
    a run of targets is read from one window, exact at each target's own context only then; others are refused."""
    if not is_prefix_causal(model, tokens, int(lengths[-1]), chunk_len):
        raise TxlabError("strided collection reads a run of targets from one window, which only a prefix-causal model allows "
                         "(this one's predictions move with the tokens after them, as Transformer-XL's absolute positions do): "
                         "collect it without a stride")
    return "strided"


def check_targets(n_tokens: int, grid: Sequence[int], block_starts: Sequence[int], block_len: int) -> None:
    """Every target t needs t - max(grid) >= 0 and t < n_tokens; blocks must not overlap."""
    if block_len < 1 or len(block_starts) == 0:
        raise TxlabError("need at least one target block of at least one target")
    starts = sorted(block_starts)
    if starts[0] < max(grid) or starts[-1] + block_len > n_tokens:
        raise TxlabError(f"target blocks must lie in [{max(grid)}, {n_tokens}) (the longest context needs {max(grid)} tokens before each target)")
    if any(b - a < block_len for a, b in zip(starts, starts[1:])):
        raise TxlabError("target blocks overlap")


def block_losses(
    model: LanguageModel, tokens: np.ndarray, grid: Sequence[int], start: int, block_len: int,
    chunk_len: int | None, batch_size: int, method: str, on_batch: OnBatch | None = None,
    *, placebo: bool = False, offset: int = 0, stride: float | None = None,
) -> np.ndarray:
    """The [G, block_len] table of one block (context already set): l(grid[j], start + i); with
    ``placebo``, the block's [G-1, block_len] placebo losses instead (:func:`placebo_block_losses`, far spans ``offset``
    away), ``method`` then being the placebo's. Method ``strided`` reads runs of ``stride`` targets (txlab.measure.strided)."""
    if method == "strided":
        return strided_block_losses(model, tokens, grid, stride, start, start + block_len, chunk_len, batch_size, on_batch,
                                    placebo=placebo, offset=offset)
    if placebo:
        return placebo_block_losses(model, tokens, grid, start, start + block_len, chunk_len, batch_size, method, offset, on_batch)
    lengths, column = context_lengths(grid, model.max_context)
    read = window_block_losses if method == "window" else naive_block_losses
    return read(model, tokens, lengths, start, start + block_len, chunk_len, batch_size, on_batch)[column]  # [G, T]


def collect_losses(
    model: LanguageModel,
    tokens: np.ndarray,
    grid: Sequence[int],
    block_starts: Sequence[int],
    block_len: int,
    *,
    tgt_len: int,
    context: Context,
    batch_size: int = 16,
    method: str = "auto",
    placebo: bool = False,
    offsets: Sequence[int] | None = None,
    progress: bool = False,
    precision: str = "fp32",
    compile: str = "auto",
    stride: float | None = None,
) -> np.ndarray:
    """l(c, t) for c in ``grid`` and the targets of the blocks, in memory: float32 [G, n_blocks * block_len];
    with ``placebo``, the placebo losses of every grid step instead (see :func:`placebo_block_losses`): float32
    [G-1, n_blocks * block_len], each block's far spans its own offset away, ``offsets[k]`` (default
    txlab.measure.reading.placebo_offsets of seed 0).

    ``tgt_len``, ``context`` and ``precision`` are the model's evaluation settings (see the module docstring);
    targets are ``block_starts[k] + i`` for i < block_len, block by block. ``stride``: strided contexts in
    [c, c + s) instead of exact ones (txlab.measure.strided; s tokens, or a fraction of c).
    """
    check_targets(len(tokens), grid, block_starts, block_len)
    check_token_ids(model, tokens, "the token stream")
    offsets = placebo_offsets(len(tokens), len(block_starts), 0, grid) if offsets is None else offsets
    if len(offsets) != len(block_starts):
        raise TxlabError(f"give one placebo offset per block: {len(offsets)} offsets for {len(block_starts)} blocks")
    if stride is not None:
        check_stride(stride, method)
    with scoring(model, context, precision, compile):
        chunk_len = chunk_length(model, tgt_len)
        lengths, _ = context_lengths(grid, model.max_context)
        if stride is not None:
            method = check_strided(model, tokens, lengths, chunk_len)
        else:
            method = (choose_placebo_method(model, tokens, lengths, chunk_len, method) if placebo
                      else choose_method(model, tokens[: int(lengths[-1])], lengths, chunk_len, method, block_len))
        with Progress(total=len(block_starts) * block_len, desc="losses", unit="target", disable=not progress, leave=False) as bar:
            tables = []
            for start, offset in zip(block_starts, offsets):
                tables.append(block_losses(model, tokens, grid, start, block_len, chunk_len, batch_size, method, placebo=placebo, offset=int(offset),
                                           stride=stride))
                bar.update(block_len)
    return np.concatenate(tables, axis=1)


# --------------------------------------------------------------------------------------------------
# Run directories: resumable collection, loading, groups


SAMPLE_UNITS = ("token", "word", "character")
"""What :func:`sample_blocks` may count: the unit a refusal speaks of, that of the stream the caller cut."""


def sample_blocks(n_tokens: int, n_blocks: int, block_len: int, min_start: int, seed: int = 0, unit: str = "token") -> np.ndarray:
    """Starts (ascending) of ``n_blocks`` non-overlapping blocks of ``block_len`` targets in
    [min_start, n_tokens): slots of block_len from min_start, drawn without replacement by seed. ``n_tokens`` counts
    ``unit`` (:data:`SAMPLE_UNITS`): the word path draws blocks of words, and its refusal must say words."""
    if unit not in SAMPLE_UNITS:
        raise ValueError(f"unit {unit!r} is none of {SAMPLE_UNITS}")
    n_slots = (n_tokens - min_start) // block_len
    if n_blocks < 1 or block_len < 1:
        raise TxlabError(f"need n_blocks >= 1 and block_len >= 1, got {n_blocks} and {block_len}")
    if n_blocks > n_slots:
        raise TxlabError(
            f"the split holds {n_tokens:,} {unit}s: room for only {max(n_slots, 0)} blocks of {block_len} target {unit}s "
            f"after the first {min_start} {unit}s (the longest context)"
        )
    slots = np.random.default_rng(seed).choice(n_slots, size=n_blocks, replace=False)
    return min_start + np.sort(slots).astype(np.int64) * block_len


def collection_key(token_stream_sha256: str, grid: Sequence[int], block_starts: Sequence[int], block_len: int,
                   stride: float | None = None) -> str:
    """12 hex digits naming what is measured (same stream, grid, targets and stride -> same name for every model);
    an exact table's key holds no stride, so tables collected before strides existed keep their names."""
    what = {"token_stream_sha256": token_stream_sha256, "grid": [int(c) for c in grid],
            "block_starts": [int(s) for s in block_starts], "block_len": int(block_len), **({"stride": stride} if stride is not None else {})}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class LossTable:
    """One model's collected losses (see the module docstring for the files)."""

    losses: np.ndarray
    """float32 [G, T] nats: l(grid[j], targets[i])."""
    grid: tuple[int, ...]
    targets: np.ndarray
    """int64 [T] ascending positions in the split."""
    block_len: int
    token_stream_sha256: str
    max_context: int | None
    meta: dict[str, Any]
    path: Path
    placebo: np.ndarray | None = None
    """float32 [G-1, T]: placebo losses of each grid step, when collected."""


@dataclass
class GroupLosses:
    """The losses of a group of models on the same targets: what txlab.analysis.recl takes."""

    models: list[str]
    losses: np.ndarray
    """float32 [M, G, T]."""
    grid: tuple[int, ...]
    targets: np.ndarray
    block_len: int
    token_stream_sha256: str
    caps: dict[str, int | None]
    """Model -> maximum context (None: unbounded), for txlab.analysis.recl's caps."""
    run_dirs: list[Path]
    placebo: np.ndarray | None = None
    """float32 [M, G-1, T] when every run has placebo losses."""
    tables: list[LossTable] = field(default_factory=list, repr=False)


def block_file(directory: Path, kind: str, index: int) -> Path:
    return directory / f"{kind}-{index:05d}.npy"


def save_npy(path: Path, array: np.ndarray) -> None:
    write_atomic(path, lambda fh: np.save(fh, array))


def check_token_ids(model: LanguageModel, tokens: np.ndarray, what: str) -> None:
    """Refuse a token stream holding ids the model has no output for (numbered for another model)."""
    top = int(tokens.max()) if len(tokens) else -1
    if model.vocab_size and top >= model.vocab_size:
        raise TxlabError(f"{what} holds token id {top}, outside the model's vocabulary of {model.vocab_size}: "
                         "the text was tokenized for another model (give the group the model's own tokenizer)")


def collect_run_losses(run_dir: str | Path, collection: Collection, *, batch_size: int = 16, device: str = "cpu",
                       progress: bool = True, corpus: Corpus | None = None) -> LossTable:
    """Collect (or finish collecting) a trained run's loss table and return it.

    The run's evaluation settings decide how context is read and in which precision (txlab.runs.scored.load_model).
    Finished blocks are skipped, so an interrupted call resumes. ``corpus``: the run's corpus when the caller has it
    loaded already (a group reads one corpus for all its members); it is checked against the run's vocabulary.
    """
    run_dir = Path(run_dir)
    member = load_model(run_dir, device=device)
    cfg = saved_config(run_dir)
    corpus = load_corpus_for_model(cfg.data, read_meta(run_dir)["vocab_hash"], saved_vocab(run_dir), collection.split, str(run_dir), progress=progress,
                                   loaded=corpus)
    corpus.split(collection.split)  # a clear error for a missing split

    def fits(chunk_len: int | None, longest: int) -> None:
        check_fits(cfg.model, batch_size, chunk_len or longest, member.context.mem_len if chunk_len else 0, training=False,
                   device=device, what=f"collecting the losses of {run_dir} (--set batch_size, --set grid)", precision=member.precision)

    return collect_model_losses(member, corpus.split(collection.split), corpus.token_stream_hash(collection.split), collection,
                                batch_size=batch_size, progress=progress, check_memory=fits)


def collect_model_losses(
    member: ScoredModel,
    tokens: np.ndarray,
    token_hash: str,
    collection: Collection,
    *,
    batch_size: int = 16,
    progress: bool = True,
    check_memory: Callable[[int | None, int], None] | None = None,
) -> LossTable:
    """Collect (or finish) any model's loss table under ``member.home/losses/<split>-<key>/`` and return it.

    ``tokens`` is the split in the model's ids and ``token_hash`` its stream hash. The member (txlab.runs.scored) says
    how it reads context (its segment, memory and precision: fp32, or bf16 or fp16 autocast, txlab.precision, which
    also accepts a model whose weights are in it) and what names it (``identity``, a run's step or a checkpoint's
    fingerprint); all of it goes into meta.json and must match on resume, so losses of another model, or in another
    precision (noise can read as gain), are never mixed in. A member without a segment reads a context as one segment.
    ``check_memory(chunk_len, longest context)`` may refuse a collection that cannot fit.
    The table returned holds the blocks computed here and those an earlier call left on disk: nothing is read back.
    """
    if member.home is None:
        raise TxlabError(f"{member.name} has no folder to keep its loss table in: load it with a home (txlab.load_model(..., home=...)), "
                         "or collect in memory (txlab.context_losses)")
    model, c = member.model, collection
    tgt_len = member.tgt_len or c.grid[-1]
    check_token_ids(model, tokens, f"the {c.split} split")
    starts = sample_blocks(len(tokens), c.blocks, c.block_len, c.grid[-1], c.seed)
    offsets = placebo_offsets(len(tokens), c.blocks, c.seed, c.grid)  # [blocks]: where each block's far spans are read
    directory = member.home / "losses" / f"{c.split}-{collection_key(token_hash, c.grid, starts, c.block_len, c.stride)}"
    with scoring(model, member.context, member.precision, member.compile) as compiled:
        chunk_len = chunk_length(model, tgt_len)
        lengths, _ = context_lengths(c.grid, model.max_context)
        if check_memory is not None:
            check_memory(chunk_len, int(lengths[-1]))
        # A table on disk keeps the methods it was begun with (both are exact): 'auto' may choose otherwise today.
        saved = saved_meta(directory)
        if c.stride is not None:
            method = placebo_method = check_strided(model, tokens, lengths, chunk_len)
        else:
            method = saved["method"] if saved and c.method == "auto" else choose_method(model, tokens[: int(lengths[-1])], lengths, chunk_len, c.method, c.block_len)
            placebo_method = saved["placebo_method"] if saved else choose_placebo_method(model, tokens, lengths, chunk_len, c.method)
        meta = {
            "split": c.split, "token_stream_sha256": token_hash, "n_tokens": len(tokens), "grid": list(c.grid),
            "block_starts": starts.tolist(), "block_len": c.block_len, "seed": c.seed,
            "max_context": model.max_context, "tgt_len": tgt_len, "chunk_len": chunk_len,
            "context": {"mem_len": member.context.mem_len, "same_length": member.context.same_length, "clamp_len": member.context.clamp_len},
            "method": method, "placebo_method": placebo_method, "placebo_offsets": offsets.tolist(),
            **({"stride": c.stride} if c.stride is not None else {}),
            "precision": member.precision, "compiled": compiled, **member.identity, "units": "nats",
        }
        write_or_check_meta(directory, meta)
        kinds, methods = ("block", "placebo")[: 1 + c.placebo], {"block": method, "placebo": placebo_method}
        todo = [(kind, i) for kind in kinds for i in range(c.blocks) if not block_file(directory, kind, i).is_file()]
        if c.stride is not None:
            windows = {kind: strided_windows(c.grid, c.stride, c.block_len, model.max_context, kind == "placebo") for kind in kinds}
        else:
            windows = {"block": c.block_len + int(lengths[-1] - lengths[0]) if method == "window" else c.block_len * len(lengths),
                       "placebo": _placebo_windows(c.grid, c.block_len, model.max_context, placebo_method)}
        computed: dict[tuple[str, int], np.ndarray] = {}
        with Progress(total=sum(windows[kind] for kind, _ in todo), desc=f"losses {member.name}", unit="window",
                      disable=not progress, leave=False) as bar:
            for kind, i in todo:
                computed[kind, i] = block_losses(model, tokens, c.grid, int(starts[i]), c.block_len, chunk_len, batch_size, methods[kind],
                                                 bar.update, placebo=kind == "placebo", offset=int(offsets[i]), stride=c.stride)
                save_npy(block_file(directory, kind, i), computed[kind, i])
    shapes = {"block": (len(c.grid), c.block_len), "placebo": (len(c.grid) - 1, c.block_len)}
    tables = {kind: np.concatenate([computed[kind, i] if (kind, i) in computed else load_block(directory, kind, i, shapes[kind])
                                    for i in range(c.blocks)], axis=1) for kind in kinds}  # [G, T] and [G-1, T]
    targets = (starts[:, None] + np.arange(c.block_len)).reshape(-1)  # [T]
    return LossTable(tables["block"], c.grid, targets, c.block_len, token_hash, model.max_context, meta, directory, tables.get("placebo"))


OLD_FAR_SPANS = "half the stream, every block (before per-block offsets)"

META_DEFAULTS = {"placebo_method": "naive", "placebo_offsets": OLD_FAR_SPANS, "compiled": False}
"""Keys meta.json gained later, with what a table written before them means: placebo losses one window per (c, t),
far spans half the stream (or text) on for every block, the layers as written."""


def saved_meta(directory: Path) -> dict[str, Any] | None:
    """A table's meta.json, keys it predates filled in from :data:`META_DEFAULTS`; None before the first block."""
    path = directory / "meta.json"
    return {**META_DEFAULTS, **read_json(path, remedy(directory))} if path.is_file() else None


def write_or_check_meta(directory: Path, meta: dict[str, Any]) -> None:
    """Write a new table's meta.json, or refuse to add to a table collected with other settings. A table begun before
    far spans were drawn per block keeps its losses while it holds no placebo block (none was read at the old offset):
    its meta.json then takes today's offsets."""
    saved = saved_meta(directory)
    if saved is None:
        write_json_atomic(directory / "meta.json", meta)
        return
    if saved["placebo_offsets"] == OLD_FAR_SPANS and "placebo_offsets" in meta and not any(directory.glob("placebo-*.npy")):
        saved = {**{k: v for k, v in saved.items() if k != "placebo_offset"}, "placebo_offsets": meta["placebo_offsets"]}
        write_json_atomic(directory / "meta.json", saved)
    differing = [k for k, v in meta.items() if saved.get(k) != v]
    diffs = [f"{k}: stored {saved.get(k)!r}, now {meta[k]!r}" for k in differing]
    if diffs:
        # compiled kernels round otherwise: a table is finished as it began, which one setting restores
        also = f", or set compile={'on' if saved['compiled'] else 'off'} to finish it as it began" if differing == ["compiled"] else ""
        raise TxlabError(f"losses in {directory} were collected with other settings ({'; '.join(diffs)}): delete the directory to collect them "
                         f"again{also}")


def _placebo_windows(grid: Sequence[int], block_len: int, max_context: int | None, method: str) -> int:
    """Windows :func:`placebo_block_losses` reads for one block (its progress)."""
    groups, alone = placebo_groups(grid, max_context) if method == "window" else ({}, range(len(grid) - 1))
    by_window = [len(near) * block_len if cheaper_method(near, block_len, extra) == "naive" else block_len + near[-1] - near[0]
                 for extra, near in groups.items()]
    return sum(by_window) + len(alone) * block_len


def remedy(directory: Path) -> str:
    return f"delete it and rerun `txlab recl` to collect {directory} again"


def load_block(directory: Path, kind: str, index: int, shape: tuple[int, int]) -> np.ndarray:
    """One ``kind`` block, checked for its [rows, block_len] shape."""
    path = block_file(directory, kind, index)
    block = load_npy(path, remedy(directory), ndim=2)
    if block.shape != shape:
        raise TxlabError(f"{path} is damaged (shape {block.shape}, its meta.json says {shape}); {remedy(directory)}")
    return block


def _load_blocks(directory: Path, kind: str, n_blocks: int, shape: tuple[int, int]) -> np.ndarray:
    """The ``kind`` blocks side by side."""
    return np.concatenate([load_block(directory, kind, i, shape) for i in range(n_blocks)], axis=1)


def load_losses(directory: str | Path) -> LossTable:
    """A complete loss table from its directory; an error says what is missing."""
    directory = Path(directory)
    if not (directory / "meta.json").is_file():
        raise TxlabError(f"no loss collection in {directory} (meta.json missing)")
    meta = read_json(directory / "meta.json", remedy(directory),
                     keys={"block_starts": list, "block_len": int, "grid": list, "token_stream_sha256": str, "max_context": (int, type(None))})
    n_blocks, block_len = len(meta["block_starts"]), meta["block_len"]
    grid = tuple(meta["grid"])
    if not all(isinstance(x, int) for x in [*meta["block_starts"], *grid]) or len(grid) < 2:
        raise TxlabError(f"{directory / 'meta.json'} is damaged (its grid or block starts are not integers); {remedy(directory)}")
    missing = [i for i in range(n_blocks) if not block_file(directory, "block", i).is_file()]
    if missing:
        raise TxlabError(f"the loss collection in {directory} is incomplete ({len(missing)} of {n_blocks} blocks missing): rerun the collection to finish it")
    losses = _load_blocks(directory, "block", n_blocks, (len(grid), block_len))  # [G, T]
    placebo = None
    if all(block_file(directory, "placebo", i).is_file() for i in range(n_blocks)):
        placebo = _load_blocks(directory, "placebo", n_blocks, (len(grid) - 1, block_len))  # [G-1, T]
    targets = (np.asarray(meta["block_starts"], dtype=np.int64)[:, None] + np.arange(block_len)).reshape(-1)  # [T]
    return LossTable(losses, grid, targets, block_len, meta["token_stream_sha256"], meta["max_context"], meta, directory, placebo)


class Collected(NamedTuple):
    """How many blocks of a collection a model already has on disk: what a rerun skips (:func:`collected_blocks`)."""

    blocks: int
    """Main-table blocks (block-*.npy)."""
    placebo: int
    """Placebo blocks (placebo-*.npy)."""


def collected_blocks(home: str | Path, collection: Collection, token_stream_sha256: str | None = None) -> Collected:
    """The blocks of ``collection`` already under ``home/losses/``, found by their meta.json (split, grid, targets per
    block, seed, number of blocks and stride, and the token stream when given) without reading the corpus, as a plan needs.
    Without the stream two tables of those settings on other tokens cannot be told apart: then none counts."""
    c = collection
    found = []
    for meta_file in sorted(Path(home).glob(f"losses/{c.split}-*/meta.json")):
        meta = saved_meta(meta_file.parent)
        same = (meta.get("split"), meta.get("grid"), meta.get("block_len"), meta.get("seed"), len(meta.get("block_starts", ())),
                meta.get("stride")) == (c.split, list(c.grid), c.block_len, c.seed, c.blocks, c.stride)
        if same and token_stream_sha256 in (None, meta.get("token_stream_sha256")):
            found.append(meta_file.parent)
    if len(found) != 1:
        return Collected(0, 0)
    count = lambda kind: sum(block_file(found[0], kind, i).is_file() for i in range(c.blocks))  # noqa: E731
    return Collected(count("block"), count("placebo") if c.placebo else 0)


def find_losses(run_dir: str | Path, split: str = "valid", key: str | None = None) -> Path:
    """The loss collection of a run for ``split``: the one there is, or the one named by ``key``."""
    base = Path(run_dir) / "losses"
    if key is not None:
        path = base / f"{split}-{key}"
        if not path.is_dir():
            raise TxlabError(f"{run_dir} has no {split} losses with key {key}")
        return path
    found = sorted(p for p in base.glob(f"{split}-*") if p.is_dir())
    if not found:
        raise TxlabError(f"{run_dir} has no {split} losses: collect them first (txlab.measure.losses.collect_run_losses)")
    if len(found) > 1:
        raise TxlabError(f"{run_dir} has several {split} loss collections ({', '.join(p.name for p in found)}): name one by its key")
    return found[0]


def _model_names(run_dirs: Sequence[Path]) -> list[str]:
    names = [d.name for d in run_dirs]
    return names if len(set(names)) == len(names) else [str(d) for d in run_dirs]


def group_losses(tables: Sequence[LossTable], run_dirs: Sequence[str | Path]) -> GroupLosses:
    """A group from its members' loss tables (one per run, in order), refused unless all saw the same token
    stream, grid and targets."""
    run_dirs = [Path(d) for d in run_dirs]
    if not tables:
        raise TxlabError("a RECL group needs at least one run")
    first, first_dir = tables[0], run_dirs[0]
    split = first.meta.get("split", "")
    for table, run_dir in zip(tables[1:], run_dirs[1:]):
        if table.token_stream_sha256 != first.token_stream_sha256:
            raise TxlabError(
                f"{run_dir} was scored on another token stream ({table.token_stream_sha256[:12]}) than {first_dir} "
                f"({first.token_stream_sha256[:12]}): every model of a group must see the same {split} tokens"
            )
        if table.grid != first.grid:
            raise TxlabError(f"{run_dir} has losses for context lengths {list(table.grid)}, {first_dir} for {list(first.grid)}")
        if not np.array_equal(table.targets, first.targets):
            raise TxlabError(f"{run_dir} was scored on other target positions than {first_dir}: collect both with the same n_blocks, block_len and seed")
    names = _model_names(run_dirs)
    placebo = np.stack([t.placebo for t in tables]) if all(t.placebo is not None for t in tables) else None
    return GroupLosses(
        names, np.stack([t.losses for t in tables]), first.grid, first.targets, first.block_len, first.token_stream_sha256,
        {name: t.max_context for name, t in zip(names, tables)}, run_dirs, placebo, list(tables),
    )


def load_group_losses(run_dirs: Sequence[str | Path], split: str = "valid", key: str | None = None) -> GroupLosses:
    """The loss tables of a group of runs as collected earlier (:func:`group_losses` of what is on disk)."""
    if not run_dirs:
        raise TxlabError("a RECL group needs at least one run")
    return group_losses([load_losses(find_losses(d, split, key)) for d in run_dirs], run_dirs)


def collect_group_losses(run_dirs: Sequence[str | Path], collection: Collection, *, batch_size: int = 16, device: str = "cpu",
                         progress: bool = True) -> GroupLosses:
    """Collect whatever is missing for every run of a group and return the group.

    The runs' token streams are compared before any model is run, so a mismatched group fails at once.
    """
    run_dirs = [Path(d) for d in run_dirs]
    corpora = [load_corpus(saved_config(run_dir).data, progress=progress) for run_dir in run_dirs]
    hashes = [corpus.token_stream_hash(collection.split) for corpus in corpora]
    for run_dir, token_hash in zip(run_dirs[1:], hashes[1:]):
        if token_hash != hashes[0]:
            raise TxlabError(
                f"{run_dir} reads another {collection.split} token stream ({token_hash[:12]}) than {run_dirs[0]} ({hashes[0][:12]}): "
                "every model of a group must see the same tokens"
            )
    tables = [collect_run_losses(d, collection, batch_size=batch_size, device=device, progress=progress, corpus=corpus)
              for d, corpus in zip(run_dirs, corpora)]
    return group_losses(tables, run_dirs)
