"""Checkpoints: safetensors weights, JSON metadata, and a resumable training state.

A run directory holds ``checkpoint/`` with:

- ``model.safetensors``: the weights (tied tensors stored once), loadable without pickle;
- ``meta.json``: resolved config, vocabulary hash, step, metrics, parameter count, versions;
- ``vocab.json`` (optional): the model's own vocabulary, for a model whose ids are not the ones its
  corpus gets from txlab (an imported checkpoint, see txlab.runs.convert);
- ``train_state.pt`` (optional): optimizer, step, RNG states, data position and recurrent state,
  saved with plain tensors/containers so ``torch.load(weights_only=True)`` reads it.

A new checkpoint is written to a temporary directory and swapped in by renames, so a kill at any
moment leaves either the previous checkpoint or the new one, never a mixture.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import txlab
from txlab.config import COMPUTE_SETTINGS, RunConfig, as_recorded, from_record, to_dict, update_dataclass
from txlab.data.vocab import Vocab
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import DamagedFile, read_back, read_json, write_json_atomic
from txlab.models.build import build_model, count_model
from txlab.models.interface import LanguageModel
from txlab.runs.capacity import FLOAT_BYTES, GIB, machine_memory

CHECKPOINT_DIR = "checkpoint"
WEIGHTS, META, TRAIN_STATE, VOCAB = "model.safetensors", "meta.json", "train_state.pt", "vocab.json"


def versions() -> dict[str, str]:
    return {"txlab": txlab.__version__, "torch": torch.__version__, "python": platform.python_version()}


def unique_tensors(model: LanguageModel) -> dict[str, torch.Tensor]:
    """Every saved tensor once (tied weights under their first name), as CPU tensors with their own storage.

    Own storage matters: cuDNN keeps an LSTM's weights as views of one flat buffer, which
    safetensors refuses to save as separate tensors.
    """
    return {name: t.detach().to("cpu", copy=True).contiguous() for name, t in _unique_named_tensors(model).items()}


def _unique_named_tensors(model: LanguageModel) -> dict[str, torch.Tensor]:
    """The state dict's tensors with each tied tensor once, under its first name."""
    saved = set(model.state_dict())
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}  # tied parameters appear once
    return {name: t for name, t in named.items() if name in saved}


def save_checkpoint(
    run_dir: Path,
    model: LanguageModel,
    cfg: RunConfig,
    *,
    step: int,
    vocab_hash: str,
    metrics: dict[str, Any] | None = None,
    train_state: dict[str, Any] | None = None,
    vocab: Vocab | None = None,
) -> Path:
    """Write ``run_dir/checkpoint`` atomically (replacing any previous one).

    ``vocab``: the model's own vocabulary, saved beside the weights; its hash must be ``vocab_hash``.
    """
    if vocab is not None and vocab.sha256 != vocab_hash:
        raise ValueError("the vocabulary saved with a checkpoint must be the one its vocab_hash names")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    final = run_dir / CHECKPOINT_DIR
    old = run_dir / f".{CHECKPOINT_DIR}.old"
    remove_unfinished_saves(run_dir)
    tmp = Path(tempfile.mkdtemp(dir=run_dir, prefix=f".{CHECKPOINT_DIR}."))
    try:
        _save_weights(unique_tensors(model), tmp / WEIGHTS)
        if train_state is not None:
            _save_train_state(train_state, tmp / TRAIN_STATE)
        if vocab is not None:
            vocab.save(tmp / VOCAB)
        meta = {
            "config": to_dict(as_recorded(cfg, run_dir / CHECKPOINT_DIR)),  # own text named as config.yaml names it
            "step": step,
            "vocab_hash": vocab_hash,
            "metrics": metrics or {},
            "params": model.num_parameters(),
            "versions": versions(),
        }
        write_json_atomic(tmp / META, meta)
        # A complete checkpoint stays on disk at every moment, whenever a kill comes: `final` exists
        # only as a complete copy, and `old` is removed only once `final` is there to replace it
        # (if a kill left `old` alone, it is the only good copy until the new one is in place).
        if final.exists():
            if old.exists():
                shutil.rmtree(old)
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file, with a disk error (full, read-only) raised as the OSError it is."""
    try:
        save_file(tensors, str(path))
    except SafetensorError as err:
        code = re.search(r"(?:code: |os error )(\d+)", str(err))  # safetensors writes 'code: 28' or '(os error 28)'; both name the errno
        if code is None:
            raise
        errno_ = int(code.group(1))
        raise OSError(errno_, os.strerror(errno_), str(path)) from None


class _WriteErrorKeeper:
    """A file's ``write`` that keeps the OSError it raised: torch.save reports a failed write only as
    RuntimeError('unexpected pos ...'), losing the errno a full disk gives."""

    def __init__(self, fh) -> None:
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.fh.flush()


def _save_train_state(state: dict[str, Any], path: Path) -> None:
    """torch.save of the training state, with a disk error (full, read-only) raised as the OSError it is."""
    with path.open("wb") as fh:
        keeper = _WriteErrorKeeper(fh)
        try:
            torch.save(state, keeper)
        except (RuntimeError, OSError) as err:
            error = keeper.error or (err if isinstance(err, OSError) else None)
            if error is None:
                raise
            raise OSError(error.errno, error.strerror, str(path)) from None
        fh.flush()


def remove_unfinished_saves(run_dir: Path) -> None:
    """Delete the temporary copies that saves killed before their rename left behind (one full-size
    copy each); the previous checkpoint (``.checkpoint.old``) stays. Only the process holding the run
    directory calls this (see txlab.fileio.hold_directory), so no other save is being written."""
    keep = Path(run_dir) / f".{CHECKPOINT_DIR}.old"
    for stale in Path(run_dir).glob(f".{CHECKPOINT_DIR}.*"):
        if stale != keep and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def _checkpoint_dir(run_dir: Path) -> Path:
    """The live checkpoint, or the previous one if a kill hit between the two renames of a save."""
    run_dir = Path(run_dir)
    for candidate in (run_dir / CHECKPOINT_DIR, run_dir / f".{CHECKPOINT_DIR}.old"):
        if (candidate / META).is_file() and (candidate / WEIGHTS).is_file():
            return candidate
    raise TxlabError(f"no checkpoint in {run_dir} (expected {run_dir / CHECKPOINT_DIR / WEIGHTS}); train it first with `txlab train`")


def has_checkpoint(run_dir: Path) -> bool:
    try:
        _checkpoint_dir(run_dir)
    except TxlabError:
        return False
    return True


def _remedy(directory: Path) -> str:
    return f"delete {directory} and rerun `txlab train` (or `txlab import`) to rebuild it"


def read_meta(run_dir: Path) -> dict[str, Any]:
    directory = _checkpoint_dir(run_dir)
    return read_json(directory / META, _remedy(directory), keys={"config": dict, "step": int, "vocab_hash": str, "metrics": dict})


def saved_vocab(run_dir: Path) -> Vocab | None:
    """The model's own vocabulary when its checkpoint carries one (see :func:`save_checkpoint`), else None: the
    vocabulary is then its corpus's, whose hash ``meta.json`` records."""
    path = _checkpoint_dir(run_dir) / VOCAB
    return Vocab.load(path) if path.is_file() else None


def saved_config(run_dir: Path) -> RunConfig:
    """The configuration a run's checkpoint was trained with (``checkpoint/meta.json``), resolved over
    today's defaults, so keys added to txlab since compare as their defaults: the one reader of a run's
    saved configuration."""
    return _config_of(read_meta(run_dir), _checkpoint_dir(run_dir))


def _config_of(meta: dict[str, Any], directory: Path) -> RunConfig:
    try:
        return from_record(update_dataclass(RunConfig(), meta["config"]), directory)
    except TxlabError as err:
        raise TxlabError(f"{directory / META} is damaged ({err}); {_remedy(directory)}") from None


@dataclass
class Checkpoint:
    model: LanguageModel
    config: RunConfig
    meta: dict[str, Any]
    train_state: dict[str, Any] | None
    vocab: Vocab | None = None
    """The model's own vocabulary when the checkpoint carries one (see :func:`save_checkpoint`)."""


TRAIN_STATE_KEYS = ("optimizer", "step", "position", "epoch", "elapsed_s", "tokens_seen", "rng_torch", "recurrent")


def _train_state(state: Any) -> dict[str, Any]:
    """A loaded training state, checked for the entries the trainer resumes from."""
    if not isinstance(state, dict):
        raise ValueError(f"the top level is {type(state).__name__}, not a dict")
    missing = [key for key in TRAIN_STATE_KEYS if key not in state]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    return state


def config_differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable list of keys whose values differ between two nested config dicts."""
    diffs = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            diffs.append(f"{prefix}{key}: checkpoint has {a!r}, this run has {b!r}")
    return diffs


def _under_saved_names(model: LanguageModel, tensors: dict[str, torch.Tensor], where: Path) -> dict[str, torch.Tensor]:
    """``tensors`` with each tied tensor under the name :func:`unique_tensors` saves it as today.

    A tied tensor is saved under its first name in module order; checkpoints written before a
    module moved carry it under another name of the same tie, which must still load. Tensors the
    checkpoint holds separately but the model ties must be equal: loading one would silently drop
    the others.
    """
    first_name: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        aliases[name] = first_name.setdefault(t.data_ptr(), name) if t.numel() else name
    renamed: dict[str, torch.Tensor] = {}
    taken_from: dict[str, str] = {}
    for name, t in tensors.items():
        target = aliases.get(name, name)
        if target in renamed and not torch.equal(renamed[target], t):
            raise TxlabError(
                f"checkpoint weights {where} hold different values for {taken_from[target]} and {name}, which this model "
                "shares as one tensor: an older txlab wrote it, which kept them apart (an adaptive input with div_val 1 used to "
                "keep one projection per cluster; it now keeps one for all clusters, as the authors' code does). "
                "It cannot be loaded exactly: retrain it, or import its source again"
            )
        taken_from.setdefault(target, name)
        renamed.setdefault(target, t)
    return renamed


def _check_model_fits(cfg: RunConfig, directory: Path) -> None:
    """Refuse, before it is built, a model whose parameters alone would not fit in memory: meta.json's
    config decides the size (a forged d_model of 10^8 would otherwise be allocated before the weights
    are read). The model's own count (txlab.models.build.count_model), so no real checkpoint is refused."""
    needed = count_model(cfg.model).parameters * FLOAT_BYTES
    if needed > machine_memory("cpu"):
        raise DamagedFile(directory / META, f"its config describes a model of at least {needed / GIB:,.1f} GiB, more than this machine's "
                          f"{machine_memory('cpu') / GIB:,.1f} GiB of memory", _remedy(directory))


def _check_tensor_types(model: LanguageModel, tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """Every saved tensor must have its parameter's dtype and shape: load_state_dict would copy int32
    values into a float32 parameter (a forged header evaluates to nan), and names the shape only in a traceback."""
    expected = model.state_dict()
    for name, tensor in tensors.items():
        want = expected.get(name)
        if want is None:
            continue  # an unknown name: the missing/unexpected check below names it
        if tensor.dtype != want.dtype or tensor.shape != want.shape:
            raise DamagedFile(directory / WEIGHTS, f"{name} is {str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}, the model's "
                              f"{str(want.dtype).removeprefix('torch.')} {list(want.shape)}", _remedy(directory))


def _check_optimizer_state(state: Any, model: LanguageModel, path: Path) -> None:
    """The optimizer state must be one for this model's parameters, in number and shape: one copied from
    another run would make optimizer.load_state_dict raise a ValueError, or the first step a RuntimeError."""
    remedy = f"it belongs to another run; delete {path} to keep only the weights, or rerun `txlab train --restart`"
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict) or not isinstance(state.get("param_groups"), list):
        raise DamagedFile(path, "its optimizer entry is not an optimizer state", remedy)
    ids = [i for group in state["param_groups"] if isinstance(group, dict) for i in group.get("params", [])]
    params = list(model.parameters())
    if len(ids) != len(params):
        raise DamagedFile(path, f"its optimizer holds {len(ids)} parameters, the model has {len(params)}", remedy)
    for number, (index, param) in enumerate(zip(ids, params)):
        for key, value in (state["state"].get(index) or {}).items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                raise DamagedFile(path, f"its optimizer's {key} of parameter {number} has shape {list(value.shape)}, the parameter "
                                  f"{list(param.shape)}", remedy)


def load_checkpoint(
    run_dir: Path,
    *,
    expect_model: RunConfig | None = None,
    expect_vocab_hash: str | None = None,
    with_train_state: bool = False,
    map_location: str | torch.device = "cpu",
) -> Checkpoint:
    """Load a run's model (and optionally its training state), checking it matches what is expected.

    ``expect_model``: the model section must equal this config's (the error lists every difference).
    ``expect_vocab_hash``: the vocabulary the model was trained with must be this one.
    """
    check_device(map_location, "the device")  # eval, attention, generate, roles and recl place every run's model here
    directory = _checkpoint_dir(run_dir)
    meta = read_meta(run_dir)
    cfg = _config_of(meta, directory)
    if expect_model is not None:
        # the resolved config, so keys added to txlab after the checkpoint compare as their defaults; the
        # expected way of computing (kernel, compilation) replaces the saved one
        cfg = replace(cfg, model=replace(cfg.model, **{key: getattr(expect_model.model, key) for key in COMPUTE_SETTINGS}))
        diffs = config_differences(to_dict(cfg.model), to_dict(expect_model.model), "model.")
        if diffs:
            raise TxlabError(f"checkpoint in {run_dir} is for another model:\n  " + "\n  ".join(diffs))
    if expect_vocab_hash is not None and meta["vocab_hash"] != expect_vocab_hash:
        raise TxlabError(
            f"checkpoint in {run_dir} was trained with vocabulary {meta['vocab_hash'][:12]}..., "
            f"but this data has vocabulary {expect_vocab_hash[:12]}...: the corpora differ"
        )
    _check_model_fits(cfg, directory)
    model = build_model(cfg.model)
    tensors = read_back(directory / WEIGHTS, lambda p: load_file(str(p)), _remedy(directory))
    tensors = _under_saved_names(model, tensors, directory / WEIGHTS)
    _check_tensor_types(model, tensors, directory)
    tied_aliases = set(model.state_dict()) - set(_unique_named_tensors(model))
    try:
        result = model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:  # a shape mismatch
        raise TxlabError(f"checkpoint weights {directory / WEIGHTS} do not fit the model: {err}") from None
    missing, unexpected = set(result.missing_keys) - tied_aliases, result.unexpected_keys
    if missing or unexpected:
        raise TxlabError(f"checkpoint weights {directory / WEIGHTS} do not fit the model: missing {missing}, unexpected {unexpected}")
    train_state = None
    if with_train_state and (directory / TRAIN_STATE).is_file():
        train_state = read_back(directory / TRAIN_STATE, lambda p: _train_state(torch.load(p, map_location=map_location, weights_only=True)),
                                _remedy(directory))
        _check_optimizer_state(train_state["optimizer"], model, directory / TRAIN_STATE)
    return Checkpoint(model.to(map_location), cfg, meta, train_state, saved_vocab(run_dir))
