"""The recall family of synthetic corpora: every ground-truth entry checked by a rule that reads only tokens."""

import math

import numpy as np
import pytest

from txlab.analysis.recl import recl
from txlab.data import diagnostics, synthetic
from txlab.data.synthetic import BACKGROUND, FACT_KEY, FACT_VALUE, LATCH_EMISSION, LATCH_MARKER, RECALL_KEY, RECALL_MARKER, RECALLED_VALUE, REGISTER, SOURCE_MARKER, VARIANTS, generate, get_spec
from txlab.errors import TxlabError
from txlab.measure.losses import sample_blocks

SPEC = VARIANTS["recall-small"]


@pytest.fixture(scope="module")
def text():
    return generate(SPEC, 200_000, seed=5, split="valid")


def _bases(spec):
    register = spec.n_background + 2 * spec.n_latches
    emission = register + spec.n_registers
    marker = emission + spec.n_emissions
    return register, emission, marker, marker + 2, marker + 2 + spec.n_keys


def test_deterministic_and_documented_sizes():
    a, b = generate(SPEC, 30_000, seed=1), generate(SPEC, 30_000, seed=1)
    for field in ("tokens", "role", "needed_context", "oracle_nll_with", "oracle_nll_without"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.tokens, generate(SPEC, 30_000, seed=2).tokens)
    # 128 background + 2 latches x 2 markers + 8 registers + 8 x 4 emissions (shared by the latches) + 2 markers + 64 keys + 256 values
    assert SPEC.vocab_size == 494 == len(set(SPEC.symbols()))
    assert a.tokens.max() < SPEC.vocab_size
    # the background chain is the copy family's language
    np.testing.assert_array_equal(synthetic._language(SPEC), synthetic._language(VARIANTS["synthetic-small"]))


def test_token_mix_and_distances(text):
    stats = text.stats()
    assert stats["fraction_recalled_value"] == pytest.approx(SPEC.recall_fraction, abs=0.002)
    per_fact = SPEC.recall_fraction / SPEC.values_per_fact
    assert stats["fraction_source_marker"] == stats["fraction_recall_marker"] == pytest.approx(per_fact, abs=0.001)
    # 2 latches with events every ~30 tokens (3/4 of gaps 2..8, the rest 9..200): about 6.7% of tokens,
    # 30% of them registers, each after its marker
    latch = stats["fraction_register"] + stats["fraction_latch_emission"]
    assert stats["fraction_latch_marker"] == pytest.approx(latch)
    assert 0.06 < latch < 0.075 and stats["fraction_register"] / latch == pytest.approx(SPEC.register_fraction, abs=0.03)
    recalled = text.role == RECALLED_VALUE
    distance = text.needed_context[recalled] - 1
    assert distance.min() == SPEC.min_distance and distance.max() == SPEC.max_distance
    near = np.mean(distance <= SPEC.near_max_distance)
    assert near == pytest.approx(SPEC.near_fraction, abs=0.03)
    gaps = text.needed_context[text.role == LATCH_EMISSION]
    assert gaps.min() == 2 and gaps.max() == SPEC.latch_max_gap
    # a near gap that lands on a fact event moves to the first free place after it when none lies
    # between, so the measured near share is somewhat below latch_near_fraction (0.66 of 0.75)
    assert 0.6 < np.mean(gaps <= SPEC.latch_near_max_gap) < SPEC.latch_near_fraction
    far = gaps[gaps > 2 * SPEC.latch_near_max_gap]
    assert np.mean(far > 100) == pytest.approx(0.5, abs=0.06)  # the far gaps about uniform up to 200
    assert text.needed_context.max() == SPEC.max_context == 200


def test_recalls_resolved_by_a_rule_on_tokens(text):
    """The previous source with the recall's key holds the recalled values just before that key (``S v1 .. vL k``,
    then ``Q k v1 .. vL``), D + 1 back; no other event with that key lies between (keys are unique among pending facts)."""
    _, _, marker, key_base, _ = _bases(SPEC)
    tok = text.tokens.astype(np.int64)
    recall_keys = np.flatnonzero(text.role == RECALL_KEY)
    assert (tok[recall_keys - 1] == marker + 1).all() and (text.role[recall_keys - 1] == RECALL_MARKER).all()
    last_source_of_key = {}
    key_events = np.flatnonzero((text.role == FACT_KEY) | (text.role == RECALL_KEY))
    # read as Python lists: thousands of events, where numpy's per-call cost was most of this test's time
    tokens, role, needed = tok.tolist(), text.role.tolist(), text.needed_context.tolist()
    L = SPEC.values_per_fact
    for p in key_events.tolist():
        k = tokens[p]
        if role[p] == FACT_KEY:
            assert k not in last_source_of_key, "a key is reused while its fact is pending"
            assert tokens[p - 1 - L] == marker and role[p - 1 - L] == SOURCE_MARKER
            last_source_of_key[k] = p
            continue
        src = last_source_of_key.pop(k)
        assert needed[p] == p - src
        assert tokens[p + 1 : p + 1 + L] == tokens[src - L : src]
        assert role[p + 1 : p + 1 + L] == [RECALLED_VALUE] * L and role[src - L : src] == [FACT_VALUE] * L
        # each recalled value needs its source value, the farthest token it reads: D + 1 back, D marker to marker
        assert needed[p + 1 : p + 1 + L] == [p + 1 - (src - L)] * L
    assert key_base <= tok[key_events].min() and tok[key_events].max() < key_base + SPEC.n_keys


def test_source_keys_follow_their_cycle_and_name_one_source_in_the_span(text):
    """Each source key is its predecessor's successor, needing the distance back to it; within 256 tokens
    (the cpu training span) of a recall no other source carries its key."""
    _, _, _, key_base, _ = _bases(SPEC)
    tok = text.tokens.astype(np.int64)
    source_keys = np.flatnonzero(text.role == FACT_KEY)
    np.testing.assert_array_equal((tok[source_keys[1:]] - tok[source_keys[:-1]]) % SPEC.n_keys, 1)
    np.testing.assert_array_equal(text.needed_context[source_keys[1:]], np.diff(source_keys))
    for p in np.flatnonzero(text.role == RECALL_KEY)[:3000].tolist():
        same = source_keys[(source_keys >= p - 256) & (source_keys < p) & (tok[source_keys] == tok[p])]
        assert same.tolist() == [p - text.needed_context[p]]


def test_latches_resolved_by_a_rule_on_tokens(text):
    """Reading tokens alone: the marker before each latch symbol names its latch and whether it sets or
    emits; an emission lies in the group its latch's last event (register or emission) shows, and its
    needed context is the distance to that event."""
    register_base, emission_base, *_ = _bases(SPEC)
    tok = text.tokens.astype(np.int64)
    markers = np.flatnonzero(text.role == LATCH_MARKER)
    symbols = markers + 1
    marker = tok[markers] - SPEC.n_background
    is_set = text.role[symbols] == REGISTER
    assert (is_set | (text.role[symbols] == LATCH_EMISSION)).all()
    np.testing.assert_array_equal(marker % 2, np.where(is_set, 0, 1))
    group = np.where(is_set, tok[symbols] - register_base, (tok[symbols] - emission_base) // SPEC.symbols_per_group)
    assert ((0 <= group) & (group < SPEC.latch_groups)).all()
    checked = 0
    for latch in range(SPEC.n_latches):
        mine = marker // 2 == latch
        pos, groups, sets = symbols[mine], group[mine], is_set[mine]
        assert sets[0]
        emits = ~sets[1:]
        np.testing.assert_array_equal(groups[1:][emits], groups[:-1][emits])
        np.testing.assert_array_equal(text.needed_context[pos[1:][emits]], np.diff(pos)[emits])
        checked += int(emits.sum())
    assert checked == int(np.sum(text.role == LATCH_EMISSION)) > 1000


def test_oracle_losses():
    t = generate(SPEC, 50_000, seed=0)
    ln = math.log
    expected = {
        LATCH_MARKER: (0, 0), REGISTER: (ln(8), ln(8)), LATCH_EMISSION: (ln(4), ln(32)), SOURCE_MARKER: (0, 0), FACT_KEY: (0, ln(64)),
        FACT_VALUE: (ln(256), ln(256)), RECALL_MARKER: (0, 0), RECALL_KEY: (0, ln(64)), RECALLED_VALUE: (0, ln(256)),
    }
    first_key = np.flatnonzero(t.role == FACT_KEY)[0]
    assert t.oracle_nll_with[first_key] == pytest.approx(ln(64)) and t.needed_context[first_key] == 0
    t.oracle_nll_with[first_key] = 0.0  # the text's first source key has no predecessor
    for role, (with_, without) in expected.items():
        np.testing.assert_allclose(t.oracle_nll_with[t.role == role], with_, rtol=1e-6)
        np.testing.assert_allclose(t.oracle_nll_without[t.role == role], without, rtol=1e-6)
    assert (t.needed_context[np.isin(t.role, [LATCH_MARKER, REGISTER, SOURCE_MARKER, FACT_VALUE, RECALL_MARKER])] == 0).all()
    bg = np.flatnonzero(t.role == BACKGROUND)
    np.testing.assert_array_equal(t.needed_context[bg[1:]], np.diff(bg))
    losses = [t.oracle_loss(c).mean() for c in range(0, 260, 20)]
    assert all(a >= b for a, b in zip(losses, losses[1:]))
    assert losses[-1] == pytest.approx(float(t.oracle_nll_with.mean()))


def test_local_and_moved_horizons():
    local = generate(get_spec("recall-small-local"), 40_000, seed=0)
    planted = (local.role != synthetic.BACKGROUND) & (local.role != FACT_KEY)
    assert local.needed_context[planted].max() <= 32
    # a source key needs the previous source key: beyond 32 tokens back for about 2% of them
    assert np.mean(local.needed_context[local.role == FACT_KEY] > 32) < 0.04
    # a background token after a rare run of back-to-back events reaches past it (the chain's last state)
    background = local.role == synthetic.BACKGROUND
    assert np.mean(local.needed_context[background] > 32) < 3e-3
    moved = get_spec("recall-small", max_context=100)
    assert moved.max_context == 100
    assert generate(moved, 40_000, seed=0).needed_context.max() == 100
    with pytest.raises(TxlabError, match="min_distance"):
        get_spec("recall-small", max_context=5)
    with pytest.raises(TxlabError, match="recall_fraction"):
        synthetic.RecallSpec("dense", "", recall_fraction=0.3).check()
    with pytest.raises(TxlabError, match="step_probs must be 4 probabilities"):
        synthetic.RecallSpec("skewed", "", step_probs=(0.5, 0.5, 0.5, 0.5)).check()


def test_diagnostics_split_recalls_and_latches(text):
    """A model that copies every recall within 100 tokens and holds every latch: the per-distance tables say so."""
    loss = text.oracle_loss(100).astype(np.float64)
    summary = diagnostics.role_summary(loss, text)
    assert set(summary["roles"]) == set(SPEC.role_names)
    assert set(summary) == {"roles", "copy_distance", "latch_distance"}
    for name in ("copy_distance", "latch_distance"):
        for bucket in summary[name]:
            assert bucket["model"] == pytest.approx(bucket["ideal_with"] if bucket["hi"] <= 100 else bucket["ideal_without"]) or bucket["lo"] < 100 < bucket["hi"]
    assert sum(b["tokens"] for b in summary["latch_distance"]) == summary["roles"]["latch_emission"]["tokens"]
    assert "latch distance" in diagnostics.format_summary(summary)
    with pytest.raises(TxlabError, match="copy distance bucket edges must increase"):
        diagnostics.role_summary(loss, text, edges=np.array([20, 10]))


def _holders_recl(name: str, r: float) -> list[int]:
    """RECL at r of ideal models of ``name`` that recall nothing and hold a latch 60, 120 or 200 tokens, in a group with
    the ideal model (as Table 8's cpu profiles score them: grid 20..240, 8 blocks of 250 targets)."""
    grid = list(range(20, 241, 20))
    text = generate(get_spec(name), 60_000, seed=0, split="valid")
    targets = (sample_blocks(len(text), 8, 250, grid[-1], seed=0)[:, None] + np.arange(250)).ravel()
    recall = np.isin(text.role, (RECALL_KEY, RECALLED_VALUE))
    unresolved = [None, *(recall | ((text.role == LATCH_EMISSION) & (text.needed_context > reach)) for reach in (60, 120, 200))]
    losses = np.stack([np.stack([text.oracle_loss(c, lost)[targets] for c in grid]) for lost in unresolved])  # [M, G, T]
    return [result.recl for result in recl(losses, grid, ["ideal", "hold60", "hold120", "hold200"], r)][1:]


def test_recall_small_latches_lets_rnn_recl_read_latch_reach_where_recall_small_cannot():
    # the corpus's purpose: on recall-small every latch-holder reads the same (its hardest targets are recalls);
    # with 6 latches and 6% recalled values the reading is each holder's reach
    assert _holders_recl("recall-small", 0.1) == [20, 20, 20]
    assert _holders_recl("recall-small-latches", 0.1) == [60, 120, 200]


def test_an_ideal_model_lacking_a_skill_scores_those_tokens_without_context():
    text = generate(SPEC, 20_000, seed=2, split="valid")
    recalled = text.role == RECALLED_VALUE
    full, lacking = text.oracle_loss(240), text.oracle_loss(240, recalled)
    np.testing.assert_array_equal(lacking[recalled], text.oracle_nll_without[recalled])
    np.testing.assert_array_equal(lacking[~recalled], full[~recalled])
    np.testing.assert_array_equal(text.oracle_loss(240, np.zeros(len(text), bool)), full)
