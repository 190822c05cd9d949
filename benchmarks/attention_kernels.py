"""The attention kernels and torch.compile side by side on this CPU: what ``attn_kernel: auto`` runs, and why.

    THREADS=1 python benchmarks/attention_kernels.py [--quick] [--out FILE.jsonl]

Two parts, each a list of cases timed in interleaved rounds (one call of every variant per round, after
warm-up rounds, median per variant), with the fp32 matmul ceiling measured before and after in the same run
and the share of the CPU other processes took (``others_cpu``):

1. **The attention alone** at the shapes the models call it with: ``unfused`` and ``sdpa`` (txlab's two
   kernels, txlab.models.kernels.ATTENTION_KERNELS) and ``flex`` (``torch.nn.attention.flex_attention``, compiled for
   static shapes, the relative position scores read by a ``score_mod`` at the relative shift's index and the
   mask as a block mask; written here, since txlab does not ship it). Inference with relative position scores
   (the cached evaluation state), with the mask only (absolute positions, vanilla windows), and forward plus
   backward (training). Each variant's largest difference from ``unfused`` is recorded beside its time.
2. **Whole models**: a training step (forward, backward, clipping, Adam) and a cached evaluation segment of
   the cpu-size xl151m (relative, and with absolute positions), Table 9's vanilla windows, and evaluation
   segments at the speed table's paper shape; each with ``unfused`` and ``sdpa``, and the cpu-size rows also
   compiled (``ModelConfig.compile``, the ``auto`` kernel), whose compile time is the warm-up's.

torch.compile's caches are off (``torch._inductor.config.force_disable_caches``), so every compile time is a cold
one, as a fresh machine pays it.

GFLOP/s count useful FLOPs (docs/performance.md, the model's ``counts()``): ``flops_per_token`` at the keys each query's
row holds (``training_flops_per_token`` for a training step), ``window_flops`` for a vanilla window. Prints one JSON
line per row and writes them all to ``--out`` (default results/bench/attention-kernels-cpu.jsonl).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from txlab.config import ModelConfig
from txlab.measure.speed import SpeedSettings, timed_config
from txlab.models.attention import attention_mask
from txlab.models.build import build_model
from txlab.models.kernels import ATTENTION_KERNELS
from txlab.presets import resolve_preset
from txlab.runs.evaluate import evaluation_context
from txlab.runs.zoo import known_vocab_size
from txlab.timing import cpu_snapshot, matmul_peak_gflops, others_cpu

THREADS = int(os.environ.get("THREADS", "1"))


def interleaved(steps: dict, warmup: int, rounds: int) -> tuple[dict, dict]:
    """Median seconds per variant, timed one call of each per round; and each variant's warm-up seconds."""
    warm = {name: 0.0 for name in steps}
    for _ in range(warmup):
        for name, step in steps.items():
            began = time.perf_counter()
            step()
            warm[name] += time.perf_counter() - began
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            began = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - began)
    return {name: statistics.median(t) for name, t in times.items()}, warm


# --------------------------------------------------------------------------------------------------
# Part 1: the attention alone


def flex_kernel():
    """flex_attention compiled for static shapes (dynamic shapes fail to build on CPU with torch 2.13)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    compiled = torch.compile(flex_attention, dynamic=False)

    def attend(q, keys, values, by_distance, mask, scale, dropatt, block_mask=None):
        n_query, n_keys = mask.shape
        if block_mask is None:
            visible = mask == 0
            block_mask = create_block_mask(lambda b, h, i, j: visible[i, j], None, None, n_query, n_keys, device=q.device)
        if by_distance is None:
            return compiled(q, keys, values, block_mask=block_mask, scale=scale)
        flat = by_distance.flatten(-2)  # [B, H, T*(K+1)]
        last = n_query * (n_keys + 1) - 1

        def add_position_scores(score, b, h, i, j):  # rel_shift's cell: T-1 + i*K + j; padding keys clamped
            return score + flat[b, h, torch.clamp(n_query - 1 + i * n_keys + j, max=last)]

        return compiled(q, keys, values, score_mod=add_position_scores, block_mask=block_mask, scale=scale)

    return attend, create_block_mask


def attention_case(label: str, batch: int, heads: int, d_head: int, n_query: int, n_mem: int, window: int, relative: bool, backward: bool,
                   warmup: int, rounds: int) -> dict:
    torch.manual_seed(0)
    n_keys = n_mem + n_query
    scale = d_head**-0.5
    q, keys, values = (torch.randn(batch, heads, n, d_head, requires_grad=backward) for n in (n_query, n_keys, n_keys))
    by_distance = torch.randn(batch, heads, n_query, n_keys + 1, requires_grad=backward) if relative else None
    mask = attention_mask(n_query, n_mem, window, torch.float32)
    grad = torch.randn(batch, heads, n_query, d_head)
    kernels = dict(ATTENTION_KERNELS)
    flex_compile_s = None
    if not backward:  # flex_attention has no backward on CPU
        flex, create_block_mask = flex_kernel()
        visible = mask == 0
        began = time.perf_counter()
        block_mask = create_block_mask(lambda b, h, i, j: visible[i, j], None, None, n_query, n_keys, device="cpu")
        block_mask_s = time.perf_counter() - began
        with torch.inference_mode():
            began = time.perf_counter()
            flex(q, keys, values, by_distance, mask, scale, 0.0, block_mask)
            flex_compile_s = time.perf_counter() - began
        kernels["flex"] = lambda *args: flex(*args, block_mask)  # the block mask built once, as a cache would

    def step(kernel):
        def run():
            if backward:
                out = kernel(q, keys, values, by_distance, mask, scale, 0.0)
                torch.autograd.backward(out, grad)
                return out.detach()
            with torch.inference_mode():
                return kernel(q, keys, values, by_distance, mask, scale, 0.0)
        return run

    steps = {name: step(kernel) for name, kernel in kernels.items()}
    reference = steps["unfused"]()
    max_diff = {name: float((run() - reference).abs().max()) for name, run in steps.items()}
    snapshot = cpu_snapshot()
    seconds, _ = interleaved(steps, warmup, rounds)
    row = {"part": "attention", "case": label, "batch": batch, "heads": heads, "d_head": d_head, "queries": n_query, "keys": n_keys,
           "same_length": window, "relative": relative, "backward": backward,
           "ms": {name: s * 1e3 for name, s in seconds.items()}, "max_abs_diff_vs_unfused": max_diff,
           "fastest": min(seconds, key=seconds.get), "others_cpu": others_cpu(snapshot)}
    if flex_compile_s is not None:
        row["flex_compile_s"], row["flex_block_mask_s"] = flex_compile_s, block_mask_s
    return row


# --------------------------------------------------------------------------------------------------
# Part 2: whole models


def cpu_model(pos_enc: str = "ours", **fields) -> tuple[ModelConfig, object]:
    cfg = resolve_preset("xl151m", "cpu")
    model_cfg = replace(cfg.model, n_token=known_vocab_size(cfg.data.corpus), pos_enc=pos_enc, dropout=0.0, dropatt=0.0, **fields)
    return model_cfg, cfg.eval


def models_alike(cfg: ModelConfig, variants: dict[str, tuple[str, bool]]) -> dict:
    """One model per variant (kernel, compiled), all with the same weights."""
    models = {}
    for name, (kernel, compiled) in variants.items():
        torch.manual_seed(0)
        models[name] = build_model(replace(cfg, attn_kernel=kernel, compile=compiled))
    return models


def train_case(label: str, cfg: ModelConfig, batch: int, variants: dict, warmup: int, rounds: int) -> dict:
    models = models_alike(cfg, variants)
    seg, mem = cfg.tgt_len, cfg.mem_len
    tokens = torch.randint(0, cfg.n_token, (batch, (warmup + rounds + 2) * seg + 1), generator=torch.Generator().manual_seed(1))

    def step_for(model):
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        state, start = [model.init_state(batch)], [0]

        def step():
            s = start[0]
            out = model(tokens[:, s : s + seg], state[0], tokens[:, s + 1 : s + seg + 1])
            out.nll.mean().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state[0], start[0] = out.state, s + seg
        return step

    steps = {name: step_for(model) for name, model in models.items()}
    for step in steps.values():  # fills the memory: the timed steps all attend mem + seg keys
        step()
    flops = next(iter(models.values())).counts().training_flops_per_token(mem + seg)
    return model_row(label, "train", steps, batch * seg, flops, warmup, rounds, {"batch": batch, "seg": seg, "mem": mem})


def eval_case(label: str, cfg: ModelConfig, batch: int, seg: int, context, variants: dict, warmup: int, rounds: int) -> dict:
    models = models_alike(cfg, variants)
    mem = context.mem_len
    fill = -(-mem // seg)
    tokens = torch.randint(0, cfg.n_token, (batch, (fill + warmup + rounds) * seg + 1), generator=torch.Generator().manual_seed(2))

    def step_for(model):
        model.eval()
        model.set_context(context)
        state, start = [model.init_state(batch)], [0]

        def step():
            s = start[0]
            with torch.inference_mode():
                state[0] = model(tokens[:, s : s + seg], state[0], tokens[:, s + 1 : s + seg + 1]).state
            start[0] = s + seg
        return step

    steps = {name: step_for(model) for name, model in models.items()}
    for _ in range(fill):
        for step in steps.values():
            step()
    keys = mem if context.same_length else mem + seg
    flops = next(iter(models.values())).counts().flops_per_token(keys)
    return model_row(label, "eval", steps, batch * seg, flops, warmup, rounds,
                     {"batch": batch, "seg": seg, "mem": mem, "same_length": context.same_length, "clamp_len": context.clamp_len})


def vanilla_case(label: str, cfg: ModelConfig, attn_len: int, windows: int, variants: dict, warmup: int, rounds: int) -> dict:
    cfg = replace(cfg, family="vanilla", pos_enc="alrfou", mem_len=0, same_length=False, max_len=attn_len, tgt_len=attn_len)
    models = models_alike(cfg, variants)
    tokens = torch.randint(0, cfg.n_token, (windows, attn_len + 1), generator=torch.Generator().manual_seed(3))

    def step_for(model):
        model.eval()

        def step():
            with torch.inference_mode():
                model.window_last_nll(tokens[:, :-1], tokens[:, -1])
        return step

    steps = {name: step_for(model) for name, model in models.items()}
    flops = next(iter(models.values())).counts().window_flops(attn_len)
    return model_row(label, "vanilla windows", steps, windows, flops, warmup, rounds, {"windows": windows, "attn_len": attn_len})


def model_row(label, work, steps, tokens_per_call, flops_per_token, warmup, rounds, shape) -> dict:
    snapshot = cpu_snapshot()
    seconds, warm = interleaved(steps, warmup, rounds)
    return {"part": "model", "case": label, "work": work, **shape,
            "ms": {name: s * 1e3 for name, s in seconds.items()},
            "tokens_per_s": {name: tokens_per_call / s for name, s in seconds.items()},
            "gflops": {name: tokens_per_call * flops_per_token / s / 1e9 for name, s in seconds.items()},
            "warmup_s": warm, "fastest": min(seconds, key=seconds.get), "others_cpu": others_cpu(snapshot)}


KERNELS = {"unfused": ("unfused", False), "sdpa": ("sdpa", False)}
WITH_COMPILE = {**KERNELS, "auto, compiled": ("auto", True)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no paper-shape rows (a smoke run)")
    parser.add_argument("--out", default="results/bench/attention-kernels-cpu.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    torch._inductor.config.force_disable_caches = True  # cold compile times
    warmup, rounds = (1, 3) if args.quick else (2, 9)
    rows = [{"part": "machine", "threads": THREADS, "torch": torch.__version__, "matmul_peak_gflops_before": matmul_peak_gflops(THREADS, repeats=5)}]

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(json.dumps(rows[0]), flush=True)
    # Part 1. Shapes: the speed table's paper shape (8 heads of 64, segments of 80, L = 800 and 3800), the cpu
    # shape's cached evaluation (4 heads of 32, segments of 64, memory 512, 8 streams) and training (128 + 128).
    attention = [
        ("relative, cached eval, paper shape L=800", 1, 8, 64, 80, 800, 800, True, False),
        ("relative, cached eval, paper shape L=3800", 1, 8, 64, 80, 3800, 3800, True, False),
        ("relative, cached eval, cpu shape", 8, 4, 32, 64, 512, 512, True, False),
        ("mask only, cached eval, cpu shape", 8, 4, 32, 64, 512, 512, False, False),
        ("mask only, vanilla window, paper shape L=800", 1, 8, 64, 800, 0, 0, False, False),
        ("mask only, vanilla windows, cpu shape L=512", 4, 4, 32, 512, 0, 0, False, False),
        ("relative, training, cpu shape", 8, 4, 32, 128, 128, 0, True, True),
        ("mask only, training, cpu shape", 8, 4, 32, 128, 128, 0, False, True),
    ]
    for case in attention[2:4] + attention[5:] if args.quick else attention:
        emit(attention_case(*case, warmup=warmup, rounds=rounds))

    # Part 2.
    cfg, eval_cfg = cpu_model()
    seg, context = evaluation_context(cfg, eval_cfg)
    emit(train_case("xl151m cpu (relative, pre-LN)", cfg, 8, WITH_COMPILE, warmup, rounds))
    emit(eval_case("xl151m cpu (relative, pre-LN)", cfg, 8, seg, context, WITH_COMPILE, warmup, rounds))
    absolute, _ = cpu_model("alrfou", max_len=cfg.tgt_len + context.mem_len)
    emit(train_case("xl151m cpu, absolute positions (alrfou)", absolute, 8, KERNELS, warmup, rounds))
    emit(eval_case("xl151m cpu, absolute positions (alrfou)", absolute, 8, seg, context, KERNELS, warmup, rounds))
    emit(vanilla_case("vanilla, cpu shape (Table 9 cpu profile)", cfg, 512, 4, WITH_COMPILE, warmup, rounds))
    if not args.quick:
        paper = replace(timed_config(SpeedSettings(size="paper")).model, dropout=0.0, dropatt=0.0)
        for attn_len in (800, 3800):
            paper_context = replace(context, mem_len=attn_len, same_length=True, clamp_len=paper.clamp_len)
            emit(eval_case(f"speed table paper shape, XL L={attn_len}", paper, 1, 80, paper_context, KERNELS, warmup, rounds))
        emit(vanilla_case("speed table paper shape, vanilla L=800", paper, 800, 1, KERNELS, 1, 3))
    rows[0]["matmul_peak_gflops_after"] = matmul_peak_gflops(THREADS, repeats=5)
    print(json.dumps({"part": "machine", "matmul_peak_gflops_after": rows[0]["matmul_peak_gflops_after"]}), flush=True)
    Path(args.out).write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    main()
