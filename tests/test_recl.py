"""RECL: golden numbers on hand-built tables, ground truth from oracles, and invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from txlab.analysis.recl import (
    DEFAULT_GRID,
    baseline,
    bootstrap_recl,
    cap_losses,
    figure3_gains,
    n_selected,
    perplexity_by_context,
    placebo_gain,
    placebo_step_gains,
    recl,
    recl_table,
    relative_gain,
    relative_loss,
    step_gains,
    top_r_positions,
    walk,
)
from txlab.analysis.table8 import Bootstrap, GroupTable, recl_rows
from txlab.data import synthetic
from txlab.errors import TxlabError

# --- golden numbers: two models, three positions ----------------------------------------------------

# losses[model, c, t], grid (1, 2). Model A gains 2 nats at t=0 from the longer context, model B gains
# 1 nat at t=1 -- but t=1 is the easiest position of the baseline at c=1.
GOLDEN = np.array(
    [
        [[3, 1, 2], [1, 1, 2]],  # A: l(1, t), l(2, t)
        [[2, 2, 2], [2, 0, 2]],  # B
    ],
    dtype=float,
)


def test_golden_baseline_positions_relative_loss_and_gain():
    b = baseline(GOLDEN[:, 0])
    assert b.tolist() == [2, 1, 2]
    positions = top_r_positions(b, 2 / 3)  # ceil(2/3 * 3) = 2 hardest: the two 2s
    assert positions.tolist() == [0, 2]
    assert relative_loss(b, b, positions) == 2.0  # f(c, c) = mean of b over T(c)
    assert relative_loss(b, GOLDEN[:, 1], positions).tolist() == [1.5, 2.0]  # mean(min(2,1), min(2,2)); mean(2, 2)
    g = relative_gain(b, GOLDEN[:, 1], positions)
    assert g[0] == pytest.approx((math.exp(2) - math.exp(1.5)) / math.exp(2), rel=1e-14)
    assert g[1] == 0.0
    # r = 1: every position; B's gain at t=1 counts now. f(c,c) = 5/3, f_A = f_B = (1 + 1 + 2)/3 = 4/3
    all_positions = top_r_positions(b, 1.0)
    assert all_positions.tolist() == [0, 1, 2]
    np.testing.assert_allclose(relative_gain(b, GOLDEN[:, 1], all_positions), [1 - math.exp(-1 / 3)] * 2, rtol=1e-14)


def test_golden_figures_and_walk():
    np.testing.assert_allclose(figure3_gains(GOLDEN, (1, 2), ["A", "B"], r=2 / 3), [[math.exp(2) - math.exp(1.5)], [0.0]], rtol=1e-14)
    np.testing.assert_allclose(perplexity_by_context(GOLDEN, (1, 2), ["A", "B"]), np.exp([[2, 4 / 3], [2, 4 / 3]]), rtol=1e-14)
    a, b = recl(GOLDEN, (1, 2), ["A", "B"], r=2 / 3)
    assert (a.model, a.recl, a.censored, a.label) == ("A", 2, True, ">= 2")  # gain 0.39 at the last step: off the grid
    assert (b.model, b.recl, b.censored, b.label) == ("B", 1, False, "1")


def test_ties_are_broken_by_position_lower_first():
    b = np.array([2.0, 1.0, 2.0, 2.0])
    assert top_r_positions(b, 0.25).tolist() == [0]
    assert top_r_positions(b, 0.5).tolist() == [0, 2]
    # The tie decides the gain: the model that improves at position 3 only gets no credit at r = 0.25.
    later = np.array([[2.0, 1.0, 2.0, 0.0]])
    assert relative_gain(b, later, top_r_positions(b, 0.25)).tolist() == [0.0]
    assert relative_gain(b, later, top_r_positions(b, 1.0))[0] > 0


def test_top_r_positions_are_a_stable_sorts_hardest():
    # The selection is a linear-time partition; it must pick what a stable sort, hardest first, picks.
    rng = np.random.default_rng(1)
    for _ in range(500):
        b = rng.integers(0, 4, int(rng.integers(1, 40))).astype(float)  # many ties
        r = float(rng.choice([0.01, 0.1, 0.3, 0.5, 0.9, 1.0]))
        stable = np.sort(np.argsort(-b, kind="stable")[: n_selected(r, len(b))])
        np.testing.assert_array_equal(top_r_positions(b, r), stable)


def test_n_selected_is_the_exact_ceiling():
    assert n_selected(0.1, 30) == 3  # 0.1 * 30 is exactly 3.0 in float64: only the ceiling; the next two are the float cases
    assert n_selected(0.07, 100) == 7  # 0.07 * 100 is 7.000000000000001: a bare ceil would select 8
    assert n_selected(0.29, 100) == 29  # 0.29 * 100 is 28.999999999999996: its ceiling is 29 all the same
    assert n_selected(0.1, 31) == 4
    assert n_selected(0.5, 3) == 2
    assert n_selected(1.0, 7) == 7
    assert n_selected(0.001, 10) == 1
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(TxlabError, match="r must lie"):
            n_selected(bad, 10)


def test_walk_on_a_three_step_grid_golden():
    # One model, 4 positions, grid (10, 20, 30, 40); losses drop 1 nat at t=0 from 10 to 20, then
    # 0.001 nats at t=0 from 20 to 30 (a gain of 1 - exp(-0.001/4) < 1%): RECL 20.
    table = np.array([[[5, 1, 1, 1], [4, 1, 1, 1], [3.999, 1, 1, 1], [0, 0, 0, 0]]], dtype=float)
    gains = step_gains(table, r=1.0)
    np.testing.assert_allclose(gains, [[1 - math.exp(-1 / 4), 1 - math.exp(-0.001 / 4), 1 - math.exp(-6.999 / 4)]], rtol=1e-12)
    (result,) = recl(table, (10, 20, 30, 40), ["m"], r=1.0)
    assert (result.recl, result.censored) == (20, False)
    np.testing.assert_allclose(result.gains, gains[0], rtol=1e-15)
    (from_30,) = recl(table, (10, 20, 30, 40), ["m"], r=1.0, c0=30)
    assert (from_30.recl, from_30.censored) == (40, True)


# --- the stopping rule, pinned at its boundary ----------------------------------------------------


def test_a_gain_equal_to_the_threshold_carries_the_walk_on():
    # The paper stops at the first step with g < 1%: a gain of exactly the threshold is still a gain.
    grid = (10, 20, 30)
    assert walk([0.01, 0.0], grid) == (20, False)
    assert walk([0.01, 0.01], grid) == (30, True)
    assert walk([np.nextafter(0.01, 0.0), 0.5], grid) == (10, False)
    # The same through a loss table: one position of four drops 1 nat from c=10 to c=20, none after;
    # with the threshold set to exactly that step's gain, the walk takes the step and stops at 20.
    table = np.array([[[5, 1, 1, 1], [4, 1, 1, 1], [4, 1, 1, 1]]], dtype=float)
    gain = step_gains(table, r=1.0)[0, 0]
    assert gain == 0.0 - math.expm1(-1 / 4)
    (at,) = recl(table, grid, ["m"], r=1.0, threshold=gain)
    (above,) = recl(table, grid, ["m"], r=1.0, threshold=np.nextafter(gain, 1.0))
    assert (at.recl, above.recl) == (20, 10)


def test_the_default_threshold_is_one_percent_golden():
    # One target of n drops 1 nat from c=1 to c=2 (r = 1, nothing after): g = 1 - exp(-1/n).
    # n = 99: 1.005%, just above 1%, the walk goes on; n = 100: 0.995%, just below, it stops.
    def one_gain_in(n):
        table = np.ones((1, 3, n))
        table[0, 1:, 0] = 0.0
        return table

    (above,) = recl(one_gain_in(99), (1, 2, 3), ["m"], r=1.0)
    (below,) = recl(one_gain_in(100), (1, 2, 3), ["m"], r=1.0)
    assert above.gains[0] == pytest.approx(0.0100502, abs=1e-7) and below.gains[0] == pytest.approx(0.0099502, abs=1e-7)
    assert [(res.recl, res.censored) for res in (above, below)] == [(2, False), (1, False)]
    rows = recl_rows(GroupTable(one_gain_in(99), (1, 2, 3), ["m"]), rs=(1.0,))
    assert rows[0].paper.recl == 2  # what the command uses has the same default
    assert walk([0.0101, 0.0], (1, 2, 3)) == (2, False)
    assert walk([0.0099, 0.5], (1, 2, 3)) == (1, False)


# --- oracles: models that see exactly w tokens back ----------------------------------------------


@pytest.fixture(scope="module")
def truth() -> synthetic.SyntheticText:
    return synthetic.generate(synthetic.get_spec("synthetic"), 40_000, seed=0, split="valid")


TARGETS = np.arange(1000, 40_000)  # t - c_max >= 0 for the default grid


def oracle_table(truth, w: int, grid=DEFAULT_GRID) -> np.ndarray:
    """[G, T]: the ideal model of the synthetic process that sees min(c, w) tokens."""
    return np.stack([truth.oracle_loss(min(c, w))[TARGETS] for c in grid])


ORACLE_WINDOWS = (60, 250, 420, 730)  # expected RECL: the smallest grid value >= w


@pytest.mark.parametrize("r", [0.1, 0.5, 1.0])
def test_oracle_recl_is_the_smallest_grid_value_reaching_its_window(truth, r):
    names = [f"w{w}" for w in ORACLE_WINDOWS]
    group = np.stack([oracle_table(truth, w) for w in ORACLE_WINDOWS])
    expected = [100, 300, 500, 800]
    assert [res.recl for res in recl(group, DEFAULT_GRID, names, r)] == expected
    for w, want in zip(ORACLE_WINDOWS, expected):  # alone, each is its own baseline
        (alone,) = recl(oracle_table(truth, w)[None], DEFAULT_GRID, [f"w{w}"], r)
        assert (alone.recl, alone.censored) == (want, False)


def test_oracle_seeing_beyond_the_grid_is_censored(truth):
    (result,) = recl(oracle_table(truth, 5000)[None], DEFAULT_GRID, ["far"], r=0.1)
    assert (result.recl, result.censored, result.label) == (1000, True, ">= 1000")
    assert min(result.gains) > 0.5  # copies are spread over every distance up to 1000


def test_hand_made_toy_oracle():
    # Position t needs need[t] tokens: loss 5 without them, 1 with them.
    need = np.array([1, 3, 5, 7, 9, 2, 4, 6, 8, 10])
    grid = (2, 4, 6, 8, 10)

    def sees(w):
        return np.stack([np.where(min(c, w) >= need, 1.0, 5.0) for c in grid])  # [G, T]

    windows = (1, 3, 5, 8, 10)
    results = recl(np.stack([sees(w) for w in windows]), grid, [str(w) for w in windows], r=0.5)
    assert [(res.recl, res.censored) for res in results] == [(2, False), (4, False), (6, False), (8, False), (10, True)]


def _key(results):
    return {(res.model, res.r): (res.recl, res.censored) for res in results}


def test_duplicates_dominated_models_permutations_and_constants_change_nothing(truth):
    names = ["a", "b", "c"]
    group = np.stack([oracle_table(truth, w) for w in (250, 420, 730)])
    reference = _key(recl_table(group, DEFAULT_GRID, names))
    assert reference[("a", 0.1)] == (300, False)

    duplicated = recl_table(np.concatenate([group, group[:1]]), DEFAULT_GRID, names + ["a_again"])
    assert {k: v for k, v in _key(duplicated).items() if k[0] != "a_again"} == reference
    assert _key(duplicated)[("a_again", 0.5)] == reference[("a", 0.5)]

    dominated = group.max(axis=0, keepdims=True) + 0.5  # never the best anywhere
    with_dominated = recl_table(np.concatenate([group, dominated]), DEFAULT_GRID, names + ["weak"])
    assert {k: v for k, v in _key(with_dominated).items() if k[0] != "weak"} == reference

    order = [2, 0, 1]
    assert _key(recl_table(group[order], DEFAULT_GRID, [names[i] for i in order])) == reference
    assert _key(recl_table(group + 3.0, DEFAULT_GRID, names)) == reference


def test_a_context_blind_model_gets_c0(truth):
    blind = np.repeat(oracle_table(truth, 5000)[:1], len(DEFAULT_GRID), axis=0)  # l(c, t) = l(100, t)
    group = np.stack([oracle_table(truth, 420), blind])
    results = recl(group, DEFAULT_GRID, ["oracle", "blind"], r=0.1)
    assert [(res.recl, res.censored) for res in results] == [(500, False), (100, False)]
    assert results[1].gains == (0.0,) * (len(DEFAULT_GRID) - 1)


def test_a_capped_model_gets_its_cap(truth):
    # The collector's table for a model with max_context 128 (not a grid value): every column c > 128
    # holds l(128, t). The walk stops at 200 (no gain from 200 to 300), reported as min(200, 128).
    vanilla = np.stack([truth.oracle_loss(min(c, 128))[TARGETS] for c in DEFAULT_GRID])
    group = np.stack([oracle_table(truth, 730), vanilla])
    for r in (0.1, 0.5, 1.0):
        xl, capped = recl(group, DEFAULT_GRID, ["xl", "vanilla"], r, caps={"vanilla": 128, "xl": None})
        assert (xl.recl, capped.recl, capped.censored) == (800, 128, False)
    # A cap that is a grid value caps a raw (uncapped) table exactly: the same as seeing w = 400.
    raw_far = oracle_table(truth, 5000)
    (capped_raw,) = recl(raw_far[None], DEFAULT_GRID, ["m"], 0.1, caps={"m": 400})
    (window_400,) = recl(oracle_table(truth, 400)[None], DEFAULT_GRID, ["m"], 0.1)
    assert (capped_raw.recl, capped_raw.censored) == (window_400.recl, False) == (400, False)
    # A censored walk beyond a smaller cap is exact: the model cannot use more than its cap.
    (beyond,) = recl(raw_far[None], DEFAULT_GRID, ["m"], 0.1, caps={"m": 950})
    assert (beyond.recl, beyond.censored) == (950, False)


def test_a_cap_never_raises_a_walk_that_stopped_below_it():
    # Position t needs need[t] tokens. The model sees 3 tokens but may use up to 8: its walk stops at 4
    # (nothing gained from 4 to 6), and min(4, 8) = 4. Only a walk that passes the cap is cut to it.
    need = np.array([1, 3, 5, 7, 9, 2, 4, 6, 8, 10])
    grid = (2, 4, 6, 8, 10)
    sees_3 = np.stack([np.where(min(c, 3) >= need, 1.0, 5.0) for c in grid])[None]
    (capped,) = recl(sees_3, grid, ["m"], r=0.5, caps={"m": 8})
    assert (capped.recl, capped.censored) == (4, False)
    sees_all = np.stack([np.where(c >= need, 1.0, 5.0) for c in grid])[None]
    (cut,) = recl(sees_all, grid, ["m"], r=0.5, caps={"m": 8})
    (off_grid,) = recl(sees_all, grid, ["m"], r=0.5, caps={"m": 10})
    assert [(res.recl, res.censored) for res in (cut, off_grid)] == [(8, False), (10, False)]


def test_cap_losses_refuses_a_table_it_cannot_cap():
    grid = (10, 20, 30)
    table = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(cap_losses(table, grid, 20), [[1, 2], [3, 4], [3, 4]])
    np.testing.assert_array_equal(cap_losses(table, grid, 30), table)
    with pytest.raises(TxlabError, match="not in the grid"):
        cap_losses(table, grid, 15)  # columns 20 and 30 differ: no column holds l(15, t)
    already = np.array([[1.0, 2.0], [3.0, 4.0], [3.0, 4.0]])
    np.testing.assert_array_equal(cap_losses(already, grid, 15), already)


# --- bootstrap -----------------------------------------------------------------------------------


def test_bootstrap_contains_the_oracle_point_estimate(truth):
    group = np.stack([oracle_table(truth, w) for w in (250, 730)])
    intervals = bootstrap_recl(group, DEFAULT_GRID, ["a", "b"], r=0.1, block_size=1950, n_boot=20, seed=3)
    for interval, want in zip(intervals, (300, 800)):
        assert interval.recl == want
        assert interval.low <= want <= interval.high
        assert interval.censored_fraction == 0.0
    again = bootstrap_recl(group, DEFAULT_GRID, ["a", "b"], r=0.1, block_size=1950, n_boot=20, seed=3)
    assert again == intervals


def test_bootstrap_has_zero_width_when_every_block_is_identical():
    rng = np.random.default_rng(0)
    block = rng.integers(0, 6, size=(2, 4, 5)).astype(float)  # [M, G, block]
    table = np.tile(block, (1, 1, 8))  # 8 identical blocks
    intervals = bootstrap_recl(table, (1, 2, 3, 4), ["a", "b"], r=0.5, block_size=5, n_boot=30)
    point = recl(table, (1, 2, 3, 4), ["a", "b"], r=0.5)
    assert [(i.low, i.recl, i.high) for i in intervals] == [(p.recl,) * 3 for p in point]


def block_correlated_table() -> np.ndarray:
    """One model, 20 blocks of 50 targets, grid (1, 2, 3), r = 1: every target of blocks 0, 7 and 14
    drops from 1 to 0.9 nats between c = 1 and c = 2, no other target gains anything.

    With k such blocks in a resample the step gains 1 - exp(-0.1 * 50k / 1000): 1.49% for the table's
    k = 3 (RECL 2), 0.995% for k = 2 (RECL 1). Resampled by blocks, k ~ Binomial(20, 0.15) is at most 2
    in 40% of resamples; resampled by single targets, the gaining share ~ 0.15 +- 0.011 falls to the
    0.1005 it needs to stop only 4.4 standard deviations down.
    """
    table = np.ones((1, 3, 1000))
    for block in (0, 7, 14):
        table[0, 1:, block * 50 : (block + 1) * 50] = 0.9
    return table


def test_bootstrap_resamples_whole_blocks_of_correlated_targets():
    table = block_correlated_table()
    (point,) = recl(table, (1, 2, 3), ["m"], r=1.0)
    assert (point.recl, point.censored) == (2, False)
    (by_block,) = bootstrap_recl(table, (1, 2, 3), ["m"], r=1.0, block_size=50, n_boot=200, seed=0)
    (by_target,) = bootstrap_recl(table, (1, 2, 3), ["m"], r=1.0, block_size=1, n_boot=200, seed=0)
    assert (by_block.low, by_block.recl, by_block.high) == (1, 2, 2)  # wide: the blocks move together
    assert (by_target.low, by_target.recl, by_target.high) == (2, 2, 2)  # single targets: visibly narrower
    assert by_block.censored_fraction == by_target.censored_fraction == 0.0


def test_bootstrap_needs_whole_blocks():
    with pytest.raises(TxlabError, match="do not split into blocks"):
        bootstrap_recl(np.zeros((1, 2, 10)), (1, 2), ["m"], r=1.0, block_size=3)


# --- placebo, rows, errors -----------------------------------------------------------------------


def test_placebo_gain_golden():
    # The placebo replaces l(c', t): the same formula as relative_gain at c -> c'.
    losses_c = GOLDEN[:, 0]
    assert placebo_gain(losses_c, losses_c, r=1.0).tolist() == [0.0, 0.0]  # extra context useless: no gain
    np.testing.assert_array_equal(placebo_gain(losses_c, GOLDEN[:, 1], r=2 / 3), relative_gain(baseline(losses_c), GOLDEN[:, 1], np.array([0, 2])))


def test_placebo_step_gains_with_the_true_losses_are_the_step_gains(truth):
    group = np.stack([oracle_table(truth, w) for w in (250, 730)])
    np.testing.assert_array_equal(placebo_step_gains(group, group[:, 1:], r=0.1), step_gains(group, r=0.1))
    # Context made useless (the placebo repeats l(c, t)): no gain anywhere.
    assert (placebo_step_gains(group, group[:, :-1], r=0.1) == 0).all()
    with pytest.raises(TxlabError, match="placebo losses must be"):
        placebo_step_gains(group, group, r=0.1)


# Model a gains 1 nat at every step on its one target; b never gains. a's placebo (the extra context
# taken from far away) gains nothing at 1 -> 2 but as much as the real context at 2 -> 3.
PLACEBO_GRID = (1, 2, 3, 4)
PLACEBO_LOSSES = np.array([[[3.0], [2.0], [1.0], [0.0]], [[3.0], [3.0], [3.0], [3.0]]])  # [model, c, target]
PLACEBO = np.array([[[3.0], [1.0], [1.0]], [[3.0], [3.0], [3.0]]])  # [model, step c_j -> c_j+1, target]


def test_placebo_aware_recl_golden():
    a, b = recl(PLACEBO_LOSSES, PLACEBO_GRID, ["a", "b"], r=1.0, placebo=PLACEBO)
    g = 1 - math.exp(-1)
    np.testing.assert_allclose(a.gains, [g, g, g], rtol=1e-15)
    np.testing.assert_allclose(a.placebo_gains, [0.0, g, 0.0], rtol=1e-15)
    # The paper's walk runs off the grid; beside its placebo, a's step 2 -> 3 gains nothing: 2.
    assert (a.recl, a.censored, a.placebo_recl, a.placebo_censored, a.below_placebo) == (4, True, 2, False, True)
    assert (b.recl, b.placebo_recl, b.below_placebo) == (1, 1, False)
    (plain,) = recl(PLACEBO_LOSSES[:1], PLACEBO_GRID, ["a"], r=1.0)
    assert (plain.placebo_recl, plain.below_placebo) == (None, None)
    # The cap applies to both walks.
    capped, _ = recl(PLACEBO_LOSSES, PLACEBO_GRID, ["a", "b"], r=1.0, placebo=PLACEBO, caps={"a": 3})
    assert (capped.recl, capped.censored, capped.placebo_recl, capped.below_placebo) == (3, False, 2, True)


def test_placebo_aware_recl_is_the_papers_when_the_placebo_gains_nothing(truth):
    names = ["a", "b", "c"]
    group = np.stack([oracle_table(truth, w) for w in (250, 420, 730)])
    useless = group[:, :-1]  # the extra context changes nothing: l(c', t) = l(c, t) under the placebo
    for res in recl_table(group, DEFAULT_GRID, names, placebo=useless):
        assert (res.placebo_recl, res.placebo_censored, res.below_placebo) == (res.recl, res.censored, False)
    with pytest.raises(TxlabError, match="placebo losses must be"):
        recl(group, DEFAULT_GRID, names, r=0.1, placebo=group)


def test_placebo_aware_recl_sees_through_noise(truth):
    # 0.05 nats of independent noise on every loss: min() turns it into a ~3.7% "gain" at every step,
    # so the paper's walk runs off the grid. The placebo (the true context up to c, noise drawn afresh)
    # gains as much beyond the window, and the placebo-aware RECL is the window's again.
    rng = np.random.default_rng(0)
    clean = oracle_table(truth, 250)
    noisy = (clean + rng.normal(0, 0.05, clean.shape))[None]
    placebo = (clean[:-1] + rng.normal(0, 0.05, clean[:-1].shape))[None]
    for r in (0.1, 0.5):
        (res,) = recl(noisy, DEFAULT_GRID, ["m"], r, placebo=placebo)
        assert (res.recl, res.censored, res.placebo_recl, res.placebo_censored, res.below_placebo) == (1000, True, 300, False, True)
        assert min(res.gains[3:]) > 0.02 and max(np.subtract(res.gains, res.placebo_gains)[3:]) < 0.005


def test_recl_rows_with_placebo_golden():
    table = np.tile(PLACEBO_LOSSES, (1, 1, 4))  # 4 identical blocks of one target: the intervals have no width
    placebo = np.tile(PLACEBO, (1, 1, 4))
    rows = recl_rows(GroupTable(table, PLACEBO_GRID, ["a", "b"], placebo=placebo), rs=(1.0,), bootstrap=Bootstrap(block_size=1, n_boot=10))
    keys = ("model", "label", "ci_low", "ci_high", "placebo_recl", "placebo_label", "placebo_ci_low", "placebo_ci_high",
            "placebo_censored_fraction", "below_placebo")
    assert [tuple(row.record()[k] for k in keys) for row in rows] == [
        ("a", ">= 4", 4, 4, 2, "2", 2, 2, 0.0, True),
        ("b", "1", 1, 1, 1, "1", 1, 1, 0.0, False),
    ]
    plain = recl_rows(GroupTable(table, PLACEBO_GRID, ["a", "b"], placebo=placebo), rs=(1.0,))
    assert [(row.placebo_aware.recl, row.placebo_aware.censored, row.below_placebo) for row in plain] == [(2, False, True), (1, False, False)]
    assert recl_rows(GroupTable(table, PLACEBO_GRID, ["a", "b"]), rs=(1.0,))[0].placebo_aware is None


def test_recl_rows_for_a_command(truth):
    group = np.stack([oracle_table(truth, 250), oracle_table(truth, 5000)])
    rows = recl_rows(GroupTable(group, DEFAULT_GRID, ["short", "far"]), rs=(0.1,), bootstrap=Bootstrap(block_size=3900, n_boot=5))
    assert [(row.model, row.paper.recl, row.paper.label, row.paper.interval.low, row.paper.interval.high) for row in rows] == [
        ("short", 300, "300", 300, 300),
        ("far", 1000, ">= 1000", 1000, 1000),
    ]
    assert rows[1].paper.interval.censored_fraction == 1.0 and rows[1].paper.cell() == ">= 1000 [1000, >= 1000]"


def test_bad_tables_are_refused():
    with pytest.raises(TxlabError, match=r"\[models, grid, targets\]"):
        recl(np.zeros((2, 3, 4)), (1, 2), ["a", "b"], r=0.5)
    with pytest.raises(TxlabError, match="strictly ascending"):
        recl(np.zeros((1, 2, 4)), (2, 1), ["a"], r=0.5)
    with pytest.raises(TxlabError, match="NaN"):
        recl(np.full((1, 2, 4), np.nan), (1, 2), ["a"], r=0.5)
    with pytest.raises(TxlabError, match="unique"):
        recl(np.zeros((2, 2, 4)), (1, 2), ["a", "a"], r=0.5)
    with pytest.raises(TxlabError, match="c0=3"):
        recl(np.zeros((1, 2, 4)), (1, 2), ["a"], r=0.5, c0=3)
    with pytest.raises(TxlabError, match="not in the group"):
        recl(np.zeros((1, 2, 4)), (1, 2), ["a"], r=0.5, caps={"b": 1})
    with pytest.raises(TxlabError, match="placebo table holds NaN"):
        recl(np.zeros((1, 2, 4)), (1, 2), ["a"], r=0.5, placebo=np.full((1, 1, 4), np.inf))
