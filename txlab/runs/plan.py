"""What a long command will do and how long it should take here, said before it starts.

Every long command (`txlab train`, `recl`, `speed`, `ablate`) prints a plan first: the models it
trains (steps, tokens), what it collects, and an estimated time on this machine. The estimate is the
command's analytic FLOPs (the models' ``flops_per_token``: training counts forward + backward as 3x
the forward) over :data:`COMPUTE_EFFICIENCY` times the matmul ceiling measured here and now, so a
busy machine gets a longer estimate. ``--dry-run`` stops after the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from txlab.config import RunConfig
from txlab.data import synthetic
from txlab.data.registry import TEXT_CORPUS
from txlab.data.textdata import text_token_counts
from txlab.models.build import count_model
from txlab.models.interface import TRAINING_FLOPS_PER_FORWARD, ModelCounts
from txlab.presets import PAPER_SPLIT_TOKENS, SIZES, resolve_preset
from txlab.runs.checkpoint import has_checkpoint, read_meta
from txlab.runs.evaluate import evaluation_context
from txlab.runs.zoo import corpus_label, known_vocab_size, recipe_steps, trial_steps
from txlab.timing import matmul_peak_gflops

COMPUTE_EFFICIENCY = 0.4
"""Share of the measured matmul ceiling a whole command achieves, fitted to a recorded run: the quick
start (results/recl/table8-xl-rnn-cpu-rerun-2026-11-23/output.txt: 89.6 TFLOP in 18 min 39 s at a
206 GFLOP/s ceiling, 39%); `txlab bench model` measures 37-58% for single steps of the cpu-size models."""

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
"""Beyond this estimate on a CPU a plan names settings that finish in minutes."""

@dataclass
class Plan:
    """What a command will do, line by line, and the FLOPs it will spend."""

    lines: list[str] = field(default_factory=list)
    flops: float | None = 0.0
    """Total analytic FLOPs (None when some part cannot be counted: an unknown vocabulary, or the unknown
    size of a split that is evaluated whole)."""
    gflops: float | None = None
    """The measured matmul ceiling of the device (None when it cannot be measured here)."""
    budget_s: float = 0.0
    """Seconds the command spends whatever its FLOPs (a timing budget), added to the estimate."""
    faster: str = ""
    """Settings that would finish in minutes, named when this plan takes over :data:`LONG_S` on a CPU."""

    def add(self, line: str, flops: float | None = 0.0, budget_s: float = 0.0) -> None:
        self.lines.append(line)
        self.flops = None if self.flops is None or flops is None else self.flops + flops
        self.budget_s += budget_s

    startup_s: float = STARTUP_S
    """Seconds the command spends before its first FLOP, added to the estimate."""

    @property
    def seconds(self) -> float | None:
        compute = seconds_for(self.flops, self.gflops)
        return None if compute is None else compute + self.budget_s + self.startup_s

    def estimate(self) -> str:
        """The estimated time and, when it is long, what would be quicker (the end of :meth:`describe`)."""
        if self.flops == 0:
            lines = [f"estimated time: {format_seconds(self.seconds)} (nothing to compute: start-up, per-model overheads and timing budgets)"]
        elif self.gflops is None:
            lines = ["estimated time: unknown (the device cannot be measured on this machine)"]
        elif self.flops is None:
            lines = ["estimated time: unknown (a vocabulary or split size is not known before the corpus is read, or in words a member's "
                     "tokens per word before it is trained)"]
        else:
            fixed = f", and {format_seconds(self.budget_s + self.startup_s)} of start-up, per-model overheads and timing budgets"
            lines = [f"estimated time: {format_seconds(self.seconds)} ({format_count(self.flops)}FLOP at {COMPUTE_EFFICIENCY:.0%} "
                     f"of the {self.gflops:,.0f} GFLOP/s matmul ceiling measured now{fixed})"]
        if self.faster:
            lines.append(f"that is over an hour on this CPU: {self.faster}")
        return "\n".join(lines)

    def describe(self) -> str:
        """The plan's lines, the estimated time and, when it is long, what would be quicker."""
        return "\n".join([*self.lines, self.estimate()])


def seconds_for(flops: float | None, gflops: float | None) -> float | None:
    """Estimated seconds of ``flops`` at :data:`COMPUTE_EFFICIENCY` x ``gflops`` (None if either is unknown; no FLOPs
    take no time, whatever the machine)."""
    if flops == 0:
        return 0.0
    if flops is None or not gflops:
        return None
    return flops / (gflops * 1e9 * COMPUTE_EFFICIENCY)


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


def machine_gflops(device: str, threads: int) -> float | None:
    """Measured matmul ceiling of ``device`` with ``threads`` (0: torch's default); None for a device
    that is not a CPU (absent here, or not measured this way)."""
    if torch.device(device).type != "cpu":
        return None
    # the best of several short probes: other processes only ever slow a probe down, so the fastest
    # is the machine's own ceiling (a median of 3 swung 20-206 GFLOP/s with the load of the moment)
    threads = threads or torch.get_num_threads()
    return max(matmul_peak_gflops(threads=threads, size=1024, repeats=1) for _ in range(PROBES))


def is_long_on_cpu(plan: Plan, device: str) -> bool:
    seconds = plan.seconds
    return seconds is not None and seconds > LONG_S and torch.device(device).type == "cpu"


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
    params = f"{model_counts(cfg, n_token).parameters / 1e6:.2f}M parameters" if n_token else "parameters known once the corpus is read"
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
             f"{format_tokens(training_tokens(cfg, remaining))}, {params}, on {t.device}",
             training_flops(cfg, remaining), budget_s=MODEL_OVERHEAD_S)


def smaller_sizes(size: str) -> tuple[str, ...]:
    """The preset sizes after ``size`` in :data:`txlab.presets.SIZES` (paper, cpu, tiny): the quicker ones."""
    return SIZES[SIZES.index(size) + 1 :] if size in SIZES else ()


def training_plan(cfg: RunConfig, run_dir: Path, resume: bool = True, gflops: Callable[[str, int], float | None] = machine_gflops) -> Plan:
    """The plan of `txlab train`; when it takes hours on a CPU, the smaller size of the preset that takes minutes."""
    plan = Plan(gflops=gflops(cfg.train.device, cfg.train.threads))
    if cfg.data.corpus == TEXT_CORPUS:
        plan.add(f"  corpus {corpus_label(cfg)} from {cfg.data.text}, tokenizer {cfg.data.tokenizer or 'char'}: {text_token_counts(cfg.data).describe()}")
    add_training(plan, f"{cfg.preset or cfg.name or 'model'} ({cfg.size or 'custom'} size, corpus {corpus_label(cfg)})", cfg, run_dir, resume)
    if is_long_on_cpu(plan, cfg.train.device) and cfg.preset:
        candidates = []
        for size in smaller_sizes(cfg.size):
            smaller = resolve_preset(cfg.preset, size)
            if cfg.data.corpus == TEXT_CORPUS:  # the same text at a smaller size
                smaller = replace(smaller, data=cfg.data)
                settings = f"`txlab train {cfg.preset} --size {size} --text {cfg.data.text} --tokenizer {cfg.data.tokenizer or 'char'}`"
            else:
                settings = f"`txlab train {cfg.preset} --size {size}` ({smaller.data.corpus})"
            candidates.append((settings, Plan(flops=training_flops(smaller), gflops=plan.gflops)))
        plan.faster = quickest(candidates)
    return plan


def quickest(candidates: Sequence[tuple[str, Plan]]) -> str:
    """'<settings> would take about <time>' for the first candidate plan under :data:`LONG_S`, else ''."""
    for settings, plan in candidates:
        seconds = plan.seconds
        if seconds is not None and seconds <= LONG_S:
            return f"{settings} would take about {format_seconds(seconds)}"
    return ""
