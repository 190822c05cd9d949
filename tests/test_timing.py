"""Timing helpers on a fake clock: medians, alternation order, the share of other processes."""

from __future__ import annotations

import pytest

from txlab import timing


@pytest.fixture
def fake_clock(monkeypatch):
    """A clock that only moves when a step says how long it took."""
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def advance(seconds: float) -> None:
        now[0] += seconds

    return advance


def test_interleaved_steps_alternate_and_each_gets_its_own_median(fake_clock):
    calls = []
    durations = {"ours": iter([9.0, 9.0, 1.0, 3.0, 2.0]), "theirs": iter([9.0, 9.0, 10.0, 30.0, 20.0])}

    def step(name):
        def run():
            calls.append(name)
            fake_clock(next(durations[name]))
        return run

    medians = timing.interleaved_median_seconds([step("ours"), step("theirs")], warmup=2, repeats=3)
    assert medians == [2.0, 20.0]  # the two warm-up rounds (9 s) are not timed
    assert calls == ["ours", "theirs"] * 5


def test_median_seconds_is_one_step_interleaved_with_nothing(fake_clock):
    durations = iter([5.0, 4.0, 1.0, 2.0])
    assert timing.median_seconds(lambda: fake_clock(next(durations)), warmup=1, repeats=3) == 2.0


def test_times_within_runs_until_the_budget_and_at_least_min_calls(fake_clock):
    assert timing.times_within(lambda: fake_clock(1.0), warmup=1, budget_s=2.5, min_calls=1) == [1.0, 1.0, 1.0]
    assert len(timing.times_within(lambda: fake_clock(10.0), warmup=0, budget_s=1.0, min_calls=4)) == 4


def test_others_cpu_is_busy_time_of_all_cores_minus_our_own(monkeypatch):
    # 2 cores, 10 s of wall time: the machine was busy 12 core-seconds, 5 of them ours -> others used 7 of 20.
    snapshots = iter([(100.0, 50.0, 0.0), (112.0, 55.0, 10.0), (113.0, 56.0, 11.0)])
    monkeypatch.setattr(timing, "cpu_snapshot", lambda: next(snapshots))
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)
    start = timing.cpu_snapshot()
    assert timing.others_cpu(start) == pytest.approx(0.35)
    assert timing.others_cpu(None) is None
