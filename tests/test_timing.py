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


def test_timed_rounds_alternate_and_a_budgeted_step_fills_its_share_of_each_round(fake_clock):
    calls = []

    def step(name, seconds):
        def run():
            calls.append(name)
            fake_clock(seconds)
        return run

    times = timing.timed_rounds([step("slow", 1.0), step("fast", 0.25)], rounds=2, calls=[1, 3], budgets_s=[2.5, 0.0])
    assert calls == ["slow"] * 3 + ["fast"] * 3 + ["slow"] * 3 + ["fast"] * 3  # the budget of 2.5 s takes 3 calls of 1 s a round
    assert times == [[[1.0] * 3] * 2, [[0.25] * 3] * 2]
    assert timing.timed_rounds([step("long", 10.0)], rounds=1, calls=[4], budgets_s=[1.0]) == [[[10.0] * 4]]  # at least calls[i]


def test_others_cpu_is_busy_time_of_all_cores_minus_our_own(monkeypatch):
    # 2 cores, 10 s of wall time: the machine was busy 12 core-seconds, 5 of them ours -> others used 7 of 20.
    snapshots = iter([(100.0, 50.0, 0.0), (112.0, 55.0, 10.0), (113.0, 56.0, 11.0)])
    monkeypatch.setattr(timing, "cpu_snapshot", lambda: next(snapshots))
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)
    start = timing.cpu_snapshot()
    assert timing.others_cpu(start) == pytest.approx(0.35)
    assert timing.others_cpu(None) is None


def test_latency_percentiles_are_nearest_rank_recorded_times():
    # p of n: the ceil(p/100 * n)-th smallest time, never an interpolation
    assert timing.latency_percentiles([0.5, 0.1, 0.3, 0.2, 0.4]) == {50: 0.3, 99: 0.5}  # ranks 3 and 5 of 5
    assert timing.latency_percentiles([float(t) for t in range(100, 0, -1)], (1, 50, 99, 100)) == {1: 1.0, 50: 50.0, 99: 99.0, 100: 100.0}
    assert timing.latency_percentiles([0.25] * 3 + [7.0]) == {50: 0.25, 99: 7.0}  # one slow token in four is the p99
    assert timing.latency_percentiles([2.0], (0, 50)) == {0: 2.0, 50: 2.0}
    with pytest.raises(ValueError, match="no per-token times"):
        timing.latency_percentiles([])


def test_per_token_times_split_each_call_over_its_predictions():
    import torch

    from txlab.measure.speed import Timed

    timed = Timed(rounds=[[0.8, 0.4], [1.2]], predictions=4, batch=2, nll=torch.zeros(2, 12))
    assert timed.per_token_seconds() == [0.2] * 4 + [0.1] * 4 + [0.3] * 4
    assert timing.latency_percentiles(timed.per_token_seconds()) == {50: 0.2, 99: 0.3}
    assert timed.tokens_per_s == 2 * 4 / 0.8  # the median call
    assert timed.round_token_seconds() == pytest.approx([0.6 / 8, 1.2 / 8])  # each round's median call over its 2 x 4 predictions


@pytest.mark.skipif(not timing._reset_resident_peak(), reason="no resettable resident-set peak (Linux /proc/self/clear_refs)")
def test_peak_memory_counts_what_the_block_touched_at_most():
    import torch

    with timing.PeakMemory(torch.device("cpu")) as peak:
        big = torch.ones(40 * 2**20 // 4)  # 40 MiB written, so resident (above glibc's largest mmap threshold: fresh pages)
        del big
        small = torch.ones(1024)
    assert 38 * 2**20 <= peak.bytes <= 56 * 2**20 and small.sum() == 1024  # freed by the end, counted at its peak
    with timing.PeakMemory(torch.device("cpu")) as idle:
        pass
    assert idle.bytes < 4 * 2**20
