"""Evaluation speed, vanilla Transformer vs Transformer-XL: the paper's Table 9, with today's baselines beside it.

Every model has the same shape (by default the enwik8 12-layer model, ``xl-enwik8-12l``) and is timed at
the same *attention length* L on the same token stream (random tokens, or a trained run's validation text),
in inference mode with the attention kernel ``attn_kernel`` chooses (:data:`txlab.models.kernels.AUTO_KERNEL`). Four
ways to predict every token from L tokens of context, one row each:

- **Vanilla recompute** (Al-Rfou et al., the paper's baseline): to predict token x_t it reads the window
  x_{t-L} .. x_{t-1}, exactly L tokens of context, from nothing; the window slides one position per
  prediction and is recomputed whole, and only its last position is scored
  (:meth:`~txlab.models.transformer.TransformerXL.window_last_nll`). ``batch_size`` windows, at sampled positions, go
  through the model at once.
- **Strided recompute**: the same windows advanced by a stride s > 1 (default the XL segment length), each
  scoring its last s predictions (:meth:`~txlab.models.transformer.TransformerXL.window_tail_nll`): every token is
  predicted from between L-s+1 and L tokens of context, s predictions for the price of one window.
- **Rolling KV cache** (StreamingLLM's window-attention baseline, without attention sinks), on a model with
  the paper's relative positions: each new token attends to the cached keys and values of the last L tokens
  at every layer. It is Transformer-XL's cached evaluation state read one token at a time with memory L and
  same_length. It is *not* vanilla recompute: a cached lower-layer state was computed when its token was
  new, from that token's own window, so upper layers see information from further back than L (as XL does).
- **Transformer-XL segments**: ``batch_size`` streams are read in segments of ``tgt_len`` tokens (the model's
  evaluation segment, 80 for the paper's enwik8 model) with mem_len = L and same_length on, so every query
  attends exactly L keys, its own position and the L-1 before it, in every layer (the last layer's query for
  x_t sees x_{t-L} .. x_{t-1}, as the vanilla window does; lower layers reach further back through the
  memory, as recurrence intends). The memory is filled by one chunk of L tokens first, which gives the same
  states as streaming those L tokens segment by segment (a query never needs a key more than L-1 back), and
  segments are timed only once it is full. The rolling cache is filled the same way.

Timing: ``warmup`` untimed rounds of each method, one method after another, then ``repeats`` timed rounds in
alternation, so that load which comes and goes slows every method alike (a run that timed them one after the other
read 759x to 1,527x at L = 3800 in three runs, issue #63). A round is vanilla calls until ``budget_s / repeats`` seconds have
passed (at least :data:`MIN_VANILLA_CALLS` over all rounds), one strided window, one XL segment's tokens through the
rolling cache one by one, and one XL segment (synchronised on a GPU). Tokens/s = predictions per call over the median
call time; slowdown = XL tokens/s over vanilla tokens/s; each round's own slowdown and each side's time per prediction
are reported as min / median / max over the rounds. Latency per token is each timed call's time divided by the predictions it
makes per stream, at batch 1 (when ``batch_size`` is larger every method is timed again at batch 1 for it),
summarised by nearest-rank p50 and p99 (:func:`txlab.timing.latency_percentiles`). Peak memory is what the warm-up
calls added at most on top of what was in use before them (the timed calls repeat them, interleaved with the others), the memory fill excluded (:class:`txlab.timing.PeakMemory`: resident
memory on a CPU, allocated tensors on a GPU); the state a method keeps between calls (XL's memory and cached
keys and values, the rolling cache) is counted exactly beside it. With a trained run (``run``), the stream is
the run's evaluation split and each method's perplexity is exp(mean NLL) of the predictions it timed.

Achieved GFLOP/s are counted against the analytic forward FLOPs of the useful work (the model's count,
:class:`~txlab.models.interface.ModelCounts`): vanilla ``window_flops(L)`` per prediction (it executes exactly
that: L queries of L keys in every layer but the last), strided ``window_flops(L, s) / s``, XL and the rolling
cache ``flops_per_token(L)`` (one query of L keys per layer). XL evaluates with the cached state
(:class:`~txlab.models.eval_cache.CachedMemory`): each segment
projects the keys and values of its own rows only and reads the position keys from a table built once. The
work that saves, which the authors' code and txlab's training path repeat every segment (re-projecting the L
memory rows and applying ``r_net`` to all distances), is reported per row as ``xl_avoided_flops_per_token``
and never counted as useful; ``eval_cache: false`` (``--set eval_cache=false``) times that path instead. The
kernels still compute the masked score columns (L + tgt_len keys per query), so the XL GFLOP/s is a lower
bound on the hardware rate.
"""

from __future__ import annotations

import csv
import io
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from txlab.config import ATTN_KERNELS, NON_NEGATIVE, POSITIVE, SEED, RunConfig, check_fields, setting, update_dataclass
from txlab.data.corpus import load_corpus_for_model
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic
from txlab.models.build import build_model
from txlab.models.eval_cache import CachedMemory
from txlab.models.hf import is_hf_spec
from txlab.models.interface import Context
from txlab.models.transformer import TransformerXL
from txlab.presets import PAPER_VOCAB, SIZES, resolve_preset
from txlab.runs.capacity import check_fits
from txlab.runs.checkpoint import has_checkpoint, load_checkpoint, saved_config
from txlab.runs.evaluate import evaluation_context
from txlab.tables import count_label, csv_cell, markdown_table
from txlab.measure.rounds import Calls, Timed, time_rounds
from txlab.timing import contention_note, cpu_model, cpu_snapshot, latency_percentiles, matmul_peak_gflops, median_seconds, others_cpu
from txlab.workspace import DEFAULT_HOME, home, resolve

PAPER_ATTN_LENS = (800, 1800, 2800, 3800)
PAPER_SLOWDOWN = {800: 363.0, 1800: 773.0, 2800: 1409.0, 3800: 1874.0}
"""Table 9 of Dai et al. (2019): how many times slower vanilla evaluation is, per attention length (one GPU)."""

PRESET = "xl-enwik8-12l"
"""The paper's speed-table model (12 layers, d_model 512, 8 heads of 64, d_inner 2048, 204 symbols)."""

MIN_VANILLA_CALLS = 3
"""Timed vanilla calls even when one call outlasts the budget (a median needs several)."""

DEFAULT_GPU_BATCH = 10
"""Streams / windows per call on a GPU when ``batch_size`` is 0: the reference eval.py's batch size."""


@dataclass(frozen=True)
class SpeedSettings:
    """How Table 9 is measured (a speed study's profile keys; `txlab speed --set` over them, see txlab.drivers.speed)."""

    size: str = setting("paper", "Shape of the xl-enwik8-12l preset: paper (12/512/8x64/2048), cpu (4/128/4x32/512) or tiny.", SIZES)
    run: str = setting("", "A trained run directory (XL or vanilla) to time instead of the preset (its shape, weights and evaluation settings).")
    device: str = setting("cpu", "cpu, cuda, cuda:1, ...")
    batch_size: int = setting(0, "XL streams and vanilla windows per call; 0 = 1 on CPU (one window keeps 2 cores busy) and 10 on a GPU.",
                              valid=NON_NEGATIVE)
    tgt_len: int = setting(0, "XL evaluation segment length; 0 = the model's (80 for the paper's enwik8 model).", valid=NON_NEGATIVE)
    budget_s: float = setting(30.0, f"Seconds of timed vanilla calls per attention length (at least {MIN_VANILLA_CALLS} calls).", valid=NON_NEGATIVE)
    repeats: int = setting(5, "Timed XL segments per attention length (after the memory is full), strided windows, and rolling-cache tokens "
                           "repeats x tgt_len.", valid=POSITIVE)
    stride: int = setting(0, "Strided recompute: windows advance by this many tokens and score their last stride predictions; "
                          "0 = the XL segment length (at most the attention length).", valid=NON_NEGATIVE)
    warmup: int = setting(1, "Untimed calls before timing, for each model and attention length.", valid=NON_NEGATIVE)
    threads: int = setting(2, "torch CPU threads.", valid=POSITIVE)
    seed: int = setting(0, "Seed of the random weights, tokens and sampled vanilla positions.", valid=SEED)
    eval_cache: bool = setting(True, "XL with the cached evaluation state (each segment projects only its own rows); false: the training "
                               "path, which re-projects the whole memory every segment as the authors' code does.")
    attn_kernel: str = setting("auto", "The attention kernel of every model timed (model.attn_kernel: auto, unfused or sdpa).", ATTN_KERNELS)


COMMAND_OPTIONS = ("size", "run", "device", "threads")
"""The settings `txlab speed` takes as options of their own; the others are ``--set key=value``."""


def command_line(attn_lens: Sequence[int], settings: SpeedSettings, name: str) -> str:
    """The `txlab speed` command that reproduces a measurement (non-default settings only), with the
    home it wrote to unless that is the default workspace (``txlab --home . speed`` for committed tables)."""
    where = home()
    parts = ["txlab" if where == DEFAULT_HOME else f"txlab --home {where}", "speed", *(f"--attn-len {n}" for n in attn_lens)]
    default = SpeedSettings()
    for f in fields(SpeedSettings):
        value = getattr(settings, f.name)
        if value != getattr(default, f.name):
            shown = str(value).lower() if isinstance(value, bool) else value
            parts.append(f"--{f.name.replace('_', '-')} {value}" if f.name in COMMAND_OPTIONS else f"--set {f.name}={shown}")
    if name != "table9":
        parts.append(f"--name {name}")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------------
# The request


def check_request(attn_lens: Sequence[int], settings: SpeedSettings) -> None:
    check_fields(settings)
    if not attn_lens:
        raise TxlabError("give at least one attention length")
    for n in attn_lens:
        if n < 1:
            raise TxlabError(f"attention length must be >= 1, got {n}")
    if settings.run:
        timed_config(settings)  # a run speed can time: refused before any plan or output names it
    if settings.stride > min(attn_lens):
        raise TxlabError(f"stride {settings.stride} is longer than attention length {min(attn_lens)}: a window of L tokens makes "
                         "L predictions, so the stride must be at most the shortest attention length")


def timed_config(settings: SpeedSettings) -> RunConfig:
    """The configuration that is timed (a trained run's, or the preset's), read without loading weights."""
    if settings.run:
        supported = ("txlab speed times Transformer-XL against the vanilla Transformer: the preset's shape (--size), or a "
                     "txlab run of family xl or vanilla (--run RUN_DIR)")
        if is_hf_spec(settings.run):
            raise TxlabError(f"--run {settings.run} is a Hugging Face checkpoint; {supported}")
        if not has_checkpoint(Path(settings.run)):
            raise TxlabError(f"{settings.run} holds no checkpoint: is it a run directory made by `txlab train`?")
        cfg = saved_config(Path(settings.run))
        if cfg.model.family not in ("xl", "vanilla"):
            raise TxlabError(f"{settings.run} holds a {cfg.model.family} model; {supported}")
        return cfg
    return update_dataclass(resolve_preset(PRESET, settings.size), {"model": {"n_token": PAPER_VOCAB["enwik8"]}})


# --------------------------------------------------------------------------------------------------
# The two evaluation procedures (no timing here; tests check them against the model's forward)


def xl_fill(model: TransformerXL, tokens: torch.Tensor, attn_len: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Read tokens[:, :attn_len] in one chunk: (NLL [B, attn_len] of tokens[:, 1:attn_len+1], full memory).

    The model's context must already have mem_len = attn_len and same_length on (:func:`xl_context`).
    """
    out = model(tokens[:, :attn_len], model.init_state(tokens.size(0)), tokens[:, 1 : attn_len + 1])
    return out.nll, out.state


def xl_segment(model: TransformerXL, tokens: torch.Tensor, state: list[torch.Tensor], start: int, tgt_len: int):
    """Read tokens[:, start:start+tgt_len] with the memory ``state``: (NLL [B, tgt_len] of the next tokens, new state)."""
    out = model(tokens[:, start : start + tgt_len], state, tokens[:, start + 1 : start + tgt_len + 1])
    return out.nll, out.state


def xl_context(model: TransformerXL, attn_len: int) -> Context:
    """Every query attends exactly ``attn_len`` keys: memory attn_len, same_length, the model's clamp_len."""
    return Context(mem_len=attn_len, same_length=True, clamp_len=model.context.clamp_len)


def strided_nll(model: TransformerXL, tokens: torch.Tensor, end: int, attn_len: int, stride: int) -> torch.Tensor:
    """NLL [B, stride] of tokens[:, end-stride+1 : end+1], all from the one window tokens[:, end-attn_len : end]:
    the target x_t is predicted from x_{end-attn_len} .. x_{t-1}, between attn_len-stride+1 and attn_len tokens."""
    return model.window_tail_nll(tokens[:, end - attn_len : end], tokens[:, end - stride + 1 : end + 1])


def vanilla_nll(model: TransformerXL, tokens: torch.Tensor, rows: torch.Tensor, ends: torch.Tensor, attn_len: int) -> torch.Tensor:
    """NLL [N] of tokens[rows, ends], each predicted from the window tokens[rows, ends-attn_len : ends]."""
    offsets = torch.arange(-attn_len, 0, device=tokens.device)  # [L]
    windows = tokens[rows[:, None], ends[:, None] + offsets]  # [N, L]
    return model.window_last_nll(windows, tokens[rows, ends])


# --------------------------------------------------------------------------------------------------
# Models, device and machine


def _device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise TxlabError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TxlabError(f"--device {name} asks for a GPU, but torch {torch.__version__} sees no CUDA device here; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise TxlabError(f"txlab speed runs on cpu or cuda, not {device.type!r}")
    return device


def _sync(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


class TimedModels:
    """The models timed: XL (trained or random) for the XL segments and the rolling cache, and per attention
    length the model the two recompute rows read windows with (a trained run's own, else Al-Rfou et al.'s).

    Built from :class:`SpeedSettings` (``run`` or ``size``, ``tgt_len``, ``eval_cache``, ``attn_kernel``) on
    ``device``; benchmark scripts time its ``xl`` with :func:`xl_fill` and :func:`xl_segment`. Attributes:

    - ``xl``: the Transformer-XL timed in segments and as the rolling cache, in evaluation mode, with the
      evaluation clamp_len (:func:`xl_context` sets the memory per attention length);
    - ``tgt_len``: its evaluation segment length (``settings.tgt_len``, else the model's);
    - ``cfg``: the configuration timed (the run's, or the preset's at ``size``) and ``shape`` its model
      without dropout;
    - ``text``: a trained run's evaluation split as one LongTensor (the stream every method reads), None
      for a preset (random tokens).
    """

    def __init__(self, settings: SpeedSettings, device: torch.device):
        self.text = None
        if settings.run:  # one check_request found timeable (timed_config)
            ckpt = load_checkpoint(Path(settings.run), map_location=device)
            cfg, trained = ckpt.config, ckpt.model
            # The run's evaluation split is the token stream every method reads, so that perplexities mean something.
            corpus = load_corpus_for_model(cfg.data, ckpt.meta["vocab_hash"], ckpt.vocab, cfg.eval.split, settings.run, progress=False)
            self.text = torch.tensor(corpus.split(cfg.eval.split), dtype=torch.long)  # a copy: the split may be read-only (memory-mapped, or a shared synthetic one)
        else:
            cfg, trained = timed_config(settings), None
        self.cfg: RunConfig = cfg
        shape = replace(cfg.model, dropout=0.0, dropatt=0.0)
        if trained is not None and cfg.model.family == "xl":
            self.xl = trained
        else:  # the paper's relative encoding on a vanilla run's shape, or a random model
            self.xl = build_model(replace(shape, family="xl", pos_enc="ours", max_len=0)).to(device)
        self.xl_trained = trained is not None and cfg.model.family == "xl"
        self.trained_vanilla = trained if trained is not None and cfg.model.family == "vanilla" else None
        if self.trained_vanilla is not None:
            self.trained_vanilla.set_attn_kernel(settings.attn_kernel)
        self.shape, self.device, self.attn_kernel = shape, device, settings.attn_kernel
        eval_len, context = evaluation_context(cfg.model, cfg.eval)
        self.tgt_len = settings.tgt_len or eval_len
        self.xl.set_context(context)  # keeps the evaluation clamp_len; mem_len is set per attention length
        self.xl.eval()
        self.xl.set_eval_cache(settings.eval_cache)
        self.xl.set_attn_kernel(settings.attn_kernel)

    def vanilla(self, attn_len: int) -> TransformerXL:
        """The model the recompute rows read windows of ``attn_len`` tokens with: a trained run's (a vanilla run's, up to
        its window; an XL run's, from an empty memory), else Al-Rfou et al.'s (learned positions at every layer)."""
        if self.trained_vanilla is not None:
            if attn_len > self.trained_vanilla.max_context:
                raise TxlabError(f"the vanilla model of this run reads at most {self.trained_vanilla.max_context} tokens; attention length {attn_len} is longer")
            return self.trained_vanilla.eval()
        if self.xl_trained:
            self.xl.set_context(xl_context(self.xl, attn_len))  # a same_length window as long as the window: every key visible
            return self.xl
        cfg = replace(self.shape, family="vanilla", pos_enc="alrfou", mem_len=0, same_length=False, max_len=attn_len, tgt_len=attn_len)
        model = build_model(cfg).to(self.device).eval()
        model.set_attn_kernel(self.attn_kernel)
        return model

    def trained(self, method: str) -> bool:
        """Whether ``method``'s row runs trained weights (its perplexity means something)."""
        return (self.trained_vanilla is not None or self.xl_trained) if method in RECOMPUTE else self.xl_trained


def _matmul_peak(device: torch.device, threads: int) -> float:
    """Achieved fp32 GFLOP/s of a large matmul on ``device`` (the practical ceiling)."""
    if device.type == "cpu":
        return matmul_peak_gflops(threads, repeats=3)
    n = 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = _sync(device)
    seconds = median_seconds(lambda: (a @ b, sync()), 3, 10)
    return 2 * n**3 / seconds / 1e9


@dataclass(frozen=True)
class Machine:
    """What the numbers were measured on (every line of the CSV repeats it)."""

    device: str
    """cpu or cuda."""
    device_name: str
    """The GPU's name, or on a CPU the processor's."""
    cpu: str
    cpu_count: int | None
    threads: int
    """torch CPU threads."""
    torch: str
    """torch's version."""
    matmul_peak_gflops: float
    """Achieved fp32 GFLOP/s of a large matmul on the device (the practical ceiling)."""


def machine(device: torch.device, threads: int) -> Machine:
    """What the numbers are measured on."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return Machine(device.type, gpu or cpu_model(), cpu_model(), os.cpu_count(), threads, torch.__version__, _matmul_peak(device, threads))


# --------------------------------------------------------------------------------------------------
# Timing


METHODS = ("vanilla", "strided", "rolling", "xl")
"""The rows of the table, by their column prefix: vanilla recompute, strided recompute, the rolling KV cache, XL segments."""

METHOD_NAMES = {"vanilla": "vanilla recompute", "strided": "strided recompute", "rolling": "rolling KV cache", "xl": "Transformer-XL segments"}

RECOMPUTE = ("vanilla", "strided")
"""The methods that read every window from nothing (the others carry a state)."""


def state_bytes(state: list[torch.Tensor]) -> int:
    """Bytes of the tensors a state keeps (a :class:`~txlab.models.eval_cache.CachedMemory`'s row stores, or a memory's rows), each storage once."""
    tensors = [t for rows in state.layers for t in rows.store.tensors] if isinstance(state, CachedMemory) else list(state)
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def xl_calls(model: TransformerXL, tokens: torch.Tensor, attn_len: int, tgt_len: int, sync: Callable[[], None], per_round: int = 1) -> Calls:
    """Segments of ``tgt_len`` with a full memory of ``attn_len`` (same_length), ``per_round`` a round: Transformer-XL, or
    with ``tgt_len`` 1 the rolling KV cache (``per_round`` an XL segment's tokens). The memory is filled here, untimed.

    ``tokens`` [B, attn_len + calls * tgt_len + 1] at least.
    """
    model.set_context(xl_context(model, attn_len))
    _, state = xl_fill(model, tokens, attn_len)
    starts = iter(range(attn_len, tokens.size(1) - 1, tgt_len))
    memory = [state]

    def step() -> torch.Tensor:
        nll, memory[0] = xl_segment(model, tokens, memory[0], next(starts), tgt_len)
        sync()
        return nll

    return Calls(step, tgt_len, tokens.size(0), per_round, state=lambda: state_bytes(memory[0]))


def strided_calls(model: TransformerXL, tokens: torch.Tensor, attn_len: int, stride: int, sync: Callable[[], None]) -> Calls:
    """Windows of ``attn_len`` advanced by ``stride``, each scoring its last ``stride`` predictions; with as many warm-up calls,
    the first timed window predicts what the first timed XL segment of the same length does.
    ``tokens`` [B, attn_len + calls * stride + 1]."""
    ends = iter(range(attn_len + stride, tokens.size(1), stride))

    def step() -> torch.Tensor:
        nll = strided_nll(model, tokens, next(ends), attn_len, stride)
        sync()
        return nll

    return Calls(step, stride, tokens.size(0))


def vanilla_calls(model: TransformerXL, tokens: torch.Tensor, attn_len: int, n_windows: int, budget_s: float, rounds: int,
                  sync: Callable[[], None], generator: torch.Generator) -> Calls:
    """Calls of ``n_windows`` windows at sampled positions, for ``budget_s`` seconds over ``rounds`` rounds (at least
    :func:`vanilla_round_calls` a round).

    Targets are drawn from tokens[:, attn_len+1:], the positions the XL segments predict.
    """
    batch, length = tokens.shape

    def step() -> torch.Tensor:
        rows = torch.randint(0, batch, (n_windows,), generator=generator).to(tokens.device)
        ends = torch.randint(attn_len + 1, length, (n_windows,), generator=generator).to(tokens.device)
        nll = vanilla_nll(model, tokens, rows, ends, attn_len)
        sync()
        return nll

    return Calls(step, 1, n_windows, vanilla_round_calls(rounds), budget_s)


def vanilla_round_calls(rounds: int) -> int:
    """Vanilla calls a round makes at least: one, or enough for :data:`MIN_VANILLA_CALLS` timed calls over ``rounds`` rounds."""
    return math.ceil(MIN_VANILLA_CALLS / rounds)


def stream_length(attn_len: int, tgt_len: int, stride: int, warmup: int, repeats: int) -> int:
    """Tokens per stream that every method's warm-up and timed calls read (XL's segments, the rolling cache's tokens, the strided windows)."""
    return attn_len + (warmup + repeats) * max(tgt_len, stride) + 1


def token_stream(models: TimedModels, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """[batch, length] tokens: random, or ``batch`` consecutive stretches of a trained run's evaluation text."""
    if models.text is None:
        return torch.randint(0, models.shape.n_token, (batch, length), generator=generator)
    if batch * length > len(models.text):
        raise TxlabError(f"the run's evaluation split holds {len(models.text):,} tokens; {batch} stream(s) of {length:,} "
                         "(the attention length and the timed calls) need more: lower batch_size, repeats or the attention length")
    return models.text[: batch * length].view(batch, length)


def time_methods(models: TimedModels, vanilla: TransformerXL, tokens: torch.Tensor, attn_len: int, stride: int, settings: SpeedSettings,
                 generator: torch.Generator) -> dict[str, Timed]:
    """Every method timed on ``tokens`` at ``attn_len`` (the recompute rows with ``vanilla``), in alternating rounds
    (:func:`time_rounds`): a round is one vanilla share of ``budget_s`` (at least one call), one strided window, one XL
    segment's tokens through the rolling cache, and one XL segment."""
    sync, batch = _sync(tokens.device), tokens.size(0)
    calls = {
        "vanilla": vanilla_calls(vanilla, tokens, attn_len, batch, settings.budget_s, settings.repeats, sync, generator),
        "strided": strided_calls(vanilla, tokens, attn_len, stride, sync),
        "rolling": xl_calls(models.xl, tokens, attn_len, 1, sync, per_round=models.tgt_len),
        "xl": xl_calls(models.xl, tokens, attn_len, models.tgt_len, sync),
    }
    return time_rounds(calls, settings.warmup, settings.repeats, tokens.device)


@dataclass(frozen=True)
class MethodSpeed:
    """One method's numbers at one attention length: a line of the baselines table."""

    tokens_per_s: float
    """Predictions per second: a call's predictions over the median call time."""
    flops_per_token: float
    """Analytic forward FLOPs of the useful work per prediction (see the module docstring)."""
    nll: float
    """Mean NLL in nats of the timed predictions."""
    ppl: float | None
    """exp(nll) where the method ran trained weights (``--run``), else None."""
    predictions: int
    """How many predictions were timed (all streams)."""
    p50_ms: float
    """Median latency per token at batch 1, ms (nearest rank)."""
    p99_ms: float
    """99th-percentile latency per token at batch 1, ms (nearest rank)."""
    peak_mb: float | None
    """The most memory the warm-up and timed calls added at once, MiB (:class:`txlab.timing.PeakMemory`); None
    where it cannot be told."""
    state_mb: float
    """The tensors the method keeps between calls, MiB (0 for the recompute methods)."""

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s of useful work."""
        return self.tokens_per_s * self.flops_per_token / 1e9


@dataclass(frozen=True)
class SpeedRow:
    """One row of Table 9: every method at one attention length, on the same token stream (:func:`measure`)."""

    attn_len: int
    """The attention length L: the keys every query attends (the vanilla window)."""
    vanilla: MethodSpeed
    """Vanilla recompute: one window of L per prediction (the paper's baseline)."""
    strided: MethodSpeed
    """Strided recompute: windows of L advanced by ``stride``, scoring their last ``stride`` predictions."""
    rolling: MethodSpeed
    """The rolling KV cache: XL's cached state read one token at a time."""
    xl: MethodSpeed
    """Transformer-XL segments of ``tgt_len`` with memory L and same_length."""
    paper_slowdown: float | None
    """The paper's slowdown at this length (:data:`PAPER_SLOWDOWN`), None at other lengths."""
    xl_eval_cache: bool
    """Whether XL read its memory from the cached evaluation state (``eval_cache``)."""
    xl_avoided_flops_per_token: float
    """Re-projection work per token the cached state skipped (0 on the training path)."""
    xl_repeated_flops_per_token: float
    """Re-projection work per token the training path did again (0 with the cached state)."""
    vanilla_positions: int
    """Predictions the vanilla calls timed (calls x windows per call)."""
    xl_tokens: int
    """Predictions the XL segments timed (streams x tgt_len x repeats)."""
    vanilla_round_ms: tuple[float, ...]
    """Vanilla recompute's milliseconds per prediction in each timed round (:meth:`Timed.round_token_seconds`)."""
    xl_round_ms: tuple[float, ...]
    """XL's milliseconds per prediction in each timed round, the same rounds."""
    batch_size: int
    """Streams (XL) and windows (vanilla) per call."""
    tgt_len: int
    """XL's evaluation segment length."""
    stride: int
    """The strided windows' step and the predictions each scores."""
    attn_kernel: str
    """The attention kernel setting every model ran with."""
    seconds: float
    """Wall time of the whole row, warm-up and the batch-1 latency pass included."""
    load_avg_1m: float
    """The 1-minute load average when the row started."""
    others_cpu: float | None
    """The share of all cores other processes used during the row (:func:`txlab.timing.others_cpu`); None where unknown."""

    @property
    def slowdown(self) -> float:
        """How many times faster XL segments predict than vanilla recompute (the paper's Table 9 number)."""
        return self.xl.tokens_per_s / self.vanilla.tokens_per_s

    @property
    def round_slowdowns(self) -> list[float]:
        """The slowdown of each round alone: vanilla's time per prediction over XL's, timed minutes apart at most."""
        return [v / x for v, x in zip(self.vanilla_round_ms, self.xl_round_ms)]

    @property
    def flop_ratio(self) -> float:
        """Vanilla's useful FLOPs per prediction over XL's: the slowdown arithmetic alone predicts."""
        return self.vanilla.flops_per_token / self.xl.flops_per_token

    def method(self, name: str) -> MethodSpeed:
        """The numbers of one of :data:`METHODS` by name."""
        return getattr(self, name)

    def as_record(self) -> dict[str, Any]:
        """The row as the CSV and ``--json`` hold it: flat ``<method>_<quantity>`` keys, in the columns' order."""
        vanilla, xl = self.vanilla, self.xl
        record: dict[str, Any] = {
            "attn_len": self.attn_len, "vanilla_tokens_per_s": vanilla.tokens_per_s, "xl_tokens_per_s": xl.tokens_per_s,
            "slowdown": self.slowdown, "paper_slowdown": self.paper_slowdown, "rounds": len(self.xl_round_ms),
            **spread("slowdown", self.round_slowdowns), **spread("vanilla_ms_per_token", self.vanilla_round_ms),
            **spread("xl_ms_per_token", self.xl_round_ms), "vanilla_gflops": vanilla.gflops, "xl_gflops": xl.gflops,
            "flop_ratio": self.flop_ratio, "vanilla_flops_per_token": vanilla.flops_per_token, "xl_flops_per_token": xl.flops_per_token,
            "xl_eval_cache": self.xl_eval_cache, "xl_avoided_flops_per_token": self.xl_avoided_flops_per_token,
            "xl_repeated_flops_per_token": self.xl_repeated_flops_per_token, "vanilla_positions": self.vanilla_positions,
            "xl_tokens": self.xl_tokens, "batch_size": self.batch_size, "tgt_len": self.tgt_len, "stride": self.stride,
        }
        for name in METHODS:
            m = self.method(name)
            record.update({f"{name}_nll": m.nll, f"{name}_ppl": m.ppl, f"{name}_predictions": m.predictions, f"{name}_p50_ms": m.p50_ms,
                           f"{name}_p99_ms": m.p99_ms, f"{name}_peak_mb": m.peak_mb, f"{name}_state_mb": m.state_mb})
            if name not in ("vanilla", "xl"):  # their rates lead the record: the paper's two rows
                record.update({f"{name}_tokens_per_s": m.tokens_per_s, f"{name}_gflops": m.gflops, f"{name}_flops_per_token": m.flops_per_token})
        record.update({"attn_kernel": self.attn_kernel, "seconds": self.seconds, "load_avg_1m": self.load_avg_1m, "others_cpu": self.others_cpu})
        return record


SPREAD_COLUMNS = ("rounds", *(f"{what}_{end}" for what in ("slowdown", "vanilla_ms_per_token", "xl_ms_per_token") for end in ("min", "median", "max")))
"""The rounds and their spread in a table's columns (:meth:`SpeedRow.as_record`); tables timed before the rounds alternated lack them."""


def spread(name: str, values: Sequence[float]) -> dict[str, float]:
    """``<name>_min``, ``<name>_median`` and ``<name>_max`` of ``values``."""
    return {f"{name}_min": min(values), f"{name}_median": statistics.median(values), f"{name}_max": max(values)}


def measure(models: TimedModels, attn_len: int, settings: SpeedSettings, device: torch.device) -> SpeedRow:
    """One row of the table: every method at ``attn_len`` on the same token stream."""
    batch = settings.batch_size or (DEFAULT_GPU_BATCH if device.type == "cuda" else 1)
    tgt_len = models.tgt_len
    stride = settings.stride or min(tgt_len, attn_len)  # a window of L tokens makes L predictions
    generator = torch.Generator().manual_seed(settings.seed + attn_len)
    length = stream_length(attn_len, tgt_len, stride, settings.warmup, settings.repeats)
    tokens = token_stream(models, batch, length, generator).to(device)
    vanilla = models.vanilla(attn_len)
    load, snapshot, start = os.getloadavg()[0], cpu_snapshot(), time.perf_counter()
    with torch.inference_mode():
        timed = time_methods(models, vanilla, tokens, attn_len, stride, settings, generator)
        latency = timed if batch == 1 else time_methods(models, vanilla, tokens[:1], attn_len, stride, settings, generator)
    vanilla_counts, xl_counts = vanilla.counts(), models.xl.counts()
    flops = {
        "vanilla": vanilla_counts.window_flops(attn_len),
        "strided": vanilla_counts.window_flops(attn_len, stride) / stride,
        "rolling": xl_counts.flops_per_token(attn_len),
        "xl": xl_counts.flops_per_token(attn_len),
    }
    methods = {}
    for method in METHODS:
        result, peak = timed[method], timed[method].peak_bytes
        percentiles = latency_percentiles(latency[method].per_token_seconds())
        nll = result.nll.float().mean().item()
        methods[method] = MethodSpeed(
            tokens_per_s=result.tokens_per_s, flops_per_token=flops[method], nll=nll, ppl=math.exp(nll) if models.trained(method) else None,
            predictions=result.nll.numel(), p50_ms=percentiles[50] * 1e3, p99_ms=percentiles[99] * 1e3,
            peak_mb=None if peak is None else peak / 2**20, state_mb=result.state_bytes / 2**20,
        )
    recomputed = xl_counts.recomputed_flops_per_token(attn_len, tgt_len, batch)
    return SpeedRow(
        attn_len, **methods, paper_slowdown=PAPER_SLOWDOWN.get(attn_len), xl_eval_cache=settings.eval_cache,
        xl_avoided_flops_per_token=recomputed if settings.eval_cache else 0.0,
        xl_repeated_flops_per_token=0.0 if settings.eval_cache else recomputed,
        vanilla_positions=len(timed["vanilla"].seconds) * batch, xl_tokens=batch * tgt_len * settings.repeats,
        vanilla_round_ms=tuple(t * 1e3 for t in timed["vanilla"].round_token_seconds()),
        xl_round_ms=tuple(t * 1e3 for t in timed["xl"].round_token_seconds()), batch_size=batch,
        tgt_len=tgt_len, stride=stride, attn_kernel=settings.attn_kernel, seconds=time.perf_counter() - start, load_avg_1m=load,
        others_cpu=others_cpu(snapshot),
    )


# --------------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class SpeedTable:
    """One measurement of Table 9, as written to ``<name>.csv`` and ``<name>.md``."""

    name: str
    profile: str
    command: str
    """The `txlab speed` command that reproduces it (:func:`command_line`)."""
    model: str
    """The preset name, or the run directory timed."""
    size: str
    """The preset size, or 'run'."""
    params: int
    settings: SpeedSettings
    machine: Machine
    rows: list[SpeedRow]
    """One row per attention length (:func:`measure`)."""
    table: Path | None = None
    """The CSV written."""
    markdown: Path | None = None
    """The Markdown written."""

    def summary(self) -> dict[str, Any]:
        """The --json document."""
        return {"name": self.name, "profile": self.profile, "command": self.command, "model": self.model, "size": self.size,
                "params": self.params, "settings": asdict(self.settings), "machine": asdict(self.machine), "rows": [row.as_record() for row in self.rows]}


def speed_table(
    attn_lens: Sequence[int] = PAPER_ATTN_LENS,
    settings: SpeedSettings | None = None,
    *,
    out_dir: str | Path | None = None,
    name: str = "table9",
    profile: str = "",
    echo: Callable[[str], None] = lambda msg: None,
) -> SpeedTable:
    """Measure Table 9 at each attention length and write ``out_dir/<name>.csv`` and ``.md`` (default
    ``<home>/results/speed``, see txlab.workspace)."""
    settings = settings or SpeedSettings()
    check_request(attn_lens, settings)
    device = _device(settings.device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        torch.manual_seed(settings.seed)
        models = TimedModels(settings, device)
        for attn_len in attn_lens:  # before any timing: the first chunk reads attn_len tokens at once, then segments attend attn_len keys
            batch = settings.batch_size or (DEFAULT_GPU_BATCH if device.type == "cuda" else 1)
            shape = replace(models.shape, family="xl", pos_enc="ours", max_len=0)  # the XL timed, with the relative scores' bias
            for length, memory in ((attn_len, 0), (models.tgt_len, attn_len)):
                check_fits(shape, batch, length, memory, training=False, device=device, what=f"attention length {attn_len:,} (--attn-len, batch_size)")
        host = machine(device, settings.threads)
        rows = []
        for n in attn_lens:
            echo(f"attention length {n}: vanilla windows for {settings.budget_s:g} s, {settings.repeats} strided windows, "
                 f"{settings.repeats * models.tgt_len} rolling-cache tokens and {settings.repeats} XL segments")
            rows.append(measure(models, n, settings, device))
            echo(table9_markdown(rows[-1:]).splitlines()[-1])
    finally:
        torch.set_num_threads(previous_threads)
    result = SpeedTable(name, profile, command_line(attn_lens, settings, name), models.cfg.preset or settings.run,
                        settings.size if not settings.run else "run", models.xl.num_parameters(), settings, host, rows)
    out_dir = Path(out_dir or resolve("results/speed"))
    return replace(result, table=_write_csv(out_dir / f"{name}.csv", result),
                   markdown=write_text_atomic(out_dir / f"{name}.md", format_markdown(result)))


def table9_markdown(rows: Sequence[SpeedRow]) -> str:
    """The rows as the paper's Table 9, with the achieved rates and the sample sizes beside it."""
    headers = ["attn len", "vanilla tok/s", "XL tok/s", "slowdown", "paper", "rounds", "slowdown by round", "vanilla ms/token by round",
               "XL ms/token by round", "vanilla GFLOP/s", "XL GFLOP/s", "FLOP ratio", "vanilla positions", "XL tokens", "others' CPU"]
    lines = []
    for r in rows:
        paper = f"{r.paper_slowdown:,.0f}x" if r.paper_slowdown else "-"
        others = f"{r.others_cpu:.0%}" if r.others_cpu is not None else "-"
        lines.append([r.attn_len, f"{r.vanilla.tokens_per_s:,.3g}", f"{r.xl.tokens_per_s:,.0f}", f"{r.slowdown:,.0f}x", paper,
                      len(r.xl_round_ms), _spread_words(r.round_slowdowns, "x"), _spread_words(r.vanilla_round_ms),
                      _spread_words(r.xl_round_ms), f"{r.vanilla.gflops:,.1f}", f"{r.xl.gflops:,.1f}", f"{r.flop_ratio:,.0f}",
                      f"{r.vanilla_positions:,}", f"{r.xl_tokens:,}", others])
    return markdown_table(headers, lines, numeric=[True] * len(headers))


def _spread_words(values: Sequence[float], unit: str = "") -> str:
    """'759x / 1,020x / 1,527x': the min, median and max of per-round figures (:func:`_figure`)."""
    return " / ".join(f"{_figure(v)}{unit}" for v in spread("", values).values())


def baselines_markdown(rows: Sequence[SpeedRow]) -> str:
    """Every method at every attention length, one line each: the paper's two rows and today's baselines beside them."""
    headers = ["attn len", "method", "tok/s", "GFLOP/s", "vs XL", "p50 ms/token", "p99 ms/token", "peak MB", "state MB", "perplexity",
               "predictions"]
    lines = []
    for r in rows:
        for method in METHODS:
            name = METHOD_NAMES[method] + (f" (s = {r.stride})" if method == "strided" else "")
            m = r.method(method)
            lines.append([r.attn_len, name, _figure(m.tokens_per_s), f"{m.gflops:,.1f}", f"{_figure(r.xl.tokens_per_s / m.tokens_per_s)}x",
                          _figure(m.p50_ms), _figure(m.p99_ms), "-" if m.peak_mb is None else f"{m.peak_mb:,.1f}",
                          f"{m.state_mb:,.1f}", "-" if m.ppl is None else f"{m.ppl:,.3f}", f"{m.predictions:,}"])
    return markdown_table(headers, lines, numeric=[True, False] + [True] * (len(headers) - 2))


def _figure(value: float) -> str:
    """Three significant digits below 100, whole numbers with thousands separators above: 0.294, 19.3, 1,171."""
    return f"{value:.3g}" if value < 100 else f"{value:,.0f}"


def contention_warning(rows: Sequence[SpeedRow]) -> str:
    """'' when the machine was ours while timing, else which attention lengths other processes slowed."""
    return contention_note([(r.attn_len, r.others_cpu) for r in rows], "attention length")


def format_markdown(result: SpeedTable) -> str:
    m, s, rows = result.machine, result.settings, result.rows
    profile = f"profile `{result.profile}`, " if result.profile else ""
    repeated = ", ".join(
        f"{(r.xl_avoided_flops_per_token + r.xl_repeated_flops_per_token) / r.xl.flops_per_token:.2f}x at L = {r.attn_len}" for r in rows
    )
    xl_path = ("reads its memory from the cached evaluation state: each segment projects only its own rows' keys and values, "
               "and the position keys come from a table built once" if s.eval_cache else
               "runs the training path (`--set eval_cache=false`): each segment re-projects the keys and values of the whole memory "
               "and applies r_net to every distance, as the authors' code does")
    return f"""# Table 9: evaluation speed, vanilla Transformer vs Transformer-XL

Produced by `{result.command}` ({profile}model {result.model}, size {result.size}, {count_label(result.params)} parameters).

Machine: {m.device} ({m.device_name}), CPU {m.cpu} with {m.cpu_count} cores, {m.threads} torch threads,
torch {m.torch}; a large fp32 matmul reaches {m.matmul_peak_gflops:,.0f} GFLOP/s there.

{table9_markdown(rows)}
{f"{chr(10)}**Warning:** {contention_warning(rows)}.{chr(10)}" if contention_warning(rows) else ""}
- Attention length L: the vanilla model predicts each token from a window of exactly the L tokens before
  it (recomputed for every prediction, {rows[0].batch_size} window(s) per call, at sampled positions);
  Transformer-XL reads {rows[0].batch_size} stream(s) in segments of {rows[0].tgt_len} with memory L and same_length,
  so every query attends exactly L keys in every layer.
- tokens/s: predictions per second, from the median of the timed calls after {s.warmup} warm-up round(s): XL
  {s.repeats} segments with a full memory, vanilla calls for {s.budget_s:g} s (at least {vanilla_round_calls(s.repeats)} a round); slowdown = XL / vanilla.
- Rounds: the methods are timed in alternation, {s.repeats} rounds of a share of vanilla's budget, a strided window, an XL
  segment's tokens through the rolling cache and an XL segment, so that load which comes and goes slows them alike.
  "By round": min / median / max over the rounds of each round's slowdown, and of each side's time per prediction
  (the round's median call over its predictions); a wide spread says the load moved while timing.
- GFLOP/s against the analytic forward FLOPs of the useful work: vanilla `window_flops(L)` per prediction,
  XL `flops_per_token(L)`; the FLOP ratio is their quotient, the slowdown arithmetic alone predicts.
- XL {xl_path}. Re-projecting the memory every segment, as the authors' code does, costs per token
  {repeated} the useful FLOPs (never counted as useful work).
- others' CPU: the share of all cores other processes used during the row (timings on a shared machine).

## Today's baselines beside the paper's

{baselines_markdown(rows)}

- Vanilla recompute is the paper's baseline (one window of L per prediction); strided recompute advances the
  window by s = {rows[0].stride} and scores its last s predictions (context between L-s+1 and L); the rolling KV cache
  reads one token at a time, attending the cached keys and values of the last L tokens at every layer (XL's
  cached evaluation state with segments of 1: a lower layer's cached state was computed from its own token's
  window, so this is not recompute); XL segments as above. "vs XL": how many times slower than XL segments.
- Latency per token: each timed call's time over the predictions it makes per stream, at batch 1
  ({"the calls above" if rows[0].batch_size == 1 else "every method timed again at batch 1"}); p50 and p99 are nearest-rank
  percentiles. A stride or segment makes its first token wait for the whole call: per call, multiply by s or {rows[0].tgt_len}.
- Peak MB: the most memory the warm-up and timed calls added at once on top of what was in use before them (the
  memory fill excluded; {"resident memory, after freed memory went back to the system: a lower bound" if m.device == "cpu" else "allocated tensors"}).
  State MB: the tensors a method keeps between calls (XL's memory with its cached keys and values, in stores
  with room for as many rows again; the rolling cache the same at segments of 1).
- Perplexity: exp(mean NLL) of the predictions a row timed (count in the last column), only where the row
  runs trained weights (`--run`); "-" for random weights or random tokens.
- Attention kernel: `{rows[0].attn_kernel}` (docs/performance.md).
"""


def _write_csv(path: Path, result: SpeedTable) -> Path:
    """Tidy CSV: one line per attention length, with the machine and settings on every line."""
    context = {"name": result.name, "profile": result.profile, "model": result.model, "size": result.size,
               **asdict(result.machine), "command": result.command}
    lines = [{**row.as_record(), **context} for row in result.rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(lines[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: csv_cell(value) for key, value in line.items()} for line in lines)
    return write_text_atomic(path, buffer.getvalue())
