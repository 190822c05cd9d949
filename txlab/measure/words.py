"""Losses in words: context and targets that belong to the text, so members with any tokenizers share them.

What is measured
----------------
The text is cut into words, maximal runs of non-whitespace (:func:`cut_words`). Word w's **span** is the word
with the whitespace before it, ``text[end(w-1) : end(w)]``: GPT-2-style and SentencePiece-style tokenizers attach
that whitespace to the next word, so the span is what a member writes when it writes w. **Context c** of w is the
text of the c words before it, ``text[start(w-c) : end(w-1)]``: from the first character of word w-c to the end of
word w-1, so the whitespace before w belongs to the target, never to the context. Then

    l(c, w) = -ln P(span | context) = the sum of the member's token losses over the tokens that spell the span,

read from a fresh start: the member tokenizes ``context + span`` with its own tokenizer, reads the tokens as
txlab.measure.losses reads a context (one segment from a fresh state, or its evaluation chunks with its memory
settings) and sums the losses of the span's tokens. Only the LanguageModel interface is used.

Tokenizers of text
------------------
:func:`text_encoder` gives every token's character offsets: a Hugging Face fast tokenizer's own, txlab's char and word
vocabularies', and for a run on a registry corpus (:func:`run_tokenizer`, a :class:`CorpusTokenizer`) its corpus's
unit: words (a word the vocabulary lacks read as the corpus's unknown symbol), characters, or enwik8's UTF-8 bytes
(each byte spanning its character, so a boundary between characters is one between bytes).

Exactness and coverage
----------------------
A member (a model and its tokenizer) scores (c, w) **exactly** only where its tokenization puts token boundaries at
both ends of the span (:func:`span_tokens`):

- in the tokens of ``context + span``, no token straddles the span's start, at least one token precedes it, and at
  least one spells it;
- the tokens of ``context + span + the next span`` begin with exactly those tokens and put no token across the
  span's end: what follows the word does not change how it is written;
- every symbol is in the member's vocabulary, and the span holds no unknown-symbol token (a tokenizer's <unk>
  scores a class of strings, not the span); the context may hold one, since that is how the member reads it;
- the span's tokens fit in the member's window (``model.max_context``).

A word is covered by a member when every context length of the grid is exact. A group's targets are the words every
member covers (:func:`group_word_losses`), and each member's coverage is counted.

Two methods, one table
----------------------
``naive``: one forward per (c, w) over exactly the tokens of ``context + span`` (the reference). ``window``: one
forward per starting word s over the tokens of ``text[start(s) : ...]``, whose prefix up to word s + c is, where the
tokenization is prefix-stable, exactly the tokens of (c, s + c)'s ``context + span``; a cell is served by the window
only when that holds (the ids are compared, cell by cell), and by its own forward otherwise. Since a prediction of a
prefix-causal model depends only on the tokens before it (txlab.measure.reading.is_prefix_causal), the window's rows
are the naive forward's rows: the two methods give one table. ``auto`` takes the window method for a prefix-causal
model. A context whose tokens do not fit the window of a capped model is read as its nearest tokens that do (the
model's window ending at the span's last token), by its own forward, and counted (``truncated``).

Placebo
-------
The placebo of a step c -> c' (txlab.measure.losses, in words): word w after a context whose c nearest words are its
own, with the whitespace before the first of them, and whose c' - c words before those are a span of the text far
away (``offset`` words on, half the text by default). It is scored as a true cell is, exact or left out (a word is
covered only where its placebo cells are exact too), and read one forward per cell (:func:`placebo_cells`).

Perplexity in words and bytes (:func:`word_perplexity`, :func:`byte_perplexity`) is pure numpy over the table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from txlab.data.formats import char_codes, code_ids
from txlab.data.corpus import load_corpus
from txlab.data.registry import CORPORA, EOS, TEXT_CORPUS
from txlab.data.textdata import trained_tokenizer
from txlab.data.tokenizers import HfTokenizer
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.measure.losses import check_token_ids, sample_blocks, scoring
from txlab.measure.reading import check_far, far_starts, is_prefix_causal, read_fresh, target_nll
from txlab.models.interface import Context, LanguageModel
from txlab.progress import Progress
from txlab.runs.checkpoint import read_meta, saved_config, saved_vocab

WORD = re.compile(r"\S+")
"""A word: a maximal run of non-whitespace (Python's Unicode whitespace, the set str.split() splits on)."""
MAX_MEAN_WORD_CHARS = 30
"""A text whose words average more characters than this has too few spaces for words to be a unit (a script
written without spaces: Chinese, Japanese, Thai); English averages about 5, Finnish about 8."""
METHODS = ("auto", "window", "naive")


# --------------------------------------------------------------------------------------------------
# Words (pure)


@dataclass(frozen=True)
class Words:
    """A text cut into words: word w is ``text[starts[w] : ends[w]]``."""

    text: str
    starts: np.ndarray
    """int64 [N]: each word's first character."""
    ends: np.ndarray
    """int64 [N]: one past each word's last character."""

    def __len__(self) -> int:
        return len(self.starts)

    def span(self, w: int) -> tuple[int, int]:
        """(first, end) character of word w's span: the word with the whitespace before it."""
        return (int(self.ends[w - 1]) if w else 0), int(self.ends[w])

    def context(self, w: int, c: int) -> tuple[int, int]:
        """(first, end) character of context c of word w: word w-c's first character to word w-1's end."""
        if not 1 <= c <= w:
            raise TxlabError(f"word {w} has no context of {c} words (it needs 1 <= c <= {w})")
        return int(self.starts[w - c]), int(self.ends[w - 1])

    def span_bytes(self, targets: np.ndarray) -> np.ndarray:
        """int64 [T]: the UTF-8 bytes of each target's span (the denominator of :func:`byte_perplexity`)."""
        return np.array([len(self.text[slice(*self.span(int(w)))].encode("utf-8")) for w in targets], dtype=np.int64)


def cut_words(text: str) -> Words:
    """The words of ``text`` (maximal runs of non-whitespace)."""
    bounds = np.array([m.span() for m in WORD.finditer(text)], dtype=np.int64).reshape(-1, 2)  # [N, 2]: (start, end)
    return Words(text, bounds[:, 0].copy(), bounds[:, 1].copy())


def check_spaced(words: Words) -> None:
    """Refuse a text whose words are too long to be a unit (see :data:`MAX_MEAN_WORD_CHARS`)."""
    if len(words) == 0:
        raise TxlabError("the text holds no words")
    mean = float(np.mean(words.ends - words.starts))
    if mean > MAX_MEAN_WORD_CHARS:
        raise TxlabError(
            f"the text's words average {mean:.0f} characters: it has too few spaces for words to be the unit (a script written "
            "without spaces, such as Chinese, Japanese or Thai, would make every sentence one word); segment it into "
            "space-separated words first, or score it in tokens (--unit token) with members that share a tokenizer")


def word_perplexity(losses: np.ndarray) -> np.ndarray:
    """exp(mean nats per word) over the last axis: [..., W] -> [...]."""
    return np.exp(np.mean(np.asarray(losses, dtype=np.float64), axis=-1))


def byte_perplexity(losses: np.ndarray, span_bytes: np.ndarray) -> np.ndarray:
    """exp(total nats / total UTF-8 bytes of the spans) over the last axis: [..., W] and [W] -> [...]."""
    return np.exp(np.sum(np.asarray(losses, dtype=np.float64), axis=-1) / float(np.sum(span_bytes)))


# --------------------------------------------------------------------------------------------------
# A member's tokenizer, with character offsets


@dataclass(frozen=True)
class Encoding:
    """A text's tokens under one tokenizer."""

    ids: np.ndarray
    """int64 [n]; -1 for a symbol the vocabulary does not hold."""
    starts: np.ndarray
    """int64 [n]: each token's first character in the text."""
    ends: np.ndarray
    """int64 [n]: one past each token's last character."""
    unknown: np.ndarray
    """bool [n]: the tokenizer's unknown-symbol token (or a symbol with no id)."""


Encoder = Callable[[Sequence[str]], list[Encoding]]
"""Texts -> their encodings, with no special tokens added."""


def _hf_encoder(backend: Any) -> Encoder:
    """A `tokenizers` pipeline's encodings (its offsets are characters of the Python string)."""
    model = backend.model
    unk = getattr(model, "unk_token", None)
    unk_id = backend.token_to_id(unk) if unk else getattr(model, "unk_id", None)  # Unigram names its unknown token by id

    def encode(texts: Sequence[str]) -> list[Encoding]:
        out = []
        for enc in backend.encode_batch(list(texts), add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int64)
            offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)  # [n, 2]: (start, end)
            out.append(Encoding(ids, offsets[:, 0], offsets[:, 1], ids == (-1 if unk_id is None else unk_id)))
        return out

    return encode


def _code_encoder(vocab: Vocab, code: Callable[[str], int], codes_of: Callable[[str], tuple[np.ndarray, np.ndarray]]) -> Encoder:
    """Every code a token: ``codes_of(text)`` gives the codes (int64 [n]) and each one's character (int64 [n]);
    ``code(symbol)`` is a symbol's code. A code the vocabulary lacks has no id."""
    lookup = code_ids(vocab, code)  # [largest code + 1]
    known = np.zeros(len(lookup), dtype=bool)
    known[[code(s) for s in vocab.symbols]] = True

    def encode(texts: Sequence[str]) -> list[Encoding]:
        out = []
        for text in texts:
            codes, chars = codes_of(text)  # [n], [n]
            inside = codes < len(lookup)
            has_id = np.zeros(len(codes), dtype=bool)
            has_id[inside] = known[codes[inside]]
            ids = np.where(has_id, lookup[np.where(inside, codes, 0)], -1)
            out.append(Encoding(ids, chars, chars + 1, ~has_id))
        return out

    return encode


def _characters(text: str) -> tuple[np.ndarray, np.ndarray]:
    codes = char_codes(text).astype(np.int64)  # [n]: code points
    return codes, np.arange(len(codes), dtype=np.int64)


def _utf8_bytes(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of ``text`` and the character each belongs to: a character's bytes share its span, so a token
    boundary between characters is one between bytes."""
    points = char_codes(text).astype(np.int64)  # [n]
    widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)  # [n]: UTF-8 bytes per character
    codes = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)  # [sum(widths)]
    return codes, np.repeat(np.arange(len(points), dtype=np.int64), widths)


def _char_encoder(vocab: Vocab) -> Encoder:
    """txlab's character vocabulary: every character a token."""
    return _code_encoder(vocab, ord, _characters)


def _byte_encoder(vocab: Vocab) -> Encoder:
    """A byte vocabulary (enwik8's, whose symbols are decimal byte values): every UTF-8 byte a token, its offsets
    those of the character it belongs to."""
    return _code_encoder(vocab, int, _utf8_bytes)


LINE_OR_WORD = re.compile(r"\n|\S+")


def _word_encoder(vocab: Vocab, line_end: str = EOS) -> Encoder:
    """txlab's word vocabulary: every word a token, every line end ``line_end`` (txlab.data.formats.words, whose
    trailing marker after the text's last line is not written: the text ends at a word). A word the vocabulary lacks
    is its unknown symbol where it has one (as a word corpus reads it), else has no id; either way it is unknown."""
    index, end = vocab.index, vocab.index[line_end]
    missing = -1 if vocab.unk_id is None else vocab.unk_id

    def encode(texts: Sequence[str]) -> list[Encoding]:
        out = []
        for text in texts:
            found = [(m.start(), m.end(), end if m.group() == "\n" else index.get(m.group(), missing)) for m in LINE_OR_WORD.finditer(text)]
            table = np.array(found, dtype=np.int64).reshape(-1, 3)  # [n, 3]: (start, end, id)
            ids = table[:, 2].copy()
            out.append(Encoding(ids, table[:, 0].copy(), table[:, 1].copy(), (ids < 0) | (ids == vocab.unk_id)))
        return out

    return encode


@dataclass(frozen=True)
class CorpusTokenizer:
    """How a txlab run trained on a registry corpus reads text: the corpus's unit with the run's vocabulary
    (what :func:`run_tokenizer` gives)."""

    kind: str
    """'word' (whitespace-split words), 'char' (every character a token) or 'byte' (every UTF-8 byte a token)."""
    vocab: Vocab
    line_end: str = EOS
    """'word' only: the symbol a line end is (lm1b's is <S>)."""


def text_encoder(tokenizer: Any) -> Encoder:
    """The encoder of a member's tokenizer: txlab's HfTokenizer, CharTokenizer or WordTokenizer
    (txlab.data.tokenizers, the last two with their vocabulary), a :class:`CorpusTokenizer`, a transformers fast
    tokenizer (what txlab.models.hf.load_tokenizer gives) or a `tokenizers.Tokenizer`."""
    kind = getattr(tokenizer, "kind", None)
    if kind in ("char", "word", "byte"):
        if tokenizer.vocab is None:
            raise TxlabError(f"txlab's {kind} tokenizer has no vocabulary yet: give it the model's (tokenizer.vocab = ...)")
        if kind == "word":
            return _word_encoder(tokenizer.vocab, tokenizer.line_end if isinstance(tokenizer, CorpusTokenizer) else EOS)
        return (_char_encoder if kind == "char" else _byte_encoder)(tokenizer.vocab)
    backend = tokenizer.backend if isinstance(tokenizer, HfTokenizer) else getattr(tokenizer, "backend_tokenizer", None)
    if backend is None and hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "token_to_id"):
        backend = tokenizer  # a tokenizers.Tokenizer itself
    if backend is None:
        raise TxlabError(f"a {type(tokenizer).__name__} gives no character offsets: words need a fast (Rust) Hugging Face tokenizer, "
                         "or txlab's char or word tokenizer")
    return _hf_encoder(backend)


def run_tokenizer(run_dir: Path) -> Any:
    """The tokenizer a txlab run reads text with: for a run trained on own text its ``data.tokenizer`` (char or word
    with the run's vocabulary, or its hf: tokenizer); for a run trained on a registry corpus a :class:`CorpusTokenizer`
    of the corpus's unit (words, characters, or enwik8's bytes) with the run's vocabulary: the one its checkpoint
    carries, else its corpus's, read from the local files or their cache (nothing is downloaded). A synthetic corpus's
    tokens are symbols, not text: refused."""
    cfg, meta = saved_config(run_dir).data, read_meta(run_dir)
    if cfg.corpus == TEXT_CORPUS:
        return trained_tokenizer(cfg, meta["vocab_hash"], str(run_dir))
    if cfg.corpus not in CORPORA:
        raise TxlabError(f"{run_dir} was trained on the synthetic corpus {cfg.corpus!r}, whose tokens are symbols, not text: in words every "
                         "txlab member reads text, so score this run in tokens, or train it on text (--text FILE, e.g. the corpus "
                         "rendered as words by studies/words_texts.py synthetic)")
    spec = CORPORA[cfg.corpus]
    vocab = saved_vocab(run_dir)
    if vocab is None:
        try:
            vocab = load_corpus(cfg, progress=False).vocab
        except TxlabError as err:
            raise TxlabError(f"{run_dir} reads text with the vocabulary of {cfg.corpus}, which is not here: {err}") from None
    if vocab.sha256 != meta["vocab_hash"]:
        raise TxlabError(f"{run_dir} was trained on another vocabulary than corpus {cfg.corpus} has now")
    if spec.level == "word":
        return CorpusTokenizer("word", vocab, spec.line_end)
    return CorpusTokenizer("byte" if spec.byte_symbols else "char", vocab)


# --------------------------------------------------------------------------------------------------
# Cells: one (c, w) of one member


@dataclass(frozen=True)
class Cell:
    """The tokens one member reads and scores for one (c, w): ``ids[first:]`` spell the span."""

    ids: np.ndarray
    """int64 [n]: the tokens of context + span."""
    first: int
    """Index of the span's first token (>= 1: the context has a token)."""


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


def member_cells(words: Words, encode: Encoder, targets: np.ndarray, grid: Sequence[int],
                 max_context: int | None) -> tuple[np.ndarray, dict[tuple[int, int], Cell]]:
    """(covered [G, T] bool, cells): every exact (c, w) of ``targets`` (word indices) for one member's encoder;
    cells are keyed by (grid index, target index)."""
    texts = []
    for j, c in enumerate(grid):
        for i, w in enumerate(targets.tolist()):
            lo, context_end = words.context(w, c)
            texts.append(((j, i), "", words.text[lo:context_end], words.text[slice(*words.span(w))], _next_span(words, w)))
    return _exact_cells(texts, encode, max_context, (len(grid), len(targets)))


def placebo_cells(words: Words, encode: Encoder, targets: np.ndarray, grid: Sequence[int], offset: int,
                  max_context: int | None) -> tuple[np.ndarray, dict[tuple[int, int], Cell]]:
    """(covered [G-1, T] bool, cells) of the placebo steps c -> c' = grid[j] -> grid[j+1], keyed by (j, target index):
    word w read after a context whose c nearest words are its own (with the whitespace before the first of them) and
    whose c' - c words before those are a far span of the text, ``offset`` words on (txlab.measure.reading.far_starts,
    over words), exact as a true cell is (:func:`span_tokens`)."""
    n, texts = len(words), []
    for j, (c, c2) in enumerate(zip(grid, grid[1:])):
        extra = c2 - c
        far = far_starts(n, targets - c, extra, offset)  # [T]: each far span's first word
        check_far(n, far, targets - c, targets, extra)
        for i, (w, f) in enumerate(zip(targets.tolist(), far.tolist())):
            distant = words.text[int(words.starts[f]) : int(words.ends[f + extra - 1])]
            near = words.text[words.span(w - c)[0] : int(words.ends[w - 1])]  # the c words, with the whitespace before them
            texts.append(((j, i), distant, near, words.text[slice(*words.span(w))], _next_span(words, w)))
    return _exact_cells(texts, encode, max_context, (len(grid) - 1, len(targets)))


def _next_span(words: Words, w: int) -> str | None:
    return words.text[slice(*words.span(w + 1))] if w + 1 < len(words) else None


def _exact_cells(texts: list[tuple[tuple[int, int], str, str, str, str | None]], encode: Encoder, max_context: int | None,
                 shape: tuple[int, int]) -> tuple[np.ndarray, dict[tuple[int, int], Cell]]:
    """(covered, cells) of ``texts``: per cell its key, the far text before its context ('' for a true cell), its
    context, its span and the span after it (None at the text's end), each tokenized and kept where exact."""
    reads = [far + context + span for _, far, context, span, _ in texts]
    follow_index = [k for k, item in enumerate(texts) if item[4] is not None]
    read_encodings = encode(reads)
    follow_encodings = dict(zip(follow_index, encode([reads[k] + texts[k][4] for k in follow_index])))
    covered = np.zeros(shape, dtype=bool)
    cells: dict[tuple[int, int], Cell] = {}
    for k, (key, far, context, _, _) in enumerate(texts):
        read = read_encodings[k]
        first = span_tokens(read, follow_encodings.get(k), len(far) + len(context))
        if first is None or (max_context is not None and len(read.ids) - first > max_context):
            continue  # not exact, or a span longer than the member's window
        covered[key] = True
        cells[key] = Cell(read.ids, first)
    return covered, cells


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


def window_cells(model: LanguageModel, words: Words, encode: Encoder, cells: dict[tuple[int, int], Cell], targets: np.ndarray,
                 grid: Sequence[int], chunk_len: int | None, batch_size: int) -> tuple[dict[tuple[int, int], float], set]:
    """The same values as :func:`naive_cells` for a prefix-causal model, one window per starting word: the window
    serves every cell whose tokens are its prefix (and fit the model's window); the other cells are read alone."""
    served: dict[int, list[tuple[int, int]]] = {}  # starting word -> the cells (grid index, target index) it serves
    for j, i in cells:
        served.setdefault(int(targets[i]) - grid[j], []).append((j, i))
    starts = sorted(served)
    last_word = {s: max(int(targets[i]) for _, i in served[s]) for s in starts}
    encodings = encode([words.text[int(words.starts[s]) : words.span(last_word[s])[1]] for s in starts])
    cap = model.max_context
    windows = []  # per window: (the tokens read, the keys of the cells it serves, their rows, their span tokens)
    alone: dict[tuple[int, int], Cell] = {}
    for s, window in zip(starts, encodings):
        keys, rows, wanted, length = [], [], [], 0
        for key in served[s]:
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
            windows.append((window.ids[:length], keys, rows, wanted))
    out, truncated = naive_cells(model, alone, chunk_len, batch_size, pad=True)
    windows.sort(key=lambda item: len(item[0]))  # similar lengths together: less padding
    for k in range(0, len(windows), batch_size):
        batch = windows[k : k + batch_size]
        per_window = _score_rows(model, [w[0] for w in batch], [np.concatenate(w[2]) for w in batch], [np.concatenate(w[3]) for w in batch],
                                 chunk_len)
        for (_, keys, rows, _), losses in zip(batch, per_window):
            for key, loss in zip(keys, np.split(losses, np.cumsum([len(r) for r in rows])[:-1])):
                out[key] = float(np.sum(loss, dtype=np.float64))
    return out, truncated


# --------------------------------------------------------------------------------------------------
# A group


@dataclass(frozen=True)
class WordMember:
    """One model of a group in words, with the tokenizer it reads the text with and how it reads context."""

    name: str
    model: LanguageModel
    tokenizer: Any
    """What :func:`text_encoder` takes."""
    tgt_len: int | None = None
    """Evaluation segment length, for a model that carries memory between chunks (None: one segment)."""
    context: Context | None = None
    """Memory settings to score with (None: the model's own, ``model.context``)."""
    precision: str = "fp32"
    """fp32, or bf16 or fp16 autocast (txlab.precision)."""


@dataclass(frozen=True)
class WordTable:
    """The losses of a group in words, on the words every member covers (the shared targets)."""

    members: tuple[str, ...]
    grid: tuple[int, ...]
    """Context lengths, in words."""
    losses: np.ndarray
    """float32 [M, G, W]: l(grid[j], targets[i]) of member m, nats per word."""
    targets: np.ndarray
    """int64 [W]: word indices of the shared targets, block by block, ascending."""
    block_len: int
    """Shared targets per block (every block keeps as many; see :func:`group_word_losses`)."""
    block_starts: np.ndarray
    """int64 [n_blocks]: the first word of each block drawn."""
    span_bytes: np.ndarray
    """int64 [W]: UTF-8 bytes of each target's span."""
    drawn: int
    """Words drawn as targets (n_blocks x the block length asked for)."""
    covered: dict[str, int]
    """Member -> words drawn that it scores exactly at every context length."""
    shared: int
    """Words drawn that every member covers (``targets`` keeps ``block_len`` of them per block)."""
    truncated: np.ndarray
    """int64 [M, G]: targets whose context did not fit the member's window and was read as its nearest tokens."""
    methods: tuple[str, ...]
    """Per member: 'window' or 'naive'."""
    placebo: np.ndarray | None = None
    """float32 [M, G-1, W]: the placebo losses of each step grid[j] -> grid[j+1] (:func:`placebo_cells`), when asked."""

    def word_perplexity(self) -> np.ndarray:
        """[M, G]: exp(mean nats per word)."""
        return word_perplexity(self.losses)

    def byte_perplexity(self) -> np.ndarray:
        """[M, G]: exp(total nats / total UTF-8 bytes of the spans)."""
        return byte_perplexity(self.losses, self.span_bytes)


def _method(member: WordMember, cells: dict[tuple[int, int], Cell], chunk_len: int | None, method: str) -> str:
    """'window' or 'naive': 'auto' picks the window method for a prefix-causal model (checked on the longest cell)."""
    if method != "auto":
        return method
    longest = max(cells.values(), key=lambda cell: len(cell.ids))
    return "window" if is_prefix_causal(member.model, longest.ids, len(longest.ids), chunk_len) else "naive"


def group_word_losses(members: Sequence[WordMember], text: str, grid: Sequence[int], n_blocks: int = 8, block_len: int = 250, *,
                      seed: int = 0, method: str = "auto", batch_size: int = 16, progress: bool = False, placebo: bool = False,
                      offset: int | None = None) -> WordTable:
    """l(c, w) of every member on the words every member covers, in ``n_blocks`` blocks of ``block_len`` words drawn by
    ``seed`` after the first max(grid) words (txlab.measure.losses.sample_blocks, in words).

    A block keeps the words of it that every member covers at every c; every block then keeps its first ``k`` of
    them, k the fewest any block kept, so that the blocks stay of one length (what the block bootstrap resamples).
    Coverage is found first, by the tokenizers alone, so only the words kept are read by the models. With ``placebo``,
    a word is covered only where its placebo cells are exact too, and the placebo losses of every step are read one
    forward per cell (:func:`placebo_cells`; far spans ``offset`` words on, default half the text)."""
    grid = tuple(int(c) for c in grid)
    if not members:
        raise TxlabError("a group needs at least one member")
    if len({m.name for m in members}) != len(members):
        raise TxlabError(f"member names must differ: {[m.name for m in members]}")
    if not grid or min(grid) < 1 or list(grid) != sorted(set(grid)):
        raise TxlabError(f"the grid must be ascending context lengths >= 1 word, got {list(grid)}")
    if method not in METHODS:
        raise TxlabError(f"unknown collection method {method!r}; choose {', '.join(METHODS)}")
    words = cut_words(text)
    check_spaced(words)
    starts = sample_blocks(len(words), n_blocks, block_len, max(grid), seed)
    encoders = [text_encoder(m.tokenizer) for m in members]
    blocks = [np.arange(start, start + block_len, dtype=np.int64) for start in starts.tolist()]  # [block_len] word indices each
    offset = len(words) // 2 if offset is None else offset

    def exact(member: WordMember, encode: Encoder, block: np.ndarray) -> np.ndarray:  # [len(block)]: exact at every c (and step)
        ok = member_cells(words, encode, block, grid, member.model.max_context)[0].all(axis=0)
        return ok & placebo_cells(words, encode, block, grid, offset, member.model.max_context)[0].all(axis=0) if placebo else ok

    covered = np.array([[exact(m, encode, block) for block in blocks] for m, encode in zip(members, encoders)])  # [M, n_blocks, block_len]
    shared = covered.all(axis=0)  # [n_blocks, block_len]
    k = int(shared.sum(axis=1).min())
    if k == 0:
        counts = ", ".join(f"{m.name} {int(n)}" for m, n in zip(members, covered.sum(axis=(1, 2))))
        raise TxlabError(f"a block of {block_len} words holds no word that every member scores exactly (covered of {n_blocks * block_len} "
                         f"drawn: {counts}): use longer blocks, or members whose tokenizers split at spaces")
    targets = np.concatenate([block[np.flatnonzero(keep)[:k]] for block, keep in zip(blocks, shared)])  # [W]
    losses = np.zeros((len(members), len(grid), len(targets)), dtype=np.float32)  # [M, G, W]
    placebo_losses = np.zeros((len(members), len(grid) - 1, len(targets)), dtype=np.float32) if placebo else None  # [M, G-1, W]
    truncated = np.zeros((len(members), len(grid)), dtype=np.int64)  # [M, G]
    methods = []
    with Progress(total=len(members) * n_blocks, desc="word losses", unit="block", disable=not progress, leave=False) as bar:
        for mi, (member, encode) in enumerate(zip(members, encoders)):
            chunk_len = member.tgt_len if (member.context or member.model.context).mem_len > 0 else None
            with scoring(member.model, member.context or member.model.context, member.precision):
                for b in range(n_blocks):
                    block = targets[b * k : (b + 1) * k]  # [k]: this block's shared targets
                    _, cells = member_cells(words, encode, block, grid, member.model.max_context)
                    assert len(cells) == len(grid) * k, "a kept word is no longer covered: the tokenizer is not deterministic"
                    for cell in cells.values():
                        check_token_ids(member.model, cell.ids, f"{member.name}'s tokens")
                    if len(methods) == mi:
                        methods.append(_method(member, cells, chunk_len, method))
                    if methods[mi] == "window":
                        values, cut = window_cells(member.model, words, encode, cells, block, grid, chunk_len, batch_size)
                    else:
                        values, cut = naive_cells(member.model, cells, chunk_len, batch_size)
                    for (j, i), value in values.items():
                        losses[mi, j, b * k + i] = value
                    for j, _ in cut:
                        truncated[mi, j] += 1
                    if placebo_losses is not None:
                        _, far_cells = placebo_cells(words, encode, block, grid, offset, member.model.max_context)
                        values, _ = naive_cells(member.model, far_cells, chunk_len, batch_size, pad=methods[mi] == "window")
                        for (j, i), value in values.items():
                            placebo_losses[mi, j, b * k + i] = value
                    bar.update(1)
    return WordTable(
        tuple(m.name for m in members), grid, losses, targets, k, starts, words.span_bytes(targets), n_blocks * block_len,
        {m.name: int(n) for m, n in zip(members, covered.sum(axis=(1, 2)))}, int(shared.sum()), truncated, tuple(methods), placebo_losses,
    )
