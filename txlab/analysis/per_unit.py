"""Perplexity per word and per byte: what makes members with different tokenizers comparable as perplexities.

A member's loss of a word is the sum of its token losses over the tokens that spell the word's span (the word with the
whitespace before it; txlab.data.words), so its nats per word and per byte do not depend on how it cuts the word.
Words are the text's whitespace-separated words: a line end is whitespace, never a word. Pure numpy.
"""

from __future__ import annotations

import numpy as np


def word_perplexity(losses: np.ndarray) -> np.ndarray:
    """exp(mean nats per word) over the last axis: [..., W] -> [...]."""
    return np.exp(np.mean(np.asarray(losses, dtype=np.float64), axis=-1))


def byte_perplexity(losses: np.ndarray, span_bytes: np.ndarray) -> np.ndarray:
    """exp(total nats / total UTF-8 bytes of the spans) over the last axis: [..., W] and [W] -> [...]."""
    return np.exp(np.sum(np.asarray(losses, dtype=np.float64), axis=-1) / float(np.sum(span_bytes)))
