"""The small shape's cached evaluation step with the output layer's logits in the kept tensor, and in a fresh one.

    python benchmarks/logits_scratch.py [--rounds 15] [--threads 2] [--out results/bench/logits-scratch-cpu.md]

One model of `BENCH_CONFIGS["small"]` (random weights; time does not depend on them), batch 8, segments of 128 after a
memory of 128, evaluated as `txlab bench model`'s eval_mem128 row is. The two ways alternate, one step of each per
round (txlab.timing.interleaved_median_seconds), so load slows them alike; "fresh" is the same step with
`AdaptiveLogSoftmax.logits_scratch` returning None, as before the tensor was kept. The matmul ceiling is measured in
the same run.
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import replace
from pathlib import Path

import torch

from txlab.config import ModelConfig
from txlab.measure.bench import BENCH_CONFIGS, _evaluate
from txlab.models.softmax import AdaptiveLogSoftmax
from txlab.timing import interleaved_median_seconds, matmul_peak_gflops


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ceiling = matmul_peak_gflops(args.threads)
    cfg = replace(ModelConfig(), **BENCH_CONFIGS["small"])
    tokens = torch.randint(0, cfg.n_token, (8, 129), generator=torch.Generator().manual_seed(0))
    workload = _evaluate(cfg, tokens, 128, True)
    kept = AdaptiveLogSoftmax.logits_scratch

    def step_with(scratch) -> None:
        AdaptiveLogSoftmax.logits_scratch = scratch
        try:
            workload.step()
        finally:
            AdaptiveLogSoftmax.logits_scratch = kept

    kept_s, fresh_s = interleaved_median_seconds([lambda: step_with(kept), lambda: step_with(lambda self, rows, like: None)],
                                                 warmup=3, repeats=args.rounds)
    seconds = {"kept": kept_s, "fresh": fresh_s}
    result = {"kept_ms": kept_s * 1e3, "fresh_ms": fresh_s * 1e3, "speedup": fresh_s / kept_s, "ceiling_gflops": ceiling}
    text = (f"# The output layer's logits kept in evaluation (small shape, eval_mem128, CPU)\n\nMade on {datetime.date.today()} by\n\n"
            f"    python benchmarks/logits_scratch.py {' '.join(argv or [])}\n\n{args.threads} threads, fp32 matmul ceiling "
            f"{ceiling:,.1f} GFLOP/s, {args.rounds} interleaved rounds, median step:\n\n| logits | ms per step | tokens/s |\n|---|---:|---:|\n"
            f"| fresh tensor | {result['fresh_ms']:.1f} | {1024 / seconds['fresh']:,.0f} |\n| kept tensor | {result['kept_ms']:.1f} | "
            f"{1024 / seconds['kept']:,.0f} |\n\nSpeed-up: {result['speedup']:.2f}x.\n")
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return result


if __name__ == "__main__":
    main()
