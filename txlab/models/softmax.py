"""Adaptive input embeddings and the adaptive softmax (Baevski & Auli 2019; Grave et al. 2017).

The vocabulary, ordered by descending frequency, is split by ``cutoffs`` into a head (the most
frequent words) and tail clusters. Cluster i has its own embedding of size
``d_embed // div_val**i`` and a projection to and from the model size ``d_proj``. The softmax
scores the head words plus one "cluster token" per tail cluster; a tail word's log-probability is
the log-probability of its cluster token plus its log-probability within the cluster.

With ``cutoffs=[]`` both classes reduce to a plain embedding and a plain softmax (with an optional
projection when ``d_embed != d_proj``), so one code path serves every vocabulary size.

Parameterisation, as in the authors' code (kimiyoung/transformer-xl):

- A cluster whose embedding is already ``d_proj`` wide has no projection unless
  ``full_width_proj`` asks for one; the authors' code projects every cluster whenever div_val > 1,
  which for their large models is a d_proj x d_proj matrix for the head on each side.
- With div_val 1 every cluster has the same width and the input side has one projection shared by
  all clusters (the authors keep one table for the whole vocabulary); the output side has one
  projection per cluster.
- Ties are per cluster: the output weights and projections of cluster i may each be the input's
  (``tie_weight``, ``tie_projs``: one flag for every cluster, or one per cluster).

Shapes: ``hidden`` is [N, d_proj] (callers flatten batch and time), ``target`` is [N].
Per-token losses always come back in the order of ``target``.
"""

from __future__ import annotations

import threading

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from txlab.errors import TxlabError


def cluster_bounds(n_token: int, cutoffs: list[int]) -> list[int]:
    """Boundaries [0, c_1, ..., c_k, n_token] of the head and tail clusters, validated."""
    bounds = [0, *cutoffs, n_token]
    if any(b1 <= b0 for b0, b1 in zip(bounds, bounds[1:])):
        raise TxlabError(f"adaptive cutoffs {cutoffs} must be ascending, positive and below n_token={n_token}")
    return bounds


def cluster_dims(d_embed: int, n_clusters: int, div_val: int) -> list[int]:
    """Embedding size of each cluster: d_embed, d_embed/div_val, d_embed/div_val^2, ..."""
    if div_val < 1:
        raise TxlabError(f"div_val must be >= 1, got {div_val}")
    dims = [d_embed // div_val**i for i in range(n_clusters)]
    if min(dims) < 1:
        raise TxlabError(f"div_val={div_val} leaves a cluster with no embedding dimensions (d_embed={d_embed})")
    return dims


def cluster_flags(flags: bool | Sequence[bool], n_clusters: int, name: str) -> list[bool]:
    """One tie flag per cluster, from one flag for every cluster or a list of one per cluster."""
    if isinstance(flags, bool):
        return [flags] * n_clusters
    if len(flags) != n_clusters:
        raise TxlabError(f"model.{name} lists {len(flags)} flags but the adaptive softmax has {n_clusters} clusters (give one per cluster, or true/false for all)")
    return list(flags)


def _projections(dims: list[int], d_proj: int, full_width_proj: bool, shared: bool) -> nn.ParameterList:
    """One [d_proj, d_i] projection per cluster (None where the cluster needs none); ``shared``: one
    parameter for every cluster (they all have the same width)."""
    needed = [d != d_proj or full_width_proj for d in dims]
    if shared and any(needed):
        proj = nn.Parameter(torch.empty(d_proj, dims[0]))
        return nn.ParameterList([proj] * len(dims))
    return nn.ParameterList(nn.Parameter(torch.empty(d_proj, d)) if need else None for d, need in zip(dims, needed))


@dataclass(frozen=True)
class VocabularyCounts:
    """An adaptive input and softmax pair counted from its settings, as the modules below are built and tied."""

    parameters: int
    """Both sides' parameters, each tied tensor once."""
    input_flops: int
    """The input side's projection of one token (the first projected cluster's, as TransformerXL counts it; 0 without one)."""
    output_flops: int
    """Every output logit of one hidden state: what :meth:`AdaptiveLogSoftmax.log_prob` computes; with tail clusters an
    upper bound on :meth:`AdaptiveLogSoftmax.nll`, which evaluates a tail only for the tokens that fall into it."""


def vocabulary_counts(n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int, full_width_proj: bool,
                      tie_weight: bool | Sequence[bool], tie_projs: bool | Sequence[bool]) -> VocabularyCounts:
    """:class:`AdaptiveEmbedding` and :class:`AdaptiveLogSoftmax` of these settings, tied by ``tie_to``, counted
    without building them (the same checks refuse the same settings)."""
    bounds = cluster_bounds(n_token, cutoffs)
    sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
    dims = cluster_dims(d_embed, len(sizes), div_val)
    projected = [d != d_proj or full_width_proj for d in dims]
    tied_weights, tied_projs = cluster_flags(tie_weight, len(sizes), "tie_weight"), cluster_flags(tie_projs, len(sizes), "tie_projs")
    input_projs = [d_proj * d for d, p in zip(dims, projected) if p]
    if div_val == 1:  # one projection shared by every cluster (they all have the same width)
        input_projs = input_projs[:1]
    embedding = sum(n * d for n, d in zip(sizes, dims)) + sum(input_projs)
    n_tail = len(cutoffs)
    softmax = n_tail * dims[0] + n_tail + sum(n * d * (not tied) + n for n, d, tied in zip(sizes, dims, tied_weights))
    softmax += sum(d_proj * d for d, p, tied in zip(dims, projected, tied_projs) if p and not tied)
    output_flops = 2 * n_tail * dims[0] + sum(2 * n * d + 2 * d_proj * d * p for n, d, p in zip(sizes, dims, projected))
    return VocabularyCounts(embedding + softmax, 2 * input_projs[0] if input_projs else 0, output_flops)


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log_softmax in at least fp32: losses feed RECL's min(), where low-precision noise becomes fake gain."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1)


def _log_probs_in(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` [N, V] turned into log-probabilities in place: aten._log_softmax written over its input, each row
    read whole before it is written (pinned bit for bit by tests/test_softmax.py). No [N, V] temporary, no copy back:
    on the ``small`` bench shape (1,024 rows, 10k words, 2 threads) 7.4 ms where 128-row blocks through a temporary
    took 10.9 ms."""
    return torch.ops.aten._log_softmax.out(logits, -1, False, out=logits)


def fits_kept(kept: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor) -> bool:
    """Whether a tensor kept from an earlier call can take a result of ``shape`` and ``like``'s dtype now: an inference
    tensor cannot be written outside inference mode, nor a normal one inside it."""
    return (kept is not None and kept.shape == shape and kept.dtype == like.dtype
            and kept.is_inference() == torch.is_inference_mode_enabled())


class KeptLogits:
    """The [N, V] tensor a plain softmax computes its logits in on the CPU, kept from call to call and lent to one
    computation at a time.

    A fresh tensor that large (40 MB for 1,024 rows of 10k words) is a new memory mapping whose pages fault in on every
    call. A call without gradients borrows the tensor for its own duration. A training step's loss borrows it for its
    graph: the logits become log-probabilities there, are saved for the backward pass, and become the logits' gradient
    in it; the tensor comes back when that backward pass is done, or when the graph is freed without one. While it is
    out, another call (a second forward pass before the first one's backward, an evaluation in between, another
    thread) gets None and computes in a fresh tensor, so nothing it holds is ever overwritten."""

    def __init__(self):
        self._tensor: torch.Tensor | None = None
        self._lent = False
        self._lock = threading.Lock()

    def lend(self, rows: int, n_token: int, like: torch.Tensor) -> torch.Tensor | None:
        """A [rows, n_token] tensor of ``like``'s dtype, lent until :meth:`give_back`; None while it is out."""
        with self._lock:
            if self._lent:
                return None
            kept = self._tensor
            if not fits_kept(kept, (rows, n_token), like):
                kept = self._tensor = torch.empty(rows, n_token, dtype=like.dtype)
            self._lent = True
            return kept

    def give_back(self) -> None:
        with self._lock:
            self._lent = False

    def __reduce__(self):
        """A copied or pickled model gets kept logits of its own, empty: a tensor lent by this one is not its to use."""
        return KeptLogits, ()


class _Loan:
    """The kept logits a graph borrowed: given back after its backward pass, or when the graph is freed without one."""

    def __init__(self, kept: KeptLogits):
        self.kept: KeptLogits | None = kept

    def end(self) -> None:
        if self.kept is not None:
            self.kept.give_back()
            self.kept = None

    __del__ = end


def _logits_into(out: torch.Tensor | None, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(hidden, weight, bias), written into ``out`` when given: the same product, so the same numbers."""
    if out is None:
        return F.linear(hidden, weight, bias)
    return torch.mm(hidden, weight.t(), out=out) if bias is None else torch.addmm(bias, hidden, weight.t(), out=out)


class _LinearNLL(torch.autograd.Function):
    """-log_softmax(hidden @ weight.T + bias)[target] per row, with a fused backward.

    Forward keeps one [N, V] tensor: the logits, turned into log-probabilities block by block (in the kept logits
    when they are free, :class:`KeptLogits`). The backward turns that saved tensor into the gradient of the logits in
    place, softmax * g minus g at the target, which is what autograd's gather and log-softmax backward compute through
    two more [N, V] tensors (a zero-filled scatter and the log-softmax gradient). On the ``small`` bench shape
    (1,024 rows, 10k words) those were 9% of a training step.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                kept: KeptLogits | None) -> torch.Tensor:
        out = None if kept is None else kept.lend(hidden.size(0), weight.size(0), hidden)
        ctx.loan = None if out is None else _Loan(kept)
        log_probs = _log_probs_in(_logits_into(out, hidden, weight, bias))  # [N, V]
        ctx.save_for_backward(hidden, weight, log_probs, target)
        ctx.has_bias = bias is not None
        ctx.consumed = False
        return -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)  # [N]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_nll: torch.Tensor):
        if ctx.consumed:
            raise RuntimeError("linear_nll's backward overwrites its saved log-probabilities: it cannot run twice (retain_graph)")
        ctx.consumed = True
        hidden, weight, log_probs, target = ctx.saved_tensors
        grad_logits = log_probs.exp_().mul_(grad_nll.unsqueeze(1))  # softmax * g, in place of the log-probabilities
        rows = torch.arange(target.numel(), device=target.device)
        grad_logits.index_put_((rows, target), -grad_nll, accumulate=True)  # minus g at the target (one per row)
        grad_hidden = grad_logits @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad_logits.t() @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = grad_logits.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        if ctx.loan is not None:
            ctx.loan.end()  # the saved tensor is spent: a second backward pass stops at `consumed`
        return grad_hidden, grad_weight, grad_bias, None, None


def linear_nll(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
               kept: KeptLogits | None = None) -> torch.Tensor:
    """-log_softmax(F.linear(hidden, weight, bias))[target] for hidden [N, d], target [N] -> [N]: the loss of a
    plain softmax layer without the [N, V] temporaries of composing it (:class:`_LinearNLL`). In fp32 and fp64;
    lower precisions, and mixed precision (autocast, whose logits come out in bf16 or fp16), go through
    :func:`_log_softmax`, which takes the log-sum-exp in fp32. ``kept``: where the logits are computed when it is
    free (:class:`KeptLogits`), instead of a fresh tensor: the same products, so the same numbers."""
    if hidden.dtype not in (torch.float32, torch.float64) or torch.is_autocast_enabled(hidden.device.type):
        return -_log_softmax(F.linear(hidden, weight, bias)).gather(1, target.unsqueeze(1)).squeeze(1)
    if torch.is_grad_enabled():
        return _LinearNLL.apply(hidden, weight, bias, target, kept)
    out = None if kept is None else kept.lend(hidden.size(0), weight.size(0), hidden)
    try:
        return -_log_probs_in(_logits_into(out, hidden, weight, bias)).gather(1, target.unsqueeze(1)).squeeze(1)
    finally:
        if out is not None:
            kept.give_back()


class AdaptiveEmbedding(nn.Module):
    """Token ids [*] -> vectors [*, d_proj], scaled by sqrt(d_proj) as in the reference code.

    ``scale=False`` leaves the vectors unscaled, as the RNN baselines (AWD-LSTM, QRNN) do.
    ``full_width_proj``: project clusters already ``d_proj`` wide too (see the module docstring).
    """

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int = 1, scale: bool = True,
                 full_width_proj: bool = False):
        super().__init__()
        self.n_token, self.d_proj = n_token, d_proj
        self.bounds = cluster_bounds(n_token, cutoffs)
        dims = cluster_dims(d_embed, len(self.bounds) - 1, div_val)
        self.emb_layers = nn.ModuleList(nn.Embedding(hi - lo, d) for lo, hi, d in zip(self.bounds, self.bounds[1:], dims))
        self.emb_projs = _projections(dims, d_proj, full_width_proj, shared=div_val == 1)
        self.scale = d_proj**0.5 if scale else 1.0
        for layer in self.emb_layers:
            nn.init.normal_(layer.weight, std=0.02)
        for proj in self.emb_projs:
            if proj is not None:
                nn.init.normal_(proj, std=0.01)

    def _embed_cluster(self, i: int, ids: torch.Tensor) -> torch.Tensor:
        vectors = self.emb_layers[i](ids)
        proj = self.emb_projs[i]
        return vectors if proj is None else F.linear(vectors, proj)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if len(self.emb_layers) == 1:
            return self._embed_cluster(0, tokens) * self.scale
        flat = tokens.reshape(-1)  # [N]
        out = torch.empty(flat.numel(), self.d_proj, dtype=self.emb_layers[0].weight.dtype, device=flat.device)
        for i, (lo, hi) in enumerate(zip(self.bounds, self.bounds[1:])):
            idx = ((flat >= lo) & (flat < hi)).nonzero(as_tuple=True)[0]
            if idx.numel():  # under autocast a projected cluster comes out in bf16 or fp16: stored at the weights' precision
                out.index_copy_(0, idx, self._embed_cluster(i, flat[idx] - lo).to(out.dtype))
        return out.view(*tokens.shape, self.d_proj) * self.scale  # [*, d_proj]


class AdaptiveLogSoftmax(nn.Module):
    """Hidden states [N, d_proj] -> per-token NLL [N] (or full log-probabilities [N, n_token])."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int = 1, full_width_proj: bool = False):
        super().__init__()
        self.n_token = n_token
        self.bounds = cluster_bounds(n_token, cutoffs)
        self.n_tail = len(cutoffs)
        self._kept_logits = KeptLogits()  # logits_scratch's tensor, not part of the model's state
        dims = cluster_dims(d_embed, len(self.bounds) - 1, div_val)
        self.out_layers = nn.ModuleList(nn.Linear(d, hi - lo) for lo, hi, d in zip(self.bounds, self.bounds[1:], dims))
        self.out_projs = _projections(dims, d_proj, full_width_proj, shared=False)
        # One extra head logit per tail cluster ("the next word is in cluster i").
        # (absent without tail clusters: a zero-size parameter would never get a gradient, which DDP rejects)
        self.cluster_weight = nn.Parameter(torch.zeros(self.n_tail, dims[0])) if self.n_tail else None
        self.cluster_bias = nn.Parameter(torch.zeros(self.n_tail)) if self.n_tail else None
        for layer in self.out_layers:
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)
        for proj in self.out_projs:
            if proj is not None:
                nn.init.normal_(proj, std=0.01)

    def tie_to(self, embedding: AdaptiveEmbedding, tie_weight: bool | Sequence[bool], tie_projs: bool | Sequence[bool]) -> None:
        """Share output weights and/or projections with the input embedding, for every cluster or per cluster."""
        n = len(self.out_layers)
        for i, (weight, proj) in enumerate(zip(cluster_flags(tie_weight, n, "tie_weight"), cluster_flags(tie_projs, n, "tie_projs"))):
            if weight:
                self.out_layers[i].weight = embedding.emb_layers[i].weight
            if proj and self.out_projs[i] is not None:
                self.out_projs[i] = embedding.emb_projs[i]

    def _cluster_logits(self, i: int, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of cluster i (the head includes the cluster tokens) for hidden [N, d_proj]."""
        proj = self.out_projs[i]
        h = hidden if proj is None else F.linear(hidden, proj.t())  # [N, d_i]
        layer = self.out_layers[i]
        if i == 0 and self.n_tail:
            weight = torch.cat([layer.weight, self.cluster_weight], dim=0)
            bias = torch.cat([layer.bias, self.cluster_bias], dim=0)
            return F.linear(h, weight, bias)  # [N, c_1 + n_tail]
        return F.linear(h, layer.weight, layer.bias)  # [N, cluster size]

    def logits_scratch(self, like: torch.Tensor) -> KeptLogits | None:
        """Where the plain softmax computes its logits for hidden states like ``like``: on the CPU a tensor kept from
        one call to the next and lent to one computation at a time (:class:`KeptLogits`; the small evaluation step
        gained 1.04-1.10x, results/bench/logits-scratch-cpu.md); None elsewhere, where CUDA's allocator already reuses
        its blocks."""
        return self._kept_logits if like.device.type == "cpu" else None

    def nll(self, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """-log P(target | hidden) for each row, in the order of ``target``; only needed logits are computed."""
        # An id outside every cluster would be scored by no cluster and keep whatever the output buffer held.
        if target.numel() and not 0 <= int(target.min()) <= int(target.max()) < self.n_token:
            raise TxlabError(f"token id {int(target.max()) if int(target.max()) >= self.n_token else int(target.min())} is outside "
                             f"this model's vocabulary of {self.n_token}: the tokens were numbered for another model")
        if not self.n_tail:
            proj, layer = self.out_projs[0], self.out_layers[0]
            h = hidden if proj is None else F.linear(hidden, proj.t())  # [N, d_0]
            return linear_nll(h, layer.weight, layer.bias, target, self.logits_scratch(h))
        head_lp = _log_softmax(self._cluster_logits(0, hidden))  # [N, c_1 + n_tail]
        out = torch.empty(target.shape, dtype=head_lp.dtype, device=target.device)
        for i, (lo, hi) in enumerate(zip(self.bounds, self.bounds[1:])):
            idx = ((target >= lo) & (target < hi)).nonzero(as_tuple=True)[0]
            if not idx.numel():
                continue
            rows = head_lp.index_select(0, idx)
            if i == 0:
                lp = rows.gather(1, target[idx].unsqueeze(1)).squeeze(1)
            else:
                tail_lp = _log_softmax(self._cluster_logits(i, hidden.index_select(0, idx)))
                in_cluster = tail_lp.gather(1, (target[idx] - lo).unsqueeze(1)).squeeze(1)
                lp = rows[:, self.bounds[1] + i - 1] + in_cluster
            out.index_copy_(0, idx, -lp)
        return out

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full log-probabilities [N, n_token] (for sampling and checks; costs the whole vocabulary)."""
        head_lp = _log_softmax(self._cluster_logits(0, hidden))
        head_words = self.bounds[1]
        parts = [head_lp[:, :head_words]]
        for i in range(1, len(self.out_layers)):
            tail_lp = _log_softmax(self._cluster_logits(i, hidden))
            parts.append(head_lp[:, head_words + i - 1 : head_words + i] + tail_lp)
        return torch.cat(parts, dim=1)
