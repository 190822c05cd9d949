"""Own text's tokenizers (``data.tokenizer``): txlab's character and word vocabularies, and Hugging Face ones.

- ``char``: every character a token; the vocabulary lists every character of the text (all splits)
  by falling count, ties by first occurrence, as the registry's character corpora do: tinyshakespeare's
  input.txt read this way is the registry's tinyshakespeare, token for token.
- ``word``: words split on whitespace and ``<eos>`` after every line, as WikiText; the vocabulary is
  ``<eos>``, then every word of the text by falling count (so there is no ``<unk>``).
- ``hf:PATH_OR_HUB_ID``: a Hugging Face tokenizer loaded by ``transformers.AutoTokenizer`` from a local
  folder (or a Hub id, which needs a network or the Hugging Face cache). The text is encoded without
  special tokens (no BOS or EOS is added: the tokens are the text's). The vocabulary lists the
  tokenizer's symbols by id, ``len(tokenizer)`` of them (more if an id lies beyond), an id no symbol
  has named ``<unused-ID>``. transformers is imported only here, and only for an ``hf:`` tokenizer. It is
  loaded without running code the folder brings (txlab.data.hf_folders: a tokenizer with custom code is
  refused), and a tokenizer file that is there but does not load is an error naming it.

Blocks. A Hugging Face tokenizer encodes a file in blocks of about :data:`HF_BLOCK_CHARS` characters, so a
large file is never tokenised at once. A block ends where a whitespace run starts after a word (one
holding a space, else a line end: see :func:`_cut`), and is encoded with up to :data:`CONTEXT_CHARS` characters of the
text on each side (cut at whitespace, so no word is split), whose tokens are dropped: the tokenizer sees the block as the middle of the text,
not a text of its own (a SentencePiece tokenizer would otherwise add a space at every block start).
A token reaching across a block's edge would mean the tokenizer merges across that whitespace; then
the cut is not exact, and the file is encoded at once instead (said on stderr). The tests hold blocks
equal to one encoding of the whole text.

Offsets. Every tokenizer gives each token's character offsets in the text (its ``offsets`` method, an
:class:`Encoding` per text): what scoring in words needs to find the tokens that spell a word (txlab.measure.words).
A Hugging Face tokenizer gives its own (a fast, Rust one only); txlab's character and word vocabularies, and a registry
corpus's unit (:class:`CorpusTokenizer`: words, characters, or enwik8's UTF-8 bytes, each byte spanning its character)
count them from the text.

Cuts. Scoring in words reads many prefixes of one text (a context and a word, then the word after it). Where a
tokenizer encodes each word end's prefix as the text's own tokens up to it, one encoding of the text serves them all:
``stable_ends`` names those word ends (:func:`prefix_encoding` cuts the encoding there). txlab's vocabularies never
join characters across whitespace, so every word end is one. A Hugging Face pipeline is cut only where its structure
guarantees it: no normalizer, pre-tokenizers that split by characters' classes (:data:`LOCAL_PRE_TOKENIZERS`), a model
that encodes each pre-token alone, no added token that holds or strips whitespace; then the word ends before a
whitespace character at which it always ends a pre-token (any of Unicode's White_Space for GPT-2's pattern and the
whitespace splitters, a space for Metaspace). Any other pipeline names none, and each prefix is encoded on its own.

tokenizer_id. Names the tokenization, equal strings meaning identical tokens for identical text:
``char:<16 hex>`` and ``word:<16 hex>`` (the vocabulary's sha256, as registry corpora have), and
``hf:<16 hex>`` (the sha256 of the tokenizer's serialized pipeline: normalizer, pre-tokenizer, model
with its vocabulary and merges, added tokens). Members of a RECL group must share it and the token stream.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from txlab.data.formats import MAX_LINE_CHARS, CodeCounter, char_codes, code_ids, read_text_blocks, words
from txlab.data.hf_folders import TOKENIZER_FILES, from_pretrained, hub_id, read_json, refuse_custom_code
from txlab.data.registry import EOS
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError, did_you_mean
from txlab.progress import Progress

TOKENIZER_FORMS = ("char", "word", "hf:PATH_OR_HUB_ID")
HF_BLOCK_CHARS = 1 << 20
"""Characters a Hugging Face tokenizer encodes at a time: its offsets take about 100 bytes a token in Python."""
CONTEXT_CHARS = 256
"""Characters of text encoded (and dropped) on each side of a block, so that the block reads as the middle of the text."""


@dataclass(frozen=True)
class Encoding:
    """A text's tokens under one tokenizer, with where each lies in the text."""

    ids: np.ndarray
    """int64 [n]; -1 for a symbol the vocabulary does not hold."""
    starts: np.ndarray
    """int64 [n]: each token's first character in the text."""
    ends: np.ndarray
    """int64 [n]: one past each token's last character."""
    unknown: np.ndarray
    """bool [n]: the tokenizer's unknown-symbol token (or a symbol with no id)."""


def _code_offsets(texts: Sequence[str], vocab: Vocab, code: Any, codes_of: Any) -> list[Encoding]:
    """Every code a token: ``codes_of(text)`` gives the codes (int64 [n]) and each one's character (int64 [n]);
    ``code(symbol)`` is a symbol's code. A code the vocabulary lacks has no id."""
    lookup = code_ids(vocab, code)  # [largest code + 1]
    known = np.zeros(len(lookup), dtype=bool)
    known[[code(s) for s in vocab.symbols]] = True
    out = []
    for text in texts:
        codes, chars = codes_of(text)  # [n], [n]
        inside = codes < len(lookup)
        has_id = np.zeros(len(codes), dtype=bool)
        has_id[inside] = known[codes[inside]]
        ids = np.where(has_id, lookup[np.where(inside, codes, 0)], -1)
        out.append(Encoding(ids, chars, chars + 1, ~has_id))
    return out


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


LINE_OR_WORD = re.compile(r"\n|\S+")


def _word_offsets(texts: Sequence[str], vocab: Vocab, line_end: str) -> list[Encoding]:
    """Every word a token, every line end ``line_end`` (txlab.data.formats.words, whose trailing marker after the text's
    last line is not written: the text ends at a word). A word the vocabulary lacks is its unknown symbol where it has
    one (as a word corpus reads it), else has no id; either way it is unknown."""
    index, end = vocab.index, vocab.index[line_end]
    missing = -1 if vocab.unk_id is None else vocab.unk_id
    out = []
    for text in texts:
        found = [(m.start(), m.end(), end if m.group() == "\n" else index.get(m.group(), missing)) for m in LINE_OR_WORD.finditer(text)]
        table = np.array(found, dtype=np.int64).reshape(-1, 3)  # [n, 3]: (start, end, id)
        ids = table[:, 2].copy()
        out.append(Encoding(ids, table[:, 0].copy(), table[:, 1].copy(), (ids < 0) | (ids == vocab.unk_id)))
    return out


def _backend_offsets(texts: Sequence[str], backend: Any) -> list[Encoding]:
    """A `tokenizers` pipeline's encodings, without special tokens (its offsets are characters of the Python string)."""
    model = backend.model
    unk = getattr(model, "unk_token", None)  # BPE and WordPiece name their unknown token; Unigram gives its id
    unk_id = backend.token_to_id(unk) if unk else getattr(model, "unk_id", None)
    out = []
    for enc in backend.encode_batch(list(texts), add_special_tokens=False):
        ids = np.asarray(enc.ids, dtype=np.int64)
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)  # [n, 2]: (start, end)
        out.append(Encoding(ids, offsets[:, 0], offsets[:, 1], ids == (-1 if unk_id is None else unk_id)))
    return out


WORD = re.compile(r"\S+")


def word_ends(text: str) -> np.ndarray:
    """int64 [words]: one past each word's (run of non-whitespace's) last character."""
    return np.fromiter((m.end() for m in WORD.finditer(text)), dtype=np.int64)


def prefix_encoding(encoding: Encoding, end: int) -> Encoding | None:
    """The tokens of ``encoding`` that lie before character ``end``, or None where a token crosses it. At an end the
    tokenizer names stable (``stable_ends``) this is the encoding of the text's first ``end`` characters."""
    k = int(np.count_nonzero(encoding.starts < end))
    if k and int(encoding.ends[:k].max()) > end:
        return None
    return Encoding(encoding.ids[:k], encoding.starts[:k], encoding.ends[:k], encoding.unknown[:k])


LOCAL_PRE_TOKENIZERS = frozenset({"ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit", "BertPreTokenizer", "Punctuation", "Digits"})
"""Pre-tokenizers whose pieces before a word end are the same whether the text stops there or goes on (each decides a
split by the characters around it, looking past the end only within whitespace): a prefix is split as the text is."""
PER_PIECE_MODELS = frozenset({"BPE", "WordPiece", "WordLevel", "Unigram"})
"""`tokenizers` models, each of which encodes every pre-token on its own."""


WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                        "\u2028\u2029\u202f\u205f\u3000")
"""Unicode's White_Space, what `tokenizers` splits at (Python's str.isspace also takes U+001C..U+001F, which it does not)."""


def _splitting_spaces(pipeline: dict[str, Any]) -> frozenset[str]:
    """The whitespace characters before which a `tokenizers` pipeline (its JSON) always ends a pre-token, where it is
    local: a prefix ending at a pre-token's end is encoded as the text's tokens up to it. Empty where it is not."""
    if pipeline.get("normalizer") is not None:
        return frozenset()  # offsets of a normalized text need not map a prefix to a prefix
    pre = pipeline.get("pre_tokenizer")
    if pre is None:
        return frozenset()  # the whole text is one piece: no end but the text's is a pre-token's
    pieces = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if not pieces or any(p.get("type") not in LOCAL_PRE_TOKENIZERS for p in pieces):
        return frozenset()
    model = pipeline.get("model") or {}
    if model.get("type") not in PER_PIECE_MODELS or model.get("dropout") not in (None, 0, 0.0):
        return frozenset()  # an unknown model, or a BPE that drops merges at random
    added = pipeline.get("added_tokens") or []
    if any(t.get("lstrip") or t.get("rstrip") or any(ch.isspace() for ch in t.get("content", "")) for t in added):
        return frozenset()
    spaces: set[str] = set()
    for piece in pieces:
        kind = piece.get("type")
        if kind == "Metaspace" and piece.get("split", True):
            spaces.add(" ")  # it splits before its replacement of a space, and of nothing else (not a line end)
        elif kind in ("Whitespace", "WhitespaceSplit", "BertPreTokenizer") or (kind == "ByteLevel" and piece.get("use_regex", True)):
            spaces |= WHITE_SPACE  # GPT-2's pattern and the whitespace splitters end a piece at any white space
    return frozenset(spaces)  # Punctuation and Digits never split at white space


def _need_vocab(tokenizer: Any) -> Vocab:
    if tokenizer.vocab is None:
        raise TxlabError(f"txlab's {tokenizer.kind} tokenizer has no vocabulary yet: count it from the text, or give it the model's")
    return tokenizer.vocab


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
            raise TxlabError("tokenizer 'hf:' names no tokenizer: give hf:PATH_OR_HUB_ID (a folder with tokenizer files, or a Hub id such as hf:openai-community/gpt2)")
        return TokenizerSpec("hf", source)
    raise did_you_mean(text, TOKENIZER_FORMS, "tokenizer")


def vocabulary_tokenizer_id(level: str, vocab: Vocab) -> str:
    """The tokenizer_id of a tokenization by txlab's own vocabulary: its level and the start of its sha256."""
    return f"{level}:{vocab.sha256[:16]}"


def text_tokenizer(spec: TokenizerSpec) -> CharTokenizer | WordTokenizer | HfTokenizer:
    """The tokenizer ``spec`` names; txlab's own count their vocabulary from the text (:meth:`CharTokenizer.count`)."""
    if spec.kind == "hf":
        return load_hf_tokenizer(spec.source)
    return CharTokenizer() if spec.kind == "char" else WordTokenizer()


# ----------------------------------------------------------------------------------------------------
# txlab's vocabularies


class VocabularyTokenizer:
    """What txlab's own tokenizers share: a vocabulary counted from the text (``count``), named by its kind and hash."""

    kind = ""

    def __init__(self) -> None:
        self.vocab: Vocab | None = None

    @property
    def tokenizer_id(self) -> str:
        return vocabulary_tokenizer_id(self.kind, self.vocab)

    def as_hf(self) -> Any:
        """This tokenizer as one transformers loads offline (a ``PreTrainedTokenizerFast`` over a ``tokenizers`` WordLevel
        model of the vocabulary, no special tokens): the ids txlab gives a text, also for a text read in blocks. It has
        no unknown symbol, as txlab's vocabularies have none: a text holding another symbol is refused, not dropped."""
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        backend = Tokenizer(models.WordLevel(self.vocab.index, unk_token=None))
        self._pipeline(backend)
        return PreTrainedTokenizerFast(tokenizer_object=backend)

    def stable_ends(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Every word end: a character, or a word, is a token of its own."""
        return [word_ends(text) for text in texts]


class CharTokenizer(VocabularyTokenizer):
    """txlab's character vocabulary, counted from the text."""

    kind = "char"

    def count(self, paths: Sequence[Path]) -> None:
        counter = CodeCounter()
        for path in paths:
            for block in read_text_blocks(path, lines=False):
                counter.add(char_codes(block))
        self.vocab = counter.vocab(chr)
        self._ids = code_ids(self.vocab, ord)

    def encode_file(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        for block in read_text_blocks(path, lines=False):
            bar.update(len(block))
            yield self._ids[char_codes(block)]

    @staticmethod
    def _pipeline(backend: Any) -> None:
        from tokenizers import Regex, decoders, pre_tokenizers

        backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")  # every code point a piece
        backend.decoder = decoders.Fuse()  # decoding joins the characters

    def offsets(self, texts: Sequence[str]) -> list[Encoding]:
        """Every character a token."""
        return _code_offsets(texts, _need_vocab(self), ord, _characters)

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether its character is whitespace."""
        return np.array([self.vocab.symbols[i].isspace() for i in ids.tolist()], dtype=bool)


class WordTokenizer(VocabularyTokenizer):
    """txlab's word vocabulary: whitespace-split words, <eos> after every line, counted from the text."""

    kind = "word"

    def count(self, paths: Sequence[Path]) -> None:
        counts: Counter[str] = Counter()
        for path in paths:
            for block in read_text_blocks(path):
                counts.update(words(block, "eos"))
        self.vocab = Vocab.from_counts(counts, specials=(EOS,))

    def encode_file(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        for block in read_text_blocks(path):
            bar.update(len(block))
            yield self.vocab.encode(words(block, "eos"))

    @staticmethod
    def _pipeline(backend: Any) -> None:
        """:func:`~txlab.data.formats.words` as a `tokenizers` pipeline: a line end becomes `` <eos> ``, and so does the end
        of a text whose last line has none; Python's whitespace splits (Rust's lacks U+001C..U+001F, made spaces first)."""
        from tokenizers import Regex, normalizers, pre_tokenizers

        backend.normalizer = normalizers.Sequence([
            normalizers.Replace(Regex("[\\x{1c}-\\x{1f}]"), " "),
            normalizers.Replace(Regex("(?<!\\n)\\z"), "\n"),
            normalizers.Replace("\n", f" {EOS} "),
        ])
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()

    def offsets(self, texts: Sequence[str]) -> list[Encoding]:
        """Every word a token, every line end <eos>."""
        return _word_offsets(texts, _need_vocab(self), EOS)

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether it is the line end <eos> (words are never whitespace)."""
        return np.array([self.vocab.symbols[i] == EOS for i in ids.tolist()], dtype=bool)


@dataclass(frozen=True)
class CorpusTokenizer:
    """How a txlab run trained on a registry corpus reads text: the corpus's unit with the run's vocabulary."""

    kind: str
    """'word' (whitespace-split words), 'char' (every character a token) or 'byte' (every UTF-8 byte a token)."""
    vocab: Vocab
    line_end: str = EOS
    """'word' only: the symbol a line end is (lm1b's is <S>)."""

    @property
    def tokenizer_id(self) -> str:
        return vocabulary_tokenizer_id(self.kind, self.vocab)

    def offsets(self, texts: Sequence[str]) -> list[Encoding]:
        """The corpus's unit: words and line ends, characters, or UTF-8 bytes (a byte's offsets its character's)."""
        if self.kind == "word":
            return _word_offsets(texts, self.vocab, self.line_end)
        if self.kind == "char":
            return _code_offsets(texts, self.vocab, ord, _characters)
        return _code_offsets(texts, self.vocab, int, _utf8_bytes)  # a byte vocabulary's symbols are decimal byte values

    def stable_ends(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Every word end (no unit of a corpus joins characters across whitespace)."""
        return [word_ends(text) for text in texts]


# ----------------------------------------------------------------------------------------------------
# Hugging Face tokenizers


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
    for chunk in read_text_blocks(path, block_chars, lines=False):
        text = carry + chunk
        cut = _cut(text)
        if cut is None:  # no whitespace after a word yet: read on, but not without bound
            if len(text) > MAX_LINE_CHARS:
                raise NotBlockwise
            carry = text
            continue
        yield text[:cut]
        carry = text[cut:]
    if carry:
        yield carry


def _context(text: str, *, before: bool) -> str:
    """The :data:`CONTEXT_CHARS` characters of ``text`` next to a block (its end ``before`` the block, else its start), cut
    at whitespace so that no word is split: a tokenizer of whole words would not know the piece of one."""
    if len(text) <= CONTEXT_CHARS:
        return text
    if before:
        piece = text[-CONTEXT_CHARS:]
        space = re.search(r"\s", piece)
        return piece[space.start():] if space else piece
    piece = text[:CONTEXT_CHARS]
    space = re.search(r"\s\S*$", piece)
    return piece[: space.start()] if space and space.start() > 0 else piece


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
        self.splits: frozenset[str] | None = None
        """The whitespace before which the pipeline always ends a pre-token, where it is local (:meth:`stable_ends`;
        empty where it is not); found on first use."""

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

    def encode(self, text: str, where: str = "the text") -> list[int]:
        """The ids of ``text``, encoded at once without special tokens; ``where`` names the text in an error."""
        if self.backend is not None:
            return self._encoding(text, where).ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _encoding(self, text: str, where: str) -> Any:
        """The backend's encoding of ``text``. A symbol its vocabulary lacks is refused naming it (a vocabulary without an
        unknown symbol, as :meth:`VocabularyTokenizer.as_hf` writes, cannot encode it: `tokenizers` raises a bare Exception)."""
        try:
            return self.backend.encode(text, add_special_tokens=False)
        except Exception as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            normal = self.backend.normalizer.normalize_str(text) if self.backend.normalizer else text
            pieces = self.backend.pre_tokenizer.pre_tokenize_str(normal) if self.backend.pre_tokenizer else [(normal, None)]
            known = self.tokenizer.get_vocab()
            missing = next((piece for piece, _ in pieces if piece not in known), None)
            lacks = f": it holds {missing!r}, which the vocabulary lacks" if missing is not None else ""
            raise TxlabError(f"tokenizer hf:{self.source} cannot encode {where}{lacks} ({reason})") from None

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def offsets(self, texts: Sequence[str]) -> list[Encoding]:
        """The pipeline's own offsets; a tokenizer without a `tokenizers` pipeline (a slow, Python one) gives none."""
        if self.backend is None:
            raise TxlabError(f"tokenizer hf:{self.source} ({type(self.tokenizer).__name__}) gives no character offsets: scoring in words "
                             "needs a fast (Rust) Hugging Face tokenizer (a tokenizer.json), or txlab's char or word tokenizer")
        try:
            return _backend_offsets(texts, self.backend)
        except Exception as err:  # `tokenizers` raises a bare Exception for a text it cannot encode (a vocabulary without <unk>)
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise TxlabError(f"tokenizer hf:{self.source} cannot encode the text ({reason}): a vocabulary without an unknown symbol reads "
                             "only text made of its own symbols") from None

    def stable_ends(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The word ends of each text before a whitespace character at which the pipeline always ends a pre-token, where
        the pipeline is local (see Cuts above); none otherwise."""
        if self.splits is None:
            self.splits = _splitting_spaces(json.loads(self.backend.to_str())) if self.backend is not None else frozenset()
        out = []
        for text in texts:  # a word end before a space the pipeline splits at, or the text's end
            ends = word_ends(text)
            keep = np.fromiter((end == len(text) or text[end] in self.splits for end in ends.tolist()), dtype=bool, count=len(ends))
            out.append(ends[keep] if self.splits else ends[:0])
        return out

    def as_hf(self) -> Any:
        """The transformers tokenizer (what :meth:`VocabularyTokenizer.as_hf` gives for txlab's)."""
        return self.tokenizer

    def encode_file(self, path: Path, bar: Progress, block_chars: int | None = None) -> Iterator[np.ndarray]:
        """The file's ids in blocks of about ``block_chars`` characters (default :data:`HF_BLOCK_CHARS`; see
        the module's Blocks); raises NotBlockwise when a cut is not exact."""
        if self.backend is None:
            raise NotBlockwise  # no offsets to check a cut by
        previous, blocks = "", _cut_blocks(path, block_chars or HF_BLOCK_CHARS)
        current = next(blocks, None)
        while current is not None:
            following = next(blocks, None)
            left, right = _context(previous, before=True), _context(following or "", before=False)
            encoding = self._encoding(left + current + right, str(path))
            ids = np.asarray(encoding.ids, dtype=np.int64)
            offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)  # [tokens, 2]: each token's (start, end) character
            starts, ends = offsets[:, 0], offsets[:, 1]
            lo, hi = len(left), len(left) + len(current)
            if np.any((starts < lo) & (ends > lo)) or np.any((starts < hi) & (ends > hi)):
                raise NotBlockwise
            bar.update(len(current))
            yield ids[(starts >= lo) & (starts < hi)] if (left or right) else ids
            previous, current = current, following

    def encode_whole(self, path: Path, bar: Progress) -> Iterator[np.ndarray]:
        blocks, n = [], 0
        for block in read_text_blocks(path, lines=False):
            n += len(block)
            if n > MAX_LINE_CHARS:  # its tokens' offsets alone would take about 100 bytes a character
                raise TxlabError(f"tokenizer hf:{self.source} merges tokens across whitespace, so {path} must be encoded at once, and it holds more "
                                 f"than the {MAX_LINE_CHARS:,} characters txlab encodes at once: split it into smaller files, or use a tokenizer "
                                 "that starts its tokens at whitespace")
            blocks.append(block)
        text = "".join(blocks)
        bar.update(len(text))
        yield np.asarray(self.encode(text, str(path)), dtype=np.int64)

    def is_blank(self, ids: np.ndarray) -> np.ndarray:
        """Per id: whether it decodes to whitespace only, or to nothing."""
        return np.array([not self.decode([i]).strip() for i in ids.tolist()], dtype=bool)


def hf_location(source: str) -> str:
    """What from_pretrained is given: a local folder's absolute path, else the Hub id as written
    (txlab.data.hf_folders.hub_id); a path to a file or to no folder is refused."""
    local = Path(source).expanduser()
    if local.exists():
        if not local.is_dir():
            raise TxlabError(f"hf:{source} is a file; give the folder holding the tokenizer's files (tokenizer.json, tokenizer_config.json, ...)")
        return str(local.resolve())
    return hub_id(source, "tokenizer folder")


_HF_MEMO: dict[tuple, HfTokenizer] = {}


def load_hf_tokenizer(source: str) -> HfTokenizer:
    """The Hugging Face tokenizer ``source`` names (loaded once per process while its files stay the same)."""
    location = hf_location(source)
    folder = Path(location)
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())) if folder.is_dir() else ()
    key = (location, files)
    if key not in _HF_MEMO:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise TxlabError(f"tokenizer hf:{source} needs the transformers package: pip install 'txlab[hf]'") from None
        refuse_custom_code(location)  # before any other file is read
        present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        for name in present:  # a damaged file is named, not reported as whatever transformers then trips over
            if name.endswith(".json"):
                read_json(folder / name)
        try:
            tokenizer = from_pretrained(AutoTokenizer, location, trust_remote_code=False)
        except TxlabError:
            raise
        except Exception as err:  # transformers raises OSError, ValueError, KeyError, ... for a folder it cannot read
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if present:
                raise TxlabError(f"the tokenizer in {location} ({', '.join(present)}) does not load: {reason}") from None
            where = "a local folder needs the tokenizer's files (tokenizer.json, or its vocabulary files, with tokenizer_config.json)"
            raise TxlabError(f"cannot load tokenizer hf:{source} ({reason}); {where}; a Hub id needs a network or the Hugging Face cache") from None
        _HF_MEMO[key] = HfTokenizer(source, tokenizer)
    return _HF_MEMO[key]


# ----------------------------------------------------------------------------------------------------
# A text read as one stream


TextTokenizer = CharTokenizer | WordTokenizer | HfTokenizer | CorpusTokenizer
"""What reads text into a model's ids with each token's character offsets (``offsets``)."""


def stream_encoding(tokenizer: TextTokenizer, text: str) -> Encoding | None:
    """``text`` as one token stream, with each token's characters (what `txlab eval` scores own text as): the ids the cache
    gives the same text as a file, and their offsets. txlab's word rule writes <eos> after the last line, ended by a line
    end or not (:func:`~txlab.data.formats.words`; a `txlab export` of it does the same), so that <eos> is added here as a
    token of no characters. None for a Hugging Face tokenizer without offsets (a slow, Python one). A symbol the vocabulary
    lacks is refused: txlab's vocabularies were counted from the whole text, so the text changed."""
    if isinstance(tokenizer, HfTokenizer) and tokenizer.backend is None:
        return None
    try:
        enc = tokenizer.offsets([text])[0]
    except TxlabError:
        raise
    except Exception:  # `tokenizers` raises a bare Exception for a symbol its vocabulary lacks: refused naming it
        tokenizer._encoding(text, "the text")
        raise
    if isinstance(tokenizer, WordTokenizer) and not text.endswith("\n"):  # a registry corpus's words (CorpusTokenizer) end at the text's end
        at = np.array([len(text)], dtype=np.int64)
        enc = Encoding(np.append(enc.ids, tokenizer.vocab.index[EOS]), np.append(enc.starts, at), np.append(enc.ends, at), np.append(enc.unknown, False))
    if not isinstance(tokenizer, HfTokenizer) and np.any(enc.ids < 0):
        missing = text[int(enc.starts[np.argmax(enc.ids < 0)]) : int(enc.ends[np.argmax(enc.ids < 0)])]
        raise TxlabError(f"the text holds {missing!r}, which txlab's {tokenizer.kind} vocabulary lacks: the text changed since the vocabulary was counted")
    return enc
