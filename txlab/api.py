"""The few calls a researcher needs, exported as ``txlab.<name>``: any model, any text, losses at exact
context lengths, RECL.

    import txlab
    model = txlab.load_model("hf:path/to/checkpoint")       # or a txlab run directory: a model ready to score
    tokens = txlab.encode_text("my_text.txt", model)         # its valid split, by the model's own tokenizer (or "char", "word", "hf:PATH")
    table = txlab.context_losses(model, tokens, grid=[16, 32, 64, 128], n_blocks=4, block_len=200)
    print(txlab.group_recl([table], ["mine"], rs=[0.1, 1.0]))

Everything here composes the library's own functions (txlab.models.hf, txlab.measure.losses, txlab.analysis.recl,
txlab.analysis.table8, txlab.runs.evaluate); the commands use the same ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from txlab.analysis.recl import DEFAULT_RS, check_grid
from txlab.analysis.table8 import Bootstrap, GroupTable, Table8Row, recl_rows
from txlab.data.corpus import load_corpus, load_corpus_for_model
from txlab.data.formats import read_text
from txlab.data.textdata import split_text, text_data_config
from txlab.data.tokenizers import CharTokenizer, CorpusTokenizer, HfTokenizer, WordTokenizer, load_hf_tokenizer, parse_tokenizer
from txlab.errors import TxlabError
from txlab.measure.collection import Collection
from txlab.measure.losses import collect_losses, sample_blocks
from txlab.measure.reading import placebo_offsets
from txlab.measure.words import WordGroup, group_word_losses
from txlab.models.interface import Context, LanguageModel
from txlab.runs.checkpoint import load_checkpoint
from txlab.runs.evaluate import evaluate, scored_units, text_stream
from txlab.runs.scored import ScoredModel, TextTokenizer, as_scored, load_model  # noqa: F401  (txlab.load_model)


def run_tokens(run_dir: str | Path, split: str = "valid") -> np.ndarray:
    """A txlab run's corpus split in the ids its model reads (an imported model's own numbering included)."""
    ckpt = load_checkpoint(Path(run_dir))
    corpus = load_corpus_for_model(ckpt.config.data, ckpt.meta["vocab_hash"], ckpt.vocab, split, str(run_dir), progress=False)
    return np.asarray(corpus.split(split))


def encode_text(text: str | Path, tokenizer: str | ScoredModel, split: str | None = "valid") -> np.ndarray:
    """Ids of a text under ``tokenizer``: a model loaded with ``hf:`` (its own tokenizer), ``hf:PATH_OR_HUB_ID``, ``char``
    or ``word``. No special tokens are added.

    ``text`` is a file, a folder of split files, or the text itself, by one rule (:func:`text_path`): a ``Path`` names a
    file or folder, which must exist; so does a string naming an existing one; a string of one line without whitespace
    that looks like a path (it holds ``/`` or ``\\``, or ends in a suffix such as ``.txt``) is refused when nothing has
    that name, so a mistyped file name is never scored as text; any other string is the text itself.

    A file or folder is read as ``txlab train`` and ``txlab recl --text`` read it (the same encoding and cache): ``split``
    (train, valid or test; default valid, what the command line scores) of a file's tokens cut 0.9/0.05/0.05 (``txlab
    eval --text`` and :func:`perplexity` cut one file in characters instead, at word starts), or a folder's split file;
    ``split=None`` gives a file's every token. ``char`` and ``word`` count their vocabulary from the whole text, as the
    command line does. Text given as a string is encoded whole (it has no splits), by a Hugging Face tokenizer. A file
    must be UTF-8 text."""
    if isinstance(tokenizer, (ScoredModel, LanguageModel)):
        member = as_scored(tokenizer)
        if member.run_dir is not None:
            raise TxlabError("a txlab run reads its own corpus: take it with txlab.run_tokens")
        if not isinstance(member.tokenizer, HfTokenizer):
            raise TxlabError(f"{member.name} holds no tokenizer: give one as encode_text(text, 'hf:TOKENIZER_FOLDER_OR_HUB_ID')")
        spec = f"hf:{member.tokenizer.source}"
    else:
        spec = str(tokenizer)
        parse_tokenizer(spec)
    path = text_path(text)
    if path is None:
        if not spec.startswith("hf:"):
            raise TxlabError(f"tokenizer {spec!r} counts its vocabulary from a text file: give the file's path, or a Hugging Face tokenizer")
        return np.asarray(load_hf_tokenizer(spec[3:].strip()).encode(str(text)), dtype=np.int64)
    if split is None and path.is_dir():
        raise TxlabError(f"{path} is a folder of split files: give split='train', 'valid' or 'test'")
    data = text_data_config(path, spec, text_split=(1.0, 0.0, 0.0) if split is None else None)
    return np.asarray(load_corpus(data, progress=False).split("train" if split is None else split), dtype=np.int64)


_PATH_LIKE = re.compile(r"^\S*([/\\]\S*|\.[A-Za-z0-9]{1,8})$")
"""One word holding a path separator or ending in a file suffix: what :func:`encode_text` takes for a path."""


def text_path(text: str | Path) -> Path | None:
    """The file or folder ``text`` names by :func:`encode_text`'s rule, or None when it is the text itself."""
    if isinstance(text, os.PathLike) or (len(text) < 4096 and "\n" not in text and (os.path.exists(text) or _PATH_LIKE.match(text))):
        path = Path(text)
        if not path.exists():
            raise TxlabError(f"no file {text}: encode_text reads a Path, or a string naming an existing file, as a file "
                             "(a one-word string that looks like a path is never taken for the text itself)")
        return path
    return None


def text_content(text: str | Path) -> str:
    """The text :func:`text_path`'s rule names: a file's UTF-8 text, or the string itself."""
    path = text_path(text)
    if path is None:
        return str(text)
    if not path.is_file():
        raise TxlabError(f"{path} is not a text file")
    try:
        return read_text(path)  # refused as the commands refuse it: not UTF-8, NUL, a byte-order mark alone, a gigantic line
    except OSError as err:
        raise TxlabError(f"cannot read {path}: {err.strerror or err}") from None


@dataclass(frozen=True)
class ContextLosses:
    """One model's losses at controlled context lengths on a set of targets."""

    losses: np.ndarray
    """float32 [G, T]: -ln P(x_t | the grid[j] tokens before it), nats."""
    grid: tuple[int, ...]
    targets: np.ndarray
    """int64 [T] positions of the scored tokens, in blocks of ``block_len``."""
    block_len: int
    max_context: int | None
    """The model's cap (learned absolute positions, the vanilla window): longer contexts score as this many tokens."""
    placebo: np.ndarray | None = None
    """float32 [G-1, T] placebo losses of each grid step, when asked for."""


def context_losses(
    model: ScoredModel | LanguageModel, tokens: np.ndarray, grid: Sequence[int], n_blocks: int = 8, block_len: int = 250, *,
    seed: int = 0, placebo: bool = False, batch_size: int = 16, progress: bool = False, stride: float | None = None,
) -> ContextLosses:
    """l(c, t) for every c of ``grid`` on ``n_blocks`` contiguous blocks of ``block_len`` targets drawn by
    ``seed`` (after the first max(grid) tokens; with ``placebo``, each block's far spans too): exactly c tokens of context each, read as the model is
    evaluated (see txlab.measure.losses), in the model's precision (:func:`load_model`; fp32 for a model built otherwise).
    The grid is checked as the CLI checks it (txlab.analysis.recl.check_grid: at least two strictly ascending
    positive lengths). Models compared by :func:`group_recl` must share ``tokens``, grid, blocks and seed (and stride).
    ``stride``: strided contexts for long ones (txlab.measure.strided): runs of s targets (``stride`` tokens, or that
    fraction of c) each read once from c tokens before their first, so a context lies in [c, c + s)."""
    grid = check_grid(grid)
    tokens = np.asarray(tokens)
    starts = sample_blocks(len(tokens), n_blocks, block_len, max(grid), seed)
    member = as_scored(model)
    kwargs = dict(tgt_len=member.tgt_len or max(grid), context=member.context, batch_size=batch_size, progress=progress,
                  precision=member.precision, compile=member.compile, stride=stride)
    losses = collect_losses(member.model, tokens, grid, starts, block_len, **kwargs)
    placebo_losses = (collect_losses(member.model, tokens, grid, starts, block_len, placebo=True, offsets=placebo_offsets(len(tokens), n_blocks, seed, grid),
                                     **kwargs) if placebo else None)
    targets = (starts[:, None] + np.arange(block_len)).reshape(-1)
    return ContextLosses(losses, grid, targets, block_len, member.max_context, placebo_losses)


def group_recl(tables: Sequence[ContextLosses], names: Sequence[str], rs: Sequence[float] = DEFAULT_RS, *,
         n_boot: int = 0, seed: int = 0) -> list[Table8Row]:
    """RECL of a group (one row per model and r; txlab.analysis.table8.recl_rows), from the tables of
    :func:`context_losses` on the same targets; with placebo losses in every table, the placebo-aware RECL too."""
    if len(tables) != len(names) or not tables:
        raise TxlabError(f"give one name per table: {len(tables)} tables, {len(names)} names")
    first = tables[0]
    for name, table in zip(names, tables):
        if table.grid != first.grid or not np.array_equal(table.targets, first.targets):
            raise TxlabError(f"{name} was scored on other context lengths or targets than {names[0]}: collect both alike")
    placebo = np.stack([t.placebo for t in tables]) if all(t.placebo is not None for t in tables) else None
    caps = {name: t.max_context for name, t in zip(names, tables)}
    table = GroupTable(np.stack([t.losses for t in tables]), first.grid, list(names), caps, placebo)
    return recl_rows(table, rs=rs, bootstrap=Bootstrap(first.block_len, n_boot, seed) if n_boot else None)


def word_context_losses(
    models: ScoredModel | LanguageModel | Sequence[ScoredModel | LanguageModel], text: str | Path, grid: Sequence[int], n_blocks: int = 8,
    block_len: int = 250, *, seed: int = 0, names: Sequence[str] | None = None, tokenizers: Sequence[Any] | None = None, method: str = "auto",
    batch_size: int = 16, progress: bool = False, placebo: bool = False,
) -> tuple[list[ContextLosses], WordGroup]:
    """l(c, w) in words for models with any tokenizers (txlab.measure.words): per model, a :class:`ContextLosses` whose
    ``grid`` counts words of context and whose ``targets`` are word indices, on the same words for every model (those
    every model scores exactly), so :func:`group_recl` takes them; and the :class:`~txlab.measure.words.WordGroup` with
    each model's coverage and its perplexity per word and per byte.

    ``text``: a string, or the path of a UTF-8 file (read whole). ``n_blocks`` blocks of ``block_len`` words are drawn by
    ``seed`` after the first max(grid) words; each keeps the same number of words every model covers. The grid is
    checked as for tokens (at least two strictly ascending lengths). ``tokenizers``: one per model (None: each model's
    own, that of an ``hf:`` checkpoint or of a txlab run); a txlab tokenizer, a transformers fast tokenizer or a
    `tokenizers.Tokenizer`. ``names`` default to the models' names. Models read context as :func:`context_losses` reads
    it; the tables are collected in memory (the command line keeps them on disk). ``placebo``: the placebo losses too."""
    listed = [models] if isinstance(models, (ScoredModel, LanguageModel)) else list(models)
    members = [as_scored(m, f"model{i}") for i, m in enumerate(listed)]
    if tokenizers is not None:
        if len(tokenizers) != len(members):
            raise TxlabError(f"give one tokenizer per model: {len(members)} models, {len(tokenizers)} tokenizers")
        members = [replace(m, tokenizer=as_text_tokenizer(t)) for m, t in zip(members, tokenizers)]
    if names is None:
        labels = [m.name for m in members]
        names = labels if len(set(labels)) == len(labels) else [f"{label}-{i}" for i, label in enumerate(labels)]
    if len(names) != len(members):
        raise TxlabError(f"give one name per model: {len(members)} models, {len(names)} names")
    members = [replace(m, name=name, home=None) for m, name in zip(members, names)]
    collection = Collection("valid", tuple(grid), n_blocks, block_len, seed, placebo, method, "word")
    group = group_word_losses(members, text_content(text), collection, batch_size=batch_size, progress=progress)
    return [ContextLosses(group.losses[i], group.grid, group.targets, group.block_len, None,
                          None if group.placebo is None else group.placebo[i]) for i in range(len(members))], group


def as_text_tokenizer(tokenizer: Any) -> TextTokenizer:
    """A tokenizer a user gives, as txlab reads text with it (with character offsets): txlab's own as it is; a
    transformers fast tokenizer or a `tokenizers.Tokenizer` as a txlab.data.tokenizers.HfTokenizer."""
    if isinstance(tokenizer, (CharTokenizer, WordTokenizer, HfTokenizer, CorpusTokenizer)):
        return tokenizer
    if type(tokenizer).__module__.startswith("tokenizers"):  # a `tokenizers.Tokenizer`: transformers wraps it without a file
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise TxlabError(f"a {type(tokenizer).__name__} gives no character offsets: words need a fast (Rust) Hugging Face tokenizer, "
                         "or txlab's char or word tokenizer")
    return HfTokenizer(getattr(tokenizer, "name_or_path", "") or "(given)", tokenizer)


def perplexity(model: ScoredModel | LanguageModel, tokens: np.ndarray | None = None, *, text: str | Path | None = None, split: str = "valid",
               segment: int | None = None, memory: int | None = None, batch_size: int = 1, max_tokens: int = 0) -> dict:
    """The model's loss over ``tokens``, or over ``text`` read by its own tokenizer, with the paper's protocol: every target
    once, read in segments of ``segment`` tokens, each carrying ``memory`` tokens of the past (defaults: a run's evaluation
    settings; a Hugging Face model's position table or 512, and no memory), in ``model.precision`` as :func:`context_losses`.
    Returns {'loss' (nats per token), 'ppl', 'tokens'}.

    With ``text`` (a file, a folder of split files, or the text itself, by :func:`encode_text`'s rule), the text is known,
    so it adds perplexity per word and per byte, with their denominators: {'per_word', 'per_byte', 'words', 'bytes'}, as
    `txlab eval` reports them (txlab.runs.evaluate.text_units: the nats over the words and UTF-8 bytes of the text the
    targets spell; a line end is whitespace, not a word). A file is read as `txlab eval --text` reads it: ``split``'s
    characters, cut at word starts, so models with any tokenizers score the same characters; a string is read whole. Ids
    alone say nothing of words, so ``tokens`` gives no perplexity per word."""
    member = as_scored(model)
    if (tokens is None) == (text is None):
        raise TxlabError("give perplexity the tokens or the text (text=...), one of them")
    stream = None
    if text is not None:
        path = text_path(text)
        chars = text_content(text) if path is None else split_text(text_data_config(path), split)
        stream = text_stream(member.reading_text().tokenizer, chars)
        tokens = stream.ids
    tgt_len = segment or member.tgt_len or (member.max_context or 512)
    context = member.context if memory is None else Context(mem_len=memory, same_length=member.context.same_length, clamp_len=member.context.clamp_len)
    result = evaluate(member.model, np.asarray(tokens), tgt_len, context, batch_size, max_tokens, precision=member.precision)
    units = {} if stream is None else scored_units(result, stream)
    return {"loss": result.loss, "ppl": float(np.exp(min(result.loss, 700.0))), "tokens": result.tokens, **units}
