"""Per-role and per-copy-distance summaries, checked on hand-built texts with hand-computed answers."""

import math

import numpy as np
import pytest

from txlab.data.diagnostics import distance_edges, flat_metrics, format_summary, role_summary
from txlab.data.synthetic import VARIANTS, build_text, generate
from txlab.errors import TxlabError

SMALL = VARIANTS["synthetic-small-short"]


@pytest.fixture(scope="module")
def two_facts():
    """Fact 1 at 1 (hints 1..4, key 5, values 6..9), copied D = 6 later (key 11, values 12..15);
    fact 2 at 20 (values 25..28), copied D = 10 later (key 34, values 35..38); 40 tokens."""
    return build_text(SMALL, 40, np.array([1, 20]), np.array([6, 10]), np.random.default_rng(0))


def hand_losses(n=40):
    loss = np.ones(n)
    loss[12:16] = 0.5  # copied at distance 6
    loss[35:39] = 2.0  # copied at distance 10
    loss[[0, 39]] = np.nan  # not scored (first token, past a token limit)
    return loss


def test_roles_and_distances_by_hand(two_facts):
    t = two_facts
    summary = role_summary(hand_losses(), t, edges=np.array([4, 8, 12, 16]))
    ln = math.log
    roles = summary["roles"]
    # background: 10, 16..19, 29..33 scored (0 and 39 are not); hints 2 x 4; keys and values per fact
    assert {name: g["tokens"] for name, g in roles.items()} == {
        "background": 10, "hint": 8, "source_key": 2, "source_value": 8, "copy_key": 2, "copy_value": 8}
    expected = {  # model, ideal with the needed context, ideal without it
        "hint": (1.0, ln(16), ln(16)),
        "source_key": (1.0, ln(128), ln(128)),
        "source_value": (1.0, ln(32), ln(512)),
        "copy_key": (1.0, 0.0, ln(128)),
        "copy_value": ((4 * 0.5 + 4 * 2.0) / 8, 0.0, ln(512)),
    }
    for name, (model, with_, without) in expected.items():
        assert (roles[name]["model"], roles[name]["ideal_with"], roles[name]["ideal_without"]) == pytest.approx((model, with_, without), rel=1e-6), name
    background = [10, 16, 17, 18, 19, 29, 30, 31, 32, 33]
    assert roles["background"]["model"] == 1.0 and roles["background"]["ideal_without"] == pytest.approx(ln(128))
    assert roles["background"]["ideal_with"] == pytest.approx(float(np.mean(t.oracle_nll_with[background])))
    buckets = summary["copy_distance"]
    assert [(b["lo"], b["hi"], b["tokens"]) for b in buckets] == [(4, 8, 4), (8, 12, 4), (12, 16, 0)]
    assert buckets[0]["model"] == 0.5 and buckets[1]["model"] == 2.0 and math.isnan(buckets[2]["model"])
    assert buckets[0]["ideal_with"] == 0.0 and buckets[1]["ideal_without"] == pytest.approx(ln(512))
    flat = flat_metrics(summary)
    assert flat["role_copy_value"] == 1.25 and set(flat) == {f"role_{name}" for name in roles}
    text = format_summary(summary)
    assert "copy_value" in text and "8-11" in text


def test_the_ideal_model_scores_its_own_with_loss():
    t = generate(SMALL, 30_000, seed=1, split="valid")
    summary = role_summary(t.oracle_loss(SMALL.max_context).astype(float), t)
    for group in [*summary["roles"].values(), *summary["copy_distance"]]:
        assert group["model"] == pytest.approx(group["ideal_with"])
    # an ideal model that sees 100 tokens copies from below distance 100 and not beyond
    near = role_summary(t.oracle_loss(100).astype(float), t)["copy_distance"]
    for b in near:
        expected = 0.0 if b["hi"] <= 100 else math.log(SMALL.n_values) if b["lo"] >= 100 else None
        if expected is not None:
            assert b["model"] == pytest.approx(expected, abs=1e-6), b


def test_default_edges_cover_the_copy_distances_evenly(two_facts):
    np.testing.assert_array_equal(distance_edges(two_facts), np.arange(8, 201, 16))
    np.testing.assert_array_equal(distance_edges(two_facts, 4), [8, 56, 104, 152, 200])


def test_mismatched_inputs_are_refused(two_facts):
    with pytest.raises(TxlabError, match="shape"):
        role_summary(np.ones(39), two_facts)
    with pytest.raises(TxlabError, match="increase"):
        role_summary(np.ones(40), two_facts, edges=np.array([8, 8, 16]))
