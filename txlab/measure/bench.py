"""Throughput of the Transformer-XL implementation (a benchmark, not a test).

``bench_model()`` times training steps and evaluation chunks of two fixed shapes, ``tiny`` and ``small``
(docs/performance.md), and reports tokens/s, achieved GFLOP/s (from the model's count, ``model.counts()``:
``flops_per_token``, and ``training_flops_per_token`` for a training step) and peak memory, each the median
of several timed runs after warm-up. Modes:

- ``train``: forward + backward + gradient clipping + Adam step on ``seg_len`` tokens per stream,
  memory ``seg_len``, dropout 0.1 (the paper's base setting).
- ``eval_memM``: a forward pass in inference mode on ``seg_len`` tokens with a full memory of M, with
  the cached evaluation state (:class:`~txlab.models.eval_cache.CachedMemory`: each chunk projects only its own rows).
- ``eval_memM_uncached``: the same through the training path, which re-projects the whole memory every
  chunk as the authors' code does (the "before" of the cached state).
- ``generate_memM`` (and ``generate_memM_uncached``): text generation as ``txlab generate`` runs it,
  one stream, one token per step (read back into the model, then a top-40 sample), after a prompt
  that fills a memory of M; tokens/s is generated tokens per second.
- ``vanilla_winL``: the vanilla Transformer's sliding-window evaluation, one prediction per window
  of L tokens (``window_last_nll``), batch_size windows at a time.

The reference column: with ``authors_code_dir`` (``--authors-code``, a clone of the authors' code) every
row's workload is also run by their ``MemTransformerLM`` on the same tokens, timed in alternation with
txlab's (:mod:`txlab.measure.authors_code`), and the speedup is that side-by-side ratio. Without it, the tiny and
small shapes show a figure of their code recorded once on a machine of this kind: a yardstick only.

Timings share the machine with whatever else runs. Each row carries the 1-minute load average
and ``others_cpu``: the share of all cores that *other* processes used while the row ran (from
/proc/stat minus this process's own CPU time). With 2 threads on 2 cores any competitor stalls
every parallel region, so rerun rows whose ``others_cpu`` is above a few percent.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import resource
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from txlab.config import ModelConfig, TrainConfig
from txlab.errors import TxlabError
from txlab.measure import authors_code
from txlab.models.build import build_model
from txlab.precision import autocast, loss_scaler
from txlab.runs.evaluate import segment_loss
from txlab.runs.train import make_optimizer
from txlab.tables import markdown_table
from txlab.timing import cpu_snapshot, interleaved_median_seconds, others_cpu

BENCH_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": {"n_layer": 4, "d_model": 128, "n_head": 4, "d_head": 32, "d_inner": 512, "n_token": 256},
    "small": {"n_layer": 6, "d_model": 256, "n_head": 8, "d_head": 32, "d_inner": 1024, "n_token": 10_000},
}
"""The benchmark shapes: plain softmax, batch 8, segments of 128."""

DEFAULT_MODES = ("train", "eval_mem128", "eval_mem512", "vanilla_win512")

REFERENCE_TOKENS_PER_S: dict[tuple[str, str], float] = {
    ("tiny", "train"): 5182,
    ("tiny", "eval_mem128"): 16882,
    ("tiny", "eval_mem512"): 7131,
    ("tiny", "vanilla_win512"): 16.8,
    ("small", "train"): 1168,
    ("small", "eval_mem128"): 3449,
    ("small", "eval_mem512"): 2121,
    ("small", "vanilla_win512"): 4.6,
}
"""The authors' reference code measured once on a 2-core machine of this project's kind, 2 threads, batch 8,
segments 128: a yardstick only; compare side by side in one run for a ratio you can quote."""

_MODE = re.compile(r"^(train|eval_mem(\d+)(_uncached)?|vanilla_win(\d+)|generate_mem(\d+)(_uncached)?)$")


def preset_configs(names: Sequence[str], size: str = "cpu") -> dict[str, dict[str, Any]]:
    """ModelConfig fields of presets at ``size`` (vocabulary of their default corpus), for :func:`bench_model`."""
    from txlab.presets import resolve_preset
    from txlab.runs.zoo import known_vocab_size

    configs = {}
    for name in names:
        cfg = resolve_preset(name, size)
        n_token = known_vocab_size(cfg.data.corpus)
        if n_token is None:
            raise TxlabError(f"preset {name!r} at size {size!r} trains on {cfg.data.corpus}, whose vocabulary size is unknown without its data")
        configs[f"{name}-{size}"] = {**dataclasses.asdict(cfg.model), "n_token": n_token}
    return configs


@dataclasses.dataclass
class Workload:
    """One row's work: ``step()`` predicts ``tokens_per_call`` tokens of ``flops_per_token`` useful FLOPs each."""

    step: Callable[[], None]
    tokens_per_call: int
    flops_per_token: float
    params: int
    context: str
    min_warmup: int = 0
    avoided_flops_per_token: float = 0.0
    streams: int = 0


@dataclasses.dataclass(frozen=True)
class BenchRow:
    """One (shape, mode) of :func:`bench_model`: the throughput of txlab's model beside the reference."""

    config: str
    """The shape's name: a :data:`BENCH_CONFIGS` key, or ``<preset>-<size>``."""
    family: str
    """The model family (xl, vanilla, lstm, qrnn)."""
    mode: str
    """What was timed: ``train``, ``eval_mem<M>[_uncached]``, ``generate_mem<M>[_uncached]`` or ``vanilla_win<L>``."""
    context: str
    """The context each prediction had, in words ('seg 128 mem 128', 'window 512', ...)."""
    batch_size: int
    """Streams (or windows) per call; 1 for generation."""
    threads: int
    """torch CPU threads."""
    params: int
    """txlab's model's parameters."""
    tokens_per_s: float
    """Predictions per second: a call's predictions over the median call time."""
    flops_per_token: float
    """Analytic FLOPs of the useful work per prediction (a training step counts three forward passes)."""
    avoided_flops_per_token: float
    """Re-projection work per prediction the cached evaluation state skipped (0 for the other modes)."""
    reference_tokens_per_s: float | None
    """The authors' code on the same work: measured side by side, or recorded once (:data:`REFERENCE_TOKENS_PER_S`); None without."""
    reference_source: str | None
    """'side by side' or 'recorded' where there is a reference, else None."""
    reference_params: int | None
    """The authors' model's parameters, when it ran side by side."""
    peak_rss_mb: float
    """The process's peak resident memory so far, MiB (non-decreasing over the rows)."""
    load_avg_1m: float
    """The 1-minute load average when the row started."""
    others_cpu: float | None
    """The share of all cores other processes used during the row (:func:`txlab.timing.others_cpu`); None where unknown."""

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s of useful work."""
        return self.tokens_per_s * self.flops_per_token / 1e9

    @property
    def speedup(self) -> float | None:
        """txlab's tokens/s over the reference's, where there is one."""
        return self.tokens_per_s / self.reference_tokens_per_s if self.reference_tokens_per_s else None

    def as_record(self) -> dict[str, Any]:
        """The row as `txlab bench model --json` prints it, the derived numbers among the measured ones."""
        return {"config": self.config, "family": self.family, "mode": self.mode, "context": self.context, "batch_size": self.batch_size,
                "threads": self.threads, "params": self.params, "tokens_per_s": self.tokens_per_s, "gflops": self.gflops,
                "flops_per_token": self.flops_per_token, "avoided_flops_per_token": self.avoided_flops_per_token,
                "reference_tokens_per_s": self.reference_tokens_per_s, "reference_source": self.reference_source,
                "reference_params": self.reference_params, "speedup": self.speedup, "peak_rss_mb": self.peak_rss_mb,
                "load_avg_1m": self.load_avg_1m, "others_cpu": self.others_cpu}


def training_workload(cfg: ModelConfig, tokens: torch.Tensor, precision: str = "fp32") -> Workload:
    """One training step as `txlab train` takes it, on ``tokens`` [B, seg_len + 1] (on their device), with a memory of
    one segment: the forward pass and the loss under txlab.precision.autocast, backward through the loss scaler (fp16
    only; a pass-through otherwise), clipping at 0.25, the Adam step of txlab train (:func:`~txlab.runs.train.make_optimizer`). The
    model is built from ``cfg`` with seed 0."""
    batch_size, seg_len = tokens.size(0), tokens.size(1) - 1
    device = tokens.device
    torch.manual_seed(0)
    model = build_model(replace(cfg, tgt_len=seg_len, mem_len=seg_len)).to(device).train()
    optimizer = make_optimizer(model.parameters(), TrainConfig(lr=2.5e-4), device)
    scaler = loss_scaler(precision, device)
    state = [model.init_state(batch_size)]

    def step() -> None:
        with autocast(precision, device):
            out = model(tokens[:, :-1], state[0], tokens[:, 1:])
            loss = segment_loss(out.nll, "full")
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        state[0] = out.state

    return Workload(step, batch_size * seg_len, model.counts().training_flops_per_token(2 * seg_len), model.num_parameters(),
                    f"seg {seg_len} mem {seg_len}", min_warmup=1)  # one step fills the memory


def evaluation_workload(cfg: ModelConfig, tokens: torch.Tensor, mem_len: int, cached: bool) -> Workload:
    """One evaluation call as the ``eval_mem<M>`` rows time it: the model built from ``cfg`` (under the caller's seed) reads ``tokens``
    [B, seg_len + 1] after a memory of ``mem_len``, with the cached evaluation state or (``cached`` False) without."""
    batch_size, seg_len = tokens.size(0), tokens.size(1) - 1
    cfg = replace(cfg, tgt_len=seg_len, mem_len=mem_len)
    model = build_model(cfg).eval()
    if hasattr(model, "set_eval_cache"):  # Transformer-XL's cached evaluation state, or its training path
        model.set_eval_cache(cached)
    with torch.inference_mode():
        state = [model.init_state(batch_size)]

    def step() -> None:
        with torch.inference_mode():
            state[0] = model(tokens[:, :-1], state[0], tokens[:, 1:]).state

    counts = model.counts()
    return Workload(step, batch_size * seg_len, counts.flops_per_token(mem_len + seg_len), model.num_parameters(),
                     f"seg {seg_len} mem {mem_len}" + ("" if cached else ", training path"),
                     min_warmup=math.ceil(mem_len / seg_len),  # chunks until the memory is full
                     avoided_flops_per_token=counts.recomputed_flops_per_token(mem_len, seg_len, batch_size) if cached else 0.0)


def _generate(cfg: ModelConfig, mem_len: int, cached: bool, n_tokens: int = 16) -> Workload:
    """Each call samples ``n_tokens`` tokens, one at a time, as txlab generate does."""
    from txlab.measure.generate import ContextReader, sample_top_k
    from txlab.models.interface import Context

    cfg = replace(cfg, tgt_len=mem_len, mem_len=mem_len)
    model = build_model(cfg).eval()
    if hasattr(model, "set_eval_cache"):  # Transformer-XL's cached evaluation state, or its training path
        model.set_eval_cache(cached)
    model.set_context(Context(mem_len))
    reader = ContextReader(model, chunk_len=mem_len, window=mem_len)
    generator = torch.Generator().manual_seed(0)
    log_probs = [reader.read(torch.randint(0, cfg.n_token, (mem_len,), generator=generator).tolist())]

    def step() -> None:
        for _ in range(n_tokens):
            log_probs[0] = reader.read([int(sample_top_k(log_probs[0], 40, 1.0, generator))])

    counts = model.counts()
    return Workload(step, n_tokens, counts.flops_per_token(mem_len + 1), model.num_parameters(),
                     f"one token a step, mem {mem_len}" + ("" if cached else ", training path"),
                     avoided_flops_per_token=counts.recomputed_flops_per_token(mem_len, 1, 1) if cached else 0.0, streams=1)


def _vanilla(cfg: ModelConfig, windows: torch.Tensor, targets: torch.Tensor) -> Workload:
    window = windows.size(1)
    cfg = replace(cfg, family="vanilla", pos_enc="alrfou", tgt_len=window, mem_len=0, max_len=window)
    model = build_model(cfg).eval()

    def step() -> None:
        with torch.inference_mode():
            model.window_last_nll(windows, targets)

    return Workload(step, windows.size(0), model.counts().window_flops(window), model.num_parameters(), f"window {window}")


def _authors_step(model_class: type, cfg: ModelConfig, match: re.Match, tokens: torch.Tensor,
                  windows: torch.Tensor, targets: torch.Tensor, seed: int) -> tuple[Callable[[], None], int] | None:
    """The authors' code doing the row's work on the same tokens (None where they have no such mode)."""
    if match.group(1) == "train":
        return authors_code.train_step(model_class, replace(cfg, dropout=0.1), tokens, seed)
    if match.group(2):
        return authors_code.eval_step(model_class, cfg, tokens, int(match.group(2)), seed)
    if match.group(4):
        return authors_code.vanilla_step(model_class, cfg, windows, targets, seed)
    return None


def bench_model(
    configs: Sequence[str] | Mapping[str, Mapping[str, Any]] = ("tiny", "small"),
    modes: Sequence[str] = DEFAULT_MODES,
    *,
    batch_size: int = 8,
    seg_len: int = 128,
    threads: int = 2,
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
    authors_code_dir: str | Path | None = None,
) -> list[BenchRow]:
    """One row per (config, mode): tokens/s and GFLOP/s (medians of ``repeats`` timed runs).

    ``configs``: names from :data:`BENCH_CONFIGS`, or a mapping name -> ModelConfig fields.
    ``modes``: ``train``, ``eval_mem<M>``, ``eval_mem<M>_uncached``, ``generate_mem<M>``, ``generate_mem<M>_uncached``, ``vanilla_win<L>``.
    ``authors_code_dir``: a clone of the authors' code (:mod:`txlab.measure.authors_code`); each row's workload is then
    also run by their model on the same tokens, timed in alternation with txlab's, and the reference column
    is that measurement (otherwise the figure recorded in :data:`REFERENCE_TOKENS_PER_S`, where there is one).

    ``gflops`` counts useful FLOPs only (:meth:`~txlab.models.interface.ModelCounts.flops_per_token`); ``avoided_flops_per_token``
    is the re-projection work the cached evaluation state skips (0 for the other modes).
    """
    if isinstance(configs, Mapping):
        named = {name: dict(fields) for name, fields in configs.items()}
    else:
        unknown = [c for c in configs if c not in BENCH_CONFIGS]
        if unknown:
            raise TxlabError(f"unknown bench shape {unknown[0]!r}; valid: {', '.join(BENCH_CONFIGS)}")
        named = {name: BENCH_CONFIGS[name] for name in configs}
    parsed = {}
    for mode in modes:
        match = _MODE.match(mode)
        if match is None:
            raise TxlabError(f"unknown bench mode {mode!r}; use train, eval_mem<M>, eval_mem<M>_uncached, generate_mem<M>, "
                             "generate_mem<M>_uncached or vanilla_win<L>")
        parsed[mode] = match
    authors_model = authors_code.load_model_class(authors_code_dir) if authors_code_dir else None
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    try:
        for name, fields in named.items():
            cfg = ModelConfig(**{"dropout": 0.0, "dropatt": 0.0, **fields})
            for mode, match in parsed.items():
                torch.manual_seed(seed)
                generator = torch.Generator().manual_seed(seed)
                tokens = torch.randint(0, cfg.n_token, (batch_size, seg_len + 1), generator=generator)
                window = int(match.group(4) or 1)
                windows = torch.randint(0, cfg.n_token, (batch_size, window), generator=generator)
                targets = torch.randint(0, cfg.n_token, (batch_size,), generator=generator)
                if mode == "train":
                    work = training_workload(replace(cfg, dropout=0.1), tokens)
                elif match.group(2):
                    work = evaluation_workload(cfg, tokens, int(match.group(2)), cached=not match.group(3))
                elif match.group(5):
                    work = _generate(cfg, int(match.group(5)), cached=not match.group(6))
                else:
                    work = _vanilla(cfg, windows, targets)
                theirs = _authors_step(authors_model, cfg, match, tokens, windows, targets, seed) if authors_model else None
                load, snapshot = os.getloadavg()[0], cpu_snapshot()
                seconds = interleaved_median_seconds([work.step] + ([theirs[0]] if theirs else []),
                                                     max(warmup, work.min_warmup), repeats)
                tok_s = work.tokens_per_call / seconds[0]
                if theirs:
                    reference, source = work.tokens_per_call / seconds[1], "side by side"
                elif authors_model is None and batch_size == 8 and seg_len == 128:
                    reference, source = REFERENCE_TOKENS_PER_S.get((name, mode.removesuffix("_uncached"))), "recorded"
                else:
                    reference, source = None, None
                rows.append(BenchRow(
                    config=name, family=cfg.family, mode=mode, context=work.context, batch_size=work.streams or batch_size, threads=threads,
                    params=work.params, tokens_per_s=tok_s, flops_per_token=work.flops_per_token,
                    avoided_flops_per_token=work.avoided_flops_per_token, reference_tokens_per_s=reference,
                    reference_source=source if reference else None, reference_params=theirs[1] if theirs else None,
                    peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, load_avg_1m=load, others_cpu=others_cpu(snapshot),
                ))
    finally:
        torch.set_num_threads(previous_threads)
    return rows


def bench_table_markdown(rows: Sequence[BenchRow], peak_gflops: float | None = None) -> str:
    """The rows as a Markdown table (peak RSS is the process's peak so far, hence non-decreasing).

    The reference column is the authors' code measured side by side, or marked "(recorded)" where it is
    the figure recorded once (:data:`REFERENCE_TOKENS_PER_S`).

    With ``peak_gflops`` (the matmul ceiling measured in the same run) a column gives each row's share of it.
    "avoided" is the work the cached evaluation state skips, as a multiple of the useful FLOPs.
    """
    share = peak_gflops is not None
    headers = ["config", "mode", "context", "tokens/s", "reference tokens/s", "speedup", "GFLOP/s",
               *(["of ceiling"] if share else []), "avoided", "peak RSS MB", "load", "others' CPU"]
    lines = []
    for r in rows:
        ref = f"{r.reference_tokens_per_s:,.1f}" if r.reference_tokens_per_s else "-"
        if r.reference_source == "recorded":
            ref += " (recorded)"
        speedup = f"{r.speedup:.2f}x" if r.speedup else "-"
        others = f"{r.others_cpu:.0%}" if r.others_cpu is not None else "-"
        avoided_text = f"{r.avoided_flops_per_token / r.flops_per_token:.2f}x" if r.avoided_flops_per_token else "-"
        lines.append([r.config, r.mode, r.context, f"{r.tokens_per_s:,.1f}", ref, speedup, f"{r.gflops:.1f}",
                      *([f"{r.gflops / peak_gflops:.0%}"] if share else []), avoided_text, f"{r.peak_rss_mb:.0f}",
                      f"{r.load_avg_1m:.2f}", others])
    return markdown_table(headers, lines, numeric=[False] * 3 + [True] * (len(headers) - 3))
