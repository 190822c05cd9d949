"""The copying toy (tests/copying_toy.py) the placebo tests read far context with: its losses are the ones worked out by
hand, read in one pass or in chunks with the state carried, and txlab finds it prefix-causal."""

import math

import numpy as np
import pytest
import torch
from copying_toy import STRENGTH, CopyingToy, copying_nll, kinds_of, outcomes

from txlab.errors import TxlabError
from txlab.measure.reading import is_prefix_causal
from txlab.runs.evaluate import read_in_chunks


def test_the_copying_toy_gives_the_losses_worked_out_by_hand_in_one_pass_and_in_chunks():
    a, b, c = 0, 1, 2  # of a vocabulary of 4 (the fourth token never occurs)
    tokens = [a, b, a, c, a, c, c, c]
    uniform = math.log(4)
    copied_wrong = math.log(math.exp(STRENGTH) + 3)  # logit 5 on the copied token, 0 on the 3 others
    copied_right = copied_wrong - STRENGTH
    by_hand = [
        uniform,       # b after a: no earlier a
        uniform,       # a after a b: no earlier b
        copied_wrong,  # c after a b a: the earlier a was followed by b
        uniform,       # a after ... c: no earlier c
        copied_right,  # c after a b a c a: the latest earlier a (the 3rd token) was followed by c, not the first one's b
        copied_wrong,  # c after ... a c: the earlier c was followed by a
        copied_right,  # c after ... c c: the latest earlier c is the one just before, followed by c
    ]
    model = CopyingToy(4)
    x = torch.tensor([tokens])
    for chunk_len in (None, 1, 2, 3):
        with torch.no_grad():
            nll = torch.cat([out.nll for _, out in read_in_chunks(model, x[:, :-1], chunk_len, targets=x[:, 1:])], dim=1)[0]
        np.testing.assert_allclose(nll.numpy(), by_hand, rtol=0, atol=1e-12)
    np.testing.assert_allclose(copying_nll(tokens, 4), by_hand, rtol=0, atol=1e-12)  # the hand computation the placebo tests use


def test_the_copying_toy_reads_a_long_stream_as_its_hand_computation_and_is_prefix_causal():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=(3, 40))  # a batch of three streams
    model = CopyingToy(6)
    x = torch.as_tensor(tokens)
    with torch.no_grad():
        whole = model(x[:, :-1], model.init_state(3), x[:, 1:])
        chunked = torch.cat([out.nll for _, out in read_in_chunks(model, x[:, :-1], 7, targets=x[:, 1:])], dim=1)
        from_hidden = -model.log_prob(whole.hidden).gather(-1, x[:, 1:, None])[..., 0]  # what txlab scores: log_prob of the rows
    for row in range(3):
        want = copying_nll(tokens[row], 6)
        for got in (whole.nll[row], chunked[row], from_hidden[row]):
            np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)
    assert is_prefix_causal(model, tokens[0], 40, 7)
    assert kinds_of(copying_nll(tokens[0], 6), 6) == set(outcomes(6))  # no earlier occurrence, copied right, copied wrong
    with pytest.raises(TxlabError, match="must have the shape of tokens"):
        model(x[:, :-1], model.init_state(3), x[:, :-2])
