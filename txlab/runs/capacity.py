"""Refusing sizes that cannot fit: a lower bound on a step's memory, checked before anything is allocated.

A segment, batch or attention length far beyond the machine would otherwise end in an allocator
error after minutes of work (or in swapping). :func:`check_fits` compares a *lower bound* of what a
step must hold at once against the machine's memory (RAM on CPU, the GPU's memory on CUDA) and
refuses with the estimate. Being a lower bound, it never refuses a size that fits; sizes close to
the limit are left to the allocator. (:mod:`txlab.runs.footprint` measures a step exactly, but it has to
build and run the model to do so.)

What the bound counts, in float32 (the activations in 2 bytes under bf16 or fp16 autocast, txlab.precision):

- Transformer: with relative positions, the attention bias of one layer (batch x heads x queries x
  keys; during training every layer's, twice: scores and probabilities are kept for the backward
  pass); with absolute ones only the queries x keys mask (the fused kernel may hold no scores); the
  hidden states every layer keeps (segment and memory), and one segment's logits (the full
  vocabulary unless the softmax is adaptive);
- LSTM / QRNN: every layer's gate activations over the segment (training) or one layer's (evaluation);
- the parameters (the model's count, txlab.models.build.count_model), in training four times (weights, gradients,
  Adam's two moments).
"""

from __future__ import annotations

import os

import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.build import count_model

GIB = 2**30
FLOAT_BYTES = 4


def machine_memory(device: str | torch.device) -> int:
    """Bytes of memory the device has: physical RAM for the CPU, the GPU's total memory for CUDA."""
    target = torch.device(device)
    if target.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(target).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def step_bytes(cfg: ModelConfig, rows: int, tgt_len: int, mem_len: int, *, training: bool, precision: str = "fp32") -> int:
    """A lower bound on the bytes one forward (and with ``training`` backward and optimizer) step holds at once,
    in ``precision`` (the log-probabilities over the vocabulary and the weights are fp32 in every one)."""
    vocab = cfg.cutoffs[0] if cfg.adaptive and cfg.cutoffs else cfg.n_token
    logits = rows * tgt_len * vocab
    if cfg.family in ("lstm", "qrnn"):
        activations = rows * tgt_len * 4 * cfg.d_inner * (cfg.n_layer if training else 1)
    else:
        keys = tgt_len + mem_len
        if cfg.pos_enc in ("ours", "shaw"):  # the relative terms: a [B, H, T, K] bias, in training kept per layer with the probabilities
            scores = rows * cfg.n_head * tgt_len * keys * (2 * cfg.n_layer if training else 1)
        else:  # the fused kernel may never hold the scores; only the [T, K] mask surely exists
            scores = tgt_len * keys
        hidden = (cfg.n_layer + 1) * rows * keys * cfg.d_model
        activations = scores + hidden
    weights = count_model(cfg).parameters * (4 if training else 1)
    activation_bytes = FLOAT_BYTES if precision == "fp32" else FLOAT_BYTES // 2
    return FLOAT_BYTES * (logits + weights) + activation_bytes * activations


def check_fits(cfg: ModelConfig, rows: int, tgt_len: int, mem_len: int, *, training: bool, device: str | torch.device, what: str,
               precision: str = "fp32") -> None:
    """Refuse (with the estimate) a step that needs more memory than the device has."""
    needed, available = step_bytes(cfg, rows, tgt_len, mem_len, training=training, precision=precision), machine_memory(device)
    if needed > available:
        raise TxlabError(
            f"{what} needs at least {needed / GIB:,.1f} GiB ({rows:,} streams x {tgt_len:,} tokens, memory {mem_len:,}, "
            f"{'training' if training else 'evaluation'}), more than the {available / GIB:,.1f} GiB this machine's {torch.device(device).type} has: "
            "lower the batch size, segment or attention length"
        )


def position_table_bytes(cfg: ModelConfig, keys: int) -> int:
    """Bytes of the relative-position table a Transformer-XL builds once for ``keys`` keys (its memory
    setting plus a segment, however few tokens the memory ever holds): one [keys + 1, heads x head size]
    table per layer with relative encodings, none otherwise."""
    if cfg.family not in ("xl", "vanilla") or cfg.pos_enc not in ("ours", "shaw"):
        return 0
    return FLOAT_BYTES * (keys + 1) * cfg.n_layer * cfg.n_head * cfg.d_head


def check_position_table(cfg: ModelConfig, keys: int, *, device: str | torch.device, what: str) -> None:
    """Refuse an attention length whose position table alone exceeds the device's memory (a study's
    eval_lens of 10^12 would otherwise reach the allocator: 8 TB for one table)."""
    needed, available = position_table_bytes(cfg, keys), machine_memory(device)
    if needed > available:
        raise TxlabError(f"{what}: {keys:,} keys need a relative-position table of at least {needed / GIB:,.1f} GiB, more than the "
                         f"{available / GIB:,.1f} GiB this machine's {torch.device(device).type} has: lower the memory or attention length")
