"""What a model has learned on a synthetic corpus: its loss per token role and per copy distance.

A single perplexity mixes tokens that need no context (hints, source keys), one token of context
(the background chain), a few tokens (a source value's hint) and up to the corpus's horizon (copies).
On a synthetic corpus every token's role and needed context are known (txlab.data.synthetic), so the
model's per-token losses split into those groups, each beside the ideal model's loss with and
without the context the group needs:

- per role (background, hint, source key, source value, copy key, copied value): tokens, the model's
  mean loss, the ideal model's mean loss with its needed context (``ideal_with``) and without it
  (``ideal_without``);
- on the recall family, the roles are its own (registers, latch emissions, markers, keys, source
  and recalled values), and latch emissions are also shown by distance to their latch's last token;
- copied (recalled) values by distance D to their source value (D = needed_context - 1; the copy key is D
  back as well), in buckets: the same three numbers. Copying shows as loss near 0 inside the distances
  a model uses and near ln(n_values) beyond them, which makes this the most direct picture of "how far
  back does this model use context", and a check on RECL.

Pure numpy: the inputs are per-token losses in text order (NaN where a token was not scored) and the
text's ground truth.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from txlab.data.synthetic import SyntheticText
from txlab.errors import TxlabError

DEFAULT_BUCKETS = 12
"""Copy-distance buckets when none are given: equal widths over [min_distance, max_distance]."""


@dataclass(frozen=True)
class GroupLoss:
    """Mean losses (nats) of one group of scored tokens."""

    tokens: int
    model: float
    ideal_with: float
    ideal_without: float

    def as_dict(self) -> dict[str, float | int]:
        return {"tokens": self.tokens, "model": self.model, "ideal_with": self.ideal_with, "ideal_without": self.ideal_without}


def _group(loss: np.ndarray, truth: SyntheticText, where: np.ndarray) -> GroupLoss:
    n = int(where.sum())
    if n == 0:
        return GroupLoss(0, float("nan"), float("nan"), float("nan"))
    return GroupLoss(n, float(loss[where].mean()), float(truth.oracle_nll_with[where].mean()), float(truth.oracle_nll_without[where].mean()))


def distance_edges(truth: SyntheticText, buckets: int = DEFAULT_BUCKETS, name: str = "copy_distance") -> np.ndarray:
    """[buckets + 1] integer edges covering the corpus's distances of ``name`` (one of the spec's
    ``distance_roles``: copies, and on the recall family latch emissions) in equal widths (last edge exclusive)."""
    lo, hi = truth.spec.distance_range(name)
    if buckets < 1:
        raise TxlabError(f"need at least one distance bucket, got {buckets}")
    return np.unique(np.round(np.linspace(lo, hi, buckets + 1)).astype(np.int64))


def role_summary(loss: np.ndarray, truth: SyntheticText, edges: np.ndarray | None = None) -> dict:
    """Per-role and per-copy-distance losses of a model against the ideal model.

    ``loss`` is [n] nats in text order (the same n as ``truth``), NaN for tokens that were not scored
    (e.g. the first token, or those past an evaluation's token limit). ``edges`` are the copy-distance
    bucket edges [e_0, e_1, ..., e_k]: bucket i holds distances e_i <= D < e_{i+1}
    (default :func:`distance_edges`). Returns a JSON-ready dict::

        {"roles": {role: {tokens, model, ideal_with, ideal_without}},
         "copy_distance": [{lo, hi, tokens, model, ideal_with, ideal_without}, ...]}

    On the recall family "copy_distance" holds the recalled values, and "latch_distance" the latch
    emissions by distance to their latch's previous token (``edges`` applies to copies only).
    """
    loss = np.asarray(loss, dtype=np.float64)
    if loss.shape != truth.tokens.shape:
        raise TxlabError(f"per-token losses have shape {loss.shape}, the text {truth.tokens.shape}")
    scored = ~np.isnan(loss)
    roles = {name: _group(loss, truth, scored & (truth.role == r)).as_dict() for r, name in enumerate(truth.spec.role_names)}
    summary = {"roles": roles}
    for name, (role, offset) in truth.spec.distance_roles.items():
        bucket_edges = distance_edges(truth, name=name) if edges is None or name != "copy_distance" else np.asarray(edges, dtype=np.int64)
        if bucket_edges.ndim != 1 or len(bucket_edges) < 2 or np.any(np.diff(bucket_edges) <= 0):
            raise TxlabError(f"{name.replace('_', ' ')} bucket edges must increase, got {bucket_edges.tolist()}")
        of_role = scored & (truth.role == role)
        distance = truth.needed_context - offset
        summary[name] = [
            {"lo": int(lo), "hi": int(hi), **_group(loss, truth, of_role & (distance >= lo) & (distance < hi)).as_dict()}
            for lo, hi in zip(bucket_edges[:-1], bucket_edges[1:])
        ]
    return summary


def flat_metrics(summary: dict) -> dict[str, float]:
    """The model's per-role losses as flat ``role_<name>`` keys, for a metrics line."""
    return {f"role_{name}": group["model"] for name, group in summary["roles"].items() if group["tokens"]}


def format_summary(summary: dict) -> str:
    """The summary as plain-text tables (roles, then copied values by distance, then on the recall
    family latch emissions by distance)."""
    lines = [f"{'role':<16}{'tokens':>9}{'model':>9}{'ideal':>9}{'no ctx':>9}"]
    for name, g in summary["roles"].items():
        lines.append(f"{name:<16}{g['tokens']:>9,}{g['model']:>9.3f}{g['ideal_with']:>9.3f}{g['ideal_without']:>9.3f}")
    for name, buckets in summary.items():
        if name == "roles":
            continue
        lines += ["", f"{name.replace('_', ' '):<16}{'tokens':>9}{'model':>9}{'ideal':>9}{'no ctx':>9}"]
        for b in buckets:
            span = f"{b['lo']}-{b['hi'] - 1}"
            lines.append(f"{span:<16}{b['tokens']:>9,}{b['model']:>9.3f}{b['ideal_with']:>9.3f}{b['ideal_without']:>9.3f}")
    return "\n".join(lines)
