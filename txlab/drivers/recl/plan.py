"""A RECL command's plan before anything runs: the members that train, the token-steps each collects (less the blocks
already on disk), the FLOPs and an estimated time on this machine (txlab.runs.plan), with a smaller size suggested when
it is long on a CPU. The machine is measured only when there is something to compute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from txlab.drivers.recl.groups import Group, Member, resolve_group
from txlab.drivers.recl.report import SEED_SUMMARY
from txlab.measure.collection import Collection
from txlab.measure.losses import Collected, collected_blocks
from txlab.models import hf
from txlab.runs.plan import Plan, add_training, checkpoint_step, evaluation_keys, format_seconds, is_long_on_cpu, machine_gflops, model_counts, quickest, seconds_for, smaller_sizes, vocab_size


def collection_flops(member: Member, collection: Collection, collected: Collected = Collected(0, 0)) -> float | None:
    """Forward FLOPs of one member's loss collection, less the ``collected`` blocks: reading its token-steps (and the
    placebo's) at the mean keys a query of a window attends (the evaluation memory and half a segment, at most half
    the window), and the softmax of the one target each (context, target) pair scores. Nothing left: 0, without
    reading the model's shape."""
    grid, blocks = collection.grid, collection.blocks
    if collection.unit == "word":  # a member's tokens per word are known only once it has read the text
        return None
    main_left = (blocks - collected.blocks) / blocks
    placebo_left = (blocks - collected.placebo) / blocks if collection.placebo else 0.0
    if not main_left and not placebo_left:
        return 0.0
    if member.source:  # read from a fresh start: a query attends half the window on average
        counts = hf.checkpoint_counts(member.source)
        if counts is None:
            return None
        keys = grid[-1] // 2
    else:
        cfg = member.config
        if not vocab_size(cfg):
            return None
        counts, keys = model_counts(cfg), min(evaluation_keys(cfg), grid[-1] // 2)
    targets = collection.n_targets
    scored = targets * len(grid) * main_left + targets * (len(grid) - 1) * placebo_left
    reading = (collection.token_steps() * main_left + collection.placebo_token_steps() * placebo_left) * counts.reading_flops_per_token(keys)
    return reading + scored * counts.output_flops_per_token()


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


def group_plan(groups: Sequence[Group], gflops: float | None, streams: Sequence[str | None] = ()) -> Plan:
    """What the groups will do: the members that train (steps, tokens), what is collected (token-steps, less the blocks
    on disk), and the FLOPs; a group with training seeds once per seed, each seed with its runs counted and its time.
    ``streams``: each group's token stream (sha256 of its split) where its corpus is read already, to find its blocks by."""
    plan = Plan(gflops=gflops)
    for group, stream in zip(groups, [*streams, *[None] * (len(groups) - len(streams))]):
        if not group.settings.train_seeds:
            plan.add(f"group {group.name}:")
            _plan_members(plan, group.resolved[None], group, stream)
            continue
        collected: set[Path] = set()
        for seed, members in group.resolved.items():
            part = Plan(gflops=gflops)
            _plan_members(part, members, group, stream, " for every seed", collected)
            presets = [m for m in members if m.preset]
            to_train = sum(checkpoint_step(m.run_dir) < m.config.train.max_steps for m in presets)
            same = len(members) - len(presets)
            compute = seconds_for(part.flops, gflops)
            plan.add(f"group {group.name}, training seed {seed}: {len(presets)} preset {'run' if len(presets) == 1 else 'runs'} "
                     f"({to_train} to train)"
                     + (f", {same} {'member' if same == 1 else 'members'} the same for every seed" if same else "")
                     + (f", about {format_seconds(compute + part.budget_s)}" if compute is not None else ", its time not known before the corpus is read"),
                     part.flops, part.budget_s)
            plan.lines += part.lines
        plan.add(f"group {group.name}: RECL once per training seed ({', '.join(map(str, group.settings.train_seeds))}), then its spread "
                 f"over the seeds ({SEED_SUMMARY}.csv, .md, .json)")
    return plan


def _plan_members(plan: Plan, members: Sequence[Member], group: Group, stream: str | None, every_seed: str = "",
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
    placebo = f", {c.placebo_token_steps() / 1e6:.1f}M more for the placebo losses ({c.placebo_token_steps() / c.token_steps():.2f}x)" if c.placebo else ""
    again = [m for m in members if collected is not None and m.run_dir in collected]
    if c.unit == "word":
        plan.add(f"  collect losses in words of {len(members)} models on {c.blocks} blocks x {c.block_len} words of {c.split} at contexts "
                 f"{grid[0]}..{grid[-1]} words ({len(grid)} lengths), each read with its own tokenizer from a fresh start: up to "
                 f"{c.token_steps() / 1e6:.1f}M word-steps each, times the member's tokens per word"
                 + (", and each placebo (c, w) by its own window (batched by length)" if c.placebo else "") + f", on {group.settings.device} "
                 "(the words some member cannot score exactly are left out, so fewer are read; nothing is kept between runs)",
                 None)  # never nothing to compute (nothing is kept), and its FLOPs wait for each member's tokens per word
        return
    on_disk = {m.label: collected_blocks(m.run_dir, c, stream) for m in members if m not in again}
    flops = [collection_flops(m, c, on_disk[m.label]) for m in members if m not in again]
    on_hand = [collected_words(on_disk, c)] if on_disk else []
    on_hand += [f"{', '.join(m.label for m in again)} collected with an earlier seed's group"] if again else []
    plan.add(f"  collect losses of {len(members)} models on {c.blocks} blocks x {c.block_len} targets of {c.split} at contexts "
             f"{grid[0]}..{grid[-1]} ({len(grid)} lengths): {c.token_steps() / 1e6:.1f}M token-steps each {method_words(c)}{placebo}, on {group.settings.device} "
             f"({'; '.join(on_hand)})", None if None in flops else sum(flops))
    if collected is not None:
        collected.update(m.run_dir for m in members)


def collected_words(on_disk: dict[str, Collected], collection: Collection) -> str:
    """'already collected: xl151m all 8 blocks, qrnn 3 of 8 (placebo 2 of 8)', or that none is."""
    def words(done: Collected) -> str:
        main = "all" if done.blocks == collection.blocks else f"{done.blocks} of"
        placebo = f" (placebo {done.placebo} of {collection.blocks})" if collection.placebo and done.placebo != done.blocks else ""
        return f"{main} {collection.blocks} blocks{placebo}" if done.blocks else f"none{placebo}"

    if not any(done.blocks or done.placebo for done in on_disk.values()):
        return "none collected yet"
    return "already collected: " + ", ".join(f"{label} {words(done)}" for label, done in on_disk.items())


def plan_groups(groups: Sequence[Group], suggest_smaller: bool = False, gflops: Callable[[str, int], float | None] = machine_gflops,
                streams: Sequence[str | None] = ()) -> Plan:
    """:func:`group_plan` at the device's measured ceiling, measured only when the plan has FLOPs to spend (nothing
    to train or collect takes start-up only, and a dry run then returns in seconds). With ``suggest_smaller`` (a
    command-line group: a study's profile is its own choice) and a plan that takes over an hour on a CPU, also the
    smaller size that would take minutes: the groups resolved again from what was asked at that size, with that
    size's grid and targets where none were given. ``streams``: each group's token stream, where its corpus is read."""
    device = groups[0].settings.device
    plan = group_plan(groups, None, streams)
    if plan.flops != 0:
        plan = group_plan(groups, gflops(device, 0), streams)
    has_presets = any(m.preset for g in groups for listed in g.resolved.values() for m in listed)
    if suggest_smaller and is_long_on_cpu(plan, device) and has_presets:
        candidates = []
        for size in smaller_sizes(groups[0].settings.size):
            smaller = [resolve_group(g.members, replace(g.unset_defaults(), size=size), name=g.name) for g in groups]
            s = smaller[0].settings
            candidates.append((f"--size {size} (grid {s.grid}, {s.blocks} x {s.block_len} targets)", group_plan(smaller, plan.gflops)))
        plan.faster = quickest(candidates)
    return plan
