"""Training memory of a configuration, and the longest segment that fits a memory budget (Table 10).

The paper's Table 10 compares models under the same GPU memory: a model without recurrence can
back-propagate through longer segments than one that also attends to a memory. To reproduce that
choice anywhere, :func:`training_memory` measures one training step of a configuration:

- on CUDA, the allocator's peak (``torch.cuda.max_memory_allocated``) over forward, backward and
  the optimizer step;
- on CPU, where no allocator reports a peak, an exact account of what a step must hold at once:
  parameters, gradients and the two Adam moments (4x the parameter bytes), the recurrent state,
  and every tensor autograd saves for the backward pass (counted once per storage, parameters
  excluded). It is deterministic, so a search over segment lengths is exact and repeatable.

:func:`fit_length` then finds the largest value of an integer config key (``model.tgt_len`` for
Table 10) whose step fits a budget, by bisection: memory grows with the segment length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import torch

from txlab.config import ModelConfig, RunConfig, update_dataclass
from txlab.errors import TxlabError
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.runs.capacity import FLOAT_BYTES
from txlab.runs.evaluate import segment_loss
from txlab.runs.train import make_optimizer

MIB = 2**20


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors(obj) -> Iterator[torch.Tensor]:
    """Every tensor in a (nested list/tuple) model state."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


def _bytes_of(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    seen = {}
    for t in tensors:
        seen[_storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _cpu_step_bytes(cfg: RunConfig, model_cfg: ModelConfig, batch_rows: int) -> int:
    model = build_model(model_cfg)
    model.set_context(Context(model_cfg.mem_len, model_cfg.same_length, model_cfg.clamp_len))
    model.train()
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(model_cfg.n_token, (batch_rows, model_cfg.tgt_len), generator=generator)
    with torch.no_grad():  # a full memory, as every step after the first has
        state = model(tokens, model.init_state(batch_rows)).state
    state_tensors = list(_tensors(state))
    skip = {_storage_key(p) for p in model.parameters()} | {_storage_key(t) for t in state_tensors}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in skip:
            saved[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(tokens, state, tokens)
        segment_loss(out.nll, cfg.train.loss)
    return 4 * model.num_parameters() * FLOAT_BYTES + _bytes_of(state_tensors) + sum(saved.values())  # weights, gradients, Adam's moments


def _cuda_step_bytes(cfg: RunConfig, model_cfg: ModelConfig, batch_rows: int, device: torch.device) -> int:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    model = build_model(model_cfg).to(device)
    model.set_context(Context(model_cfg.mem_len, model_cfg.same_length, model_cfg.clamp_len))
    optimizer = make_optimizer(model.parameters(), cfg.train, device)
    tokens = torch.randint(model_cfg.n_token, (batch_rows, model_cfg.tgt_len), device=device)
    state = model.init_state(batch_rows)
    for _ in range(2):  # the second step runs with a full memory and allocated Adam moments
        out = model(tokens, state, tokens)
        segment_loss(out.nll, cfg.train.loss).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state = out.state
    peak = torch.cuda.max_memory_allocated(device)
    del model, optimizer, state, out
    torch.cuda.empty_cache()
    return int(peak)


def training_memory(cfg: RunConfig, n_token: int, device: str = "cpu") -> int:
    """Bytes one training step of ``cfg`` needs (per process: ``batch_size / grad_accum`` streams)."""
    if n_token < 1:
        raise TxlabError("training_memory needs the vocabulary size")
    model_cfg = replace(cfg.model, n_token=n_token)
    batch_rows = max(cfg.train.batch_size // cfg.train.grad_accum, 1)
    target = torch.device(device)
    if target.type == "cuda":
        return _cuda_step_bytes(cfg, model_cfg, batch_rows, target)
    return _cpu_step_bytes(cfg, model_cfg, batch_rows)


def fit_length(
    cfg: RunConfig,
    key: str,
    budget_bytes: int,
    measure: Callable[[RunConfig], int],
    step: int = 8,
    limit: int = 8192,
) -> tuple[int, int]:
    """The largest multiple of ``step`` (up to ``limit``) for config key ``key`` (e.g. ``model.tgt_len``)
    whose step ``measure`` keeps within ``budget_bytes``; returns (value, its measured bytes)."""
    section, _, name = key.partition(".")
    if not name or not isinstance(getattr(getattr(cfg, section, None), name, None), int):
        raise TxlabError(f"fit: {key!r} is not an integer config key such as model.tgt_len")

    def bytes_at(value: int) -> int:
        return measure(update_dataclass(cfg, {section: {name: value}}))

    low, low_bytes = step, bytes_at(step)
    if low_bytes > budget_bytes:
        raise TxlabError(f"fit: even {key}={step} needs {low_bytes / MIB:.1f} MiB, over the budget of {budget_bytes / MIB:.1f} MiB")
    high = 2 * step
    while (high_bytes := bytes_at(high)) <= budget_bytes:  # gallop up: large probes are the costly ones
        low, low_bytes = high, high_bytes
        if high >= limit:
            raise TxlabError(f"fit: {key}={high} still fits the budget of {budget_bytes / MIB:.1f} MiB; the budget does not constrain {key}")
        high = min(2 * high, limit // step * step)
    while high - low > step:  # invariant: low fits, high does not
        middle = (low + high) // 2 // step * step
        middle_bytes = bytes_at(middle)
        if middle_bytes <= budget_bytes:
            low, low_bytes = middle, middle_bytes
        else:
            high = middle
    return low, low_bytes
