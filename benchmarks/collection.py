"""RECL loss collection on the CPU: each exact method's time, token-steps and tokens/s, main table and placebo.

    python benchmarks/collection.py [--quick] [--threads 2] [--repeats 5] [--out results/bench/collection-cpu.md]

For each model and grid, one block of targets is collected five ways: the main table by the window method, one
window per (c, t) and strided (s = c / 4, contexts in [c, 1.25 c): txlab.measure.strided), the placebo losses by
windows (each group of steps of one size by the cheaper exact method, txlab.measure.losses.placebo_block_losses)
and one window per (c, t). The five run in rounds, one call of each per
round (txlab.timing.interleaved_median_seconds), so contention slows them alike; each time is the median of the
rounds. Token-steps are the tokens the model is fed (counted by a hook on its forward), beside the floor of an exact
table: one window per distinct start, each cut to its own longest needed context (:func:`floor_token_steps`, counted
start by start here, apart from the code that reads); the two methods' tables
are compared, and auto's choice (txlab.measure.collection) is printed beside the faster method. The matmul
ceiling (txlab.timing.matmul_peak_gflops) is measured before and after in the same run, and the share of the CPU
other processes took while each row ran (txlab.timing.others_cpu). Random weights: time does not depend on them.

Models: the cpu-size xl151m (its evaluation segment, memory and clamp_len), the cpu-size LSTM, and a Hugging Face
Llama of 4 layers of 128 (transformers, built from a config). Grids: 16:128:16 (dense: the window method wins) and
8,32,128 (sparse: one window per (c, t) reads fewer), on a block of 128 targets, the shape issue 52 measured.
``--quick``: tiny shapes in seconds, what tests/test_collection_bench.py runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from txlab.measure.collection import Collection, cheaper_method, placebo_groups
from txlab.measure.losses import (
    block_losses,
    naive_placebo_losses,
    placebo_block_losses,
    scoring,
)
from txlab.measure.reading import chunk_length, context_lengths
from txlab.measure.strided import strided_block_losses
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.presets import resolve_preset
from txlab.runs.evaluate import evaluation_context
from txlab.runs.zoo import known_vocab_size
from txlab.timing import (
    cpu_model,
    cpu_snapshot,
    interleaved_median_seconds,
    matmul_peak_gflops,
    others_cpu,
)

VARIANTS = ("main window", "main per (c, t)", "main strided", "placebo windows", "placebo per (c, t)")
STRIDE = 0.25
"""The strided row's s, a fraction of c (txlab.measure.strided): its contexts lie in [c, 1.25 c), so its losses are
not the exact methods' and it has no difference column; its time and token-steps are what a stride saves."""


def preset_model(name: str, size: str):
    """(model, tgt_len, context) of a preset's shape with random weights, read as it is evaluated."""
    cfg = resolve_preset(name, size)
    model = build_model(replace(cfg.model, n_token=known_vocab_size(cfg.data.corpus), dropout=0.0, dropatt=0.0)).eval()
    tgt_len, context = evaluation_context(cfg.model, cfg.eval)
    return f"{name}-{size}", model, tgt_len, context


def llama_model(folder: Path, hidden: int, layers: int, vocab: int):
    """A random Hugging Face Llama saved to ``folder`` and loaded as a txlab model, read from a fresh start."""
    import transformers

    from txlab.models import hf

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 32,
                                      num_key_value_heads=hidden // 32, intermediate_size=4 * hidden, max_position_embeddings=4096,
                                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return f"hf-llama-{layers}x{hidden}", hf.load_causal_lm(f"hf:{folder}"), 512, Context(mem_len=0)


def floor_token_steps(grid: tuple[int, ...], n_targets: int, extra: int = 0) -> int:
    """The fewest token-steps that give every (c, t) of ``n_targets`` targets exactly (each context behind ``extra`` far
    tokens): a window from each start s that serves a target, read to the longest c of ``grid`` with 0 <= s + c < n_targets."""
    needs = ([c for c in grid if 0 <= s + c < n_targets] for s in range(-max(grid), n_targets))
    return sum(extra + max(need) for need in needs if need)


def placebo_floor(grid: tuple[int, ...], n_targets: int, max_context: int | None) -> int:
    """The floor of the placebo losses: each group of steps of one size by its floor, a step past a capped model's
    window one window of its capped length per target (txlab.measure.collection.placebo_groups)."""
    groups, alone = placebo_groups(grid, max_context)
    return (sum(floor_token_steps(near, n_targets, extra) for extra, near in groups.items())
            + sum(n_targets * min(grid[j + 1], max_context) for j in alone))


def measure(label: str, model, tgt_len: int, context: Context, grid: tuple[int, ...], n_targets: int, batch_size: int, repeats: int) -> dict:
    """The five variants on one block of ``n_targets`` targets: median seconds, token-steps, largest difference."""
    vocab = model.vocab_size or 256
    tokens = np.random.default_rng(0).integers(0, vocab, 4 * (max(grid) + n_targets)).astype(np.int64)
    start, fed, tables = max(grid), {"n": 0}, {}
    hook = model.register_forward_pre_hook(lambda module, inputs: fed.update(n=fed["n"] + inputs[0].numel()))
    with scoring(model, context):
        chunk_len = chunk_length(model, tgt_len)
        steps, offset = list(zip(grid, grid[1:])), len(tokens) // 2

        def variant(name: str):
            def run():
                fed["n"] = 0
                if name == "main window":
                    tables[name] = block_losses(model, tokens, grid, start, n_targets, chunk_len, batch_size, "window")
                elif name == "main per (c, t)":
                    tables[name] = block_losses(model, tokens, grid, start, n_targets, chunk_len, batch_size, "naive")
                elif name == "main strided":
                    tables[name] = strided_block_losses(model, tokens, grid, STRIDE, start, start + n_targets, chunk_len, batch_size)
                elif name == "placebo windows":
                    tables[name] = placebo_block_losses(model, tokens, grid, start, start + n_targets, chunk_len, batch_size, "window", offset)
                else:
                    tables[name] = naive_placebo_losses(model, tokens, steps, start, start + n_targets, chunk_len, batch_size, offset)
                steps_fed[name] = fed["n"]
            return run

        steps_fed: dict[str, int] = {}
        snapshot = cpu_snapshot()
        seconds = interleaved_median_seconds([variant(v) for v in VARIANTS], warmup=0, repeats=repeats)
        share = others_cpu(snapshot)
    hook.remove()
    collection = Collection("valid", grid, 1, n_targets, placebo=True)
    main_floor = floor_token_steps(tuple(int(c) for c in context_lengths(grid, model.max_context)[0]), n_targets)
    rows = []
    for name, s in zip(VARIANTS, seconds):
        cells = tables[name].size
        floor = None if name == "main strided" else placebo_floor(grid, n_targets, model.max_context) if name.startswith("placebo") else main_floor
        rows.append({"model": label, "params": model.num_parameters(), "grid": list(grid), "targets": n_targets, "batch_size": batch_size, "variant": name,
                     "seconds": s, "token_steps": steps_fed[name], "floor_token_steps": floor, "token_steps_per_s": steps_fed[name] / s,
                     "cells_per_s": cells / s, "others_cpu": share})
    by = {r["variant"]: r for r in rows}
    for r in rows:
        main = by["main window"] if collection.main_method() == "window" else by["main per (c, t)"]
        r["of_main_time"] = r["seconds"] / main["seconds"]
        r["of_main_token_steps"] = r["token_steps"] / main["token_steps"]
    by["main window"]["max_abs_diff"] = by["main per (c, t)"]["max_abs_diff"] = float(np.abs(tables["main window"] - tables["main per (c, t)"]).max())
    by["placebo windows"]["max_abs_diff"] = by["placebo per (c, t)"]["max_abs_diff"] = float(np.abs(tables["placebo windows"] - tables["placebo per (c, t)"]).max())
    by["main strided"]["max_abs_diff"] = None  # other contexts by design: no difference to report
    by["main window"]["auto"] = by["main per (c, t)"]["auto"] = collection.main_method()
    by["main strided"]["auto"] = f"opt-in, s = {STRIDE:g} c"
    groups, alone = placebo_groups(grid, model.max_context)
    by["placebo windows"]["auto"] = by["placebo per (c, t)"]["auto"] = " ".join(
        [f"+{extra}: {cheaper_method(near, n_targets, extra)}" for extra, near in groups.items()] + [f"{len(alone)} capped: naive"] * bool(alone))
    return {"rows": rows}


def markdown(result: dict) -> str:
    head = (f"# RECL loss collection on the CPU: window method against one window per (c, t), main table and placebo\n\n"
            f"Recorded {result['date']} on {result['cpu']} (torch threads: {result['threads']}, torch {result['torch']}), "
            f"median of {result['repeats']} interleaved rounds. Matmul ceiling (fp32 2048^3, "
            f"same threads) {result['ceiling_before']:.0f} GFLOP/s before the rows, {result['ceiling_after']:.0f} after. "
            f"Command:\n\n    {result['command']}\n\n"
            "token-steps: tokens fed to the model, counted; floor: the fewest an exact table needs (one window per start, each "
            "read to its own longest needed context), counted start by start; cells/s: (c, t) losses per second; of main: against the main table by the "
            "method auto picks for that grid (placebo rows: the placebo's cost relative to its table); diff: the largest "
            "difference between the two exact methods' losses (nats; '-' for the strided row, whose contexts differ by design).\n\n"
            "| model | grid | variant | auto picks | seconds | token-steps | of floor | token-steps/s | cells/s | of main (time) | of main (token-steps) | diff | others' CPU |\n"
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = []
    for r in result["rows"]:
        grid = r["grid"]
        grid_s = f"{grid[0]}:{grid[-1]}:{grid[1] - grid[0]}" if len(set(np.diff(grid))) == 1 else ",".join(map(str, grid))
        share = "" if r["others_cpu"] is None else f"{r['others_cpu']:.0%}"
        diff = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}"
        of_floor = "-" if r["floor_token_steps"] is None else f"{r['token_steps'] / r['floor_token_steps']:.3f}x"
        lines.append(f"| {r['model']} | {grid_s} x {r['targets']} | {r['variant']} | {r['auto']} | {r['seconds']:.2f} | {r['token_steps']:,} | {of_floor} | "
                     f"{r['token_steps_per_s']:,.0f} | {r['cells_per_s']:,.0f} | {r['of_main_time']:.2f}x | {r['of_main_token_steps']:.2f}x | "
                     f"{diff} | {share} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, one round: a check that every part runs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="the .md to write (a .json beside it); default: print only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ceiling_before = matmul_peak_gflops(args.threads, size=256 if args.quick else 2048)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            models = [preset_model("xl151m", "tiny"), preset_model("lstm", "tiny")]
            grids, n_targets, batch, repeats = [(4, 8, 12, 16), (2, 4, 16)], 8, 8, 1
        else:
            models = [preset_model("xl151m", "cpu"), preset_model("lstm", "cpu")]
            grids, n_targets, batch, repeats = [tuple(range(16, 129, 16)), (8, 32, 128)], 128, 16, args.repeats
        try:
            models.append(llama_model(Path(tmp) / "llama", 32 if args.quick else 128, 1 if args.quick else 4, 64 if args.quick else 256))
        except ImportError:
            print("transformers is not installed: no Hugging Face row", file=sys.stderr)
        for label, model, tgt_len, context in models:
            for grid in grids:
                rows += measure(label, model, tgt_len, context, grid, n_targets, batch, repeats)["rows"]
                print(json.dumps(rows[-len(VARIANTS):]), file=sys.stderr)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu_model(), "torch": torch.__version__,
              "threads": args.threads, "repeats": repeats,
              "command": "python benchmarks/collection.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "ceiling_before": ceiling_before, "ceiling_after": matmul_peak_gflops(args.threads, size=256 if args.quick else 2048), "rows": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(result))
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
