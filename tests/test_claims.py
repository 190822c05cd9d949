"""The ablation claims' exact sign-flip test, Holm's adjustment and verdicts, on hand-built per-seed
tables whose p-values are counted by hand over the 2^n sign patterns."""

import math

import numpy as np
import pandas as pd
import pytest

from txlab.analysis.claims import (
    HOLDS,
    NOT_SHOWN,
    UNTESTED,
    VERDICTS,
    AsTrained,
    Claim,
    PairedScores,
    claims_latex,
    claims_markdown,
    evaluate_claims,
    evaluate_family,
    holm,
    read_claims,
    seeds_needed,
    sign_flip_p,
    smallest_p,
    verdict_word,
)
from txlab.errors import TxlabError


def test_sign_flip_p_counts_the_sign_patterns_that_reach_the_observed_sum():
    # 1, 1, 1: only the pattern with every sign kept reaches 3 -> 1/8, the smallest p of 3 seeds
    assert sign_flip_p([1.0, 1.0, 1.0]) == 1 / 8 == smallest_p(3)
    # 1, -1, 2 (sum 2): the 8 sums are 4, 2, 2, 0, 0, -2, -2, -4; three reach 2 (ties count)
    assert sign_flip_p([1.0, -1.0, 2.0]) == 3 / 8
    assert sign_flip_p([1.0, -1.0, 2.0], two_sided=True) == 6 / 8
    # no shortcut on zero spread: two equal differences are 1 pattern of 4, not p = 0
    assert sign_flip_p([0.5, 0.5]) == 1 / 4
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0  # no difference at all: every pattern reaches 0
    assert sign_flip_p([-1.0, -2.0]) == 1.0  # every seed against the claim: one-sided p 1
    # rounding: log differences that are equal in exact arithmetic still tie
    d = np.log([3.0, 6.0]) - np.log([1.0, 2.0])  # ln 3 twice, computed two ways
    assert sign_flip_p(d) == 1 / 4


def test_a_bimodal_table_one_stalled_seed_decides_the_exact_test():
    # five seeds that learned (+1 nat each) and one that stalled (-4 nats): sum 1. Patterns reaching
    # 1: with the stall's sign kept, only all five +1 kept (5 - 4 = 1): 1; with it flipped (+4),
    # any pattern with k >= 1 of the five kept (2k - 5 + 4 >= 1): 31. p = 32/64.
    assert sign_flip_p([1.0, 1.0, 1.0, 1.0, 1.0, -4.0]) == 32 / 64
    # the same six without the stall, every seed agreeing: 1/64
    assert sign_flip_p([1.0] * 6) == 1 / 64
    # Table 6's 'recurrence helps' at cpu: two seeds learned, one stalled (perplexities as committed)
    learned_or_stalled = np.log([15.01, 15.02, 15.12]) - np.log([10.69, 10.86, 21.54])  # +0.339, +0.324, -0.354
    # sum 0.310: reached by (+,+,-) itself, (+,+,+) 1.018, (-,+,+) 0.339 and (+,-,+) 0.369 -> 4/8
    assert sign_flip_p(learned_or_stalled) == 0.5


def test_the_exact_test_refuses_more_seeds_than_it_can_enumerate():
    with pytest.raises(TxlabError, match="25 seeds"):
        sign_flip_p([1.0] * 25)
    assert sign_flip_p([1.0] * 16) == 2.0 ** -16  # chunked enumeration: 65,536 patterns


def test_smallest_p_and_holm_by_hand():
    assert (smallest_p(3), smallest_p(3, two_sided=True), smallest_p(5), smallest_p(0), smallest_p(1, two_sided=True)) == (0.125, 0.25, 1 / 32, 1.0, 1.0)
    # sorted 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, kept monotone: 0.06)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped at 1
    assert holm([0.02]) == [0.02]


def test_seeds_needed_under_holm():
    # one-sided, m claims of n seeds each: the first Holm step asks 2^-n <= 0.05 / m
    assert seeds_needed([3], [False], 0) == 5  # 1/32 <= 0.05
    assert seeds_needed([3] * 3, [False] * 3, 0) == 6  # 1/64 = 0.0156 <= 0.0167; 1/32 is not
    assert seeds_needed([3] * 5, [False] * 5, 4) == 7  # 1/128 <= 0.01; 1/64 is not
    assert seeds_needed([5, 5, 5], [True] * 3, 2) == 7  # two-sided: 2/128 <= 0.0167
    # 5 seeds among claims of 10: the others pass first (3/1024, 2/1024), then 1/32 <= 0.05
    assert seeds_needed([10, 10, 5], [False] * 3, 2) is None


def paired(name, better, worse, two_sided=False):
    differences = tuple((np.log(worse) - np.log(better)).tolist())
    return PairedScores(Claim(name, "a", "b", two_sided=two_sided), tuple(range(len(better))), tuple(better), tuple(worse), differences)


def test_a_family_of_claims_gets_holm_and_the_verdicts():
    consistent = paired("seven agree", [10.0] * 7, [20.0] * 7)  # p 1/128
    mixed = paired("mixed", [10.0] * 7, [20.0, 20, 20, 20, 20, 5, 5])  # 5 of 7 agree
    few = paired("three seeds", [10.0] * 3, [20.0] * 3)  # p 1/8, smallest p of 3 seeds
    none = PairedScores(Claim("no seed", "a", "b"), (), (), (), ())
    tested = evaluate_family([consistent, mixed, few, none])
    by_name = {t.claim.claim: t for t in tested}
    assert [t.family_size for t in tested] == [3, 3, 3, 3]  # the claim without a seed is not a member
    assert by_name["seven agree"].p_value == 1 / 128 and by_name["seven agree"].holm_p == pytest.approx(3 / 128)
    assert by_name["seven agree"].verdict == HOLDS
    # 5 x +ln 2, 2 x -ln 2 (sum 3 ln 2): patterns with at least 5 of the 7 +- ln 2 positive: 1 + 7 + 21 = 29 of 128
    assert by_name["mixed"].p_value == 29 / 128 and by_name["mixed"].verdict == NOT_SHOWN
    assert by_name["mixed"].wins == 5 and by_name["mixed"].diff_mean == pytest.approx(3 / 7 * math.log(2))
    # 3 seeds: even 1/8 is above alpha. With 5, it could hold: the two claims of 7 seeds can pass Holm's
    # first steps (3/128, 2/128), which leaves it the last step's alpha, and 1/32 <= 0.05
    assert by_name["three seeds"].verdict == "underpowered (needs 5 seeds)"
    assert by_name["three seeds"].smallest_p == 0.125 == by_name["three seeds"].p_value
    assert by_name["no seed"].verdict == UNTESTED and math.isnan(by_name["no seed"].p_value)


def test_zero_spread_at_two_seeds_is_underpowered_not_a_hold():
    [t] = evaluate_family([paired("equal differences", [1.0, 2.0], [2.0, 4.0])])
    assert (t.p_value, t.diff_sd, t.verdict) == (0.25, 0.0, "underpowered (needs 5 seeds)")


def test_a_two_sided_claim_is_tested_both_ways():
    [t] = evaluate_family([paired("differ", [20.0] * 6, [10.0] * 6, two_sided=True)])  # all six the other way
    assert (t.p_value, t.smallest_p, t.verdict, t.wins) == (2 / 64, 2 / 64, HOLDS, 0)
    [one] = evaluate_family([paired("beats", [20.0] * 6, [10.0] * 6)])  # one-sided, every seed against
    assert (one.p_value, one.verdict) == (1.0, NOT_SHOWN)


def test_claims_pair_the_seeds_both_rows_finished_on_log_perplexity():
    scores = pd.DataFrame([
        {"row_id": "xl", "seed": s, "ppl_init": 20.0, "ppl_best": 10.0 * (s + 1)} for s in (0, 1, 2)
    ] + [
        {"row_id": "norecur", "seed": s, "ppl_init": 22.0, "ppl_best": 20.0 * (s + 1)} for s in (0, 2, 5)
    ])
    scores = scores.assign(loss_init=np.log(scores["ppl_init"]), loss_best=np.log(scores["ppl_best"]))
    [by_best, by_init] = evaluate_claims(scores, [Claim("recurrence helps", "xl", "norecur"),
                                                  Claim("recurrence helps at init", "xl", "norecur", "ppl_init")])
    # seeds 0 and 2: 10 vs 20 and 30 vs 60, a factor of two in each: ln 2 nats twice, p 1/4
    assert by_best.seeds == (0, 2) and by_best.better_values == (10.0, 30.0) and by_best.worse_values == (20.0, 60.0)
    assert by_best.differences == pytest.approx((math.log(2), math.log(2))) and by_best.p_value == 0.25
    assert by_init.diff_mean == pytest.approx(math.log(22 / 20))
    assert by_best.verdict == by_init.verdict == "underpowered (needs 6 seeds)"  # two claims: 1/64 <= 0.025 at Holm's first step
    record = by_best.record()
    assert (record["seed_ids"], record["better_values"], record["ratio"], record["holm_p"], record["test"]) == ("0 2", "10.0000 30.0000", pytest.approx(2.0), 0.5, "one-sided")
    text = claims_markdown([by_best, by_init])
    assert ("| recurrence helps | xl | norecur | ppl_best | 2 (2 won) | 20.00 ± 14.14 (10.00 / 30.00) | 40.00 ± 28.28 (20.00 / 60.00) "
            "| +0.693 (x2.00) | +0.693 (x2.00) | 0.25 | 0.25 | 0.5 | underpowered (needs 6 seeds) |") in text
    assert "Holm's method across the 2 tested claims of this table" in text and "alpha = 0.05" in text
    assert "optimistic by that choice" in text  # a ppl_best claim says its length was chosen in-sample


def test_the_median_difference_stands_beside_the_mean_where_one_seed_makes_the_mean():
    # six seeds a hair apart (x1.01) and one stalled seed (x2): the mean says x1.11, the median x1.01
    [t] = evaluate_family([paired("one stall", [10.0] * 7, [10.1] * 6 + [20.0])])
    assert math.exp(t.diff_mean) == pytest.approx(1.01 ** (6 / 7) * 2 ** (1 / 7)) and math.exp(t.diff_median) == pytest.approx(1.01)
    assert (t.record()["diff_median_nats"], t.record()["ratio_median"]) == (pytest.approx(math.log(1.01)), pytest.approx(1.01))
    assert "| +0.108 (x1.11) | +0.010 (x1.01) |" in claims_markdown([t])


def test_a_claim_on_a_row_scored_with_a_memory_it_never_trained_with_is_read_again_as_trained():
    seeds = range(7)
    protocol = pd.DataFrame([{"row_id": row, "seed": s, "ppl_best": ppl} for s in seeds
                             for row, ppl in (("xl", 10.0), ("norecur", 20.0), ("absolute", 80.0), ("shaw", 11.0))])
    protocol = protocol.assign(ppl_init=protocol["ppl_best"], loss_best=np.log(protocol["ppl_best"]), loss_init=np.log(protocol["ppl_best"]))
    # read as trained, the absolute row loses in 5 seeds of 7 only; the recurrent row has no as-trained record
    trained = pd.DataFrame([{"row_id": "norecur", "seed": s, "value": 20.0} for s in seeds]
                           + [{"row_id": "absolute", "seed": s, "value": 22.0 if s < 5 else 19.0} for s in seeds])
    as_trained = AsTrained(frozenset({"norecur", "absolute"}), trained.assign(loss=np.log(trained["value"])))
    claims = [Claim("recurrence helps", "xl", "norecur"), Claim("relative beats absolute", "norecur", "absolute"),
              Claim("ours beats Shaw", "xl", "shaw")]
    recurrence, relative, shaw = evaluate_claims(protocol, claims, as_trained=as_trained)
    assert relative.verdict == HOLDS and relative.p_value == 1 / 128  # the protocol's reading: 7 of 7
    again = relative.as_trained
    assert (again.wins, again.seeds, again.better_values, again.worse_values[-1]) == (5, tuple(seeds), (20.0,) * 7, 19.0)
    # 5 x +ln 1.1, 2 x -ln(20/19): the observed pattern reaches it, and those turning one or both losses into wins (3),
    # and with one win flipped to a loss, both losses turned (5, since 2 ln(20/19) > ln 1.1): 9 of the 128
    assert again.p_value == sign_flip_p(np.log([1.1] * 5 + [19 / 20] * 2)) == 9 / 128
    # Holm over the three claims, this one read as trained: 1/128 x 3, 1/128 x 2, then 9/128 x 1: above alpha
    assert again.holm_p == pytest.approx(9 / 128) and again.verdict == NOT_SHOWN and again.family_size == 3
    assert recurrence.as_trained.verdict == UNTESTED and recurrence.as_trained.seeds == () and shaw.as_trained is None
    record = relative.record()
    assert (record["as_trained_wins"], record["as_trained_verdict"], shaw.record()["as_trained_verdict"]) == (5, NOT_SHOWN, "")
    text = claims_markdown([recurrence, relative, shaw])
    assert "| ↳ the same, as trained | norecur | absolute | as trained | 7 (5 won) | 20.00 ± 0.00" in text
    assert "| ↳ the same, as trained | xl | norecur | as trained | - | - | - | - | - | - | - | - | untested |" in text
    assert text.count("↳") == 2 and "never trained with" in text
    # the same table in LaTeX for a paper: every row, the notes as its caption, nothing text mode cannot typeset
    latex = claims_latex([recurrence, relative, shaw])
    assert ("$\\hookrightarrow$ the same, as trained & norecur & absolute & as trained & 7 (5 won) & 20.00 $\\pm$ 0.00" in latex
            and latex.count("\\\\\n") == 1 + 5 and "\\toprule" in latex)
    caption = latex.split("\\caption{")[1]
    assert "2\\textasciicircum{}n sign patterns" in caption and "never trained with" in caption
    assert not any(ord(c) > 127 for c in latex) and "ppl\\_best" in caption


def test_every_verdict_the_code_gives_is_a_verdict_word():
    tested = evaluate_family([paired("a", [10.0] * 7, [20.0] * 7), paired("b", [10.0] * 7, [20.0] * 4 + [5.0] * 3),
                              paired("c", [10.0] * 2, [20.0] * 2), PairedScores(Claim("d", "a", "b"), (), (), (), ())])
    assert sorted(verdict_word(t.verdict) for t in tested) == sorted(VERDICTS)


def test_claims_are_checked_against_the_rows():
    raw = [{"claim": "c", "better": "a", "worse": "b"}]
    assert read_claims(raw, ["a", "b"], "s.yaml") == [Claim("c", "a", "b", "ppl_best", False)]
    assert read_claims([{**raw[0], "two_sided": True}], ["a", "b"], "s.yaml")[0].two_sided is True
    assert read_claims(None, ["a"], "s.yaml") == []
    with pytest.raises(TxlabError, match="names row 'b'"):
        read_claims(raw, ["a"], "s.yaml")
    with pytest.raises(TxlabError, match="metric 'ppl'"):
        read_claims([{**raw[0], "metric": "ppl"}], ["a", "b"], "s.yaml")
    with pytest.raises(TxlabError, match="takes the keys"):
        read_claims([{"claim": "c", "better": "a"}], ["a", "b"], "s.yaml")
    with pytest.raises(TxlabError, match="two_sided must be true or false"):
        read_claims([{**raw[0], "two_sided": "yes"}], ["a", "b"], "s.yaml")

