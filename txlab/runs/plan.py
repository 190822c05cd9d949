"""What a long command will do and how long it should take here, said before it starts.

Every long command (`txlab train`, `recl`, `speed`, `ablate`) prints a plan first: the models it
trains (steps, tokens), what it collects, and an estimated time on the device it runs on. The estimate
is the command's analytic FLOPs (the models' ``flops_per_token``: training counts forward + backward as
3x the forward), each part over its measured share of the matmul ceiling (:data:`SHARES`: training, or a
loss collection by windows, one window per (c, t) or strided) in the precision it computes in, the
ceiling measured on that device here and now. ``--dry-run`` stops after the plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from txlab.config import RunConfig
from txlab.data import synthetic
from txlab.data.registry import TEXT_CORPUS
from txlab.data.textdata import text_token_counts
from txlab.errors import TxlabError
from txlab.models.build import count_model
from txlab.models.interface import TRAINING_FLOPS_PER_FORWARD, ModelCounts
from txlab.presets import PAPER_SPLIT_TOKENS, SIZES, resolve_preset
from txlab.runs.capacity import GIB, machine_memory, step_bytes
from txlab.runs.checkpoint import has_checkpoint, read_meta
from txlab.runs.evaluate import evaluation_context
from txlab.runs.zoo import corpus_label, known_vocab_size, recipe_steps, trial_steps
from txlab.tables import count_label
from txlab.timing import CONTENDED_SHARE, cpu_snapshot, cuda_matmul_gflops, matmul_peak_gflops, others_cpu


@dataclass(frozen=True)
class Work:
    """What a part of a plan computes, for the share of the matmul ceiling it reaches: ``train`` (training steps with
    their validation; also what ablate and speed time), or a loss collection by ``window``, ``naive`` (one window per
    (c, t)) or ``strided``; in ``precision``, the ceiling it is measured against."""

    method: str = "train"
    precision: str = "fp32"


TRAIN = Work()

SHARES: dict[tuple[str, str, str], float] = {
    # (device type, precision, method): the analytic FLOPs a plan counts for the work benchmarked, over its seconds
    # times the ceiling of its precision measured in the same run; the median over the runs and rows cited
    # (tests/test_plan.py recomputes every measured one from the committed files).
    # CUDA: results/bench/gpu-2026-11-*-nvidia-h{100,200}*/*.json, 5 runs with training; collection as txlab reads
    # today, its layers compiled (compile=auto), 1 run (gpu-2026-11-30-nvidia-h200-compiled; as written, 7 runs read 0.13-0.26)
    ("cuda", "fp32", "train"): 0.82,  # train.steps.fp32, TF32 off: 0.76-0.83 of the fp32 ceiling
    ("cuda", "bf16", "train"): 0.090,  # train.steps.bf16: 0.083-0.099 of the bf16 ceiling
    ("cuda", "bf16", "window"): 0.42,  # recl.rows.main, GPT-2 124M shape, grid 100..1000 (a 1B Llama read 0.66)
    ("cuda", "bf16", "strided"): 0.17,  # recl.strided, s = 1,024 at contexts 8k..32k
    ("cuda", "bf16", "naive"): 0.42,  # not benchmarked on a GPU: the window method's (both read whole windows)
    # CPU, 2 threads (1 for training's per-step rows): results/bench/collection-cpu.json, main and placebo rows of the
    # cpu-size xl151m and LSTM and a Llama 4x128, dense and sparse grid, against the ceiling's mean before and after
    ("cpu", "fp32", "window"): 0.49,  # "main window" and "placebo windows": 0.44-0.58
    ("cpu", "fp32", "naive"): 0.48,  # "main per (c, t)" and "placebo per (c, t)": 0.41-0.59
    ("cpu", "fp32", "strided"): 0.33,  # "main strided" (s = c / 4): 0.25-0.37
    # training, a whole command: the quick start (results/recl/table8-xl-rnn-cpu-rerun-2026-11-23/output.txt: 89.6 TFLOP,
    # mostly training, in 18 min 39 s at a 206 GFLOP/s ceiling); single steps measure 0.44-0.57 (precision-train-step-cpu.jsonl)
    ("cpu", "fp32", "train"): 0.39,
    # bf16 on the CPU: results/bench/precision-train-step-cpu.jsonl, the rows where others took under 10% of the CPU: bf16
    # steps reach 0.27-0.42 of the bf16 ceiling (median 0.40) where fp32 steps reach 0.51, so a command 0.39 x 0.40 / 0.51
    ("cpu", "bf16", "train"): 0.30,
}
"""Share of the matmul ceiling each kind of work reaches, by device type, precision and method (:func:`share_of_ceiling`)."""


def share_of_ceiling(device: str, work: Work) -> tuple[str, float] | None:
    """(the precision whose ceiling to measure, the share of it) for ``work`` on ``device``, from :data:`SHARES`: fp16 on
    CUDA reads bf16's (the same tensor cores); a collection in a precision benchmarked only in training (fp32 on CUDA,
    bf16 on the CPU) reads training's share, which it reached 1.7x of in bf16 on CUDA; a precision not benchmarked on the device at all (fp16 on the CPU, emulated) reads fp32's, against the fp32
    ceiling. None on a device type without measurements."""
    kind = torch.device(device).type
    precision = "bf16" if kind == "cuda" and work.precision == "fp16" else work.precision
    for key in ((kind, precision, work.method), (kind, precision, "train"), (kind, "fp32", work.method)):
        if key in SHARES:
            return key[1], SHARES[key]
    return None


STARTUP_S = 5.0
"""Seconds every command spends before its first FLOP: importing torch and txlab, reading the corpus
(5.3 s for a --dry-run on a loaded 2-core machine, 0.4 s for `txlab version`)."""

MODEL_OVERHEAD_S = 15.0
"""Seconds each model trained spends beyond its FLOPs: generating or loading its corpus, building it,
its first slow steps, checkpoints and the validation set-up. A tiny model (20 steps, ~0 FLOP) took
18 s beyond start-up on a loaded 2-core machine; the issue's walk-through measured `recl --size tiny`
(three models) at 81 s where FLOPs alone said 4.5 s."""

PROBES = 5
"""Short matmul probes of the ceiling; the best one is the ceiling (:func:`machine_gflops`)."""

LONG_S = 3600.0
"""Beyond this estimate a plan names settings that finish in minutes."""

MIN_LOAD_S = 0.1
"""The shortest ceiling measurement over which the share of the CPU others took is told: over less, the kernel's
10 ms accounting ticks make it noise."""

CEILING_DTYPES = {"fp32": (torch.float32, False), "tf32": (torch.float32, True), "bf16": (torch.bfloat16, False), "fp16": (torch.float16, False)}
"""The matmul each ceiling times: its dtype, and whether fp32 runs on TF32 tensor cores (CUDA only; the CPU has none)."""

METHOD_WORDS = {"train": "training", "window": "collection by windows", "naive": "collection one window per (c, t)", "strided": "strided collection"}


@dataclass
class Plan:
    """What a command will do, line by line, and the FLOPs it will spend, by kind of work."""

    lines: list[str] = field(default_factory=list)
    flops: float | None = 0.0
    """Total analytic FLOPs (None when some part cannot be counted: an unknown vocabulary, or the unknown
    size of a split that is evaluated whole)."""
    ceilings: dict[str, float | None] = field(default_factory=dict)
    """The device's matmul ceiling measured now (GFLOP/s) in each precision the plan's work needs (None where it cannot
    be measured here); empty before :meth:`measure`."""
    device: str = "cpu"
    budget_s: float = 0.0
    """Seconds the command spends whatever its FLOPs (a timing budget), added to the estimate."""
    faster: str = ""
    """Settings that would finish in minutes, named when this plan takes over :data:`LONG_S`."""
    startup_s: float = STARTUP_S
    """Seconds the command spends before its first FLOP, added to the estimate."""
    work: dict[Work, float] = field(default_factory=dict)
    """FLOPs by kind of work (:meth:`add`)."""
    others: float | None = None
    """Share of the CPU other processes took while the ceiling was measured (None on a GPU, or not measured)."""

    def add(self, line: str, flops: float | None = 0.0, budget_s: float = 0.0, work: Work = TRAIN) -> None:
        self.add_parts(line, [(work, flops)], budget_s)

    def add_parts(self, line: str, parts: Sequence[tuple[Work, float | None]], budget_s: float = 0.0) -> None:
        """One line whose FLOPs are several kinds of work (a collection whose members compute in different precisions)."""
        self.lines.append(line)
        for work, flops in parts:
            self.flops = None if self.flops is None or flops is None else self.flops + flops
            if flops:
                self.work[work] = self.work.get(work, 0.0) + flops
        self.budget_s += budget_s

    def measure(self, gflops: Callable[[str, int, str], float | None], threads: int = 0) -> Plan:
        """Measure the ceiling in each precision the plan's work needs (nothing when it has nothing to compute), and on a
        CPU the share other processes took meanwhile; returns the plan."""
        needed = {rate[0] for rate in (share_of_ceiling(self.device, w) for w in self.work) if rate}
        start = cpu_snapshot()
        began = time.perf_counter()
        self.ceilings = {precision: gflops(self.device, threads, precision) for precision in sorted(needed)}
        if torch.device(self.device).type == "cpu" and time.perf_counter() - began >= MIN_LOAD_S:
            self.others = others_cpu(start)
        return self

    @property
    def compute_seconds(self) -> float | None:
        """Seconds of the plan's FLOPs: each kind of work at its share of the ceiling in its precision."""
        if self.flops == 0:
            return 0.0
        parts = [seconds_for(flops, self.ceilings, work, self.device) for work, flops in self.work.items()]
        return None if self.flops is None or None in parts else sum(parts)

    @property
    def seconds(self) -> float | None:
        compute = self.compute_seconds
        return None if compute is None else compute + self.budget_s + self.startup_s

    def estimate(self) -> str:
        """The estimated time, the load it assumes and, when it is long, what would be quicker (the end of :meth:`describe`)."""
        if self.flops == 0:
            lines = [f"estimated time: {format_seconds(self.seconds)} (nothing to compute: start-up, per-model overheads and timing budgets)"]
        elif self.flops is None:
            lines = ["estimated time: unknown (a vocabulary or split size is not known before the corpus is read, or in words a member's "
                     "tokens per word before it is trained)"]
        elif self.compute_seconds is None:
            lines = [f"estimated time: unknown (the {device_word(self.device)} cannot be measured on this machine)"]
        else:
            fixed = f"; and {format_seconds(self.budget_s + self.startup_s)} of start-up, per-model overheads and timing budgets"
            lines = [f"estimated time: {format_seconds(self.seconds)} ({format_count(self.flops)}FLOP: {self._rates()}{fixed})"]
            if self.others is not None and self.others > CONTENDED_SHARE:
                loaded = self.compute_seconds / (1 - min(self.others, 0.9)) + self.budget_s + self.startup_s
                lines.append(f"other processes took {self.others:.0%} of the CPU while it was measured: the estimate is for the CPU to itself; "
                             f"sharing it, expect at least {format_seconds(loaded)}, and more where parallel work waits on a busy core")
        if self.faster:
            lines.append(f"that is over an hour on this {device_word(self.device)}: {self.faster}")
        return "\n".join(lines)

    def _rates(self) -> str:
        """'training 85.0 TFLOP at 39% of the fp32 matmul ceiling measured now on cpu (206 GFLOP/s), ...': each kind of work."""
        parts = []
        for work, flops in self.work.items():
            precision, share = share_of_ceiling(self.device, work)
            parts.append(f"{METHOD_WORDS[work.method]} {format_count(flops)}FLOP at {share:.0%} of the {precision} matmul ceiling "
                         f"measured now on {self.device} ({format_count(self.ceilings[precision] * 1e9)}FLOP/s)")
        return ", ".join(parts)

    def describe(self) -> str:
        """The plan's lines, the estimated time and, when it is long, what would be quicker."""
        return "\n".join([*self.lines, self.estimate()])


def device_word(device: str) -> str:
    """How plans name a device's kind: CPU, GPU (CUDA), else torch's name of it."""
    kind = torch.device(device).type
    return {"cpu": "CPU", "cuda": "GPU"}.get(kind, kind)


def seconds_for(flops: float | None, ceilings: dict[str, float | None], work: Work = TRAIN, device: str = "cpu") -> float | None:
    """Estimated seconds of ``flops`` of ``work`` at its share of the ceiling in ``ceilings`` (None if either is unknown; no
    FLOPs take no time, whatever the machine)."""
    if flops == 0:
        return 0.0
    rate = share_of_ceiling(device, work)
    if flops is None or rate is None or not ceilings.get(rate[0]):
        return None
    return flops / (ceilings[rate[0]] * 1e9 * rate[1])


def format_count(n: float) -> str:
    """1234 -> '1.2 k', 2.5e9 -> '2.5 G': a count with an SI prefix (and a trailing space, for a unit)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:,.1f} {prefix}"
    return f"{n:.0f} "


def format_tokens(n: int) -> str:
    return f"{n / 1e6:,.1f}M tokens" if n >= 1e6 else f"{n:,} tokens"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.0f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 90:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def machine_gflops(device: str, threads: int, precision: str = "fp32") -> float | None:
    """Measured matmul ceiling of ``device`` in ``precision`` (:data:`CEILING_DTYPES`), with ``threads`` on a CPU (0:
    torch's default); None for a device that cannot be measured here (absent, or neither a CPU nor CUDA)."""
    target = torch.device(device)
    dtype, tf32 = CEILING_DTYPES[precision]
    if target.type == "cuda":
        return cuda_matmul_gflops(target, dtype, tf32) if torch.cuda.is_available() else None
    if target.type != "cpu":
        return None
    # the best of several short probes: other processes only ever slow a probe down, so the fastest
    # is the machine's own ceiling (a median of 3 swung 20-206 GFLOP/s with the load of the moment)
    threads = threads or torch.get_num_threads()
    return max(matmul_peak_gflops(threads=threads, size=1024, repeats=1, dtype=dtype) for _ in range(PROBES))


def is_long(plan: Plan) -> bool:
    seconds = plan.seconds
    return seconds is not None and seconds > LONG_S


def is_long_on_cpu(plan: Plan, device: str) -> bool:
    return is_long(plan) and torch.device(device).type == "cpu"


def model_counts(cfg: RunConfig, n_token: int | None = None) -> ModelCounts:
    """The configured model's parameters, window and FLOPs, counted from its configuration (nothing is built),
    with ``n_token`` words (default: the vocabulary when known, else 2: a shape whose window alone is asked for)."""
    return count_model(replace(cfg.model, n_token=n_token or vocab_size(cfg) or 2))


def vocab_size(cfg: RunConfig) -> int | None:
    """The model's vocabulary size, when known without reading the corpus (own text: encoded, or estimated)."""
    if cfg.model.n_token:
        return cfg.model.n_token
    if cfg.data.corpus == TEXT_CORPUS:
        return text_token_counts(cfg.data).vocab_size
    return known_vocab_size(cfg.data.corpus)


def split_tokens(cfg: RunConfig, split: str) -> int | None:
    """Tokens of a split of the run's corpus, when known without reading it: own text's from its cache,
    else estimated from the file size (:func:`txlab.data.textdata.text_token_counts`)."""
    corpus = cfg.data.corpus
    if corpus == TEXT_CORPUS:
        return text_token_counts(cfg.data).splits.get(split)
    if corpus in PAPER_SPLIT_TOKENS:
        return PAPER_SPLIT_TOKENS[corpus].get(split)
    if corpus in synthetic.VARIANTS:  # generated at the configured size
        return cfg.data.synthetic_tokens if split == "train" else cfg.data.synthetic_eval_tokens
    return None


def training_tokens(cfg: RunConfig, steps: int | None = None) -> int:
    t = cfg.train
    return (t.max_steps if steps is None else steps) * t.batch_size * cfg.model.tgt_len


def evaluation_keys(cfg: RunConfig) -> int:
    """Mean keys a query attends at evaluation: the memory and half a segment."""
    tgt_len, context = evaluation_context(cfg.model, cfg.eval)
    return int(context.mem_len + (tgt_len + 1) / 2)


def training_flops(cfg: RunConfig, steps: int | None = None) -> float | None:
    """FLOPs of ``steps`` training steps (default all of them), forward and backward, with the periodic
    validation the training loop runs every ``train.eval_interval`` steps and at its end."""
    if not vocab_size(cfg):
        return None
    model = model_counts(cfg)
    t = cfg.train
    steps = t.max_steps if steps is None else steps
    train_keys = int(cfg.model.mem_len + (cfg.model.tgt_len + 1) / 2)
    flops = TRAINING_FLOPS_PER_FORWARD * training_tokens(cfg, steps) * model.flops_per_token(train_keys)
    known = [n for n in (split_tokens(cfg, "valid"), t.eval_tokens) if n]  # each evaluation scores at most the split
    if not known:
        return None
    valid = min(known)
    evaluations = -(-steps // t.eval_interval)
    return flops + evaluations * valid * model.flops_per_token(evaluation_keys(cfg))


def checkpoint_step(run_dir: Path) -> int:
    """The step a run directory's checkpoint reached (0 when there is none)."""
    return read_meta(run_dir)["step"] if has_checkpoint(run_dir) else 0


def add_training(plan: Plan, label: str, cfg: RunConfig, run_dir: Path, resume: bool = True) -> None:
    """One line for a model to train into ``run_dir`` (its remaining steps when it resumes) and its FLOPs."""
    done = checkpoint_step(run_dir) if resume else 0
    remaining = max(cfg.train.max_steps - done, 0)
    t, m = cfg.train, cfg.model
    n_token = vocab_size(cfg)
    params = f"{count_label(model_counts(cfg, n_token).parameters)} parameters" if n_token else "parameters known once the corpus is read"
    where = f"resumes at step {done:,}" if done else "from scratch"
    recipe, trial = recipe_steps(cfg), trial_steps(cfg)
    if trial and run_dir.name.endswith(f"-{trial}steps"):
        where += f"; a trial run of {trial:,} steps, the recipe trains {recipe:,}: its own directory, which the recipe's run never resumes"
    elif trial:
        where += f"; {trial:,} steps where the {cfg.preset} preset's {cfg.size} recipe trains {recipe:,}"
    if not remaining:
        plan.add(f"  {label}: trained ({done:,} steps) in {run_dir}")
        return
    plan.add(f"  train {label} into {run_dir} ({where}): {remaining:,} steps x {t.batch_size} streams x {m.tgt_len} tokens = "
             f"{format_tokens(training_tokens(cfg, remaining))}, {params}, on {t.device}" + (f" in {t.precision}" if t.precision != "fp32" else ""),
             training_flops(cfg, remaining), budget_s=MODEL_OVERHEAD_S, work=Work("train", t.precision))


def training_bytes(cfg: RunConfig) -> int | None:
    """A lower bound on the bytes one training step of ``cfg`` holds at once (txlab.runs.capacity.step_bytes: weights,
    gradients and Adam's moments, activations, logits); None while its vocabulary is unknown."""
    n_token, t, m = vocab_size(cfg), cfg.train, cfg.model
    if not n_token:
        return None
    return step_bytes(replace(m, n_token=n_token), max(t.batch_size // t.grad_accum, 1), m.tgt_len, m.mem_len, training=True, precision=t.precision)


def device_memory(device: str) -> int | None:
    """Bytes of memory ``device`` has (the GPU's, or the CPU's RAM: txlab.runs.capacity.machine_memory); None for a GPU
    this machine does not have (a plan made here for another machine)."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return None
    return machine_memory(device)


def memory_line(needed: dict[str, int | None], device: str, advice: str) -> str:
    """'memory: at least 13.5 GiB at once (llama-7b), of the 79.6 GiB of this GPU' for the most ``needed`` (label -> a
    lower bound in bytes) against the device's memory; refused (TxlabError, with ``advice``) when it cannot fit."""
    known = {label: n for label, n in needed.items() if n}
    if not known:
        return "memory: not known before the corpus is read"
    label, most = max(known.items(), key=lambda item: item[1])
    available = device_memory(device)
    if available is None:
        return f"memory: at least {format_bytes(most)} at once ({label}); {device} is not on this machine to compare"
    if most > available:
        raise TxlabError(f"{label} needs at least {format_bytes(most)} at once, more than the {format_bytes(available)} of this "
                         f"{device_word(device)}: {advice}")
    return f"memory: at least {format_bytes(most)} at once ({label}), of the {format_bytes(available)} of this {device_word(device)}"


def format_bytes(n: int) -> str:
    return f"{n / GIB:,.1f} GiB" if n >= GIB else f"{n / 2**20:,.1f} MiB"


def smaller_sizes(size: str) -> tuple[str, ...]:
    """The preset sizes after ``size`` in :data:`txlab.presets.SIZES` (paper, cpu, tiny): the quicker ones."""
    return SIZES[SIZES.index(size) + 1 :] if size in SIZES else ()


def training_plan(cfg: RunConfig, run_dir: Path, resume: bool = True, gflops: Callable[[str, int, str], float | None] = machine_gflops) -> Plan:
    """The plan of `txlab train`, with its memory against the device's; when it takes hours on a CPU, the smaller size of
    the preset that takes minutes."""
    t = cfg.train
    plan = Plan(device=t.device)
    if cfg.data.corpus == TEXT_CORPUS:
        plan.add(f"  corpus {corpus_label(cfg)} from {cfg.data.text}, tokenizer {cfg.data.tokenizer or 'char'}: {text_token_counts(cfg.data).describe()}")
    add_training(plan, f"{cfg.preset or cfg.name or 'model'} ({cfg.size or 'custom'} size, corpus {corpus_label(cfg)})", cfg, run_dir, resume)
    if plan.flops != 0:
        plan.add("  " + memory_line({"a training step": training_bytes(cfg)}, t.device, "lower train.batch_size (or raise train.grad_accum), the segment or the memory"))
    plan.measure(gflops, t.threads)
    if is_long_on_cpu(plan, t.device) and cfg.preset:
        candidates = []
        for size in smaller_sizes(cfg.size):
            smaller = resolve_preset(cfg.preset, size)
            if cfg.data.corpus == TEXT_CORPUS:  # the same text at a smaller size
                smaller = replace(smaller, data=cfg.data)
                settings = f"`txlab train {cfg.preset} --size {size} --text {cfg.data.text} --tokenizer {cfg.data.tokenizer or 'char'}`"
            else:
                settings = f"`txlab train {cfg.preset} --size {size}` ({smaller.data.corpus})"
            candidate = Plan(ceilings=plan.ceilings, device=t.device)
            candidate.add(settings, training_flops(smaller), work=Work("train", t.precision))
            candidates.append((settings, candidate))
        plan.faster = quickest(candidates)
    return plan


def quickest(candidates: Sequence[tuple[str, Plan]]) -> str:
    """'<settings> would take about <time>' for the first candidate plan under :data:`LONG_S`, else ''."""
    for settings, plan in candidates:
        seconds = plan.seconds
        if seconds is not None and seconds <= LONG_S:
            return f"{settings} would take about {format_seconds(seconds)}"
    return ""
