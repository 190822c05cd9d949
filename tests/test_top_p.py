"""Nucleus (top-p) sampling in txlab generate, checked on a four-token distribution."""

from __future__ import annotations

import math

import pytest
import torch

from txlab.errors import TxlabError
from txlab.measure.generate import generate, sample_top_k

PROBS = torch.tensor([0.05, 0.5, 0.15, 0.3])  # most likely first: ids 1, 3, 2, 0


def draws(top_p: float, n: int = 4000) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    log_probs = PROBS.log().expand(n, 4)
    return sample_top_k(log_probs, 4, 1.0, generator, top_p)


def test_top_p_keeps_the_most_likely_tokens_until_their_probability_reaches_p_and_renormalises():
    counts = torch.bincount(draws(0.7), minlength=4)
    assert counts[0] == 0 and counts[2] == 0  # 0.5 + 0.3 reaches 0.7: the 0.15 and 0.05 tokens are cut
    assert math.isclose(counts[1] / counts.sum(), 0.5 / 0.8, abs_tol=0.03)


def test_top_p_always_keeps_the_most_likely_token_and_one_keeps_every_token():
    assert set(draws(0.5).tolist()) == {1}  # 0.5 alone reaches 0.5
    assert set(draws(0.01).tolist()) == {1}
    assert set(draws(1.0).tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("top_p", [0.0, 1.5, -0.1])
def test_top_p_outside_zero_to_one_is_refused(tmp_path, top_p):
    with pytest.raises(TxlabError, match="--top-p"):
        generate(tmp_path, prompt="a", top_p=top_p)
