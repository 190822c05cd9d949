"""Reading the registry's corpora in their distribution formats, and encoding them into the cache.

:func:`encoded_corpus` gives the cache entry of a registry corpus (:mod:`txlab.data.registry` says where
its files are and how they are tokenised), encoding it on first use. Encoding streams (two passes:
count, then encode into a preallocated array), so memory is bounded by the vocabulary and the output.
The entry (:mod:`txlab.data.cache`) is keyed by corpus, source directory and options.

The vocabulary lists special symbols first, then symbols by falling frequency, ties by first occurrence
(the reference's ``Counter.most_common`` order). Word corpora read lines (universal newlines, as the
reference reads them); single-file corpora read bytes or characters and cut them 90/5/5
(:func:`fraction_bounds` with :data:`DEFAULT_SPLIT`).

The reading rules here are own text's too (:mod:`txlab.data.textdata`, :mod:`txlab.data.tokenizers`):
:func:`read_text_blocks`, the word rule :func:`words`, characters as code points counted in
first-occurrence order (:class:`CodeCounter`), and :func:`fraction_bounds`.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import sys
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

import numpy as np

from txlab.config import DataConfig
from txlab.data.cache import CACHE_FORMAT, Encoded, Entry, build_entry, cache_root, id_dtype, key_digest, occurring_ids, open_entry
from txlab.data.registry import EOS, SENTENCE, SPLITS, CorpusSources, CorpusSpec, corpus_dir, locate_sources, missing_corpus_error
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.fileio import allocated_npy
from txlab.progress import Progress

BLOCK_CHARS = 1 << 22
"""Characters of text read at a time when a file is read through: large enough to amortise Python, small in memory."""
MAX_LINE_CHARS = 1 << 26
"""The longest line a word rule reads (:func:`read_text_blocks`): 64 Mi characters, millions of words held at once."""
DEFAULT_SPLIT = (0.9, 0.05, 0.05)
"""The train, valid and test fractions of a single-file corpus (enwik8's 90M/5M/5M), and own text's default."""


# ----------------------------------------------------------------------------------------------------
# Reading text (the registry's corpora and own text)


def read_text_blocks(path: Path, block_chars: int | None = None, newline: str | None = "", lines: bool = True) -> Iterator[str]:
    """The file's text in blocks of about ``block_chars`` characters (default :data:`BLOCK_CHARS`); ``newline`` as :func:`open` takes it ('' reads the
    text exactly, None translates line ends). With ``lines`` (what word rules need) each block ends at a line end (except
    the last), and a line longer than :data:`MAX_LINE_CHARS` is refused rather than read whole (a file of gigabytes
    without a line end would not fit in memory); without, blocks of exactly ``block_chars`` (characters need no lines).

    Every text file txlab reads (own text in every tokenizer and in words, the registry's corpora) is read here, so each
    refuses the same way, in one line naming the file and what to do, before more than a block is read past the fault:
    bytes that are not UTF-8 (named with their offset), a NUL character (a binary file: valid UTF-8, never text) and a file
    that holds only a byte-order mark. A leading byte-order mark is an encoding mark some editors write, not text: dropped."""
    block_chars = block_chars or BLOCK_CHARS
    read = 0  # characters read so far

    def checked(piece: str) -> str:
        nonlocal read
        if "\0" in piece:
            raise TxlabError(f"{path} holds a NUL character (character {read + piece.index(chr(0)):,}): it is a binary file, not text; "
                             "give a UTF-8 text file")
        read += len(piece)
        return piece

    try:
        with open(path, encoding="utf-8-sig", newline=newline) as fh:
            while block := fh.read(block_chars):
                pieces = [checked(block)]
                while lines and not pieces[-1].endswith("\n") and (more := fh.readline(block_chars)):
                    pieces.append(checked(more))
                    if len(pieces) * block_chars > block_chars + MAX_LINE_CHARS:
                        raise TxlabError(f"{path} has a line of more than {MAX_LINE_CHARS:,} characters, which txlab does not read whole: "
                                         "break the text into lines, or read it by characters (--tokenizer char) or a Hugging Face tokenizer")
                yield "".join(pieces)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    if not read and Path(path).stat().st_size:
        raise TxlabError(f"{path} holds only a byte-order mark, no text: give it some text")


def read_text(path: Path, lines: bool = True) -> str:
    """The whole text of a file, read and checked as :func:`read_text_blocks` reads (a text held at once: words)."""
    return "".join(read_text_blocks(path, lines=lines))


def _not_utf8(path: Path) -> TxlabError:
    """The refusal of a file that is not UTF-8, naming the first offending byte and its offset in the file (a text reader
    knows only its position in a buffer, so the file is decoded again, in blocks, to find it)."""
    decoder, offset, where = codecs.getincrementaldecoder("utf-8")(), 0, "at its end (a character cut short)"
    with open(path, "rb") as fh:
        while chunk := fh.read(BLOCK_CHARS):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:  # err.object: the bytes the decoder held back from the block before, then this block
                at = offset - (len(err.object) - len(chunk)) + err.start
                where = f"byte {err.object[err.start]:#04x} at offset {at:,} ({err.reason})"
                break
            offset += len(chunk)
    return TxlabError(f"{path} is not UTF-8 text: {where}; convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8), or give another file")


def words(block: str, markers: str) -> list[str]:
    """Whitespace-split words with a marker after every line, as the reference tokenises.

    The reference strips and splits each line, then appends <eos> (``markers`` 'eos'), or for lm1b
    ('sentence') wraps it in <S> ... <S> and lets consecutive sentences share the marker between them
    (its sentence streams drop a sentence's last token when the next one starts; :func:`_split_opening`
    is the first sentence's opening marker). Replacing the newlines in a whole block does the same in
    one C-level pass.
    """
    if not block.endswith("\n"):
        block += "\n"
    return block.replace("\n", f" {EOS if markers == 'eos' else SENTENCE} ").split()


def char_codes(text: str) -> np.ndarray:
    """The Unicode code points of ``text``."""
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


class CodeCounter:
    """How often each code (a byte or a code point) occurs, kept in the order codes first occur: the
    order that breaks ties in a vocabulary counted from the text."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def add(self, codes: np.ndarray) -> None:
        values, first, count = np.unique(codes, return_index=True, return_counts=True)
        order = np.argsort(first)
        for v, c in zip(values[order].tolist(), count[order].tolist()):
            self.counts[v] = self.counts.get(v, 0) + c

    def vocab(self, symbol: Callable[[int], str]) -> Vocab:
        """The vocabulary of the codes counted, each named by ``symbol(code)``."""
        return Vocab.from_counts({symbol(v): c for v, c in self.counts.items()})


def code_ids(vocab: Vocab, code: Callable[[str], int]) -> np.ndarray:
    """[largest code + 1]: the id in ``vocab`` of each code (``code(symbol)`` is a symbol's code)."""
    codes = np.array([code(s) for s in vocab.symbols])
    lookup = np.zeros(int(codes.max()) + 1, dtype=np.int64)
    lookup[codes] = np.arange(len(vocab))
    return lookup


def fraction_bounds(n: int, fractions: Sequence[float]) -> dict[str, tuple[int, int]]:
    """[start, end) of each split with a nonzero fraction in a stream of ``n`` tokens: every split after
    the first gets floor(n x fraction) tokens (exact decimal fractions: 0.05 is 1/20), the first the rest.
    For :data:`DEFAULT_SPLIT` and a 100,000,000-symbol file, exactly the reference's 90M/5M/5M."""
    present = [(s, Fraction(str(f))) for s, f in zip(SPLITS, fractions) if f > 0]
    sizes = {s: math.floor(n * f) for s, f in present[1:]}
    sizes = {present[0][0]: n - sum(sizes.values()), **sizes}
    bounds, start = {}, 0
    for split in SPLITS:
        if split in sizes:
            bounds[split] = (start, start + sizes[split])
            start += sizes[split]
    return bounds


# ----------------------------------------------------------------------------------------------------
# The distribution formats


def _check_not_empty(path: Path, size: int) -> None:
    if size == 0:
        raise TxlabError(f"{path} is empty")


def _corpus_blocks(path: Path, bar: Progress) -> Iterator[str]:
    """A word corpus's file in blocks (line ends translated, as the reference reads), counted on ``bar``."""
    _check_not_empty(path, path.stat().st_size)
    for block in read_text_blocks(path, newline=None):
        bar.update(len(block))
        yield block


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


@contextlib.contextmanager
def _code_stream(spec: CorpusSpec, path: Path) -> Iterator[tuple[int, Iterator[np.ndarray]]]:
    """How many symbols a single-file corpus has, and its symbol codes in blocks: bytes for
    'bytes', Unicode code points for 'chars'."""
    if spec.reader == "bytes":
        with _open_single(path) as (fh, n):
            yield n, (np.frombuffer(b, dtype=np.uint8) for b in iter(lambda: fh.read(BLOCK_CHARS), b""))
        return
    n = sum(len(block) for block in read_text_blocks(path, newline=None, lines=False))  # a cheap pre-pass: the split needs the character count
    yield n, (char_codes(block) for block in read_text_blocks(path, newline=None, lines=False))


def _code_chunks(spec: CorpusSpec, path: Path, bar: Progress, drop_newlines: bool) -> Iterator[tuple[str, np.ndarray]]:
    """(split, codes) chunks of a single-file corpus, cut 90/5/5; newlines (code 10) dropped on request."""
    with _code_stream(spec, path) as (n, blocks):
        _check_not_empty(path, n)
        bounds = fraction_bounds(n, DEFAULT_SPLIT)
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
# Encoding into the cache


def _options(spec: CorpusSpec, cfg: DataConfig) -> dict:
    """The settings that change the encoded result (part of the cache key). lm1b's names its sentence
    marker, so that an entry encoded with another marker scheme (an end marker </S> of its own, as
    txlab once wrote) is never read as this one."""
    if spec.reader == "bytes":
        return {"drop_newlines": bool(cfg.enwik8_drop_newlines)}
    return {"sentence_marker": SENTENCE} if spec.markers == "sentence" else {}


def entry_dir(spec: CorpusSpec, cfg: DataConfig) -> Path:
    """The cache entry registry corpus ``spec`` is encoded into, as ``cfg`` reads it."""
    key = {"corpus": spec.name, "dir": str(corpus_dir(cfg, spec.name).resolve()), "options": _options(spec, cfg), "format": CACHE_FORMAT}
    return cache_root(cfg) / spec.name / key_digest(key)


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
                    for block in _corpus_blocks(path, bar):
                        tokens = words(block, spec.markers)
                        lengths[split] += len(tokens)
                        if counting:
                            counts.update(tokens)
            reference_vocab = sources.directory / "1b_word_vocab.txt"
            if spec.name == "lm1b" and reference_vocab.is_file():
                return _lm1b_vocab_file(reference_vocab), lengths
            return Vocab.from_counts(counts, spec.specials, spec.min_freq, spec.unk), lengths
        counter = CodeCounter()
        for split, codes in _code_chunks(spec, sources.files["all"][0], bar, drop_newlines):
            counter.add(codes)
            lengths[split] += len(codes)
    return counter.vocab(str if spec.byte_symbols else chr), lengths


def _lm1b_vocab_file(path: Path) -> Vocab:
    """The reference's 1b_word_vocab.txt: one 'word count' per line, <S>, </S>, <UNK> among them."""
    symbols = [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Vocab(symbols, unk="<UNK>")


def _encode_into(spec: CorpusSpec, sources: CorpusSources, vocab: Vocab, lengths: dict[str, int], workdir: Path, drop_newlines: bool, progress: bool) -> None:
    """Pass 2: encode every split into a preallocated {split}.npy."""
    dtype = id_dtype(len(vocab))
    outputs = {s: allocated_npy(workdir / f"{s}.npy", dtype, n) for s, n in lengths.items() if n}
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
                    for block in _corpus_blocks(path, bar):
                        put(split, vocab.encode(words(block, spec.markers)))
        else:
            lookup = code_ids(vocab, int if spec.byte_symbols else ord)
            for split, codes in _code_chunks(spec, sources.files["all"][0], bar, drop_newlines):
                put(split, lookup[codes])
    for split, out in outputs.items():
        assert filled[split] == len(out), f"{split}: counted {len(out)} tokens, encoded {filled[split]}"
        out.flush()
    outputs.clear()  # drop the memmaps so the files are closed before they are renamed


def _check_splits_not_blank(spec: CorpusSpec, vocab: Vocab, workdir: Path, lengths: dict[str, int], where: Path) -> None:
    """Refuse a split of only whitespace and line ends (a whitespace-only train file would train on <eos>
    alone): nothing a model can learn or be scored on. Own text has the same check (textdata._check_text_splits)."""
    def blank(symbol: str) -> bool:
        if spec.byte_symbols and symbol.isdigit():  # enwik8's symbols are byte values
            return chr(int(symbol)).isspace()
        return symbol == EOS or symbol.isspace()

    is_blank = np.array([blank(symbol) for symbol in vocab.symbols], dtype=bool)
    for split, n in lengths.items():
        if not n:
            continue
        ids = np.load(workdir / f"{split}.npy", mmap_mode="r")
        if is_blank[occurring_ids(ids, len(vocab), 0, n)].all():
            raise TxlabError(f"the {split} split of {spec.name} in {where} holds only whitespace and line ends: give it some text")


def _build_cache(spec: CorpusSpec, sources: CorpusSources, entry: Path, options: dict, progress: bool) -> dict:
    """Encode the corpus into a fresh cache entry (built aside, then renamed into place)."""
    if progress:
        print(f"encoding {spec.name} from {sources.unique_files()[0].parent} (first load; cached in {entry})", file=sys.stderr)
    drop = options.get("drop_newlines", False)

    def encode(workdir: Path) -> Encoded:
        vocab, lengths = _count_and_measure(spec, sources, drop, progress)
        _encode_into(spec, sources, vocab, lengths, workdir, drop, progress)
        _check_splits_not_blank(spec, vocab, workdir, lengths, sources.directory)
        missing = sources.missing if spec.reader == "lines" else {}
        return Encoded({"corpus": spec.name, "level": spec.level, "options": options}, vocab, lengths, missing)

    return build_entry(entry, sources.unique_files(), encode)


def encoded_corpus(spec: CorpusSpec, cfg: DataConfig, progress: bool) -> tuple[Path, Entry]:
    """Registry corpus ``spec`` in the cache: the directory it is read from, and its entry (encoded now
    when no valid entry holds it)."""
    directory = corpus_dir(cfg, spec.name)
    if not directory.is_dir():
        raise missing_corpus_error(spec, directory, "the directory itself")
    sources = locate_sources(spec, directory)
    if not sources.files:
        raise missing_corpus_error(spec, directory, "; ".join(sources.missing.values()))
    entry = entry_dir(spec, cfg)
    return directory, open_entry(entry, sources.unique_files(), lambda: _build_cache(spec, sources, entry, _options(spec, cfg), progress))
