"""Text generation with memory: the sampling of the paper's Appendix E (top-k, renormalised).

:func:`generate` reads a prompt once and then samples one token at a time, carrying the model's state
from step to step, so a Transformer-XL attends its whole memory at the cost of one new token per
step. Everything goes through the LanguageModel interface and works for every family:

- models that carry state (Transformer-XL with memory, LSTM, QRNN) read each token exactly once;
  Transformer-XL uses the run's evaluation memory settings (mem_len, same_length, clamp_len);
- models that do not (the vanilla Transformer, Transformer-XL without memory) re-read their last
  ``window`` tokens from a fresh state at every step: the vanilla Transformer's own window
  (``model.max_context``), else the training segment length.

Each step keeps the ``top_k`` most likely next tokens (and of those the ``top_p`` nucleus), renormalises their probabilities (after
dividing the log-probabilities by ``temperature``) and draws one, from a generator seeded by ``seed``.

Text follows the corpus's representation (:class:`Detokenizer`): word-level corpora split the prompt
on whitespace and join tokens with spaces (a line end is ``<eos>`` where the vocabulary has it);
character-level ones concatenate characters, or UTF-8 bytes for byte corpora (enwik8).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from txlab.config import POSITIVE, SEED, Range
from txlab.data import synthetic
from txlab.data.corpus import load_corpus
from txlab.data.registry import CORPORA, EOS
from txlab.data.vocab import Vocab
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import read_text_file
from txlab.models import hf
from txlab.models.interface import LanguageModel
from txlab.runs.checkpoint import Checkpoint, load_checkpoint
from txlab.runs.evaluate import evaluation_context, read_in_chunks

MAX_PROMPT_BYTES = 16 * 2**20
"""The largest prompt file read (16 MiB of text): /dev/zero or a huge file would otherwise be read until memory runs out."""

GENERATED_TOKENS = Range(1, 1_000_000)
"""Tokens one call may generate: the ids and text are kept in memory, and 10^9 of them would not fit."""

TEMPERATURE = Range(0.01, 100)
"""Temperatures sampling can use: below 0.01 the float32 probabilities underflow to the single most
likely token (ask for that with --top-k 1), above 100 every token is about equally likely."""


def keep_top_p(top: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling's cut of log-probabilities sorted high to low [..., k]: the most likely tokens
    are kept until their probability reaches ``top_p`` (the one that crosses it too), the rest get -inf."""
    if top_p >= 1.0:
        return top
    probs = top.softmax(-1)
    before = probs.cumsum(-1) - probs  # probability of the more likely tokens: the first token always stays
    return top.masked_fill(before >= top_p, float("-inf"))


def sample_top_k(log_probs: torch.Tensor, top_k: int, temperature: float, generator: torch.Generator, top_p: float = 1.0) -> torch.Tensor:
    """One token id per row of ``log_probs`` [..., V]: drawn from the ``top_k`` most likely, cut to the
    ``top_p`` nucleus among them (:func:`keep_top_p`), renormalised -> [...]."""
    k = min(top_k, log_probs.size(-1))
    top, ids = (log_probs / temperature).topk(k, dim=-1)  # [..., k] each, most likely first
    top = keep_top_p(top, top_p)
    choice = torch.multinomial(top.softmax(-1).reshape(-1, k), 1, generator=generator)  # [N, 1]
    return ids.reshape(-1, k).gather(1, choice).view(log_probs.shape[:-1])  # [...]


class ContextReader:
    """Reads tokens into a model and returns the log-probabilities [V] of the token that follows.

    With a state-carrying model, every token is read once: in chunks of ``chunk_len`` carrying
    ``out.state``, the state kept from one call to the next. Otherwise the last ``window`` tokens
    read so far are re-read from a fresh state. Both read through txlab.runs.evaluate.read_in_chunks; what
    differs from evaluation is that each call but the first reads one token, sampled from the last.
    """

    def __init__(self, model: LanguageModel, chunk_len: int, window: int):
        self.model, self.chunk_len, self.window = model, chunk_len, window
        self.state = model.init_state(1)
        self.history: list[int] = []

    @torch.inference_mode()
    def read(self, ids: Sequence[int]) -> torch.Tensor:
        if not ids:
            raise TxlabError("nothing to read: give at least one token")
        if self.model.carries_state:
            for _, out in read_in_chunks(self.model, torch.tensor([list(ids)]), self.chunk_len, self.state):
                self.state = out.state
        else:
            self.history = (self.history + list(ids))[-self.window :]
            _, out = next(read_in_chunks(self.model, torch.tensor([self.history]), None))  # one chunk, from a fresh state
        return self.model.log_prob(out.hidden[0, -1]).float().cpu()  # [V]


def sample_tokens(reader: ContextReader, prompt: Sequence[int], n_tokens: int, top_k: int, temperature: float, seed: int,
                  top_p: float = 1.0) -> Iterator[int]:
    """Yield ``n_tokens`` sampled ids, each read back into the model before the next is drawn."""
    generator = torch.Generator().manual_seed(seed)
    log_probs = reader.read(prompt)
    for step in range(n_tokens):
        token = int(sample_top_k(log_probs, top_k, temperature, generator, top_p))
        yield token
        if step + 1 < n_tokens:
            log_probs = reader.read([token])


# --------------------------------------------------------------------------------------------------
# Text <-> symbols, as the corpus represents text


@dataclass(frozen=True)
class TextFormat:
    """How a model's ids stand for text: its vocabulary and the corpus's kind of symbol."""

    vocab: Vocab
    level: str
    """'word' or 'char'."""
    byte_symbols: bool = False
    """Character symbols are decimal byte values (enwik8), not characters."""
    corpus: str = ""
    """The corpus's name, for messages."""
    decode: Callable[[Sequence[int]], str] | None = None
    """A tokenizer's decoding of whole id sequences (subword text), where symbols do not simply join."""


def run_text_format(ckpt: Checkpoint) -> TextFormat:
    """The text format of a loaded run: the vocabulary the checkpoint carries (an imported model),
    else its corpus's, which is then read; the kind of symbol comes from the corpus's name."""
    data = ckpt.config.data
    corpus = None if ckpt.vocab is not None and data.corpus in CORPORA else load_corpus(data, progress=False)
    vocab = ckpt.vocab if ckpt.vocab is not None else corpus.vocab
    if vocab.sha256 != ckpt.meta["vocab_hash"]:
        raise TxlabError(f"the checkpoint was trained on another vocabulary than corpus {data.corpus} has now")
    if data.corpus in synthetic.VARIANTS:
        return TextFormat(vocab, "word", False, data.corpus)
    if corpus is None:  # an imported model: the registry says how its corpus writes text
        spec = CORPORA[data.corpus]
        return TextFormat(vocab, spec.level, spec.byte_symbols, data.corpus)
    return TextFormat(vocab, corpus.level, corpus.byte_symbols, data.corpus, corpus.to_text if corpus.level == "subword" else None)


class IncrementalText:
    """The text each new id adds, for a tokenizer that decodes whole sequences (a byte-level BPE joins
    pieces that are not characters alone): decode everything so far, emit what is new."""

    def __init__(self, decode: Callable[[Sequence[int]], str], prompt: Sequence[int]):
        self.decode, self.ids = decode, list(prompt)
        self.text = decode(self.ids)

    def piece(self, token: int) -> str:
        self.ids.append(token)
        text = self.decode(self.ids)
        # a piece that completes a character may rewrite the replacement mark before it: emit from where they differ
        same = len(os.path.commonprefix([self.text, text]))
        new = text[same:]
        self.text = text
        return new


class Detokenizer:
    """Symbols back to text piece by piece: words joined by spaces (``<eos>`` ends a line),
    characters concatenated, bytes decoded as UTF-8 once each character is complete."""

    def __init__(self, text: TextFormat):
        self.words = text.level == "word"
        self.bytes = codecs.getincrementaldecoder("utf-8")(errors="replace") if text.byte_symbols else None
        self.line_start = True

    def piece(self, symbol: str) -> str:
        if self.bytes is not None:
            return self.bytes.decode(bytes([int(symbol)]))
        if not self.words:
            return symbol
        if symbol == EOS:
            self.line_start = True
            return "\n"
        text = symbol if self.line_start else " " + symbol
        self.line_start = False
        return text


def prompt_symbols(prompt: str, text: TextFormat) -> list[str]:
    """The prompt as the corpus's symbols: words (a line end becomes ``<eos>`` where the vocabulary
    has it), characters, or the decimal values of its UTF-8 bytes for byte corpora."""
    if text.byte_symbols:
        return [str(b) for b in prompt.encode("utf-8")]
    if text.level != "word":
        return list(prompt)
    symbols: list[str] = []
    for line in prompt.splitlines(keepends=True):
        symbols += line.split()
        if line.endswith(("\n", "\r")) and EOS in text.vocab:
            symbols.append(EOS)
    return symbols


def encode_prompt(prompt: str, text: TextFormat, warn: Callable[[str], None]) -> list[int]:
    """Token ids of the prompt; unknown symbols become the unknown-word symbol, with a warning."""
    symbols = prompt_symbols(prompt, text)
    if not symbols:
        raise TxlabError("the prompt is empty: give at least one token of text")
    vocab = text.vocab
    unknown = list(dict.fromkeys(s for s in symbols if s not in vocab))
    if unknown:
        shown = ", ".join(repr(s) for s in unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        if vocab.unk is None:
            raise TxlabError(f"the prompt has symbols that are not in the {text.corpus} vocabulary, which has no unknown-word "
                             f"symbol: {shown} (known symbols look like {', '.join(repr(s) for s in vocab.symbols[:5])})")
        warn(f"not in the {text.corpus} vocabulary, read as {vocab.unk}: {shown}")
    return vocab.encode(symbols).tolist()


# --------------------------------------------------------------------------------------------------
# The command


def generate(
    run_dir: Path,
    *,
    prompt: str | None = None,
    prompt_file: Path | None = None,
    n_tokens: int = 100,
    top_k: int = 40,
    temperature: float = 1.0,
    seed: int = 0,
    device: str = "cpu",
    top_p: float = 1.0,
    on_text: Callable[[str], None] = lambda text: None,
    warn: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    """Continue a prompt (text, or a UTF-8 file) with ``n_tokens`` sampled tokens from a trained run.

    ``on_text`` receives the prompt as the model reads it (unknown words shown as the unknown-word
    symbol), then each generated piece of text as soon as it is sampled. Returns the generated ids
    and text with the settings used.
    """
    if (prompt is None) == (prompt_file is None):
        raise TxlabError("give the prompt as text (--prompt) or as a file (--prompt-file), one of the two")
    GENERATED_TOKENS.check(n_tokens, "--tokens")
    POSITIVE.check(top_k, "--top-k")
    if not 0.0 < top_p <= 1.0:
        raise TxlabError(f"--top-p must be above 0 and at most 1 (1 keeps every token of the top k), got {top_p}")
    TEMPERATURE.check(temperature, "--temperature")
    SEED.check(seed, "--seed")
    check_device(device)
    if prompt_file is not None:
        try:
            prompt = read_text_file(prompt_file, MAX_PROMPT_BYTES, "the prompt file")
        except (OSError, UnicodeDecodeError) as err:
            raise TxlabError(f"cannot read the prompt file {prompt_file}: {err}") from None
    if hf.is_hf_spec(str(run_dir)):
        model, prompt_ids, piece_of = _hf_generator(str(run_dir), prompt, device, on_text)
        window = model.max_context or model.trained_positions or 1024
        chunk_len = window  # read fresh: the window is the model's whole context
    else:
        if not Path(run_dir).is_dir():
            raise TxlabError(f"no run directory {run_dir}")
        ckpt = load_checkpoint(run_dir, map_location=device)
        text = run_text_format(ckpt)
        prompt_ids = encode_prompt(prompt, text, warn)
        model = ckpt.model.eval()
        chunk_len, context = evaluation_context(ckpt.config.model, ckpt.config.eval)
        model.set_context(context)
        window = model.max_context or ckpt.config.model.tgt_len
        if text.decode is not None:
            incremental = IncrementalText(text.decode, prompt_ids)
            on_text(incremental.text)
            piece_of = incremental.piece
        else:
            detokenizer = Detokenizer(text)
            on_text("".join(detokenizer.piece(s) for s in text.vocab.decode(prompt_ids)))
            piece_of = lambda token: detokenizer.piece(text.vocab.symbols[token])  # noqa: E731
    if not model.carries_state and len(prompt_ids) > window:
        warn(f"this model has no memory: it sees only the last {window} tokens of the prompt")

    generated, pieces, interrupted = [], [], False
    try:
        for token in sample_tokens(ContextReader(model, chunk_len, window), prompt_ids, n_tokens, top_k, temperature, seed, top_p):
            generated.append(token)
            pieces.append(piece_of(token))
            on_text(pieces[-1])
    except KeyboardInterrupt:  # Ctrl-C: the text so far stands; the caller says so and exits 130
        interrupted = True
    return {
        "interrupted": interrupted,
        "run": str(run_dir), "prompt_tokens": len(prompt_ids), "tokens": generated, "text": "".join(pieces),
        "top_k": top_k, "top_p": top_p, "temperature": temperature, "seed": seed, "carries_state": model.carries_state,
    }


def _hf_generator(spec: str, prompt: str, device: str, on_text: Callable[[str], None]) -> tuple[LanguageModel, list[int], Callable[[int], str]]:
    """A Hugging Face checkpoint, the prompt's ids under its own tokenizer (no special tokens), and the
    text each sampled id adds; the prompt's text goes to ``on_text`` as the tokenizer reads it back."""
    model = hf.load_causal_lm(spec, device=device)
    tokenizer = hf.load_tokenizer(model.source)
    if tokenizer is None:
        raise TxlabError(f"{model.source} holds no tokenizer: generation needs one to read the prompt and write text")
    prompt_ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    if not prompt_ids:
        raise TxlabError("the prompt is empty: give at least one token of text")
    incremental = IncrementalText(lambda ids: tokenizer.decode(ids), prompt_ids)
    on_text(incremental.text)
    return model, prompt_ids, incremental.piece
