"""Paired tests of the paper's ablation claims over seeds, checked against hand-computed numbers."""

import math

import numpy as np
import pandas as pd
import pytest

from txlab.claims import Claim, claims_markdown, evaluate_claims, paired_test, read_claims
from txlab.errors import TxlabError


def test_paired_test_by_hand():
    # differences 2, 1, 3: mean 2, sd 1, t = 2 sqrt(3) with 2 df -> p 0.0742; 95% CI 2 +- 4.303 / sqrt(3)
    r = paired_test(np.array([10.0, 11, 12]), np.array([12.0, 12, 15]))
    assert (r["seeds"], r["wins"], r["diff_mean"], r["diff_std"]) == (3, 3, 2.0, 1.0)
    assert r["p_value"] == pytest.approx(0.07418, abs=1e-5)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((2 - 2.48414, 2 + 2.48414), abs=1e-5)
    assert r["verdict"] == "within noise"  # every seed agrees, but 3 seeds cannot exclude chance here
    # differences 2, 2.1, 1.9: consistent against their spread
    assert paired_test(np.array([10.0, 11, 12]), np.array([12.0, 13.1, 13.9]))["verdict"] == "holds"
    assert paired_test(np.array([12.0, 13.1, 13.9]), np.array([10.0, 11, 12]))["verdict"] == "reversed"
    same = paired_test(np.array([1.0, 2.0]), np.array([2.0, 3.0]))  # identical differences
    assert (same["p_value"], same["verdict"]) == (0.0, "holds")
    one = paired_test(np.array([1.0]), np.array([2.0]))
    assert one["verdict"] == "untested" and one["diff_mean"] == 1.0 and math.isnan(one["p_value"])


def test_claims_pair_the_seeds_both_rows_finished():
    scores = pd.DataFrame([
        {"row_id": "xl", "seed": s, "ppl_init": 20.0 + s, "ppl_best": 19.0 + s} for s in (0, 1, 2)
    ] + [
        {"row_id": "norecur", "seed": s, "ppl_init": 22.0 + s + 0.1 * s * s, "ppl_best": 22.0 + s} for s in (0, 2, 5)
    ])
    [by_best, by_init] = evaluate_claims(scores, [Claim("recurrence helps", "xl", "norecur"),
                                                  Claim("recurrence helps at init", "xl", "norecur", "ppl_init")])
    assert (by_best["seeds"], by_best["better_mean"], by_best["worse_mean"], by_best["diff_mean"]) == (2, 20.0, 23.0, 3.0)
    assert by_best["verdict"] == "holds"  # differences 3, 3
    assert by_init["diff_mean"] == pytest.approx(2.2) and by_init["verdict"] == "within noise"  # 2.0, 2.4
    text = claims_markdown([by_best, by_init])
    assert "| recurrence helps | xl | norecur | ppl_best | 2 (2 won) | 20.00 | 23.00 | +3.00 [3.00, 3.00] | 0.000 | holds |" in text


def test_claims_are_checked_against_the_rows():
    raw = [{"claim": "c", "better": "a", "worse": "b"}]
    assert read_claims(raw, ["a", "b"], "s.yaml") == [Claim("c", "a", "b", "ppl_best")]
    assert read_claims(None, ["a"], "s.yaml") == []
    with pytest.raises(TxlabError, match="names row 'b'"):
        read_claims(raw, ["a"], "s.yaml")
    with pytest.raises(TxlabError, match="metric 'ppl'"):
        read_claims([{**raw[0], "metric": "ppl"}], ["a", "b"], "s.yaml")
    with pytest.raises(TxlabError, match="takes the keys"):
        read_claims([{"claim": "c", "better": "a"}], ["a", "b"], "s.yaml")
