"""Time Transformer-XL evaluation segments at the speed table's paper shape, with whatever txlab is on the path.

    python benchmarks/xl_eval_segment.py LABEL [ATTN_LEN ...]

Used to compare txlab before and after the cached evaluation state side by side: run it alternately
with PYTHONPATH pointing at each checkout (results/bench/eval-cache-cpu.md gives the loop). Prints
one JSON line: the matmul ceiling measured just before, and per attention length the median
seconds per 80-token segment (batch 1, memory L, same_length, $THREADS threads, default 2) after the memory is full
and 2 warm-up segments, tokens/s, useful GFLOP/s (flops_per_token(L)) and its share of the ceiling.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

from txlab.measure.speed import SpeedSettings, TimedModels, xl_context, xl_fill, xl_segment
from txlab.timing import cpu_snapshot, matmul_peak_gflops, others_cpu


def main() -> None:
    label, lens = sys.argv[1], [int(n) for n in sys.argv[2:]] or [800, 3800]
    threads = int(os.environ.get("THREADS", "2"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    models = TimedModels(SpeedSettings(size="paper"), torch.device("cpu"))
    model, tgt_len = models.xl, models.tgt_len
    rows = []
    for attn_len in lens:
        peak = matmul_peak_gflops(threads, repeats=3)
        tokens = torch.randint(0, 204, (1, attn_len + 8 * tgt_len + 1), generator=torch.Generator().manual_seed(attn_len))
        snapshot = cpu_snapshot()
        times = []
        with torch.inference_mode():
            model.set_context(xl_context(model, attn_len))
            _, state = xl_fill(model, tokens, attn_len)
            for start in range(attn_len, attn_len + 7 * tgt_len, tgt_len):
                began = time.perf_counter()
                _, state = xl_segment(model, tokens, state, start, tgt_len)
                times.append(time.perf_counter() - began)
        seconds = statistics.median(times[2:])
        tok_s = tgt_len / seconds
        gflops = tok_s * model.counts().flops_per_token(attn_len) / 1e9
        rows.append({"label": label, "threads": threads, "attn_len": attn_len, "ms_per_segment": seconds * 1e3, "tokens_per_s": tok_s,
                     "gflops": gflops, "matmul_peak_gflops": peak, "of_ceiling": gflops / peak, "others_cpu": others_cpu(snapshot)})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
