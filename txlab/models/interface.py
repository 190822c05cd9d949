"""The one interface every txlab language model implements.

Transformer-XL (with or without recurrence, any positional encoding), the vanilla Transformer,
the LSTM and the QRNN all look the same to the trainer, the loss collector and the speed bench:

    model = build_model(cfg)                    # from a ModelConfig
    state = model.init_state(batch_size)        # a fresh state: empty memory / zero RNN state
    out = model(tokens, state, targets)         # tokens, targets: LongTensor [B, T]
    out.nll                                     # [B, T] nats, in token order (None without targets)
    out.state                                   # next state, always detached from the graph
    model.set_context(Context(...))             # evaluation memory / same_length / clamp_len

Feeding a long sequence chunk by chunk, carrying ``out.state``, is how every caller realises
"context": analysis code never branches on the model family. Families that do not use a
setting of :class:`Context` (RNNs ignore all three) accept it and ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from txlab.errors import TxlabError

State = Any
"""Opaque per-family recurrent state (XL: per-layer memories; RNN: hidden/cell tensors)."""


@dataclass(frozen=True)
class Context:
    """How much past a model may use while it streams; set for training or evaluation."""

    mem_len: int
    """Memory kept per layer after each chunk (Transformer-XL); 0 = no recurrence."""
    same_length: bool = False
    """Every query attends to the same number of keys (the paper's evaluation setting)."""
    clamp_len: int = 0
    """Relative distances beyond clamp_len share one positional embedding; 0 = no clamping."""


TRAINING_FLOPS_PER_FORWARD = 3
"""Forward + backward FLOPs of a training step over its forward FLOPs (the backward is two matmuls per forward one)."""


@dataclass(frozen=True)
class ModelCounts:
    """A model's size, window and forward FLOPs: the one count of them (:meth:`LanguageModel.counts` for a built model,
    txlab.models.build.count_model from a configuration alone; each family's formulas sit beside its model, and a test
    holds the parameters equal to the built models' tensors). FLOPs count a multiply-add as 2.

    A token passes through ``layers`` blocks; in each it projects its own key and value once, then as a
    query costs ``query_flops`` plus ``attend_flops`` for every key it attends. Recurrent models and
    Hugging Face bodies count their weights as the query's work and attend nothing."""

    parameters: int
    """Trainable parameters, tied tensors once (what ``LanguageModel.num_parameters`` gives)."""
    max_context: int | None
    """The longest context the model can use at all (a fixed window), or None."""
    layers: int
    key_flops: float
    """Per layer and token: projecting its key and value (0 where they are counted as the query's work)."""
    query_flops: float
    """Per layer and query: everything but attending (projections, feed-forward; a recurrent stack's gates)."""
    attend_flops: float
    """Per layer, query and key attended: the scores and the weighted sum."""
    other_flops: float
    """Per token, outside the layers and the output: an input projection, a final norm."""
    output_flops: float
    """Per scored token: the softmax over the vocabulary (every logit: an upper bound for an adaptive softmax)."""
    position_key_flops: float = 0
    """Per layer and relative distance: projecting its position key (the paper's W_{k,R} R; 0 without one). Shared by
    every query of a chunk, so it is work of the streaming, never of a token (:meth:`recomputed_flops_per_token`)."""

    def flops_per_token(self, n_keys: int) -> float:
        """Forward FLOPs to predict one token attending ``n_keys`` keys (dense score rows).

        Each token's key/value projection is counted once: the training path's re-projection of the memory at every
        chunk is overhead of the streaming, counted by :meth:`recomputed_flops_per_token` instead. Training costs
        :data:`TRAINING_FLOPS_PER_FORWARD` times this (:meth:`training_flops_per_token`)."""
        return float(self.layers * (self.key_flops + self.query_flops + self.attend_flops * n_keys) + self.other_flops + self.output_flops)

    def output_flops_per_token(self) -> float:
        """The softmax's part of :meth:`flops_per_token`: what scoring one hidden state costs."""
        return float(self.output_flops)

    def reading_flops_per_token(self, n_keys: int) -> float:
        """:meth:`flops_per_token` without the softmax: what reading one token costs, beside scoring it."""
        return float(self.layers * (self.key_flops + self.query_flops + self.attend_flops * n_keys) + self.other_flops)

    def training_flops_per_token(self, n_keys: int) -> float:
        """Forward and backward FLOPs of training on one token attending ``n_keys`` keys."""
        return TRAINING_FLOPS_PER_FORWARD * self.flops_per_token(n_keys)

    def window_flops(self, length: int, n_last: int = 1) -> float:
        """Forward FLOPs of reading one window of ``length`` tokens from nothing and scoring its last ``n_last``
        (the last layer runs only for them): the vanilla Transformer's sliding-window evaluation."""
        queries = (self.layers - 1) * length + n_last
        return float(self.layers * length * self.key_flops + queries * (self.query_flops + self.attend_flops * length)
                     + n_last * (self.other_flops + self.output_flops))

    def recomputed_flops_per_token(self, n_mem: int, n_query: int, batch_size: int = 1) -> float:
        """Forward FLOPs per predicted token that re-derive what an earlier chunk already computed, when a chunk of
        ``n_query`` tokens per stream (``batch_size`` streams) reads a memory of ``n_mem`` rows.

        The training path spends them in every chunk: each layer re-projects the keys and values of its M memory rows
        and the position keys of all K + 1 distances. The cached evaluation state does neither once the memory is full
        (it builds the position keys once per layer), so this is the work it avoids; it is never part of
        :meth:`flops_per_token`."""
        memory_keys = n_mem * self.key_flops / n_query
        position_keys = self.position_key_flops * (n_mem + n_query + 1) / (n_query * batch_size)
        return float(self.layers * (memory_keys + position_keys))


class LMOutput(NamedTuple):
    nll: torch.Tensor | None
    """[B, T] negative log-likelihood of each target in nats, or None when no targets were given."""
    hidden: torch.Tensor
    """[B, T, d] final hidden states, the softmax input (use ``model.log_prob`` for distributions)."""
    state: State
    """The state after the last token, detached, to pass with the next chunk."""


def check_target_shape(tokens: torch.Tensor, targets: torch.Tensor | None) -> None:
    """Targets must pair one-to-one with the tokens (a mismatch would score the wrong pairs silently)."""
    if targets is not None and targets.shape != tokens.shape:
        raise TxlabError(f"targets {tuple(targets.shape)} must have the shape of tokens {tuple(tokens.shape)}")


class LanguageModel(nn.Module):
    """Base class: subclasses implement ``init_state``, ``forward``, ``log_prob`` and ``counts``."""

    max_context: int | None = None
    """Longest context the model can use at all (vanilla Transformer: its window); None = unbounded."""

    vocab_size: int = 0
    """Number of token ids the model scores (its output layer's size); set by every family."""

    context: Context = Context(mem_len=0)
    """The memory settings in use (see :meth:`set_context`); families without memory keep this default."""

    def init_state(self, batch_size: int) -> State:
        raise NotImplementedError

    def forward(self, tokens: torch.Tensor, state: State, targets: torch.Tensor | None = None) -> LMOutput:
        raise NotImplementedError

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full log-probabilities [*, n_token] for hidden states [*, d]."""
        raise NotImplementedError

    def counts(self) -> ModelCounts:
        """The model's parameters, window and forward FLOPs: the one count every plan, benchmark and table reads."""
        raise NotImplementedError

    def layer_stack(self) -> nn.ModuleList | None:
        """The stack of identical layers a compiler may compile once for all (txlab.models.compiled), or None: a model
        read only as written."""
        return None

    def set_context(self, context: Context) -> None:
        """Use these memory settings from now on (no-op for families without them)."""
        self.context = context

    @property
    def carries_state(self) -> bool:
        """Whether ``out.state`` brings the past into the next chunk (RNNs: always). A model without
        it (the vanilla Transformer, Transformer-XL with mem_len 0) must re-read its context as one chunk."""
        return True

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied tensors once."""
        return sum(p.numel() for p in self.parameters())
