"""The attention kernels of the Transformer family, and the CPU dropout, written for speed (docs/performance.md).

A kernel is the last step of attention: given the (content) queries, the keys and values of the window and,
for the relative schemes, the scaled position scores by distance, it computes
softmax(scale * q.k + position scores + mask), attention dropout, and the product with the values. What the
score *is* (the paper's terms) is defined by the attention classes in :mod:`txlab.models.transformer`; every
kernel computes the same attention from it, and ``ModelConfig.attn_kernel`` only picks how (:func:`choose_kernel`):

- ``unfused``: explicit products and softmax (:func:`attend_unfused`); without gradients, the relative schemes
  run :func:`attend_relative`, which builds no separate bias tensor;
- ``sdpa``: PyTorch's fused ``scaled_dot_product_attention`` (:func:`attend_sdpa`), the position scores passed
  as its additive mask.

Shapes as in :mod:`txlab.models.transformer`: B batch rows, H heads, T queries, K keys = M memory + T, Dh head size.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import nn

from txlab.models.softmax import fits_kept


def rel_shift(by_distance: torch.Tensor) -> torch.Tensor:
    """Re-index position scores from 'by distance' to 'by key' (the relative shift, Appendix B).

    ``by_distance[..., i, c]`` scores query i against distance K-1-c (the layout of
    :func:`txlab.models.transformer.relative_distances`, K+1 columns). Query i sits at window position M+i, so key j is at
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


DROP_LEVELS = 1 << 16
"""The resolution of the CPU dropout's keep decision: each entry draws one of 2^16 equally likely 16-bit numbers."""


def drop_threshold(p: float) -> int:
    """How many of the :data:`DROP_LEVELS` numbers drop an entry: round(p * 2^16), kept below 2^16 so that something
    survives. The CPU dropout drops with probability exactly ``drop_threshold(p) / 2^16``, within 2^-17 of p."""
    return min(round(p * DROP_LEVELS), DROP_LEVELS - 1)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Zero each entry with probability p and scale the rest so that the expectation is x, like ``F.dropout``.

    On the CPU the keep decisions come from 16-bit random numbers, four from each 64-bit draw of the generator, and
    an entry drops when its number is among the lowest :func:`drop_threshold` of the 2^16: the probability is p to
    within 2^-17 (float32 ``torch.rand`` resolves p to 2^-24), and the survivors are scaled by the exact inverse of
    their probability. The generator's sampling is serial, so drawing a quarter of the numbers matters: at 2 threads
    the tiny and small bench shapes' training steps ran 1.078x and 1.066x faster than with one ``torch.rand`` number
    per entry (results/bench/step-changes-cpu.md). ``torch.manual_seed`` makes the masks reproducible as before; they are other masks than
    the float draw gave. Elsewhere ``F.dropout``.
    """
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    threshold = drop_threshold(p)
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)  # the full 64-bit range: [-2^63, 2^63)
    numbers = draws.view(torch.int16)[:n].view(x.shape)  # uniform over [-2^15, 2^15)
    keep = numbers.ge(threshold - DROP_LEVELS // 2)  # the lowest `threshold` numbers drop
    return x * keep.to(x.dtype).mul_(DROP_LEVELS / (DROP_LEVELS - threshold))


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
    """q [B, H, T, Dh] times position keys [H, Dh, K+1] shared by every batch row, without gradients: [B, H, T, K+1],
    on the CPU the thread's kept tensor (:func:`kept_tensor`), which its next call overwrites; a new one elsewhere.

    One matrix product per batch row: ``torch.matmul`` would broadcast the keys by materialising a
    copy of them for each row.
    """
    batch, n_head, n_query, _ = q.shape
    shape = (batch, n_head, n_query, position_keys.size(-1))
    out = kept_tensor("position scores", shape, q)
    out = q.new_empty(shape) if out is None else out
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
    scores = torch.baddbmm(shifted, q, keys.transpose(1, 2), alpha=scale,
                           out=kept_tensor("scores", (batch * n_head, n_query, n_keys), q))  # shifted + scale * [B*H, T, Dh] @ [B*H, Dh, K]
    scores.add_(mask)
    torch.ops.aten._softmax.out(scores, -1, False, out=scores)  # in place: each row is read whole before it is written
    out = torch.bmm(scores, values.reshape(batch * n_head, n_keys, d_head))  # values [B*H, K, Dh]; out [B*H, T, Dh]
    return out.view(batch, n_head, n_query, d_head)  # [B, H, T, Dh]


class _Kept(threading.local):
    """One thread's kept tensors of inference attention, by role (each thread has its own, so two never share one)."""

    def __init__(self):
        self.tensors: dict[str, torch.Tensor] = {}


_KEPT = _Kept()

KEPT_ROLES = ("position scores", "scores")
"""The tensors inference attention keeps: the position scores by distance [B, H, T, K+1] of :func:`matmul_shared_keys`,
and the scores [B*H, T, K] of :func:`attend_relative`, over which the probabilities are written."""


def kept_tensor(role: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor | None:
    """The tensor of ``role`` (:data:`KEPT_ROLES`) that inference attention computes in, kept from call to call on the
    CPU: None elsewhere and under autocast (a fresh one), and with gradients, which may save it. A layer reads the
    values out of both before the next call writes them, so one of each serves every layer and chunk of a thread;
    what stays alive is one tensor per role and thread, of the last shape.

    A fresh tensor of 8 MB (the small bench shape) is a new memory mapping whose pages may fault in on every call.
    Kept, with the softmax written over the scores, the tiny cached evaluation step ran 1.019x faster at 2 threads and
    the small one no measurably faster (results/bench/step-changes-cpu.md)."""
    if like.device.type != "cpu" or torch.is_autocast_enabled("cpu") or torch.is_grad_enabled():
        return None
    kept = _KEPT.tensors.get(role)
    if not fits_kept(kept, shape, like):
        kept = _KEPT.tensors[role] = like.new_empty(shape)
    return kept
