"""The GPU benchmark: paper-scale numbers a session with a GPU measures first (a benchmark, not a test).

    python benchmarks/gpu.py --text FILE [--out DIR] [--only SECTION ...]     # on a GPU: about 7 minutes
    python benchmarks/gpu.py --tiny --text FILE --out /tmp/b                  # the same on CPU, tiny shapes (seconds)

Sections, each written to the results file as soon as it is done (a run cut short keeps what it finished):

- ``ceiling``: the card's matmul ceiling, an N^3 product in fp32 (TF32 off), TF32 and bf16, median of 10 after 3
  warm-ups. Every rate below is also given as a share of it.
- ``train``: training tokens/s of the paper's WikiText-103 base model (xl151m at paper size: 16 layers, d_model 410,
  adaptive softmax over 267,735 words, batch 60, segments of 150 with a memory of 150), one step as `txlab train`
  takes it (forward and loss under txlab.precision.autocast, backward, clipping, Adam), fp32 and bf16 in
  alternation, median of 10 rounds after 3. GFLOP/s counts 3 x the model's forward FLOPs per token at 300 keys.
- ``recl``: loss collection of a GPT-2-124M-shape Hugging Face model (random weights, a byte-level BPE tokenizer
  trained here on ``--text``) in bf16 through `txlab.context_losses` on the paper's grid 100..1000 and 10 blocks of
  500 targets, without and with placebo losses; achieved TFLOP/s from the token-steps actually read (a hook
  counts every window) at the mean keys of a window. Then strided collection (txlab.measure.strided) of the same
  shape with a position table long enough, at contexts 8k..32k doubling, s = 1,024: one block of 1,024 targets, its
  seconds and token-steps beside what the exact window method would read.
- ``recl-llama``: the same main-table collection of a Llama of about 1B parameters (TinyLlama-1.1B's shape: 22 layers
  of 2,048, 32 heads sharing 4 key-value heads, SwiGLU 5,632; random weights in bf16, the same tokenizer), on 4
  blocks: where a user with one GPU spends their time, and the share of the bf16 ceiling a large model's collection
  reaches.
- ``profile``: where the collection's time goes, for both collected shapes: one block of the main table at several
  batch sizes and with the host waiting for the GPU after every forward, timed in alternation (2 rounds after one of
  warm-up); and a
  torch.profiler summary of one block as ``recl`` reads it (the GPU's busy share of the wall time, the top kernels and
  the top host operations).
- ``compile``: what compiling the model's layers gives the collection (txlab.models.compiled; ``torch.compile`` of each
  layer, dynamic shapes), for both collected shapes: one block of the main table at the largest profiled batch, the
  layers as written (``compile=off``) and compiled (``compile=on``) in alternation (2 rounds after one of warm-up,
  which compiles), and the warm-up's seconds. Every other section scores as ``txlab.load_model`` loads by default
  (``compile=auto``: compiled on a CUDA GPU, as written on the CPU); the results record which.
- ``speed``: Table 9 at the paper's shape with today's baselines (`txlab speed --study studies/table9.yaml --profile
  paper`, shorter budgets), its table and figure written beside the results.

Writes ``<out>/gpu-<date>-<device>.json`` and ``.md`` (default out: results/bench). With ``--tiny`` every shape is
small enough for a CPU, so the script is checked in the test suite; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import torch

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("ceiling", "train", "recl", "recl-llama", "profile", "compile", "speed")
PLACEHOLDERS = {"--text": "TEXT", "--out": "OUT"}
"""How a results file's commands name the paths given: a record names no folder of the machine that made it, so that
it reads the same from any clone (tests/test_records.py)."""


class Shapes(NamedTuple):
    """Every size the sections use: the paper's on a GPU, a few seconds' worth with --tiny."""

    matmul: int
    """N of the N^3 ceiling product."""
    train_size: str
    """xl151m preset size timed by `train`."""
    train_batch: int
    train_segment: int
    """Segment length; the memory is as long."""
    rounds: int
    """Timed rounds (after 3 warm-ups) of every interleaved measurement."""
    gpt2: dict
    """transformers.GPT2Config fields of the collected model."""
    llama: dict
    """transformers.LlamaConfig fields of the large collected model (``recl-llama``)."""
    llama_blocks: int
    """Blocks of ``block_len`` targets the large model collects."""
    grid: tuple[int, ...]
    blocks: int
    block_len: int
    batch: int
    """Windows per forward call in the collection."""
    speed: list[str]
    """Arguments of `txlab speed` after the study and profile."""
    strided_grid: tuple[int, ...]
    """Contexts of the strided collection (its model's position table holds the longest plus the stride)."""
    stride: int
    strided_block_len: int
    profile_batches: tuple[int, ...]
    """Batch sizes (windows per forward call) the ``profile`` section times, one block each."""


PAPER = Shapes(
    matmul=8192, train_size="paper", train_batch=60, train_segment=150, rounds=10,
    gpt2={}, grid=tuple(range(100, 1001, 100)), blocks=10, block_len=500, batch=32,
    llama={"hidden_size": 2048, "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
           "intermediate_size": 5632, "max_position_embeddings": 2048}, llama_blocks=4,
    speed=["--profile", "paper", "--set", "budget_s=3", "--set", "repeats=10"],
    strided_grid=(8192, 16384, 32768), stride=1024, strided_block_len=1024, profile_batches=(32, 128, 256),
)
TINY = Shapes(
    matmul=256, train_size="tiny", train_batch=2, train_segment=16, rounds=2,
    gpt2={"n_positions": 128, "n_embd": 32, "n_layer": 2, "n_head": 2}, grid=(8, 16, 24, 32), blocks=2, block_len=16, batch=4,
    llama={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64,
           "max_position_embeddings": 128}, llama_blocks=1,
    speed=["--profile", "tiny", "--attn-len", "32", "--set", "budget_s=0.2", "--set", "repeats=2", "--set", "warmup=1"],
    strided_grid=(32, 64, 128), stride=16, strided_block_len=32, profile_batches=(2, 4),
)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved_medians(steps: Sequence[Callable[[], object]], device: str, warmup: int, rounds: int) -> list[float]:
    """Median seconds of each step, timed in alternation (one call of each per round) so drifts hit all alike."""
    seconds: list[list[float]] = [[] for _ in steps]
    for round_ in range(warmup + rounds):
        for i, step in enumerate(steps):
            synchronize(device)
            began = time.perf_counter()
            step()
            synchronize(device)
            if round_ >= warmup:
                seconds[i].append(time.perf_counter() - began)
    return [statistics.median(s) for s in seconds]


def ceiling(shapes: Shapes, device: str) -> dict:
    """TFLOP/s of an N^3 matmul in fp32 (TF32 off), TF32 and bf16."""
    n = shapes.matmul
    out = {"n": n}
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False)):
        if name == "tf32" and not device.startswith("cuda"):
            continue
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            [s] = interleaved_medians([lambda: a @ b], device, 3, 10)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        out[f"{name}_tflops"] = 2 * n**3 / s / 1e12
    return out


def train(shapes: Shapes, device: str, ceilings: dict) -> dict:
    """Training tokens/s of xl151m in fp32 and bf16, interleaved."""
    from txlab.config import ModelConfig
    from txlab.measure.bench import preset_configs, training_workload

    fields = preset_configs(["xl151m"], shapes.train_size)[f"xl151m-{shapes.train_size}"]
    batch, segment = shapes.train_batch, shapes.train_segment
    tokens = torch.randint(0, fields["n_token"], (batch, segment + 1), generator=torch.Generator().manual_seed(0)).to(device)

    precisions = ["fp32", "bf16"]
    steps = [training_workload(ModelConfig(**fields), tokens, p) for p in precisions]
    seconds = interleaved_medians([work.step for work in steps], device, 3, shapes.rounds)
    rows = {}
    for precision, work, s in zip(precisions, steps, seconds):
        tok_s = batch * segment / s
        tflops = tok_s * work.flops_per_token / 1e12
        rows[precision] = {"ms_per_step": s * 1e3, "tokens_per_s": tok_s, "tflops": tflops,
                           "of_own_ceiling": tflops / ceilings.get(f"{precision}_tflops", float("nan"))}
    return {"model": f"xl151m-{shapes.train_size}", "params": steps[0].params, "batch": batch, "segment": segment, "memory": segment, "steps": rows}


def model_folder(folder: Path, text: str, config) -> Path:
    """A random-weight Hugging Face model of ``config`` (a transformers config; its vocabulary set here) with a
    byte-level BPE tokenizer of 8,000 symbols trained on ``text``, saved in bf16 where the config asks it."""
    import tokenizers
    import transformers

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=8000, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    config.vocab_size = tok.get_vocab_size()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=getattr(config, "torch_dtype", None) or torch.float32)
    model.save_pretrained(folder)
    return folder


def gpt2_folder(folder: Path, text: str, fields: dict) -> Path:
    """A random-weight GPT-2 (124M shape unless ``fields`` say otherwise) with its tokenizer (:func:`model_folder`)."""
    import transformers

    return model_folder(folder, text, transformers.GPT2Config(**fields))


def timed_table(scored, tokens, shapes: Shapes, blocks: int, batch: int, device: str, placebo: bool = False) -> dict:
    """One timed collection of ``blocks`` blocks on the shapes' grid: its seconds, the token-steps it read (counted by a
    hook on the model's forward) and its FLOPs (the reading's at half each window's keys, and the scored rows' output)."""
    import txlab

    model = scored.model
    counted = {"token_steps": 0, "flops": 0.0}
    counts = model.counts()

    def count(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        b, n = ids.shape  # [B, L] one window per stream, read from a fresh start
        counted["token_steps"] += b * n
        counted["flops"] += b * n * counts.reading_flops_per_token(n // 2)  # a query attends half the window on average

    hook = model.causal_lm.base_model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        synchronize(device)
        began = time.perf_counter()
        table = txlab.context_losses(scored, tokens, shapes.grid, blocks, shapes.block_len, placebo=placebo, batch_size=batch)
        synchronize(device)
        seconds = time.perf_counter() - began
    finally:
        hook.remove()
    n_scored = table.losses.size + (table.placebo.size if table.placebo is not None else 0)
    return {"seconds": seconds, "token_steps": counted["token_steps"], "flops": counted["flops"] + n_scored * counts.output_flops_per_token()}


def rates(row: dict, ceilings: dict) -> dict:
    """A timed table's figures with its token-steps per second, TFLOP/s and share of the bf16 ceiling."""
    tflops = row["flops"] / row["seconds"] / 1e12
    return {"seconds": row["seconds"], "token_steps": row["token_steps"], "token_steps_per_s": row["token_steps"] / row["seconds"],
            "tflops": tflops, "of_bf16_ceiling": tflops / ceilings.get("bf16_tflops", float("nan"))}


def collect(scored, tokens, shapes: Shapes, blocks: int, device: str, ceilings: dict, kinds: Sequence[str]) -> dict:
    """Seconds, token-steps and the share of the bf16 ceiling of each collection in ``kinds`` ('main', 'main_and_placebo')
    of ``blocks`` blocks on the shapes' grid, after a warm-up (kernels, allocator)."""
    import txlab

    txlab.context_losses(scored, tokens, shapes.grid[:2], 1, shapes.block_len, batch_size=shapes.batch)
    return {name: rates(timed_table(scored, tokens, shapes, blocks, shapes.batch, device, placebo=name == "main_and_placebo"), ceilings)
            for name in kinds}


def random_model(kind: str, shapes: Shapes, device: str, text_file: Path, **fields):
    """The scored model of a random-weight ``kind`` ('gpt2' at the shapes' GPT-2 fields and ``fields``, or 'llama' at the
    shapes' Llama), loaded in bf16, and every token of the text in its tokenizer."""
    import transformers

    import txlab

    with tempfile.TemporaryDirectory() as tmp:
        text = text_file.read_text(encoding="utf-8")
        if kind == "gpt2":
            folder = gpt2_folder(Path(tmp) / kind, text, {**shapes.gpt2, **fields})
        else:
            folder = model_folder(Path(tmp) / kind, text, transformers.LlamaConfig(**shapes.llama, torch_dtype=torch.bfloat16))
        scored = txlab.load_model(f"hf:{folder}", device=device, precision="bf16")  # the model ready to score, and its module
        tokens = txlab.encode_text(text_file, scored, split=None)  # every token: the valid split alone is too short
    return scored, tokens


def layers_compiled(scored) -> bool:
    """Whether the collection ran the model's layers compiled (its ``compile`` setting on this device)."""
    from txlab.models.compiled import compiles

    return compiles(scored.model, scored.compile)


def recl(shapes: Shapes, device: str, ceilings: dict, text_file: Path) -> dict:
    """Loss collection of a GPT-2-124M-shape model in bf16, main table and placebo, with the token-steps it read."""
    scored, tokens = random_model("gpt2", shapes, device, text_file)
    rows = collect(scored, tokens, shapes, shapes.blocks, device, ceilings, ("main", "main_and_placebo"))
    rows["placebo_over_main_seconds"] = (rows["main_and_placebo"]["seconds"] - rows["main"]["seconds"]) / rows["main"]["seconds"]
    params = sum(p.numel() for p in scored.model.causal_lm.parameters())
    return {"model": "gpt2 (random weights)", "params": params, "precision": "bf16", "compiled": layers_compiled(scored), "tokens": len(tokens),
            "grid": list(shapes.grid),
            "targets": shapes.blocks * shapes.block_len, "batch": shapes.batch, "rows": rows,
            "strided": strided(shapes, device, ceilings, text_file)}


def recl_llama(shapes: Shapes, device: str, ceilings: dict, text_file: Path) -> dict:
    """Loss collection of a Llama of about 1B parameters (random weights, bf16): the main table, with its token-steps."""
    scored, tokens = random_model("llama", shapes, device, text_file)
    rows = collect(scored, tokens, shapes, shapes.llama_blocks, device, ceilings, ("main",))
    params = sum(p.numel() for p in scored.model.causal_lm.parameters())
    return {"model": "llama (random weights)", "params": params, "precision": "bf16", "compiled": layers_compiled(scored), "tokens": len(tokens),
            "grid": list(shapes.grid),
            "targets": shapes.llama_blocks * shapes.block_len, "batch": shapes.batch, "rows": rows}


def strided(shapes: Shapes, device: str, ceilings: dict, text_file: Path) -> dict:
    """Strided collection (txlab.context_losses with a stride) of the GPT-2 shape at long contexts in bf16: one block,
    seconds and the token-steps read (txlab.measure.collection.strided_cost) beside the exact window method's."""
    import numpy as np

    import txlab
    from txlab.measure.collection import Collection
    from txlab.measure.losses import scoring
    from txlab.measure.reading import prefix_change

    grid, s, block_len = shapes.strided_grid, shapes.stride, shapes.strided_block_len
    # learned positions: the table must hold the longest window, c_max + s - 1
    scored, tokens = random_model("gpt2", shapes, device, text_file, n_positions=grid[-1] + s)
    model = scored.model
    if len(tokens) < grid[-1] + block_len:  # a long context needs a long stream: the text again, end to end
        tokens = np.tile(tokens, -(-(grid[-1] + block_len) // len(tokens)))
    collection = Collection("valid", grid, 1, block_len, stride=s)
    counts = model.counts()
    keys = (grid[-1] + s) // 2
    txlab.context_losses(scored, tokens, grid[:2], 1, s, batch_size=1, stride=s)  # warm-up
    synchronize(device)
    began = time.perf_counter()
    table = txlab.context_losses(scored, tokens, grid, 1, block_len, batch_size=1, stride=s)
    synchronize(device)
    seconds = time.perf_counter() - began
    with scoring(model, model.context, "bf16"):  # what the stride's probe saw at the longest window (bf16 rounds)
        change, tolerance = prefix_change(model, tokens, grid[-1] + s - 1, None)
    steps = collection.token_steps()
    flops = steps * counts.reading_flops_per_token(keys) + table.losses.size * counts.output_flops_per_token()
    return {"grid": list(grid), "stride": s, "targets": block_len, "seconds": seconds, "token_steps": steps,
            "exact_window_token_steps": Collection("valid", grid, 1, block_len, method="window").token_steps(),
            "prefix_change": change, "prefix_tolerance": tolerance,
            "tflops": flops / seconds / 1e12, "of_bf16_ceiling": flops / seconds / 1e12 / ceilings.get("bf16_tflops", float("nan"))}


@contextmanager
def synced_forwards(model, device: str) -> Iterator[None]:
    """The host waits for the device after every forward call, as the collection did before it kept a table's losses
    on the device (one wait per table) and checked ids there: what those waits cost."""
    hook = model.causal_lm.base_model.register_forward_hook(lambda *_: synchronize(device))
    try:
        yield
    finally:
        hook.remove()


def each_shape(shapes: Shapes, device: str, text_file: Path, measure: Callable[..., dict]) -> dict:
    """``measure(scored, tokens)`` of the GPT-2 and the Llama shapes, one model loaded at a time."""
    out = {}
    for kind in ("gpt2", "llama"):
        scored, tokens = random_model(kind, shapes, device, text_file)
        out[kind] = measure(scored, tokens)
        del scored
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return out


def alternating_blocks(variants: dict[str, Callable[[], dict]]) -> tuple[dict[str, float], dict[str, list[dict]]]:
    """Each variant's one-block reading (a :func:`rates` row) in alternation: a round of warm-up (on an H200 a first
    round was slower for every variant), then 2 rounds kept. Returns the warm-up's seconds and the kept rows."""
    warmup: dict[str, float] = {}
    rounds: dict[str, list[dict]] = {name: [] for name in variants}
    for round_ in range(3):
        for name, read in variants.items():
            row = read()
            if round_:
                rounds[name].append(row)
            else:
                warmup[name] = row["seconds"]
    return warmup, rounds


def profile(shapes: Shapes, device: str, ceilings: dict, text_file: Path) -> dict:
    """Where the collection's time goes, for the GPT-2 and the Llama shapes (:func:`profile_model`)."""
    return each_shape(shapes, device, text_file, lambda scored, tokens: profile_model(scored, tokens, shapes, device, ceilings))


def profile_model(scored, tokens, shapes: Shapes, device: str, ceilings: dict) -> dict:
    """One block of the main table per variant (batch sizes; a sync after every forward), in alternation
    (:func:`alternating_blocks`); then torch.profiler over one block as ``recl`` reads it. (Eager attention, timed on
    2026-11-29 at 1.9x and 5.9x sdpa's time, is no longer a variant.)"""
    model = scored.model

    def block(batch: int, context: Callable = nullcontext) -> Callable[[], dict]:
        def read() -> dict:
            with context():
                return rates(timed_table(scored, tokens, shapes, 1, batch, device), ceilings)
        return read

    variants = {f"batch {b}": block(b) for b in shapes.profile_batches}
    variants[f"batch {shapes.batch}, a sync per forward"] = block(shapes.batch, lambda: synced_forwards(model, device))
    _, rounds = alternating_blocks(variants)
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.startswith("cuda") else [])]
    with torch_profile(activities=activities) as prof:
        row = timed_table(scored, tokens, shapes, 1, shapes.batch, device)
    events = prof.key_averages()
    kernels = sorted((e for e in events if e.device_type == DeviceType.CUDA), key=lambda e: -e.self_device_time_total)
    host = sorted((e for e in events if e.device_type == DeviceType.CPU), key=lambda e: -e.self_cpu_time_total)
    busy_s = sum(e.self_device_time_total for e in kernels) / 1e6
    return {"attention": model.causal_lm.config._attn_implementation, "compiled": layers_compiled(scored), "rounds": rounds,
            "profiled": {"seconds": row["seconds"], "gpu_busy_s": busy_s, "gpu_busy_share": busy_s / row["seconds"],
                         "kernels": [{"name": e.key[:120], "calls": e.count, "ms": e.self_device_time_total / 1e3} for e in kernels[:15]],
                         "host": [{"name": e.key[:120], "calls": e.count, "ms": e.self_cpu_time_total / 1e3} for e in host[:15]]}}


def compile_section(shapes: Shapes, device: str, ceilings: dict, text_file: Path) -> dict:
    """One block of the main table at the largest profiled batch, the layers as written (``compile=off``) and compiled
    (``compile=on``, txlab.models.compiled) in alternation, 2 rounds after one of warm-up (which compiles), for both
    collected shapes; with the graphs torch compiled, and how far the compiled losses of that block lie from those as
    written (nats: the largest difference and the mean one)."""
    import numpy as np
    import torch._dynamo.utils

    import txlab

    batch = max(shapes.profile_batches)

    def measure(scored, tokens) -> dict:
        graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        variants = {"as written": replace(scored, compile="off"), "compiled": replace(scored, compile="on")}
        warmup, rounds = alternating_blocks({name: lambda v=variant: rates(timed_table(v, tokens, shapes, 1, batch, device), ceilings)
                                             for name, variant in variants.items()})
        tables = [txlab.context_losses(variant, tokens, shapes.grid, 1, shapes.block_len, batch_size=batch).losses for variant in variants.values()]
        apart = np.abs(tables[1] - tables[0])  # [G, T] nats
        return {"batch": batch, "warmup_seconds": warmup, "rounds": rounds,
                "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before,
                "losses_apart": {"max": float(apart.max()), "mean": float(apart.mean())}}

    return each_shape(shapes, device, text_file, measure)


def speed(shapes: Shapes, device: str, out: Path) -> dict:
    """`txlab speed` at the study's profile, its JSON summary, table and figure in ``out``."""
    command = [sys.executable, "-m", "txlab", "speed", "--study", str(ROOT / "studies" / "table9.yaml"), *shapes.speed,
               "--device", device, "--name", "table9-gpu", "--out-dir", str(out), "--fig-dir", str(out), "--json", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"txlab speed exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    shown = " ".join(command[1:]).replace(str(out), PLACEHOLDERS["--out"]).replace(f"{ROOT}/", "")
    return {"command": shown, "summary": json.loads(done.stdout.strip().splitlines()[-1])}


def markdown(results: dict) -> str:
    """The results file's human half: one line per figure."""
    lines = [f"# GPU benchmark, {results['date']}", "", f"Device: {results['device_name']} ({results['device']}); torch {results['torch']}.",
             f"Command: `{results['command']}`", ""]
    c = results.get("ceiling")
    if isinstance(c, dict) and "error" not in c:
        lines.append("Matmul ceiling (N=%d): " % c["n"] + ", ".join(f"{k[:-7]} {v:,.1f} TFLOP/s" for k, v in c.items() if k.endswith("_tflops")))
    t = results.get("train")
    if isinstance(t, dict) and "error" not in t:
        for precision, row in t["steps"].items():
            lines.append(f"Training {t['model']} ({t['params'] / 1e6:.0f}M, batch {t['batch']}, segment {t['segment']}, memory {t['memory']}), "
                         f"{precision}: {row['tokens_per_s']:,.0f} tokens/s, {row['tflops']:.1f} TFLOP/s ({row['of_own_ceiling']:.0%} of its ceiling)")
    r = results.get("recl")
    if isinstance(r, dict) and "error" not in r:
        lines += collection_lines(r)
        lines.append(f"Placebo costs {r['rows']['placebo_over_main_seconds']:.2f}x the main table's time.")
        st = r["strided"]
        lines.append(f"Strided collection, s = {st['stride']}, contexts {st['grid'][0]}..{st['grid'][-1]} (each in [c, c + s)), {st['targets']:,} "
                     f"targets: {st['seconds']:.1f} s, {st['token_steps']:,} token-steps (the exact window method would read "
                     f"{st['exact_window_token_steps']:,}), {st['tflops']:.1f} TFLOP/s ({st['of_bf16_ceiling']:.0%} of bf16); cutting the longest window "
                     f"by a token moved a hidden state by {st['prefix_change']:.2g} of its norm (prefix-causal up to {st['prefix_tolerance']:.2g})")
    big = results.get("recl-llama")
    if isinstance(big, dict) and "error" not in big:
        lines += collection_lines(big)
    prof = results.get("profile")
    if isinstance(prof, dict) and "error" not in prof:
        lines += profile_lines(prof)
    comp = results.get("compile")
    if isinstance(comp, dict) and "error" not in comp:
        for kind, r in comp.items():
            if isinstance(r, dict):
                lines += ["", f"Compiled layers, {kind}, one block of the main table at batch {r['batch']}, 2 rounds "
                          f"(warm-up: as written {r['warmup_seconds']['as written']:.1f} s, compiled {r['warmup_seconds']['compiled']:.1f} s, "
                          f"{r['graphs']} graphs compiled):"]
                lines += [f"- {name}: " + ", ".join(f"{row['seconds']:.2f} s ({row['of_bf16_ceiling']:.0%} of bf16)" for row in rows)
                          for name, rows in r["rounds"].items()]
                if "losses_apart" in r:
                    lines.append(f"- the block's losses compiled and as written: {r['losses_apart']['max']:.2g} nats apart at most, "
                                 f"{r['losses_apart']['mean']:.2g} on average")
    s = results.get("speed")
    if isinstance(s, dict) and "error" not in s:
        lines.append(f"Table 9: see table9-gpu.md beside this file (`{s['command']}`).")
    for name in SECTIONS:
        if isinstance(results.get(name), dict) and "error" in results[name]:
            lines.append(f"{name}: failed: {results[name]['error']}")
    return "\n".join(lines) + "\n"


def collection_lines(r: dict) -> list[str]:
    compiled = ", layers compiled" if r.get("compiled") else ""
    return [f"Collection, {r['model']} {r['params'] / 1e6:,.0f}M bf16{compiled}, grid {r['grid'][0]}..{r['grid'][-1]}, {r['targets']:,} targets, {name}: "
            f"{row['seconds']:.1f} s, {row['token_steps']:,} token-steps, {row['tflops']:.1f} TFLOP/s ({row['of_bf16_ceiling']:.0%} of bf16)"
            for name, row in r["rows"].items() if isinstance(row, dict)]


def profile_lines(prof: dict) -> list[str]:
    lines = []
    for kind, r in prof.items():
        if not isinstance(r, dict):
            continue
        lines += ["", f"Profile, {kind} (attention as loaded: {r['attention']}{', layers compiled' if r.get('compiled') else ''}), one block of the main table per variant, 2 rounds:"]
        lines += [f"- {name}: " + ", ".join(f"{row['seconds']:.2f} s ({row['of_bf16_ceiling']:.0%} of bf16)" for row in rows)
                  for name, rows in r["rounds"].items()]
        p = r["profiled"]
        lines.append(f"- under torch.profiler: {p['seconds']:.2f} s, the GPU busy {p['gpu_busy_s']:.2f} s ({p['gpu_busy_share']:.0%})")
        lines += [f"  - kernel {k['name']}: {k['ms']:.1f} ms in {k['calls']} calls" for k in p["kernels"][:8]]
        lines += [f"  - host {h['name']}: {h['ms']:.1f} ms in {h['calls']} calls" for h in p["host"][:8]]
    return lines


def recorded_command(argv: Sequence[str]) -> str:
    """The command as the results file records it: the paths given to ``--text`` and ``--out`` as placeholders."""
    words, flag = ["python", "benchmarks/gpu.py"], None
    for word in argv:
        name, equals, _ = word.partition("=")
        words.append(PLACEHOLDERS[flag] if flag else f"{name}={PLACEHOLDERS[name]}" if equals and name in PLACEHOLDERS else word)
        flag = word if word in PLACEHOLDERS else None
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, for a CPU (checks the script, measures nothing)")
    parser.add_argument("--text", type=Path, required=True, help="a UTF-8 text file to train the tokenizer on and collect losses from")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench", help="folder of the results files")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    args = parser.parse_args(argv)
    shapes = TINY if args.tiny else PAPER
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    date = dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"gpu-{date}-{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-').lower()}{'-tiny' if args.tiny else ''}"
    results: dict = {"date": date, "device": device, "device_name": name, "torch": torch.__version__, "tiny": args.tiny,
                     "command": recorded_command(argv if argv is not None else sys.argv[1:])}
    for section in args.only:
        began = time.perf_counter()
        print(f"[gpu bench] {section} ...", file=sys.stderr, flush=True)
        try:
            if section == "ceiling":
                results[section] = ceiling(shapes, device)
            elif section == "train":
                results[section] = train(shapes, device, results.get("ceiling", {}))
            elif section == "recl":
                results[section] = recl(shapes, device, results.get("ceiling", {}), args.text)
            elif section == "recl-llama":
                results[section] = recl_llama(shapes, device, results.get("ceiling", {}), args.text)
            elif section == "profile":
                results[section] = profile(shapes, device, results.get("ceiling", {}), args.text)
            elif section == "compile":
                results[section] = compile_section(shapes, device, results.get("ceiling", {}), args.text)
            else:
                results[section] = speed(shapes, device, args.out)
        except Exception as err:  # one failed section must not lose the others' numbers
            traceback.print_exc()
            results[section] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        results[section]["seconds"] = time.perf_counter() - began
        stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
        stem.with_suffix(".md").write_text(markdown(results))
        print(f"[gpu bench] {section} done in {results[section]['seconds']:.0f} s", file=sys.stderr, flush=True)
    return stem.with_suffix(".json")


if __name__ == "__main__":
    print(main())
