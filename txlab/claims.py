"""The paper's ablation claims as paired comparisons over training seeds.

A claim says one row of an ablation table beats another ("recurrence helps": the recurrent row's
perplexity is lower than the one without). Runs with the same seed share their initial parameters'
random stream and their data order, so the two rows are compared seed by seed: the per-seed
difference d_s = worse_s - better_s (positive when the claim holds for that seed), its mean and
standard deviation, a 95% t interval for the mean, and the two-sided paired t-test's p-value
(``scipy.stats.ttest_rel``). The verdict:

- ``holds``: mean difference > 0 and p < alpha;
- ``reversed``: mean difference < 0 and p < alpha (the data say the opposite);
- ``within noise``: otherwise;
- ``untested``: fewer than two paired seeds (no spread to test against).

An ordering (Table 7's Ours < Shaw < no recurrence) is a chain of such claims. With three seeds the
test has two degrees of freedom: only a difference large against its seed-to-seed spread holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from txlab.errors import TxlabError
from txlab.tables import markdown_table

METRICS = ("ppl_init", "ppl_best")
ALPHA = 0.05


@dataclass(frozen=True)
class Claim:
    """``better`` (a row id) has a lower ``metric`` than ``worse``."""

    claim: str
    better: str
    worse: str
    metric: str = "ppl_best"


def read_claims(raw: object, row_ids: list[str], where: str) -> list[Claim]:
    """Claims from a study file's ``claims`` list of {claim, better, worse, metric} mappings."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TxlabError(f"{where}: 'claims' must be a list of mappings with claim, better, worse (and metric)")
    claims = []
    for item in raw:
        if not isinstance(item, dict) or not {"claim", "better", "worse"} <= set(item) or set(item) - {"claim", "better", "worse", "metric"}:
            raise TxlabError(f"{where}: a claim takes the keys claim, better, worse and optionally metric, got {item!r}")
        claim = Claim(str(item["claim"]), str(item["better"]), str(item["worse"]), str(item.get("metric", "ppl_best")))
        for row in (claim.better, claim.worse):
            if row not in row_ids:
                raise TxlabError(f"{where}: claim {claim.claim!r} names row {row!r}, which the study does not have (rows: {', '.join(row_ids)})")
        if claim.metric not in METRICS:
            raise TxlabError(f"{where}: claim {claim.claim!r} has metric {claim.metric!r}; choose one of {', '.join(METRICS)}")
        claims.append(claim)
    return claims


def paired_test(better: np.ndarray, worse: np.ndarray, alpha: float = ALPHA) -> dict[str, float | int | str]:
    """The paired comparison of two per-seed arrays (same seed order): see the module docstring."""
    diff = np.asarray(worse, dtype=np.float64) - np.asarray(better, dtype=np.float64)
    n = len(diff)
    out: dict[str, float | int | str] = {"seeds": n, "wins": int((diff > 0).sum())}
    if n == 0:
        return {**out, "diff_mean": math.nan, "diff_std": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "verdict": "untested"}
    mean = float(diff.mean())
    if n < 2:
        return {**out, "diff_mean": mean, "diff_std": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p_value": math.nan, "verdict": "untested"}
    std = float(diff.std(ddof=1))
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * std / math.sqrt(n)
    if std == 0:  # identical differences: t is infinite unless they are all zero
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(stats.ttest_rel(worse, better).pvalue)
    verdict = "holds" if mean > 0 and p < alpha else "reversed" if mean < 0 and p < alpha else "within noise"
    return {**out, "diff_mean": mean, "diff_std": std, "ci_low": mean - half, "ci_high": mean + half, "p_value": p, "verdict": verdict}


def evaluate_claims(scores: pd.DataFrame, claims: list[Claim], alpha: float = ALPHA) -> list[dict]:
    """Each claim tested on ``scores`` (txlab.report.seed_scores: row_id, seed, ppl_init, ppl_best),
    pairing the seeds both rows have finished."""
    tested = []
    for claim in claims:
        values = {row: scores[scores["row_id"] == row].set_index("seed")[claim.metric] for row in (claim.better, claim.worse)}
        seeds = sorted(set(values[claim.better].index) & set(values[claim.worse].index))
        better = values[claim.better].loc[seeds].to_numpy(dtype=np.float64)
        worse = values[claim.worse].loc[seeds].to_numpy(dtype=np.float64)
        tested.append({
            "claim": claim.claim, "better": claim.better, "worse": claim.worse, "metric": claim.metric,
            "better_mean": float(better.mean()) if seeds else math.nan, "worse_mean": float(worse.mean()) if seeds else math.nan,
            **paired_test(better, worse, alpha),
        })
    return tested


def claims_markdown(tested: list[dict]) -> str:
    """The tested claims as a Markdown table (difference = worse - better, positive supports the claim)."""
    rows = []
    for t in tested:
        ci = f" [{t['ci_low']:.2f}, {t['ci_high']:.2f}]" if not math.isnan(t["ci_low"]) else ""
        p = f"{t['p_value']:.3f}" if not math.isnan(t["p_value"]) else "-"
        rows.append([t["claim"], t["better"], t["worse"], t["metric"], f"{t['seeds']} ({t['wins']} won)",
                     f"{t['better_mean']:.2f}", f"{t['worse_mean']:.2f}", f"{t['diff_mean']:+.2f}{ci}", p, t["verdict"]])
    headers = ["claim", "better", "worse", "metric", "seeds", "better mean", "worse mean", "difference (95% CI)", "p", "verdict"]
    return markdown_table(headers, rows) + "\n"
