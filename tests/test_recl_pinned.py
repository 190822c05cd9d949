"""RECL behaviours a user sees, each pinned by a golden number on a small hand-built table (issue 33).

Every test here failed against a deliberately changed copy of the code it pins: the placebo-aware
walk's cap, start, threshold, difference and strict comparison; the dagger on points; the interval's
quantile rule and alpha; Table 8's rows passing the threshold and c0 to the bootstrap and the plain
walk (issue 48); the target count where r * n is not exact in floating point; caps applied before the
group baseline; the placebo's far offset; placebo.csv's gains at each r.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from txlab.analysis.recl import ReclInterval, ReclResult, bootstrap_recl, falls_short, n_selected, placebo_aware_walk, recl, top_r_positions
from txlab.analysis.recl_figures import write_context_curves
from txlab.analysis.table8 import Bootstrap, GroupTable, recl_rows
from txlab.config import ModelConfig
from txlab.drivers.recl.run import score_group
from txlab.drivers.recl.settings import ReclSettings
from txlab.errors import TxlabError
from txlab.measure.losses import GroupLosses, collect_losses, write_or_check_meta
from txlab.measure.reading import placebo_offsets
from txlab.models.build import build_model
from txlab.models.interface import Context

# --- the placebo-aware walk -----------------------------------------------------------------------
# One model, one target, r = 1 unless said otherwise, so each gain is 1 - exp(-drop) of that target.
GRID = (10, 20, 30, 40)
G1 = 1 - math.exp(-1)  # the gain of a 1-nat drop on the only target


def test_the_placebo_aware_walk_honours_a_cap_between_grid_values():
    # Capped at 25 (not a grid value): the collector stores l(25, t) in columns 30 and 40, so the step
    # 30 -> 40 gains nothing and both walks stop at 30, reported as min(30, 25). Without the cap the
    # placebo-aware walk would read 30, above the model's maximum context.
    losses = np.array([[[4.0], [3.0], [2.0], [2.0]]])
    placebo = losses[:, :-1]  # the placebo repeats l(c, t): no placebo gain anywhere
    (res,) = recl(losses, GRID, ["v"], r=1.0, caps={"v": 25}, placebo=placebo)
    assert (res.recl, res.censored, res.placebo_recl, res.placebo_censored, res.below_placebo) == (25, False, 25, False, False)
    assert placebo_aware_walk([G1, G1, 0.0], [0.0] * 3, GRID, cap=25) == (25, False)
    assert placebo_aware_walk([G1, G1, 0.0], [0.0] * 3, GRID, cap=35) == (30, False)  # a cap above the stop changes nothing
    # A walk that ran off the grid beyond the cap is exact at the cap, not censored.
    assert placebo_aware_walk([G1] * 3, [0.0] * 3, GRID, cap=35) == (35, False)
    assert placebo_aware_walk([G1] * 3, [0.0] * 3, GRID) == (40, True)


# The model gains 1 nat at every step; its placebo gains as much at 10 -> 20 (the first step does not
# beat it) and nothing after.
START_LOSSES = np.array([[[4.0], [3.0], [2.0], [1.0]]])
START_PLACEBO = np.array([[[3.0], [3.0], [2.0]]])  # step 10 -> 20: l = 3 like the truth; later steps: l(c, t)


def test_the_placebo_aware_walk_starts_at_the_first_grid_value_or_c0():
    (res,) = recl(START_LOSSES, GRID, ["m"], r=1.0, placebo=START_PLACEBO)
    np.testing.assert_allclose(res.placebo_gains, [G1, 0.0, 0.0], rtol=1e-15)
    assert (res.recl, res.censored, res.placebo_recl, res.placebo_censored, res.below_placebo) == (40, True, 10, False, True)
    (from_20,) = recl(START_LOSSES, GRID, ["m"], r=1.0, c0=20, placebo=START_PLACEBO)
    assert (from_20.placebo_recl, from_20.placebo_censored, from_20.below_placebo) == (40, True, False)
    # A walk whose only failing step is the last stops there; it must not look at steps before its start.
    assert placebo_aware_walk([G1, G1, G1], [0.0, 0.0, G1], GRID) == (30, False)
    assert placebo_aware_walk([G1, G1, G1], [G1, 0.0, 0.0], GRID, start=1) == (40, True)


def hundred_targets(common_drop: float, real_extra: int, placebo_extra: int) -> tuple[np.ndarray, np.ndarray]:
    """One model, 100 targets, grid (1, 2, 3), r = 1. From c = 1 to 2 every target drops ``common_drop``
    nats and the first ``real_extra`` targets 1 nat more; under the placebo every target drops
    ``common_drop`` and the first ``placebo_extra`` 1 nat more. From 2 to 3 every target drops to -5
    with no placebo gain, so a walk that gets past the first step runs off the grid."""
    losses = np.full((1, 3, 100), 3.0)
    losses[0, 1] = 3.0 - common_drop
    losses[0, 1, :real_extra] -= 1.0
    losses[0, 2] = -5.0
    placebo = np.full((1, 2, 100), 3.0 - common_drop)
    placebo[0, 0, :placebo_extra] -= 1.0
    placebo[0, 1] = losses[0, 1]  # the placebo at 2 -> 3 repeats l(2, t): no placebo gain
    return losses, placebo


def test_the_placebo_aware_walk_stops_below_the_full_threshold():
    # g = 1 - exp(-0.02) = 1.980%, p = 1 - exp(-0.01) = 0.995%: g - p = 0.985%, below 1% but above half of it.
    losses, placebo = hundred_targets(common_drop=0.0, real_extra=2, placebo_extra=1)
    (res,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo)
    assert res.gains[0] - res.placebo_gains[0] == pytest.approx(math.exp(-0.01) - math.exp(-0.02), rel=1e-12)
    assert 0.005 < res.gains[0] - res.placebo_gains[0] < 0.01
    assert (res.recl, res.censored, res.placebo_recl, res.placebo_censored, res.below_placebo) == (3, True, 1, False, True)
    (lenient,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo, threshold=0.005)
    assert (lenient.placebo_recl, lenient.placebo_censored) == (3, True)


def test_the_placebo_aware_walk_uses_the_plain_difference_of_gains():
    # Every target drops 1 nat under the placebo and the truth, two of them 1 nat more in truth:
    # g = 1 - exp(-1.02), p = 1 - exp(-1): g - p = 0.728% stops the walk, although the difference
    # rescaled by what the placebo left, (g - p) / (1 - p) = 1 - exp(-0.02) = 1.98%, would carry it on.
    losses, placebo = hundred_targets(common_drop=1.0, real_extra=2, placebo_extra=0)
    (res,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo)
    g, p = res.gains[0], res.placebo_gains[0]
    assert (g, p) == (pytest.approx(1 - math.exp(-1.02), rel=1e-12), pytest.approx(1 - math.exp(-1), rel=1e-12))
    assert g - p == pytest.approx(0.0072845, abs=1e-7) and (g - p) / (1 - p) == pytest.approx(0.0198013, abs=1e-7)
    assert (res.placebo_recl, res.placebo_censored, res.below_placebo) == (1, False, True)


def test_a_difference_equal_to_the_threshold_carries_the_placebo_aware_walk_on():
    # 4 targets: two drop 1 nat (g = 1 - exp(-1/2)), under the placebo one does (p = 1 - exp(-1/4)).
    # p <= g <= 2p, so g - p is exact in floating point: with the threshold set to exactly g - p the
    # walk takes the step (the comparison is strict, as the paper's), one float above it stops.
    losses = np.array([[[2.0] * 4, [1.0, 1.0, 2.0, 2.0], [0.0] * 4]])
    placebo = np.array([[[1.0, 2.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]])
    (res,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo)
    g, p = res.gains[0], res.placebo_gains[0]
    assert (g, p) == (0.0 - math.expm1(-0.5), 0.0 - math.expm1(-0.25))
    difference = g - p
    assert difference == pytest.approx(0.1723, abs=1e-4)
    (at,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo, threshold=difference)
    (above,) = recl(losses, (1, 2, 3), ["m"], r=1.0, placebo=placebo, threshold=np.nextafter(difference, 1.0))
    assert [(res.placebo_recl, res.placebo_censored) for res in (at, above)] == [(3, True), (1, False)]


def test_rounding_cannot_carry_the_placebo_aware_walk_over_the_threshold():
    # 0.011002 - 0.001002 rounds to 0.01 exactly in float64, but the two floats differ by 6.5e-19 less:
    # the exact difference is below the threshold, so the walk stops. 0.011001 - 0.001001 also rounds
    # to 0.01 and is 2.2e-19 above it: the walk goes on.
    assert 0.011002 - 0.001002 == 0.01 and 0.011001 - 0.001001 == 0.01
    assert falls_short(0.011002, 0.001002, 0.01) and not falls_short(0.011001, 0.001001, 0.01)
    assert placebo_aware_walk([0.011002, 0.5], [0.001002, 0.0], (1, 2, 3)) == (1, False)
    assert placebo_aware_walk([0.011001, 0.5], [0.001001, 0.0], (1, 2, 3)) == (3, True)
    # Away from the threshold the rounded difference decides as the exact one does.
    assert falls_short(0.0199, 0.01, 0.01) and not falls_short(0.0201, 0.01, 0.01)


# --- the dagger: point estimates, not interval ends -----------------------------------------------


def test_the_dagger_compares_point_estimates():
    def result(recl_, placebo_recl):
        return ReclResult("m", 0.5, recl_, False, (), placebo_recl=placebo_recl, placebo_censored=False)

    assert [result(30, p).below_placebo for p in (20, 30)] == [True, False]
    assert ReclResult("m", 0.5, 30, False, ()).below_placebo is None  # no placebo losses: no mark

    def interval(point, low, high, placebo_point, placebo_low, placebo_high):
        placebo = ReclInterval("m", 0.5, placebo_point, False, placebo_low, placebo_high, 0.0)
        return ReclInterval("m", 0.5, point, False, low, high, 0.0, placebo)

    # Points decide, whatever the intervals' ends: 20 < 30 with the same upper ends is marked, and
    # equal points with a lower placebo-aware upper end are not.
    assert interval(30, 20, 40, 20, 20, 40).below_placebo is True
    assert interval(30, 20, 40, 30, 20, 30).below_placebo is False
    assert ReclInterval("m", 0.5, 30, False, 20, 40, 0.0).below_placebo is None


def test_the_dagger_of_a_bootstrapped_row_is_the_point_estimates():
    # 20 targets of one block each, grid (1, 2, 3): every target drops 1 nat per step, so the paper's
    # walk runs off the grid in every resample. The placebo drops as much, except at 2 -> 3 on target 0
    # (0.5 nats): g - p = exp(-1) (exp(0.5/20) - 1) = 0.93% on the table, so the placebo-aware point is
    # 2; a resample drawing target 0 twice or more (26% of them) beats 1% and reaches 3. The upper ends
    # are both 3, the points differ: the row is marked.
    losses = np.repeat(np.array([3.0, 2.0, 1.0])[None, :, None], 20, axis=2)
    placebo = np.repeat(np.array([3.0, 1.0])[None, :, None], 20, axis=2)
    placebo[0, 1, 0] = 1.5
    (row,) = recl_rows(GroupTable(losses, (1, 2, 3), ["m"], placebo=placebo), rs=(1.0,), bootstrap=Bootstrap(block_size=1, n_boot=200, seed=0))
    cells = ("label", "ci_low", "ci_high", "placebo_label", "placebo_ci_low", "placebo_ci_high", "below_placebo")
    assert tuple(row.record()[k] for k in cells) == (">= 3", 3, 3, "2", 2, 3, True)


# --- Table 8's rows pass the walk's threshold and start on, with and without a bootstrap -----------
# One model, one target, r = 1, grid (10, 20, 30, 40, 50): the steps gain 1 - exp(-1), 1 - exp(-0.005)
# (0.5%: below the default 1%), nothing, then 1 - exp(-1) again. The default walk stops at 20; with a
# threshold of 0.1% it takes the 0.5% step and stops at 30; started at c0 = 40 it runs off the grid.
STEP_LOSSES = np.array([[[4.0], [3.0], [2.995], [2.995], [1.995]]])
STEP_GRID = (10, 20, 30, 40, 50)


@pytest.mark.parametrize("bootstrap", [None, Bootstrap(block_size=1, n_boot=3, seed=0)], ids=["plain", "bootstrap"])
def test_table8_rows_walk_with_the_threshold_and_c0_they_are_given(bootstrap):
    # one target in one block: every resample is the table itself, so an interval is its point
    table = GroupTable(STEP_LOSSES, STEP_GRID, ["m"])

    def reading(**walk):
        (row,) = recl_rows(table, rs=(1.0,), bootstrap=bootstrap, **walk)
        return row.paper.recl, row.paper.censored, row.paper.label

    assert reading() == (20, False, "20")
    assert reading(threshold=0.001) == (30, False, "30")
    assert reading(c0=40) == (50, True, ">= 50")
    assert reading(threshold=0.001, c0=20) == (30, False, "30")
    if bootstrap is not None:
        (row,) = recl_rows(table, rs=(1.0,), bootstrap=bootstrap, threshold=0.001)
        assert (row.paper.interval.low, row.paper.interval.high) == (30, 30)


# --- the interval's ends --------------------------------------------------------------------------

# One model, 20 blocks of 5 targets, grid 1..11, r = 1. Blocks S carry every gain: at step j (c = j+1
# to j+2) each of their targets drops d_j = 0.201 / (j + 1.5) nats, so a resample holding k blocks of S
# gains 1 - exp(-k d_j / 20), at least 1% exactly when k >= j + 2. Its walk therefore stops at
# c = max(k, 1): the RECL of a resample is the number of S blocks it drew (the table's own is 6).
S_BLOCKS = (0, 3, 7, 10, 14, 17)


def counting_table() -> np.ndarray:
    table = np.full((1, 11, 100), 5.0)
    for j in range(10):
        for block in S_BLOCKS:
            table[0, j + 1 :, 5 * block : 5 * block + 5] -= 0.201 / (j + 1.5)
    return table


def test_interval_ends_are_the_lower_and_higher_quantiles_at_half_of_one_minus_ci():
    table, grid = counting_table(), tuple(range(1, 12))
    # The resamples' RECLs, from the bootstrap's own draws (20 blocks with replacement per resample).
    rng = np.random.default_rng(1)
    samples = sorted(min(max(int(np.isin(rng.integers(0, 20, 20), S_BLOCKS).sum()), 1), 11) for _ in range(20))
    assert samples == [2, 3, 3, 4, 4, 4, 4, 5, 5, 6, 6, 6, 7, 7, 7, 7, 7, 7, 9, 10]
    (interval,) = bootstrap_recl(table, grid, ["m"], r=1.0, block_size=5, n_boot=20, seed=1, ci=0.9, placebo=table[:, :-1])
    # alpha = (1 - 0.9) / 2 = 0.05. Low: the 'lower' quantile at 0.05 * 19 = 0.95, samples[0] = 2 ('higher'
    # or alpha = 0.1 would give 3). High: the 'higher' quantile at 0.95 * 19 = 18.05, samples[19] = 10
    # ('lower', 'linear' or alpha = 0.1 would give 9).
    assert (interval.low, interval.recl, interval.high, interval.censored_fraction) == (2, 6, 10, 0.0)
    placebo = interval.placebo  # no placebo gain: the same walks, the same ends
    assert (placebo.low, placebo.recl, placebo.high) == (2, 6, 10)


def test_a_percentile_interval_can_exclude_its_point_estimate():
    # Ten steps, each gaining 1.04% on the table (3 of 20 blocks of 5 targets drop 0.07 nats, a
    # different 3 at each step). The table's walk passes all ten; a resample passes a step only when it
    # holds at least 3 of its blocks (60%), and all ten almost never. The walk is a first-failure time,
    # so its resamples pile up below the point estimate: >= 11 [1, 6]. docs/recl.md says so.
    table = np.full((1, 11, 100), 5.0)
    for j in range(10):
        for block in (3 * j % 20, (3 * j + 1) % 20, (3 * j + 2) % 20):
            table[0, j + 1 :, 5 * block : 5 * block + 5] -= 0.07
    (point,) = recl(table, tuple(range(1, 12)), ["m"], r=1.0)
    np.testing.assert_allclose(point.gains, [1 - math.exp(-0.0105)] * 10, rtol=1e-12)
    (interval,) = bootstrap_recl(table, tuple(range(1, 12)), ["m"], r=1.0, block_size=5, n_boot=200, seed=0)
    assert (interval.recl, interval.censored, interval.low, interval.high, interval.censored_fraction) == (11, True, 1, 6, 0.0)


# --- the target count where r * n is not exact -------------------------------------------------------


def test_the_target_count_is_the_exact_ceiling_where_r_times_n_is_not_exact():
    # In float64 0.07 * 100 is 7.000000000000001 and 0.14 * 50 is 7.000000000000001 (a bare ceil gives 8);
    # 0.29 * 100 is 28.999999999999996 and 0.58 * 50 is 28.999999999999996 (a bare floor or int gives 28).
    assert (0.07 * 100, 0.14 * 50, 0.29 * 100, 0.58 * 50) == (7.000000000000001, 7.000000000000001, 28.999999999999996, 28.999999999999996)
    assert [n_selected(r, n) for r, n in ((0.07, 100), (0.14, 50), (0.29, 100), (0.58, 50), (0.07, 101))] == [7, 7, 29, 29, 8]
    b = np.arange(100.0)[::-1]  # position t has the (t+1)-th largest loss
    assert top_r_positions(b, 0.07).tolist() == list(range(7))
    # Through the walk: the 7 hardest targets never gain; the 8th gains 1 nat from c = 1 to 2. With 7
    # targets (the right count) the walk stops at 1; an 8th would carry it to the grid's end.
    losses = np.repeat(b[None, None, :], 2, axis=1)
    losses[0, 1, 7] -= 1.0
    (res,) = recl(losses, (1, 2), ["m"], r=0.07)
    assert (res.recl, res.censored, res.gains) == (1, False, (0.0,))


# --- caps are applied before the group baseline -----------------------------------------------------


def test_a_cap_applies_to_its_models_table_before_the_group_baseline():
    # x gains 1 nat a step on the one target. v is capped at 20 (a grid value): its raw losses at 30 and
    # 40 (0) are what it would do with more context, which it cannot use, so its table holds l(20) = 5
    # there. Capped first, the baseline at 30 is x's 2 and x gains at 30 -> 40: x runs off the grid.
    # Were v's raw 0 the baseline at 30, x's step 30 -> 40 would gain nothing and x would read 30.
    losses = np.array([[[4.0], [3.0], [2.0], [1.0]], [[5.0], [5.0], [0.0], [0.0]]])
    x, v = recl(losses, GRID, ["x", "v"], r=1.0, caps={"v": 20})
    assert (x.recl, x.censored, v.recl, v.censored) == (40, True, 10, False)
    np.testing.assert_allclose(x.gains, [G1, G1, G1], rtol=1e-15)
    assert v.gains == (0.0, 0.0, 0.0)


# --- the placebo losses and placebo.csv (read-only use of txlab.measure.losses, txlab.drivers.recl, txlab.analysis.recl_figures) --


def test_each_block_takes_its_far_spans_at_its_own_offset_drawn_by_the_seed():
    # A tiny random model whose losses depend strongly on every context token (N(0, 0.5) parameters).
    torch.manual_seed(0)
    model = build_model(ModelConfig(n_token=37, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=3, mem_len=4, dropout=0.0)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.5)
    tokens = np.random.default_rng(0).integers(0, 37, 60).astype(np.uint16)

    def placebo(**offsets):  # grid (2, 4, 6, 8), targets 8..12 and 30..34
        return collect_losses(model, tokens, (2, 4, 6, 8), (8, 30), 5, tgt_len=3, context=Context(mem_len=4), placebo=True, **offsets)

    # The rule: seed 0's second stream, uniform in [n/4, 3n/4), one offset per block.
    np.testing.assert_array_equal(placebo_offsets(60, 2, 0, (2, 4, 6, 8)), [30, 41])
    np.testing.assert_array_equal(placebo_offsets(100, 4, 0, (2, 4, 6, 8)), [51, 69, 74, 52])
    np.testing.assert_array_equal(placebo_offsets(100, 4, 1, (2, 4, 6, 8)), [50, 41, 43, 55])
    # A stream too short for a quarter's distance keeps the offsets that clear every step: c' < offset <= n - 2 (c' - c).
    short = placebo_offsets(244, 1000, 0, (16, 32, 48, 64))
    assert short.min() == 65 and short.max() == 182  # [max(61, 65), min(183, 213))
    np.testing.assert_array_equal(placebo_offsets(100, 3, 0, (10, 60)), [50, 50, 50])  # none clears 10 -> 60: the middle, refused later
    default = placebo()
    np.testing.assert_array_equal(default, placebo(offsets=[30, 41]))
    moved = placebo(offsets=[30, 30])  # block 2 at block 1's offset: other far tokens, other losses, block 1 untouched
    np.testing.assert_array_equal(moved[:, :5], default[:, :5])
    assert np.abs(default[:, 5:] - moved[:, 5:]).max() > 0.1


def test_a_table_begun_before_per_block_far_spans_keeps_its_losses_unless_it_holds_placebo_blocks(tmp_path):
    meta = {"grid": [2, 4], "placebo_offsets": [30, 41]}
    old = {"grid": [2, 4]}  # a meta.json written before placebo_offsets existed
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "meta.json").write_text(json.dumps(old))
    write_or_check_meta(tmp_path / "a", meta)  # no placebo block: it takes today's offsets
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["placebo_offsets"] == [30, 41]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "meta.json").write_text(json.dumps(old))
    (tmp_path / "b" / "placebo-00000.npy").write_bytes(b"")
    with pytest.raises(TxlabError, match="placebo_offsets: stored 'half the stream"):
        write_or_check_meta(tmp_path / "b", meta)


def test_placebo_csv_holds_each_r_s_own_placebo_gains(tmp_path):
    # Two blocks of two targets (as tests/test_group.py's hand-built group): target 0 of a block is hard,
    # a drops 1 nat on it at every step of (1, 2, 3, 4), b never gains; target 1 stays at 1 nat. a's
    # placebo gains the whole 1 nat at 2 -> 3 only. At r = 0.5, T(2) is the two hard targets: p = 1 - exp(-1);
    # at r = 1 every target counts: p = 1 - exp(-1/2).
    a, b = [[3, 1], [2, 1], [1, 1], [0, 1]], [[3, 1]] * 4
    a_placebo, b_placebo = [[3, 1], [1, 1], [1, 1]], [[3, 1]] * 3
    group = GroupLosses(
        models=["run-a", "run-b"], losses=np.tile(np.array([a, b], dtype=np.float32), (1, 1, 2)), grid=(1, 2, 3, 4),
        targets=np.arange(10, 14), block_len=2, token_stream_sha256="0" * 64, caps={"run-a": None, "run-b": None},
        run_dirs=[Path("run-a"), Path("run-b")], placebo=np.tile(np.array([a_placebo, b_placebo], dtype=np.float32), (1, 1, 2)),
    )
    scores = score_group(group, ["a", "b"], ReclSettings(rs=[0.5, 1.0], n_boot=0))
    write_context_curves(scores.figure3_gains, scores.perplexity, group.grid, ["a", "b"], tmp_path, scores.placebo_gains)
    csv = pd.read_csv(tmp_path / "placebo.csv")
    a_rows = csv[csv.model == "a"]
    assert a_rows[["r", "c", "c_next"]].values.tolist() == [[r, c, c + 1] for r in (0.5, 1.0) for c in (1, 2, 3)]
    np.testing.assert_allclose(a_rows.placebo_gain, [0, 1 - math.exp(-1), 0, 0, 1 - math.exp(-1 / 2), 0], rtol=1e-12, atol=0)
    # The real gains too. At r = 0.5 every target ties at 1 nat at c = 3 and T(3) is targets 0 and 1 (lower
    # positions first): a's last step gains 1 - exp(-1/2), as every step does at r = 1.
    np.testing.assert_allclose(a_rows.gain, [1 - math.exp(-1)] * 2 + [1 - math.exp(-1 / 2)] + [1 - math.exp(-1 / 2)] * 3, rtol=1e-12)
    assert (csv[csv.model == "b"][["gain", "placebo_gain"]] == 0).all().all()
