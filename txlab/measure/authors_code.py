"""The authors' reference implementation, timed beside txlab on the same shapes (``txlab bench model --authors-code``).

The paper's authors published their PyTorch model as ``pytorch/mem_transformer.py`` in
kimiyoung/transformer-xl. A speed ratio quoted against it means something only when both run on the
same machine, in the same process, at the same time; so ``txlab bench model --authors-code DIR`` loads
``MemTransformerLM`` from the user's own clone (``DIR`` is the clone or its ``pytorch/`` folder; txlab
ships none of that code), builds it at the benchmark's shape and times it in alternation with txlab's
model (:func:`txlab.timing.interleaved_median_seconds`).

The workloads mirror the authors' scripts:

- **train**: ``train.py``'s step: forward with the memories, mean loss, backward, gradient clipping at
  0.25, Adam, memories carried to the next segment; dropout 0.1, no attention dropout.
- **eval with memory M**: ``eval.py``'s step in inference mode with ``mem_len = M`` (``attn_type 0``, the
  paper's relative encoding), memories carried.
- **vanilla window L**: the Al-Rfou et al. model (``attn_type 3``: learned positions added at every
  layer) reading ``L`` tokens and scoring only the last (target length 1), as the authors evaluate with
  an extended context and no memory.

Their 2019 code needs three things newer PyTorch no longer gives, supplied around their calls only:
``torch.version.cuda`` is read at import (None on a CPU build), and attention masks are ``uint8``
where ``masked_fill`` now requires ``bool`` (converted per call; the mask is built once per forward).
Their ``MemTransformerLM`` leaves parameters uninitialised (their ``train.py`` initialises them), so
they are drawn here as there: normal with std 0.02, layer-norm gains 1 and biases 0.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError

_MODEL_FILE = "mem_transformer.py"


def model_file(directory: str | Path) -> Path:
    """``mem_transformer.py`` of a clone of kimiyoung/transformer-xl (the clone or its ``pytorch/`` folder)."""
    root = Path(directory)
    for candidate in (root / _MODEL_FILE, root / "pytorch" / _MODEL_FILE):
        if candidate.is_file():
            return candidate
    raise TxlabError(f"no {_MODEL_FILE} in {root} or {root / 'pytorch'}: give a clone of kimiyoung/transformer-xl "
                     "(git clone https://github.com/kimiyoung/transformer-xl)")


@contextlib.contextmanager
def _modern_torch() -> Iterator[None]:
    """Run the authors' code on today's PyTorch: bool masks for masked_fill, and a CUDA version string to parse."""
    fill, fill_ = torch.Tensor.masked_fill, torch.Tensor.masked_fill_
    cuda = torch.version.cuda

    def as_bool(mask: torch.Tensor) -> torch.Tensor:
        return mask.bool() if mask.dtype == torch.uint8 else mask

    torch.Tensor.masked_fill = lambda self, mask, value: fill(self, as_bool(mask), value)
    torch.Tensor.masked_fill_ = lambda self, mask, value: fill_(self, as_bool(mask), value)
    torch.version.cuda = cuda or "10.0"  # parsed at import for a CUDA-version switch that a CPU run never takes
    try:
        yield
    finally:
        torch.Tensor.masked_fill, torch.Tensor.masked_fill_ = fill, fill_
        torch.version.cuda = cuda


def load_model_class(directory: str | Path) -> type:
    """The authors' ``MemTransformerLM`` class, imported from the clone at ``directory``."""
    path = model_file(directory)
    folder = str(path.parent)
    added = [p for p in (folder, str(path.parent / "utils")) if p not in sys.path]
    sys.path[:0] = added  # their module imports its helpers as top-level modules from utils/
    try:
        spec = importlib.util.spec_from_file_location("txlab_authors_mem_transformer", path)
        module = importlib.util.module_from_spec(spec)
        with _modern_torch():
            spec.loader.exec_module(module)
    except Exception as error:  # their import failing is the user's clone, not txlab
        raise TxlabError(f"could not import the authors' model from {path}: {type(error).__name__}: {error}") from error
    finally:
        for p in added:
            sys.path.remove(p)
    return module.MemTransformerLM


def _initialise(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                parameter.fill_(1.0)
            elif name.endswith("bias") and parameter.dim() == 1:
                parameter.zero_()
            else:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


def build(model_class: type, cfg: ModelConfig, tgt_len: int, mem_len: int, attn_type: int = 0, seed: int = 0) -> torch.nn.Module:
    """The authors' model at ``cfg``'s shape (full softmax, tied embeddings), initialised as their train.py does."""
    model = model_class(
        cfg.n_token, cfg.n_layer, cfg.n_head, cfg.d_model, cfg.d_head, cfg.d_inner, cfg.dropout, cfg.dropatt,
        tie_weight=True, d_embed=cfg.d_model, div_val=1, tie_projs=[False], pre_lnorm=False,
        tgt_len=tgt_len, ext_len=0, mem_len=mem_len, cutoffs=[], same_length=cfg.same_length,
        attn_type=attn_type, clamp_len=cfg.clamp_len or -1,
    )
    _initialise(model, seed)
    return model


def _called(model: torch.nn.Module, data: torch.Tensor, target: torch.Tensor, mems: list) -> list:
    with _modern_torch():
        return model(data, target, *mems)


def train_step(model_class: type, cfg: ModelConfig, tokens: torch.Tensor, seed: int = 0) -> tuple[Callable[[], None], int]:
    """One training step of their train.py on ``tokens`` [B, T+1] (memory T), and the model's parameter count."""
    seg_len = tokens.size(1) - 1
    model = build(model_class, cfg, seg_len, seg_len, seed=seed).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    data, target = tokens[:, :-1].t().contiguous(), tokens[:, 1:].t().contiguous()  # [T, B], time-major as theirs
    mems: list[Any] = [[]]

    def step() -> None:
        out = _called(model, data, target, mems[0])
        loss, mems[0] = out[0], out[1:]
        loss.float().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        model.zero_grad()

    return step, sum(p.numel() for p in model.parameters())


def eval_step(model_class: type, cfg: ModelConfig, tokens: torch.Tensor, mem_len: int, seed: int = 0) -> tuple[Callable[[], None], int]:
    """One evaluation segment of their eval.py (inference mode, memory ``mem_len``), and the parameter count."""
    seg_len = tokens.size(1) - 1
    model = build(model_class, cfg, seg_len, mem_len, seed=seed).eval()
    data, target = tokens[:, :-1].t().contiguous(), tokens[:, 1:].t().contiguous()
    mems: list[Any] = [[]]

    def step() -> None:
        with torch.inference_mode():
            mems[0] = _called(model, data, target, mems[0])[1:]

    return step, sum(p.numel() for p in model.parameters())


def vanilla_step(model_class: type, cfg: ModelConfig, windows: torch.Tensor, targets: torch.Tensor,
                 seed: int = 0) -> tuple[Callable[[], None], int]:
    """Score the last position of each window [B, L] (Al-Rfou et al.'s model, no memory), and the parameter count."""
    window = windows.size(1)
    model = build(model_class, cfg, window, 0, attn_type=3, seed=seed).eval()
    data, target = windows.t().contiguous(), targets[None, :]  # [L, B], [1, B]: only the last position is scored

    def step() -> None:
        with torch.inference_mode():
            _called(model, data, target, [])

    return step, sum(p.numel() for p in model.parameters())
