"""Losses in words: context and targets that belong to the text, so members with any tokenizers share them.

What is measured
----------------
The text is cut into words (txlab.data.words: maximal runs of non-whitespace). Word w's **span** is the word with the
whitespace before it; **context c** of w is the text of the c words before it, from the first character of word
w-c to the end of word w-1. Then

    l(c, w) = -ln P(span | context) = the sum of the member's token losses over the tokens that spell the span,

read from a fresh start: the member tokenizes ``context + span`` with its own tokenizer (txlab.data.tokenizers, each
with its character offsets), reads the tokens as txlab.measure.losses reads a context (one segment from a fresh state,
or its evaluation chunks with its memory settings) and sums the losses of the span's tokens. Only the LanguageModel
interface is used.

Exactness and coverage
----------------------
A member scores (c, w) **exactly** only where its tokenization puts token boundaries at both ends of the span
(:func:`span_tokens`):

- in the tokens of ``context + span``, no token straddles the span's start, at least one token precedes it, and at
  least one spells it;
- the tokens of ``context + span + the next span`` begin with exactly those tokens and put no token across the
  span's end: what follows the word does not change how it is written;
- every symbol is in the member's vocabulary, and the span holds no unknown-symbol token (a tokenizer's <unk>
  scores a class of strings, not the span); the context may hold one, since that is how the member reads it;
- the span's tokens fit in the member's window (``model.max_context``).

How it is decided, cheaply: the cells whose contexts begin at one word are prefixes of one text (from that word to the
end of the word after the last of them), which is encoded once. Where the tokenizer names a span's end stable (its
``stable_ends``: the encoding of the text up to that word end is the text's tokens before it, txlab.data.tokenizers),
the cell's tokens are cut from that encoding and what follows cannot change them; elsewhere the cell, and the cell with
the span after it, are encoded on their own. Both ways give the same cells (the tests hold them equal over random
text); the first encodes one text per starting word instead of two per (c, w). A placebo cell is encoded with the span
after it, and cut the same way.

A member **covers** a word when every context length of the grid is exact (and, with placebo losses, every placebo
step too). A group's targets are the words every member covers (:func:`word_group`), and each member's coverage is
counted.

One member at a time, kept on disk
----------------------------------
:func:`collect_word_losses` collects one member on its own: for every block of words drawn (the same blocks for
every member: txlab.measure.losses.sample_blocks over the text's words, by the collection's seed) it scores every word
the member covers, and leaves NaN where it does not. Its table is kept block by block under
``home/losses/words-<split>-<key>/`` (the key names the text's sha256, the grid and the blocks; meta.json holds the
rest, checked on resume: the model's identity, its tokenizer, how it reads, the method and the placebo's offsets), so a
rerun reads nothing again, a kill loses at most the block being read, and a group that adds or drops a member, or
changes r, labels or the bootstrap, reuses every table it has: the shared targets are chosen afterwards, from the
tables (:func:`word_group`). What that costs: a member reads the words it covers, not only the group's shared ones.

Two methods, one table
----------------------
``naive``: one forward per (c, w) over exactly the tokens of ``context + span`` (the reference). ``window``: one
forward per starting word s over the tokens of ``text[start(s) : ...]`` (the encoding the cells were cut from), whose
prefix up to word s + c is, where the tokenization is prefix-stable, exactly the tokens of (c, s + c)'s
``context + span``; a cell is served by the window only when that holds (the ids are compared, cell by cell), and by
its own forward otherwise. Since a prediction of a
prefix-causal model depends only on the tokens before it (txlab.measure.reading.is_prefix_causal), the window's rows
are the naive forward's rows: the two methods give one table. The method is chosen as in tokens
(txlab.measure.losses.choose_method). A context whose tokens do not fit the window of a capped model is read as its
nearest tokens that do (the model's window ending at the span's last token), by its own forward, and counted
(``truncated``).

Placebo
-------
The placebo of a step c -> c' (txlab.measure.losses, in words): word w after a context whose c nearest words are its
own, with the whitespace before the first of them, and whose c' - c words before those are a span of the text far
away: the span's first word is ``(w - c - d + offset) mod (n - d)``, d = c' - c, n the text's words, ``offset`` the
target block's own, drawn by the collection's seed in [n/4, 3n/4) (txlab.measure.reading.far_starts and
placebo_offsets, over words; recorded as ``placebo_offsets``). It is scored as a true cell is, exact or left
out (:func:`placebo_cells`). The far span depends on d and the first near word w - c alone, so the cells of one
(d, w - c) are prefixes of one text, the far span then the text from word w - c on: as in tokens, one window each
serves them (the window method), or each cell is read alone (the naive one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from txlab.analysis.per_unit import byte_perplexity, word_perplexity
from txlab.data.tokenizers import Encoding, TextTokenizer, prefix_encoding
from txlab.data.words import Words, check_spaced, cut_words
from txlab.errors import TxlabError
from txlab.fileio import load_npy
from txlab.measure.collection import Collection
from txlab.measure.losses import block_file, check_token_ids, choose_method, load_block, remedy, sample_blocks, save_npy, saved_meta, scoring, write_or_check_meta
from txlab.measure.reading import check_far, far_starts, placebo_offsets, read_fresh, target_nll
from txlab.models.interface import LanguageModel
from txlab.progress import Progress
from txlab.runs.scored import ScoredModel



def drawn_blocks(words: Words, collection: Collection) -> np.ndarray:
    """The first word of each of the collection's blocks of ``words``, drawn by its seed after the first max(grid)
    words (txlab.measure.losses.sample_blocks, in words): the same blocks for every member."""
    return sample_blocks(len(words), collection.blocks, collection.block_len, collection.grid[-1], collection.seed, unit="word")


# --------------------------------------------------------------------------------------------------
# Cells: one (c, w) of one member


@dataclass(frozen=True)
class Cell:
    """The tokens one member reads and scores for one (c, w): ``ids[first:]`` spell the span."""

    ids: np.ndarray
    """int64 [n]: the tokens of context + span."""
    first: int
    """Index of the span's first token (>= 1: the context has a token)."""
    window: Any = None
    """The key of the encoded text the cell is a prefix of (its window: a starting word, or for a placebo cell its
    step's far-span length and starting word)."""


def span_tokens(read: Encoding, following: Encoding | None, context_chars: int) -> int | None:
    """The index of the span's first token in ``read`` (the encoding of context + span, the context
    ``context_chars`` long), or None where the span is not exact (see the module docstring).
    ``following``: the encoding of context + span + the next span (None for the text's last word)."""
    n = len(read.ids)
    in_context = read.starts < context_chars  # [n]
    first = int(in_context.sum())
    if first < 1 or first >= n:
        return None  # no context token to predict from, or no token spells the span
    if not in_context[:first].all() or read.ends[:first].max() > context_chars:
        return None  # a token straddles the span's start
    if np.any(read.ids < 0) or np.any(read.unknown[first:]):
        return None  # a symbol the member cannot read, or an unknown token in the span
    if following is not None:
        m = len(following.ids)
        if m < n or not (np.array_equal(following.ids[:n], read.ids) and np.array_equal(following.starts[:n], read.starts)
                         and np.array_equal(following.ends[:n], read.ends)):
            return None  # what follows the word changes how it is written
        if m > n and following.starts[n] < int(read.ends[-1]):
            return None  # a token straddles the span's end
    return first


def member_cells(words: Words, tokenizer: TextTokenizer, targets: np.ndarray, grid: Sequence[int],
                 max_context: int | None) -> tuple[np.ndarray, dict[tuple[int, int], Cell], dict[Any, Encoding]]:
    """(covered [G, T] bool, cells, windows): every exact (c, w) of ``targets`` (word indices) for one member's
    tokenizer; cells are keyed by (grid index, target index). The cells that start at one word are prefixes of one
    text, from that word to the end of the word after the last of them: it is encoded once (``windows``, keyed by its
    first word), and a cell is cut from it where the tokenizer names the cell's end stable, else encoded alone."""
    by_start: dict[int, list[tuple[int, int]]] = {}  # first word of the context -> the cells (grid index, target index)
    for j, c in enumerate(grid):
        for i, w in enumerate(targets.tolist()):
            by_start.setdefault(w - c, []).append((j, i))
    texts: dict[Any, str] = {}
    asks = []
    for s in sorted(by_start):
        texts[s] = _window_text(words, "", int(words.starts[s]), max(int(targets[i]) for _, i in by_start[s]))
        asks += [((j, i), s, *_ends(words, int(words.starts[s]), int(targets[i]))) for j, i in by_start[s]]
    return _exact_cells(texts, asks, tokenizer, max_context, (len(grid), len(targets)))


def placebo_cells(words: Words, tokenizer: TextTokenizer, targets: np.ndarray, grid: Sequence[int], offset: int,
                  max_context: int | None) -> tuple[np.ndarray, dict[tuple[int, int], Cell], dict[Any, Encoding]]:
    """(covered [G-1, T] bool, cells, windows) of the placebo steps c -> c' = grid[j] -> grid[j+1], keyed by (j, target
    index): word w read after a context whose c nearest words are its own (with the whitespace before the first of them)
    and whose c' - c words before those are a far span of the text, ``offset`` words on (txlab.measure.reading.far_starts,
    over words), exact as a true cell is (:func:`span_tokens`). The far span depends on the step's length d = c' - c
    and the first near word s = w - c only, so the cells of one (d, s) are prefixes of one text, the far span then the
    text from word s on: encoded once (``windows``, keyed by (d, s)), as :func:`member_cells` does."""
    n = len(words)
    by_window: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (far-span length, first near word) -> its cells
    for j, (c, c2) in enumerate(zip(grid, grid[1:])):
        check_far(n, far_starts(n, targets - c, c2 - c, offset), targets - c, targets, c2 - c)
        for i, w in enumerate(targets.tolist()):
            by_window.setdefault((c2 - c, w - c), []).append((j, i))
    texts: dict[Any, str] = {}
    asks = []
    for (extra, s), keys in sorted(by_window.items()):
        f = int(far_starts(n, np.array([s]), extra, offset)[0])  # the far span's first word
        distant = words.text[int(words.starts[f]) : int(words.ends[f + extra - 1])]
        near_start = words.span(s)[0]  # the near words with the whitespace before the first of them
        texts[extra, s] = _window_text(words, distant, near_start, max(int(targets[i]) for _, i in keys))
        asks += [((j, i), (extra, s), *(e + len(distant) if e is not None else None for e in _ends(words, near_start, int(targets[i]))))
                 for j, i in keys]
    return _exact_cells(texts, asks, tokenizer, max_context, (len(grid) - 1, len(targets)))


def _window_text(words: Words, before: str, first_char: int, last: int) -> str:
    """``before``, then the text from character ``first_char`` to the end of the word after word ``last`` (the text's
    end after its last word): what the cells up to target ``last`` are prefixes of."""
    return before + words.text[first_char : int(words.ends[min(last + 1, len(words) - 1)])]


def _ends(words: Words, first_char: int, w: int) -> tuple[int, int, int | None]:
    """Where, in a text from character ``first_char`` on, the context of word w ends, its span ends, and the span after
    it ends (None for the text's last word)."""
    return (int(words.ends[w - 1]) - first_char, int(words.ends[w]) - first_char,
            int(words.ends[w + 1]) - first_char if w + 1 < len(words) else None)


def _exact_cells(texts: dict[Any, str], asks: list[tuple[tuple[int, int], Any, int, int, int | None]], tokenizer: TextTokenizer,
                 max_context: int | None, shape: tuple[int, int]) -> tuple[np.ndarray, dict[tuple[int, int], Cell], dict[Any, Encoding]]:
    """(covered, cells, the encodings of ``texts`` by key). Each ask is a cell: its key, the key of the text it is a
    prefix of, and in that text where its context ends, where its span ends (what is read) and where the span after
    it ends (None at the text's end). Where the tokenizer names the span's end stable, the cell's tokens are cut from
    its text's encoding, and what follows cannot change them; otherwise the cell and the cell with the span after it
    are encoded on their own. The cell is kept where exact (:func:`span_tokens`)."""
    names = list(texts)
    encodings = dict(zip(names, tokenizer.offsets([texts[k] for k in names])))
    stable = {k: set(ends.tolist()) for k, ends in zip(names, tokenizer.stable_ends([texts[k] for k in names]))}
    found: dict[int, tuple[Encoding, Encoding | None]] = {}
    alone: list[tuple[int, str, str | None]] = []  # (ask, its read text, its following text) to encode on its own
    for a, (_, t, _, read_end, follow_end) in enumerate(asks):
        read = prefix_encoding(encodings[t], read_end) if read_end in stable[t] else None
        if read is not None:
            found[a] = (read, None)  # at a stable end, what follows the span cannot change its tokens: nothing to check
        else:
            alone.append((a, texts[t][:read_end], None if follow_end is None else texts[t][:follow_end]))
    encoded = iter(tokenizer.offsets([text for _, read, following in alone for text in (read, following) if text is not None]))
    for a, _, following in alone:
        found[a] = (next(encoded), None if following is None else next(encoded))
    covered = np.zeros(shape, dtype=bool)
    cells: dict[tuple[int, int], Cell] = {}
    for a, (key, t, context_end, _, _) in enumerate(asks):
        read, following = found[a]
        first = span_tokens(read, following, context_end)
        if first is None or (max_context is not None and len(read.ids) - first > max_context):
            continue  # not exact, or a span longer than the member's window
        covered[key] = True
        cells[key] = Cell(read.ids, first, t)
    return covered, cells, encodings


# --------------------------------------------------------------------------------------------------
# Scoring cells


def _score_rows(model: LanguageModel, inputs: list[np.ndarray], rows: list[np.ndarray], targets: list[np.ndarray],
                chunk_len: int | None) -> list[np.ndarray]:
    """Per input: the losses of ``targets`` at ``rows`` after reading the input from a fresh state. Inputs of unequal
    length are right-padded with 0 (the caller guarantees the model is prefix-causal, or gives equal lengths)."""
    length = max(len(x) for x in inputs)
    batch = np.zeros((len(inputs), length), dtype=np.int64)  # [B, L]
    for b, x in enumerate(inputs):
        batch[b, : len(x)] = x
    hidden = read_fresh(model, batch, chunk_len)  # [B, L, d]
    b_idx = np.concatenate([np.full(len(r), b) for b, r in enumerate(rows)])
    flat = hidden[torch.as_tensor(b_idx, device=hidden.device), torch.as_tensor(np.concatenate(rows), device=hidden.device)]  # [N, d]
    nll = target_nll(model, flat, np.concatenate(targets))  # [N]
    return np.split(nll, np.cumsum([len(r) for r in rows])[:-1])


class _Read(NamedTuple):
    """One forward of the naive method: a cell's tokens, cut to the model's window."""

    key: Any
    inputs: np.ndarray
    """int64 [L]: the tokens read (the cell's tokens but the last, the nearest ones that fit the window)."""
    rows: np.ndarray
    """int64 [k]: the positions whose predictions are the span's tokens."""
    targets: np.ndarray
    """int64 [k]: the span's tokens."""


def naive_cells(model: LanguageModel, cells: dict[Any, Cell], chunk_len: int | None, batch_size: int,
                pad: bool = False) -> tuple[dict[Any, float], set]:
    """l(c, w) of each cell by its own forward over exactly its tokens (the reference), and the keys of the cells
    whose context was cut to the model's window. Cells of one input length are read together; with ``pad`` (only for
    a prefix-causal model, whose prediction at a position depends on the tokens before it alone), cells of nearby
    lengths are read together, right-padded: the same values in far fewer forwards where tokenizers vary lengths."""
    cap = model.max_context
    reads, truncated = [], set()
    for key, cell in cells.items():
        cut = max(0, len(cell.ids) - 1 - cap) if cap else 0  # a capped model reads the nearest tokens that fit
        if cut:
            truncated.add(key)
        reads.append(_Read(key, cell.ids[cut:-1], np.arange(cell.first - 1, len(cell.ids) - 1) - cut, cell.ids[cell.first :]))
    reads.sort(key=lambda read: len(read.inputs))
    out: dict[Any, float] = {}
    k = 0
    while k < len(reads):
        same = [read for read in reads[k : k + batch_size] if pad or len(read.inputs) == len(reads[k].inputs)]
        losses = _score_rows(model, [r.inputs for r in same], [r.rows for r in same], [r.targets for r in same], chunk_len)
        out.update({read.key: float(np.sum(loss, dtype=np.float64)) for read, loss in zip(same, losses)})
        k += len(same)
    return out, truncated


def window_cells(model: LanguageModel, windows: dict[Any, Encoding], cells: dict[tuple[int, int], Cell], chunk_len: int | None,
                 batch_size: int) -> tuple[dict[tuple[int, int], float], set]:
    """The same values as :func:`naive_cells` for a prefix-causal model, one forward per window (``windows``: the
    encodings :func:`member_cells` or :func:`placebo_cells` made, keyed as each cell's ``window``): the window serves
    every cell whose tokens are its prefix (and fit the model's window); the other cells are read alone."""
    served: dict[Any, list[tuple[int, int]]] = {}  # window -> the cells (row, target index) it serves
    for key, cell in cells.items():
        served.setdefault(cell.window, []).append(key)
    cap = model.max_context
    reads = []  # per window read: (the tokens read, the keys of the cells it serves, their rows, their span tokens)
    alone: dict[tuple[int, int], Cell] = {}
    for name in sorted(served):
        window = windows[name]
        keys, rows, wanted, length = [], [], [], 0
        for key in served[name]:
            cell = cells[key]
            n = len(cell.ids)
            if len(window.ids) < n or not np.array_equal(window.ids[:n], cell.ids) or (cap and n - 1 > cap):
                alone[key] = cell  # not the window's prefix here, or cut to the model's window: read alone
                continue
            keys.append(key)
            rows.append(np.arange(cell.first - 1, n - 1))
            wanted.append(cell.ids[cell.first :])
            length = max(length, n - 1)
        if keys:
            reads.append((window.ids[:length], keys, rows, wanted))
    out, truncated = naive_cells(model, alone, chunk_len, batch_size, pad=True)
    reads.sort(key=lambda item: len(item[0]))  # similar lengths together: less padding
    for k in range(0, len(reads), batch_size):
        batch = reads[k : k + batch_size]
        per_window = _score_rows(model, [w[0] for w in batch], [np.concatenate(w[2]) for w in batch], [np.concatenate(w[3]) for w in batch],
                                 chunk_len)
        for (_, keys, rows, _), losses in zip(batch, per_window):
            for key, loss in zip(keys, np.split(losses, np.cumsum([len(r) for r in rows])[:-1])):
                out[key] = float(np.sum(loss, dtype=np.float64))
    return out, truncated


# --------------------------------------------------------------------------------------------------
# One member's table, kept on disk


def word_key(text_sha256: str, grid: Sequence[int], block_starts: Sequence[int], block_len: int) -> str:
    """12 hex digits naming what a member's table in words holds (the same for every member of a group)."""
    what = {"text_sha256": text_sha256, "grid": [int(c) for c in grid], "block_starts": [int(s) for s in block_starts],
            "block_len": int(block_len), "unit": "word"}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def word_folder(home: Path, words: Words, collection: Collection, starts: np.ndarray) -> Path:
    """Where a member kept at ``home`` keeps its table of ``collection`` on ``words``."""
    return Path(home) / "losses" / f"words-{collection.split}-{word_key(words.sha256, collection.grid, starts, collection.block_len)}"


@dataclass(frozen=True)
class WordLosses:
    """One member's losses in words on every word drawn: NaN where it does not score the word exactly."""

    name: str
    grid: tuple[int, ...]
    """Context lengths, in words."""
    drawn: np.ndarray
    """int64 [N]: the words drawn, block by block (n_blocks x block_len)."""
    block_len: int
    losses: np.ndarray
    """float32 [G, N]: l(grid[j], drawn[i]), nats per word; NaN (every c) where the member does not cover the word."""
    truncated: np.ndarray
    """bool [G, N]: the cells whose context did not fit the member's window and was read as its nearest tokens."""
    method: str
    """'window' or 'naive'."""
    max_context: int | None
    meta: dict[str, Any]
    """What meta.json holds (also for a table kept in memory only)."""
    path: Path | None = None
    """The folder it is kept in; None in memory only."""
    placebo: np.ndarray | None = None
    """float32 [G-1, N]: placebo losses of each step; NaN where a placebo cell (or the word) is not exact."""


def _block_cells(member: ScoredModel, words: Words, block: np.ndarray, grid: Sequence[int]) -> tuple[dict[tuple[int, int], Cell], dict[int, Encoding]]:
    """The cells of the words of ``block`` the member covers at every c (keyed by (grid index, index in the block)), and
    the windows they were cut from (:func:`member_cells`)."""
    covered, cells, windows = member_cells(words, member.tokenizer, block, grid, member.max_context)
    keep = covered.all(axis=0)  # [len(block)]
    return {key: cell for key, cell in cells.items() if keep[key[1]]}, windows


def _fill(values: dict[tuple[int, int], float], shape: tuple[int, int]) -> np.ndarray:
    out = np.full(shape, np.nan, dtype=np.float32)
    for (j, i), value in values.items():
        out[j, i] = value
    return out


def collect_word_losses(member: ScoredModel, words: Words, collection: Collection, *, batch_size: int = 16, progress: bool = False,
                        offsets: Sequence[int] | None = None) -> WordLosses:
    """One member's table in words on ``collection``'s blocks of ``words``, kept under ``member.home`` when it has one
    (finished blocks are read, not computed again; a table of another model, tokenizer, method or placebo offsets is
    refused). ``offsets``: where each block's far spans are read, in words (default drawn by the collection's seed,
    txlab.measure.reading.placebo_offsets)."""
    c = collection
    member = member.reading_text()
    starts = drawn_blocks(words, c)
    offsets = placebo_offsets(len(words), c.blocks, c.seed, c.grid) if offsets is None else np.asarray(offsets, dtype=np.int64)
    if len(offsets) != c.blocks:
        raise TxlabError(f"give one placebo offset per block: {len(offsets)} offsets for {c.blocks} blocks")
    directory = None if member.home is None else word_folder(member.home, words, c, starts)
    blocks = [np.arange(start, start + c.block_len, dtype=np.int64) for start in starts.tolist()]
    shapes = {"block": (len(c.grid), c.block_len), "cut": (len(c.grid), c.block_len), "placebo": (len(c.grid) - 1, c.block_len)}
    with scoring(member.model, member.context, member.precision, member.compile) as compiled:
        saved = saved_meta(directory) if directory is not None else None
        if saved and c.method == "auto":
            method = saved["method"]  # a table keeps the method it began with (both are exact)
        else:
            probe = _probe(member, words, blocks, c.grid)
            check_token_ids(member.model, probe, f"{member.name}'s tokens")
            method = choose_method(member.model, probe, c.grid, member.chunk_len, c.method, c.block_len)
        meta = {"unit": "word", "split": c.split, "text_sha256": words.sha256, "n_words": len(words), "grid": list(c.grid),
                "block_starts": starts.tolist(), "block_len": c.block_len, "seed": c.seed, "max_context": member.max_context,
                "tgt_len": member.tgt_len, "chunk_len": member.chunk_len,
                "context": {"mem_len": member.context.mem_len, "same_length": member.context.same_length, "clamp_len": member.context.clamp_len},
                "method": method, "placebo_offsets": offsets.tolist(), "precision": member.precision, "compiled": compiled, **member.identity,
                "tokenizer": member.tokenizer_record(), "units": "nats per word"}
        if directory is not None:
            write_or_check_meta(directory, meta)
        kinds = ("block", "placebo")[: 1 + c.placebo]
        done = lambda kind, b: directory is not None and block_file(directory, kind, b).is_file()  # noqa: E731
        todo = [(kind, b) for kind in kinds for b in range(c.blocks) if not done(kind, b)]
        computed: dict[tuple[str, int], np.ndarray] = {}
        with Progress(total=len(todo), desc=f"word losses {member.name}", unit="block", disable=not progress, leave=False) as bar:
            for kind, b in todo:
                block = blocks[b]
                if kind == "block":
                    cells, windows = _block_cells(member, words, block, c.grid)
                    for cell in cells.values():
                        check_token_ids(member.model, cell.ids, f"{member.name}'s tokens")
                    if method == "window":
                        values, cut = window_cells(member.model, windows, cells, member.chunk_len, batch_size)
                    else:
                        values, cut = naive_cells(member.model, cells, member.chunk_len, batch_size)
                    computed["cut", b] = np.zeros(shapes["cut"], dtype=bool)
                    for j, i in cut:
                        computed["cut", b][j, i] = True
                    computed["block", b] = _fill(values, shapes["block"])
                    if directory is not None:  # the block file last: a block is done once it is there
                        save_npy(block_file(directory, "cut", b), computed["cut", b])
                        save_npy(block_file(directory, "block", b), computed["block", b])
                else:
                    ok = np.isfinite(computed["block", b] if ("block", b) in computed else load_block(directory, "block", b, shapes["block"])).all(axis=0)
                    _, far_cells, far_windows = placebo_cells(words, member.tokenizer, block, c.grid, int(offsets[b]), member.max_context)
                    far_cells = {key: cell for key, cell in far_cells.items() if ok[key[1]]}
                    if method == "window":
                        values, _ = window_cells(member.model, far_windows, far_cells, member.chunk_len, batch_size)
                    else:
                        values, _ = naive_cells(member.model, far_cells, member.chunk_len, batch_size)
                    computed["placebo", b] = _fill(values, shapes["placebo"])
                    if directory is not None:
                        save_npy(block_file(directory, "placebo", b), computed["placebo", b])
                bar.update(1)

    def table(kind: str) -> np.ndarray:  # [rows, N]: the blocks side by side, computed here or kept from before
        return np.concatenate([computed[kind, b] if (kind, b) in computed else _kept(directory, kind, b, shapes[kind])
                               for b in range(c.blocks)], axis=1)

    return WordLosses(member.name, c.grid, np.concatenate(blocks), c.block_len, table("block"), table("cut"), method, member.max_context,
                      meta, directory, table("placebo") if c.placebo else None)


def _probe(member: ScoredModel, words: Words, blocks: Sequence[np.ndarray], grid: Sequence[int]) -> np.ndarray:
    """The tokens the method choice probes the model on: the longest cell at the longest context of the first block the
    member covers a word of (what the window method reads longest)."""
    for block in blocks:
        cells, _ = _block_cells(member, words, block, grid[-1:])
        if cells:
            return max(cells.values(), key=lambda cell: len(cell.ids)).ids
    raise TxlabError(f"{member.name} scores none of the {len(blocks) * len(blocks[0]):,} words drawn exactly at {grid[-1]} words of "
                     "context: its tokenizer does not split at spaces, or its window is shorter than a word")


def _kept(directory: Path, kind: str, index: int, shape: tuple[int, int]) -> np.ndarray:
    """A block kept on disk; the truncation mask is bool, the losses float32 with NaN where the member does not score."""
    if kind == "cut":
        mask = load_npy(block_file(directory, "cut", index), remedy(directory), ndim=2)
        if mask.shape != shape:
            raise TxlabError(f"{block_file(directory, 'cut', index)} is damaged (shape {mask.shape}, expected {shape}); {remedy(directory)}")
        return mask.astype(bool)
    return load_block(directory, kind, index, shape)


def collected_word_blocks(home: Path, words: Words, collection: Collection) -> tuple[int, int]:
    """(main blocks, placebo blocks) of ``collection`` a member kept at ``home`` has on disk: what a rerun skips."""
    directory = word_folder(home, words, collection, drawn_blocks(words, collection))
    count = lambda kind: sum(block_file(directory, kind, b).is_file() for b in range(collection.blocks))  # noqa: E731
    return count("block"), count("placebo") if collection.placebo else 0


# --------------------------------------------------------------------------------------------------
# A group: the words every member covers


@dataclass(frozen=True)
class WordGroup:
    """A group's losses in words on the words every member covers (the shared targets), and what each member covered."""

    members: tuple[str, ...]
    grid: tuple[int, ...]
    """Context lengths, in words."""
    losses: np.ndarray
    """float32 [M, G, W]: l(grid[j], targets[i]) of member m, nats per word."""
    targets: np.ndarray
    """int64 [W]: word indices of the shared targets, block by block, ascending."""
    block_len: int
    """Shared targets per block (every block keeps as many: the first of its shared words, as many as the fewest any
    block has; what the block bootstrap resamples)."""
    block_starts: np.ndarray
    """int64 [n_blocks]: the first word of each block drawn."""
    span_bytes: np.ndarray
    """int64 [W]: UTF-8 bytes of each target's span."""
    drawn: int
    """Words drawn as targets (n_blocks x the block length asked for)."""
    covered: dict[str, int]
    """Member -> words drawn that it scores exactly at every context length (and placebo step, with placebo losses)."""
    shared: int
    """Words drawn that every member covers (``targets`` keeps ``block_len`` of them per block)."""
    truncated: np.ndarray
    """int64 [M, G]: targets whose context did not fit the member's window and was read as its nearest tokens."""
    methods: tuple[str, ...]
    """Per member: 'window' or 'naive'."""
    tokenizers: tuple[dict[str, Any] | None, ...]
    """Per member: the tokenizer it read the text with (txlab.runs.scored.ScoredModel.tokenizer_record)."""
    placebo: np.ndarray | None = None
    """float32 [M, G-1, W]: the placebo losses of each step grid[j] -> grid[j+1], when collected."""

    def word_perplexity(self) -> np.ndarray:
        """[M, G]: exp(mean nats per word)."""
        return word_perplexity(self.losses)

    def byte_perplexity(self) -> np.ndarray:
        """[M, G]: exp(total nats / total UTF-8 bytes of the spans)."""
        return byte_perplexity(self.losses, self.span_bytes)


def word_group(tables: Sequence[WordLosses], words: Words, collection: Collection) -> WordGroup:
    """The group of members' ``tables`` (one collection, one text) on the words every member covers: each block keeps
    the first k of its shared words, k the fewest any block has, so the blocks stay of one length."""
    if not tables:
        raise TxlabError("a group needs at least one member")
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise TxlabError(f"member names must differ: {names}")
    c = collection
    main = np.stack([t.losses for t in tables])  # [M, G, N]
    ok = np.isfinite(main).all(axis=1)  # [M, N]
    if c.placebo:
        ok &= np.isfinite(np.stack([t.placebo for t in tables])).all(axis=1)
    shared = ok.all(axis=0).reshape(c.blocks, c.block_len)  # [n_blocks, block_len]
    k = int(shared.sum(axis=1).min())
    if k == 0:
        counts = ", ".join(f"{name} {int(n)}" for name, n in zip(names, ok.sum(axis=1)))
        raise TxlabError(f"a block of {c.block_len} words holds no word that every member scores exactly (covered of {c.n_targets} "
                         f"drawn: {counts}): use longer blocks, or members whose tokenizers split at spaces")
    keep = np.concatenate([b * c.block_len + np.flatnonzero(row)[:k] for b, row in enumerate(shared)])  # [W]: columns of the drawn words
    targets = tables[0].drawn[keep]
    placebo = np.stack([t.placebo[:, keep] for t in tables]) if c.placebo else None
    return WordGroup(tuple(names), c.grid, main[:, :, keep], targets, k, tables[0].drawn[:: c.block_len].copy(),
                     words.span_bytes(targets), c.n_targets, {name: int(n) for name, n in zip(names, ok.sum(axis=1))},
                     int(shared.sum()), np.stack([t.truncated[:, keep].sum(axis=1) for t in tables]).astype(np.int64),
                     tuple(t.method for t in tables), tuple(t.meta.get("tokenizer") for t in tables), placebo)


def group_word_losses(members: Sequence[ScoredModel], text: str | Words, collection: Collection, *, batch_size: int = 16,
                      progress: bool = False, offsets: Sequence[int] | None = None) -> WordGroup:
    """Every member collected on its own (:func:`collect_word_losses`, kept where a member has a home), then grouped on
    the words every member covers (:func:`word_group`)."""
    words = text if isinstance(text, Words) else cut_words(text)
    check_spaced(words)
    tables = [collect_word_losses(m, words, collection, batch_size=batch_size, progress=progress, offsets=offsets) for m in members]
    return word_group(tables, words, collection)
