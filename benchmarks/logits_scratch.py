"""The small shape's cached evaluation step with the output layer's logits in the kept tensor, and in a fresh one.

    python benchmarks/logits_scratch.py [--runs 5] [--rounds 15] [--threads 2] [--out results/bench/logits-scratch-cpu.md]

One model of `BENCH_CONFIGS["small"]` (random weights; time does not depend on them), batch 8, segments of 128 after a
memory of 128, evaluated as `txlab bench model`'s eval_mem128 row is. The two ways alternate, one step of each per
round (txlab.timing.interleaved_median_seconds), so load slows them alike; "fresh" is the same step with
`AdaptiveLogSoftmax.logits_scratch` returning None, as before the tensor was kept. The matmul ceiling is measured in
the same run.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

from txlab.config import ModelConfig
from txlab.measure.bench import BENCH_CONFIGS, evaluation_workload
from txlab.models.softmax import AdaptiveLogSoftmax
from txlab.timing import interleaved_median_seconds, matmul_peak_gflops


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ceiling = matmul_peak_gflops(args.threads)
    cfg = replace(ModelConfig(), **BENCH_CONFIGS["small"])
    tokens = torch.randint(0, cfg.n_token, (8, 129), generator=torch.Generator().manual_seed(0))
    workload = evaluation_workload(cfg, tokens, 128, True)
    kept = AdaptiveLogSoftmax.logits_scratch

    def step_with(scratch) -> None:
        AdaptiveLogSoftmax.logits_scratch = scratch
        try:
            workload.step()
        finally:
            AdaptiveLogSoftmax.logits_scratch = kept

    rows = []
    for _ in range(args.runs):  # the gain moves from run to run (how the fresh tensor's pages come in varies), so several
        kept_s, fresh_s = interleaved_median_seconds([lambda: step_with(kept), lambda: step_with(lambda self, like: None)],
                                                     warmup=3, repeats=args.rounds)
        rows.append((fresh_s, kept_s))
    speedups = sorted(fresh / kept_ for fresh, kept_ in rows)
    result = {"speedups": speedups, "median_speedup": statistics.median(speedups), "ceiling_gflops": ceiling}
    table = "\n".join(f"| {i + 1} | {fresh * 1e3:.1f} | {kept_ * 1e3:.1f} | {fresh / kept_:.2f}x |" for i, (fresh, kept_) in enumerate(rows))
    text = (f"# The output layer's logits kept in evaluation (small shape, eval_mem128, CPU)\n\nMade on {datetime.date.today()} by\n\n"
            f"    python benchmarks/logits_scratch.py {' '.join(sys.argv[1:] if argv is None else argv)}\n\n{args.threads} threads, fp32 matmul ceiling "
            f"{ceiling:,.1f} GFLOP/s; {args.runs} runs of {args.rounds} interleaved rounds each, median step per run:\n\n"
            f"| run | fresh tensor, ms | kept tensor, ms | speed-up |\n|---|---:|---:|---:|\n{table}\n\n"
            f"Median speed-up over the runs: {result['median_speedup']:.2f}x (range {speedups[0]:.2f}-{speedups[-1]:.2f}x).\n")
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return result


if __name__ == "__main__":
    main()
