"""Transformer-XL (Dai et al. 2019) and the vanilla Transformer of Al-Rfou et al. (2018).

Shapes, batch first, used throughout this file:

    B  batch rows (independent streams)         H   attention heads
    T  current positions (queries)              Dh  size of one head
    M  memory positions carried from the past   d   model width (d_model)
    K  keys = M + T, the window [memory ; current]
    V  vocabulary size

A layer sees its *window* [B, K, d]: the memory (the detached inputs this layer saw in earlier
chunks, oldest first) followed by the current inputs; the last T rows are the queries. Within the
window, key j sits at position j and query i at position M + i, so the distance from query i to key j
is M + i - j (0 for the query itself, negative for future keys, which are masked).

The file reads top down like the paper: the interfaces (the memory, the positional inputs each
scheme's attention takes, the score terms), the paper's pieces (sinusoids, relative distances and
the relative shift, the mask, the memory update of segment-level recurrence), the three attention
variants (one per positional scheme), the position-wise feed-forward and a layer (Block), the
language model that stacks them, its cached evaluation state, and last the CPU kernels the
attention runs on.

In evaluation (eval mode, no autograd) the state is a :class:`CachedMemory`: the same per-layer memory,
plus the keys and values each layer already projected from it, so that a chunk projects only its own
rows and the position keys are computed once per layer, not once per chunk (:meth:`TransformerXL._hidden_cached`).
Training, which changes the weights every step, re-projects the window every chunk as the paper does.

For analysis, :func:`capture_attention` makes every layer also record its attention probabilities
and the paper's score terms (a)-(d) separately (:class:`AttentionRecord`); it is off by default.

Positional schemes (``ModelConfig.pos_enc``):

- ``ours``: the paper's four-term relative attention (Sec. 3.3) with the fixed sinusoid R of the
  distance, a separate key projection W_{k,R} (``r_net``) and the global content and position
  biases u and v (:class:`RelativeSinusoidPositions`).
- ``shaw``: Shaw et al. (2018): a learned embedding per distance, per layer; terms (a) and (b)
  (:class:`LearnedRelativePositions`).
- ``vaswani``: the absolute sinusoid added to the embedding output (first layer only).
- ``alrfou``: learned absolute embeddings added to the input of every layer.

For the two absolute schemes in the Transformer-XL family the position of a key is its distance
from the newest token of the window (K-1 for the oldest memory row, 0 for the last current token),
re-assigned at every chunk, as in the authors' code: the current tokens keep the positions they had
in training whatever the memory length, and only far memory rows meet unseen positions (a learned
table repeats its last row beyond its length). Memory always holds the inputs *without* positions
and positions are added to a new tensor, so a cached state is never modified. The vanilla
Transformer counts positions from the start of its window instead (0 = first token), so a token's
prediction does not depend on how many tokens follow it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.interface import Context, LanguageModel, LMOutput, ModelCounts, check_target_shape
from txlab.models.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax, vocabulary_counts

# --------------------------------------------------------------------------------------------------
# Interfaces: the memory, the positional inputs of attention, the score terms

Memory = list[torch.Tensor]
"""Transformer-XL state: per layer, the last (up to mem_len) inputs of that layer, [B, M, d]."""


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


class AttentionRecord(NamedTuple):
    """What one attention layer computed for one chunk, recorded under :func:`capture_attention`."""

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
# Positions, masks, the relative shift and the memory update


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


def rel_shift(by_distance: torch.Tensor) -> torch.Tensor:
    """Re-index position scores from 'by distance' to 'by key' (the relative shift, Appendix B).

    ``by_distance[..., i, c]`` scores query i against distance K-1-c (the layout of
    :func:`relative_distances`, K+1 columns). Query i sits at window position M+i, so key j is at
    distance M+i-j, that is column c = j + T-1-i: row i must move left by T-1-i. Flattened, that
    cell is at i*(K+1) + j + T-1-i = (T-1) + i*K + j, so dropping the first T-1 entries of the
    flat block and reading T rows of K does the whole shift -- the paper's pad-and-reshape trick,
    here without a copy because the extra distance -1 already pads every row. Cells of future
    keys (j > M+i) read neighbouring entries and must be masked.
    Input [..., T, K+1] with contiguous rows -> a view [..., T, K].
    """
    *lead, n_query, n_cols = by_distance.shape
    n_keys = n_cols - 1
    flat = by_distance.flatten(-2)  # [..., T*(K+1)]
    return flat[..., n_query - 1 : n_query - 1 + n_query * n_keys].unflatten(-1, (n_query, n_keys))  # [..., T, K]


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


def kept_memory_rows(n_window: int, mem_len: int) -> int:
    """How many rows of a layer's window the next memory keeps: its last ``mem_len``, or all if fewer."""
    return min(n_window, mem_len)


def update_memory(memory: torch.Tensor, inputs: torch.Tensor, mem_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment-level recurrence (Sec. 3.2) for one layer: the extended context h~ = [SG(m) o h] and the next memory.

    ``memory`` m [B, M, d] is what the layer saw in earlier chunks, already cut off from the graph
    (SG, stop-gradient: the memory was detached when it was stored); ``inputs`` h [B, T, d] are the
    layer's inputs for this chunk. Returns the window h~ [B, K, d] the layer attends over, and the
    next memory: the last ``mem_len`` rows of h~, detached [B, min(K, mem_len), d] (an empty
    memory [B, 0, d] for ``mem_len`` 0). The cached evaluation state keeps the same rows
    (:func:`_update_memory_rows`, through :func:`kept_memory_rows`).
    """
    window = torch.cat([memory, inputs], dim=1)  # [B, K, d]
    if mem_len == 0:
        return window, inputs.new_zeros(inputs.size(0), 0, inputs.size(-1))  # [B, 0, d]: no view keeping the window alive
    n_keys = window.size(1)
    return window, window[:, n_keys - kept_memory_rows(n_keys, mem_len) :].detach()  # [B, min(K, mem_len), d]


# --------------------------------------------------------------------------------------------------
# Attention: one shared skeleton, three ways to add positional information


class MultiHeadAttention(nn.Module):
    """Multi-head attention of the current rows of a window over the whole window, plus residual.

    Subclasses choose the positional terms by overriding :meth:`position_scores`: the query used for
    the content term and the scaled position scores by distance [B, H, T, K+1] (none for absolute
    positions), given the layer's :data:`Positions`. The scaled dot product, the mask, softmax,
    attention dropout and weighted sum run in one of the :data:`ATTENTION_KERNELS`, which all compute
    the same attention. Projections have no biases, as in the reference code.
    """

    terms: tuple[str, ...] = ()
    """Letters of :data:`SCORE_TERMS` that :meth:`score_terms` returns (none for absolute positions)."""

    records: list[AttentionRecord] | None = None
    """Set by :func:`capture_attention`: where each forward call appends its record; None records nothing."""

    attn_kernel: str = "auto"
    """The attention kernel (``ModelConfig.attn_kernel``, :data:`ATTENTION_KERNELS`; ``auto``: :data:`AUTO_KERNEL`)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        inner = cfg.n_head * cfg.d_head
        self.qkv_net = nn.Linear(cfg.d_model, 3 * inner, bias=False)
        self.o_net = nn.Linear(inner, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.dropatt = cfg.dropatt
        self.pre_lnorm = cfg.pre_lnorm
        self.scale = 1.0 / math.sqrt(cfg.d_head)
        self.attn_kernel = cfg.attn_kernel

    def position_scores(self, q: torch.Tensor, positions: Positions, shared_keys: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(query for the content term [B, T, H, Dh], scaled position scores by distance [B, H, T, K+1], a new
        tensor, or None for schemes without position scores). ``shared_keys``: multiply by the position keys
        one batch row at a time (:func:`matmul_shared_keys`, without autograd), not by a broadcast product."""
        return q, None

    def score_terms(self, q: torch.Tensor, k: torch.Tensor, positions: Positions) -> dict[str, torch.Tensor]:
        """The score's terms separately (see :attr:`AttentionRecord.terms`) for q [B, T, H, Dh], k [B, K, H, Dh]."""
        return {}

    def forward(self, window: torch.Tensor, n_query: int, mask: torch.Tensor, positions: Positions = None) -> torch.Tensor:
        batch, n_keys, _ = window.shape
        inner = self.n_head * self.d_head
        current = window[:, n_keys - n_query :]  # [B, T, d] the residual stream
        x = self.layer_norm(window) if self.pre_lnorm else window
        # Queries only for the current rows; keys and values for the whole window.
        q = F.linear(x[:, n_keys - n_query :], self.qkv_net.weight[:inner])  # [B, T, H*Dh]
        kv = F.linear(x, self.qkv_net.weight[inner:])  # [B, K, 2*H*Dh]
        keys, values = kv.view(batch, n_keys, 2, self.n_head, self.d_head).unbind(2)  # [B, K, H, Dh] each
        return self.attend_projected(current, q, keys.transpose(1, 2), values.transpose(1, 2), mask, positions)  # [B, H, K, Dh] each

    def attend_projected(self, current: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                         positions: Positions) -> torch.Tensor:
        """The layer's output rows [B, T, d] from its residual rows ``current`` [B, T, d], their queries
        ``q`` [B, T, H*Dh] and the keys and values of the whole window ``keys``, ``values`` [B, H, K, Dh] (any strides).
        The attention itself runs on the kernel :func:`choose_kernel` picks from :attr:`attn_kernel`."""
        batch, n_query, _ = current.shape
        inner = self.n_head * self.d_head
        q = q.view(batch, n_query, self.n_head, self.d_head)  # [B, T, H, Dh]
        gradients = torch.is_grad_enabled()
        dropatt = self.dropatt if self.training else 0.0
        kernel = choose_kernel(self.attn_kernel, relative=bool(self.terms), gradients=gradients, dropatt=dropatt)
        content_q, by_distance = self.position_scores(q, positions, shared_keys=not gradients)
        if self.records is not None:
            bias = mask if by_distance is None else mask + rel_shift(by_distance)
            self.records.append(self._record(q, keys.transpose(1, 2), content_q, bias, mask, positions))  # keys [B, K, H, Dh]
        attend = ATTENTION_KERNELS[kernel]
        attn = attend(content_q.transpose(1, 2), keys, values, by_distance, mask, self.scale, dropatt)  # q [B, H, T, Dh] -> [B, H, T, Dh]
        attn = attn.transpose(1, 2).reshape(batch, n_query, inner)  # [B, H, T, Dh] -> [B, T, H*Dh]
        out = self.drop(self.o_net(attn))
        return current + out if self.pre_lnorm else self.layer_norm(current + out)

    @torch.no_grad()
    def _record(self, q, k, content_q, bias, mask, positions: Positions) -> AttentionRecord:
        """The scores and probabilities the attention kernel computes, recomputed beside it rather than taken
        from it, so that recording leaves the kernel, and so every output, untouched."""
        keys_t = k.permute(0, 2, 3, 1)  # [B, K, H, Dh] -> [B, H, Dh, K]
        scores = torch.matmul(content_q.transpose(1, 2), keys_t) * self.scale + bias  # [B, H, T, K]
        return AttentionRecord(scores.softmax(-1), scores, self.score_terms(q, k, positions), mask)


class AbsoluteAttention(MultiHeadAttention):
    """Term (a) only: plain causal scaled dot-product attention (positions live in the inputs)."""


class RelativeSinusoidAttention(MultiHeadAttention):
    """The paper's relative attention, score = (a) + (b) + (c) + (d):

        term_ac = (q_i + u) . k_j                  content, and the global content bias u
        term_bd = (q_i + v) . W_{k,R} R_{i-j}      content-dependent position, global position bias v

    R is the fixed sinusoid of the distance and W_{k,R} (``r_net``) is separate from the content key
    projection; u and v arrive in :class:`RelativeSinusoidPositions`. term_bd is computed for all
    K+1 distances with one matmul and re-indexed by :func:`rel_shift` inside the attention kernel, which
    computes term_ac as the content product with the query q + u.
    """

    terms = ("a", "b", "c", "d")

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.r_net = nn.Linear(cfg.d_model, cfg.n_head * cfg.d_head, bias=False)

    def position_keys(self, r: torch.Tensor) -> torch.Tensor:
        """W_{k,R} R for every distance of r, the sinusoids of :func:`relative_distances` [K+1, d],
        laid out for a matmul: [H, Dh, K+1]."""
        return self.r_net(r).view(-1, self.n_head, self.d_head).permute(1, 2, 0)  # [K+1, H, Dh] -> [H, Dh, K+1]

    def position_scores(self, q, positions: RelativeSinusoidPositions, shared_keys: bool):
        qv = ((q + positions.position_bias_v) * self.scale).transpose(1, 2)  # [B, T, H, Dh] -> [B, H, T, Dh]
        matmul = matmul_shared_keys if shared_keys else torch.matmul
        return q + positions.content_bias_u, matmul(qv, positions.position_keys)  # [B, T, H, Dh], [B, H, T, K+1]

    def score_terms(self, q, k, positions: RelativeSinusoidPositions):
        """(a) q.k, (b) q.W_{k,R}R, (c) u.k, (d) v.W_{k,R}R, each computed on its own."""
        batch, n_query = q.shape[:2]
        keys_t = k.permute(0, 2, 3, 1)  # [B, K, H, Dh] -> [B, H, Dh, K]
        q = q.transpose(1, 2) * self.scale  # [B, T, H, Dh] -> [B, H, T, Dh]
        content_bias = (positions.content_bias_u * self.scale)[:, None, :]  # [H, 1, Dh]: the same for every query
        # rel_shift re-indexes row by row, so (d) needs its (identical) row for every query.
        position_bias = (positions.position_bias_v * self.scale)[:, None, :].expand(-1, n_query, -1)  # [H, 1, Dh] -> [H, T, Dh]
        term_a = torch.matmul(q, keys_t)  # [B, H, T, K]
        shape = term_a.shape
        return {
            "a": term_a,
            "b": rel_shift(torch.matmul(q, positions.position_keys)),  # [B, H, T, K+1] -> [B, H, T, K]
            "c": torch.matmul(content_bias, keys_t).expand(shape),  # [B, H, 1, K] -> [B, H, T, K]
            "d": rel_shift(torch.matmul(position_bias, positions.position_keys)).expand(shape),  # [H, T, K+1] -> [H, T, K] -> [B, H, T, K]
        }


class LearnedRelativeAttention(MultiHeadAttention):
    """Shaw et al. (2018): score = (a) q_i . k_j + (b) q_i . E_{i-j}, E learned per layer and head.

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

    def position_scores(self, q, positions: LearnedRelativePositions, shared_keys: bool):
        scaled_q = (q * self.scale).transpose(1, 2)  # [B, T, H, Dh] -> [B, H, T, Dh]
        matmul = matmul_shared_keys if shared_keys else torch.matmul
        return q, matmul(scaled_q, positions.position_keys)  # [B, T, H, Dh], [B, H, T, K+1]

    def score_terms(self, q, k, positions: LearnedRelativePositions):
        """(a) q.k and (b) q.E, each computed on its own."""
        scaled_q = (q * self.scale).transpose(1, 2)  # [B, T, H, Dh] -> [B, H, T, Dh]
        return {
            "a": torch.matmul(scaled_q, k.permute(0, 2, 3, 1)),  # [B, H, T, Dh] @ [B, H, Dh, K] -> [B, H, T, K]
            "b": rel_shift(torch.matmul(scaled_q, positions.position_keys)),  # [B, H, T, K+1] -> [B, H, T, K]
        }


# --------------------------------------------------------------------------------------------------
# Feed-forward and the layer


class PositionwiseFF(nn.Module):
    """Linear(d, d_inner) + ReLU + dropout + Linear(d_inner, d) + dropout, residual, layer norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.core = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_inner),
            nn.ReLU(inplace=True),
            Dropout(cfg.dropout),
            nn.Linear(cfg.d_inner, cfg.d_model),
            Dropout(cfg.dropout),
        )
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.pre_lnorm = cfg.pre_lnorm

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.pre_lnorm:
            return h + self.core(self.layer_norm(h))
        return self.layer_norm(h + self.core(h))


class Block(nn.Module):
    """One Transformer layer: attention of the current rows over the window, then feed-forward."""

    def __init__(self, attn: MultiHeadAttention, ff: PositionwiseFF):
        super().__init__()
        self.attn, self.ff = attn, ff

    def forward(self, window: torch.Tensor, n_query: int, mask: torch.Tensor, positions: Positions = None,
                projected: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """window [B, K, d] -> new states of its last ``n_query`` rows [B, T, d].

        ``projected``: the queries [B, T, H*Dh] and the whole window's keys and values [B, H, K, Dh], already
        computed (the cached evaluation state); ``window`` is then only the residual rows [B, T, d].
        """
        if projected is None:
            return self.ff(self.attn(window, n_query, mask, positions))
        return self.ff(self.attn.attend_projected(window, *projected, mask, positions))


# --------------------------------------------------------------------------------------------------
# The language model


class TransformerXL(LanguageModel):
    """Transformer-XL with segment-level recurrence and a choice of positional encoding.

    The state is a list with one memory [B, M, d] per layer: the last up-to-``mem_len`` inputs of
    that layer (the embedding output for the first), detached. After a chunk, a layer's memory is the
    last mem_len rows of [old memory ; this chunk's inputs] (:func:`update_memory`), so it may span
    several past chunks.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.pos_enc = cfg.pos_enc
        d_embed = cfg.d_embed or cfg.d_model
        cutoffs = list(cfg.cutoffs) if cfg.adaptive else []
        self.word_emb = AdaptiveEmbedding(cfg.n_token, d_embed, cfg.d_model, cutoffs, cfg.div_val, full_width_proj=cfg.full_width_proj)
        self.crit = AdaptiveLogSoftmax(cfg.n_token, d_embed, cfg.d_model, cutoffs, cfg.div_val, full_width_proj=cfg.full_width_proj)
        self.vocab_size = cfg.n_token
        self.crit.tie_to(self.word_emb, cfg.tie_weight, cfg.tie_projs)
        self.drop = Dropout(cfg.dropout)
        self.n_pos = cfg.max_len or self._default_max_len(cfg)
        """Rows of a learned position table (shaw: distances, alrfou: positions)."""

        self.blocks = nn.ModuleList(Block(self._attention(cfg), PositionwiseFF(cfg)) for _ in range(cfg.n_layer))
        if self.pos_enc == "ours":
            # The paper's global content bias u and global position bias v (Sec. 3.3), shared by all layers
            # unless untied; the attribute names are those of the checkpoints and the weight converters.
            n_bias = cfg.n_layer if cfg.untie_r else 1
            self.u = nn.Parameter(torch.empty(n_bias, cfg.n_head, cfg.d_head))
            self.v = nn.Parameter(torch.empty(n_bias, cfg.n_head, cfg.d_head))
        if self.pos_enc == "alrfou":
            self.abs_pos_emb = nn.Parameter(torch.empty(cfg.n_layer, self.n_pos, cfg.d_model))
        self._init_weights()
        self.set_context(Context(cfg.mem_len, cfg.same_length, cfg.clamp_len))

    @staticmethod
    def _default_max_len(cfg: ModelConfig) -> int:
        return cfg.tgt_len + cfg.mem_len

    def _attention(self, cfg: ModelConfig) -> MultiHeadAttention:
        if cfg.pos_enc == "ours":
            return RelativeSinusoidAttention(cfg)
        if cfg.pos_enc == "shaw":
            return LearnedRelativeAttention(cfg, self.n_pos)
        return AbsoluteAttention(cfg)

    def compile_layers(self) -> None:
        """torch.compile every layer (``ModelConfig.compile``): the training path, window scoring and the cached
        evaluation state all run their layers through ``Block.__call__``. The weights and their names are
        unchanged, so checkpoints load either way. Each new chunk shape compiles again (automatic dynamic
        shapes after the first change); outside the layers (embedding, memory, softmax) nothing is compiled."""
        for block in self.blocks:
            block.compile()

    def set_attn_kernel(self, kernel: str) -> None:
        """Run every layer's attention on ``kernel`` (``ModelConfig.attn_kernel``: auto, unfused or sdpa)."""
        if kernel not in ("auto", *ATTENTION_KERNELS):
            raise TxlabError(f"unknown attention kernel {kernel!r}; valid: auto, {', '.join(ATTENTION_KERNELS)}")
        for block in self.blocks:
            block.attn.attn_kernel = kernel

    def _init_weights(self) -> None:
        """As the reference: N(0, 0.02) weights, zero biases; the softmax module initialises itself."""
        for block in self.blocks:
            for module in block.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, std=0.02)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
        for name in ("u", "v", "abs_pos_emb"):
            if hasattr(self, name):
                nn.init.normal_(getattr(self, name), std=0.02)

    # -- the LanguageModel interface ---------------------------------------------------------------

    def init_state(self, batch_size: int) -> Memory:
        p = self.word_emb.emb_layers[0].weight
        return [p.new_zeros(batch_size, 0, self.cfg.d_model) for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, state: Memory, targets: torch.Tensor | None = None) -> LMOutput:
        check_target_shape(tokens, targets)
        hidden, new_state = self._hidden(tokens, state, keep=self.context.mem_len, n_last=0)
        nll = None
        if targets is not None:
            d = hidden.size(-1)
            nll = self.crit.nll(hidden.reshape(-1, d), targets.reshape(-1)).view(targets.shape)  # [B, T]
        return LMOutput(nll, hidden, new_state)

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        lp = self.crit.log_prob(hidden.reshape(-1, hidden.size(-1)))  # [N, V]
        return lp.view(*hidden.shape[:-1], -1)  # [*, V]

    def window_last_nll(self, windows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """NLL [N] of ``targets`` [N] after reading each window [N, L] from an empty memory.

        Equals ``forward(windows, init_state(N)).nll[:, -1]`` for targets at the last position, but
        the last layer, the output dropout and the softmax run only for the last position: this is
        the vanilla Transformer's sliding-window evaluation (one prediction per window).
        """
        return self.window_tail_nll(windows, targets[:, None])[:, 0]

    def window_tail_nll(self, windows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """NLL [N, s] of ``targets`` [N, s] at the last s positions of each window [N, L], read from an empty memory.

        Equals ``forward(windows, init_state(N)).nll[:, -s:]``, but the last layer, the output dropout and
        the softmax run only for those s positions: strided recompute, whose windows advance by s tokens
        and score their last s predictions (each from L-s+1 to L tokens of context).
        """
        hidden, _ = self._hidden(windows, self.init_state(windows.size(0)), keep=0, n_last=targets.size(1))
        return self.crit.nll(hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)).view(targets.shape)

    @property
    def carries_state(self) -> bool:
        """Only with memory: without it (mem_len 0, the vanilla Transformer) every chunk starts afresh."""
        return self.context.mem_len > 0

    # -- the stack: positions, memory, layers ----------------------------------------------------------

    def _hidden(self, tokens: torch.Tensor, state: Memory, keep: int, n_last: int) -> tuple[torch.Tensor, Memory]:
        """Final hidden states [B, T, d] (only the last [B, n_last, d] when ``n_last`` > 0) and the next memory.

        Once per chunk: the token embeddings, the mask and what the relative schemes' position keys
        are computed from. Then, layer by layer: the memory update (the window [SG(m) o h] and the
        layer's next memory, :func:`update_memory`), the absolute schemes' positions added to the
        window, and the layer itself with its positional inputs. ``keep``: memory rows kept per layer
        for the next chunk (0 = none). ``n_last`` > 0: the top layer computes only the last ``n_last``
        rows (window scoring). In evaluation this runs as :meth:`_hidden_cached`.
        """
        self._check_chunk(tokens, state)
        if self._uses_eval_cache(keep, n_last):
            return self._hidden_cached(tokens, state, keep)
        n_query, n_mem = tokens.size(1), state[0].size(1)
        n_keys = n_mem + n_query
        h = self.drop(self.word_emb(tokens))  # [B, T, d]
        mask = attention_mask(n_query, n_mem, self._same_length_window(), h.dtype, h.device)  # [T, K]
        position_source = self._relative_position_source(n_keys, h.dtype, h.device)
        next_state: Memory = []
        for i, (block, memory) in enumerate(zip(self.blocks, state)):
            window, next_memory = update_memory(memory, h, keep)  # [B, K, d], [B, min(K, keep), d]
            next_state.append(next_memory)
            if self._adds_absolute_positions(i):
                window = window + self._absolute_positions(i, n_keys, h.dtype)  # a new tensor: the memory holds inputs without positions
            n_out = self._output_rows(i, n_query, n_last)
            h = block(window, n_out, mask[n_query - n_out :], self._layer_positions(i, position_source))  # [B, n_out, d]
        return self.drop(h), next_state

    def _output_rows(self, layer: int, n_query: int, n_last: int) -> int:
        """Rows a layer computes: all T, except the top layer with ``n_last`` > 0 (window scoring), which needs only the last n_last."""
        return min(n_last, n_query) if n_last > 0 and layer == len(self.blocks) - 1 else n_query

    def _check_chunk(self, tokens: torch.Tensor, state: Memory) -> None:
        """Callers (the trainer, evaluation, generation) check what users give; a mismatch here is a bug."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, time], got shape {tuple(tokens.shape)}")
        if len(state) != len(self.blocks) or state[0].size(0) != tokens.size(0):
            raise ValueError("the state does not belong to this model and batch size: use model.init_state(batch_size)")

    def _same_length_window(self) -> int:
        """The ``same_length`` window of :func:`attention_mask`: mem_len when it is on, else 0 (plain causal)."""
        ctx = self.context
        return ctx.mem_len if ctx.same_length and ctx.mem_len > 0 else 0

    def _relative_sinusoid_positions(self, layer: int, position_keys: torch.Tensor) -> RelativeSinusoidPositions:
        """Layer ``layer``'s inputs of the paper's relative attention: its u and v (shared by all layers
        unless ``untie_r``) and its position keys [H, Dh, K+1]."""
        bias = layer if self.cfg.untie_r else 0
        return RelativeSinusoidPositions(content_bias_u=self.u[bias], position_bias_v=self.v[bias], position_keys=position_keys)

    def _relative_position_source(self, n_keys: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """What the relative schemes compute every layer's position keys from, once per chunk of ``n_keys`` keys:
        the paper's R, the sinusoids of the K + 1 :func:`relative_distances` (with dropout, as the authors'
        code) [K+1, d], or Shaw's distances [K+1]; None for the absolute schemes."""
        clamp_len = self.context.clamp_len
        if self.pos_enc == "ours":
            distances = relative_distances(n_keys, clamp_len, device).to(dtype)  # [K+1]
            return self.drop(sinusoid(distances, self.cfg.d_model))  # [K+1, d]
        if self.pos_enc == "shaw":
            return relative_distances(n_keys, clamp_len, device)  # [K+1]
        return None

    def _layer_positions(self, layer: int, source: torch.Tensor | None) -> Positions:
        """Layer ``layer``'s positional inputs from :meth:`_relative_position_source` (built layer by layer,
        so that only one layer's position keys are alive at a time in evaluation)."""
        if source is None:
            return None
        position_keys = self.blocks[layer].attn.position_keys(source)  # [H, Dh, K+1]
        if self.pos_enc == "ours":
            return self._relative_sinusoid_positions(layer, position_keys)
        return LearnedRelativePositions(position_keys)

    def _absolute_position_ids(self, n_keys: int) -> torch.Tensor:
        """Position of every window row: its distance from the newest row, clamped (see module doc)."""
        ids = torch.arange(n_keys - 1, -1, -1, device=self.device)  # [K]
        if self.context.clamp_len > 0:
            ids = ids.clamp(max=self.context.clamp_len)
        return ids

    def _adds_absolute_positions(self, layer: int) -> bool:
        """Whether layer ``layer``'s window gets absolute positions: every layer for ``alrfou``, the first for ``vaswani``."""
        return self.pos_enc == "alrfou" or (self.pos_enc == "vaswani" and layer == 0)

    def _absolute_positions(self, layer: int, n_keys: int, dtype: torch.dtype) -> torch.Tensor:
        """What an absolute scheme adds to layer ``layer``'s window of ``n_keys`` rows [K, d] (see
        :meth:`_adds_absolute_positions`). The rows for K are the last K rows of those for any longer
        window in the Transformer-XL family (positions count back from the newest row)."""
        ids = self._absolute_position_ids(n_keys)  # [K]
        if self.pos_enc == "vaswani":
            return sinusoid(ids.to(dtype), self.cfg.d_model)  # [K, d]
        table = self.abs_pos_emb[layer]
        return table[ids.clamp(max=table.size(0) - 1)]  # [K, d]

    # -- FLOP counts -------------------------------------------------------------------------------

    def _flops_kv_per_key(self) -> int:
        return 2 * self.cfg.d_model * 2 * self.cfg.n_head * self.cfg.d_head

    def _flops_per_query(self, n_keys: int) -> int:
        """One layer, one query: q and output projections, scores, weighted sum, feed-forward."""
        c = self.cfg
        inner = c.n_head * c.d_head
        n_score_terms = 2 if self.pos_enc in ("ours", "shaw") else 1  # (a)+(c), and (b)+(d)
        return (
            2 * c.d_model * inner * 2  # q and o projections
            + 2 * inner * n_keys * n_score_terms  # score matmuls
            + 2 * inner * n_keys  # probabilities x values
            + 2 * 2 * c.d_model * c.d_inner  # feed-forward
        )

    def _flops_io(self) -> int:
        """Input projection of the head cluster, and the output layer over the whole vocabulary
        (an upper bound for an adaptive softmax, which evaluates a tail only for its own tokens)."""
        emb_projs = [p for p in self.word_emb.emb_projs if p is not None]
        return (2 * emb_projs[0].numel() if emb_projs else 0) + self.crit.flops_per_token()

    def flops_per_token(self, n_keys: int) -> float:
        """Forward FLOPs per predicted token whose queries see ``n_keys`` keys (dense score rows).

        Each token's key/value projection is counted once: the recomputation of the memory's
        keys and values at every chunk is overhead of the streaming and is not counted, nor is
        ``r_net`` (applied once per chunk to K+1 distances and shared by every query of the batch).
        :meth:`recomputed_flops_per_token` counts that overhead, which the cached evaluation path avoids.
        """
        per_layer = self._flops_kv_per_key() + self._flops_per_query(n_keys)
        return float(self.cfg.n_layer * per_layer + self._flops_io())

    def output_flops_per_token(self) -> float:
        return float(self.crit.flops_per_token())

    def recomputed_flops_per_token(self, n_mem: int, n_query: int, batch_size: int = 1) -> float:
        """Forward FLOPs per predicted token that re-derive what an earlier chunk already computed, when a
        chunk of ``n_query`` tokens per stream (``batch_size`` streams) reads a memory of ``n_mem`` rows.

        The training path spends them in every chunk: each layer re-projects the keys and values of its
        M memory rows, and (``ours``) applies ``r_net`` to all K + 1 sinusoids. The cached evaluation path
        (:class:`CachedMemory`) does neither once the memory is full (it builds the position keys once per
        layer), so this is the work it avoids; it is never part of :meth:`flops_per_token`.
        """
        c = self.cfg
        memory_kv = n_mem * self._flops_kv_per_key() / n_query
        position_keys = 2 * c.d_model * c.n_head * c.d_head * (n_mem + n_query + 1) / (n_query * batch_size) if self.pos_enc == "ours" else 0
        return float(c.n_layer * (memory_kv + position_keys))

    def window_flops(self, length: int, n_last: int = 1) -> float:
        """Forward FLOPs of one window of :meth:`window_last_nll` (all rows but one query in the last layer),
        or of :meth:`window_tail_nll` scoring its last ``n_last`` positions."""
        n_layer = self.cfg.n_layer
        kv = n_layer * length * self._flops_kv_per_key()
        queries = ((n_layer - 1) * length + n_last) * self._flops_per_query(length)
        return float(kv + queries + n_last * self._flops_io())

    # -- evaluation with a cached state -------------------------------------------------------------

    eval_cache: bool = True
    """Evaluate with :class:`CachedMemory` (on by default; see :meth:`_hidden_cached`). Off, evaluation
    runs the training path: every chunk re-projects the whole memory, as the authors' code does."""

    def _uses_eval_cache(self, keep: int, n_last: int) -> bool:
        """The cached path runs in evaluation mode without autograd, with memory kept (not for window scoring), and
        in full precision: its tables are kept across calls, and autocast's would outlive the autocast region."""
        return (self.eval_cache and keep > 0 and n_last == 0 and not self.training and not torch.is_grad_enabled()
                and not torch.is_autocast_enabled(self.device.type))

    def _weights_signature(self) -> tuple | None:
        """Changes whenever a parameter is written (in place: its version counter) or replaced (its storage).

        None when that cannot be told: parameters created in inference mode keep no version counter, so
        nothing computed from them is reused from one call to the next (the results stay right, only slower).
        Writes that bypass the version counter are not seen: through ``.data``, or by torch's fused optimizers
        (``torch.optim.Adam(..., fused=True)`` leaves ``_version`` unchanged on CPU in torch 2.13).
        """
        params = list(self.parameters())
        if any(p.is_inference() for p in params):
            return None
        return tuple((p.data_ptr(), p._version) for p in params)

    def _eval_tables(self, signature: tuple | None) -> dict:
        """Tables that depend only on the weights and the shapes (position keys, masks), kept while the weights are unchanged."""
        cached = getattr(self, "_tables", None)
        if cached is None or signature is None or cached[0] != signature:
            cached = (signature, {})
            self._tables = cached
        return cached[1]

    def _table_suffix(self, tables: dict, key: tuple, n_rows: int, room: int, build) -> torch.Tensor:
        """The last ``n_rows`` rows of ``build(n)``, for tables whose rows for n are the last rows of those for any
        larger n (keys by distance, or by distance from the newest row); built for ``max(n_rows, room)`` rows once."""
        table = tables.get(key)
        if table is None or table.size(0) < n_rows:
            table = tables[key] = build(max(n_rows, room))
        return table[table.size(0) - n_rows :]

    def _cached_mask(self, tables: dict, n_query: int, n_mem: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """:func:`attention_mask` [T, K], kept for the last few shapes (filling, full, the last chunk)."""
        window_len = self._same_length_window()
        mask_key = ("mask", n_query, n_mem, window_len, dtype, device)
        mask = tables.get(mask_key)
        if mask is None:
            for key in [k for k in tables if k[0] == "mask"][:-3]:
                del tables[key]
            mask = tables[mask_key] = attention_mask(n_query, n_mem, window_len, dtype, device)  # [T, K]
        return mask

    def _cached_relative_positions(self, layer: int, tables: dict, n_keys: int, room: int, dtype: torch.dtype,
                                   device: torch.device) -> Positions:
        """:meth:`_layer_positions` from a table built once for ``room`` keys: position keys
        depend on the distance only, so every chunk slices the last K + 1 distances of the same table."""
        attn, clamp_len = self.blocks[layer].attn, self.context.clamp_len
        if self.pos_enc == "ours":
            def build(n):
                distances = relative_distances(n - 1, clamp_len, device).to(dtype)  # [n]
                return attn.r_net(sinusoid(distances, self.cfg.d_model))  # [n, H*Dh]
            keys = self._table_suffix(tables, ("r", layer, clamp_len, dtype, device), n_keys + 1, room + 1, build)  # [K+1, H*Dh]
            position_keys = keys.view(-1, attn.n_head, attn.d_head).permute(1, 2, 0)  # [K+1, H, Dh] -> [H, Dh, K+1]
            return self._relative_sinusoid_positions(layer, position_keys)
        if self.pos_enc == "shaw":
            def build(n):
                return attn.position_keys(relative_distances(n - 1, clamp_len, device)).permute(2, 0, 1)  # [H, Dh, n] -> [n, H, Dh]
            keys = self._table_suffix(tables, ("shaw", layer, clamp_len, device), n_keys + 1, room + 1, build)  # [K+1, H, Dh]
            return LearnedRelativePositions(keys.permute(1, 2, 0))  # [K+1, H, Dh] -> [H, Dh, K+1]
        return None

    def _hidden_cached(self, tokens: torch.Tensor, state: Memory, keep: int) -> tuple[torch.Tensor, CachedMemory]:
        """:meth:`_hidden` in evaluation: the same hidden states and memory, reusing what earlier chunks computed.

        - Keys and values of the memory rows come from the state (:class:`CachedMemory`); each chunk
          projects only its own T rows (the training path re-projects all M + T, every chunk).
        - Position keys (``r_net`` applied to the sinusoids, or Shaw's gathered table) depend on the
          distance only: one table per layer serves every chunk, sliced to the chunk's K + 1 distances.
        - With absolute positions the key of a memory row changes with its distance from the newest
          row, so the rows' projections are kept without positions and the projected positions added:
          W (x + p) = W x + W p. With pre-LN that does not hold (LN(x + p) is not linear) and the
          layer re-projects its window, as the training path does.
        - Windows are views of preallocated stores (:class:`_RowStore`) and the memory update is
          :func:`_update_memory_rows`, which keeps the rows :func:`update_memory` keeps: a chunk copies its own rows.
        """
        n_query, n_mem = tokens.size(1), state[0].size(1)
        n_keys = n_mem + n_query
        room = keep + n_query  # the window of a stream whose memory is full (tables are built that long)
        signature = self._weights_signature()
        tables = self._eval_tables(signature)
        cached = isinstance(state, CachedMemory) and signature is not None and state.signature == signature
        h = self.drop(self.word_emb(tokens))  # [B, T, d] (no dropout in evaluation)
        dtype, device = h.dtype, h.device
        clamp_len = self.context.clamp_len
        mask = self._cached_mask(tables, n_query, n_mem, dtype, device)  # [T, K]

        inner = self.cfg.n_head * self.cfg.d_head
        layers: list[_LayerRows] = []
        for i, (block, memory) in enumerate(zip(self.blocks, state)):
            attn = block.attn
            w_q, w_kv = attn.qkv_net.weight[:inner], attn.qkv_net.weight[inner:]
            relative = self._cached_relative_positions(i, tables, n_keys, room, dtype, device)
            absolute = None  # absolute positions added to this layer's window [K, d]
            if self._adds_absolute_positions(i):
                absolute = self._table_suffix(tables, ("pos", i, clamp_len, dtype, device), n_keys, room,
                                              lambda n, i=i: self._absolute_positions(i, n, dtype))
            keeps_kv = absolute is None or not attn.pre_lnorm  # whether the layer's keys and values are kept

            def heads(kv: torch.Tensor) -> list[torch.Tensor]:
                """Keys and values [B, H, R, Dh] (views) of projected rows [B, R, 2*H*Dh]."""
                keys, values = kv.view(kv.size(0), kv.size(1), 2, attn.n_head, attn.d_head).unbind(2)  # [B, R, H, Dh] each
                return [keys.transpose(1, 2), values.transpose(1, 2)]  # [B, H, R, Dh] each

            current = h if absolute is None else h + absolute[n_mem:]  # [B, T, d] residual rows, positions added
            x = attn.layer_norm(current) if attn.pre_lnorm else current
            q = F.linear(x, w_q)  # [B, T, H*Dh]
            new = [h]
            if keeps_kv:
                new += heads(F.linear(x if absolute is None else h, w_kv))  # [B, H, T, Dh] each, without positions
            if cached:
                rows, old = state.layers[i], state.layers[i].views()
            else:
                rows, old = None, [memory]
                if keeps_kv:
                    memory_in = attn.layer_norm(memory) if attn.pre_lnorm else memory
                    old += heads(F.linear(memory_in, w_kv))  # [B, H, M, Dh] each
            windows, next_rows = _update_memory_rows(rows, old, new, keep)  # [SG(m) o h] of each kind of row, and the next memory
            layers.append(next_rows)
            if not keeps_kv:  # pre-LN over positions: re-project the whole window
                keys, values = heads(F.linear(attn.layer_norm(windows[0] + absolute), w_kv))
            elif absolute is not None:
                projected = self._table_suffix(
                    tables, ("pos_kv", i, clamp_len, dtype, device), n_keys, room,
                    lambda n, i=i, w_kv=w_kv: F.linear(self._absolute_positions(i, n, dtype), w_kv),
                )  # [K, 2*H*Dh]
                position_keys, position_values = heads(projected[None])  # [1, H, K, Dh] each
                keys, values = windows[1] + position_keys, windows[2] + position_values  # [B, H, K, Dh]
            else:
                keys, values = windows[1], windows[2]
            h = block(current, n_query, mask, relative, projected=(q, keys, values))  # [B, T, d]
        return self.drop(h), CachedMemory(layers, signature)


class VanillaTransformer(TransformerXL):
    """The vanilla Transformer LM of Al-Rfou et al. (2018): a fixed window, no memory.

    Absolute positions (learned at every layer for ``pos_enc='alrfou'``, the paper's choice, or the
    sinusoid at the input for ``'vaswani'``) count from the start of the chunk, which may hold at
    most ``max_len`` tokens (``cfg.max_len``, default ``tgt_len``). The memory settings of
    :class:`Context` are ignored: every chunk starts from nothing. Evaluate it with sliding windows
    through :meth:`window_last_nll`.
    """

    def __init__(self, cfg: ModelConfig):
        check_vanilla_encoding(cfg)
        super().__init__(cfg)
        self.max_context = self.n_pos

    @staticmethod
    def _default_max_len(cfg: ModelConfig) -> int:
        return cfg.tgt_len

    def set_context(self, context: Context) -> None:
        """Accepted and ignored: the vanilla Transformer has no memory, same_length or clamp_len."""
        self.context = Context(mem_len=0)

    def _absolute_position_ids(self, n_keys: int) -> torch.Tensor:
        return torch.arange(n_keys, device=self.device)  # [K], 0 = the first token of the window

    def _check_chunk(self, tokens: torch.Tensor, state: Memory) -> None:
        super()._check_chunk(tokens, state)
        if tokens.size(1) > self.n_pos:
            raise ValueError(
                f"the vanilla Transformer reads at most max_len={self.n_pos} tokens at once, got a chunk of {tokens.size(1)}"
            )


@contextmanager
def capture_attention(model: TransformerXL) -> Iterator[list[list[AttentionRecord]]]:
    """Record every layer's attention while the block runs: ``records[layer]`` (bottom layer first)
    gets one :class:`AttentionRecord` per forward call; the caller may clear the lists as it goes.

    The model's outputs are the same as without it, bit for bit: recording recomputes the scores
    beside the attention kernel instead of replacing it. Outside the block nothing is recorded and
    nothing is computed beyond one attribute check per layer.
    """
    layers = [block.attn for block in model.blocks]
    records: list[list[AttentionRecord]] = [[] for _ in layers]
    for attn, layer_records in zip(layers, records):
        attn.records = layer_records
    try:
        yield records
    finally:
        for attn in layers:
            attn.records = None


def check_vanilla_encoding(cfg: ModelConfig) -> None:
    if cfg.family == "vanilla" and cfg.pos_enc not in ("alrfou", "vaswani"):
        raise TxlabError(
            f"the vanilla Transformer uses absolute positions: set model.pos_enc to 'alrfou' (Al-Rfou et al.) "
            f"or 'vaswani', not {cfg.pos_enc!r}"
        )


def transformer_counts(cfg: ModelConfig) -> ModelCounts:
    """The parameters, window and FLOPs :func:`build_transformer` would give ``cfg``, without building it
    (:meth:`TransformerXL.flops_per_token`'s count: every score term, the feed-forward, the first input projection)."""
    check_vanilla_encoding(cfg)
    model_class = VanillaTransformer if cfg.family == "vanilla" else TransformerXL
    n_pos = cfg.max_len or model_class._default_max_len(cfg)
    d, inner = cfg.d_model, cfg.n_head * cfg.d_head
    vocabulary = vocabulary_counts(cfg.n_token, cfg.d_embed or d, d, list(cfg.cutoffs) if cfg.adaptive else [], cfg.div_val, cfg.full_width_proj,
                                   cfg.tie_weight, cfg.tie_projs)
    attention = 4 * d * inner + 2 * d + {"ours": d * inner, "shaw": n_pos * inner}.get(cfg.pos_enc, 0)  # qkv, o, norm; r_net or E
    feed_forward = 2 * d * cfg.d_inner + cfg.d_inner + d + 2 * d
    shared = {"ours": 2 * (cfg.n_layer if cfg.untie_r else 1) * inner, "alrfou": cfg.n_layer * n_pos * d}.get(cfg.pos_enc, 0)  # u, v; positions
    n_score_terms = 2 if cfg.pos_enc in ("ours", "shaw") else 1
    return ModelCounts(
        parameters=vocabulary.parameters + cfg.n_layer * (attention + feed_forward) + shared,
        max_context=n_pos if cfg.family == "vanilla" else None,
        layers=cfg.n_layer,
        key_flops=2 * d * 2 * inner,
        query_flops=2 * d * inner * 2 + 2 * 2 * d * cfg.d_inner,
        attend_flops=2 * inner * n_score_terms + 2 * inner,
        other_flops=vocabulary.input_flops,
        output_flops=vocabulary.output_flops,
    )


def build_transformer(cfg: ModelConfig) -> TransformerXL:
    """A freshly initialised Transformer-XL (family 'xl') or vanilla Transformer (family 'vanilla')."""
    if cfg.n_token <= 0:
        raise TxlabError("model.n_token is not set: take it from the corpus vocabulary before building the model")
    if cfg.family not in ("xl", "vanilla"):
        raise ValueError(f"build_transformer builds families 'xl' and 'vanilla', not {cfg.family!r}: build_model dispatches the others")
    model = VanillaTransformer(cfg) if cfg.family == "vanilla" else TransformerXL(cfg)
    if cfg.compile:
        model.compile_layers()
    return model


# --------------------------------------------------------------------------------------------------
# The evaluation state: memory rows with their keys and values already projected


def _rows_dim(t: torch.Tensor) -> int:
    """Where rows run in a store tensor: inputs [B, C, d] (dim 1), keys or values per head [B, H, C, Dh] (dim 2)."""
    return t.dim() - 2


class _RowStore:
    """Preallocated storage for the rows of one layer's successive windows, one tensor per kind of
    row: the layer's inputs [B, C, d], and, when they are kept, their keys and values [B, H, C, Dh]
    (head-major, so that a window's keys are a [B*H, K, Dh] view for batched products).

    Successive evaluation states of a stream share it: a chunk writes its T new rows after the last
    ones written (``fill``) and its window is a view, so a chunk copies T rows, not the M + T rows of
    ``torch.cat([memory, new])``. Rows already written are never overwritten: a state whose rows are
    not the last written (it was read twice, as when one state starts two continuations) and a full
    store move to a new store instead, which copies the memory once.
    """

    __slots__ = ("tensors", "fill", "inference")

    def __init__(self, tensors: list[torch.Tensor], fill: int):
        self.tensors, self.fill = tensors, fill
        self.inference = tensors[0].is_inference()

    @property
    def capacity(self) -> int:
        return self.tensors[0].size(1)  # the inputs' rows


class _LayerRows:
    """One layer's memory in a :class:`_RowStore`: rows ``start`` .. ``end`` of each of its tensors."""

    __slots__ = ("store", "start", "end")

    def __init__(self, store: _RowStore, start: int, end: int):
        self.store, self.start, self.end = store, start, end

    def views(self) -> list[torch.Tensor]:
        return [t.narrow(_rows_dim(t), self.start, self.end - self.start) for t in self.store.tensors]


def _update_memory_rows(rows: _LayerRows | None, old: list[torch.Tensor], new: list[torch.Tensor], keep: int) -> tuple[list[torch.Tensor], _LayerRows]:
    """The memory update of :func:`update_memory` for rows kept in a store: the window [old ; new] of each
    kind of row, as views with M + T rows, and the layer's next memory, the last ``keep`` rows of it.
    ``rows`` is where ``old`` lives (None: they are not in a store)."""
    n_old, n_new = old[0].size(1), new[0].size(1)
    total = n_old + n_new
    store = rows.store if rows is not None else None
    if (
        store is not None
        and store.fill == rows.end
        and rows.end + n_new <= store.capacity
        and store.inference == torch.is_inference_mode_enabled()  # inference tensors are written only in inference mode
    ):
        for tensor, rows_new in zip(store.tensors, new):
            tensor.narrow(_rows_dim(tensor), rows.end, n_new).copy_(rows_new)
        start = rows.start
    else:
        # Room for the next chunks: a memory of `keep` rows, then as many rows again (at least one
        # chunk), so a stream moves its memory once every ~keep/T chunks (amortised: T rows a chunk).
        capacity = total + max(keep, n_new)
        tensors = []
        for rows_old, rows_new in zip(old, new):
            dim = _rows_dim(rows_new)
            shape = list(rows_new.shape)
            shape[dim] = capacity
            tensor = rows_new.new_empty(shape)
            tensor.narrow(dim, 0, n_old).copy_(rows_old)
            tensor.narrow(dim, n_old, n_new).copy_(rows_new)
            tensors.append(tensor)
        store, start = _RowStore(tensors, 0), 0
    end = start + total
    store.fill = end
    next_memory = _LayerRows(store, end - kept_memory_rows(total, keep), end)
    return [t.narrow(_rows_dim(t), start, total) for t in store.tensors], next_memory


class CachedMemory(list):
    """A Transformer-XL memory that also carries what evaluation already computed from it.

    It *is* the :data:`Memory` (a list with one [B, M, d] tensor of inputs per layer) and can be
    passed wherever one is, training included; in addition, for every layer it keeps the keys and
    values [B, H, M, Dh] the layer projected from those rows when they were new. In evaluation the
    weights do not change from chunk to chunk, so those projections are the ones a chunk would
    compute again: :class:`TransformerXL` reads them instead and projects only the chunk's own rows.
    ``signature`` names the weights they were computed with; a state whose weights have changed
    since (a training step, a load) is treated as a plain memory and projected afresh.
    """

    def __init__(self, layers: list[_LayerRows], signature: tuple):
        super().__init__(rows.views()[0] for rows in layers)
        self.layers = layers
        self.signature = signature


# --------------------------------------------------------------------------------------------------
# CPU kernels: dropout and attention products, written for speed on CPU (docs/performance.md)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p), like ``F.dropout``.

    On CPU the keep-mask is drawn with ``torch.rand``, which is about 1.6x faster there than the
    ``bernoulli_`` sampler of ``F.dropout`` (dropout was ~15% of a 2-thread training step).
    """
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return x * torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the faster CPU sampler of :func:`dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def attend_unfused(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, by_distance: torch.Tensor | None, mask: torch.Tensor,
                   scale: float, dropatt: float) -> torch.Tensor:
    """The ``unfused`` kernel: softmax(scale * q.keys + bias), attention dropout, times values, as three explicit steps.

    q [B, H, T, Dh], keys, values [B, H, K, Dh] -> [B, H, T, Dh]; the bias is the mask [T, K] plus, for the
    relative schemes, the relative-shifted position scores ``by_distance`` [B, H, T, K+1] (scaled). Without
    gradients the relative case runs :func:`attend_relative`, which builds no separate bias tensor.
    """
    if by_distance is not None and dropatt == 0 and not torch.is_grad_enabled():
        return attend_relative(q, keys, values, by_distance, mask, scale)
    bias = mask if by_distance is None else mask + rel_shift(by_distance)  # [T, K] or [B, H, T, K]
    batch, n_head, n_query, d_head = q.shape
    n_keys = keys.size(2)
    bias = bias.expand(batch, n_head, n_query, n_keys).reshape(batch * n_head, n_query, n_keys)  # [B*H, T, K]
    q = q.reshape(batch * n_head, n_query, d_head)  # [B*H, T, Dh]
    keys = keys.reshape(batch * n_head, n_keys, d_head)  # [B*H, K, Dh]
    scores = torch.baddbmm(bias, q, keys.transpose(1, 2), alpha=scale)  # [B*H, T, K]
    probs = dropout(scores.softmax(-1), dropatt, training=dropatt > 0)
    out = torch.bmm(probs, values.reshape(batch * n_head, n_keys, d_head))  # values [B*H, K, Dh]; out [B*H, T, Dh]
    return out.view(batch, n_head, n_query, d_head)  # [B, H, T, Dh]


def attend_sdpa(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, by_distance: torch.Tensor | None, mask: torch.Tensor,
                scale: float, dropatt: float) -> torch.Tensor:
    """The ``sdpa`` kernel: PyTorch's fused ``scaled_dot_product_attention``, arguments as :func:`attend_unfused`.

    The relative schemes' position scores (terms b and d, relative-shifted) are added to the mask and passed
    as its additive float ``attn_mask``: the kernel computes softmax(scale * q.k + attn_mask), so the four-term
    score is exact. Never called with attention dropout (:func:`choose_kernel`).
    """
    bias = mask if by_distance is None else mask + rel_shift(by_distance)  # [T, K] or [B, H, T, K]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=bias, scale=scale)


ATTENTION_KERNELS = {"unfused": attend_unfused, "sdpa": attend_sdpa}
"""The attention kernels by name (``ModelConfig.attn_kernel``); each computes the same attention."""

AUTO_KERNEL = {
    (False, False): "sdpa",
    (False, True): "sdpa",
    (True, False): "unfused",
    (True, True): "unfused",
}
"""What ``attn_kernel: auto`` runs, by (relative positions, gradients): the kernel measured fastest on a 2-core CPU
for that case (results/bench/attention-kernels-cpu.md, docs/performance.md)."""


def choose_kernel(setting: str, *, relative: bool, gradients: bool, dropatt: float) -> str:
    """The kernel one attention call runs: ``setting``, where ``auto`` means :data:`AUTO_KERNEL`; with attention
    dropout always ``unfused``, the only kernel that applies txlab's dropout (:func:`dropout`)."""
    if dropatt > 0:
        return "unfused"
    return AUTO_KERNEL[relative, gradients] if setting == "auto" else setting


def matmul_shared_keys(q: torch.Tensor, position_keys: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, Dh] times position keys [H, Dh, K+1] shared by every batch row: a new tensor [B, H, T, K+1].

    One matrix product per batch row: ``torch.matmul`` would broadcast the keys by materialising a
    copy of them for each row.
    """
    batch, n_head, n_query, _ = q.shape
    out = q.new_empty(batch, n_head, n_query, position_keys.size(-1))
    position_keys = position_keys.to(q.dtype)  # they may differ under autocast, which leaves a product written into out= alone
    for b in range(batch):
        torch.bmm(q[b], position_keys, out=out[b])
    return out


def attend_relative(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, by_distance: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Inference attention with relative position scores: q [B, H, T, Dh], keys, values [B, H, K, Dh],
    ``by_distance`` [B, H, T, K+1] the (scaled) position scores by distance, and the mask [T, K] -> [B, H, T, Dh].

    The content scores and the relative-shifted position scores are summed by one batched product with
    beta = 1 (``baddbmm`` reading the shift as a strided view), the mask added in place, then softmax and
    the product with the values: no separate [B, H, T, K] bias tensor is built, and on CPU this is faster
    than the fused kernel given that bias (measured at the speed table's shape: 1.2-1.4x). The product
    writes a fresh tensor rather than accumulating into the strided view: PyTorch runs an in-place
    ``baddbmm_`` into a non-contiguous output as one small product per head, which at 2 threads was
    1.02-1.15x slower on an idle machine and 2.4x slower on a busy one (docs/performance.md).
    """
    batch, n_head, n_query, d_head = q.shape
    n_keys = keys.size(2)
    shifted = rel_shift(by_distance).reshape(batch * n_head, n_query, n_keys)  # [B*H, T, K], a view of by_distance
    q = q.reshape(batch * n_head, n_query, d_head)  # [B*H, T, Dh]
    keys = keys.reshape(batch * n_head, n_keys, d_head)  # [B*H, K, Dh]
    scores = torch.baddbmm(shifted, q, keys.transpose(1, 2), alpha=scale)  # shifted + scale * [B*H, T, Dh] @ [B*H, Dh, K]
    scores.add_(mask)
    out = torch.bmm(scores.softmax(-1), values.reshape(batch * n_head, n_keys, d_head))  # values [B*H, K, Dh]; out [B*H, T, Dh]
    return out.view(batch, n_head, n_query, d_head)  # [B, H, T, Dh]
