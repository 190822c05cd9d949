"""Own text as a corpus: its configuration, its files, its name, and Hugging Face tokenizers.

A researcher's text becomes a :class:`~txlab.data.corpora.Corpus` like the registry's, so every command
that reads a corpus reads it: ``data.corpus: text`` with ``data.text`` (a file or a folder) and
``data.tokenizer``; :func:`text_data_config` builds and checks such a configuration (what ``--text``
and ``--tokenizer`` give).

Sources. A file is tokenised whole and its token stream cut by ``data.text_split`` (train, valid,
test in that order): every split after the first with a nonzero fraction gets floor(n x fraction)
tokens and that first one the rest, so 0.9/0.05/0.05 is the registry's tinyshakespeare cut exactly;
a fraction of 0 leaves its split out. A folder is read per split, the first of :data:`SPLIT_FILES`
present naming the file; a split with no file is left out (asking for it is an error). Files are
read as UTF-8 exactly as they are (no newline translation).

Tokenizers (``data.tokenizer``):

- ``char``: every character a token; the vocabulary lists every character of the text (all splits)
  by falling count, ties by first occurrence, as the registry's character corpora do: tinyshakespeare's
  input.txt read this way is the registry's tinyshakespeare, token for token.
- ``word``: words split on whitespace and ``<eos>`` after every line, as WikiText; the vocabulary is
  ``<eos>``, then every word of the text by falling count (so there is no ``<unk>``).
- ``hf:PATH_OR_HUB_ID``: a Hugging Face tokenizer loaded by ``transformers.AutoTokenizer`` from a local
  folder (or a Hub id, which needs a network or the Hugging Face cache). The text is encoded without
  special tokens (no BOS or EOS is added: the tokens are the text's). The vocabulary lists the
  tokenizer's symbols by id, ``len(tokenizer)`` of them (more if an id lies beyond), an id no symbol
  has named ``<unused-ID>``. transformers is imported only here, and only for an ``hf:`` tokenizer.

Blocks. A Hugging Face tokenizer encodes a file in blocks of about :data:`HF_BLOCK_CHARS` characters, so a
large file is never tokenised at once. A block ends where a whitespace run starts after a word (one
holding a space, else a line end: see :func:`_cut`), and is encoded with :data:`CONTEXT_CHARS` characters of the
text on each side, whose tokens are dropped: the tokenizer sees the block as the middle of the text,
not a text of its own (a SentencePiece tokenizer would otherwise add a space at every block start).
A token reaching across a block's edge would mean the tokenizer merges across that whitespace; then
the cut is not exact, and the file is encoded at once instead (said on stderr). The tests hold blocks
equal to one encoding of the whole text.

tokenizer_id. Names the tokenization, equal strings meaning identical tokens for identical text:
``char:<16 hex>`` and ``word:<16 hex>`` (the vocabulary's sha256, as registry corpora have), and
``hf:<16 hex>`` (the sha256 of the tokenizer's serialized pipeline: normalizer, pre-tokenizer, model
with its vocabulary and merges, added tokens). Members of a RECL group must share it and the token stream.

Cache (:mod:`txlab.data.corpora` counts, encodes, splits and caches). ``<cache root>/text/<stem>-<16 hex>/``, as the registry's entries ({split}.npy, vocab.json,
meta.json; memory-mapped after), keyed by the text files' resolved paths, the tokenizer (``char``,
``word`` or the hf tokenizer_id), the split fractions and the cache format, and valid while every
text file keeps its fingerprint (size, sha256 of its first and last MiB, the full sha256 when its
mtime changes): a changed text or tokenizer is encoded again. Built aside and renamed into place.

Names. :func:`text_corpus_name` is what run directories are named by:
``text-<stem>-<8 hex of the text's sha256>-<tokenizer tag>`` (tag ``char``, ``word`` or
``hf-<name>-<8 hex of its tokenizer_id>``), with ``-split<train>-<valid>-<test>`` (percent) when the
fractions are not the default: two texts or tokenizers never share a name, and a name holds no path
separator or colon.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from txlab.config import DataConfig
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError, did_you_mean
from txlab.progress import Progress

SPLITS = ("train", "valid", "test")
TEXT_CORPUS = "text"
"""The ``data.corpus`` of own text."""

TOKENIZER_FORMS = ("char", "word", "hf:PATH_OR_HUB_ID")
DEFAULT_SPLIT = (0.9, 0.05, 0.05)

SPLIT_FILES: dict[str, tuple[str, ...]] = {
    split: tuple(pattern.format(name=name) for name in names for pattern in ("{name}.txt", "{name}.tokens", "wiki.{name}.tokens", "ptb.{name}.txt"))
    for split, names in (("train", ("train",)), ("valid", ("valid", "validation", "val")), ("test", ("test",)))
}
"""File names a folder of splits is read from, per split; the first present wins."""

BLOCK_CHARS = 1 << 22
"""Characters of text read at a time when a file is read through: large enough to amortise Python, small in memory."""
HF_BLOCK_CHARS = 1 << 20
"""Characters a Hugging Face tokenizer encodes at a time: its offsets take about 100 bytes a token in Python."""
CONTEXT_CHARS = 256
"""Characters of text encoded (and dropped) on each side of a block, so that the block reads as the middle of the text."""


# ----------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class TokenizerSpec:
    """A parsed ``data.tokenizer``: ``kind`` 'char', 'word' or 'hf', and for 'hf' the folder or Hub id."""

    kind: str
    source: str = ""

    @property
    def level(self) -> str:
        return "subword" if self.kind == "hf" else self.kind


def parse_tokenizer(text: str) -> TokenizerSpec:
    """``char`` (also the empty string), ``word`` or ``hf:PATH_OR_HUB_ID``; anything else is refused."""
    if text in ("", "char", "word"):
        return TokenizerSpec(text or "char")
    if text.startswith("hf:"):
        source = text[3:].strip()
        if not source:
            raise TxlabError("tokenizer 'hf:' names no tokenizer: give hf:PATH_OR_HUB_ID (a folder with tokenizer files, or a Hub id such as hf:gpt2)")
        return TokenizerSpec("hf", source)
    raise did_you_mean(text, TOKENIZER_FORMS, "tokenizer")


def check_split_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Three fractions in [0, 1] (train, valid, test) that sum to 1, not all of them 0."""
    values = tuple(fractions)
    if len(values) != 3 or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f <= 1 for f in values):
        raise TxlabError(f"data.text_split must be three fractions in [0, 1] (train, valid, test), e.g. [0.9, 0.05, 0.05]; got {list(values)!r}")
    if abs(sum(values) - 1) > 1e-9:
        raise TxlabError(f"data.text_split must sum to 1 (train, valid, test), e.g. [0.9, 0.05, 0.05]; {list(values)!r} sums to {sum(values):g}")
    return values  # type: ignore[return-value]


def parse_split_fractions(text: str) -> list[float]:
    """'0.8,0.1,0.1' (what ``--text-split`` takes) as three checked fractions."""
    try:
        values = [float(part) for part in text.replace(" ", "").split(",")]
    except ValueError:
        raise TxlabError(f"--text-split takes three comma-separated fractions (train,valid,test), e.g. 0.9,0.05,0.05; got {text!r}") from None
    return list(check_split_fractions(values))


def check_text_config(data: DataConfig) -> None:
    """Refuse own-text settings that do not fit together (each with what to do instead)."""
    if data.corpus != TEXT_CORPUS:
        if data.text or data.tokenizer:
            raise TxlabError(f"data.text and data.tokenizer are read only for own text, and data.corpus is {data.corpus!r}: "
                             f"set data.corpus=text (the --text option does), or clear them")
        return
    if not data.text:
        raise TxlabError("corpus 'text' needs data.text: a text file, or a folder with train.txt/valid.txt/test.txt (the --text option)")
    if data.corpus_dir:
        raise TxlabError("data.corpus_dir is for registry corpora; own text is read from data.text")
    parse_tokenizer(data.tokenizer)
    check_split_fractions(data.text_split)


def text_data_config(text: str | Path, tokenizer: str = "char", base: DataConfig | None = None,
                     text_split: Sequence[float] | None = None) -> DataConfig:
    """The DataConfig reading own ``text`` (a file or a folder, resolved to an absolute path) with
    ``tokenizer``, on top of ``base`` (its other settings, e.g. the cache directory); checked, so a bad
    path, tokenizer or split ends here in one TxlabError."""
    base = base or DataConfig()
    path = Path(text).expanduser()
    if not str(text):
        raise TxlabError("--text needs a text file or a folder of split files")
    if not path.exists():
        raise TxlabError(f"no such text file or folder: {text}")
    data = replace(base, corpus=TEXT_CORPUS, corpus_dir="", text=str(path.resolve()), tokenizer=tokenizer or "char",
                   text_split=list(text_split) if text_split is not None else list(base.text_split))
    check_text_config(data)
    find_text_sources(data)
    spec = parse_tokenizer(data.tokenizer)
    if spec.kind == "hf":
        _hf_location(spec.source)  # a missing local folder is refused now, not after the plan
    return data


# ----------------------------------------------------------------------------------------------------
# Sources


@dataclass(frozen=True)
class TextSources:
    """The files of own text: ``{'all': file}`` for one file cut by fractions, else ``{split: file}``."""

    path: Path
    files: dict[str, Path]
    missing: dict[str, str]
    fractions: tuple[float, float, float] | None
    """One file only: the train, valid and test fractions of its tokens."""

    @property
    def stem(self) -> str:
        return self.path.stem if self.path.is_file() else self.path.name


def find_text_sources(data: DataConfig) -> TextSources:
    """The files ``data.text`` names; a missing or empty file, or a folder with no split file, is refused."""
    path = Path(data.text).expanduser().resolve()
    if path.is_file():
        _check_not_empty(path)
        fractions = check_split_fractions(data.text_split)
        missing = {s: f"data.text_split gives it 0 of {path.name}" for s, f in zip(SPLITS, fractions) if f == 0}
        return TextSources(path, {"all": path}, missing, fractions)
    if not path.is_dir():
        raise TxlabError(f"no such text file or folder: {data.text}")
    files, missing = {}, {}
    for split, names in SPLIT_FILES.items():
        found = next((path / name for name in names if (path / name).is_file()), None)
        if found is None:
            missing[split] = f"no file {' or '.join(names[:3])} ... in {path}"
        else:
            _check_not_empty(found)
            files[split] = found
    if not files:
        raise TxlabError(f"{path} holds no split file: name them train.txt, valid.txt and test.txt "
                         f"(also accepted: {', '.join(n for n in SPLIT_FILES['train'] if n != 'train.txt')} and the same for valid and test), "
                         f"or give one text file to cut by data.text_split")
    return TextSources(path, files, missing, None)


def _check_not_empty(path: Path) -> None:
    if path.stat().st_size == 0:
        raise TxlabError(f"{path} is empty: own text needs some text")


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def _memo_sha256(path: Path) -> str:
    """A file's full sha256, computed once per process while its size and mtime stay."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA_MEMO:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 24):
                digest.update(chunk)
        _SHA_MEMO[key] = digest.hexdigest()
    return _SHA_MEMO[key]


def text_sha256(sources: TextSources) -> str:
    """sha256 identifying the text: the file's, or for a folder that of its 'split:sha256' lines."""
    if "all" in sources.files:
        return _memo_sha256(sources.files["all"])
    lines = "".join(f"{split}:{_memo_sha256(path)}\n" for split, path in sources.files.items())
    return hashlib.sha256(lines.encode()).hexdigest()


def slug(text: str, limit: int = 40) -> str:
    """``text`` as a piece of a directory name: letters, digits, '.', '_' and '-' only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:limit].strip("._-") or "text"


def text_corpus_name(data: DataConfig) -> str:
    """The name own text goes by in run directories and messages (see the module's Names)."""
    check_text_config(data)
    sources = find_text_sources(data)
    spec = parse_tokenizer(data.tokenizer)
    if spec.kind == "hf":
        tag = f"hf-{slug(Path(spec.source).name or spec.source, 24)}-{load_hf_tokenizer(spec.source).tokenizer_id[3:11]}"
    else:
        tag = spec.kind
    name = f"text-{slug(sources.stem)}-{text_sha256(sources)[:8]}-{tag}"
    if sources.fractions is not None and sources.fractions != DEFAULT_SPLIT:
        name += "-split" + "-".join(f"{100 * f:g}" for f in sources.fractions)
    return name


# ----------------------------------------------------------------------------------------------------
# Reading text


def read_text_blocks(path: Path, block_chars: int) -> Iterator[str]:
    """The file's text in blocks of about ``block_chars`` characters, each ending at a line end (except the last)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            while block := fh.read(block_chars):
                if not block.endswith("\n"):
                    block += fh.readline()
                yield block
    except UnicodeDecodeError as err:
        raise TxlabError(f"{path} is not UTF-8 text (byte {err.object[err.start:err.start + 1]!r}: {err.reason})") from None


def _cut(text: str) -> int | None:
    """Where to end a block in ``text``: the start of the last whitespace run that follows a word and
    holds a space, else one that holds a line end; None when there is neither. Every tokenizer that
    splits words at whitespace starts a piece there: a byte-level BPE at any whitespace run, a
    SentencePiece one (Metaspace) only at a space, which is why a space comes first."""
    for mark in (" ", "\n"):
        p = text.rfind(mark)
        while p > 0 and text[p - 1].isspace():
            p -= 1
        if p > 0:
            return p
    return None


def _cut_blocks(path: Path, block_chars: int) -> Iterator[str]:
    """The file's text in blocks of at least about ``block_chars`` characters, cut as :func:`_cut` says."""
    carry = ""
    for chunk in read_text_blocks(path, block_chars):
        text = carry + chunk
        cut = _cut(text)
        if cut is None:  # no whitespace after a word yet: read on
            carry = text
            continue
        yield text[:cut]
        carry = text[cut:]
    if carry:
        yield carry


# ----------------------------------------------------------------------------------------------------
# Tokenizers


class NotBlockwise(Exception):
    """A token crosses a block's edge: this tokenizer cannot encode this file in blocks exactly."""


class HfTokenizer:
    """A Hugging Face tokenizer: its symbols as a txlab Vocab, its tokenizer_id, and block encoding."""

    kind = "hf"

    def __init__(self, source: str, tokenizer: Any) -> None:
        self.source = source
        self.tokenizer = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        """The `tokenizers` pipeline, when the tokenizer has one: it gives the character offsets block encoding checks."""
        if self.backend is not None:
            serialized = self.backend.to_str()
        else:  # a tokenizer without a `tokenizers` pipeline: its class and vocabulary identify it
            serialized = json.dumps({"class": type(tokenizer).__name__, "vocab": sorted(tokenizer.get_vocab().items())}, ensure_ascii=False)
        self.tokenizer_id = "hf:" + hashlib.sha256(serialized.encode("utf-8")).hexdigest()[:16]
        self.vocab = self._vocab()

    def _vocab(self) -> Vocab:
        by_id: dict[int, str] = {}
        for symbol, i in sorted(self.tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0])):
            by_id.setdefault(int(i), symbol)  # two symbols on one id: the first in sorted order names it
        size = max(len(self.tokenizer), max(by_id, default=-1) + 1)
        taken = set(by_id.values())
        symbols = []
        for i in range(size):
            symbol = by_id.get(i)
            if symbol is None:
                symbol = f"<unused-{i}>"
                while symbol in taken:  # a tokenizer that has this very string as a symbol
                    symbol = f"<{symbol}>"
                taken.add(symbol)
            symbols.append(symbol)
        return Vocab(symbols)

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, encoded at once without special tokens."""
        if self.backend is not None:
            return self.backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def encode_file(self, path: Path, bar: Progress, block_chars: int | None = None) -> Iterator[np.ndarray]:
        """The file's ids in blocks of about ``block_chars`` characters (default :data:`HF_BLOCK_CHARS`; see
        the module's Blocks); raises NotBlockwise when a cut is not exact."""
        if self.backend is None:
            raise NotBlockwise  # no offsets to check a cut by
        previous, blocks = "", _cut_blocks(path, block_chars or HF_BLOCK_CHARS)
        current = next(blocks, None)
        while current is not None:
            following = next(blocks, None)
            left, right = previous[-CONTEXT_CHARS:], (following or "")[:CONTEXT_CHARS]
            encoding = self.backend.encode(left + current + right, add_special_tokens=False)
            ids = np.asarray(encoding.ids, dtype=np.int64)
            offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            starts, ends = offsets[:, 0], offsets[:, 1]
            lo, hi = len(left), len(left) + len(current)
            if np.any((starts < lo) & (ends > lo)) or np.any((starts < hi) & (ends > hi)):
                raise NotBlockwise
            bar.update(len(current))
            yield ids[(starts >= lo) & (starts < hi)] if (left or right) else ids
            previous, current = current, following

    def encode_whole(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        text = "".join(read_text_blocks(path, BLOCK_CHARS))
        bar.update(len(text))
        yield np.asarray(self.encode(text), dtype=np.int64)

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether it decodes to whitespace only, or to nothing."""
        return np.array([not self.decode([i]).strip() for i in ids.tolist()], dtype=bool)


def _hf_location(source: str) -> str:
    """What from_pretrained is given: a local folder's absolute path, else the Hub id as written."""
    local = Path(source).expanduser()
    if local.exists():
        if not local.is_dir():
            raise TxlabError(f"hf:{source} is a file; give the folder holding the tokenizer's files (tokenizer.json, tokenizer_config.json, ...)")
        return str(local.resolve())
    if source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1:
        raise TxlabError(f"no tokenizer folder {source}: give a folder holding tokenizer files, or a Hub id such as hf:gpt2")
    return source


_HF_MEMO: dict[tuple, HfTokenizer] = {}


def load_hf_tokenizer(source: str) -> HfTokenizer:
    """The Hugging Face tokenizer ``source`` names (loaded once per process while its files stay the same)."""
    location = _hf_location(source)
    folder = Path(location)
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())) if folder.is_dir() else ()
    key = (location, files)
    if key not in _HF_MEMO:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise TxlabError(f"tokenizer hf:{source} needs the transformers package: pip install 'txlab[hf]'") from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(location)
        except Exception as err:  # transformers raises OSError, ValueError, KeyError, ... for a folder it cannot read
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            where = "a local folder needs the tokenizer's files (tokenizer.json, or its vocabulary files, with tokenizer_config.json)"
            raise TxlabError(f"cannot load tokenizer hf:{source} ({reason}); {where}; a Hub id needs a network or the Hugging Face cache") from None
        _HF_MEMO[key] = HfTokenizer(source, tokenizer)
    return _HF_MEMO[key]


# ----------------------------------------------------------------------------------------------------
# Splitting, the cache and loading


def fraction_bounds(n: int, fractions: Sequence[float]) -> dict[str, tuple[int, int]]:
    """[start, end) of each split with a nonzero fraction in a stream of ``n`` tokens: every split after
    the first gets floor(n x fraction) tokens (exact decimal fractions: 0.05 is 1/20), the first the rest."""
    present = [(s, Fraction(str(f))) for s, f in zip(SPLITS, fractions) if f > 0]
    sizes = {s: math.floor(n * f) for s, f in present[1:]}
    sizes = {present[0][0]: n - sum(sizes.values()), **sizes}
    bounds, start = {}, 0
    for split in SPLITS:
        if split in sizes:
            bounds[split] = (start, start + sizes[split])
            start += sizes[split]
    return bounds
