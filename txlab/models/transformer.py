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

The file reads top down like the paper: the memory and its update (segment-level recurrence,
Sec. 3.2), the position-wise feed-forward and a layer (:class:`Block`), and the language model that
stacks them. Attention itself (the positional inputs each scheme takes, the paper's score terms
(a)-(d), sinusoids, relative distances, the mask, and one attention class per positional scheme) is in
:mod:`txlab.models.attention`; the kernels it runs on in :mod:`txlab.models.kernels`.

A layer is one computation for training and evaluation alike (:meth:`Block.forward`); the two
differ only in the layer's memory object, which says where the keys and values of the memory rows
come from. Training, whose weights change every step, re-projects the whole window every chunk as
the paper does (:class:`RecomputedMemory`). In
evaluation (eval mode, no autograd) the state is a :class:`~txlab.models.eval_cache.CachedMemory`:
the same per-layer memory, plus the keys and values each layer already projected from it, so that a
chunk projects only its own rows (:class:`~txlab.models.eval_cache.CachedLayerMemory`), and the
position keys are computed once per layer, not once per chunk (:class:`~txlab.models.eval_cache.Tables`).
``TransformerXL.set_eval_cache(False)`` evaluates on the training path instead.

For analysis, :func:`capture_attention` makes every layer also record its attention probabilities
and the paper's score terms (a)-(d) separately (:class:`~txlab.models.attention.AttentionRecord`); it
is off by default.

Positional schemes (``ModelConfig.pos_enc``), each with its attention class in :mod:`txlab.models.attention`:
``ours`` (the paper's relative attention, with u and v kept here as ``u`` and ``v``), ``shaw`` (Shaw et
al.'s learned relative embeddings), ``vaswani`` (the absolute sinusoid added to the embedding output,
first layer only) and ``alrfou`` (learned absolute embeddings added to the input of every layer).

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

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.attention import (
    AbsoluteAttention,
    AttentionRecord,
    LearnedRelativeAttention,
    LearnedRelativePositions,
    MultiHeadAttention,
    Positions,
    RelativeSinusoidAttention,
    RelativeSinusoidPositions,
    attention_mask,
    relative_distances,
    sinusoid,
)
from txlab.models.eval_cache import CachedLayerMemory, CachedMemory, Tables, kept_memory_rows, weights_signature
from txlab.models.interface import Context, LanguageModel, LMOutput, ModelCounts, check_target_shape
from txlab.models.kernels import ATTENTION_KERNELS, Dropout
from txlab.models.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax, vocabulary_counts

# --------------------------------------------------------------------------------------------------
# The memory and its update (segment-level recurrence, Sec. 3.2)

Memory = list[torch.Tensor]
"""Transformer-XL state: per layer, the last (up to mem_len) inputs of that layer, [B, M, d]."""


def update_memory(memory: torch.Tensor, inputs: torch.Tensor, mem_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment-level recurrence (Sec. 3.2) for one layer: the extended context h~ = [SG(m) o h] and the next memory.

    ``memory`` m [B, M, d] is what the layer saw in earlier chunks, already cut off from the graph
    (SG, stop-gradient: the memory was detached when it was stored); ``inputs`` h [B, T, d] are the
    layer's inputs for this chunk. Returns the window h~ [B, K, d] the layer attends over, and the
    next memory: the last ``mem_len`` rows of h~, detached [B, min(K, mem_len), d] (an empty
    memory [B, 0, d] for ``mem_len`` 0). The cached evaluation state keeps the same rows in its stores
    (through :func:`~txlab.models.eval_cache.kept_memory_rows`).
    """
    window = torch.cat([memory, inputs], dim=1)  # [B, K, d]
    if mem_len == 0:
        return window, inputs.new_zeros(inputs.size(0), 0, inputs.size(-1))  # [B, 0, d]: no view keeping the window alive
    n_keys = window.size(1)
    return window, window[:, n_keys - kept_memory_rows(n_keys, mem_len) :].detach()  # [B, min(K, mem_len), d]


class RecomputedMemory:
    """One layer's memory on the training path, while a chunk runs: the window [SG(m) o h] by
    :func:`update_memory`, every row of it projected, every chunk, as the paper trains (the weights change
    between chunks).

    The layer (:meth:`Block.forward`) asks its memory two things: the rows it projects now
    (:meth:`rows_to_project`) and the keys and values of the whole window (:meth:`keys_values`). Cached evaluation
    answers them with a :class:`~txlab.models.eval_cache.CachedLayerMemory` instead: only the chunk's rows, and the
    memory's keys and values as they were projected in earlier chunks.
    """

    def __init__(self, memory: torch.Tensor, keep: int = 0):
        """``memory`` [B, M, d]: the layer's inputs from earlier chunks; ``keep``: rows kept for the next chunk."""
        self.memory, self.keep = memory, keep
        self.next_memory: torch.Tensor | None = None
        """The layer's next memory [B, min(K, keep), d], once :meth:`rows_to_project` ran."""

    def rows_to_project(self, h: torch.Tensor, absolute: torch.Tensor | None) -> torch.Tensor:
        """The whole window [B, K, d] with the chunk's rows ``h`` [B, T, d] last, absolute positions [K, d] added
        (to a new tensor: the memory holds the inputs without them)."""
        window, self.next_memory = update_memory(self.memory, h, self.keep)  # [B, K, d], [B, min(K, keep), d]
        return window if absolute is None else window + absolute

    def keys_values(self, attn: MultiHeadAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, K, Dh] of the normalised window ``x``: every row projected."""
        return attn.keys_values(x)


LayerMemory = RecomputedMemory | CachedLayerMemory
"""Where a layer's window and its keys and values come from: recomputed (training), or cached (evaluation)."""


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
    """One Transformer layer (Sec. 3.2-3.3), the same computation on the training path and in cached evaluation."""

    def __init__(self, attn: MultiHeadAttention, ff: PositionwiseFF):
        super().__init__()
        self.attn, self.ff = attn, ff

    def forward(self, h: torch.Tensor, memory: LayerMemory, mask: torch.Tensor, positions: Positions = None,
                absolute: torch.Tensor | None = None, n_out: int | None = None) -> torch.Tensor:
        """New states [B, n_out, d] of the last ``n_out`` (default all T) of the chunk's rows ``h`` [B, T, d], which
        attend over the window [SG(m) o h] of the layer's ``memory``, then pass the feed-forward. ``mask`` [n_out, K];
        ``positions``: the relative schemes' inputs; ``absolute``: absolute positions [K, d] added to the window's rows.

        The two paths differ only in ``memory``: which rows it gives to be projected here (the whole window when
        training, :class:`RecomputedMemory`; the chunk's own rows in cached evaluation,
        :class:`~txlab.models.eval_cache.CachedLayerMemory`), and where the keys and values of the others come from
        (recomputed, or kept from earlier chunks).
        """
        attn = self.attn
        n_out = h.size(1) if n_out is None else n_out
        rows = memory.rows_to_project(h, absolute)  # [B, R, d], positions added: R = K (training) or T (cached)
        x = attn.norm(rows)
        # The residual rows are taken before the queries: the gradients into `rows` then add up in the order
        # training has always summed them, to the last bit.
        current = rows[:, rows.size(1) - n_out :]  # [B, n_out, d] the residual stream
        q = attn.queries(x[:, x.size(1) - n_out :])  # [B, n_out, H*Dh]
        keys, values = memory.keys_values(attn, x)  # [B, H, K, Dh] each
        return self.ff(attn(current, q, keys, values, mask, positions))


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
        self._eval_cache = True
        self._weights_generation = 0
        """Counts the changes of the weights the model is told of, or notices itself (:meth:`weights_changed`)."""
        self._tables: Tables | None = None
        """What cached evaluation keeps from chunk to chunk (:meth:`_kept_tables`)."""
        self.register_load_state_dict_post_hook(_weights_loaded)
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
        """torch.compile every layer's attention (after the projections) and feed-forward (``ModelConfig.compile``),
        which the training path, window scoring and the cached evaluation state all run. The memory's bookkeeping
        and the projections stay eager: the cached state's row counts change every chunk and would compile again
        each time. The weights and their names are unchanged, so checkpoints load either way. Each new chunk shape
        compiles again (automatic dynamic shapes after the first change); outside the layers (embedding, memory,
        softmax) nothing is compiled."""
        for block in self.blocks:
            block.attn.compile()
            block.ff.compile()

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
            nll = self.crit.nll(hidden.reshape(-1, d), targets.reshape(-1)).view(targets.shape)  # [B*T, d], [B*T] -> [B, T]
        return LMOutput(nll, hidden, new_state)

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        lp = self.crit.log_prob(hidden.reshape(-1, hidden.size(-1)))  # [*, d] -> [N, d] -> [N, V]
        return lp.view(*hidden.shape[:-1], -1)  # [*, V]

    def window_last_nll(self, windows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """NLL [N] of ``targets`` [N] after reading each window [N, L] from an empty memory.

        Equals ``forward(windows, init_state(N)).nll[:, -1]`` for targets at the last position, but
        the last layer, the output dropout and the softmax run only for the last position: this is
        the vanilla Transformer's sliding-window evaluation (one prediction per window).
        """
        return self.window_tail_nll(windows, targets[:, None])[:, 0]  # targets [N] -> [N, 1]; NLL [N, 1] -> [N]

    def window_tail_nll(self, windows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """NLL [N, s] of ``targets`` [N, s] at the last s positions of each window [N, L], read from an empty memory.

        Equals ``forward(windows, init_state(N)).nll[:, -s:]``, but the last layer, the output dropout and
        the softmax run only for those s positions: strided recompute, whose windows advance by s tokens
        and score their last s predictions (each from L-s+1 to L tokens of context).
        """
        hidden, _ = self._hidden(windows, self.init_state(windows.size(0)), keep=0, n_last=targets.size(1))
        return self.crit.nll(hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)).view(targets.shape)  # [N*s, d], [N*s] -> [N, s]

    @property
    def carries_state(self) -> bool:
        """Only with memory: without it (mem_len 0, the vanilla Transformer) every chunk starts afresh."""
        return self.context.mem_len > 0

    # -- the stack: positions, memory, layers ----------------------------------------------------------

    def _hidden(self, tokens: torch.Tensor, state: Memory, keep: int, n_last: int) -> tuple[torch.Tensor, Memory]:
        """Final hidden states [B, T, d] (only the last [B, n_last, d] when ``n_last`` > 0) and the next memory.

        Once per chunk: the token embeddings and the :class:`~txlab.models.eval_cache.Tables` of what depends only on
        the weights and shapes (the mask, the relative schemes' position keys, absolute positions). Then, layer by
        layer, :class:`Block` on the layer's memory, the one thing the two paths do differently: on the training path
        a :class:`RecomputedMemory` (every row of the window [SG(m) o h] projected), in evaluation without autograd
        (:meth:`_uses_eval_cache`) a :class:`~txlab.models.eval_cache.CachedLayerMemory` (the memory rows' keys and
        values read from the state, only the chunk's rows projected), whose tables are also kept from chunk to chunk.
        ``keep``: memory rows kept per layer for the next chunk (0 = none). ``n_last`` > 0: the top layer computes
        only the last ``n_last`` rows (window scoring).
        """
        self._check_chunk(tokens, state)
        n_query, n_mem = tokens.size(1), state[0].size(1)
        n_keys = n_mem + n_query
        h = self.drop(self.word_emb(tokens))  # [B, T, d]
        dtype, device = h.dtype, h.device
        cached = self._uses_eval_cache(keep, n_last)
        if cached:
            signature = weights_signature(self._weights_generation, self.parameters())
            tables, room = self._kept_tables(signature), keep + n_query  # built for a full memory's window
            reusable = isinstance(state, CachedMemory) and state.signature == signature
        else:
            tables, room = Tables(), n_keys
        same_length = self._same_length_window()
        mask = tables.mask(("mask", n_query, n_mem, same_length, dtype, device),
                           lambda: attention_mask(n_query, n_mem, same_length, dtype, device))  # [T, K]
        memories: list[LayerMemory] = []
        for i, block in enumerate(self.blocks):
            if cached:
                rows = state.layers[i] if reusable else None
                memory = CachedLayerMemory(rows, state[i], keep, self._absolute_keys_values(i, tables, n_keys, room, dtype))
            else:
                memory = RecomputedMemory(state[i], keep)
            memories.append(memory)
            n_out = self._output_rows(i, n_query, n_last)
            absolute = self._absolute_positions(i, tables, n_keys, room, dtype)  # [K, d] or None
            positions = self._layer_positions(i, tables, n_keys, room, dtype, device)
            h = block(h, memory, mask[n_query - n_out :], positions, absolute, n_out)  # [B, n_out, d]
        next_memory = [memory.next_memory for memory in memories]
        return self.drop(h), CachedMemory(next_memory, signature) if cached else next_memory

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

    def _layer_positions(self, layer: int, tables: Tables, n_keys: int, room: int, dtype: torch.dtype, device: torch.device) -> Positions:
        """Layer ``layer``'s positional inputs for a window of ``n_keys`` keys; None for the absolute schemes.

        The position keys of the K + 1 :func:`relative_distances`: the paper's W_{k,R} R, with R the sinusoids of the
        distances (with dropout, as the authors' code, drawn once per chunk for every layer), or Shaw's E. They depend
        on the distance only, so they are the last K + 1 of the keys of a window of ``room`` keys (:class:`Tables`).
        Built layer by layer, so that without kept tables only one layer's keys of a chunk are alive at a time.
        """
        attn, clamp_len = self.blocks[layer].attn, self.context.clamp_len
        if self.pos_enc == "ours":
            def sinusoids(n: int) -> torch.Tensor:  # R [n, d] of the last n distances
                distances = relative_distances(n - 1, clamp_len, device).to(dtype)  # [n]
                return self.drop(sinusoid(distances, self.cfg.d_model))

            def build(n: int) -> torch.Tensor:  # [H, Dh, n]
                return attn.position_keys(tables.shared_rows(("R", clamp_len, dtype, device), n, room + 1, sinusoids))

            keys = tables.last_rows(("r", layer, clamp_len, dtype, device), n_keys + 1, room + 1, build, dim=-1)  # [H, Dh, K+1]
            return self._relative_sinusoid_positions(layer, keys)
        if self.pos_enc == "shaw":
            def build(n: int) -> torch.Tensor:  # [H, Dh, n]
                return attn.position_keys(relative_distances(n - 1, clamp_len, device))

            return LearnedRelativePositions(tables.last_rows(("shaw", layer, clamp_len, device), n_keys + 1, room + 1, build, dim=-1))
        return None

    def _absolute_position_ids(self, n_keys: int) -> torch.Tensor:
        """Position of every window row: its distance from the newest row, clamped (see module doc)."""
        ids = torch.arange(n_keys - 1, -1, -1, device=self.device)  # [K]
        if self.context.clamp_len > 0:
            ids = ids.clamp(max=self.context.clamp_len)
        return ids

    def _adds_absolute_positions(self, layer: int) -> bool:
        """Whether layer ``layer``'s window gets absolute positions: every layer for ``alrfou``, the first for ``vaswani``."""
        return self.pos_enc == "alrfou" or (self.pos_enc == "vaswani" and layer == 0)

    def _absolute_position_rows(self, layer: int, n_keys: int, dtype: torch.dtype) -> torch.Tensor:
        """What an absolute scheme adds to layer ``layer``'s window of ``n_keys`` rows [K, d] (see
        :meth:`_adds_absolute_positions`). The rows for K are the last K rows of those for any longer
        window in the Transformer-XL family (positions count back from the newest row)."""
        ids = self._absolute_position_ids(n_keys)  # [K]
        if self.pos_enc == "vaswani":
            return sinusoid(ids.to(dtype), self.cfg.d_model)  # [K, d]
        table = self.abs_pos_emb[layer]
        return table[ids.clamp(max=table.size(0) - 1)]  # [K, d]

    def _absolute_positions(self, layer: int, tables: Tables, n_keys: int, room: int, dtype: torch.dtype) -> torch.Tensor | None:
        """:meth:`_absolute_position_rows` [K, d] for a layer that adds absolute positions, else None."""
        if not self._adds_absolute_positions(layer):
            return None
        return tables.last_rows(("pos", layer, self.context.clamp_len, dtype), n_keys, room,
                                lambda n: self._absolute_position_rows(layer, n, dtype))

    def _absolute_keys_values(self, layer: int, tables: Tables, n_keys: int, room: int,
                              dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For cached evaluation, the keys and values W p [1, H, K, Dh] of the absolute positions of a post-LN layer
        that adds them: its memory keeps the rows' projections without positions and adds these, W (x + p) =
        W x + W p. None for the other layers, and with pre-LN, where LN(x + p) is not linear in p."""
        if not self._adds_absolute_positions(layer) or self.cfg.pre_lnorm:
            return None
        attn = self.blocks[layer].attn

        def build(n: int) -> torch.Tensor:  # [2, 1, H, n, Dh]
            return torch.stack(attn.keys_values(self._absolute_position_rows(layer, n, dtype)[None]))  # rows [n, d] -> [1, n, d]

        keys, values = tables.last_rows(("pos_kv", layer, self.context.clamp_len, dtype), n_keys, room, build, dim=-2).unbind(0)  # [2, 1, H, K, Dh] -> [1, H, K, Dh] each
        return keys, values

    # -- counts --------------------------------------------------------------------------------------

    def counts(self) -> ModelCounts:
        """:func:`transformer_counts` of the model's configuration."""
        return transformer_counts(self.cfg)

    # -- evaluation with a cached state -------------------------------------------------------------

    @property
    def eval_cache(self) -> bool:
        """Whether evaluation uses the cached state (:meth:`set_eval_cache`)."""
        return self._eval_cache

    def set_eval_cache(self, enabled: bool) -> None:
        """Evaluate with the cached state, :class:`~txlab.models.eval_cache.CachedMemory` (the default), or, off,
        on the training path: every chunk re-projects the whole memory, as the authors' code does. It changes the
        speed, not the results (the two agree to rounding: tests/test_eval_cache.py)."""
        self._eval_cache = bool(enabled)

    def weights_changed(self) -> None:
        """Say that the weights were written through ``.data`` (which torch's version counters do not see): nothing
        evaluation projected before is reused. Optimizer steps, ``load_state_dict``, ``.to()``, in-place writes
        (``param.copy_(...)`` under ``no_grad``) and a switch between training and evaluation are noticed without it
        (:func:`~txlab.models.eval_cache.weights_signature`)."""
        self._weights_generation += 1

    def train(self, mode: bool = True) -> TransformerXL:
        """``nn.Module.train`` (which ``eval()`` calls too), which also ends what evaluation kept: evaluation after
        training starts with ``eval()``, so weights written during training by any means are never read from an
        older cache."""
        self.weights_changed()
        return super().train(mode)

    def _uses_eval_cache(self, keep: int, n_last: int) -> bool:
        """The cached path runs in evaluation mode without autograd, with memory kept (not for window scoring), and
        in full precision: its tables are kept across calls, and autocast's would outlive the autocast region."""
        return (self._eval_cache and keep > 0 and n_last == 0 and not self.training and not torch.is_grad_enabled()
                and not torch.is_autocast_enabled(self.device.type))

    def _kept_tables(self, signature: tuple) -> Tables:
        """The tables cached evaluation keeps while the weights are unchanged."""
        if self._tables is None or self._tables.signature != signature:
            self._tables = Tables(signature)
        return self._tables


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

    The model's outputs are the same as without it, bit for bit: a record is computed beside the attention
    kernel, from the same score the kernel is given (:meth:`MultiHeadAttention.score_terms`), instead of
    replacing it. Outside the block nothing is recorded and
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
    """The parameters, window and FLOPs of the model :func:`build_transformer` gives ``cfg``, without building it.

    Per layer and token: the key and value projections; per query: the q and output projections and the
    feed-forward; per key attended: the score products ((a)+(c) and (b)+(d) for the relative schemes, one for the
    absolute ones) and the weighted sum. Outside the layers: the first input projection, and the output layer over the
    whole vocabulary (an upper bound for an adaptive softmax, which evaluates a tail only for its own tokens). Not per
    token: ``r_net`` (``ours``), applied once per chunk to the K + 1 distances and shared by every query of the batch.
    """
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
        position_key_flops=2 * d * inner if cfg.pos_enc == "ours" else 0,
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


def _weights_loaded(model: TransformerXL, incompatible_keys) -> None:
    """``load_state_dict`` wrote the weights (a post-hook of every TransformerXL)."""
    model.weights_changed()
