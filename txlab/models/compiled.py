"""Compiled scoring: a model's stack of layers run through ``torch.compile`` while it is scored.

On a GPU, what a collection spends outside the matrix products goes to small elementwise kernels around them
(norms, activations, rotary embeddings, casts), one launch and one trip through memory each. Compiling a layer fuses
them. Each layer of the stack is compiled with dynamic shapes, so one compiled code serves every layer and every
window length; the first forward pays the compilation (seconds on a GPU).

``compile`` (a collection setting; :func:`txlab.load_model`'s argument):

- ``auto`` (the default): compiled on a CUDA device where torch can compile for it (Triton), as loaded elsewhere.
  On the CPU compiling costs more than it saves on a collection's scale, and needs a C++ compiler.
- ``on``: compiled on any device (on the CPU, torch needs a C++ compiler).
- ``off``: the model's layers as written.

Only a model with a stack of identical layers is compiled (:meth:`txlab.models.interface.LanguageModel.layer_stack`: a
Hugging Face causal LM's decoder layers). txlab's own Transformers compile as their configuration says, in training and
evaluation alike (``model.compile``, :meth:`txlab.models.transformer.TransformerXL.compile_layers`), as they take their
own ``eval.precision``; this setting leaves them alone. Compiled kernels round differently from eager ones: in bf16 the
losses move in their last bits.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from txlab.config import COMPILE_MODES
from txlab.errors import did_you_mean
from txlab.models.interface import LanguageModel

BACKEND: str | Callable = "inductor"
"""The torch.compile backend. Tests swap in ``eager`` (the same graph capture, no code generation) to stay fast, or
one that fails."""

_compiled: weakref.WeakKeyDictionary[nn.ModuleList, tuple[str | Callable, list[nn.Module]]] = weakref.WeakKeyDictionary()
"""Each stack's compiled layers, made once and kept while the stack lives: a second collection reuses them."""


def check_compile(mode: str) -> str:
    if mode not in COMPILE_MODES:
        raise did_you_mean(str(mode), COMPILE_MODES, "compile setting")
    return mode


def compiles(model: LanguageModel, mode: str) -> bool:
    """Whether scoring ``model`` under ``mode`` runs its layers compiled."""
    if check_compile(mode) == "off" or model.layer_stack() is None:
        return False
    if mode == "on":
        return True
    from torch.utils._triton import has_triton

    return model.device.type == "cuda" and has_triton()


@contextmanager
def compiled_layers(model: LanguageModel, mode: str = "auto") -> Iterator[bool]:
    """``model``'s layers swapped for their compiled forms inside the block, where :func:`compiles` says so (yields
    whether they are); the layers as loaded are put back after it.

    Under ``auto`` the layers are compiled on the spot by one forward of two short rows: where torch cannot compile
    them (an architecture it does not trace), a warning says so and the model is scored as written. Under ``on`` that
    failure is the caller's error."""
    if not compiles(model, mode):
        yield False
        return
    stack = model.layer_stack()
    backend, layers = _compiled.get(stack, ("", []))
    if backend != BACKEND or len(layers) != len(stack):
        layers = [torch.compile(layer, dynamic=True, backend=BACKEND) for layer in stack]
        _compiled[stack] = (BACKEND, layers)
    loaded = list(stack)

    def put_back() -> None:
        for i, layer in enumerate(loaded):
            stack[i] = layer

    for i, layer in enumerate(layers):
        stack[i] = layer
    if mode == "auto":
        try:
            with torch.inference_mode():
                model(torch.zeros(2, 3, dtype=torch.long, device=model.device), model.init_state(2))
        except Exception as err:  # noqa: BLE001 - whatever stops torch.compile, the layers as written still score
            put_back()
            said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())  # dynamo's: "backend=... raised: Error: why"
            warnings.warn(f"torch.compile could not compile {type(loaded[0]).__name__} ({said[:200] or type(err).__name__}); scoring the layers as "
                          "written (--set compile=off skips the attempt)", RuntimeWarning, stacklevel=3)
            yield False
            return
    try:
        yield True
    finally:
        put_back()
