"""The one check of a device name, for every command that runs a model.

A device reaches txlab as ``--device`` (eval, generate, attention, roles, speed, recl, train), as
``--set train.device=`` or as a study's ``device`` setting. Torch would take a bad one as far as the
first tensor it places there and fail with its own traceback (``RuntimeError: Expected one of cpu,
cuda, ...`` for a name it does not know, ``AssertionError: Torch not compiled with CUDA enabled`` on a
CPU build). :func:`check_device` turns each of these into one :class:`~txlab.errors.TxlabError` line
before any work starts:

- the name must be one txlab runs models on: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``
  (:func:`check_device_name`, which needs no torch and also checks names in config files);
- the backend must be compiled into this torch (a CPU build has no CUDA);
- a device of it must be present (a driver and a visible GPU; ``cuda:N`` below the GPU count).

Only the name is checked where a setting is read (a run's saved ``train.device`` stays readable on a
machine without its GPU); availability is checked where a model is placed.
"""

from __future__ import annotations

import difflib
import re

from txlab.errors import TxlabError

DEVICE_NAME = re.compile(r"(cpu|cuda|mps)(:(0|[1-9][0-9]{0,3}))?")
"""The names txlab places models on: a torch device type it supports, with an optional index."""

DEVICE_KINDS = "cpu, cuda, cuda:N (an NVIDIA GPU) or mps (Apple silicon)"

GPU_INSTALL = "install torch's CUDA build (README.md, Install: on Linux `pip install torch` from PyPI is one)"


def check_device_name(name: object, source: str = "--device") -> str:
    """``name`` if it names a device txlab can run on (``cpu``, ``cuda``, ``cuda:N``, ``mps``), else a TxlabError naming ``source``."""
    if not isinstance(name, str) or DEVICE_NAME.fullmatch(name) is None:
        close = difflib.get_close_matches(str(name).lower(), ["cpu", "cuda", "mps"], n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close and close[0] != name else ""
        raise TxlabError(f"{source}: unknown device {name!r}{hint}; txlab runs models on {DEVICE_KINDS}")
    return name


def check_device(name: object, source: str = "--device"):
    """The ``torch.device`` for ``name``, once the name is valid, its backend is compiled into this torch
    and a device of it is present; otherwise one TxlabError naming ``source`` and what to do."""
    import torch  # here, not at import: check_device_name serves config parsing, which needs no torch

    if isinstance(name, torch.device):  # what a caller already placed something on, e.g. map_location
        name = str(name)
    name = check_device_name(name, source)
    device = torch.device(name)
    if device.type == "cuda":
        if torch.version.cuda is None:
            raise TxlabError(f"{source} {name}: this torch ({torch.__version__}) is a CPU-only build, without CUDA; "
                             f"{GPU_INSTALL}, or use --device cpu")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise TxlabError(f"{source} {name}: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU here "
                             "(no NVIDIA driver, or $CUDA_VISIBLE_DEVICES hides them; `nvidia-smi` lists what the machine has); use --device cpu")
        if device.index is not None and device.index >= count:
            raise TxlabError(f"{source} {name}: this machine has {count} GPU{'s' if count > 1 else ''} "
                             f"(cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    elif device.type == "mps":
        if not torch.backends.mps.is_built():
            raise TxlabError(f"{source} {name}: this torch ({torch.__version__}) was built without MPS, which only macOS builds have; use --device cpu")
        if not torch.backends.mps.is_available():
            raise TxlabError(f"{source} {name}: MPS is not available on this machine (it needs Apple silicon and macOS 12.3 or newer); use --device cpu")
        if device.index not in (None, 0):
            raise TxlabError(f"{source} {name}: a Mac has one MPS device, mps (or mps:0)")
    return device
