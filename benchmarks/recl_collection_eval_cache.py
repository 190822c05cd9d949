"""RECL loss collection (the window method) with and without the cached evaluation state, interleaved.

    python benchmarks/recl_collection_eval_cache.py [--quick]

Random weights of the cpu-size xl151m (synthetic-short vocabulary) and of the paper-shape xl151m
(WikiText-103 shape and vocabulary, adaptive softmax), each at its evaluation segment length, memory
and clamp_len. Timing does not depend on the weights. Both paths collect the same table; the script
records the largest difference. Prints one JSON document (rows) and merges it into
results/recl/collection-benchmark-cpu.json under "eval_cache".
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from txlab.measure.losses import block_losses, scoring
from txlab.measure.reading import chunk_length
from txlab.models.build import build_model
from txlab.presets import PAPER_VOCAB, resolve_preset
from txlab.runs.evaluate import evaluation_context
from txlab.runs.zoo import known_vocab_size
from txlab.timing import cpu_snapshot, matmul_peak_gflops, others_cpu

THREADS = int(os.environ.get("THREADS", "2"))


def one(size: str, grid: list[int], n_targets: int, batch_size: int, repeats: int) -> dict:
    cfg = resolve_preset("xl151m", size)
    n_token = known_vocab_size(cfg.data.corpus) if size != "paper" else PAPER_VOCAB["wikitext-103"]
    model = build_model(replace(cfg.model, n_token=n_token, dropout=0.0, dropatt=0.0)).eval()
    tgt_len, context = evaluation_context(cfg.model, cfg.eval)
    tokens = np.random.default_rng(0).integers(0, n_token, max(grid) + n_targets + 1)
    seconds, tables = {True: [], False: []}, {}
    snapshot = cpu_snapshot()
    with scoring(model, context):
        chunk_len = chunk_length(model, tgt_len)
        for _ in range(repeats):
            for cached in (False, True):  # interleaved, so contention hits both alike
                model.set_eval_cache(cached)
                began = time.perf_counter()
                tables[cached] = block_losses(model, tokens, grid, max(grid), n_targets, chunk_len, batch_size, "window")
                seconds[cached].append(time.perf_counter() - began)
    before, after = statistics.median(seconds[False]), statistics.median(seconds[True])
    return {
        "model": f"xl151m-{size} (random weights, vocabulary {n_token})", "params": model.num_parameters(),
        "tgt_len": tgt_len, "mem_len": context.mem_len, "clamp_len": context.clamp_len, "same_length": context.same_length,
        "grid": grid, "targets": n_targets, "batch_size": batch_size, "threads": THREADS, "repeats": repeats,
        "training_path_s": before, "cached_s": after, "speedup": before / after,
        "max_abs_diff": float(np.abs(tables[True] - tables[False]).max()), "others_cpu": others_cpu(snapshot),
    }


def main() -> None:
    quick = "--quick" in sys.argv
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    peak = matmul_peak_gflops(THREADS)
    rows = [
        one("cpu", list(range(64, 513, 64)), 32 if quick else 128, 16, 1 if quick else 3),
        one("paper", [64, 128, 192], 4 if quick else 16, 4, 1),
    ]
    result = {
        "what": "RECL window-method collection with the cached evaluation state against the training path (each chunk "
                "re-projecting the memory), interleaved in one run, random weights",
        "command": f"THREADS={THREADS} python benchmarks/recl_collection_eval_cache.py" + (" --quick" if quick else ""),
        "matmul_peak_gflops": peak, "matmul_peak_gflops_after": matmul_peak_gflops(THREADS), "rows": rows,
    }
    path = Path("results/recl/collection-benchmark-cpu.json")
    doc = json.loads(path.read_text())
    doc["eval_cache"] = result
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
