"""A hand-built copying ("induction") language model, and its loss worked out in plain Python: what the placebo tests
read when they need a model that *uses* far context.

Why it exists: a placebo loss differs from a true loss only in which tokens come before the nearest c. A random model
barely reads them (its context effects can sit near the tolerance), so a test on one cannot tell a right far span from
a wrong one by much. This model's prediction changes by whole nats with any earlier occurrence of the current token, at
any distance, so a placebo built from the wrong far span shows at once. Its rule is simple enough to compute by hand
(:func:`copying_nll`, written independently of the model's code), in float64, so a table can be held to it at 1e-5.

The rule, at each position i of everything read so far x_0 .. x_i: find the most recent earlier occurrence j < i of the
current token x_i; the prediction for x_{i+1} has logit ``STRENGTH`` on x_{j+1} and 0 on every other token (uniform when
x_i has not occurred before). A prediction depends only on the tokens up to it (prefix-causal), and the state is
everything read, so reading in chunks with the state carried gives exactly the one-pass predictions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from txlab.models.interface import LanguageModel, LMOutput, State, check_target_shape

STRENGTH = 5.0
"""The logit of the copied token (every other token's is 0)."""


class CopyingToy(LanguageModel):
    """The copying rule behind txlab's interface. ``hidden`` rows are the logits themselves ([B, T, vocab], float64:
    ``STRENGTH`` on the copied token, zeros where there is none), so ``log_prob`` is a log-softmax. The state is every
    token read so far (int64 [B, n]); it holds arbitrarily far context, as an RNN's state would carry it."""

    def __init__(self, vocab_size: int, strength: float = STRENGTH):
        super().__init__()
        self.vocab_size = vocab_size
        # A parameter only so that the model has a device and a float64 dtype, as the collection code asks of a model.
        self.strength = nn.Parameter(torch.tensor(strength, dtype=torch.float64), requires_grad=False)

    def init_state(self, batch_size: int) -> State:
        return torch.zeros(batch_size, 0, dtype=torch.int64, device=self.device)  # nothing read yet

    def forward(self, tokens: torch.Tensor, state: State, targets: torch.Tensor | None = None) -> LMOutput:
        check_target_shape(tokens, targets)
        seen = torch.cat([state, tokens.to(torch.int64)], dim=1)  # [B, n + T]: everything read, this chunk last
        n = state.size(1)
        copied = torch.full(tokens.shape, -1, dtype=torch.int64)  # [B, T]: the token copied at each new position, -1 for none
        for b, row in enumerate(seen.tolist()):
            successor: dict[int, int] = {}  # token -> the token after its most recent occurrence (whose successor is read)
            for i, token in enumerate(row):
                if i > 0:
                    successor[row[i - 1]] = token
                if i >= n:
                    copied[b, i - n] = successor.get(token, -1)
        hidden = torch.zeros(*tokens.shape, self.vocab_size, dtype=torch.float64, device=self.device)  # [B, T, V]
        copied = copied.to(self.device)
        where = copied >= 0
        hidden[where, copied[where]] = self.strength
        nll = None if targets is None else -self.log_prob(hidden).gather(-1, targets.to(torch.int64)[..., None])[..., 0]  # [B, T]
        return LMOutput(nll, hidden, seen)

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(hidden, dim=-1)


def copying_nll(tokens: Sequence[int], vocab_size: int, strength: float = STRENGTH) -> np.ndarray:
    """float64 [len(tokens) - 1]: -ln P(tokens[i] | tokens[:i]) for i >= 1 under the copying rule, by hand: scan back
    from the current token tokens[i-1] for its latest earlier occurrence; the token after it gets probability
    e^s / (e^s + V - 1), every other token 1 / (e^s + V - 1); with no earlier occurrence every token gets 1 / V."""
    tokens = [int(x) for x in tokens]
    total = math.exp(strength) + vocab_size - 1  # the softmax's denominator when a token is copied
    out = []
    for i in range(1, len(tokens)):
        current = tokens[i - 1]
        earlier = [j for j in range(i - 1) if tokens[j] == current]
        if not earlier:
            out.append(math.log(vocab_size))
        elif tokens[earlier[-1] + 1] == tokens[i]:
            out.append(math.log(total) - strength)
        else:
            out.append(math.log(total))
    return np.array(out, dtype=np.float64)


def outcomes(vocab_size: int, strength: float = STRENGTH) -> dict[str, float]:
    """The three losses the rule can give: no earlier occurrence, the copied token right, the copied token wrong."""
    total = math.exp(strength) + vocab_size - 1
    return {"uniform": math.log(vocab_size), "copied right": math.log(total) - strength, "copied wrong": math.log(total)}


def kinds_of(values: np.ndarray, vocab_size: int, tol: float = 1e-4) -> set[str]:
    """Which of the :func:`outcomes` occur among ``values`` (per-token losses)."""
    return {kind for kind, value in outcomes(vocab_size).items() if np.any(np.abs(np.asarray(values) - value) < tol)}


COPY_ABS = 1e-5
"""How far a collected loss (float32, a few nats) may be from the toy's hand computation in float64, absolutely: the
model computes in float64, so only the tables' float32 rounding (~3e-7 here) separates them. A 2e-4 nat error fails."""


def assert_hand_computed(got: np.ndarray, want: np.ndarray, far_span_one_off: np.ndarray) -> None:
    """``got`` (a collected table) equals ``want`` (its hand computation) within :data:`COPY_ABS`, and the comparison has
    teeth: every value moved by 2e-4 would fail it, and the hand computation with every far span one unit off differs
    from ``got`` by more than 50 times the tolerance somewhere (a table read from the wrong far spans could not pass)."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape == far_span_one_off.shape
    assert np.abs(got - want).max() <= COPY_ABS, np.abs(got - want).max()
    for shift in (2e-4, -2e-4):
        assert (np.abs(got + shift - want) > COPY_ABS).all()
    assert np.abs(got - far_span_one_off).max() > 50 * COPY_ABS
