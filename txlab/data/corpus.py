"""A corpus: its vocabulary and encoded splits (:class:`Corpus`), loaded by name, listed and described.

``load_corpus(cfg)`` returns a :class:`Corpus` (vocabulary + train/valid/test id arrays) for any name in
:data:`~txlab.data.registry.CORPUS_NAMES` and for own text: registry corpora are read from their files
and cached (:mod:`txlab.data.formats`, :mod:`txlab.data.cache`), synthetic ones generated
(:mod:`txlab.data.synthetic`), own text read and cached as :mod:`txlab.data.textdata` says.
Vocabularies are :mod:`txlab.data.vocab`'s; cutting id arrays into batches is :mod:`txlab.data.batching`'s.
This module also answers what `txlab data list|info` show.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from txlab.config import DataConfig
from txlab.data import synthetic
from txlab.data.cache import COPY_TOKENS, Entry, id_dtype, ids_sha256
from txlab.data.formats import encoded_corpus, entry_dir
from txlab.data.registry import CORPORA, CORPUS_NAMES, TEXT_CORPUS, CorpusSources, CorpusSpec, check_corpus_name, corpus_dir, locate_sources
from txlab.data.textdata import encoded_text, parse_split_fractions, split_text, text_data_config
from txlab.data.tokenizers import vocabulary_tokenizer_id
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import DamagedFile


@dataclass
class Corpus:
    """A vocabulary and the encoded splits of one corpus."""

    name: str
    level: str
    """'word', 'char' or 'subword' (own text read by a Hugging Face tokenizer)."""
    vocab: Vocab
    splits: dict[str, np.ndarray]
    """Split name -> 1-D integer ids (memory-mapped for real corpora)."""
    source: str
    """Where the tokens came from: a directory, or 'generated (...)' for synthetic corpora."""
    cache_dir: Path | None = None
    missing: dict[str, str] = field(default_factory=dict)
    """Splits without files -> the patterns looked for (own text: why the split is absent)."""
    truth: dict[str, synthetic.SyntheticText] | None = None
    """Synthetic corpora only: per split ground truth (needed_context, oracle losses)."""
    byte_symbols: bool = False
    tokenizer_id: str = ""
    """Names the tokenization (which text becomes which tokens): equal strings mean identical tokenization.
    'char:<16 hex>' and 'word:<16 hex>' are txlab's vocabularies (the start of their sha256),
    'hf:<16 hex>' a Hugging Face tokenizer (the start of the sha256 of its serialized pipeline). Empty
    when built: the vocabulary's. :meth:`relabel` keeps it: a new numbering reads the same tokens."""
    decode_text: Callable[[list[int]], str] | None = field(default=None, repr=False)
    """How :meth:`to_text` turns ids into text when the vocabulary alone cannot (a Hugging Face tokenizer)."""
    _hashes: dict[str, str] = field(default_factory=dict, repr=False)
    _in_range: set[str] = field(default_factory=set, repr=False)
    """Splits read from the cache whose ids are known to lie in the vocabulary (:meth:`split`)."""

    def __post_init__(self) -> None:
        if not self.tokenizer_id:
            self.tokenizer_id = vocabulary_tokenizer_id(self.level, self.vocab)

    @classmethod
    def from_entry(cls, name: str, level: str, source: str, entry: Entry, **more) -> Corpus:
        """The corpus a cache entry holds, memory-mapped, with the token-stream hashes it recorded."""
        vocab, splits = entry.read()
        return cls(name, level, vocab, splits, source, cache_dir=entry.path, missing=entry.meta["missing_splits"],
                   _hashes=entry.token_stream_hashes, **more)

    @property
    def n_token(self) -> int:
        return len(self.vocab)

    def split(self, name: str) -> np.ndarray:
        """The ids of one split; a clear error when the corpus directory lacks it. A split read from the cache is checked
        once to hold only ids of the vocabulary: a damaged cache file is named, never fed to a model (an embedding
        would fail with an IndexError, or worse, read another row)."""
        if name in self.splits:
            ids = self.splits[name]
            if self.cache_dir is not None and name not in self._in_range:
                self._check_in_range(name, ids)
            return ids
        if name in self.missing:
            if self.name in CORPORA:
                raise TxlabError(f"{self.name} has no {name} split in {self.source} (looked for {self.missing[name]}); fetch it with `txlab data get {self.name}`")
            raise TxlabError(f"{self.name} has no {name} split ({self.missing[name]})")
        raise did_you_mean(name, self.splits, "split")

    def _check_in_range(self, name: str, ids: np.ndarray) -> None:
        low = high = 0
        for at in range(0, len(ids), COPY_TOKENS):  # in pieces: a split may be larger than memory
            piece = ids[at : at + COPY_TOKENS]
            low, high = min(low, int(piece.min())), max(high, int(piece.max()))
        if low < 0 or high >= self.n_token:
            raise DamagedFile(self.cache_dir / f"{name}.npy", f"token id {high if high >= self.n_token else low}, outside its vocabulary "
                              f"of {self.n_token}", f"delete {self.cache_dir} and rerun to encode the corpus again")
        self._in_range.add(name)

    def token_stream_hash(self, split: str) -> str:
        """sha256 of the split's ids as little-endian int32: equal hashes mean identical token streams.

        A relabelled corpus (:meth:`relabel`) keeps the hash of the ids it was read with: the tokens
        are the same, only their numbering differs.
        """
        if split not in self._hashes:
            self._hashes[split] = ids_sha256(self.split(split))
        return self._hashes[split]

    def relabel(self, vocab: Vocab, splits: Sequence[str]) -> Corpus:
        """This corpus with ``splits`` (only those) numbered by ``vocab``'s ids instead of its own.

        For a model that brings its own vocabulary (an imported checkpoint): its symbols may be the
        corpus's in another order (ties in frequency broken differently), or miss some, which then
        become ``vocab.unk``.
        """
        try:
            lookup = vocab.encode(self.vocab.symbols)  # [corpus vocab size]: corpus id -> vocab id
        except TxlabError as err:
            raise TxlabError(f"corpus {self.name} has symbols the model's vocabulary lacks: {err}") from None
        dtype = id_dtype(len(vocab))
        return dataclasses.replace(
            self, vocab=vocab, splits={s: lookup[self.split(s)].astype(dtype) for s in splits},
            _hashes={s: self.token_stream_hash(s) for s in splits},
        )

    def to_text(self, ids: Iterable[int]) -> str:
        """Readable text of some ids (words joined by spaces; characters or bytes joined; a Hugging Face
        tokenizer's decoding)."""
        if self.decode_text is not None:
            return self.decode_text([int(i) for i in ids])
        symbols = self.vocab.decode(ids)
        if self.level == "word":
            return " ".join(symbols)
        if self.byte_symbols:
            return bytes(int(s) for s in symbols).decode("utf-8", errors="replace")
        return "".join(symbols)


# ----------------------------------------------------------------------------------------------------
# Loading


GENERATED_SPLITS_KEPT = 6
"""Generated synthetic splits a process keeps: the three splits of two corpora (a cpu-size split of 2M
tokens with its ground truth is about 30 MB)."""


@functools.lru_cache(maxsize=GENERATED_SPLITS_KEPT)
def generated_split(spec: synthetic.SyntheticSpec | synthetic.RecallSpec, n_tokens: int, seed: int, split: str) -> synthetic.SyntheticText:
    """One split of a synthetic corpus, generated once per process: a command that loads its corpus for
    planning, for every member's losses and for the ideal model gets the same arrays without generating
    them again. The text is a pure function of these arguments (:func:`txlab.data.synthetic.generate`), and
    they are the whole key (the spec is the full frozen dataclass, horizon included), so a kept split is
    never another corpus's; its arrays are read-only, so no caller can change what the next one is given."""
    text = synthetic.generate(spec, n_tokens, seed, split=split)
    for f in dataclasses.fields(text):
        value = getattr(text, f.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return text


def _load_synthetic(cfg: DataConfig) -> Corpus:
    spec = synthetic.get_spec(cfg.corpus, cfg.synthetic_max_context)
    sizes = {"train": cfg.synthetic_tokens, "valid": cfg.synthetic_eval_tokens, "test": cfg.synthetic_eval_tokens}
    truth = {s: generated_split(spec, n, cfg.synthetic_seed, s) for s, n in sizes.items()}
    source = f"generated (seed {cfg.synthetic_seed}, copies {spec.min_distance}..{spec.max_distance} tokens back)"
    return Corpus(spec.name, "word", Vocab(spec.symbols()), {s: t.tokens for s, t in truth.items()}, source, truth=truth)


def check_corpus_dir_applies(corpus: str, corpus_dir: str, option: str = "--corpus-dir") -> None:
    """Refuse a corpus folder for a corpus that reads none: a synthetic corpus is generated and own text
    is read from data.text, so the folder would be silently ignored."""
    if not corpus_dir:
        return
    if corpus in synthetic.VARIANTS:
        raise TxlabError(f"{option} {corpus_dir}: corpus {corpus} is generated, not read from a folder; leave {option} out")
    if corpus == TEXT_CORPUS:
        raise TxlabError(f"{option} {corpus_dir}: this run reads its own text (data.text), not a corpus folder; leave {option} out")


def load_corpus(cfg: DataConfig, progress: bool = True) -> Corpus:
    """The corpus ``cfg.corpus``: synthetic ones are generated, real ones and own text (corpus 'text',
    :mod:`txlab.data.textdata`) read (and cached) from disk."""
    if cfg.corpus == TEXT_CORPUS or cfg.text or cfg.tokenizer:
        text = encoded_text(cfg, progress)
        return Corpus.from_entry(text.name, text.level, str(text.source), text.entry, tokenizer_id=text.entry.meta["tokenizer_id"],
                                 decode_text=text.decode)
    check_corpus_name(cfg.corpus)
    if cfg.corpus in synthetic.VARIANTS:
        return _load_synthetic(cfg)
    spec = CORPORA[cfg.corpus]
    directory, entry = encoded_corpus(spec, cfg, progress)
    return Corpus.from_entry(spec.name, spec.level, str(directory), entry, byte_symbols=spec.byte_symbols)


def load_corpus_for_model(cfg: DataConfig, vocab_hash: str, vocab: Vocab | None, split: str, model: str, progress: bool = True,
                          loaded: Corpus | None = None) -> Corpus:
    """The corpus a model reads, with ``split`` in the model's ids.

    A model trained by txlab has its corpus's vocabulary (``vocab_hash`` is the corpus's) and gets
    the corpus as it is. A model that carries its own vocabulary ``vocab`` with that hash (an
    imported checkpoint) gets ``split`` relabelled into it. ``model`` names the model in errors.
    ``loaded``: ``cfg``'s corpus when the caller has it already (it is not read again).
    """
    corpus = loaded if loaded is not None else load_corpus(cfg, progress=progress)
    if corpus.vocab.sha256 == vocab_hash:
        return corpus
    if vocab is None or vocab.sha256 != vocab_hash:
        raise TxlabError(f"{model} was trained on another vocabulary than corpus {corpus.name} has now")
    return corpus.relabel(vocab, [split])


def split_text_of(data: DataConfig, split: str, progress: bool = False) -> str:
    """The text of one split, as a group scored in words reads it (txlab.measure.words): own text's
    (:func:`~txlab.data.textdata.split_text`), or a registry corpus's recovered from its tokens
    (:func:`spelled_text`) where its files are here. A synthetic corpus's tokens are symbols, not text: refused."""
    if data.corpus == TEXT_CORPUS:
        return split_text(data, split)
    if data.corpus not in CORPORA:
        raise TxlabError(f"the synthetic corpus {data.corpus!r} has no text: its tokens are symbols. Give the group a text (--text FILE), "
                         "e.g. the corpus rendered as words (studies/words_texts.py synthetic)")
    try:
        corpus = load_corpus(data, progress=progress)
    except TxlabError as err:
        raise TxlabError(f"the text of {data.corpus} is recovered from its files, which are not here ({err}); or give a text with --text FILE") from None
    return spelled_text(corpus, corpus.split(split))


def spelled_text(corpus: Corpus, ids: np.ndarray) -> str:
    """The text some ids of a registry corpus spell: a word corpus's words joined by spaces, its line-end marker (<eos>,
    lm1b's <S>) a line end (lm1b's opening <S> dropped); a character corpus's characters; enwik8's bytes decoded as UTF-8,
    a byte sequence that is not UTF-8 (at an edge) replaced by U+FFFD. A word the vocabulary lacked reads as its unknown
    symbol (<unk>, <UNK>), as the corpus's tokens have it."""
    spec = CORPORA[corpus.name]
    ids = np.asarray(ids, dtype=np.int64)
    symbols = np.array(corpus.vocab.symbols, dtype=object)
    if spec.byte_symbols:
        values = np.array([int(s) for s in corpus.vocab.symbols], dtype=np.uint8)  # [V]: each id's byte
        return values[ids].tobytes().decode("utf-8", errors="replace")
    if spec.level == "char":
        return "".join(symbols[ids])
    marker = corpus.vocab.index[spec.line_end]
    if spec.markers == "sentence" and len(ids) and ids[0] == marker:
        ids = ids[1:]  # the opening marker of the first sentence: no line end
    lines = np.split(ids, np.flatnonzero(ids == marker) + 1)  # each ends with its marker; the last (after the last marker) has none
    return "".join(" ".join(symbols[line[:-1]]) + "\n" for line in lines[:-1]) + " ".join(symbols[lines[-1]])


# ----------------------------------------------------------------------------------------------------
# Listing and inspection (what `txlab data list|info` print)


def _cached_meta(spec: CorpusSpec, cfg: DataConfig, sources: CorpusSources) -> dict | None:
    """The cache entry's meta if present and its sources still have their recorded sizes (no hashing)."""
    try:
        meta = json.loads((entry_dir(spec, cfg) / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    current = {str(p): p.stat().st_size for p in sources.unique_files()}
    return meta if {r["path"]: r["size"] for r in meta.get("sources", [])} == current else None


def corpus_status(name: str, cfg: DataConfig) -> dict:
    """One row of `txlab data list`: presence, size on disk and (if cached) vocabulary size."""
    check_corpus_name(name)
    if name in synthetic.VARIANTS:
        spec = synthetic.VARIANTS[name]
        return {"name": name, "kind": "synthetic", "level": "word", "present": True, "complete": True, "size_bytes": 0,
                "vocab_size": spec.vocab_size, "directory": None, "description": spec.description}
    spec = CORPORA[name]
    directory = corpus_dir(cfg, name)
    sources = locate_sources(spec, directory) if directory.is_dir() else CorpusSources(directory, {}, {"all": "directory"})
    meta = _cached_meta(spec, cfg, sources) if sources.files else None
    return {
        "name": name, "kind": "real", "level": spec.level, "present": bool(sources.files), "complete": bool(sources.files) and not sources.missing,
        "size_bytes": sum(p.stat().st_size for p in sources.unique_files()), "vocab_size": meta["vocab_size"] if meta else None,
        "directory": str(directory), "description": spec.title,
    }


def list_corpora(cfg: DataConfig) -> list[dict]:
    return [corpus_status(name, cfg) for name in CORPUS_NAMES]


def corpus_info(name: str, cfg: DataConfig, progress: bool = True) -> dict:
    """Everything `txlab data info` shows; loads (and on first use encodes) the corpus. Own text is
    ``name`` 'text' with ``cfg`` from :func:`txlab.data.textdata.text_data_config`."""
    if name == TEXT_CORPUS:
        corpus = load_corpus(cfg, progress=progress)
    else:
        check_corpus_name(name)
        own_dir = cfg.corpus_dir if name == cfg.corpus else ""
        corpus = load_corpus(dataclasses.replace(cfg, corpus=name, corpus_dir=own_dir), progress=progress)
    info = {
        "name": corpus.name, "level": corpus.level, "source": corpus.source, "tokenizer_id": corpus.tokenizer_id,
        "vocab_size": len(corpus.vocab), "vocab_sha256": corpus.vocab.sha256,
        "splits": {s: {"tokens": int(len(ids)), "token_stream_sha256": corpus.token_stream_hash(s)} for s, ids in corpus.splits.items()},
        "missing_splits": corpus.missing,
        "cache_dir": str(corpus.cache_dir) if corpus.cache_dir else None,
        "files": [],
    }
    if corpus.truth is not None:
        spec = synthetic.get_spec(name, cfg.synthetic_max_context)
        info["synthetic"] = {"min_distance": spec.min_distance, "max_distance": spec.max_distance, "max_context": spec.max_context,
                             "seed": cfg.synthetic_seed, **corpus.truth["valid"].stats()}
    else:
        meta = json.loads((corpus.cache_dir / "meta.json").read_text())
        info["files"] = [{"path": r["path"], "size_bytes": r["size"], "sha256": r["sha256"]} for r in meta["sources"]]
        info["options"] = meta["options"]
    return info


def text_corpus_info(name: str, text: str, tokenizer: str, text_split: str, cfg: DataConfig, progress: bool = True) -> dict:
    """What `txlab data info` shows: of corpus ``name``, or of own ``text`` read by ``tokenizer`` (one of the two)."""
    if text and name:
        raise TxlabError(f"give a corpus name ({name}) or --text, not both")
    if not text:
        if tokenizer or text_split:
            raise TxlabError("--tokenizer and --text-split say how own text is read: give the text with --text FILE_OR_DIR")
        if not name:
            raise TxlabError("give a corpus name (see `txlab data list`) or own text with --text FILE_OR_DIR")
        return corpus_info(name, cfg, progress)
    fractions = parse_split_fractions(text_split) if text_split else None
    return corpus_info(TEXT_CORPUS, text_data_config(text, tokenizer or "char", dataclasses.replace(cfg, corpus=TEXT_CORPUS, corpus_dir=""), fractions), progress)


def readable_size(n: int | None) -> str:
    """A byte count as people read it: '-', '512 B', '1.2 MB'."""
    if not n:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def corpus_info_text(info: dict, own_text: bool = False) -> str:
    """What `txlab data info` prints of :func:`text_corpus_info`'s record, one fact per line."""
    lines = [f"{info['name']} ({info['level']} level) from {info['source']}",
             f"vocabulary: {info['vocab_size']:,} symbols, sha256 {info['vocab_sha256']}; tokenizer id {info['tokenizer_id']}"]
    lines += [f"{split:>5}: {s['tokens']:>13,} tokens  stream sha256 {s['token_stream_sha256']}" for split, s in info["splits"].items()]
    lines += [f"{split:>5}: missing ({why if own_text else f'looked for {why}'})" for split, why in info["missing_splits"].items()]
    lines += [f"file: {f['path']} ({readable_size(f['size_bytes'])}, sha256 {f['sha256']})" for f in info["files"]]
    if info.get("options"):
        lines.append(f"options: {info['options']}")
    if info["cache_dir"]:
        lines.append(f"cache: {info['cache_dir']}")
    if "synthetic" in info:
        syn = info["synthetic"]
        lines.append(f"copies {syn['min_distance']}..{syn['max_distance']} tokens back (longest needed context {syn['max_context']}); "
                     f"valid split: {syn['fraction_copied']:.1%} copied values, oracle loss {syn['oracle_nll_full_context']:.3f} nats "
                     f"with full context, {syn['oracle_nll_no_context']:.3f} with none")
    return "\n".join(lines)
