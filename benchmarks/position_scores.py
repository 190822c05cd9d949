"""Cached evaluation with the position scores computed per head over the whole batch, against per batch row.

    python benchmarks/position_scores.py [--runs 5] [--rounds 15] [--threads 2] [--out results/bench/position-scores-cpu.md]

Without gradients, the relative schemes multiply the queries by the position keys shared by every batch row
(`txlab.models.kernels.matmul_shared_keys`) and sum the relative-shifted result with the content scores and the
mask (`attend_relative`). "per head" is today's code: one product per head over all B*T queries, the shifted
scores and the mask summed in one pass into the scores the content product then adds to. "per row" is the code
before it, kept here as the reference: one product per batch row (T queries), and the content product reading
the shifted view as its beta = 1 input, the mask added after. Before timing a shape, the script checks that both
give the same losses over three segments (within 1e-5 nats; `max_loss_difference` in the record).

Each shape of `BENCH_CONFIGS` (random weights), batch 8, segments of 128 after a memory of 128 and of 512, is
evaluated as `txlab bench model`'s eval_mem<M> row is; the two ways alternate, one step of each per round
(txlab.timing.interleaved_median_seconds), so load slows them alike. The matmul ceiling is measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

import txlab.models.attention as attention
import txlab.models.kernels as kernels
from txlab.config import ModelConfig
from txlab.measure.bench import BENCH_CONFIGS, evaluation_workload
from txlab.models.build import build_model
from txlab.timing import interleaved_median_seconds, matmul_peak_gflops


def per_row_position_scores(q: torch.Tensor, position_keys: torch.Tensor) -> torch.Tensor:
    """The reference: q [B, H, T, Dh] times the position keys [H, Dh, K+1], one batched product per batch row."""
    batch, n_head, n_query, _ = q.shape
    out = q.new_empty(batch, n_head, n_query, position_keys.size(-1))
    position_keys = position_keys.to(q.dtype)
    for b in range(batch):
        torch.bmm(q[b], position_keys, out=out[b])
    return out


def per_row_attend_relative(q, keys, values, by_distance, mask, scale):
    """The reference: the content product reads the shifted view as its beta = 1 input, then the mask is added."""
    batch, n_head, n_query, d_head = q.shape
    n_keys = keys.size(2)
    shifted = kernels.rel_shift(by_distance).reshape(batch * n_head, n_query, n_keys)  # [B*H, T, K]
    scores = torch.baddbmm(shifted, q.reshape(batch * n_head, n_query, d_head), keys.reshape(batch * n_head, n_keys, d_head).transpose(1, 2),
                           alpha=scale)  # [B*H, T, K]
    scores.add_(mask)
    out = torch.bmm(scores.softmax(-1), values.reshape(batch * n_head, n_keys, d_head))  # [B*H, T, Dh]
    return out.view(batch, n_head, n_query, d_head)


class PerRow:
    """Within it, the model runs the reference (per batch row) code."""

    def __enter__(self):
        self.kept = attention.matmul_shared_keys, kernels.attend_relative
        attention.matmul_shared_keys, kernels.attend_relative = per_row_position_scores, per_row_attend_relative

    def __exit__(self, *exc):
        attention.matmul_shared_keys, kernels.attend_relative = self.kept


def loss_difference(cfg: ModelConfig, tokens: torch.Tensor, memory: int, segments: int = 3) -> float:
    """The largest difference between the two ways' per-token losses over ``segments`` segments of ``tokens``
    [B, seg_len + 1] read in turn (the state carried), one model of ``cfg`` with memory ``memory``."""
    torch.manual_seed(0)
    model = build_model(replace(cfg, tgt_len=tokens.size(1) - 1, mem_len=memory)).eval()

    def losses() -> torch.Tensor:
        with torch.inference_mode():
            state, out = model.init_state(tokens.size(0)), []
            for _ in range(segments):
                result = model(tokens[:, :-1], state, tokens[:, 1:])
                state = result.state
                out.append(result.nll)
            return torch.cat(out)

    ours = losses()
    with PerRow():
        theirs = losses()
    return (ours - theirs).abs().max().item()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=list(BENCH_CONFIGS))
    parser.add_argument("--memories", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ceiling = matmul_peak_gflops(args.threads)
    rows, result = [], {"ceiling_gflops": ceiling, "rows": []}
    for shape in args.shapes:
        cfg = replace(ModelConfig(), **BENCH_CONFIGS[shape])
        tokens = torch.randint(0, cfg.n_token, (8, 129), generator=torch.Generator().manual_seed(0))
        for memory in args.memories:
            difference = loss_difference(cfg, tokens, memory)
            if difference > 1e-5:
                raise SystemExit(f"{shape}, memory {memory}: the two ways' losses differ by {difference:.2e} nats")
            torch.manual_seed(0)
            workload = evaluation_workload(cfg, tokens, memory, True)

            def per_row() -> None:
                with PerRow():
                    workload.step()

            times = [interleaved_median_seconds([workload.step, per_row], warmup=3, repeats=args.rounds) for _ in range(args.runs)]
            speedups = sorted(old / new for new, old in times)
            record = {"shape": shape, "memory": memory, "per_head_ms": [new * 1e3 for new, _ in times],
                      "per_row_ms": [old * 1e3 for _, old in times], "speedups": speedups, "median_speedup": statistics.median(speedups),
                      "max_loss_difference": difference}
            result["rows"].append(record)
            rows.append(f"| {shape} | {memory} | {statistics.median(record['per_row_ms']):.1f} | {statistics.median(record['per_head_ms']):.1f} | "
                        f"{' / '.join(f'{s:.3f}x' for s in speedups)} | {record['median_speedup']:.3f}x |")
    text = (f"# Position scores per head, against per batch row (cached evaluation, CPU)\n\nMade on {datetime.date.today()} by\n\n"
            f"    python benchmarks/position_scores.py {' '.join(sys.argv[1:] if argv is None else argv)}\n\n{args.threads} threads, fp32 matmul "
            f"ceiling {ceiling:,.1f} GFLOP/s; {args.runs} runs of {args.rounds} interleaved rounds each. Step times are the medians over the "
            "runs of each run's median; the speedups are per run (per row over per head), sorted, then their median.\n\n"
            "| shape | memory | per row, ms | per head, ms | speedup per run | median |\n|---|---|---:|---:|---|---:|\n" + "\n".join(rows) + "\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    return result


if __name__ == "__main__":
    main()
