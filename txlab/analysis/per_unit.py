"""Perplexity per word and per byte: what makes members with different tokenizers comparable as perplexities; and
the unigram a member must beat before its RECL is read.

One definition on every path: exp(total nats / units), the units the words or the UTF-8 bytes of the text the nats
were scored on. Words are the text's whitespace-separated words (txlab.data.words): a line end is whitespace, never a
word, so its token's nats count toward the text and not toward the words (as lm-evaluation-harness's word perplexity
counts them). A member's loss of a word is the sum of its token losses over the tokens that spell the word's span (the
word with the whitespace before it), so its nats per word and per byte do not depend on how it cuts the word.
Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

UNIGRAM_FIT = "add-one over the types of the training split and the scored split"
"""How :func:`unigram_perplexity` smooths, in the words the records and notes use."""


def unit_perplexity(nats: float | np.ndarray, units: int | np.ndarray) -> float | np.ndarray:
    """exp(nats / units): perplexity per word or per byte (inf past float64's range; NaN without units)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        value = np.exp(np.asarray(nats, dtype=np.float64) / np.asarray(units, dtype=np.float64))
    return float(value) if np.ndim(value) == 0 else value


def word_perplexity(losses: np.ndarray) -> np.ndarray:
    """exp(mean nats per word) over the last axis: [..., W] -> [...]."""
    losses = np.asarray(losses, dtype=np.float64)
    return unit_perplexity(np.sum(losses, axis=-1), losses.shape[-1])


def byte_perplexity(losses: np.ndarray, span_bytes: np.ndarray) -> np.ndarray:
    """exp(total nats / total UTF-8 bytes of the spans) over the last axis: [..., W] and [W] -> [...]."""
    return unit_perplexity(np.sum(np.asarray(losses, dtype=np.float64), axis=-1), np.sum(span_bytes))


def unigram_perplexity(train: np.ndarray | Sequence[str], scored: np.ndarray | Sequence[str], targets: np.ndarray) -> float:
    """Perplexity on ``scored[targets]`` of a unigram counted on ``train`` (:data:`UNIGRAM_FIT`: every type of either
    split gets one count more, so an unseen target has a probability). The units are token ids (arrays), or words
(``str.split()`` lists, held as Python strings: a fixed-width array would be as wide as the longest word).

    The baseline of docs/recl.md's rule: a member whose perplexity does not beat it has learned no more than how often
    each unit occurs, so its RECL says nothing about how it uses context. In words the unigram predicts the word
    alone, while a member also predicts the whitespace before it, so the comparison slightly favours the unigram."""
    train, scored = (units if isinstance(units, np.ndarray) else np.array(units, dtype=object) for units in (train, scored))
    types, inverse = np.unique(np.concatenate([train, scored]), return_inverse=True)
    counts = np.bincount(inverse[: len(train)], minlength=len(types))
    probability = (counts + 1) / (len(train) + len(types))
    return float(word_perplexity(-np.log(probability[inverse[len(train):][np.asarray(targets, dtype=np.int64)]])))
