"""Timing methods against each other in alternating rounds: each method's calls (:class:`Calls`) are warmed up one
method after another (where each one's peak memory is told apart), then timed round by round in alternation
(txlab.timing.timed_rounds), so that load which comes and goes slows every method alike and each round gives a
ratio of its own (:class:`Timed`). Table 9's timing (txlab.measure.speed) is built on it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from txlab.timing import PeakMemory, timed_rounds


@dataclass(frozen=True)
class Timed:
    """One method's timed calls at one attention length."""

    rounds: list[list[float]]
    """Wall time of each timed call, by round (:func:`time_rounds`)."""
    predictions: int
    """Predictions per call and stream."""
    batch: int
    """Streams (or windows) per call."""
    nll: torch.Tensor
    """NLL of every timed prediction."""
    state_bytes: int = 0
    """Bytes of the state the method keeps between calls (each storage once)."""
    peak_bytes: int | None = None
    """The most memory the warm-up calls added at once on top of what was in use before them
    (:class:`txlab.timing.PeakMemory`; the memory fill before them excluded); None where it cannot be told or
    nothing was warmed up."""

    @property
    def seconds(self) -> list[float]:
        """Every timed call's wall time, in the order they ran."""
        return [t for round_times in self.rounds for t in round_times]

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.predictions / statistics.median(self.seconds)

    def per_token_seconds(self) -> list[float]:
        """Each timed prediction's share of its call: a call's time over the predictions it makes per stream."""
        return [t / self.predictions for t in self.seconds for _ in range(self.predictions)]

    def round_token_seconds(self) -> list[float]:
        """Seconds per prediction in each round: the round's median call over the predictions it makes (all streams)."""
        return [statistics.median(times) / (self.batch * self.predictions) for times in self.rounds]


@dataclass(frozen=True)
class Calls:
    """One method's calls at one attention length, ready to be timed in rounds (:func:`time_rounds`): ``step()`` makes
    one call and returns the NLL of its predictions ([B, predictions], or [windows] for vanilla recompute)."""

    step: Callable[[], torch.Tensor]
    predictions: int
    """Predictions per call and stream."""
    batch: int
    """Streams (or windows) per call."""
    per_round: int = 1
    """Calls a round makes at least (warm-up rounds too): the rolling cache's tokens of one XL segment, vanilla's
    :func:`vanilla_round_calls`."""
    budget_s: float = 0.0
    """Seconds of timed calls, spread over the rounds: a round calls again until its share has passed."""
    state: Callable[[], int] = lambda: 0
    """Bytes of the state kept between calls, when asked after the last."""



def time_rounds(calls: dict[str, Calls], warmup: int, rounds: int, device: torch.device) -> dict[str, Timed]:
    """Each method's ``warmup`` rounds, one method after another (untimed: where each one's peak memory is told apart),
    then ``rounds`` timed rounds in alternation (:func:`txlab.timing.timed_rounds`), so that load which comes and goes
    slows every method alike and each round gives a slowdown of its own."""
    losses: dict[str, list[torch.Tensor]] = {name: [] for name in calls}
    peaks: dict[str, int | None] = {}
    for name, method in calls.items():
        with PeakMemory(device) as peak:
            for _ in range(warmup * method.per_round):
                method.step()
        peaks[name] = peak.bytes if warmup else None

    def timed(name: str) -> Callable[[], None]:
        return lambda: losses[name].append(calls[name].step())

    methods = list(calls.values())
    times = timed_rounds([timed(name) for name in calls], rounds, [m.per_round for m in methods], [m.budget_s / rounds for m in methods])
    return {name: Timed(own, m.predictions, m.batch, torch.cat(losses[name], dim=-1), m.state(), peaks[name])
            for (name, m), own in zip(calls.items(), times)}
