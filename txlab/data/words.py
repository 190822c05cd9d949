"""Words of a text: the unit that members with any tokenizers share.

A word is a maximal run of non-whitespace (:data:`WORD`: Python's Unicode whitespace, the set ``str.split()`` splits on).
Word w's **span** is the word with the whitespace before it, ``text[end(w-1) : end(w)]``: GPT-2-style and
SentencePiece-style tokenizers attach that whitespace to the next word, so the span is what a model writes when it
writes w. **Context c** of w is the text of the c words before it, ``text[start(w-c) : end(w-1)]``: from the first
character of word w-c to the end of word w-1, so the whitespace before w belongs to the target, never to the context.

Line ends are whitespace like any other: a text of n words counts n words, however its lines fall (word perplexity
in txlab is per word so counted, on every path; txlab.analysis.per_unit).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from txlab.errors import TxlabError

WORD = re.compile(r"\S+")
"""A word: a maximal run of non-whitespace."""
MAX_MEAN_WORD_CHARS = 30
"""A text whose words average more characters than this has too few spaces for words to be a unit (a script
written without spaces: Chinese, Japanese, Thai); English averages about 5, Finnish about 8."""


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

    def word(self, w: int) -> str:
        """Word w's characters (without the whitespace before it)."""
        return self.text[int(self.starts[w]) : int(self.ends[w])]

    def span_bytes(self, targets: np.ndarray) -> np.ndarray:
        """int64 [T]: the UTF-8 bytes of each target's span (the denominator of perplexity per byte)."""
        return np.array([len(self.text[slice(*self.span(int(w)))].encode("utf-8")) for w in targets], dtype=np.int64)

    @property
    def sha256(self) -> str:
        """The sha256 of the text's UTF-8 bytes: what names the text in the records and keys of a group in words."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


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
