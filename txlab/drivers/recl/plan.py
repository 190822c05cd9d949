"""A RECL command's plan before anything runs: the members that train, the token-steps each collects (less the blocks
already on disk), the FLOPs and an estimated time on this machine (txlab.runs.plan), with a smaller size suggested when
it is long on a CPU. The machine is measured only when there is something to compute.

In words a member reads its own tokens: the plan tokenizes the drawn blocks with their longest contexts once per
member (:func:`tokens_per_word`, cheap next to reading them) and counts its token-steps as the word-steps times its
tokens per word.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from txlab.data.registry import EOS, TEXT_CORPUS
from txlab.data.tokenizers import load_hf_tokenizer, parse_tokenizer, text_tokenizer
from txlab.data.vocab import Vocab
from txlab.drivers.recl.groups import Group, Member, resolve_group
from txlab.drivers.recl.report import SEED_SUMMARY
from txlab.drivers.recl.sources import Source, WordSource
from txlab.measure.collection import Collection
from txlab.measure.losses import Collected, collected_blocks
from txlab.measure.words import collected_word_blocks
from txlab.models import hf
from txlab.runs.checkpoint import has_checkpoint
from txlab.runs.scored import run_tokenizer
from txlab.runs.plan import Plan, add_training, checkpoint_step, evaluation_keys, format_seconds, is_long_on_cpu, machine_gflops, model_counts, quickest, seconds_for, smaller_sizes, vocab_size


def collection_flops(member: Member, collection: Collection, collected: Collected = Collected(0, 0), per_word: float = 1.0) -> float | None:
    """Forward FLOPs of one member's loss collection, less the ``collected`` blocks: reading its token-steps (and the
    placebo's) at the mean keys a query of a window attends (the evaluation memory and half a segment, at most half
    the window), and the softmax of the tokens each (context, target) pair scores. ``per_word``: in words, the member's
    tokens per word (:func:`tokens_per_word`): its token-steps, window and scored tokens are the words' times as many.
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


def tokens_per_word(member: Member, source: WordSource) -> float | None:
    """The member's tokens per word on the words it reads (each drawn block with its longest context), from one
    tokenization of them by its tokenizer: a checkpoint's, a trained run's, or the one a preset's recipe will train on
    own text with (an hf: tokenizer as it is; characters and words counted by their rule, whatever the vocabulary).
    None for a preset not trained yet on a registry corpus."""
    words, c = source.text.words, source.collection
    spans = [words.text[int(words.starts[s - c.grid[-1]]) : int(words.ends[s + c.block_len - 1])] for s in source.text.draw(c).tolist()]
    if member.source:
        tokenizer = load_hf_tokenizer(member.source)
    elif has_checkpoint(member.run_dir):
        tokenizer = run_tokenizer(member.run_dir)
    elif member.config.data.corpus == TEXT_CORPUS:
        tokenizer = text_tokenizer(parse_tokenizer(member.config.data.tokenizer))
        if tokenizer.kind != "hf":  # a vocabulary of the spans' own symbols: every character, or every word, is one token
            tokenizer.vocab = Vocab(sorted(set("".join(spans))) if tokenizer.kind == "char" else [EOS, *sorted({w for s in spans for w in s.split()} - {EOS})])
    else:
        return None
    n_words = len(spans) * (c.grid[-1] + c.block_len)
    return sum(len(encoding.ids) for encoding in tokenizer.offsets(spans)) / n_words


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


def group_plan(groups: Sequence[Group], gflops: float | None, sources: Sequence[Source | None] = ()) -> Plan:
    """What the groups will do: the members that train (steps, tokens), what is collected (token-steps, less the blocks
    on disk), and the FLOPs; a group with training seeds once per seed, each seed with its runs counted and its time.
    ``sources``: each group's source where it is read already (a corpus in tokens, to find its blocks by; a text in words)."""
    plan = Plan(gflops=gflops)
    for group, stream in zip(groups, [*sources, *[None] * (len(groups) - len(sources))]):
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
        per_word = {m.label: tokens_per_word(m, source) for m in left}
        on_disk = {m.label: Collected(*collected_word_blocks(m.run_dir, source.text, c)) for m in left}
        flops = [None if per_word[m.label] is None else collection_flops(m, c, on_disk[m.label], per_word[m.label]) for m in left]
        known = {label: tau for label, tau in per_word.items() if tau is not None}
        unknown = [label for label, tau in per_word.items() if tau is None]
        reading = (f"{c.token_steps() / 1e6:.2f}M word-steps each{', ' + format(c.placebo_token_steps() / 1e6, '.2f') + 'M more for the placebo (one window per (c, w))' if c.placebo else ''}, "
                   "times each member's tokens per word (" + "; ".join([*(f"{label} {tau:.2f}" for label, tau in known.items()),
                                                                     *([f"{', '.join(unknown)}: known once trained"] if unknown else [])]) + ")")
        what = f"in words of {len(members)} models on {c.blocks} blocks x {c.block_len} words of {c.split} at contexts {grid[0]}..{grid[-1]} words"
    else:
        stream = None if source is None else source.sha256  # its token stream, where the corpus is read
        on_disk = {m.label: collected_blocks(m.run_dir, c, stream) for m in left}
        flops = [collection_flops(m, c, on_disk[m.label]) for m in left]
        placebo = f", {c.placebo_token_steps() / 1e6:.1f}M more for the placebo losses ({c.placebo_token_steps() / c.token_steps():.2f}x)" if c.placebo else ""
        reading = f"{c.token_steps() / 1e6:.1f}M token-steps each {method_words(c)}{placebo}"
        what = f"of {len(members)} models on {c.blocks} blocks x {c.block_len} targets of {c.split} at contexts {grid[0]}..{grid[-1]}"
    on_hand = [collected_words(on_disk, c)] if on_disk else []
    on_hand += [f"{', '.join(m.label for m in again)} collected with an earlier seed's group"] if again else []
    plan.add(f"  collect losses {what} ({len(grid)} lengths): {reading}, on {group.settings.device} ({'; '.join(on_hand)})",
             None if None in flops else sum(flops))
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
    whole = sum(done.blocks == collection.blocks and (not collection.placebo or done.placebo == collection.blocks) for done in on_disk.values())
    return (f"{whole} of {len(on_disk)} members' tables already collected: "
            + ", ".join(f"{label} {words(done)}" for label, done in on_disk.items()))


def plan_groups(groups: Sequence[Group], suggest_smaller: bool = False, gflops: Callable[[str, int], float | None] = machine_gflops,
                sources: Sequence[Source | None] = ()) -> Plan:
    """:func:`group_plan` at the device's measured ceiling, measured only when the plan has FLOPs to spend (nothing
    to train or collect takes start-up only, and a dry run then returns in seconds). With ``suggest_smaller`` (a
    command-line group: a study's profile is its own choice) and a plan that takes over an hour on a CPU, also the
    smaller size that would take minutes: the groups resolved again from what was asked at that size, with that
    size's grid and targets where none were given. ``sources``: each group's source, where it is read."""
    device = groups[0].settings.device
    plan = group_plan(groups, None, sources)
    if plan.flops != 0:
        plan = group_plan(groups, gflops(device, 0), sources)
    has_presets = any(m.preset for g in groups for listed in g.resolved.values() for m in listed)
    if suggest_smaller and is_long_on_cpu(plan, device) and has_presets:
        candidates = []
        for size in smaller_sizes(groups[0].settings.size):
            smaller = [resolve_group(g.members, replace(g.unset_defaults(), size=size), name=g.name) for g in groups]
            s = smaller[0].settings
            candidates.append((f"--size {size} (grid {s.grid}, {s.blocks} x {s.block_len} targets)", group_plan(smaller, plan.gflops)))
        plan.faster = quickest(candidates)
    return plan
