"""Training tokens/s of the cpu-size Transformer-XL (xl151m) in fp32 against mixed precision, on this machine.

    python benchmarks/precision_train_step.py [PRECISION ...]     # default: fp32 bf16

One training step as `txlab train` takes it (txlab/runs/train.py): the forward pass and the loss under
txlab.precision.autocast, backward through the loss scaler (fp16 only; a pass-through otherwise),
clipping at 0.25, an Adam step. The shape is the cpu preset's: 4 layers, d_model 128, 4x32 heads,
d_inner 512, pre-LN, the vocabulary of synthetic-small-short, batch 8, segments of 128 with a memory of
128. The precisions are timed in alternation, one step each per round, after 3 warm-up rounds (the
first fills the memory), and each figure is the median of $REPEATS rounds (default 15), at $THREADS
torch threads (default 2). The matmul ceiling of each precision (2048^3 in its dtype, same threads) is
measured before and after the rounds. Prints one JSON line: per precision tokens/s, useful GFLOP/s (3 x
the analytic forward FLOPs per token at 256 keys, as `txlab bench model` counts a training step), its
share of the fp32 ceiling and of its own dtype's (the lower of before and after), and the share of the
CPU other processes took while the rounds ran.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from txlab.config import ModelConfig
from txlab.measure.bench import preset_configs, training_workload
from txlab.precision import DTYPES, check_precision
from txlab.timing import cpu_model, cpu_snapshot, interleaved_median_seconds, matmul_peak_gflops, median_seconds, others_cpu

BATCH, SEGMENT = 8, 128


def matmul_gflops(dtype: torch.dtype, threads: int, size: int = 2048) -> float:
    """Achieved GFLOP/s of a size^3 matmul in ``dtype`` (the fp32 one is txlab.timing's ceiling; the others
    are timed 3 times after one warm-up: a CPU without native fp16 takes seconds per product)."""
    if dtype == torch.float32:
        return matmul_peak_gflops(threads, size)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / median_seconds(lambda: a @ b, 1, 3) / 1e9


def main() -> None:
    precisions = sys.argv[1:] or ["fp32", "bf16"]
    threads, repeats = int(os.environ.get("THREADS", "2")), int(os.environ.get("REPEATS", "15"))
    for precision in precisions:
        check_precision(precision, "cpu", "xl")
    torch.set_num_threads(threads)
    fields = preset_configs(["xl151m"], "cpu")["xl151m-cpu"]
    tokens = torch.randint(0, fields["n_token"], (BATCH, SEGMENT + 1), generator=torch.Generator().manual_seed(0))
    measured = sorted({"fp32", *precisions}, key=list(DTYPES).index)
    ceilings = {"before": {p: matmul_gflops(DTYPES[p], threads) for p in measured}}
    steps = [training_workload(ModelConfig(**fields), tokens, p) for p in precisions]
    snapshot = cpu_snapshot()
    seconds = interleaved_median_seconds([work.step for work in steps], 3, repeats)
    others = others_cpu(snapshot)
    ceilings["after"] = {p: matmul_gflops(DTYPES[p], threads) for p in measured}
    ceiling = {p: min(ceilings["before"][p], ceilings["after"][p]) for p in measured}
    rows = {}
    for precision, work, s in zip(precisions, steps, seconds):
        flops = work.flops_per_token
        tok_s = BATCH * SEGMENT / s
        gflops = tok_s * flops / 1e9
        rows[precision] = {"ms_per_step": s * 1e3, "tokens_per_s": tok_s, "gflops": gflops, "of_fp32_ceiling": gflops / ceiling["fp32"],
                           "of_own_ceiling": gflops / ceiling[precision]}
    print(json.dumps({"cpu": cpu_model(), "torch": torch.__version__, "threads": threads, "repeats": repeats, "matmul_2048_gflops": ceilings,
                      "steps": rows, "others_cpu": others}))


if __name__ == "__main__":
    main()
