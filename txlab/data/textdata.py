"""Own text as a corpus: its configuration, its files, its name, its encoding into the cache, its size.

A researcher's text becomes a :class:`~txlab.data.corpus.Corpus` like the registry's, so every command
that reads a corpus reads it: ``data.corpus: text`` with ``data.text`` (a file or a folder) and
``data.tokenizer`` (:mod:`txlab.data.tokenizers`); :func:`text_data_config` builds and checks such a
configuration (what ``--text`` and ``--tokenizer`` give).

Sources. A file is tokenised whole and its token stream cut by ``data.text_split`` (train, valid,
test in that order): every split after the first with a nonzero fraction gets floor(n x fraction)
tokens and that first one the rest, so 0.9/0.05/0.05 is the registry's tinyshakespeare cut exactly;
a fraction of 0 leaves its split out. A folder is read per split, the first of :data:`SPLIT_FILES`
present naming the file; a split with no file is left out (asking for it is an error). Files are
read as UTF-8 exactly as they are (no newline translation).

Cache (:mod:`txlab.data.cache`). ``<cache root>/text/<stem>-<16 hex>/``, as the registry's entries ({split}.npy, vocab.json,
meta.json; memory-mapped after), keyed by the text files' resolved paths, the tokenizer (``char``,
``word`` or the hf tokenizer_id), the split fractions and the cache format, and valid while every
text file keeps its fingerprint (size, sha256 of its first and last MiB, the full sha256 when its
mtime changes): a changed text or tokenizer is encoded again. Built aside and renamed into place.

Names. :func:`text_corpus_name` is what run directories are named by:
``text-<stem>-<8 hex of the text's sha256>-<tokenizer tag>`` (tag ``char``, ``word`` or
``hf-<name>-<8 hex of its tokenizer_id>``), with ``-split<train>-<valid>-<test>`` (percent) when the
fractions are not the default: two texts or tokenizers never share a name, and a name holds no path
separator or colon.

Size. :func:`text_token_counts` is what a plan says of own text before training: the counts of the
cache entry when it holds the text, else an estimate from the first MiB of each file.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from txlab.config import DataConfig
from txlab.data.cache import COPY_TOKENS, Encoded, Entry, build_entry, cache_root, file_sha256, id_dtype, key_digest, occurring_ids, open_entry, valid_meta
from txlab.data.formats import DEFAULT_SPLIT, fraction_bounds, read_text, read_text_blocks, words
from txlab.data.registry import SPLITS, TEXT_CORPUS
from txlab.data.tokenizers import (CharTokenizer, HfTokenizer, NotBlockwise, TokenizerSpec, WordTokenizer, hf_location, load_hf_tokenizer,
                                   parse_tokenizer, text_tokenizer)
from txlab.errors import TxlabError
from txlab.fileio import allocated_npy, naming_path
from txlab.progress import Progress

SPLIT_FILES: dict[str, tuple[str, ...]] = {
    split: tuple(pattern.format(name=name) for name in names for pattern in ("{name}.txt", "{name}.tokens", "wiki.{name}.tokens", "ptb.{name}.txt"))
    for split, names in (("train", ("train",)), ("valid", ("valid", "validation", "val")), ("test", ("test",)))
}
"""File names a folder of splits is read from, per split; the first present wins."""
TEXT_KEY_FORMAT = 2
"""Part of own text's cache key: raise it when the encoding of own text changes (2: a leading byte-order mark is dropped)."""
ESTIMATE_CHARS = 1 << 20
"""Characters at the start of each text file that a plan's estimate of own text tokenises (its first MiB, in ASCII)."""


# ----------------------------------------------------------------------------------------------------
# Configuration


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
        hf_location(spec.source)  # a missing local folder is refused now, not after the plan
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


# ----------------------------------------------------------------------------------------------------
# Names


_SHA_MEMO: dict[tuple[str, int, int], str] = {}


def _memo_sha256(path: Path) -> str:
    """A file's full sha256, computed once per process while its size and mtime stay."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _SHA_MEMO:
        _SHA_MEMO[key] = file_sha256(path)
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
# Encoding into the cache


def _text_entry(data: DataConfig) -> tuple[TextSources, TokenizerSpec, Path]:
    """Own text's files, its tokenizer, and the cache entry they are encoded into (checked first)."""
    check_text_config(data)
    sources = find_text_sources(data)
    spec = parse_tokenizer(data.tokenizer)
    rule = load_hf_tokenizer(spec.source).tokenizer_id if spec.kind == "hf" else spec.kind  # txlab's vocabularies follow from the text
    key = {"format": TEXT_KEY_FORMAT, "files": {part: str(p) for part, p in sources.files.items()}, "tokenizer": rule, "split": sources.fractions}
    return sources, spec, cache_root(data) / TEXT_CORPUS / f"{slug(sources.stem)}-{key_digest(key)}"


def _encode_text(tokenizer, sources: TextSources, raw: Path, progress: bool) -> dict[str, int]:
    """Every file's ids appended to ``raw`` (little-endian int32); the tokens per file part."""
    counts = {}
    total = sum(p.stat().st_size for p in sources.files.values())
    with Progress(total=total, desc="encode text", unit="B", unit_scale=True, disable=not progress, file=sys.stderr) as bar, open(raw, "wb") as out:
        for part, path in sources.files.items():
            start, n = out.tell(), 0
            try:
                for ids in tokenizer.encode_file(path, bar):
                    out.write(ids.astype("<i4").tobytes())  # not tofile: its failed write loses the errno (a full disk)
                    n += len(ids)
            except NotBlockwise:
                if progress:
                    print(f"\n{path}: tokenizer hf:{tokenizer.source} merges tokens across whitespace, so the file is encoded at once (not in blocks)", file=sys.stderr)
                out.seek(start)
                out.truncate()
                n = 0
                for ids in tokenizer.encode_whole(path, bar):
                    out.write(ids.astype("<i4").tobytes())
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
        if tokenizer.is_blank(occurring_ids(all_ids, len(tokenizer.vocab), lo, hi)).all():
            raise TxlabError(f"the {split} split of {where} holds only whitespace: give it some text")


def _build_text_cache(data: DataConfig, sources: TextSources, spec: TokenizerSpec, entry: Path, progress: bool) -> dict:
    if progress:
        print(f"encoding {sources.path} with tokenizer {data.tokenizer or 'char'} (first load; cached in {entry})", file=sys.stderr)

    def encode(workdir: Path) -> Encoded:
        tokenizer = text_tokenizer(spec)
        if spec.kind != "hf":
            tokenizer.count(list(sources.files.values()))
        raw = workdir / "ids.raw"
        try:
            counts = _encode_text(tokenizer, sources, raw, progress)
        except OSError as err:  # a failed write names no file: the one being written is raw
            raise naming_path(err, raw) from None
        all_ids = np.memmap(raw, dtype="<i4", mode="r") if raw.stat().st_size else np.zeros(0, "<i4")
        bounds = _text_split_bounds(sources, counts)
        _check_text_splits(tokenizer, sources, all_ids, bounds)
        vocab = tokenizer.vocab
        dtype = id_dtype(len(vocab))
        for split, (lo, hi) in bounds.items():
            out = allocated_npy(workdir / f"{split}.npy", dtype, hi - lo)
            for at in range(lo, hi, COPY_TOKENS):
                out[at - lo : min(at + COPY_TOKENS, hi) - lo] = all_ids[at : min(at + COPY_TOKENS, hi)]
            out.flush()
            del out
        del all_ids
        raw.unlink()
        about = {"corpus": TEXT_CORPUS, "level": spec.level, "tokenizer": data.tokenizer or "char", "tokenizer_id": tokenizer.tokenizer_id,
                 "options": {"text_split": list(sources.fractions) if sources.fractions else None}}
        return Encoded(about, vocab, {s: hi - lo for s, (lo, hi) in bounds.items()}, sources.missing)

    return build_entry(entry, list(sources.files.values()), encode)


@dataclass(frozen=True)
class EncodedText:
    """Own text in the cache: what its :class:`~txlab.data.corpus.Corpus` is made of."""

    name: str
    """:func:`text_corpus_name`."""
    level: str
    source: Path
    """The file or folder ``data.text`` names."""
    entry: Entry
    decode: Callable[[list[int]], str] | None
    """How ids become text when the vocabulary alone cannot (a Hugging Face tokenizer); None for txlab's."""


def encoded_text(data: DataConfig, progress: bool = True) -> EncodedText:
    """Own text as ``data`` reads it, encoded on first use and read from the cache after."""
    sources, spec, entry = _text_entry(data)
    cached = open_entry(entry, list(sources.files.values()), lambda: _build_text_cache(data, sources, spec, entry, progress))
    decode = load_hf_tokenizer(spec.source).decode if spec.kind == "hf" else None
    return EncodedText(text_corpus_name(data), spec.level, sources.path, cached, decode)


def split_text(data: DataConfig, split: str) -> str:
    """The text of one split, as characters: what a group scored in words reads (txlab.measure.words).

    A folder's split is its file. One file is cut by ``data.text_split`` in characters, each cut moved forward to
    the next word's first character so that no word is cut in two. A txlab run trained on the file was cut by the
    same fractions of its own tokens; the two cuts agree exactly for characters and to within the variation of
    tokens per character along the text for other tokenizers, so a folder of split files is the cut to use where
    no valid word may ever have been trained on."""
    sources = find_text_sources(data)
    if split in sources.missing:
        raise TxlabError(f"{sources.path} has no {split} split: {sources.missing[split]}")
    if sources.fractions is None:
        text, share = read_text(sources.files[split]), ""
    else:
        whole = read_text(sources.files["all"])
        start, end = fraction_bounds(len(whole), sources.fractions)[split]
        text = whole[_next_word_start(whole, start) : _next_word_start(whole, end)]
        share = f" (data.text_split gives it {sources.fractions[SPLITS.index(split)]:g} of {len(whole):,} characters)"
    if not text.strip():  # str.strip's whitespace is the words' (txlab.measure.words.WORD)
        raise TxlabError(f"the {split} split of {sources.path} holds no words{share}: give more text or a larger fraction")
    return text


def _next_word_start(text: str, i: int) -> int:
    """The first character at or after ``i`` that begins a word (or the end of the text)."""
    found = re.compile(r"(?<!\S)\S").search(text, i) if i < len(text) else None
    return found.start() if found else len(text)


def trained_tokenizer(data: DataConfig, vocab_hash: str, model: str) -> CharTokenizer | WordTokenizer | HfTokenizer:
    """The tokenizer a model trained on own text ``data`` reads with: its hf: tokenizer, or txlab's char or word tokenizer
    with the vocabulary counted from the text (encoded, or read from the cache). Refused when that vocabulary is not the
    model's (``vocab_hash``): the text or the tokenizer changed since ``model`` trained."""
    spec = parse_tokenizer(data.tokenizer)
    tokenizer = text_tokenizer(spec)
    if spec.kind != "hf":
        tokenizer.vocab = encoded_text(data, progress=False).entry.read()[0]
    if tokenizer.vocab.sha256 != vocab_hash:
        changed = f"tokenizer {data.tokenizer}" if spec.kind == "hf" else f"text {data.text}"
        raise TxlabError(f"the {changed} has changed since {model} was trained: its vocabulary is not the model's")
    return tokenizer


# ----------------------------------------------------------------------------------------------------
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
    """The file's first ``size`` characters (cut before a word the cut would split: a tokenizer of whole words would not
    know its start) and their length in bytes."""
    text = next(read_text_blocks(path, size, lines=False), "")  # read as every text is: a file that is no text is refused at the plan
    if len(text) == size and max(text.rfind(" "), text.rfind("\n")) > 0:
        text = text[: max(text.rfind(" "), text.rfind("\n"))]
    return text, len(text.encode("utf-8"))


_ESTIMATES: dict[tuple, TokenCounts] = {}


def _estimate_text(sources: TextSources, spec: TokenizerSpec) -> TokenCounts:
    """Tokens per split from each file's size at the tokens per byte measured on its first MiB; the
    vocabulary of txlab's tokenizers by Heaps' law from the symbols of the first half MiB and MiB.
    Made once per process while the files keep their size and mtime (a plan asks several times)."""
    key = (spec, sources.fractions, tuple((part, str(p), p.stat().st_size, p.stat().st_mtime_ns) for part, p in sources.files.items()))
    if key not in _ESTIMATES:
        _ESTIMATES[key] = _measure_text(sources, spec)
    return _ESTIMATES[key]


def _measure_text(sources: TextSources, spec: TokenizerSpec) -> TokenCounts:
    tokenizer = text_tokenizer(spec)
    per_part: dict[str, int] = {}
    rates, vocab_guesses = [], []
    for part, path in sources.files.items():
        text, sampled = _text_sample(path, ESTIMATE_CHARS)
        if spec.kind == "hf":
            tokens = tokenizer.encode(text)
        else:
            tokens = list(text) if spec.kind == "char" else words(text, "eos")
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
    sources, spec, entry = _text_entry(data)
    meta = valid_meta(entry, list(sources.files.values()))
    if meta:
        return TokenCounts({s: info["tokens"] for s, info in meta["splits"].items()}, meta["vocab_size"], False, f"encoded (cache {entry})")
    return _estimate_text(sources, spec)
