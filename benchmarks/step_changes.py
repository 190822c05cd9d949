"""The CPU training and cached evaluation steps with each of this round's speed changes undone, against all of them.

    python benchmarks/step_changes.py [--shape tiny --shape small] [--variant NAME ...] [--runs 3] [--rounds 12] [--threads 2] [--out FILE]

The changes (docs/performance.md): the dropout's keep decisions from 16-bit random numbers (`kernels.dropout`), the
fused Adam of `txlab train` (`runs.train.make_optimizer`), the output layer's logits computed in a kept tensor while
training too (`AdaptiveLogSoftmax.logits_scratch`, `softmax.KeptLogits`), and inference attention's scores and
probabilities, and its position scores, in kept tensors (`kernels.kept_tensor`), and the loss's log-softmax taken in place
over the logits in one call (`softmax._log_probs_in`). Each variant is the step as `txlab bench model` times it
(`training_workload`, `evaluation_workload` at a memory of 128), built from the same seed, with one change undone by
putting the code it replaced back for its calls ("before" undoes all of a mode's changes). The variants alternate, one
call each per round (txlab.timing.interleaved_median_seconds), so load slows them alike; the matmul ceiling is
measured in the same run. ``--variant`` keeps only the variants named (and "all"): fewer models side by side in one
process, whose allocations disturb each other less.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import shlex
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from txlab.config import ModelConfig
from txlab.measure import bench
from txlab.measure.bench import BENCH_CONFIGS, evaluation_workload, training_workload
from txlab.models import attention, kernels, softmax
from txlab.models.kernels import rel_shift
from txlab.models.softmax import AdaptiveLogSoftmax
from txlab.timing import interleaved_median_seconds, matmul_peak_gflops


def float_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """The CPU dropout before: one float32 ``torch.rand`` number per entry."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, training=True)
    return x * torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))


def unfused_adam(parameters, t, device) -> torch.optim.Optimizer:
    """`txlab train`'s optimizer before: Adam's default (for-loop) implementation."""
    optimizer_cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    return optimizer_cls(parameters, lr=t.lr, weight_decay=t.weight_decay)


def fresh_logits_with_gradients(self, like):
    """The output layer before: a fresh logits tensor whenever gradients are on."""
    return None if torch.is_grad_enabled() else KEPT_LOGITS_SCRATCH(self, like)


def fresh_position_scores(q, position_keys):
    """The position scores before: a new tensor per call, one product per batch row."""
    out = q.new_empty(*q.shape[:3], position_keys.size(-1))
    for b in range(q.size(0)):
        torch.bmm(q[b], position_keys.to(q.dtype), out=out[b])
    return out


def fresh_scores_attention(q, keys, values, by_distance, mask, scale):
    """Inference attention before: its scores in a fresh tensor and the probabilities in another."""
    batch, n_head, n_query, d_head = q.shape
    n_keys = keys.size(2)
    shifted = rel_shift(by_distance).reshape(batch * n_head, n_query, n_keys)  # [B*H, T, K], a view of by_distance
    scores = torch.baddbmm(shifted, q.reshape(batch * n_head, n_query, d_head), keys.reshape(batch * n_head, n_keys, d_head).transpose(1, 2),
                           alpha=scale)  # [B*H, T, K]
    scores.add_(mask)
    out = torch.bmm(scores.softmax(-1), values.reshape(batch * n_head, n_keys, d_head))  # [B*H, T, Dh]
    return out.view(batch, n_head, n_query, d_head)


def blocked_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """The loss's log-softmax before: 128 rows at a time through a temporary, copied back over the logits."""
    for start in range(0, logits.size(0), 128):
        block = logits[start : start + 128]
        block.copy_(F.log_softmax(block, dim=-1))
    return logits


KEPT_LOGITS_SCRATCH = AdaptiveLogSoftmax.logits_scratch

UNDO: dict[str, list[tuple[object, str, object]]] = {
    "float dropout": [(kernels, "dropout", float_dropout)],
    "fresh logits": [(AdaptiveLogSoftmax, "logits_scratch", fresh_logits_with_gradients)],
    "fresh scores": [(kernels, "attend_relative", fresh_scores_attention), (attention, "matmul_shared_keys", fresh_position_scores)],
    "blocked log-softmax": [(softmax, "_log_probs_in", blocked_log_probs)],
}
"""What each variant puts back while its calls run: (owner, attribute, the code it replaced)."""

BUILD_UNDO: dict[str, list[tuple[object, str, object]]] = {"unfused Adam": [(bench, "make_optimizer", unfused_adam)]}
"""What a variant puts back while its step is built."""

VARIANTS = {"train": ["float dropout", "unfused Adam", "fresh logits", "blocked log-softmax", "before"],
            "eval_mem128": ["fresh scores", "blocked log-softmax"]}
"""The variants of each mode, besides "all" (every change in); "before" undoes all of the mode's changes."""


@contextlib.contextmanager
def undone(patches: list[tuple[object, str, object]]) -> Iterator[None]:
    kept = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in kept:
            setattr(owner, name, value)


def patches_of(mode: str, variant: str, table: dict) -> list:
    names = [v for v in VARIANTS[mode] if v != "before"] if variant == "before" else [variant]
    return [patch for name in names for patch in table.get(name, [])]


def steps(shape: str, mode: str, variants: list[str]) -> dict[str, Callable[[], None]]:
    """The step of "all" and of each of ``variants`` of ``mode`` at ``shape``, each calling txlab's step with its changes undone."""
    cfg = ModelConfig(**{"dropout": 0.0, "dropatt": 0.0, **BENCH_CONFIGS[shape]})
    tokens = torch.randint(0, cfg.n_token, (8, 129), generator=torch.Generator().manual_seed(0))
    made = {}
    for variant in ["all", *variants]:
        torch.manual_seed(0)
        with undone(patches_of(mode, variant, BUILD_UNDO) if variant != "all" else []):
            work = training_workload(replace(cfg, dropout=0.1), tokens) if mode == "train" else evaluation_workload(cfg, tokens, 128, True)

        def step(work=work, patches=patches_of(mode, variant, UNDO) if variant != "all" else []) -> None:
            with undone(patches):
                work.step()

        made[variant] = step
    return made


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", default=None, help="tiny or small (repeatable; default both)")
    parser.add_argument("--variant", action="append", default=None, help=f"a variant to keep (repeatable; default all of them): {', '.join(v for vs in VARIANTS.values() for v in vs)}")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ceiling = matmul_peak_gflops(args.threads)
    chosen = {mode: [v for v in variants if args.variant is None or v in args.variant] for mode, variants in VARIANTS.items()}
    chosen = {mode: variants for mode, variants in chosen.items() if variants}
    results = []
    for shape in args.shape or ["tiny", "small"]:
        for mode, variants in chosen.items():
            made = steps(shape, mode, variants)
            for run in range(args.runs):
                print(f"{shape} {mode} run {run + 1} of {args.runs}", file=sys.stderr, flush=True)
                seconds = dict(zip(made, interleaved_median_seconds(list(made.values()), warmup=3, repeats=args.rounds)))
                results.append({"shape": shape, "mode": mode, "run": run + 1, "ms": {v: s * 1e3 for v, s in seconds.items()}})
    lines = []
    for shape in args.shape or ["tiny", "small"]:
        for mode, variants in chosen.items():
            runs = [r for r in results if r["shape"] == shape and r["mode"] == mode]
            for variant in variants:
                ratios = sorted(r["ms"][variant] / r["ms"]["all"] for r in runs)
                each = " / ".join(f"{r['ms'][variant]:.1f} vs {r['ms']['all']:.1f}" for r in runs)
                lines.append(f"| {shape} | {mode} | {variant} | {each} | {statistics.median(ratios):.3f}x ({ratios[0]:.3f}-{ratios[-1]:.3f}) |")
    text = (f"# The speed changes of 2026-11-29, each undone (CPU)\n\nMade on {datetime.date.today()} by\n\n"
            f"    python benchmarks/step_changes.py {shlex.join(sys.argv[1:] if argv is None else argv)}\n\n{args.threads} threads, fp32 matmul "
            f"ceiling {ceiling:,.1f} GFLOP/s; {args.runs} runs of {args.rounds} interleaved rounds each. A row is one change undone: its step "
            "against the step with every change in (\"all\"), median ms of each run, and the speed-up of \"all\" over it (median over "
            "the runs, range).\n\n| shape | mode | undone | ms, undone vs all, per run | speed-up of all |\n|---|---|---|---|---:|\n"
            + "\n".join(lines) + "\n")
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return results


if __name__ == "__main__":
    main()
