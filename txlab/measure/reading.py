"""Reading windows from a fresh state: what every loss collection (txlab.measure.losses, txlab.measure.strided,
txlab.measure.words) feeds a model and how it scores the rows it needs.

A window is read from ``model.init_state`` in chunks of the evaluation segment (or as one segment for a model
without memory), carrying the state (:func:`read_fresh`); only the target's log-probability is taken at each scored
row (:func:`scored_nll`), and a table's losses stay on the model's device until the table is done
(:class:`ScoredCells`). Whether a model's predictions ignore the tokens after them in a window
(:func:`is_prefix_causal`) decides whether one window may serve several contexts. A placebo's far span is placed by
:func:`far_starts`, ``offset`` units after its window's start, each target block at its own offset
(:func:`placebo_offsets`), and checked by :func:`check_far`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from txlab.errors import TxlabError
from txlab.models.interface import LanguageModel
from txlab.precision import rounding_unit
from txlab.runs.evaluate import read_in_chunks

OnBatch = Callable[[int], None]
"""Progress callback: called with the number of windows just read."""


def context_lengths(grid: Sequence[int], max_context: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, column): the distinct context lengths actually read, min(c, max_context) ascending,
    and for each grid value the index of its length (grid values beyond the cap share L_max)."""
    effective = [min(c, max_context) if max_context else c for c in grid]
    lengths = np.array(sorted(set(effective)), dtype=np.int64)
    return lengths, np.searchsorted(lengths, effective)


def gather_windows(tokens: np.ndarray, first: int, count: int, length: int, end: int) -> np.ndarray:
    """Windows tokens[s : s + length] for s = first .. first + count - 1: int64 [count, length].

    Positions >= ``end`` are filled with 0: the caller guarantees they are never the context of a
    scored prediction (they only pad batched windows to one length).
    """
    span = np.zeros(count - 1 + length, dtype=np.int64)
    available = tokens[first : min(end, first + count - 1 + length)]
    span[: len(available)] = available
    return sliding_window_view(span, length)  # [count, length], a view of span


def to_device(array: np.ndarray, device: torch.device | str) -> torch.Tensor:
    """A copy of ``array`` as a tensor on ``device``. To a CUDA device it goes through pinned memory without waiting
    for the work queued there, so the host prepares the next batch while the GPU reads this one."""
    tensor = torch.from_numpy(np.array(array, order="C"))  # a copy: windows are read-only views of the stream
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def read_fresh(model: LanguageModel, windows: np.ndarray, chunk_len: int | None) -> torch.Tensor:
    """Final hidden states [B, L, d] after reading each window [B, L] from a fresh state, in chunks
    of ``chunk_len`` (None: the whole window as one segment), carrying the state between chunks."""
    x = to_device(windows, model.device)  # [B, L]
    return torch.cat([out.hidden for _, out in read_in_chunks(model, x, chunk_len)], dim=1)  # [B, L, d]


def scored_nll(model: LanguageModel, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-ln P(target) for hidden rows [N, d] and targets [N] on their device, through ``model.log_prob``: float32 [N],
    left on the device. Rows go through the softmax in groups of at most ~4M log-probabilities (16 MB in float32)."""
    n_token = model.log_prob(hidden[:1]).size(-1)
    rows = max(1, 2**22 // n_token)
    nll = [
        -model.log_prob(hidden[i : i + rows]).gather(1, targets[i : i + rows, None])[:, 0]  # [rows]
        for i in range(0, hidden.size(0), rows)
    ]
    return torch.cat(nll).float()


def target_nll(model: LanguageModel, hidden: torch.Tensor, targets: np.ndarray) -> np.ndarray:
    """:func:`scored_nll` of ``targets`` [N] given as ids on the host, brought back: float32 [N]."""
    return scored_nll(model, hidden, to_device(targets.astype(np.int64), hidden.device)).cpu().numpy()


class ScoredCells:
    """A table [C, T] filled batch by batch from rows of hidden states, whose losses stay on the model's device until
    :meth:`table`: one wait for the device per table, not one per batch. Every cell is scored exactly once."""

    def __init__(self, shape: tuple[int, int]):
        self.claimed = np.zeros(shape, dtype=bool)
        self.pending: list[tuple[tuple[np.ndarray, np.ndarray], torch.Tensor]] = []

    def add(self, model: LanguageModel, hidden: torch.Tensor, window: np.ndarray, position: np.ndarray,
            cells: tuple[np.ndarray, np.ndarray], targets: np.ndarray) -> None:
        """Score the rows (``window``[i], ``position``[i]) of ``hidden`` [B, L, d] against ``targets`` [N] into ``cells``."""
        assert not self.claimed[cells].any(), "a (c, t) cell was scored twice"
        self.claimed[cells] = True
        flat = to_device(window * hidden.size(1) + position, hidden.device)  # [N] rows of hidden [B * L, d]
        rows = hidden.flatten(0, 1).index_select(0, flat)  # [N, d]
        self.pending.append((cells, scored_nll(model, rows, to_device(targets.astype(np.int64), hidden.device))))

    def table(self) -> np.ndarray:
        """float32 [C, T], every cell scored."""
        assert self.claimed.all(), "a (c, t) cell was never scored"
        out = np.empty(self.claimed.shape, dtype=np.float32)
        if self.pending:
            values = torch.cat([nll for _, nll in self.pending]).cpu().numpy()  # [all N]: the one wait
            lo = 0
            for cells, nll in self.pending:
                out[cells] = values[lo : lo + len(nll)]
                lo += len(nll)
        return out


def chunk_length(model: LanguageModel, tgt_len: int) -> int | None:
    """Chunk length for reading a context: the evaluation tgt_len when the model carries memory,
    else None (one segment: XL without recurrence, the vanilla Transformer)."""
    return tgt_len if model.context.mem_len > 0 else None


PREFIX_TOLERANCE = 1e-4
"""Largest relative change of a position's hidden state, cutting the window after it, that still counts as none in fp32."""
ROUNDING_ULPS = 2
"""The same in reduced precision, in units of its rounding (bf16: 2 x 2^-7 = 0.016; fp16: 2 x 2^-10 = 0.002). Rounding
moved a state by 0.0008 (a 2-layer GPT-2 in bf16 on a CPU, 128 tokens) and by nothing (GPT-2 124M at 33k tokens on an H100);
absolute positions move one by 0.04 in a window of 3 tokens and 0.08 in one of 8 (a tiny Transformer-XL)."""


def is_prefix_causal(model: LanguageModel, tokens: np.ndarray, length: int, chunk_len: int | None) -> bool:
    """Are a chunk's predictions unchanged when the chunk is cut short after them (:func:`prefix_change`)?"""
    change, tolerance = prefix_change(model, tokens, length, chunk_len)
    return change <= tolerance


def prefix_change(model: LanguageModel, tokens: np.ndarray, length: int, chunk_len: int | None) -> tuple[float, float]:
    """How far cutting a chunk short moves the predictions before the cut, and the tolerance that counts as none.

    Reads the first min(length, chunk_len, max_context) tokens as one chunk, and the same tokens but the last;
    the window method is exact only if the shared positions agree. The change is the largest move of a shared
    position's final hidden state, relative to its norm: none (up to rounding) for relative encodings, the vanilla
    Transformer and RNNs; large for Transformer-XL with absolute positions, which counts positions back from the
    chunk's last token. (Later chunks cannot matter: memory holds only the past.)

    Agreement allows for rounding. Two windows of different lengths may take matmul kernels that round differently,
    which in bf16 or fp16 moves a hidden state by a few units of that precision's rounding. So each shared position's
    state may move by PREFIX_TOLERANCE of its norm, or by ROUNDING_ULPS units of rounding of the precision the read
    computed in (txlab.precision.rounding_unit), whichever is larger.
    """
    n = min(length, chunk_len or length, model.max_context or length, len(tokens))
    if n < 2:
        return 0.0, PREFIX_TOLERANCE
    window = tokens[None, :n].astype(np.int64)  # [1, n]
    with torch.no_grad():
        full = read_fresh(model, window, None)
        cut = read_fresh(model, window[:, :-1], None)
    tolerance = max(PREFIX_TOLERANCE, ROUNDING_ULPS * rounding_unit(full))
    shared = full[:, :-1].float()  # [1, n - 1, d]
    change = (shared - cut.float()).norm(dim=-1) / shared.norm(dim=-1).clamp_min(1e-12)  # [1, n - 1]
    return float(change.max()), tolerance


PLACEBO_STREAM = 1
"""The seed's second stream (numpy's SeedSequence([seed, PLACEBO_STREAM])): far spans are drawn apart from the blocks,
so a table's target blocks are the same with placebo or without."""


def placebo_offsets(n: int, n_blocks: int, seed: int, grid: Sequence[int]) -> np.ndarray:
    """int64 [n_blocks]: the offset each target block's far spans are read at (:func:`far_starts`), drawn by ``seed``
    uniformly in [n/4, 3n/4) of a stream of ``n`` units, so a far span lies a quarter of the stream or more from its
    target either way round; a stream too short for that keeps the offsets that clear every step of ``grid``
    (c' < offset <= n - 2 (c' - c)). One offset per block, not one for the whole table: the block bootstrap resamples
    blocks, so its interval then carries the variation of where the far spans were read, which a single offset hides."""
    steps = list(zip(grid, grid[1:]))
    lo = max(n // 4, max(c2 for _, c2 in steps) + 1)
    hi = min(n - n // 4, n - 2 * max(c2 - c for c, c2 in steps) + 1)
    if lo >= hi:  # no offset clears every step: the middle, which check_far then refuses with its reason
        return np.full(n_blocks, n // 2, dtype=np.int64)
    return np.random.default_rng([seed, PLACEBO_STREAM]).integers(lo, hi, size=n_blocks).astype(np.int64)


def far_starts(n: int, windows: np.ndarray, extra: int, offset: int) -> np.ndarray:
    """Start of the far span of ``extra`` tokens for a placebo window whose near part starts at each of ``windows``:
    ``offset`` after the window's start t - c', wrapped around the stream's end. It depends only on the window
    start and the span's size, which is what lets one window serve every step of that size."""
    return (windows - extra + offset) % (n - extra)


def check_far(n: int, far: np.ndarray, near_start: np.ndarray, t: np.ndarray, extra: int) -> None:
    """Refuse far spans that overlap their context or target (x_{t-c'} .. x_t)."""
    if ((far + extra > near_start - extra) & (far <= t)).any():
        raise TxlabError(f"a stream of {n} tokens is too short for placebo spans of {extra} tokens far from a "
                         f"{int((t - near_start).max()) + extra}-token context")
