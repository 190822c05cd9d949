"""Transformer-XL's cached evaluation state: memory rows that keep the keys and values already projected from them.

In evaluation (eval mode, no autograd) the weights do not change from chunk to chunk, so the keys and values
a layer projected from its memory rows when they were new are the ones a later chunk would project again.
The training path re-projects the whole window [SG(m) o h] every chunk, as the paper (and the authors'
evaluation) does; the cached path projects only the chunk's own rows and reads the others:

- :class:`CachedMemory` is the state between chunks: still the plain per-layer memory (a list of [B, M, d]
  inputs) that every caller and the training path accept, plus each layer's stored keys and values;
- :class:`CachedLayerMemory` is one layer's memory while a chunk runs; the layer
  (:class:`txlab.models.transformer.Block`) calls it where the training path's
  :class:`txlab.models.transformer.RecomputedMemory` projects every row;
- :class:`Tables` holds what a chunk computes from the weights and shapes alone (masks, position keys, absolute
  positions): built for each chunk on the training path, kept across chunks here;
- :func:`weights_signature` tells when kept projections are stale: after an optimizer step over the model's
  parameters, ``load_state_dict``, a switch between training and evaluation (``model.train()``/``model.eval()``),
  a parameter replaced (``.to()``) or written in place (``p.add_()``, ``p.copy_()``), or ``model.weights_changed()``
  after a write through ``.data``.

The rows live in preallocated stores (:class:`_RowStore`) that successive states of a stream share: a chunk
writes its T new rows there, and its window is a view (docs/performance.md).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

# --------------------------------------------------------------------------------------------------
# When kept projections are stale

_optimizer_steps: dict[int, int] = {}
"""For each live parameter an optimizer has stepped (by id), how many steps have: each may have written it."""


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in _optimizer_steps:
                weakref.finalize(p, _optimizer_steps.pop, id(p), None)  # a later tensor may reuse the id
            _optimizer_steps[id(p)] = _optimizer_steps.get(id(p), 0) + 1


# Every torch optimizer runs this after its step, fused ones included (which write the weights without bumping
# their version counters).
register_optimizer_step_post_hook(_count_optimizer_step)


def weights_signature(generation: int, parameters: Iterable[torch.Tensor]) -> tuple:
    """Changes whenever the weights may have changed: the model's own count of changes ``generation`` (its
    ``load_state_dict``, ``train()``/``eval()``, ``weights_changed()``), an optimizer step over any of the
    ``parameters``, a parameter moved to new storage (``.to()``, ``.double()``), or written in place (``p.add_()``,
    ``p.copy_()`` under ``no_grad`` or inference mode: torch counts each in-place write in the tensor's version, which
    ``.detach()`` shares; only writes through ``.data`` escape it, as they escape autograd). Per parameter three integers
    read, no weight touched. A parameter made in inference mode keeps no version counter: it gets a number never given
    before, so projections made from it are never reused (correct, at the training path's speed)."""
    return generation, tuple((p.data_ptr(), next(_unseen) if p.is_inference() else p._version, _optimizer_steps.get(id(p), 0))
                             for p in parameters)


_unseen = itertools.count()
"""Numbers no signature held before (:func:`weights_signature`)."""


# --------------------------------------------------------------------------------------------------
# Tables that depend only on the weights and the shapes


class Tables:
    """What a chunk computes from the weights and its shape alone: masks, position keys, absolute positions.

    Each table is built for ``room`` rows and read as its last rows: position keys are keyed by distance and
    absolute positions count back from the newest row, so the rows for a window of K keys are the last rows of
    those for any longer window. Cached evaluation keeps one instance while its :attr:`signature` holds, with
    ``room`` the window of a full memory, so every chunk of a stream slices the same tables. The training path
    builds a fresh one per chunk (no signature) with ``room`` = K: each table is exactly the chunk's, and only
    what every layer of the chunk shares (:meth:`shared_rows`) is kept, for that chunk.
    """

    def __init__(self, signature: tuple | None = None):
        self.signature = signature
        self._built: dict[tuple, torch.Tensor] = {}

    def last_rows(self, key: tuple, n_rows: int, room: int, build: Callable[[int], torch.Tensor], dim: int = 0) -> torch.Tensor:
        """The last ``n_rows`` along ``dim`` of ``build(n)``, built for ``max(n_rows, room)`` rows (once, in kept tables)."""
        table = self._built.get(key)
        if table is None or table.size(dim) < n_rows:
            table = build(max(n_rows, room))
            if self.signature is not None:
                self._built[key] = table
        return table if table.size(dim) == n_rows else table.narrow(dim, table.size(dim) - n_rows, n_rows)

    def shared_rows(self, key: tuple, n_rows: int, room: int, build: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """:meth:`last_rows` of a table every layer of a chunk reads (the sinusoids R, whose dropout is drawn once
        a chunk): kept, in per-chunk tables too."""
        table = self._built.get(key)
        if table is None or table.size(0) < n_rows:
            table = self._built[key] = build(max(n_rows, room))
        return table if table.size(0) == n_rows else table.narrow(0, table.size(0) - n_rows, n_rows)

    def mask(self, key: tuple, build: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The attention mask of ``key`` (its shape), kept for the last few shapes (filling, full, the last chunk)."""
        mask = self._built.get(key)
        if mask is None:
            for old in [k for k in self._built if k[0] == "mask"][:-3]:
                del self._built[old]
            mask = self._built[key] = build()
        return mask


# --------------------------------------------------------------------------------------------------
# Row stores and the memory update on them


def kept_memory_rows(n_window: int, mem_len: int) -> int:
    """How many rows of a layer's window the next memory keeps: its last ``mem_len``, or all if fewer."""
    return min(n_window, mem_len)


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
    """The memory update of :func:`txlab.models.transformer.update_memory` for rows kept in a store: the window
    [old ; new] of each kind of row, as views with M + T rows, and the layer's next memory, the last ``keep`` rows
    of it. ``rows`` is where ``old`` lives (None: they are not in a store)."""
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


# --------------------------------------------------------------------------------------------------
# The state between chunks, and one layer's memory during a chunk


class CachedMemory(list):
    """A Transformer-XL memory that also carries what evaluation already computed from it.

    It *is* the memory (a list with one [B, M, d] tensor of inputs per layer) and can be passed wherever one
    is, training included; in addition, for every layer it keeps the keys and values [B, H, M, Dh] the layer
    projected from those rows when they were new. ``signature`` names the weights they were computed with
    (:func:`weights_signature`); a state whose weights have changed since is treated as a plain memory and
    projected afresh.
    """

    def __init__(self, layers: list[_LayerRows], signature: tuple):
        super().__init__(rows.views()[0] for rows in layers)
        self.layers = layers
        self.signature = signature


class CachedLayerMemory:
    """One layer's memory in cached evaluation, while a chunk runs: the cached counterpart of
    :class:`txlab.models.transformer.RecomputedMemory`, with the same two calls.

    The layer projects only the chunk's own rows (:meth:`rows_to_project`); the keys and values of the memory
    rows come from the store, or, for a plain memory (a fresh state, one from training, one whose weights have
    changed), are projected once here. With absolute positions, a memory row's position changes from chunk to
    chunk (it counts back from the newest row), so rows are kept without positions and the projected positions
    added, W (x + p) = W x + W p; with pre-LN that does not hold (LN(x + p) is not linear) and the layer
    re-projects its whole window, as the training path does.
    """

    def __init__(self, rows: _LayerRows | None, memory: torch.Tensor, keep: int,
                 absolute_kv: tuple[torch.Tensor, torch.Tensor] | None = None):
        """``rows``: where the memory [B, M, d] and its keys and values are stored (None: projected here);
        ``keep``: memory rows kept for the next chunk; ``absolute_kv``: the keys and values W p [1, H, K, Dh] of the
        absolute positions of the window's rows, for a post-LN layer that adds positions."""
        self.rows, self.memory, self.keep, self.absolute_kv = rows, memory, keep, absolute_kv
        self.new: torch.Tensor | None = None
        """The chunk's rows h [B, T, d], without positions (:meth:`rows_to_project`)."""
        self.absolute: torch.Tensor | None = None
        self.next_memory: _LayerRows | None = None
        """The layer's next memory, once :meth:`keys_values` ran."""

    def _old_rows(self, attn=None) -> list[torch.Tensor]:
        """The memory's rows of each kind the store keeps: its inputs and, given the layer's attention, their keys
        and values; read from the store, or projected now."""
        if self.rows is not None:
            return self.rows.views()
        return [self.memory] if attn is None else [self.memory, *attn.keys_values(attn.norm(self.memory))]

    def rows_to_project(self, h: torch.Tensor, absolute: torch.Tensor | None) -> torch.Tensor:
        """The rows the layer projects now, with their positions: the chunk's own [B, T, d] (a pre-LN layer with
        absolute positions: the whole window [B, K, d])."""
        self.new, self.absolute = h, absolute
        if absolute is None:
            return h
        if self.absolute_kv is not None:
            return h + absolute[absolute.size(0) - h.size(1) :]
        (window,), self.next_memory = _update_memory_rows(self.rows, self._old_rows(), [h], self.keep)
        return window + absolute

    def keys_values(self, attn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, H, K, Dh] of the whole window, given the normalised rows ``x`` of
        :meth:`rows_to_project`: the memory's from the store, the chunk's projected from ``x`` and stored."""
        if self.absolute is not None and self.absolute_kv is None:
            return attn.keys_values(x)  # the whole window's, re-projected
        new = [self.new, *attn.keys_values(x if self.absolute is None else self.new)]  # kept without positions
        (_, keys, values), self.next_memory = _update_memory_rows(self.rows, self._old_rows(attn), new, self.keep)
        if self.absolute_kv is not None:
            keys, values = keys + self.absolute_kv[0], values + self.absolute_kv[1]
        return keys, values
