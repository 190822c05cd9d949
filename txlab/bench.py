"""Throughput of the Transformer-XL implementation (a benchmark, not a test).

``bench_model()`` times training steps and evaluation chunks of two fixed shapes, ``tiny`` and ``small``
(docs/performance.md), and reports tokens/s, achieved GFLOP/s (from the model's analytic
``flops_per_token``; a training step counts three forward passes) and peak memory, each the median
of several timed runs after warm-up. Modes:

- ``train``: forward + backward + gradient clipping + Adam step on ``seg_len`` tokens per stream,
  memory ``seg_len``, dropout 0.1 (the paper's base setting).
- ``eval_memM``: a forward pass in inference mode on ``seg_len`` tokens with a full memory of M, with
  the cached evaluation state (:class:`~txlab.model.CachedMemory`: each chunk projects only its own rows).
- ``eval_memM_uncached``: the same through the training path, which re-projects the whole memory every
  chunk as the authors' code does (the "before" of the cached state).
- ``generate_memM`` (and ``generate_memM_uncached``): text generation as ``txlab generate`` runs it,
  one stream, one token per step (read back into the model, then a top-40 sample), after a prompt
  that fills a memory of M; tokens/s is generated tokens per second.
- ``vanilla_winL``: the vanilla Transformer's sliding-window evaluation, one prediction per window
  of L tokens (``window_last_nll``), batch_size windows at a time.

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
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.build import build_model

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


def _cpu_snapshot() -> tuple[float, float, float] | None:
    """(busy seconds of all cores, this process's CPU seconds, wall time), or None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    own = resource.getrusage(resource.RUSAGE_SELF)
    return busy, own.ru_utime + own.ru_stime, time.perf_counter()


def _others_cpu(start: tuple[float, float, float] | None) -> float | None:
    """Share of all cores used by other processes since ``start`` (0 = the machine was ours)."""
    end = _cpu_snapshot()
    if start is None or end is None:
        return None
    wall = end[2] - start[2]
    others = (end[0] - start[0]) - (end[1] - start[1])
    return max(0.0, others / (wall * (os.cpu_count() or 1)))


def matmul_peak_gflops(threads: int = 2, size: int = 2048, repeats: int = 7) -> float:
    """Achieved GFLOP/s of a large fp32 matmul: the machine's practical ceiling for the rows."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(size, size), torch.randn(size, size)
        seconds = _timed(lambda: a @ b, 2, repeats)
    finally:
        torch.set_num_threads(previous)
    return 2 * size**3 / seconds / 1e9


def preset_configs(names: Sequence[str], size: str = "cpu") -> dict[str, dict[str, Any]]:
    """ModelConfig fields of presets at ``size`` (vocabulary of their default corpus), for :func:`bench_model`."""
    from txlab.presets import resolve_preset
    from txlab.zoo import known_vocab_size

    configs = {}
    for name in names:
        cfg = resolve_preset(name, size)
        n_token = known_vocab_size(cfg.data.corpus)
        if n_token is None:
            raise TxlabError(f"preset {name!r} at size {size!r} trains on {cfg.data.corpus}, whose vocabulary size is unknown without its data")
        configs[f"{name}-{size}"] = {**dataclasses.asdict(cfg.model), "n_token": n_token}
    return configs


def _timed(step, warmup: int, repeats: int) -> float:
    """Median wall time of ``step()`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _bench_train(cfg: ModelConfig, batch_size: int, seg_len: int, warmup: int, repeats: int) -> tuple[float, float, int]:
    cfg = replace(cfg, tgt_len=seg_len, mem_len=seg_len, dropout=0.1)
    model = build_model(cfg).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2.5e-4)
    tokens = torch.randint(0, cfg.n_token, (batch_size, seg_len + 1))
    state = [model.init_state(batch_size)]

    def step() -> None:
        out = model(tokens[:, :-1], state[0], tokens[:, 1:])
        out.nll.mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state[0] = out.state

    seconds = _timed(step, max(warmup, 1), repeats)  # at least one step to fill the memory
    flops = 3 * model.flops_per_token(2 * seg_len)
    return batch_size * seg_len / seconds, flops, model.num_parameters()


def _bench_eval(cfg: ModelConfig, batch_size: int, seg_len: int, mem_len: int, warmup: int, repeats: int,
                cached: bool = True) -> tuple[float, float, int, float]:
    cfg = replace(cfg, tgt_len=seg_len, mem_len=mem_len)
    model = build_model(cfg).eval()
    if hasattr(model, "eval_cache"):
        model.eval_cache = cached
    tokens = torch.randint(0, cfg.n_token, (batch_size, seg_len + 1))
    with torch.inference_mode():
        state = [model.init_state(batch_size)]

        def step() -> None:
            state[0] = model(tokens[:, :-1], state[0], tokens[:, 1:]).state

        fill = math.ceil(mem_len / seg_len)  # chunks until the memory is full
        seconds = _timed(step, max(warmup, fill), repeats)
    recomputed = getattr(model, "recomputed_flops_per_token", None)
    avoided = recomputed(mem_len, seg_len, batch_size) if recomputed and cached else 0.0
    return batch_size * seg_len / seconds, model.flops_per_token(mem_len + seg_len), model.num_parameters(), avoided


def _bench_generate(cfg: ModelConfig, mem_len: int, warmup: int, repeats: int, cached: bool,
                    n_tokens: int = 16) -> tuple[float, float, int, float]:
    """Generated tokens/s: each timed run samples ``n_tokens`` tokens, one at a time, as txlab generate does."""
    from txlab.generate import ContextReader, sample_top_k
    from txlab.lm import Context

    cfg = replace(cfg, tgt_len=mem_len, mem_len=mem_len)
    model = build_model(cfg).eval()
    if hasattr(model, "eval_cache"):
        model.eval_cache = cached
    model.set_context(Context(mem_len))
    reader = ContextReader(model, chunk_len=mem_len, window=mem_len)
    generator = torch.Generator().manual_seed(0)
    log_probs = [reader.read(torch.randint(0, cfg.n_token, (mem_len,), generator=generator).tolist())]

    def step() -> None:
        for _ in range(n_tokens):
            log_probs[0] = reader.read([int(sample_top_k(log_probs[0], 40, 1.0, generator))])

    seconds = _timed(step, warmup, repeats)
    recomputed = getattr(model, "recomputed_flops_per_token", None)
    avoided = recomputed(mem_len, 1, 1) if recomputed and cached else 0.0
    return n_tokens / seconds, model.flops_per_token(mem_len + 1), model.num_parameters(), avoided


def _bench_vanilla(cfg: ModelConfig, batch_size: int, window: int, warmup: int, repeats: int) -> tuple[float, float, int]:
    cfg = replace(cfg, family="vanilla", pos_enc="alrfou", tgt_len=window, mem_len=0, max_len=window)
    model = build_model(cfg).eval()
    windows = torch.randint(0, cfg.n_token, (batch_size, window))
    targets = torch.randint(0, cfg.n_token, (batch_size,))
    with torch.inference_mode():
        seconds = _timed(lambda: model.window_last_nll(windows, targets), warmup, repeats)
    return batch_size / seconds, model.window_flops(window), model.num_parameters()


def bench_model(
    configs: Sequence[str] | Mapping[str, Mapping[str, Any]] = ("tiny", "small"),
    modes: Sequence[str] = DEFAULT_MODES,
    batch_size: int = 8,
    seg_len: int = 128,
    threads: int = 2,
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per (config, mode): tokens/s and GFLOP/s (medians of ``repeats`` timed runs).

    ``configs``: names from :data:`BENCH_CONFIGS`, or a mapping name -> ModelConfig fields.
    ``modes``: ``train``, ``eval_mem<M>``, ``eval_mem<M>_uncached``, ``generate_mem<M>``, ``generate_mem<M>_uncached``, ``vanilla_win<L>``.

    ``gflops`` counts useful FLOPs only (:meth:`~txlab.lm.LanguageModel.flops_per_token`); ``avoided_flops_per_token``
    is the re-projection work the cached evaluation state skips (0 for the other modes).
    """
    if isinstance(configs, Mapping):
        named = {name: dict(fields) for name, fields in configs.items()}
    else:
        unknown = [c for c in configs if c not in BENCH_CONFIGS]
        if unknown:
            raise TxlabError(f"unknown bench config {unknown[0]!r}; valid: {', '.join(BENCH_CONFIGS)}")
        named = {name: BENCH_CONFIGS[name] for name in configs}
    parsed = {}
    for mode in modes:
        match = _MODE.match(mode)
        if match is None:
            raise TxlabError(f"unknown bench mode {mode!r}; use train, eval_mem<M>, eval_mem<M>_uncached, generate_mem<M>, "
                             "generate_mem<M>_uncached or vanilla_win<L>")
        parsed[mode] = match
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    try:
        for name, fields in named.items():
            cfg = ModelConfig(**{"dropout": 0.0, "dropatt": 0.0, **fields})
            for mode, match in parsed.items():
                torch.manual_seed(seed)
                load = os.getloadavg()[0]
                snapshot = _cpu_snapshot()
                avoided, rows_batch = 0.0, batch_size
                if mode == "train":
                    tok_s, flops, params = _bench_train(cfg, batch_size, seg_len, warmup, repeats)
                    context = f"seg {seg_len} mem {seg_len}"
                elif match.group(2):
                    mem_len = int(match.group(2))
                    cached = not match.group(3)
                    tok_s, flops, params, avoided = _bench_eval(cfg, batch_size, seg_len, mem_len, warmup, repeats, cached)
                    context = f"seg {seg_len} mem {mem_len}" + ("" if cached else ", training path")
                elif match.group(5):
                    mem_len, cached = int(match.group(5)), not match.group(6)
                    tok_s, flops, params, avoided = _bench_generate(cfg, mem_len, warmup, repeats, cached)
                    context = f"one token a step, mem {mem_len}" + ("" if cached else ", training path")
                    rows_batch = 1
                else:
                    window = int(match.group(4))
                    tok_s, flops, params = _bench_vanilla(cfg, batch_size, window, warmup, repeats)
                    context = f"window {window}"
                reference = REFERENCE_TOKENS_PER_S.get((name, mode.removesuffix("_uncached"))) if batch_size == 8 and seg_len == 128 else None
                rows.append({
                    "config": name,
                    "family": cfg.family,
                    "mode": mode,
                    "context": context,
                    "batch_size": rows_batch,
                    "threads": threads,
                    "params": params,
                    "tokens_per_s": tok_s,
                    "gflops": tok_s * flops / 1e9,
                    "flops_per_token": flops,
                    "avoided_flops_per_token": avoided,
                    "reference_tokens_per_s": reference,
                    "speedup": tok_s / reference if reference else None,
                    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    "load_avg_1m": load,
                    "others_cpu": _others_cpu(snapshot),
                })
    finally:
        torch.set_num_threads(previous_threads)
    return rows


def format_table(rows: Sequence[Mapping[str, Any]], peak_gflops: float | None = None) -> str:
    """The rows as a Markdown table (peak RSS is the process's peak so far, hence non-decreasing).

    With ``peak_gflops`` (the matmul ceiling measured in the same run) a column gives each row's share of it.
    "avoided" is the work the cached evaluation state skips, as a multiple of the useful FLOPs.
    """
    share = peak_gflops is not None
    lines = [
        "| config | mode | context | tokens/s | reference tokens/s | speedup | GFLOP/s |" + (" of ceiling |" if share else "")
        + " avoided | peak RSS MB | load | others' CPU |",
        "|---|---|---|---:|---:|---:|---:|" + ("---:|" if share else "") + "---:|---:|---:|---:|",
    ]
    for r in rows:
        ref = f"{r['reference_tokens_per_s']:,.1f}" if r["reference_tokens_per_s"] else "-"
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        others = f"{r['others_cpu']:.0%}" if r["others_cpu"] is not None else "-"
        avoided = r.get("avoided_flops_per_token") or 0.0
        avoided_text = f"{avoided / r['flops_per_token']:.2f}x" if avoided else "-"
        of_ceiling = f" {r['gflops'] / peak_gflops:.0%} |" if share else ""
        lines.append(
            f"| {r['config']} | {r['mode']} | {r['context']} | {r['tokens_per_s']:,.1f} | {ref} | {speedup} "
            f"| {r['gflops']:.1f} |{of_ceiling} {avoided_text} | {r['peak_rss_mb']:.0f} | {r['load_avg_1m']:.2f} | {others} |"
        )
    return "\n".join(lines)
