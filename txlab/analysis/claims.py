"""The paper's ablation claims, tested over training seeds with an exact test on log-perplexity.

A claim says one row of an ablation table beats another ("recurrence helps": the recurrent row's
perplexity is lower than the one without). Each seed gives one difference in log-perplexity (nats,
the mean loss per token): d_s = loss(worse)_s - loss(better)_s, positive when that seed supports the
claim. Logs rather than raw perplexities, because perplexity is exp(loss): a stalled seed at 21.5
against 15 would otherwise weigh as much as a factor of two lower down.

**Why the seeds are paired, and what that assumes.** Every run of a study reads the same data in the
same order (no shuffling, one corpus seed), and runs with the same seed share their initial weights
only when their parameter shapes match (Shaw's encoding or a longer segment changes them). Pairing by
seed therefore removes a shared source of variance only sometimes; the test needs no more than that
under the null hypothesis (the two rows train alike) each pair's two runs are exchangeable, so each
d_s is as likely to be -d_s. That holds for independent runs and for runs sharing their initial weights.

**The test** is the exact paired sign-flip (permutation) test: the p-value is the share of the 2^n
sign patterns of (d_1, ..., d_n) whose sum reaches the observed one (in the claim's direction, or in
absolute value for a two-sided claim). It assumes no normality, which matters here: at this scale a
seed either learns a structure or stalls, so the differences are bimodal. Its p can take only the
values k / 2^n, and the smallest is 1 / 2^n one-sided (2 / 2^n two-sided): with 3 seeds, 0.125.
A zero spread of the differences is not special: d = (0.5, 0.5) gives p = 1/4.

**Several claims of one table** are one family: their p-values are adjusted by Holm's step-down
method (the k-th smallest of m is multiplied by m - k + 1, kept monotone, capped at 1), which keeps
the chance of any false "holds" in the table at alpha.

The verdicts (:data:`VERDICTS`):

- ``holds``: the Holm-adjusted p is at most alpha;
- ``underpowered (needs N seeds)``: the claim could not hold with its seeds even if every seed of
  every claim in the table agreed (each at its smallest p, Holm applied); N seeds could;
- ``not shown``: the seeds could have shown it, and did not (Holm-adjusted p above alpha);
- ``untested``: no seed that both rows finished.

No verdict says a claim is false: a one-sided test of "A beats B" cannot show that B beats A. The
wins (seeds with d_s > 0), the mean difference and its median say which way the seeds point; the
median beside the mean shows when one seed (a stall, a recall that never formed) makes most of the mean.

**As trained.** The paper's protocol scores a model without recurrence at attention length A with A
tokens of memory, which it never trained with. A claim naming such a row is read a second time with
every run scored as it trained (:class:`AsTrained`: its training segment and memory), with a p of its
own and a verdict from Holm's method over the table's claims, each read as trained where it has that
reading (the protocol's reading where it has not). Without a record of every run read so, that
reading is ``untested``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from txlab.errors import TxlabError
from txlab.tables import latex_text_table, markdown_table

METRICS = ("ppl_init", "ppl_best")
"""What a claim compares: each seed's score at the training length, or at the row's Attn Len (txlab.analysis.ablation.seed_scores)."""
LOG_METRICS = {"ppl_init": "loss_init", "ppl_best": "loss_best"}
"""The column of txlab.analysis.ablation.seed_scores holding each metric as log-perplexity (nats)."""
ALPHA = 0.05
MAX_EXACT_SEEDS = 24
"""The exact test enumerates 2^n sign patterns: 16M at 24 seeds takes seconds, beyond that minutes."""

HOLDS = "holds"
NOT_SHOWN = "not shown"
UNDERPOWERED = "underpowered"
UNTESTED = "untested"
VERDICTS = (HOLDS, NOT_SHOWN, UNDERPOWERED, UNTESTED)
"""Every verdict word this module gives; the underpowered one carries '(needs N seeds)' after it."""


def verdict_word(verdict: str) -> str:
    """The verdict word of a verdict ('underpowered (needs 7 seeds)' -> 'underpowered')."""
    return verdict.split(" (", 1)[0]


@dataclass(frozen=True)
class Claim:
    """``better`` (a row id) has a lower ``metric`` than ``worse`` (or, ``two_sided``, the two differ)."""

    claim: str
    better: str
    worse: str
    metric: str = "ppl_best"
    two_sided: bool = False


def read_claims(raw: object, row_ids: list[str], where: str) -> list[Claim]:
    """Claims from a study file's ``claims`` list of {claim, better, worse, metric, two_sided} mappings."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TxlabError(f"{where}: 'claims' must be a list of mappings with claim, better, worse (and metric, two_sided)")
    keys, optional = {"claim", "better", "worse"}, {"metric", "two_sided"}
    claims = []
    for item in raw:
        if not isinstance(item, dict) or not keys <= set(item) or set(item) - keys - optional:
            raise TxlabError(f"{where}: a claim takes the keys claim, better, worse and optionally metric and two_sided, got {item!r}")
        if not isinstance(item.get("two_sided", False), bool):
            raise TxlabError(f"{where}: claim {item['claim']!r}: two_sided must be true or false, got {item['two_sided']!r}")
        claim = Claim(str(item["claim"]), str(item["better"]), str(item["worse"]), str(item.get("metric", "ppl_best")), item.get("two_sided", False))
        for row in (claim.better, claim.worse):
            if row not in row_ids:
                raise TxlabError(f"{where}: claim {claim.claim!r} names row {row!r}, which the study does not have (rows: {', '.join(row_ids)})")
        if claim.metric not in METRICS:
            raise TxlabError(f"{where}: claim {claim.claim!r} has metric {claim.metric!r}; choose one of {', '.join(METRICS)}")
        claims.append(claim)
    return claims


# --------------------------------------------------------------------------------------------------
# The test, the smallest p it can give, and Holm's adjustment (pure numpy)


def sign_flip_p(differences: Sequence[float], two_sided: bool = False) -> float:
    """The exact paired sign-flip p-value of per-seed differences (positive supports the claim): the
    share of the 2^n sign patterns whose sum is at least the observed sum (two-sided: in absolute value)."""
    d = np.asarray(differences, dtype=np.float64)
    n = len(d)
    if n == 0:
        raise ValueError("sign_flip_p needs at least one difference")
    if n > MAX_EXACT_SEEDS:
        raise TxlabError(f"the exact sign-flip test enumerates 2^n sign patterns; {n} seeds is more than the {MAX_EXACT_SEEDS} it takes")
    observed = abs(d.sum()) if two_sided else d.sum()
    # sums equal to the observed one up to rounding reach it: ties are part of an exact test's p
    tolerance = 1e-9 * max(1.0, float(np.abs(d).sum()))
    bits = np.arange(n)
    reached = 0
    chunk = 1 << min(n, 16)
    for start in range(0, 1 << n, chunk):
        patterns = np.arange(start, start + chunk, dtype=np.int64)
        signs = 1.0 - 2.0 * ((patterns[:, None] >> bits) & 1)
        sums = signs @ d
        reached += int(np.count_nonzero((np.abs(sums) if two_sided else sums) >= observed - tolerance))
    return reached / float(1 << n)


def smallest_p(seeds: int, two_sided: bool = False) -> float:
    """The smallest p the sign-flip test can give with ``seeds`` differences: every seed agreeing (1.0 with none)."""
    if seeds < 1:
        return 1.0
    return min(1.0, (2.0 if two_sided else 1.0) / 2.0 ** seeds)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of one family's p-values, in their order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[index]))
        adjusted[index] = running
    return adjusted.tolist()


def seeds_needed(seed_counts: Sequence[int], two_sided: Sequence[bool], index: int, alpha: float = ALPHA) -> int | None:
    """The fewest seeds with which claim ``index`` of a family could hold if every seed agreed (every
    claim at its smallest p, Holm applied); None when it already can."""
    def can_hold(counts: Sequence[int]) -> bool:
        best = holm([smallest_p(n, s) for n, s in zip(counts, two_sided)])
        return best[index] <= alpha

    if can_hold(seed_counts):
        return None
    counts = list(seed_counts)
    while not can_hold(counts):  # ends: at 1 / 2^n <= alpha / m the claim passes Holm's strictest step
        counts[index] += 1
    return counts[index]


# --------------------------------------------------------------------------------------------------
# Claims of one table


@dataclass(frozen=True)
class AsTrained:
    """Each run of a table read as it trained (txlab.analysis.ablation.as_trained_scores), for the claims whose
    rows the protocol scores with a memory they never trained with."""

    rows: frozenset[str]
    """The rows trained without memory that the protocol scores with one (rows without recurrence)."""
    scores: pd.DataFrame
    """One line per (row_id, seed) read as trained: ``value`` in the table's metric (perplexity, or bpc) and ``loss`` (nats)."""


@dataclass(frozen=True)
class TestedClaim:
    """One claim tested over the seeds both rows finished, as one member of its table's family."""

    claim: Claim
    seeds: tuple[int, ...]
    better_values: tuple[float, ...]
    """Each seed's score of the better row in the table's metric (perplexity, or bpc)."""
    worse_values: tuple[float, ...]
    differences: tuple[float, ...]
    """Per seed, log-perplexity of worse minus better (nats): positive supports the claim."""
    p_value: float
    """Exact sign-flip p, one-sided in the claim's direction unless the claim is two-sided (NaN untested)."""
    smallest_p: float
    holm_p: float
    family_size: int
    """The number of tested claims in the table, the m of Holm's adjustment."""
    alpha: float
    verdict: str
    as_trained: TestedClaim | None = None
    """The claim read with every run scored as it trained (:class:`AsTrained`), where the protocol scores one of its
    rows with a memory it never trained with; None where it does not."""

    @property
    def wins(self) -> int:
        return int(sum(d > 0 for d in self.differences))

    @property
    def diff_mean(self) -> float:
        return float(np.mean(self.differences)) if self.differences else math.nan

    @property
    def diff_median(self) -> float:
        return float(np.median(self.differences)) if self.differences else math.nan

    @property
    def diff_sd(self) -> float:
        return float(np.std(self.differences, ddof=1)) if len(self.differences) > 1 else math.nan

    def record(self) -> dict[str, object]:
        """One flat line for claims.csv and --json."""
        sd = lambda xs: float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan  # noqa: E731
        mean = lambda xs: float(np.mean(xs)) if xs else math.nan  # noqa: E731
        return {
            "claim": self.claim.claim, "better": self.claim.better, "worse": self.claim.worse, "metric": self.claim.metric,
            "test": "two-sided" if self.claim.two_sided else "one-sided", "seeds": len(self.seeds), "wins": self.wins,
            "seed_ids": " ".join(map(str, self.seeds)),
            "better_values": " ".join(f"{v:.4f}" for v in self.better_values), "worse_values": " ".join(f"{v:.4f}" for v in self.worse_values),
            "better_mean": mean(self.better_values), "better_sd": sd(self.better_values),
            "worse_mean": mean(self.worse_values), "worse_sd": sd(self.worse_values),
            "diff_nats": " ".join(f"{d:.4f}" for d in self.differences), "diff_mean_nats": self.diff_mean, "diff_sd_nats": self.diff_sd,
            "diff_median_nats": self.diff_median, "ratio": math.exp(self.diff_mean) if self.differences else math.nan,
            "ratio_median": math.exp(self.diff_median) if self.differences else math.nan,
            "p_value": self.p_value, "smallest_p": self.smallest_p, "holm_p": self.holm_p, "family_size": self.family_size,
            "alpha": self.alpha, "verdict": self.verdict, **self._as_trained_record(),
        }

    def _as_trained_record(self) -> dict[str, object]:
        """The as-trained reading's columns (empty where the claim needs none)."""
        keys = ("seeds", "wins", "seed_ids", "better_values", "worse_values", "diff_nats", "diff_mean_nats", "diff_median_nats", "ratio",
                "p_value", "holm_p", "verdict")
        own = self.as_trained.record() if self.as_trained is not None else {}
        return {f"as_trained_{key}": own.get(key, "") for key in keys}


@dataclass(frozen=True)
class PairedScores:
    """One claim's scores on the seeds both of its rows finished, in seed order."""

    claim: Claim
    seeds: tuple[int, ...]
    better_values: tuple[float, ...]
    """Each seed's score of the better row in the table's metric (perplexity, or bpc)."""
    worse_values: tuple[float, ...]
    differences: tuple[float, ...]
    """Per seed, log-perplexity (nats) of worse minus better: positive supports the claim."""


def evaluate_family(paired: Sequence[PairedScores], alpha: float = ALPHA) -> list[TestedClaim]:
    """One table's claims as a family: each one's exact p and smallest p, Holm across the claims with
    at least one seed, and the verdicts."""
    tested_at = [i for i, scores in enumerate(paired) if scores.seeds]
    p = {i: sign_flip_p(paired[i].differences, paired[i].claim.two_sided) for i in tested_at}
    adjusted = dict(zip(tested_at, holm([p[i] for i in tested_at])))
    counts = [len(paired[i].seeds) for i in tested_at]
    sidedness = [paired[i].claim.two_sided for i in tested_at]
    out = []
    for i, scores in enumerate(paired):
        if i not in p:
            out.append(TestedClaim(scores.claim, (), (), (), (), math.nan, 1.0, math.nan, len(tested_at), alpha, UNTESTED))
            continue
        needed = seeds_needed(counts, sidedness, tested_at.index(i), alpha)
        if needed is not None:
            verdict = f"{UNDERPOWERED} (needs {needed} seeds)"
        else:
            verdict = HOLDS if adjusted[i] <= alpha else NOT_SHOWN
        out.append(TestedClaim(scores.claim, scores.seeds, scores.better_values, scores.worse_values, scores.differences, p[i],
                               smallest_p(len(scores.seeds), scores.claim.two_sided), adjusted[i], len(tested_at), alpha, verdict))
    return out


def pair_scores(claim: Claim, scores: pd.DataFrame, value: str, log: str) -> PairedScores:
    """A claim's two rows on the seeds both have in ``scores`` (row_id, seed, and the columns ``value``, in the
    table's metric, and ``log``, the same in nats)."""
    by_row = {row: scores[scores["row_id"] == row].set_index("seed") for row in (claim.better, claim.worse)}
    seeds = sorted(set(by_row[claim.better].index) & set(by_row[claim.worse].index))
    better, worse = (by_row[row].loc[seeds] for row in (claim.better, claim.worse))
    differences = worse[log].to_numpy(np.float64) - better[log].to_numpy(np.float64)
    return PairedScores(claim, tuple(int(s) for s in seeds), tuple(better[value].astype(float)), tuple(worse[value].astype(float)),
                        tuple(differences.tolist()))


def evaluate_claims(scores: pd.DataFrame, claims: Sequence[Claim], alpha: float = ALPHA, as_trained: AsTrained | None = None) -> list[TestedClaim]:
    """A table's claims tested on ``scores`` (txlab.analysis.ablation.seed_scores: row_id, seed, ppl_init,
    ppl_best and the same as log-perplexity loss_init, loss_best), pairing the seeds both rows finished.

    With ``as_trained``, each claim naming one of its rows is also read as trained, as its own member of a family
    of the table's claims each read as trained where it has that reading (untested where a run lacks one)."""
    paired = [pair_scores(claim, scores, claim.metric, LOG_METRICS[claim.metric]) for claim in claims]
    tested = evaluate_family(paired, alpha)
    if as_trained is None:
        return tested
    read_again = {i: pair_scores(claim, as_trained.scores, "value", "loss") for i, claim in enumerate(claims)
                  if {claim.better, claim.worse} & as_trained.rows}
    family = evaluate_family([read_again[i] if i in read_again and read_again[i].seeds else p for i, p in enumerate(paired)], alpha)
    out = []
    for i, t in enumerate(tested):
        if i not in read_again:
            out.append(t)
        elif read_again[i].seeds:
            out.append(replace(t, as_trained=family[i]))
        else:  # a run lacks its as-trained record: the claim is not read so
            out.append(replace(t, as_trained=replace(family[i], seeds=(), better_values=(), worse_values=(), differences=(), p_value=math.nan,
                                                     smallest_p=1.0, holm_p=math.nan, verdict=UNTESTED)))
    return out


def _row_cell(values: Sequence[float]) -> str:
    """'14.36 ± 6.21 (10.69 / 10.86 / 21.54)': mean ± sd over seeds (as table.md shows the row), then each seed."""
    if not values:
        return "-"
    mean = f"{np.mean(values):.2f}" + (f" ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else "")
    return mean + (f" ({' / '.join(f'{v:.2f}' for v in values)})" if len(values) > 1 else "")


def _p_cell(p: float) -> str:
    return "-" if math.isnan(p) else f"{p:.3g}"


def _difference_cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.3f} (x{math.exp(value):.2f})"


def _claims_table(tested: Sequence[TestedClaim]) -> tuple[list[str], list[list[str]], list[str]]:
    """The tested claims as headers, rows (each claim followed by its as-trained reading where it has one) and
    the notes saying what each column is: what the Markdown and the LaTeX table both show."""
    def cells(t: TestedClaim, claim: str, metric: str) -> list[str]:
        return [claim, t.claim.better, t.claim.worse, metric, f"{len(t.seeds)} ({t.wins} won)" if t.seeds else "-",
                _row_cell(t.better_values), _row_cell(t.worse_values), _difference_cell(t.diff_mean), _difference_cell(t.diff_median),
                _p_cell(t.p_value), _p_cell(t.smallest_p) if t.seeds else "-", _p_cell(t.holm_p), t.verdict]

    rows = []
    for t in tested:
        rows.append(cells(t, t.claim.claim + (" (two-sided)" if t.claim.two_sided else ""), t.claim.metric))
        if t.as_trained is not None:
            rows.append(cells(t.as_trained, "↳ the same, as trained", "as trained"))
    headers = ["claim", "better", "worse", "metric", "seeds (won)", "better: mean ± sd (per seed)", "worse: mean ± sd (per seed)",
               "difference, nats (ratio)", "median difference, nats (ratio)", "p", "smallest p", "Holm p", "verdict"]
    alpha = tested[0].alpha if tested else ALPHA
    m = tested[0].family_size if tested else 0
    notes = [
        "mean ± sd: over the seeds both rows finished (sd with n - 1), the same numbers as table.md; per seed in brackets.",
        "difference: per seed, log-perplexity (nats) of worse minus better, averaged over seeds; positive supports the claim. "
        "Ratio: exp of it, the ratio of the two rows' geometric-mean perplexities. Median difference: the middle seed's difference (the "
        "mean of the middle two for an even number of seeds), which one seed far from the others (a stall) moves little.",
        "p: exact paired sign-flip test over the 2^n sign patterns of the per-seed differences, one-sided in the claim's direction "
        "(two-sided where marked). Smallest p: the lowest p n seeds can give (1/2^n one-sided, 2/2^n two-sided).",
        f"Holm p: adjusted by Holm's method across the {m} tested claims of this table; a claim holds when its Holm p is at most "
        f"alpha = {alpha:g}. Underpowered (needs N seeds): it could not hold with its seeds even if every seed of every claim "
        "agreed; N seeds could. Not shown: it could have held, and did not. No verdict says a claim is false: wins and the "
        "difference say which way the seeds point.",
    ]
    if any(t.claim.metric == "ppl_best" for t in tested):
        notes.append("ppl_best: each seed at its row's Attn Len, the length where the row's mean over seeds is lowest; chosen on the "
                     "same validation targets it reports, so optimistic by that choice (see table.md).")
    if any(t.as_trained is not None for t in tested):
        notes.append("as trained: the protocol scores a row without recurrence at attention length A with A tokens of memory, which "
                     "it never trained with; a claim naming such a row is read again with every run scored as it trained (its "
                     "training segment and memory, no equal-length attention, on the same split and targets: "
                     "`txlab eval RUN --tgt-len T --mem-len M --no-same-length --max-tokens N`, recorded in RUN/eval/). Its Holm p is "
                     "over this table's claims, each read as trained where it has that reading. Untested: a run has no such record.")
    return headers, rows, notes


def claims_markdown(tested: Sequence[TestedClaim]) -> str:
    """The tested claims as a Markdown table (:func:`_claims_table`), its notes as a list under it."""
    headers, rows, notes = _claims_table(tested)
    return markdown_table(headers, rows) + "\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"


def claims_latex(tested: Sequence[TestedClaim]) -> str:
    """The tested claims as a booktabs table for a paper (:func:`_claims_table`), its notes as the caption."""
    return latex_text_table(*_claims_table(tested))
