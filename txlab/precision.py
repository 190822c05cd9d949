"""Mixed precision: how a model computes in ``fp32``, ``bf16`` or ``fp16``, for training and evaluation alike.

The setting is ``train.precision`` for the training steps and ``eval.precision`` for every evaluation of a
run (the periodic validation, ``txlab eval``, its loss tables for RECL):

- ``fp32`` (the default): everything in float32, as txlab always computed; no flag is touched on the
  CPU, and on CUDA matmuls are kept at full fp32 (torch's default), so fp32 means fp32 everywhere.
- ``bf16``: forward passes run under ``torch.autocast`` in bfloat16: matmuls in bf16, layer norms and
  reductions per autocast's rules for the device; parameters, gradients and the optimizer state stay fp32.
- ``fp16``: the same in float16, and training scales the loss dynamically (``torch.amp.GradScaler``),
  since fp16 gradients underflow without it; the scaler's state is saved with each checkpoint, so a
  resumed run goes on with the scale it had.

What precision needs stays in fp32 whatever the setting: the log-softmax over the vocabulary (its
log-sum-exp, txlab.models.softmax), hence every per-token loss and the loss tables RECL reads; evaluation sums
losses in float64. On a CUDA GPU with TF32 (compute capability 8.0 and later) bf16 and fp16 also let the
matmuls autocast leaves in fp32 use TF32. Runs record their precision (config.yaml) and whether TF32 was
on (each training record of metrics.jsonl); evaluation records and loss tables record theirs.

A Hugging Face checkpoint (``hf:``) is loaded with its weights in the precision asked for (txlab.models.hf), and is
scored in it natively, without autocast (:func:`scoring_precision`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import ContextManager

import torch

from txlab.config import PRECISIONS
from txlab.errors import TxlabError, did_you_mean

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The torch dtype of each precision: what autocast computes in, and a Hugging Face model's weights."""


def check_precision(precision: str, device: str | torch.device, family: str = "", source: str = "precision") -> None:
    """Refuse (one TxlabError naming ``source``) a precision this torch cannot run on ``device``'s kind:
    autocast without that dtype there, or a model ``family`` whose kernels lack it (the CPU's fp16 LSTM)."""
    if precision not in PRECISIONS:
        raise did_you_mean(str(precision), PRECISIONS, source)
    if precision == "fp32":
        return
    device_type = torch.device(device).type
    others = " or ".join(p for p in PRECISIONS if p != precision)
    if not _autocast_runs(device_type, DTYPES[precision]):
        raise TxlabError(f"{source} {precision}: torch {torch.__version__} has no {str(DTYPES[precision]).removeprefix('torch.')} "
                         f"autocast on this {device_type}; use {others}")
    if family == "lstm" and precision == "fp16" and device_type == "cpu" and not _cpu_fp16_lstm_runs():
        raise TxlabError(f"{source} fp16: this CPU's LSTM kernel (oneDNN) has no float16 version; use {others}")


def _autocast_runs(device_type: str, dtype: torch.dtype) -> bool:
    """Whether autocast in ``dtype`` is on inside its region: torch turns it off with a warning where the
    device kind lacks the dtype, and raises where a GPU lacks bfloat16."""
    if not torch.amp.is_autocast_available(device_type):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autocast(device_type, dtype=dtype):
                return torch.is_autocast_enabled(device_type)
        except RuntimeError:
            return False


def _cpu_fp16_lstm_runs() -> bool:
    """Whether a one-unit LSTM's training forward runs under CPU fp16 autocast. oneDNN's needs AVX512-FP16 or AMX-FP16,
    and some CPUs that run its inference forward in fp16 (a Xeon with AMX, 2026-11-30) still lack the training one."""
    try:
        with torch.enable_grad(), torch.autocast("cpu", dtype=torch.float16):
            torch.nn.LSTM(1, 1)(torch.zeros(1, 1, 1))
    except RuntimeError:
        return False
    return True


def autocast(precision: str, device: str | torch.device) -> ContextManager:
    """The autocast region of a forward pass in ``precision`` (nothing for fp32)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=DTYPES[precision])


def has_tf32(device: str | torch.device) -> bool:
    """Whether ``device`` is a CUDA GPU with TF32 matmuls (compute capability 8.0 and later)."""
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


@contextmanager
def matmul_precision(precision: str, device: str | torch.device) -> Iterator[bool]:
    """fp32 matmuls on a CUDA device in TF32 for bf16 and fp16 (where the GPU has it), at full fp32 for
    fp32, restored on exit; nothing changes on other devices. Yields whether TF32 is on."""
    if torch.device(device).type != "cuda":
        yield False
        return
    tf32 = precision != "fp32" and has_tf32(device)
    previous = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    try:
        yield tf32
    finally:
        torch.backends.cuda.matmul.fp32_precision = previous


@contextmanager
def scoring_precision(precision: str, device: str | torch.device, weights: torch.dtype = torch.float32) -> Iterator[bool]:
    """Forward passes in ``precision`` (autocast and the matmul precision) for evaluation; yields whether TF32 is on.

    A model whose ``weights`` are already in that precision's dtype (a Hugging Face checkpoint loaded in it) computes
    in it natively, without autocast: autocast gives its matmuls nothing, and on CUDA it runs layer norms and powers
    in fp32 with casts around them. In a profile of a GPT-2 shape's bf16 loss collection on an H200 under autocast,
    fp32 elementwise kernels and casts took about 60% of the GPU's busy time, the largest matrix-product kernel about 10%."""
    native = weights == DTYPES[precision]
    with matmul_precision(precision, device) as tf32, (nullcontext() if native else autocast(precision, device)):
        yield tf32


def rounding_unit(computed: torch.Tensor) -> float:
    """Machine epsilon of the precision ``computed`` was made in: autocast's dtype where autocast is on for its
    device (its matmuls rounded there, whatever dtype they handed on), else the tensor's own dtype."""
    device = computed.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else computed.dtype
    return torch.finfo(dtype).eps


def loss_scaler(precision: str, device: str | torch.device) -> torch.amp.GradScaler:
    """The training's loss scaler: dynamic for fp16; for fp32 and bf16 a disabled one, whose calls pass
    the loss and the optimizer step through unchanged."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=precision == "fp16")
