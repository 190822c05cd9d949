"""Multi-head attention over a layer's window, and the three ways positions enter its score.

Shapes, batch first (as in :mod:`txlab.models.transformer`):

    B  batch rows (independent streams)         H   attention heads
    T  current positions (queries)              Dh  size of one head
    M  memory positions carried from the past   d   model width (d_model)
    K  keys = M + T, the window [memory ; current]

Within the window, key j sits at position j and query i at position M + i, so the distance from
query i to key j is M + i - j (0 for the query itself, negative for future keys, which are masked).

The module reads like Sec. 3.3 of the paper: the positional inputs each scheme's attention takes and
the score terms, the pieces (sinusoids, relative distances, the mask), then one attention class per
positional scheme, each defining its score in one method, :meth:`MultiHeadAttention.score_terms`:

- ``ours``: the paper's four-term relative attention with the fixed sinusoid R of the distance, a
  separate key projection W_{k,R} (``r_net``) and the global content and position biases u and v
  (:class:`RelativeSinusoidAttention`, its inputs :class:`RelativeSinusoidPositions`);
- ``shaw``: Shaw et al. (2018), a learned embedding per distance, per layer; terms (a) and (b)
  (:class:`LearnedRelativeAttention`, :class:`LearnedRelativePositions`);
- ``vaswani`` and ``alrfou``: absolute positions, added to the window before it is projected, so the
  score is one product (:class:`AbsoluteAttention`).

The kernels attention runs on live in :mod:`txlab.models.kernels`; the layer that projects the window
and calls attention (:class:`~txlab.models.transformer.Block`) in :mod:`txlab.models.transformer`.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from txlab.config import ModelConfig
from txlab.models.kernels import ATTENTION_KERNELS, Dropout, choose_kernel, matmul_shared_keys, rel_shift

# --------------------------------------------------------------------------------------------------
# Interfaces: the positional inputs of attention, the score terms


@dataclass(frozen=True)
class RelativeSinusoidPositions:
    """What the paper's relative attention (Sec. 3.3) needs besides its window, for one layer and chunk.

    ``content_bias_u`` is the paper's u and ``position_bias_v`` its v: learned vectors that replace
    the query in the terms (c) u . k_j and (d) v . W_{k,R} R_{i-j}, the same for every query position.
    """

    content_bias_u: torch.Tensor
    """u [H, Dh], the global content bias of term (c)."""
    position_bias_v: torch.Tensor
    """v [H, Dh], the global position bias of term (d)."""
    position_keys: torch.Tensor
    """W_{k,R} R for every distance of :func:`relative_distances`, laid out for a matmul: [H, Dh, K+1]
    (:meth:`RelativeSinusoidAttention.position_keys`)."""


@dataclass(frozen=True)
class LearnedRelativePositions:
    """What Shaw et al.'s relative attention needs besides its window, for one layer and chunk."""

    position_keys: torch.Tensor
    """The learned embedding E of every distance of :func:`relative_distances`, laid out for a matmul:
    [H, Dh, K+1] (:meth:`LearnedRelativeAttention.position_keys`)."""


Positions = RelativeSinusoidPositions | LearnedRelativePositions | None
"""A layer's positional inputs; None for the absolute schemes, whose positions are added to the window."""

SCORE_TERMS = {"a": "content-content", "b": "content-position", "c": "global content bias", "d": "global position bias"}
"""The paper's four terms of the relative attention score (Sec. 3.3), by their letters."""


class ScoreTerm(NamedTuple):
    """One term of an attention score: a query-side vector dotted with every key of the window, or with the
    position key of every distance (the paper's W_{k,R} R_{i-j}, Shaw et al.'s E_{i-j})."""

    vector: torch.Tensor
    """[B, T, H, Dh], one per query (the query itself), or [H, Dh], the same for every query (the global bias u or v)."""
    positional: bool
    """Whether it is dotted with the position keys (by distance) rather than with the keys."""


class AttentionRecord(NamedTuple):
    """What one attention layer computed for one chunk, recorded under :func:`~txlab.models.transformer.capture_attention`."""

    probs: torch.Tensor
    """[B, H, T, K] attention probabilities over the window's keys (before attention dropout)."""
    scores: torch.Tensor
    """[B, H, T, K] the scores they are the softmax of, mask included (-inf at keys a query may not see)."""
    terms: dict[str, torch.Tensor]
    """The scheme's separate score terms (letters of :data:`SCORE_TERMS`), each [B, H, T, K], scaled like
    the score and unmasked: the terms plus ``mask`` add up to ``scores`` (entries of masked keys are
    meaningless). Empty for absolute positions, whose scores mix content and position in one product."""
    mask: torch.Tensor
    """[T, K] the additive mask: 0 where query i may attend key j, -inf elsewhere."""


# --------------------------------------------------------------------------------------------------
# Positions and the mask


def sinusoid(positions: torch.Tensor, d: int) -> torch.Tensor:
    """The Vaswani et al. sinusoid table: positions [P] -> [P, d] (sines first, then cosines)."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2, device=positions.device, dtype=positions.dtype) / d)
    angles = torch.outer(positions, inv_freq)  # [P, ceil(d/2)]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)[:, :d]  # [P, d]


def relative_distances(n_keys: int, clamp_len: int, device: torch.device | None = None) -> torch.Tensor:
    """Distances K-1, K-2, ..., 0, -1 [K+1] (the layout ``rel_shift`` expects), clamped above.

    The extra distance -1 belongs to a future key, always masked; it gives every score row K+1
    columns, which lets :func:`rel_shift` be a view (no padding copy).
    """
    distances = torch.arange(n_keys - 1, -2, -1, device=device)  # [K+1]
    return distances.clamp(max=clamp_len) if clamp_len > 0 else distances


def attention_mask(n_query: int, n_mem: int, same_length_window: int, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Additive mask [T, K]: 0 where query i may attend key j, -inf elsewhere.

    Causal over the window (j <= M+i). With ``same_length_window`` = w > 0, query i also ignores
    keys at distance >= w, so every query attends its own token and the w-1 before it (fewer only
    while less history exists) -- the reference code's ``same_length`` mask with w = mem_len.
    """
    n_keys = n_mem + n_query
    query_pos = torch.arange(n_mem, n_keys, device=device)[:, None]  # [T, 1]
    key_pos = torch.arange(n_keys, device=device)[None, :]  # [1, K]
    allowed = key_pos <= query_pos  # [T, K]
    if same_length_window > 0:
        allowed &= key_pos > query_pos - same_length_window
    return torch.zeros(n_query, n_keys, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))

# --------------------------------------------------------------------------------------------------
# Attention: one layer's computation, three ways to add positional information


def _summed(vectors: list[torch.Tensor]) -> torch.Tensor | None:
    """The sum of ``vectors`` (broadcast), the first itself when alone; None for none."""
    return functools.reduce(operator.add, vectors) if vectors else None


class MultiHeadAttention(nn.Module):
    """Multi-head attention of a chunk's rows over the layer's window [memory ; chunk], plus residual and layer norm.

    The layer (:class:`~txlab.models.transformer.Block`) projects the rows (:meth:`norm`, :meth:`queries`,
    :meth:`keys_values`) and calls this module with the queries and the window's keys and values (:meth:`forward`).
    Subclasses say what the score is, in one place, :meth:`score_terms`: the score of query i and key j as a sum of
    terms, each a query-side vector dotted with key j or with the position key of the distance i - j. Training,
    inference and :func:`~txlab.models.transformer.capture_attention` all read that one definition: the kernels take
    its terms as one product with the keys and one with the position keys (:meth:`score`), and a record is computed
    from the same two (and each term alone through the same products). The scaled dot product, the mask, softmax,
    attention dropout and weighted sum run in one of the kernels of :mod:`txlab.models.kernels`, which all compute
    the same attention. Projections have no biases, as in the reference code.
    """

    terms: tuple[str, ...] = ()
    """Letters of :data:`SCORE_TERMS` a record holds separately (none for absolute positions)."""

    records: list[AttentionRecord] | None = None
    """Set by :func:`~txlab.models.transformer.capture_attention`: where each forward call appends its record; None records nothing."""

    attn_kernel: str = "auto"
    """The attention kernel (``ModelConfig.attn_kernel``, :data:`~txlab.models.kernels.ATTENTION_KERNELS`; ``auto``:
    :data:`~txlab.models.kernels.AUTO_KERNEL`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        self.inner = cfg.n_head * cfg.d_head
        self.qkv_net = nn.Linear(cfg.d_model, 3 * self.inner, bias=False)
        self.o_net = nn.Linear(self.inner, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.dropatt = cfg.dropatt
        self.pre_lnorm = cfg.pre_lnorm
        self.scale = 1.0 / math.sqrt(cfg.d_head)
        self.attn_kernel = cfg.attn_kernel

    def forward(self, current: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                positions: Positions = None) -> torch.Tensor:
        """The sub-layer's output [B, T, d]: queries ``q`` [B, T, H*Dh] attend over the window's ``keys`` and ``values``
        [B, H, K, Dh] (any strides) with the score of :meth:`score_terms` and ``mask`` [T, K], on the kernel
        :func:`~txlab.models.kernels.choose_kernel` picks from :attr:`attn_kernel`; then the output projection and
        the residual ``current`` [B, T, d] (post-LN: normalised)."""
        batch, n_query, _ = q.shape
        q = q.view(batch, n_query, self.n_head, self.d_head)  # [B, T, H, Dh]
        gradients = torch.is_grad_enabled()
        dropatt = self.dropatt if self.training else 0.0
        kernel = choose_kernel(self.attn_kernel, relative=positions is not None, gradients=gradients, dropatt=dropatt)
        terms = self.score_terms(q, positions)
        content_q, by_distance = self.score(terms, positions, shared_keys=not gradients)
        if self.records is not None:
            self.records.append(self._record(terms, content_q, by_distance, keys, mask, positions))
        attend = ATTENTION_KERNELS[kernel]
        attn = attend(content_q.transpose(1, 2), keys, values, by_distance, mask, self.scale, dropatt)  # q [B, H, T, Dh] -> [B, H, T, Dh]
        attn = attn.transpose(1, 2).reshape(batch, n_query, self.inner)  # [B, H, T, Dh] -> [B, T, H*Dh]
        out = self.drop(self.o_net(attn))
        return current + out if self.pre_lnorm else self.layer_norm(current + out)

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer projects of rows ``x``: LN(x) with pre-LN, else x itself (post-LN normalises its output)."""
        return self.layer_norm(x) if self.pre_lnorm else x

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """Queries [B, R, H*Dh] of normalised rows ``x`` [B, R, d] (:meth:`norm`)."""
        return F.linear(x, self.qkv_net.weight[: self.inner])

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, R, Dh] (views, head-major) of normalised rows ``x`` [B, R, d] (:meth:`norm`)."""
        kv = F.linear(x, self.qkv_net.weight[self.inner :])  # [B, R, 2*H*Dh]
        keys, values = kv.view(kv.size(0), kv.size(1), 2, self.n_head, self.d_head).unbind(2)  # [B, R, H, Dh] each
        return keys.transpose(1, 2), values.transpose(1, 2)  # [B, R, H, Dh] -> [B, H, R, Dh] each

    def score_terms(self, q: torch.Tensor, positions: Positions) -> dict[str, ScoreTerm]:
        """The score of query i and key j, term by term, for queries ``q`` [B, T, H, Dh] (the scheme's definition)."""
        raise NotImplementedError

    def score(self, terms: dict[str, ScoreTerm], positions: Positions, shared_keys: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the kernels take of the score ``terms``: the content query [B, T, H, Dh], the sum of the vectors
        dotted with the keys (the kernel multiplies it by them, scaled), and the scaled position scores by distance
        [B, H, T, K+1], the sum of the vectors dotted with the position keys, multiplied by them once (a new
        tensor; None without positional terms). ``shared_keys``: by the position keys one batch row at a time
        (:func:`~txlab.models.kernels.matmul_shared_keys`, without autograd), not by a broadcast product."""
        content_q = _summed([term.vector for term in terms.values() if not term.positional])
        position_q = _summed([term.vector for term in terms.values() if term.positional])
        if position_q is None:
            return content_q, None
        matmul = matmul_shared_keys if shared_keys else torch.matmul
        return content_q, matmul((position_q * self.scale).transpose(1, 2), positions.position_keys)  # [B, H, T, K+1]

    @torch.no_grad()
    def _record(self, terms: dict[str, ScoreTerm], content_q: torch.Tensor, by_distance: torch.Tensor | None, keys: torch.Tensor,
                mask: torch.Tensor, positions: Positions) -> AttentionRecord:
        """What the kernel computes from the score it was given, observed beside it: the scores and probabilities from
        that content query and those position scores, and the terms :attr:`terms` alone through the same products.
        The kernel itself is left alone, so recording changes no output."""
        bias = mask if by_distance is None else mask + rel_shift(by_distance)  # [T, K] or [B, H, T, K]
        scores = torch.matmul(content_q.transpose(1, 2), keys.transpose(-1, -2)) * self.scale + bias  # [B, H, T, K]
        alone = {name: self._term_scores(terms[name], keys, positions, scores.shape) for name in self.terms}
        return AttentionRecord(scores.softmax(-1), scores, alone, mask)

    def _term_scores(self, term: ScoreTerm, keys: torch.Tensor, positions: Positions, shape: torch.Size) -> torch.Tensor:
        """One term's scaled, unmasked scores [B, H, T, K] alone: the product :meth:`score` sums it into."""
        if term.vector.dim() == 4:
            vector = term.vector.transpose(1, 2)  # [B, T, H, Dh] -> [B, H, T, Dh]
        else:  # the same for every query: one row against the keys, but one per query against the distances, which
            # rel_shift re-indexes row by row
            vector = term.vector[:, None, :].expand(-1, shape[2] if term.positional else 1, -1)  # [H, Dh] -> [H, 1 or T, Dh]
        vector = vector * self.scale
        if term.positional:
            return rel_shift(torch.matmul(vector, positions.position_keys)).expand(shape)  # [.., T, K+1] -> [.., T, K]
        return torch.matmul(vector, keys.transpose(-1, -2)).expand(shape)  # [.., T or 1, K]


class AbsoluteAttention(MultiHeadAttention):
    """Plain causal scaled dot-product attention. The positions live in the inputs, so the score is one product
    that mixes content and position, and a record holds no separate terms."""

    def score_terms(self, q, positions: None):
        """q_i . k_j, query and key projected from inputs that carry their positions."""
        return {"q.k": ScoreTerm(q, positional=False)}


class RelativeSinusoidAttention(MultiHeadAttention):
    """The paper's relative attention (Sec. 3.3): the fixed sinusoid R of the distance, its own key projection
    W_{k,R} (``r_net``, separate from the content keys'), and the global biases u and v, which arrive in
    :class:`RelativeSinusoidPositions`.
    """

    terms = ("a", "b", "c", "d")

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.r_net = nn.Linear(cfg.d_model, cfg.n_head * cfg.d_head, bias=False)

    def position_keys(self, r: torch.Tensor) -> torch.Tensor:
        """W_{k,R} R for every distance of r, the sinusoids of :func:`relative_distances` [K+1, d],
        laid out for a matmul: [H, Dh, K+1]."""
        return self.r_net(r).view(-1, self.n_head, self.d_head).permute(1, 2, 0)  # [K+1, H, Dh] -> [H, Dh, K+1]

    def score_terms(self, q, positions: RelativeSinusoidPositions):
        """The paper's score of query i and key j, term by term:

            (a) q_i . k_j    (b) q_i . W_{k,R} R_{i-j}    (c) u . k_j    (d) v . W_{k,R} R_{i-j}

        The kernels compute it as two products, (a) + (c) = (q_i + u) . k_j and (b) + (d) = (q_i + v) . W_{k,R} R_{i-j},
        the second for all K+1 distances at once and re-indexed by :func:`~txlab.models.kernels.rel_shift`.
        """
        return {
            "a": ScoreTerm(q, positional=False),
            "b": ScoreTerm(q, positional=True),
            "c": ScoreTerm(positions.content_bias_u, positional=False),
            "d": ScoreTerm(positions.position_bias_v, positional=True),
        }


class LearnedRelativeAttention(MultiHeadAttention):
    """Shaw et al. (2018): a learned embedding E per distance, per layer and head.

    E has one row per distance 0 .. n_dist-1; longer distances share the last row (and, at
    evaluation, distances beyond clamp_len share the row of clamp_len). There are no global biases,
    so the score has no terms (c) and (d).
    """

    terms = ("a", "b")

    def __init__(self, cfg: ModelConfig, n_dist: int):
        super().__init__(cfg)
        self.rel_emb = nn.Parameter(torch.empty(n_dist, cfg.n_head, cfg.d_head))
        nn.init.normal_(self.rel_emb, std=0.02)

    def position_keys(self, distances: torch.Tensor) -> torch.Tensor:
        """E for every distance of :func:`relative_distances` [K+1] (clamped by clamp_len, not yet by
        the table), laid out for a matmul: [H, Dh, K+1]."""
        rows = distances.clamp(0, self.rel_emb.size(0) - 1)  # [K+1]
        return self.rel_emb[rows].permute(1, 2, 0)  # [K+1, H, Dh] (a gather of K+1 rows, not of K*T pairs) -> [H, Dh, K+1]

    def score_terms(self, q, positions: LearnedRelativePositions):
        """(a) q_i . k_j    (b) q_i . E_{i-j}"""
        return {"a": ScoreTerm(q, positional=False), "b": ScoreTerm(q, positional=True)}
