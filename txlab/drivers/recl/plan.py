"""A RECL command's plan before anything runs: the members that train, the token-steps each collects (less the blocks
already on disk), the FLOPs and an estimated time on this machine (txlab.runs.plan), with a smaller size suggested when
it is long on a CPU. The machine is measured only when there is something to compute.

In words a member reads its own tokens: the plan tokenizes the drawn blocks with their longest contexts once per
member (txlab.drivers.recl.sources.WordSource.tokens_per_word, cheap next to reading them) and counts its token-steps as the word-steps times its
tokens per word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from txlab.drivers.recl.groups import Group, Member, member_span, resolve_group
from txlab.drivers.recl.report import SEED_SUMMARY
from txlab.drivers.recl.sources import Source, WordSource
from txlab.measure.collection import Collection
from txlab.measure.losses import Collected, collected_blocks
from txlab.measure.words import collected_word_blocks
from txlab.models import hf
from txlab.runs.capacity import FLOAT_BYTES, step_bytes
from txlab.runs.evaluate import evaluation_context
from txlab.runs.plan import (Plan, Work, add_training, checkpoint_step, evaluation_keys, format_seconds, is_long, machine_gflops,
                             memory_line, model_counts, quickest, smaller_sizes, vocab_size)


def collection_flops(member: Member, collection: Collection, collected: Collected = Collected(0, 0), per_word: float = 1.0) -> float | None:
    """Forward FLOPs of one member's loss collection, less the ``collected`` blocks: reading its token-steps (and the
    placebo's) at the mean keys a query of a window attends (the evaluation memory and half a segment, at most half
    the window), and the softmax of the tokens each (context, target) pair scores. ``per_word``: in words, the member's
    tokens per word (WordSource.tokens_per_word): its token-steps, window and scored tokens are the words' times as many.
    Nothing left: 0, without reading the model's shape."""
    grid, blocks = collection.grid, collection.blocks
    main_left = (blocks - collected.blocks) / blocks
    placebo_left = (blocks - collected.placebo) / blocks if collection.placebo else 0.0
    if not main_left and not placebo_left:
        return 0.0
    window = int(grid[-1] * per_word)
    if member.source:  # read from a fresh start: a query attends half the window on average
        counts = hf.checkpoint_counts(member.source)
        if counts is None:
            return None
        keys = window // 2
    else:
        cfg = member.config
        if not vocab_size(cfg):
            return None
        counts, keys = model_counts(cfg), min(evaluation_keys(cfg), window // 2)
    targets = collection.n_targets
    scored = (targets * len(grid) * main_left + targets * (len(grid) - 1) * placebo_left) * per_word
    steps = (collection.token_steps() * main_left + collection.placebo_token_steps() * placebo_left) * per_word
    return steps * counts.reading_flops_per_token(keys) + scored * counts.output_flops_per_token()


LOGITS_BYTES = 2**22 * FLOAT_BYTES
"""The log-probabilities a collection holds at once: txlab.measure.reading.target_nll takes the softmax ~4M at a time."""


def collection_precision(member: Member, precision: str) -> str:
    """What a member computes its losses in: a Hugging Face member the group's ``precision``, a txlab run its own eval.precision."""
    return precision if member.source else member.config.eval.precision


def window_tokens(member: Member, collection: Collection, per_word: float | None = 1.0) -> int:
    """Tokens of the longest window the member reads: the longest context (and a stride's run), at most its position table."""
    grid = collection.grid
    longest = grid[-1] + (collection.stride_at(grid[-1]) - 1 if collection.stride is not None else 0)
    tokens = int(longest * (per_word or 1.0))
    cap = hf.trained_length(member.source) if member.source and has_hard_window(member) else None
    return min(tokens, cap) if cap else tokens


def has_hard_window(member: Member) -> bool:
    """Whether the member reads at most a window of its own (learned absolute positions: GPT-2's table, the vanilla
    Transformer's), so that a longer context is capped, not extrapolated."""
    if member.source:
        return hf.saved_config(member.source).get("model_type") in hf.LEARNED_ABSOLUTE
    return model_counts(member.config).max_context is not None


def collection_bytes(member: Member, collection: Collection, batch_size: int, precision: str, per_word: float | None = 1.0) -> int | None:
    """A lower bound on the bytes a member's collection holds at once: its weights, a batch of its longest windows and the
    log-probabilities (:data:`LOGITS_BYTES`). A Hugging Face member's weights and states in its precision (a window's last
    hidden states are kept whole); a txlab run's step of its evaluation segment (txlab.runs.capacity.step_bytes). None
    where the model's shape is not known yet."""
    if member.source:
        counts, config = hf.checkpoint_counts(member.source), hf.saved_config(member.source)
        width = next((config[key] for key in ("hidden_size", "n_embd", "d_model") if key in config), 0)
        if counts is None:
            return None
        value_bytes = FLOAT_BYTES if precision == "fp32" else FLOAT_BYTES // 2
        return counts.parameters * value_bytes + batch_size * window_tokens(member, collection, per_word) * width * value_bytes + LOGITS_BYTES
    cfg = member.config
    n_token = vocab_size(cfg)
    if not n_token:
        return None
    tgt_len, context = evaluation_context(cfg.model, cfg.eval)
    return step_bytes(replace(cfg.model, n_token=n_token), batch_size, tgt_len, context.mem_len, training=False, precision=cfg.eval.precision)


def extrapolation(member: Member, collection: Collection, per_word: float | None = 1.0) -> dict | None:
    """{"trained_positions": N, "contexts": [...]}: the grid's contexts past the positions a member was trained on (a
    Hugging Face checkpoint's position table, a txlab run's training span), for a member that reads them as they are; None
    when it reads none (a hard window, as GPT-2's or the vanilla Transformer's, caps them instead; a recurrent run has no span)."""
    span = member_span(member)
    beyond = [c for c in collection.grid if span and c * (per_word or 1.0) > span]
    return {"trained_positions": span, "contexts": beyond} if beyond and not has_hard_window(member) else None


def method_words(collection: Collection) -> str:
    """How the plan says a main table is computed: the method, and under ``auto`` what the other would read; with a
    stride, that contexts are strided, by how much, and what the exact method would read."""
    method = collection.main_method()
    if method == "strided":
        exact = replace(collection, stride=None)
        return (f"strided, {collection.stride_words()} (contexts strided: each in [c, c + s), not exactly c; the time below counts these reads; exact contexts would read "
                f"{exact.token_steps() / 1e6:.1f}M by {'the window method' if exact.main_method() == 'window' else 'one window per (c, t)'})")
    if collection.method != "auto":
        return f"{'by the window method' if method == 'window' else 'one window per (c, t)'} (as asked)"
    if method == "naive":
        return f"one window per (c, t) (auto: the window method would read {replace(collection, method='window').token_steps() / 1e6:.1f}M)"
    return (f"by the window method (auto: one window per (c, t) would read {replace(collection, method='naive').token_steps() / 1e6:.1f}M, "
            "and reads any member that is not prefix-causal)")


def group_plan(groups: Sequence[Group], ceilings: dict[str, float | None], sources: Sequence[Source | None] = ()) -> Plan:
    """What the groups will do: the members that train (steps, tokens), what is collected (token-steps, less the blocks
    on disk), and the FLOPs; a group with training seeds once per seed, each seed with its runs counted and its time.
    ``sources``: each group's source where it is read already (a corpus in tokens, to find its blocks by; a text in words)."""
    device = groups[0].settings.device
    plan = Plan(ceilings=ceilings, device=device)
    for group, stream in zip(groups, [*sources, *[None] * (len(groups) - len(sources))]):
        if not group.settings.train_seeds:
            plan.add(f"group {group.name}:")
            _plan_members(plan, group.resolved[None], group, stream)
            continue
        collected: set[Path] = set()
        for seed, members in group.resolved.items():
            part = Plan(ceilings=ceilings, device=device)
            _plan_members(part, members, group, stream, " for every seed", collected)
            presets = [m for m in members if m.preset]
            to_train = sum(checkpoint_step(m.run_dir) < m.config.train.max_steps for m in presets)
            same = len(members) - len(presets)
            compute = part.compute_seconds
            line = (f"group {group.name}, training seed {seed}: {len(presets)} preset {'run' if len(presets) == 1 else 'runs'} "
                    f"({to_train} to train)"
                    + (f", {same} {'member' if same == 1 else 'members'} the same for every seed" if same else "")
                    + (f", about {format_seconds(compute + part.budget_s)}" if compute is not None else ", its time not known before the corpus is read"))
            plan.add_parts(line, list(part.work.items()) if part.flops is not None else [(Work(), None)], part.budget_s)
            plan.lines += part.lines
        plan.add(f"group {group.name}: RECL once per training seed ({', '.join(map(str, group.settings.train_seeds))}), then its spread "
                 f"over the seeds ({SEED_SUMMARY}.csv, .md, .json)")
    return plan


def _plan_members(plan: Plan, members: Sequence[Member], group: Group, source: Source | None, every_seed: str = "",
                  collected: set[Path] | None = None) -> None:
    """One group's lines of the plan: each member trained or used as it is, then the loss collection, less what is on disk.
    ``collected``: the runs whose losses an earlier seed's group of the plan collects (not counted again), updated."""
    for m in members:
        if m.preset:
            add_training(plan, m.label, m.config, m.run_dir)
        elif m.source:
            plan.add(f"  {m.label}: Hugging Face checkpoint {m.source}, used as it is{every_seed}")
        else:
            plan.add(f"  {m.label}: run directory {m.run_dir}, used as it is{every_seed}")
    c, grid = group.collection, group.collection.grid
    again = [m for m in members if collected is not None and m.run_dir in collected]
    left = [m for m in members if m not in again]
    if isinstance(source, WordSource):
        per_word = {m.label: source.tokens_per_word(m) for m in left}
        on_disk = {m.label: Collected(*collected_word_blocks(m.run_dir, source.words, c)) for m in left}
        flops = [None if per_word[m.label] is None else collection_flops(m, c, on_disk[m.label], per_word[m.label]) for m in left]
        known = {label: tau for label, tau in per_word.items() if tau is not None}
        unknown = [label for label, tau in per_word.items() if tau is None]
        reading = (f"{c.token_steps() / 1e6:.2f}M word-steps each{', ' + format(c.placebo_token_steps() / 1e6, '.2f') + 'M more for the placebo (one window per far span and first near word)' if c.placebo else ''}, "
                   "times each member's tokens per word (" + "; ".join([*(f"{label} {tau:.2f}" for label, tau in known.items()),
                                                                     *([f"{', '.join(unknown)}: known once trained"] if unknown else [])]) + ")")
        what = f"in words of {len(members)} models on {c.blocks} blocks x {c.block_len} words of {c.split} at contexts {grid[0]}..{grid[-1]} words"
    else:
        stream = None if source is None else source.sha256  # its token stream, where the corpus is read
        on_disk = {m.label: collected_blocks(m.run_dir, c, stream) for m in left}
        flops = [collection_flops(m, c, on_disk[m.label]) for m in left]
        per_word = dict.fromkeys((m.label for m in left), 1.0)
        placebo = f", {c.placebo_token_steps() / 1e6:.1f}M more for the placebo losses ({c.placebo_token_steps() / c.token_steps():.2f}x)" if c.placebo else ""
        reading = f"{c.token_steps() / 1e6:.1f}M token-steps each {method_words(c)}{placebo}"
        what = f"of {len(members)} models on {c.blocks} blocks x {c.block_len} targets of {c.split} at contexts {grid[0]}..{grid[-1]}"
    on_hand = [collected_words(on_disk, c)] if on_disk else []
    on_hand += [f"{', '.join(m.label for m in again)} collected with an earlier seed's group"] if again else []
    settings = group.settings
    plan.add_parts(f"  collect losses {what} ({len(grid)} lengths): {reading}, on {settings.device} ({'; '.join(on_hand)})",
                   [(Work(c.main_method(), collection_precision(m, settings.precision)), f) for m, f in zip(left, flops)])
    reading_members = [m for m, f in zip(left, flops) if f != 0]
    if reading_members:
        plan.add("  " + memory_line({f"{m.label}, {settings.batch_size} windows of {window_tokens(m, c, per_word[m.label]):,} tokens":
                                      collection_bytes(m, c, settings.batch_size, settings.precision, per_word[m.label]) for m in reading_members},
                                     settings.device, "lower --set batch_size, load Hugging Face members in bf16 (--set precision=bf16), or use a device with more memory"))
    for m in reading_members:
        beyond = extrapolation(m, c, per_word[m.label])
        if beyond:
            plan.add(f"  extrapolation: {m.label} at contexts {', '.join(map(str, beyond['contexts']))} (past the {beyond['trained_positions']:,} "
                     "positions it was trained on): what it does with more context than it ever saw")
    if collected is not None:
        collected.update(m.run_dir for m in members)


STRIDE_SUGGESTED = 0.125
"""The stride a long plan suggests, as a fraction of c: s = c / 8, where recl.md says a stride pays (contexts grow by under 1/8)."""


def collected_words(on_disk: dict[str, Collected], collection: Collection) -> str:
    """'already collected: xl151m all 8 blocks, qrnn 3 of 8 (placebo 2 of 8)', or that none is."""
    def words(done: Collected) -> str:
        main = "all" if done.blocks == collection.blocks else f"{done.blocks} of"
        placebo = f" (placebo {done.placebo} of {collection.blocks})" if collection.placebo and done.placebo != done.blocks else ""
        return f"{main} {collection.blocks} blocks{placebo}" if done.blocks else f"none{placebo}"

    if not any(done.blocks or done.placebo for done in on_disk.values()):
        return "none collected yet"
    whole = sum(done.blocks == collection.blocks and (not collection.placebo or done.placebo == collection.blocks) for done in on_disk.values())
    return (f"{whole} of {len(on_disk)} members' tables already collected: "
            + ", ".join(f"{label} {words(done)}" for label, done in on_disk.items()))


def plan_groups(groups: Sequence[Group], suggest_smaller: bool = False, gflops: Callable[[str, int, str], float | None] = machine_gflops,
                sources: Sequence[Source | None] = ()) -> Plan:
    """:func:`group_plan` at the device's ceilings measured now, measured only when the plan has FLOPs to spend (nothing
    to train or collect takes start-up only, and a dry run then returns in seconds). A plan over an hour also names
    what would take less (:func:`quicker_groups`): with ``suggest_smaller`` (a command-line group: a study's profile is
    its own choice) on a CPU, the smaller size; on any device a stride or fewer blocks. ``sources``: each group's
    source, where it is read."""
    plan = group_plan(groups, {}, sources)
    if plan.flops != 0:
        measured = plan.measure(gflops)
        plan = group_plan(groups, measured.ceilings, sources)
        plan.others = measured.others
    if is_long(plan):
        plan.faster = quickest(quicker_groups(groups, plan, suggest_smaller))
    return plan


def quicker_groups(groups: Sequence[Group], plan: Plan, suggest_smaller: bool) -> list[tuple[str, Plan]]:
    """Settings that read less, each with its plan: with ``suggest_smaller``, on a CPU and with preset members, each
    smaller size (the groups resolved again from what was asked at that size, with that size's grid and targets where
    none were given); in tokens without a stride, a stride of c / 8 (contexts in [c, 1.125 c), for every member that
    reads one); then half the blocks, a quarter, ..., down to one."""
    settings = groups[0].settings
    candidates = []
    has_presets = any(m.preset for g in groups for listed in g.resolved.values() for m in listed)
    if suggest_smaller and has_presets and torch.device(settings.device).type == "cpu":
        for size in smaller_sizes(settings.size):
            smaller = [resolve_group(g.members, replace(g.unset_defaults(), size=size), name=g.name) for g in groups]
            s = smaller[0].settings
            candidates.append((f"--size {size} (grid {s.grid}, {s.blocks} x {s.block_len} targets)", group_plan(smaller, plan.ceilings)))
    if settings.unit == "token" and settings.stride is None:
        strided = [resolve_group(g.members, replace(g.settings, stride=STRIDE_SUGGESTED), name=g.name) for g in groups]
        candidates.append((f"--set stride={STRIDE_SUGGESTED} (contexts strided: each in [c, {1 + STRIDE_SUGGESTED} c))", group_plan(strided, plan.ceilings)))
    blocks = settings.blocks // 2
    while blocks >= 1:
        fewer = [resolve_group(g.members, replace(g.settings, blocks=blocks), name=g.name) for g in groups]
        candidates.append((f"--set blocks={blocks} ({blocks * settings.block_len:,} targets: wider intervals)", group_plan(fewer, plan.ceilings)))
        blocks //= 2
    return candidates
