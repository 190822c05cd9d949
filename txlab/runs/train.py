"""The trainer: one loop for every model family, resumable, single process or torchrun/DDP.

Protocol (as the paper's reference scripts): the training split is cut into ``batch_size``
contiguous streams; each step reads the next ``tgt_len`` tokens of every stream and carries the
model state (XL memory, RNN state) from segment to segment. With ``grad_accum = k`` the streams
are split into k groups that keep their own state, so the global batch, and the result, do not
depend on k. Under torchrun each rank trains its own slice of the streams and DDP averages
gradients, so N processes reach the same parameters as one process with the same global batch.

A run directory is the record of a run::

    config.yaml      the resolved configuration (printed at start)
    metrics.jsonl    one JSON object per logged step / evaluation
    checkpoint/      weights, metadata, training state (see txlab.runs.checkpoint)
    restarts.jsonl   with a restart rule (train.max_restarts), one line per abandoned attempt,
    restarts/        and that attempt's metrics.jsonl

Killing a run (even with SIGKILL) and rerunning the same command resumes from the last checkpoint
and ends with the same parameters as a run that was never interrupted. SIGTERM and SIGINT save a
checkpoint before exiting.

The periodic validation scores the model with txlab.runs.evaluate, as `txlab eval` does.

``train.precision`` bf16 or fp16 runs each forward pass and its loss under autocast (txlab.precision);
fp16 scales the loss, and the scaler's state is part of the checkpoint. Each training record of
metrics.jsonl names the precision and whether TF32 was on.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from txlab.analysis.learned import RESTARTS_LOG, read_restarts
from txlab.config import COMPUTE_SETTINGS, ModelConfig, RunConfig, TrainConfig, load_config, save_config, to_dict, to_yaml, update_dataclass
from txlab.data.batching import batchify, iter_segments
from txlab.data.corpus import Corpus, check_corpus_dir_applies, load_corpus
from txlab.data.diagnostics import flat_metrics, role_summary
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import append_line, check_not_held, hold_directory, read_metrics_log, write_text_atomic
from txlab.models.build import build_model
from txlab.models.interface import Context, LanguageModel
from txlab.precision import autocast, check_precision, loss_scaler, matmul_precision
from txlab.progress import Progress
from txlab.runs.capacity import check_fits
from txlab.runs.checkpoint import Checkpoint, has_checkpoint, load_checkpoint, remove_unfinished_saves, save_checkpoint
from txlab.runs.evaluate import evaluate, evaluation_context, metric_summary, segment_loss
from txlab.runs.zoo import run_config, train_run_dir


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warm-up, then the schedule.

    - cosine: from ``lr`` down to ``lr_min`` over the steps after warm-up (the reference scripts);
    - constant: ``lr``;
    - inv_sqrt: ``lr * sqrt(warmup / (step + 1))`` after warm-up, so the peak is ``lr``;
    - wsd (warm-up, stable, decay): ``lr`` until the last ``decay_fraction`` of the steps, then a linear
      decay to ``lr_min``. A late transition (a copy circuit that forms after half the run) still
      trains at the full rate, which a cosine schedule has already halved.
    """
    n = step + 1  # steps completed after this one; warm-up reaches lr exactly at n == warmup_steps
    if n <= cfg.warmup_steps:
        return cfg.lr * n / cfg.warmup_steps
    if cfg.scheduler == "constant":
        return cfg.lr
    if cfg.scheduler == "inv_sqrt":
        return cfg.lr * math.sqrt(max(cfg.warmup_steps, 1) / n)
    if cfg.scheduler == "wsd":
        decay_start = max(cfg.warmup_steps, cfg.max_steps - round(cfg.decay_fraction * cfg.max_steps))
        remaining = min((n - decay_start) / max(cfg.max_steps - decay_start, 1), 1.0)
        return cfg.lr if n <= decay_start else cfg.lr + (cfg.lr_min - cfg.lr) * remaining
    decay_steps = max(cfg.max_steps - cfg.warmup_steps, 1)
    progress = min((n - cfg.warmup_steps) / decay_steps, 1.0)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1 + math.cos(math.pi * progress))


def training_context(model_cfg: ModelConfig, clamped: bool = True) -> Context:
    """The memory settings of a training step; ``clamped=False`` before ``train.clamp_from_step``."""
    return Context(model_cfg.mem_len, model_cfg.same_length, model_cfg.clamp_len if clamped else 0)


# --------------------------------------------------------------------------------------------------
# Run directories and configuration checks

RESUMABLE_CHANGES = ("train.max_steps", "train.device", "train.threads", "train.tensorboard", "train.wandb", "train.log_interval",
                     "data.data_dir", "data.corpus_dir", "data.cache_dir", *(f"model.{key}" for key in COMPUTE_SETTINGS))
"""Keys a run may change when it resumes: where it runs and reads its corpus from (the vocabulary is
checked), how it logs, how attention is computed (the kernels agree to 1e-6; compilation changes no
parameter name), and its length (with a warning: the learning-rate schedule stretches)."""


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def configuration_changes(run_dir: Path, cfg: RunConfig) -> list[str]:
    """What the run saved in ``run_dir`` (its config.yaml) was configured with otherwise than ``cfg``, beyond
    :data:`RESUMABLE_CHANGES`, as 'key: saved there, cfg's now'; empty when it agrees or nothing is saved. A
    ``cfg`` not yet resolved for its corpus (``model.n_token`` 0) is compared on everything else."""
    config_file = Path(run_dir) / "config.yaml"
    if not config_file.is_file():
        return []
    saved, wanted = _flat(to_dict(load_config(config_file))), _flat(to_dict(cfg))
    if not wanted["model.n_token"]:  # not resolved yet: 0 means "the corpus's", which the corpus checks
        del saved["model.n_token"], wanted["model.n_token"]
    changed = [key for key in sorted(set(saved) | set(wanted)) if saved.get(key) != wanted.get(key) and key not in RESUMABLE_CHANGES]
    return [f"{key}: {saved.get(key)!r} there, {wanted.get(key)!r} now" for key in changed]


def check_run_dir(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse to train into a run directory whose records training would overwrite: one holding a run
    of another configuration (:func:`configuration_changes`), or the records of a run (metrics.jsonl) with
    no checkpoint to resume from, as committed results are kept."""
    run_dir = Path(run_dir)
    way_out = "train into another run directory (--run-dir), or pass --restart to `txlab train` to replace it"
    changed = configuration_changes(run_dir, cfg)
    if changed:
        raise TxlabError(f"{run_dir} holds a run of another configuration ({'; '.join(changed)}): {way_out}")
    metrics_file = run_dir / "metrics.jsonl"
    if not has_checkpoint(run_dir) and metrics_file.is_file() and metrics_file.stat().st_size:
        raise TxlabError(f"{run_dir} holds a run's records (metrics.jsonl) but no checkpoint to resume from (committed results keep "
                         f"none): training would replace them; {way_out}")

def training_request(preset: str, size: str, data: str | None, config: str | None, overrides: list[str], *, text: str = "",
                     tokenizer: str = "", device: str = "", corpus_dir: str = "", run_dir: str = "", restart: bool = False,
                     main_process: bool = True) -> tuple[RunConfig, Path]:
    """What `txlab train` trains and where, resolved and checked before its plan: the configuration (``device`` and
    ``corpus_dir`` as their settings), its device and precisions, that ``corpus_dir`` applies to its corpus, the run
    directory (the recipe's unless named), that no other training holds it (checked first: a training in progress
    there is what to say, not what its records would need) and, unless ``restart``, that it holds no run of another
    configuration (:func:`check_run_dir`). ``main_process``: the process that checks the directory's lock."""
    if device:
        check_device(device)
    sets = [*([f"data.corpus_dir={corpus_dir}"] if corpus_dir else []), *([f"train.device={device}"] if device else []), *overrides]
    cfg = run_config(preset, size, data, config, sets, text=text, tokenizer=tokenizer)
    check_device(cfg.train.device, "train.device")  # set by --set, --config or the preset
    check_precision(cfg.train.precision, cfg.train.device, cfg.model.family, "train.precision")
    check_precision(cfg.eval.precision, cfg.train.device, cfg.model.family, "eval.precision")
    check_corpus_dir_applies(cfg.data.corpus, corpus_dir)
    directory = Path(run_dir) if run_dir else train_run_dir(cfg)
    if main_process:
        check_not_held(directory, "txlab train")
    if not restart:  # before the plan, which would call another run's directory trained
        check_run_dir(cfg, directory)
    return cfg, directory


def resolve_for_corpus(cfg: RunConfig, corpus: Corpus) -> RunConfig:
    """Fill in the vocabulary size from the corpus and check the lengths make sense."""
    if cfg.model.n_token not in (0, corpus.n_token):
        raise TxlabError(f"model.n_token is {cfg.model.n_token} but corpus {corpus.name} has {corpus.n_token} symbols")
    cfg = update_dataclass(cfg, {"model": {"n_token": corpus.n_token}})
    m, t = cfg.model, cfg.train
    if m.tgt_len < 1 or m.mem_len < 0:
        raise TxlabError(f"model.tgt_len must be >= 1 and model.mem_len >= 0 (got {m.tgt_len}, {m.mem_len})")
    if t.batch_size < 1 or t.grad_accum < 1 or t.batch_size % t.grad_accum:
        raise TxlabError(f"train.batch_size ({t.batch_size}) must be a positive multiple of train.grad_accum ({t.grad_accum})")
    if m.family == "vanilla" and m.max_len and m.tgt_len > m.max_len:
        raise TxlabError(f"the vanilla Transformer reads at most model.max_len={m.max_len} tokens, but model.tgt_len is {m.tgt_len}")
    return cfg


# --------------------------------------------------------------------------------------------------
# The restart rule (train.max_restarts)

RESTART_SEED_STRIDE = 1000
"""Attempt k of a run with a restart rule trains with seed ``train.seed + RESTART_SEED_STRIDE * k``."""


def attempt_seed(cfg: TrainConfig, attempt: int) -> int:
    return cfg.seed + RESTART_SEED_STRIDE * attempt


def check_restart_rule(cfg: TrainConfig, corpus: Corpus) -> None:
    """Refuse a rule that could never fire as written: its step has no validation, or its metric is not
    one the validation reports on this corpus."""
    if not cfg.max_restarts:
        if cfg.restart_at_step:
            raise TxlabError(f"train.restart_at_step is {cfg.restart_at_step} but train.max_restarts is 0: give both, or neither")
        return
    if not 0 < cfg.restart_at_step < cfg.max_steps or cfg.restart_at_step % cfg.eval_interval:
        raise TxlabError(f"train.restart_at_step must be a step with a validation before the last (a multiple of train.eval_interval="
                         f"{cfg.eval_interval} below train.max_steps={cfg.max_steps}), got {cfg.restart_at_step}")
    truth = corpus.truth["valid"] if corpus.truth is not None else None
    reported = [*metric_summary(0.0, corpus.level), *(f"role_{name}" for name in truth.spec.role_names if truth is not None)]
    if cfg.restart_metric not in reported:
        raise TxlabError(f"train.restart_metric {cfg.restart_metric!r} is not reported by the validation on {corpus.name}; "
                         f"it reports {', '.join(reported)}")


def restart_due(cfg: TrainConfig, step: int, attempt: int, valid: dict[str, float]) -> bool:
    """Whether the validation of ``step`` sends this attempt back to step 0 (a pure function of the
    checkpoint, so a run killed right after the decision makes it again on resume)."""
    return (attempt < cfg.max_restarts and step == cfg.restart_at_step and cfg.restart_metric in valid
            and valid[cfg.restart_metric] > cfg.restart_above)


def record_restart(run_dir: Path, cfg: TrainConfig, attempt: int, valid: dict[str, float], tokens_seen: int, elapsed: float) -> str:
    """Keep the abandoned attempt's records (its metrics.jsonl moves under restarts/, a line goes to
    restarts.jsonl) and return what to say. Done again after a kill, it leaves the same files."""
    (run_dir / "restarts").mkdir(parents=True, exist_ok=True)
    kept, metrics = run_dir / "restarts" / f"attempt-{attempt}-metrics.jsonl", run_dir / "metrics.jsonl"
    if kept.exists():  # moved before a kill: what metrics.jsonl holds now is the next attempt's, started again
        metrics.unlink(missing_ok=True)
    elif metrics.exists():
        os.replace(metrics, kept)
    record = {"attempt": attempt, "seed": attempt_seed(cfg, attempt), "step": cfg.restart_at_step, "metric": cfg.restart_metric,
              "value": valid[cfg.restart_metric], "above": cfg.restart_above, "tokens_seen": tokens_seen, "elapsed_s": elapsed}
    earlier = [json.dumps(r) for r in read_restarts(run_dir) if r["attempt"] < attempt]
    write_text_atomic(run_dir / RESTARTS_LOG, "".join(line + "\n" for line in [*earlier, json.dumps(record)]))
    return (f"restart rule: {cfg.restart_metric} {record['value']:.4g} > {cfg.restart_above:g} at step {cfg.restart_at_step}: the run "
            f"starts again from step 0 as attempt {attempt + 1} with seed {attempt_seed(cfg, attempt + 1)} (restart {attempt + 1} of at "
            f"most {cfg.max_restarts}; attempt {attempt}'s records: {kept})")


# --------------------------------------------------------------------------------------------------
# Distributed helpers (torchrun sets RANK / WORLD_SIZE / MASTER_ADDR ...)


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> Distributed:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size())


def gather_objects(obj: Any, ddp: Distributed) -> list[Any]:
    """Every rank's ``obj`` (in rank order); just [obj] in a single process."""
    if ddp.world == 1:
        return [obj]
    out: list[Any] = [None] * ddp.world
    dist.all_gather_object(out, obj)
    return out


# --------------------------------------------------------------------------------------------------
# The training loop


class _StopRequest:
    """Records SIGTERM/SIGINT so the loop can save a checkpoint at the next step boundary."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


LOGGERS = {"tensorboard": ("tensorboard", "TensorBoard: pip install tensorboard"),
           "wandb": ("wandb", "Weights & Biases: pip install 'txlab[wandb]'")}
"""train.<setting> -> (the package it needs, what to install)."""


def check_loggers(t: TrainConfig) -> None:
    """Refuse a logger that is asked for but not installed, before the run directory holds anything."""
    for setting, (package, install) in LOGGERS.items():
        if getattr(t, setting):
            try:
                importlib.import_module(package)
            except ImportError:
                raise TxlabError(f"train.{setting}=true needs {install}") from None


def tensorboard_writer(run_dir: Path) -> Any:
    """A TensorBoard SummaryWriter for the run (optional dependency, checked by :func:`check_loggers`)."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))


def wandb_run(cfg: RunConfig, run_dir: Path) -> Any:
    """A Weights & Biases run for the run directory (optional dependency, imported only when asked for, checked by
    :func:`check_loggers`).

    Its id is derived from the directory, so a resumed training continues the same W&B run.
    """
    import wandb  # checked by check_loggers

    run_dir = Path(run_dir).resolve()
    run_id = hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]
    return wandb.init(project=os.environ.get("WANDB_PROJECT") or "txlab", name=run_dir.name, id=run_id, resume="allow",
                      dir=str(run_dir), config=to_dict(cfg))


class TrainingInterrupted(TxlabError):
    """Raised after a SIGTERM/SIGINT once the checkpoint is safely written.

    ``exit_code`` is the shell's code for a process stopped by that signal (130 for Ctrl-C, 143 for
    SIGTERM), so a script or scheduler sees an interruption, not a user error (2).
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    resumed_from: int
    valid: dict[str, float]
    metrics_file: Path
    attempt: int = 0
    """Which attempt of the restart rule the trained model is (0: the first)."""


def _cpu_tensors(obj: Any) -> Any:
    """A recurrent state moved to the CPU, structure kept (lists and tuples of tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_tensors(o) for o in obj)
    return obj


def _to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device) for o in obj)
    return obj


def _trim_metrics(path: Path, last_step: int, warn: Callable[[str], None]) -> None:
    """On resume, drop metric lines logged after the checkpoint (they will be logged again), and a
    last line a kill cut short (with a warning)."""
    if not path.exists():
        return
    keep = [record for record in read_metrics_log(path, lambda message: warn(f"warning: {message}")) if record["step"] <= last_step]
    write_text_atomic(path, "".join(json.dumps(record) + "\n" for record in keep))


def train(
    cfg: RunConfig,
    run_dir: Path,
    *,
    resume: bool = True,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    corpus: Corpus | None = None,
) -> TrainResult:
    """Train ``cfg`` into ``run_dir`` (resuming from its checkpoint if there is one and ``resume``). ``corpus``:
    ``cfg.data``'s corpus when the caller has it loaded already (a RECL group reads one for all its members).

    The process holds ``run_dir`` while it trains (under torchrun, rank 0 for all): a second
    training of the same directory is refused, naming the holder.
    """
    main_process = os.environ.get("RANK", "0") == "0"
    with hold_directory(run_dir, "txlab train") if main_process else nullcontext():
        if main_process:  # what saves killed mid-way left: a full-size copy each
            remove_unfinished_saves(Path(run_dir))
        return _train(cfg, Path(run_dir), resume=resume, progress=progress, echo=echo, corpus=corpus)


def _train(cfg: RunConfig, run_dir: Path, *, resume: bool, progress: bool, echo: Callable[[str], None], corpus: Corpus | None) -> TrainResult:
    """The run's attempts, one after another: the one to go on with (:func:`_first_attempt`), then one more from
    step 0 each time the restart rule sends the run back."""
    run = _prepare(cfg, run_dir, progress, echo, corpus)
    attempt, ckpt = _first_attempt(run, resume)
    while (result := _train_attempt(run, attempt, ckpt)) is None:
        attempt, ckpt = attempt + 1, None
    return result


@dataclass(frozen=True)
class TrainingState:
    """Where a run stands between two optimizer steps: with the weights, the optimizer and the random streams, what a
    checkpoint keeps to go on exactly as if the run had never stopped."""

    attempt: int = 0
    """Which attempt of the restart rule this is (its seed drew the first weights)."""
    step: int = 0
    """Optimizer steps taken."""
    position: int = 0
    """Where the next segment starts in every stream of the training split."""
    epoch: int = 0
    """Passes over the training split completed."""
    elapsed_s: float = 0.0
    """Seconds spent training up to the last log (validations and checkpoints not counted)."""
    tokens_seen: int = 0
    """Training tokens read by all processes."""
    recurrent: tuple[Any, ...] = ()
    """Each grad_accum group's model state (memory, RNN state), carried from segment to segment."""
    valid: dict[str, float] = field(default_factory=dict)
    """The last validation's metrics (empty before the first)."""


@dataclass(frozen=True)
class _Run:
    """What every attempt of a run shares, resolved and checked once."""

    cfg: RunConfig
    """The configuration, its vocabulary taken from the corpus."""
    run_dir: Path
    ddp: Distributed
    device: torch.device
    corpus: Corpus
    eval_tgt_len: int
    """The periodic validation's segment length and memory settings (txlab.runs.evaluate.evaluation_context)."""
    eval_context: Context
    progress: bool
    """Whether this process shows progress bars (the main process, unless asked not to)."""
    echo: Callable[[str], None]

    @property
    def metrics_file(self) -> Path:
        return self.run_dir / "metrics.jsonl"


@dataclass(frozen=True)
class _Trainer:
    """What every step of an attempt uses: the model (and its DDP wrapper), the optimizer, the loss scaler, and this
    rank's streams, split into grad_accum groups that each keep their own state."""

    model: LanguageModel
    wrapped: Any
    """The model, or its DistributedDataParallel wrapper under torchrun."""
    optimizer: torch.optim.Optimizer
    scaler: Any
    """The fp16 loss scaler (txlab.precision.loss_scaler; disabled for the other precisions)."""
    groups: list[np.ndarray]
    """Per group, its streams of the training split [group_rows, stream length]."""
    group_rows: int


def _prepare(cfg: RunConfig, run_dir: Path, progress: bool, echo: Callable[[str], None], corpus: Corpus | None = None) -> _Run:
    """Check the settings (every way in, train, recl and ablate members, before a tensor is placed), join the
    torchrun processes, read the corpus and resolve the configuration for it."""
    t = cfg.train
    check_device(t.device, "train.device")
    check_precision(t.precision, t.device, cfg.model.family, "train.precision")
    check_precision(cfg.eval.precision, t.device, cfg.model.family, "eval.precision")
    ddp = init_distributed(t.device)
    if t.threads > 0:
        torch.set_num_threads(t.threads)
    check_loggers(t)
    corpus = corpus if corpus is not None else load_corpus(cfg.data, progress=progress and ddp.is_main)
    for split in ("train", "valid"):  # what training and its periodic validation read: missing or damaged, refused now
        corpus.split(split)
    cfg = resolve_for_corpus(cfg, corpus)
    check_restart_rule(t, corpus)
    if t.batch_size % (t.grad_accum * ddp.world):
        raise TxlabError(f"train.batch_size ({t.batch_size}) must divide evenly over {ddp.world} processes x {t.grad_accum} accumulation steps")
    check_fits(cfg.model, t.batch_size // (t.grad_accum * ddp.world), cfg.model.tgt_len, cfg.model.mem_len, training=True, device=t.device,
               what="training (model.tgt_len, model.mem_len, train.batch_size / train.grad_accum)", precision=t.precision)
    eval_tgt_len, eval_context = evaluation_context(cfg.model, cfg.eval)
    check_fits(cfg.model, cfg.eval.batch_size, eval_tgt_len, eval_context.mem_len, training=False, device=t.device,
               what="the periodic evaluation (eval.tgt_len, eval.mem_len, eval.batch_size)", precision=cfg.eval.precision)
    return _Run(cfg, Path(run_dir), ddp, torch.device(t.device), corpus, eval_tgt_len, eval_context, progress and ddp.is_main, echo)


def _first_attempt(run: _Run, resume: bool) -> tuple[int, Checkpoint | None]:
    """The attempt to train and the checkpoint it goes on from (None: from step 0).

    Resuming, the checkpoint's attempt; but when that checkpoint's validation sends the run back to step 0 (a kill
    came between the decision and the next checkpoint), the decision is made again and the next attempt starts. A
    run that starts afresh first loses the records of the run the directory held (the main process removes them)."""
    t, run_dir = run.cfg.train, run.run_dir
    if resume:
        check_run_dir(run.cfg, run_dir)
    if not (resume and has_checkpoint(run_dir)):
        if run.ddp.is_main:
            run.metrics_file.unlink(missing_ok=True)
            (run_dir / RESTARTS_LOG).unlink(missing_ok=True)
            shutil.rmtree(run_dir / "restarts", ignore_errors=True)
        return 0, None
    ckpt = load_checkpoint(run_dir, expect_model=run.cfg, expect_vocab_hash=run.corpus.vocab.sha256, with_train_state=True,
                           map_location=run.device)
    if ckpt.train_state is None:
        raise TxlabError(f"{run_dir} holds a finished model without training state; use another run name to train again")
    attempt, valid = ckpt.train_state.get("attempt", 0), ckpt.meta["metrics"].get("valid", {})
    if restart_due(t, ckpt.train_state["step"], attempt, valid):
        if run.ddp.is_main:
            run.echo(record_restart(run_dir, t, attempt, valid, ckpt.train_state["tokens_seen"], ckpt.train_state["elapsed_s"]))
        return attempt + 1, None
    return attempt, ckpt


def make_optimizer(parameters, t: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The optimizer of ``t`` (Adam or AdamW at ``t.lr`` and ``t.weight_decay``) over ``parameters`` on ``device``.

    On the CPU and CUDA it runs fused: one kernel updates every tensor, where the default runs about ten operations
    per tensor, each a parallel region of its own (docs/performance.md). The update is Adam's, rounded differently:
    after a step the weights differ from the unfused optimizer's in the last bits. A checkpoint's optimizer state
    brings its own settings: one saved by the unfused optimizer resumes unfused."""
    optimizer_cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    return optimizer_cls(parameters, lr=t.lr, weight_decay=t.weight_decay, fused=device.type in ("cpu", "cuda"))


def _start(run: _Run, attempt: int, ckpt: Checkpoint | None) -> tuple[_Trainer, TrainingState]:
    """An attempt's model, optimizer and streams, and the state it starts from: step 0 with the attempt's seed, or
    ``ckpt``'s weights, optimizer, state and random stream. The main process then saves the configuration and says
    what trains."""
    cfg, t, ddp, device = run.cfg, run.cfg.train, run.ddp, run.device
    torch.manual_seed(attempt_seed(t, attempt))
    model = build_model(cfg.model).to(device)
    optimizer = make_optimizer(model.parameters(), t, device)
    scaler = loss_scaler(t.precision, device)
    streams = batchify(run.corpus.split("train"), t.batch_size)  # [batch_size, stream length]
    per_rank = t.batch_size // ddp.world
    streams = streams[ddp.rank * per_rank : (ddp.rank + 1) * per_rank]  # [per_rank, stream length]: this rank's
    group_rows = per_rank // t.grad_accum
    groups = [streams[g * group_rows : (g + 1) * group_rows] for g in range(t.grad_accum)]  # [group_rows, stream length] each
    if ckpt is None:
        state = TrainingState(attempt=attempt, recurrent=tuple(model.init_state(group_rows) for _ in groups))
        torch.manual_seed(attempt_seed(t, attempt) + 1 + ddp.rank)
    else:
        state = _resume(run, ckpt, model, optimizer, scaler, attempt)
    if ddp.is_main:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run.run_dir / "config.yaml")
        run.echo(f"--- resolved config, as saved in {run.run_dir / 'config.yaml'} ---\n{to_yaml(cfg)}---")
        _trim_metrics(run.metrics_file, state.step, run.echo)
        run.echo(f"run {run.run_dir} | {model.num_parameters():,} parameters | corpus {run.corpus.name} ({run.corpus.n_token} symbols) | "
                 f"precision {t.precision}, evaluation {cfg.eval.precision}")
    wrapped = DistributedDataParallel(model) if ddp.world > 1 else model
    return _Trainer(model, wrapped, optimizer, scaler, groups, group_rows), state


def _resume(run: _Run, ckpt: Checkpoint, model: LanguageModel, optimizer: torch.optim.Optimizer, scaler: Any, attempt: int) -> TrainingState:
    """Load ``ckpt``'s training state into the attempt's model, optimizer and scaler, and return where it stood."""
    ts, t = ckpt.train_state, run.cfg.train
    model.load_state_dict(ckpt.model.state_dict())
    optimizer.load_state_dict(ts["optimizer"])
    if scaler.is_enabled():  # fp16: the loss scale goes on from where it was (train.precision cannot change on resume)
        if not ts.get("loss_scaler"):
            raise TxlabError(f"{run.run_dir}: its checkpoint has no loss-scaler state for fp16 training; rerun with --restart to train afresh")
        scaler.load_state_dict(ts["loss_scaler"])
    state = TrainingState(attempt=attempt, step=ts["step"], position=ts["position"], epoch=ts["epoch"], elapsed_s=ts["elapsed_s"],
                          tokens_seen=ts["tokens_seen"], recurrent=tuple(_to_device(ts["recurrent"][run.ddp.rank], run.device)),
                          valid=ckpt.meta["metrics"].get("valid", {}))
    if run.ddp.is_main:
        run.echo(f"resuming {run.run_dir} from step {state.step}")
        saved = ckpt.config.train
        if saved.max_steps != t.max_steps and saved.scheduler != "constant":
            run.echo(f"warning: train.max_steps changed from {saved.max_steps} to {t.max_steps}: the {saved.scheduler} learning-rate "
                     f"schedule stretches to the new length from step {state.step}, so this run will not equal one trained for "
                     f"{t.max_steps} steps from the start")
    torch.set_rng_state(ts["rng_torch"][run.ddp.rank])  # the dropout random stream continues exactly where the checkpoint left it
    return state


def train_step(run: _Run, trainer: _Trainer, state: TrainingState) -> tuple[TrainingState, list[torch.Tensor], float]:
    """One optimizer step from ``state``: the next segment of every group (at the end of the split, the next epoch from
    fresh states), its forward and backward pass, clipping and the optimizer step. Returns the next state, each
    group's loss (detached) and the learning rate of the step."""
    cfg, t = run.cfg, run.cfg.train
    trainer.model.set_context(training_context(cfg.model, clamped=state.step >= t.clamp_from_step))
    lr = learning_rate(state.step, t)
    for param_group in trainer.optimizer.param_groups:
        param_group["lr"] = lr
    # One segment per group and optimizer step, not txlab.runs.evaluate.read_in_chunks: each group keeps its own
    # state, the position must survive a resume, and the epoch's end resets the state mid-stream.
    position, epoch, recurrent = state.position, state.epoch, list(state.recurrent)
    losses, segment_len = [], 0
    for g, group in enumerate(trainer.groups):
        segment = next(iter_segments(group, cfg.model.tgt_len, start=position), None)
        if segment is None:  # end of the training split: start the next epoch with fresh state
            position, epoch = 0, epoch + 1
            recurrent = [trainer.model.init_state(trainer.group_rows) for _ in trainer.groups]
            segment = next(iter_segments(group, cfg.model.tgt_len, start=0))
        inputs = torch.as_tensor(segment.inputs, device=run.device)  # [group_rows, tgt_len]
        targets = torch.as_tensor(segment.targets, device=run.device)  # [group_rows, tgt_len]
        sync = g == len(trainer.groups) - 1 or run.ddp.world == 1
        with trainer.wrapped.no_sync() if not sync else nullcontext():
            with autocast(t.precision, run.device):  # the forward pass and the loss; backward follows their dtypes
                out = trainer.wrapped(inputs, recurrent[g], targets)
                loss = segment_loss(out.nll, t.loss) / t.grad_accum
            trainer.scaler.scale(loss).backward()
        recurrent[g] = out.state
        losses.append(loss.detach())
        segment_len = segment.next_position - segment.position
    if t.clip > 0:
        trainer.scaler.unscale_(trainer.optimizer)  # fp16: clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), t.clip)
    trainer.scaler.step(trainer.optimizer)  # fp16: skipped when a gradient overflowed, and the scale lowered
    trainer.scaler.update()
    trainer.optimizer.zero_grad(set_to_none=True)
    return replace(state, step=state.step + 1, position=position + segment_len, epoch=epoch,
                   tokens_seen=state.tokens_seen + segment_len * t.batch_size, recurrent=tuple(recurrent)), losses, lr


class _LossWindow:
    """The training losses since the last log, summed in float64 in the order the steps produce them, and the
    tokens and time they took."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.steps, self.tokens, self.start = 0, 0, time.perf_counter()

    def add(self, losses: list[torch.Tensor], tokens: int) -> None:
        for loss in losses:
            self.loss += loss.double()
        self.steps += 1
        self.tokens += tokens

    def clear(self) -> None:
        self.loss.zero_()
        self.steps, self.tokens = 0, 0


class _Records:
    """Where an attempt's records go: metrics.jsonl (the main process writes it), and TensorBoard and W&B when asked for."""

    def __init__(self, run: _Run) -> None:
        t, main = run.cfg.train, run.ddp.is_main
        self.metrics_file, self.main = run.metrics_file, main
        self.board = tensorboard_writer(run.run_dir) if t.tensorboard and main else None
        self.wandb = wandb_run(run.cfg, run.run_dir) if t.wandb and main else None

    def log(self, record: dict[str, Any]) -> None:
        if self.main:
            append_line(self.metrics_file, json.dumps(record))
        scalars = {f"{record['split']}/{key}": value for key, value in record.items()
                   if key not in ("step", "split") and isinstance(value, (int, float))}
        if self.board is not None:
            for key, value in scalars.items():
                self.board.add_scalar(key, value, record["step"])
        if self.wandb is not None:
            self.wandb.log(scalars, step=record["step"])

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
        if self.wandb is not None:
            self.wandb.finish()


def _train_attempt(run: _Run, attempt: int, ckpt: Checkpoint | None) -> TrainResult | None:
    """Train one attempt, from step 0 or from ``ckpt``, to the last step: a step, then at the log interval the
    training record, at the evaluation interval the validation and a checkpoint. None when the restart rule sends
    the run back to step 0; on SIGTERM or SIGINT a checkpoint, then :class:`TrainingInterrupted`."""
    t = run.cfg.train
    trainer, state = _start(run, attempt, ckpt)
    resumed_from, records, window = state.step, _Records(run), _LossWindow(run.device)
    # smoothing 0: the ETA from the mean rate since the start, validations included, not from the last
    # steps' (a validation then makes the estimate jump, and between validations it leaves them out)
    bar = Progress(total=t.max_steps, initial=state.step, desc="train", unit="step", smoothing=0, disable=not run.progress)
    trainer.model.train()
    with _StopRequest() as stop, matmul_precision(t.precision, run.device) as tf32:
        while state.step < t.max_steps:
            tokens_before = state.tokens_seen
            state, losses, lr = train_step(run, trainer, state)
            window.add(losses, state.tokens_seen - tokens_before)
            bar.update(1)
            at_eval = state.step % t.eval_interval == 0 or state.step == t.max_steps
            if state.step % t.log_interval == 0 or at_eval or stop.signal is not None:
                state = _log_training(run, records, window, state, lr, tf32, trainer.scaler, bar)
                if at_eval:
                    state = replace(state, valid=_validate(run, records, trainer.model, state, bar))
                if at_eval or stop.signal is not None:
                    _save(run, trainer, state)
                if at_eval and restart_due(t, state.step, attempt, state.valid):
                    bar.close()
                    records.close()
                    if run.ddp.is_main:
                        run.echo(record_restart(run.run_dir, t, attempt, state.valid, state.tokens_seen, state.elapsed_s))
                    return None
                window.start = time.perf_counter()
            if stop.signal is not None:
                bar.close()
                records.close()
                name = "Ctrl-C (SIGINT)" if stop.signal == signal.SIGINT else signal.Signals(stop.signal).name
                raise TrainingInterrupted(f"stopped by {name} at step {state.step}; checkpoint saved in {run.run_dir}; rerun the same "
                                          "command to resume", stop.signal)
    bar.close()
    records.close()
    if run.ddp.world > 1:
        dist.barrier()
    return TrainResult(run.run_dir, state.step, resumed_from, state.valid, run.metrics_file, attempt)


def _log_training(run: _Run, records: _Records, window: _LossWindow, state: TrainingState, lr: float, tf32: bool, scaler: Any,
                  bar: Progress) -> TrainingState:
    """Log the window's mean loss and rate (refusing a loss that is no longer finite), clear the window, and return
    ``state`` with the window's time added to the training time."""
    now = time.perf_counter()
    mean_loss = window.loss.item() / window.steps
    if not math.isfinite(mean_loss):
        raise TxlabError(f"training loss became {mean_loss} by step {state.step}; the last good checkpoint in {run.run_dir} was kept "
                         "(try a lower train.lr or clip)")
    elapsed = state.elapsed_s + (now - window.start)
    rate = window.tokens / max(now - window.start, 1e-9)
    t = run.cfg.train
    records.log({"step": state.step, "split": "train", "loss": mean_loss, "lr": lr, "tokens": state.tokens_seen, "elapsed_s": elapsed,
                 "tokens_per_s": rate, "precision": t.precision, "tf32": tf32, **({"loss_scale": scaler.get_scale()} if scaler.is_enabled() else {})})
    bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{rate:,.0f}")
    window.clear()
    return replace(state, elapsed_s=elapsed)


def _validate(run: _Run, records: _Records, model: LanguageModel, state: TrainingState, bar: Progress) -> dict[str, float]:
    """Score the validation split as `txlab eval` does, log the metrics (and on synthetic corpora the loss by token
    role, txlab.data.diagnostics) and return them."""
    cfg, t = run.cfg, run.cfg.train
    truth = run.corpus.truth["valid"] if run.corpus.truth is not None else None
    unclamped = cfg.eval.clamp_len < 0 and state.step <= t.clamp_from_step  # score as the model has trained: no step clamped yet
    context = replace(run.eval_context, clamp_len=0) if unclamped else run.eval_context
    result = evaluate(model, run.corpus.split("valid"), run.eval_tgt_len, context, cfg.eval.batch_size, t.eval_tokens, progress=run.progress,
                      token_losses=truth is not None, reference_streams=cfg.eval.streams == "reference", precision=cfg.eval.precision)
    valid = {**metric_summary(result.loss, run.corpus.level), "tokens": result.tokens}
    by_role = None if truth is None else role_summary(result.nll, truth)
    if by_role is not None:
        valid = {**valid, **flat_metrics(by_role)}
    records.log({"step": state.step, "split": "valid", **valid, "tokens_seen": state.tokens_seen, "elapsed_s": state.elapsed_s})
    if by_role is not None:
        records.log({"step": state.step, "split": "valid_by_role", **by_role, "tokens_seen": state.tokens_seen, "elapsed_s": state.elapsed_s})
    (bar.write if run.progress else run.echo)(f"step {state.step}: valid " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items() if k != "tokens"))
    return valid


def _save(run: _Run, trainer: _Trainer, state: TrainingState) -> None:
    """A checkpoint of ``state`` (every rank's recurrent state and random stream gathered to the main process, which
    writes it)."""
    recurrent = gather_objects(_cpu_tensors(list(state.recurrent)), run.ddp)
    rng = gather_objects(torch.get_rng_state(), run.ddp)
    if not run.ddp.is_main:
        return
    train_state = {
        "optimizer": trainer.optimizer.state_dict(), "step": state.step, "position": state.position, "epoch": state.epoch,
        "elapsed_s": state.elapsed_s, "tokens_seen": state.tokens_seen, "rng_torch": rng, "recurrent": recurrent,
        "loss_scaler": trainer.scaler.state_dict(),  # {} unless fp16
        "attempt": state.attempt,
    }
    try:
        save_checkpoint(run.run_dir, trainer.model, run.cfg, step=state.step, vocab_hash=run.corpus.vocab.sha256,
                        metrics={"valid": state.valid, "level": run.corpus.level}, train_state=train_state)
    except BaseException:
        if not has_checkpoint(run.run_dir):  # the first save failed (a full disk): records without a checkpoint would
            run.metrics_file.unlink(missing_ok=True)  # make the rerun refuse the directory; without them it starts afresh
        raise
