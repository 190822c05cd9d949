"""Perplexity per word and per byte: what makes members with different tokenizers comparable as perplexities.

One definition on every path: exp(total nats / units), the units the words or the UTF-8 bytes of the text the nats
were scored on. Words are the text's whitespace-separated words (txlab.data.words): a line end is whitespace, never a
word, so its token's nats count toward the text and not toward the words (as lm-evaluation-harness's word perplexity
counts them). A member's loss of a word is the sum of its token losses over the tokens that spell the word's span (the
word with the whitespace before it), so its nats per word and per byte do not depend on how it cuts the word.
Pure numpy.
"""

from __future__ import annotations

import numpy as np


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
