"""What `txlab recl` does, top to bottom: :func:`recl_groups` resolves the groups and prints the plan, then for each
group (once per training seed) :func:`run_group` trains what is missing, collects each member into a loss table
on the group's one corpus, scores the group and writes its tables and figures.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from txlab import devices
from txlab.analysis import recl, table8
from txlab.analysis.learned import read_restarts
from txlab.analysis.per_unit import UNIGRAM_FIT, unigram_perplexity
from txlab.analysis.token_losses import token_loss_table, write_token_losses
from txlab.config import RunConfig
from txlab.data.corpus import Corpus
from txlab.data.synthetic import VARIANTS as SYNTHETIC
from txlab.drivers.recl.groups import Group, Member, group_data, member_overrides, resolve_groups, size_label
from txlab.drivers.recl.plan import extrapolation, plan_groups
from txlab.drivers.recl.report import (FIGURE3_R, SEED_SUMMARY, GroupResult, SeedsResult, draw_figures, seeds_figure, strided_record, table8_note,
                                       word_record)
from txlab.drivers.recl.settings import ReclSettings
from txlab.drivers.recl.sources import Source, group_source
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic
from txlab.measure.losses import GroupLosses
from txlab.models import hf
from txlab.runs.checkpoint import has_checkpoint, saved_config
from txlab.runs.launch import Task, check_jobs, check_launcher, run_jobs
from txlab.runs.plan import checkpoint_step
from txlab.runs.train import train
from txlab.workspace import resolve


def _needs_training(member: Member) -> bool:
    """A preset member with no checkpoint, or one interrupted under the recipe it is planned with."""
    if not member.preset:
        return False
    if not has_checkpoint(member.run_dir):
        return True
    planned = member.config.train.max_steps
    return checkpoint_step(member.run_dir) < planned and saved_config(member.run_dir).train.max_steps == planned


def check_training(members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None]) -> None:
    """Say how much every member was trained, and refuse (unless ``settings.allow_unequal``) a preset
    member whose run stopped at other steps than its recipe's: reused from another recipe, say a short
    trial run beside baselines trained in full."""
    unequal = []
    for m in members:  # every member has its checkpoint by now
        if m.source:
            config = hf.saved_config(m.source)
            echo(f"  {m.label}: Hugging Face {config.get('model_type', 'model')} from {m.source}, used as it is")
            continue
        step, trained = checkpoint_step(m.run_dir), saved_config(m.run_dir)
        tokens = step * trained.train.batch_size * trained.model.tgt_len
        planned = f" of the recipe's {m.config.train.max_steps:,}" if m.preset else ""
        restarts = len(read_restarts(m.run_dir))
        restarted = f", its last of {restarts + 1} attempts (restart rule: restarts.jsonl)" if restarts else ""
        echo(f"  {m.label}: trained {step:,} steps{planned}, {tokens / 1e6:.1f}M tokens{restarted} ({m.run_dir})")
        if m.preset and settings.train_seeds and trained.train.seed != m.config.train.seed:
            raise TxlabError(f"{m.run_dir} holds a run of train.seed {trained.train.seed}, where the group of training seed "
                             f"{m.config.train.seed} expects that seed: move it away to train the seed's run there")
        if m.preset and step != m.config.train.max_steps:
            unequal.append(f"{m.label} ({m.run_dir}) stopped at step {step:,} where its recipe trains {m.config.train.max_steps:,}")
    if not unequal:
        return
    if not settings.allow_unequal:
        raise TxlabError(
            f"unequally trained group: {'; '.join(unequal)}. Move the run away to train it to its recipe, "
            "or give --set allow_unequal=true to score it as it is"
        )
    echo(f"warning: unequally trained group (allow_unequal): {'; '.join(unequal)}")


def ensure_trained(members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None], progress: bool,
                   corpus: Corpus | None = None) -> None:
    """Train the preset members without a checkpoint (or resume an interrupted one), or refuse when
    ``settings.train_missing`` is off. ``corpus``: the group's, which every member reads (not read again per member)."""
    missing = [m for m in members if _needs_training(m)]
    if not missing:
        return
    if not settings.train_missing:
        commands = "; ".join(shlex.join(train_command(m, settings)) for m in missing)
        raise TxlabError(f"not trained: {', '.join(str(m.run_dir) for m in missing)} (train_missing is false). Train them with: {commands}")
    if settings.launcher == "slurm":
        tasks = [Task(m.label, train_job, (m.config, str(m.run_dir)), partial(_checkpoint_note, m)) for m in missing]
        check_jobs(run_jobs(tasks, settings.slurm, jobs_folder(settings), "txlab-train", echo), "training")
        return
    for m in missing:
        echo(f"training {m.label} ...")
        result = train(m.config, m.run_dir, resume=True, progress=progress, echo=echo, corpus=corpus)
        echo(f"trained {m.label} to step {result.step}: valid loss {result.valid.get('loss', float('nan')):.4f}")


def train_command(member: Member, settings: ReclSettings) -> list[str]:
    """The `txlab train` command that trains a preset ``member`` into its run directory with the configuration the
    group gives it (corpus or own text and tokenizer, the group's and the member's sets, its training seed)."""
    own = [*(["--data", settings.data] if settings.data else []), *(["--text", settings.text] if settings.text else []),
           *(["--tokenizer", settings.tokenizer] if settings.tokenizer else [])]
    sets = [*settings.sets, *member_overrides(settings, [member.config.preset]).get(member.config.preset, []),
            *([f"train.seed={member.config.train.seed}"] if settings.train_seeds else [])]
    return ["txlab", "train", member.config.preset, "--size", settings.size, *own, "--run-dir", str(member.run_dir),
            *(arg for s in sets for arg in ("--set", s))]


def jobs_folder(settings: ReclSettings) -> Path:
    """Where the jobs' scripts and logs go unless ``slurm.logs`` names a folder: beside the preset runs."""
    return Path(settings.models_root) / "jobs"


def train_job(cfg: RunConfig, run_dir: str) -> int:
    """Train one member as a scheduler job (what ``launcher: slurm`` submits), resuming its checkpoint; returns the step reached."""
    return train(cfg, Path(run_dir), resume=True, progress=True).step


def _checkpoint_note(member: Member) -> str:
    return f"checkpoint at step {checkpoint_step(member.run_dir)}/{member.config.train.max_steps}"


ORACLE = "oracle (ground truth)"
OWN_TOKENIZER = "each member's own"


def oracle_rows(oracle: np.ndarray | None, grid: Sequence[int], rs: Sequence[float]) -> list[table8.Table8Row]:
    """RECL rows of the ideal model, alone in its group; [] without one."""
    if oracle is None:
        return []
    rows = table8.recl_rows(table8.GroupTable(oracle[None], tuple(grid), [ORACLE]), rs=rs)
    return [replace(row, ground_truth=True) for row in rows]


def export_losses(losses: GroupLosses, labels: Sequence[str], oracle: np.ndarray | None, source: Source, table_dir: Path) -> list[Path]:
    """Every member's per-token (or per-word) losses, and the ideal model's on a synthetic corpus, as one tidy table in
    ``table_dir`` (txlab.analysis.token_losses), each target with its text: the token, or in words the word."""
    texts = source.target_texts(losses.targets)
    table = token_loss_table(losses.losses, losses.grid, labels, losses.targets, texts, source.unit, losses.placebo)
    if oracle is not None:
        table = pd.concat([table, token_loss_table(oracle[None], losses.grid, [ORACLE], losses.targets, texts, source.unit)],
                          ignore_index=True)
    return write_token_losses(table, table_dir / "losses")


@dataclass(frozen=True)
class GroupScores:
    """What a group's loss table gives: Table 8's rows and the points of Figures 3 and 4."""

    rows: list[table8.Table8Row]
    """txlab.analysis.table8.recl_rows rows, with the placebo-aware RECL when placebo losses were collected."""
    figure3_gains: np.ndarray
    """[M, G-1] unnormalised gains at r = FIGURE3_R."""
    perplexity: np.ndarray
    """[M, G] perplexity at each context length."""
    perplexity_intervals: np.ndarray | None
    """[M, G, 2] the block-bootstrap interval of each perplexity (txlab.analysis.recl.bootstrap_perplexity); None
    when ``settings.n_boot`` is 0."""
    placebo_gains: dict[float, tuple[np.ndarray, np.ndarray]]
    """r -> (step gains [M, G-1], placebo gains [M, G-1]); empty without placebo losses."""
    byte_intervals: np.ndarray | None = None
    """[M, G, 2] in words, the same interval of the perplexity per byte (the same blocks drawn); None in tokens or
    without a bootstrap."""


def score_group(losses: GroupLosses, labels: Sequence[str], settings: ReclSettings, span_bytes: np.ndarray | None = None) -> GroupScores:
    """RECL of every member at each r (bootstrap intervals unless ``settings.n_boot`` is 0) and the figures' points;
    in words, ``span_bytes`` [T] (each target's UTF-8 bytes) adds the interval of the perplexity per byte."""
    grid = losses.grid
    caps = {label: losses.caps[name] for label, name in zip(labels, losses.models)}
    bootstrap = table8.Bootstrap(losses.block_len, settings.n_boot, settings.seed) if settings.n_boot else None
    rows = table8.recl_rows(table8.GroupTable(losses.losses, grid, labels, caps, losses.placebo), rs=settings.rs, bootstrap=bootstrap)
    placebo = {}
    if losses.placebo is not None:
        table = recl.prepare_table(losses.losses, grid, labels, caps)
        placebo = {r: (recl.step_gains(table, r), recl.placebo_step_gains(table, losses.placebo, r)) for r in settings.rs}
    intervals = byte_intervals = None
    if bootstrap is not None:
        interval = partial(recl.bootstrap_perplexity, losses.losses, grid, labels, losses.block_len, settings.n_boot, settings.seed, bootstrap.ci, caps)
        intervals, byte_intervals = interval(), None if span_bytes is None else interval(units=span_bytes)
    return GroupScores(rows, recl.figure3_gains(losses.losses, grid, labels, FIGURE3_R, caps),
                       recl.perplexity_by_context(losses.losses, grid, labels, caps), intervals, placebo, byte_intervals)


def unigram_check(source: Source, targets: np.ndarray, perplexity: np.ndarray, labels: Sequence[str], c: int,
                  echo: Callable[[str], None]) -> table8.UnigramCheck | None:
    """docs/recl.md's rule on a scored group: each member's perplexity at the longest context ``c`` against a unigram
    fitted on the training split of what the group is scored on, on the same targets; a warning names every member that
    does not beat it. None (with a warning) where the text has no training split to fit one on."""
    try:
        train, scored = source.unigram_units()
    except TxlabError as error:  # a text given as its scored split alone: the group is still scored, the rule unapplied
        echo(f"warning: no unigram baseline, so no member is checked against it ({error})")
        return None
    check = table8.UnigramCheck(unigram_perplexity(train, scored, targets), source.unit, c,
                                {label: float(p) for label, p in zip(labels, perplexity)}, UNIGRAM_FIT)
    if check.not_read:
        echo(f"warning: {', '.join(check.not_read)} {'does' if len(check.not_read) == 1 else 'do'} not beat a unigram of the training split "
             f"(perplexity per {check.unit} {check.perplexity:,.2f} on the same targets; theirs at c = {c:,}: "
             + ", ".join(f"{m} {check.members[m]:,.2f}" for m in check.not_read) + "): their RECL says nothing about context use and is not read")
    return check


def run_group(group: Group, train_seed: int | None, source: Source, out_dir: Path, fig_dir: Path, echo: Callable[[str], None],
              progress: bool) -> GroupResult:
    """Train what is missing, collect the losses, compute RECL, write the tables and figures of one group (of one
    training seed: ``train_seed``, None for a group without seeds), on the group's ``source`` (its corpus in tokens,
    or a text in words: txlab.drivers.recl.sources): resolve members -> train what is missing -> collect each member
    into a table kept in its run folder -> group the tables on shared targets -> score the group -> write."""
    settings, collection = group.settings, group.collection
    grid = collection.grid
    members = group.resolved[train_seed]
    labels = [m.label for m in members]
    ensure_trained(members, settings, echo, progress, source.training_corpus)
    check_training(members, settings, echo)
    if settings.launcher == "slurm":  # each run's blocks as a job; the group then loads them here
        source.collect_as_jobs(members, settings, echo, jobs_folder(settings))
    echo(f"collecting losses of {len(members)} models {source.describe()}")
    tables = [source.collect(m, settings, progress) for m in members]
    losses, words = source.group(tables, members)
    if words is not None:
        echo(f"  words every member scores exactly: {words.shared:,} of {words.drawn:,} drawn ("
             + ", ".join(f"{name} {n:,}" for name, n in words.covered.items()) + f"); {len(words.targets):,} kept, {words.block_len} per block")
    # contexts past a member's trained positions measure extrapolation, not context use: said with the numbers
    beyond = {m.label: x for m in members if (x := extrapolation(m, collection, source.tokens_per_word(m))) is not None}
    scores = score_group(losses, labels, settings, None if words is None else words.span_bytes)
    unigram = unigram_check(source, losses.targets, scores.perplexity[:, -1], labels, grid[-1], echo)
    oracle = source.oracle(losses.targets)
    rows = scores.rows + oracle_rows(oracle, grid, settings.rs)
    if unigram is not None:
        rows = unigram.mark(rows)

    # matplotlib loads once a group is scored: a plan or dry run needs none
    from txlab.analysis import recl_figures

    table_dir, figure_dir = Path(out_dir) / group.folder(train_seed), Path(fig_dir) / group.folder(train_seed)
    settings_file = table_dir / "recl.json"
    result = GroupResult(group.name, group.members, [str(m.run_dir) for m in members], settings, list(grid), int(len(losses.targets)),
                         source.record_fields(), rows, "", [], train_seed, None if words is None else word_record(words), corpus=source.name,
                         model_order=list(group.model_order), strided=strided_record(collection),
                         unigram=None if unigram is None else unigram.record(), size=size_label(members), extrapolation=beyond,
                         placebo_offsets=None if losses.placebo is None else [int(o) for o in tables[0].meta["placebo_offsets"]])
    record = result.record()
    note = table8_note(record)
    files = table8.write_table8(rows, table_dir / "table8", note)
    reference = {} if oracle is None else {ORACLE: np.exp(oracle.mean(axis=1))}
    intervals = None
    if scores.perplexity_intervals is not None:
        intervals = dict(zip(labels, scores.perplexity_intervals))
        if oracle is not None:
            intervals[ORACLE] = recl.bootstrap_perplexity(oracle[None], grid, [ORACLE], collection.block_len, settings.n_boot, settings.seed)[0]
    files += recl_figures.write_context_curves(scores.figure3_gains, scores.perplexity, grid, labels, table_dir, scores.placebo_gains, reference,
                                               intervals, byte_perplexity=None if words is None else words.byte_perplexity(),
                                               byte_intervals=None if scores.byte_intervals is None else dict(zip(labels, scores.byte_intervals)))
    if settings.export_losses:
        files += export_losses(losses, labels, oracle, source, table_dir)
    files += draw_figures(table_dir, figure_dir, record, char_level=source.char_level)
    write_text_atomic(settings_file, json.dumps(record, indent=1) + "\n")
    return replace(result, markdown=table8.table8_markdown(rows) + note, files=[settings_file, *files])


def run_seeds(group: Group, source: Source, out_dir: Path, fig_dir: Path, echo: Callable[[str], None], progress: bool) -> SeedsResult:
    """A group once per training seed (:func:`run_group` of each of ``group.resolved``), then each model's RECL
    of every seed and its spread (txlab.analysis.table8.seed_rows) into ``<out_dir>/<group>/table8-seeds.{csv,md,json}``."""
    if group.settings.launcher == "slurm":  # every seed's missing runs as one batch of jobs, rather than a batch per seed
        ensure_trained([m for listed in group.resolved.values() for m in listed], group.settings, echo, progress)
    results = []
    for seed in group.seeds:
        echo(f"group {group.name}, training seed {seed}:")
        results.append(run_group(group, seed, source, out_dir, fig_dir, echo, progress))
    same = [m.label for m in group.resolved[group.seeds[0]] if not m.preset] + [ORACLE]
    rows = table8.seed_rows({r.train_seed: r.rows for r in results}, same)
    table_dir = Path(out_dir) / group.name
    files = table8.write_seed_spread(rows, table_dir / SEED_SUMMARY)
    result = SeedsResult(group.name, list(group.settings.train_seeds), results, rows, table8.seed_spread_markdown(rows), [])
    record, record_file = result.record(), table_dir / f"{SEED_SUMMARY}.json"
    write_text_atomic(record_file, json.dumps(record, indent=1) + "\n")
    files += seeds_figure(record, rows, Path(fig_dir) / group.name / SEED_SUMMARY)
    return replace(result, files=[*files, record_file])


def recl_groups(
    members: Sequence[str],
    study: str | Path | None = None,
    profile: str = "cpu",
    name: str | None = None,
    *,
    options: dict[str, Any] | None = None,
    sets: Sequence[str] = (),
    out_dir: Path | None = None,
    fig_dir: Path | None = None,
    announce: Callable[[str], None] = print,
    echo: Callable[[str], None] = print,
    progress: bool = True,
    dry_run: bool = False,
) -> list[GroupResult | SeedsResult]:
    """What `txlab recl` does: resolve the groups (see :func:`resolve_groups`; ``options`` and ``sets``
    are the command line's), print the plan, then :func:`run_group` each, or :func:`run_seeds` a group
    with training seeds (none with ``dry_run``).

    ``announce`` gets the settings of each group and the plan before any runs; ``echo`` gets the progress messages.
    Tables go to ``out_dir`` (default ``<home>/results/recl``), figures to ``fig_dir`` (default ``<home>/figures/recl``).
    """
    groups = resolve_groups(members, study, profile, name, options, sets)
    sources: list[Source | None] = []
    for group in groups:  # every group's members are resolved and checked against each other before any model trains
        check_launcher(group.settings.launcher)
        devices.check_device(group.settings.device, "--device" if (options or {}).get("device") is not None else "device")
        resolved = group.resolved[group.seeds[0]]
        # a dry run reads what its plan needs: a checkpoint member's corpus, to check it reads it; a text in words, whose
        # drawn words each member tokenizes to count its token-steps. A corpus in tokens alone waits for the run.
        needed = not dry_run or any(m.source for m in resolved) or group.collection.unit == "word"
        sources.append(group_source(group, progress) if needed else None)
    for group in groups:
        s = group.settings
        announce(f"profile: {f'{profile} ({study})' if study else 'command line'} | group {group.name}: {' '.join(group.members)} | "
                 f"size {size_label(group.resolved[group.seeds[0]]) or 'none named'} | corpus {f'{s.text} (tokenizer {s.tokenizer or OWN_TOKENIZER})' if s.text else s.data or ('the text its runs trained on' if s.unit == 'word' else 'each preset its own')} | unit {s.unit} | "
                 f"grid {s.grid} | {s.blocks} blocks x {s.block_len} {'words' if s.unit == 'word' else 'targets'} "
                 f"of {s.split} | r {' '.join(f'{r:g}' for r in s.rs)} | placebo {'on' if s.placebo else 'off'} | device {s.device}"
                 + (f" | training seeds {' '.join(map(str, s.train_seeds))}" if s.train_seeds else "")
                 + (f" | strided contexts, {group.collection.stride_words()}" if s.stride is not None else ""))
        if not s.placebo:
            synthetic = group_data(group.resolved[group.seeds[0]], s).corpus in SYNTHETIC
            announce("  placebo off: nothing tells a gain from context apart from noise that the min() over models turns into gain"
                     + ("; on this synthetic corpus the ideal model's row gives the truth" if synthetic else " (--set placebo=true)"))
    announce(plan_groups(groups, study is None, sources=sources).describe())  # blocks on disk found by the source where it is read
    if dry_run:
        return []
    out_dir, fig_dir = Path(out_dir or resolve("results/recl")), Path(fig_dir or resolve("figures/recl"))
    return [run_group(group, None, source, out_dir, fig_dir, echo, progress) if not group.settings.train_seeds
            else run_seeds(group, source, out_dir, fig_dir, echo, progress) for group, source in zip(groups, sources)]
