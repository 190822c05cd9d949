"""`txlab recl`: RECL of a group of models, from presets (trained when missing) or run directories.

One call of :func:`recl_groups` does what the command does, for each group:

1. resolve the members: an existing directory is a run used as-is; anything else is a preset name,
   resolved at the size and corpus asked for to ``<models root>/<preset>-<size>-<corpus>/``;
2. train the presets that have no checkpoint there (unless told not to: then it is an error that
   names the missing runs and the command that trains them);
3. collect per-token losses at the grid of context lengths on one shared set of target blocks
   (txlab.measure.losses: resumable, refused when the members read different token streams);
4. compute every member's RECL at each r with a block-bootstrap interval (txlab.analysis.recl), beside it the
   placebo-aware RECL when placebo losses were collected, and on a synthetic corpus the RECL of the
   ideal model that sees exactly c tokens (the ground truth);
5. write the Table 8 table (CSV, Markdown), the Figure 3 and Figure 4 points (CSV) under
   ``<out_dir>/<group>/`` and the figures (PNG, PDF) under ``<fig_dir>/<group>/``.

With training seeds (``train_seeds``, :func:`run_seeds`) each preset member trains once per seed into
``<preset>-<size>-<corpus>-seed<s>/``, steps 1 to 5 run once per seed's group (its preset runs of that
seed, its run directories and Hugging Face members as they are) into ``<group>/seed-<s>/``, and
``<group>/table8-seeds.{csv,md,json}`` give each model's RECL per seed and their spread (txlab.analysis.table8.seed_rows).

A study file (studies/table8.yaml) names groups and profiles of :class:`ReclSettings`. As in every
study driver (txlab.drivers), the profile is read by :func:`txlab.study.read_study` and the command
line's options and ``--set`` overrides go through :func:`txlab.config.override_settings`, the strict
path of run configs (:func:`command_line`, where ``--set`` keys under model., data., train. or eval.
are routed to the preset members instead: :data:`MEMBER_SECTIONS`). A setting nobody gave stays unset
(None) until :func:`with_defaults` gives it the value of the size and the members. Each group's members
are resolved once (:func:`resolve_group`, a :class:`Member` each) and carried through the plan and the
run. Each group's result is a :class:`GroupResult` (a :class:`SeedsResult` over training seeds).

The module carries its command's name; ``txlab.analysis.recl``, the pure-numpy metric it computes with, has
the plain one.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from txlab import devices
from txlab.analysis import recl, recl_figures, table8
from txlab.analysis.figures import models_in_words
from txlab.analysis.learned import read_restarts
from txlab.config import NON_NEGATIVE, POSITIVE, PRECISIONS, SEED, DataConfig, Range, RunConfig, override_settings, setting, to_dict
from txlab.data import corpora
from txlab.data.corpora import CORPORA, Corpus, load_corpus
from txlab.data.synthetic import VARIANTS as SYNTHETIC
from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import write_json_atomic, write_text_atomic
from txlab.measure.losses import GroupLosses, LossTable, collect_model_losses, collect_run_losses, load_group_losses, sample_blocks
from txlab.models import hf
from txlab.models.interface import Context
from txlab.presets import PRESETS, SIZES
from txlab.runs.checkpoint import has_checkpoint, saved_config
from txlab.runs.launch import LAUNCHERS, SlurmSettings, Task, check_jobs, check_launcher, run_jobs
from txlab.runs.plan import Plan, add_training, checkpoint_step, evaluation_keys, format_seconds, is_long_on_cpu, machine_gflops, model_counts, quickest, seconds_for, smaller_sizes, vocab_size
from txlab.runs.train import configuration_changes, train
from txlab.runs.zoo import run_config, run_dir
from txlab.study import entry, read_study
from txlab.workspace import MODELS, resolve

FIGURE3_R = 0.1
"""The paper's Figure 3 shows the gains at r = 0.1."""


PAPER_COLLECTION = {"grid": "100:1000:100", "blocks": 20, "block_len": 500}
"""The paper's grid and targets (Table 8): what a group of paper-size presets is scored on unless told otherwise."""

SMALL_COLLECTION = {"blocks": 8, "block_len": 250}
"""Targets of smaller models, as in the cpu profile of studies/table8.yaml: 2,000 targets in 8 blocks."""

MEMBER_SECTIONS = ("model", "data", "train", "eval")
"""A command-line override whose key starts with one of these (``train.max_steps=400``) configures the
preset members (``sets``); any other (``blocks=8``, ``slurm.partition=gpu``) sets :class:`ReclSettings`."""


@dataclass(frozen=True)
class ReclSettings:
    """Everything a RECL run depends on besides its members (the study profile's keys, ``--set`` on the command line).

    A setting whose default is None is unset until given: :func:`with_defaults` gives it its value from
    the size and the members, in that one place."""

    size: str = setting("cpu", "Size of preset members.", SIZES)
    data: str = setting("", "Corpus of preset members (empty: each preset's own).")
    text: str = setting("", "Own text every member is scored on (and preset members train on): a UTF-8 file cut into train/valid/test, "
                        "or a folder of split files (docs/data.md).")
    tokenizer: str = setting("", "How the own text becomes tokens: char, word or hf:PATH_OR_HUB_ID (empty: the first Hugging Face "
                             "member's own tokenizer, else char).")
    sets: list[str] = setting([], "Config overrides (key=value) for preset members: where their runs live and how missing ones train "
                              "(on the command line: --set train.max_steps=400, any key under model., data., train. or eval.).", overrides=True)
    member_sets: list[str] = setting([], "Config overrides for one preset member, after sets: <preset>:<key>=<value> (e.g. "
                                     "xl151m:model.clamp_len=12, a recipe only the transformer has).", overrides=True)
    train_seeds: list[int] = setting([], "Training seeds of the preset members (--train-seeds 0,1,2): one run per seed (its train.seed, its "
                                     "directory <preset>-<size>-<corpus>-seed<s>), one group and one RECL per seed, and their spread "
                                     "(empty: one run per preset, named without a seed, as trained by train.seed).", valid=SEED)
    rs: list[float] = setting(list(recl.DEFAULT_RS), "Fractions of the hardest targets RECL is computed at (--r).", valid=Range(0, 1, low_open=True))
    grid: str | None = setting(None, "Context lengths: start:stop:step (stop included) or a comma-separated list. Unset: the paper's "
                               f"{PAPER_COLLECTION['grid']} at size paper, at a smaller size about ten lengths up to the members' longest "
                               "training span (a model cannot be expected to use more context than it ever saw).")
    blocks: int | None = setting(None, f"Contiguous target blocks drawn from the split (unset: {PAPER_COLLECTION['blocks']} at size paper, "
                                 f"{SMALL_COLLECTION['blocks']} at a smaller size).", valid=POSITIVE)
    block_len: int | None = setting(None, f"Targets per block, also the bootstrap's block (unset: {PAPER_COLLECTION['block_len']} at size "
                                    f"paper, {SMALL_COLLECTION['block_len']} at a smaller size).", valid=POSITIVE)
    split: str = setting("valid", "Split the targets are drawn from.", ("train", "valid", "test"))
    seed: int = setting(0, "Draws the target blocks and the bootstrap resamples.", valid=SEED)
    n_boot: int = setting(200, "Bootstrap resamples for the confidence intervals (0: none).", valid=NON_NEGATIVE)
    placebo: bool | None = setting(None, "Also collect placebo losses (extra context from far away): the table adds a placebo-aware RECL "
                                   "beside the paper's and marks each RECL resting on a step that does not beat its placebo. Unset: on, "
                                   "except on a synthetic corpus, whose ideal model shows what context holds (false: off, and noise in "
                                   "the losses can then read as context).")
    batch_size: int = setting(16, "Windows per forward pass.", valid=POSITIVE)
    device: str = setting("cpu", "Torch device of the loss collection (cpu, cuda, cuda:1, ...).")
    precision: str = setting("fp32", "Hugging Face members: the precision of their weights and computation (bf16 halves the memory on a "
                             "GPU; the log-softmax is always taken in fp32, but reduced-precision noise can read as gain). txlab runs are "
                             "read in their own eval.precision.", PRECISIONS)
    train_missing: bool = setting(True, "Train preset members that have no checkpoint, or resume one interrupted under the same recipe "
                                  "(false: refuse instead).")
    allow_unequal: bool = setting(False, "Score a group whose preset members were not all trained to their recipe's steps (else refused): "
                                  "RECL compares models, and a model trained less than its recipe is not the model the group names.")
    models_root: str = setting(str(MODELS), "Where preset members live: <models_root>/<preset>-<size>-<corpus>/ (a relative path in a "
                               "study file is read under the home, see txlab.workspace; one given on the command line, from the current directory).")
    launcher: str = setting("local", "How missing members train and each member's losses are collected: local (here, one after the "
                            "other) or slurm (one submitit job each, waited for).", LAUNCHERS)
    slurm: SlurmSettings = setting(SlurmSettings, "The jobs' settings with launcher slurm (slurm.partition, slurm.time_min, ...).")

    def context_grid(self) -> tuple[int, ...]:
        if self.grid is None:
            raise ValueError("the grid is unset until with_defaults gives it its value")
        return parse_grid(self.grid)


@dataclass(frozen=True)
class Member:
    """One member of a group, resolved once: what it is, where its run lives, and how it was (or will be) trained."""

    label: str
    """How tables and figures name it: the preset name, the run directory's name, or the checkpoint folder's name."""
    run_dir: Path
    """The run directory; for a Hugging Face member, the folder its losses and record go to."""
    config: RunConfig | None
    """A preset member's recipe (what its run trains with), a run directory's saved configuration; None for a
    Hugging Face member."""
    preset: bool = False
    """A preset: trained when its run is missing (a run directory or a Hugging Face member is used as it is)."""
    source: str = ""
    """A Hugging Face member's checkpoint (folder or Hub id); empty for txlab runs."""


@dataclass(frozen=True)
class Group:
    """One group as the command scores it: its members as named, its settings with nothing unset, and each
    member resolved once per training seed."""

    name: str
    members: list[str]
    """As the study or the command line names them: presets, run directories, hf:SOURCE."""
    settings: ReclSettings
    resolved: dict[int | None, list[Member]]
    """Training seed (None for a group without ``settings.train_seeds``) -> the members of that seed's group:
    its preset runs of that seed, its run directories and Hugging Face members as they are."""
    asked: ReclSettings
    """The settings as given (study profile and command line), unset ones still None: what the group is
    resolved from, and resolved from again at another size."""

    @property
    def seeds(self) -> list[int | None]:
        return list(self.resolved)

    def folder(self, train_seed: int | None) -> Path:
        """Where one seed's tables and figures go under the output folders: ``<name>``, or ``<name>/seed-<s>``."""
        return Path(self.name) if train_seed is None else Path(self.name) / f"seed-{train_seed}"


def parse_grid(spec: str) -> tuple[int, ...]:
    """'100:1000:100' -> (100, 200, ..., 1000); '16,32,64' -> (16, 32, 64)."""
    try:
        if ":" in spec:
            start, stop, step = (int(x) for x in spec.split(":"))
            if step < 1:
                raise ValueError
            grid = tuple(range(start, stop + 1, step))
        else:
            grid = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise TxlabError(f"a grid is start:stop:step (stop included) or a comma-separated list of lengths, got {spec!r}") from None
    if len(grid) < 2 or grid[0] < 1 or any(b <= a for a, b in zip(grid, grid[1:])):
        raise TxlabError(f"the grid {spec!r} must give at least two strictly ascending positive lengths, got {list(grid)}")
    return grid


def parse_rs(items: Sequence[str]) -> list[float] | None:
    """--r's values, ['0.1', '0.5,1'] -> [0.1, 0.5, 1.0]; None when none are given (their range is
    checked with the other settings, by :func:`~txlab.config.override_settings`)."""
    try:
        rs = [float(x) for item in items for x in item.split(",") if x.strip()]
    except ValueError:
        raise TxlabError(f"r must be numbers in (0, 1], e.g. --r 0.1 --r 0.5 or --r 0.1,0.5; got {list(items)}") from None
    return rs or None


@dataclass(frozen=True)
class ReclStudy:
    """A RECL study file (studies/table8.yaml) read at one profile."""

    name: str
    groups: dict[str, list[str]]
    """Group name -> its members (presets or run directories)."""
    settings: ReclSettings


def _groups_problem(groups: dict[str, list[str]]) -> str:
    empty = [name for name, members in groups.items() if not members]
    return f"group {empty[0]!r} has no members" if empty else ""


@dataclass(frozen=True)
class ReclStudyFile:
    """A RECL study file's keys besides ``profiles`` (txlab.study.read_section checks them)."""

    name: str = entry("", "text (the prefix of the output folders)")
    groups: dict[str, list[str]] = entry({}, "a mapping of group names to lists of presets or run directories", _groups_problem)


def load_study(path: str | Path, profile: str) -> ReclStudy:
    """A RECL study file's groups and the profile's settings."""
    study, settings = read_study(path, ReclStudyFile, profile, ReclSettings())
    if not study.groups:
        raise TxlabError(f"{path}: 'groups' must map group names to lists of presets or run directories")
    return ReclStudy(study.name or Path(path).stem, study.groups, settings)


def command_line(settings: ReclSettings, options: dict[str, Any] | None, sets: Sequence[str]) -> ReclSettings:
    """The command line over ``settings`` (the study profile's, or the defaults): its options (setting name ->
    value, None meaning 'not given'), then its ``--set`` overrides, through :func:`~txlab.config.override_settings`.
    Here, and only here, an override is routed by its key: one under a section of a run's configuration
    (:data:`MEMBER_SECTIONS`) configures the preset members, and together they replace the profile's ``sets``;
    any other sets a setting."""
    members = [s for s in sets if "." in s.split("=", 1)[0] and s.split(".", 1)[0].strip() in MEMBER_SECTIONS]
    return override_settings(settings, {**(options or {}), "sets": members or None}, [s for s in sets if s not in members])


def resolve_groups(members: Sequence[str], study: str | Path | None, profile: str, name: str | None,
                   options: dict[str, Any] | None = None, sets: Sequence[str] = ()) -> list[Group]:
    """The groups one command runs: the study's (all, or those ``members`` name) or ``members`` as one group,
    each resolved by :func:`resolve_group` from the study's profile (or the defaults) under the command
    line's ``options`` and ``sets`` (:func:`command_line`)."""
    if study is None:
        if not members:
            raise TxlabError("name the group's members (presets or run directories), e.g. `txlab recl --group xl151m qrnn lstm`, or give --study")
        numbers = [m for m in members if _is_number(m)]
        if numbers:
            raise TxlabError(f"{numbers[0]!r} is not a model: give each r its own option (--r 0.1 --r 0.5) or separate them by commas (--r 0.1,0.5)")
        usual = ReclSettings()
        group = resolve_group(list(members), command_line(_at_home(usual), options, sets))
        named = name or default_group_name(members, group.settings) + collection_suffix(group, usual)
        return [replace(group, name=named)]
    chosen_study = load_study(study, profile)
    asked = command_line(_at_home(chosen_study.settings), options, sets)
    chosen = list(members) or list(chosen_study.groups)
    for group in chosen:
        if group not in chosen_study.groups:
            raise did_you_mean(group, chosen_study.groups, f"group in {study}")
    corpus = f"-{asked.data}" if asked.data else f"-text-{Path(asked.text).stem}" if asked.text else ""
    groups = []
    for group in chosen:
        resolved = resolve_group(chosen_study.groups[group], asked)
        named = name if name and len(chosen) == 1 else f"{chosen_study.name}-{group}-{profile}{corpus}{collection_suffix(resolved, chosen_study.settings)}"
        groups.append(replace(resolved, name=named))
    return groups


def resolve_group(members: list[str], asked: ReclSettings, name: str = "") -> Group:
    """A group's members resolved once per training seed (:func:`resolve_member`) and checked against each
    other (:func:`check_members`), and its settings with every unset one given its value (:func:`with_defaults`)."""
    settings = settle_tokenizer(asked, members)
    for item in settings.member_sets:  # a study's profile serves every group: a preset the group lacks is left alone
        named = item.partition(":")[0]
        if named not in PRESETS:
            raise did_you_mean(named, PRESETS, "preset in member_sets")
    resolved = {seed: [resolve_member(m, settings, seed) for m in members] for seed in training_seeds(settings, members)}
    for listed in resolved.values():
        check_members(listed)
        check_recipes(listed)
    return Group(name, members, with_defaults(settings, next(iter(resolved.values()))), resolved, asked)


def member_overrides(settings: ReclSettings, members: Sequence[str]) -> dict[str, list[str]]:
    """``member_sets`` by the preset they name, for the presets among ``members`` (each item checked for its form)."""
    by_member: dict[str, list[str]] = {}
    for item in settings.member_sets:
        member, sep, override = item.partition(":")
        if not sep or "=" not in override:
            raise TxlabError(f"member_sets: {item!r} must look like <preset>:<key>=<value>, e.g. xl151m:model.clamp_len=12")
        by_member.setdefault(member, []).append(override)
    return {member: sets for member, sets in by_member.items() if member in members}


def settle_tokenizer(settings: ReclSettings, members: Sequence[str]) -> ReclSettings:
    """Own text without a tokenizer is read by the first Hugging Face member's own tokenizer, else by characters."""
    if not settings.text:
        if settings.tokenizer:
            raise TxlabError("--tokenizer says how own text is read: give the text with --text FILE_OR_DIR")
        return settings
    if settings.data:
        raise TxlabError(f"give a corpus (--data {settings.data}) or own text (--text {settings.text}), not both")
    if settings.tokenizer:
        return settings
    own = next((m for m in members if hf.is_hf_spec(m) and hf.load_tokenizer(hf.hf_source(m)) is not None), None)
    return replace(settings, tokenizer=own or "char")


def _at_home(settings: ReclSettings) -> ReclSettings:
    return replace(settings, models_root=str(resolve(settings.models_root)))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def corpus_tag(settings: ReclSettings) -> str:
    """'<size>-<corpus>' (or just the size when each preset keeps its own corpus)."""
    if settings.text:
        return f"{settings.size}-text-{Path(settings.text).stem}"
    return f"{settings.size}-{settings.data}" if settings.data else settings.size


NAMED_COLLECTION = ("grid", "blocks", "block_len", "split", "seed", "train_seeds")
"""Settings that change which losses a group's tables are computed from (the training seeds: which
runs), and so its name when they differ from the study's (or, on the command line, from the size's
usual collection): '-train_seeds-0-1-2' keeps a group over seeds apart from the single runs' tables.
Member overrides (train.max_steps, ...) are not among them: the group's checks compare members' training."""

def collection_suffix(group: Group, usual: ReclSettings) -> str:
    """'' for the usual collection, else what differs, e.g. '-grid-20-480-20-blocks-16': a group scored
    on another grid or other targets gets its own folders, so its tables never replace the usual ones,
    and the same command finds its own again. ``usual``: the study profile's settings, or the defaults
    (resolved for the group's size and members as its own are)."""
    baseline = with_defaults(replace(group.settings, **{key: getattr(usual, key) for key in NAMED_COLLECTION}), group.resolved[group.seeds[0]])
    parts = [f"{key}-{getattr(group.settings, key)}" for key in NAMED_COLLECTION if getattr(group.settings, key) != getattr(baseline, key)]
    return "".join(f"-{re.sub(r'[^A-Za-z0-9_.]+', '-', part).strip('-')}" for part in parts)


def default_group_name(members: Sequence[str], settings: ReclSettings) -> str:
    """Members joined by '+', then size and corpus: 'xl151m+qrnn+lstm-cpu-synthetic-short'."""
    return "+".join(Path(hf.hf_source(m) if hf.is_hf_spec(m) else m).name for m in members) + f"-{corpus_tag(settings)}"


def resolve_member(member: str, settings: ReclSettings, train_seed: int | None = None) -> Member:
    """An existing directory is a run used as-is; a preset name resolves to its zoo directory; ``hf:SOURCE``
    is a Hugging Face checkpoint, whose losses go to ``<models_root>/hf/<name>-<fingerprint>/``.

    With a ``train_seed`` a preset's run trains with that seed in its own directory, the zoo's name
    ending ``-seed<s>`` (seed 0 too: the name without a seed says nothing of the seed its run was trained
    with, since ``--set train.seed=3`` trains into it as well); the other members are the same for every seed."""
    if hf.is_hf_spec(member):
        source = hf.hf_source(member)  # checked: a folder with a config.json, or a Hub id
        label = Path(source.rstrip("/")).name
        return Member(label, Path(settings.models_root) / "hf" / f"{label}-{hf.fingerprint(source)}", None, source=source)
    path = Path(member)
    if path.is_dir():
        if not has_checkpoint(path):
            raise TxlabError(f"{path} holds no checkpoint: is it a run directory made by `txlab train`?")
        return Member(path.name, path, saved_config(path))
    if member not in PRESETS:
        if "/" in member or member.startswith("."):
            raise TxlabError(f"no run directory {member}")
        raise did_you_mean(member, PRESETS, "preset (or an existing run directory)")
    overrides = [*settings.sets, *member_overrides(settings, [member]).get(member, [])]
    cfg = run_config(member, settings.size, settings.data or None, overrides=overrides, text=settings.text, tokenizer=settings.tokenizer)
    if train_seed is None:
        return Member(member, run_dir(cfg, Path(settings.models_root)), cfg, preset=True)
    cfg = replace(cfg, train=replace(cfg.train, seed=train_seed))
    directory = run_dir(cfg, Path(settings.models_root))
    return Member(member, directory.with_name(f"{directory.name}-seed{train_seed}"), cfg, preset=True)


def training_seeds(settings: ReclSettings, members: Sequence[str]) -> list[int | None]:
    """The training seeds a group is scored once each for: ``settings.train_seeds``, or [None] without them.
    A seed is given once and only there (not also as a member override ``train.seed``), and some member must
    be a preset: run directories and Hugging Face members are the same model for every seed."""
    seeds = settings.train_seeds
    if not seeds:
        return [None]
    if len(set(seeds)) != len(seeds):
        raise TxlabError(f"train_seeds must be distinct, got {seeds}")
    if any(s.split("=", 1)[0].strip() == "train.seed" for s in settings.sets):
        raise TxlabError("give the preset members' seeds as train_seeds (--train-seeds 0,1,2), not also as --set train.seed")
    if all(hf.is_hf_spec(m) or Path(m).is_dir() for m in members):
        raise TxlabError(f"train_seeds trains the preset members once per seed, and group {'+'.join(members)} has none: "
                         "its run directories and Hugging Face members are the same model for every seed")
    return list(seeds)


def collection_cost(settings: ReclSettings) -> int:
    """Token-steps of the window method per model: blocks * (block_len + c_max - c_min) * c_max."""
    grid = settings.context_grid()
    return settings.blocks * (settings.block_len + grid[-1] - grid[0]) * grid[-1]


def scaled_grid(span: int) -> str:
    """About ten context lengths up to a training span: steps of a multiple of 10 (20:240:20 for 256)."""
    step = 10 * max(1, span // 120) if span >= 120 else max(1, span // 12)
    return f"{step}:{span // step * step}:{step}"


def training_span(member: Member) -> int | None:
    """The longest context a member saw in training: segment plus memory (a Hugging Face checkpoint: the
    positions its config names; None when it names none)."""
    if member.source:
        return hf.trained_length(member.source)
    return member.config.model.tgt_len + member.config.model.mem_len


def with_defaults(settings: ReclSettings, members: Sequence[Member]) -> ReclSettings:
    """``settings`` with every unset one given its value, here and nowhere else: at size paper the paper's grid
    and 20 x 500 targets; at a smaller size a grid up to the members' longest training span and the 2,000
    targets of the cpu profile, minutes on a laptop; placebo losses except on a synthetic corpus, whose
    ideal model gives the truth. A value the study or the command line gave stays."""
    chosen: dict[str, Any] = dict(PAPER_COLLECTION if settings.size == "paper" else SMALL_COLLECTION)
    if settings.grid is None and settings.size != "paper":
        spans = [span for span in map(training_span, members) if span]
        if not spans:
            raise TxlabError("no member says how long a context it was trained on: give the grid, e.g. --set grid=32:512:32")
        chosen["grid"] = scaled_grid(max(spans))
    chosen["placebo"] = group_data(members, settings).corpus not in SYNTHETIC
    resolved = replace(settings, **{key: value for key, value in chosen.items() if getattr(settings, key) is None})
    resolved.context_grid()  # a grid given as text is refused here, before anything runs
    return resolved


def placebo_cost(settings: ReclSettings) -> int:
    """Token-steps of the placebo losses per model: every target once per grid step c -> c', reading c' tokens."""
    return settings.blocks * settings.block_len * sum(settings.context_grid()[1:]) if settings.placebo else 0


def group_data(members: Sequence[Member], settings: ReclSettings) -> DataConfig:
    """The corpus every member of a group is scored on: the txlab members' (they must share it), else
    the one the settings name (a Hugging Face-only group has no corpus of its own)."""
    txlab_members = [m for m in members if not m.source]
    if txlab_members:
        return txlab_members[0].config.data
    if settings.data or settings.text:
        return run_config(None, corpus=settings.data or None, overrides=[s for s in settings.sets if s.startswith("data.")],
                          text=settings.text, tokenizer=settings.tokenizer).data
    raise TxlabError("a group of Hugging Face models needs a corpus to be scored on: give --text FILE (your text) or --data NAME (`txlab data list`)")


def _data_identity(data: DataConfig) -> dict[str, Any]:
    """What decides a corpus's tokens (its name and options), not where its files or cache live."""
    return {k: v for k, v in to_dict(data).items() if k not in ("data_dir", "cache_dir", "corpus_dir")}


def collection_flops(member: Member, settings: ReclSettings) -> float | None:
    """Forward FLOPs of one member's loss collection: reading its token-steps (and the placebo's) at the
    mean keys a query of a window attends (the evaluation memory and half a segment, at most half the
    window), and the softmax of the one target each (context, target) pair scores."""
    grid = settings.context_grid()
    if member.source:  # read from a fresh start: a query attends half the window on average
        model = hf.meta_model(member.source)
        if model is None:
            return None
        keys = grid[-1] // 2
    else:
        cfg = member.config
        if not vocab_size(cfg):
            return None
        model, keys = model_counts(cfg), min(evaluation_keys(cfg), grid[-1] // 2)
    output = model.output_flops_per_token()
    reading = model.flops_per_token(keys) - output
    targets = settings.blocks * settings.block_len
    scored = targets * len(grid) + (targets * (len(grid) - 1) if settings.placebo else 0)
    return (collection_cost(settings) + placebo_cost(settings)) * reading + scored * output


def group_plan(groups: Sequence[Group], gflops: float | None) -> Plan:
    """What the groups will do: the members that train (steps, tokens), what is collected (token-steps), and the FLOPs;
    a group with training seeds once per seed, each seed with its runs counted and its time."""
    plan = Plan(gflops=gflops)
    for group in groups:
        if not group.settings.train_seeds:
            plan.add(f"group {group.name}:")
            _plan_members(plan, group.resolved[None], group.settings)
            continue
        collected: set[Path] = set()
        for seed, members in group.resolved.items():
            part = Plan(gflops=gflops)
            _plan_members(part, members, group.settings, " for every seed", collected)
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


def _plan_members(plan: Plan, members: Sequence[Member], s: ReclSettings, every_seed: str = "", collected: set[Path] | None = None) -> None:
    """One group's lines of the plan: each member trained or used as it is, then the loss collection.
    ``collected``: the runs whose losses an earlier seed's group of the plan collects (not counted again), updated."""
    for m in members:
        if m.preset:
            add_training(plan, m.label, m.config, m.run_dir)
        elif m.source:
            plan.add(f"  {m.label}: Hugging Face checkpoint {m.source}, used as it is{every_seed}")
        else:
            plan.add(f"  {m.label}: run directory {m.run_dir}, used as it is{every_seed}")
    grid = s.context_grid()
    placebo = f", {placebo_cost(s) / 1e6:.1f}M more for the placebo losses" if s.placebo else ""
    again = [m for m in members if collected is not None and m.run_dir in collected]
    flops = [collection_flops(m, s) for m in members if m not in again]
    reused = f"; {', '.join(m.label for m in again)} collected with an earlier seed's group" if again else ""
    plan.add(f"  collect losses of {len(members)} models on {s.blocks} blocks x {s.block_len} targets of {s.split} at contexts "
             f"{grid[0]}..{grid[-1]} ({len(grid)} lengths): {collection_cost(s) / 1e6:.1f}M token-steps each{placebo}, on {s.device} "
             f"(blocks already collected are skipped{reused})", None if None in flops else sum(flops))
    if collected is not None:
        collected.update(m.run_dir for m in members)


def plan_groups(groups: Sequence[Group], suggest_smaller: bool = False, gflops: Callable[[str, int], float | None] = machine_gflops) -> Plan:
    """:func:`group_plan` at the device's measured ceiling. With ``suggest_smaller`` (a command-line group: a study's
    profile is its own choice) and a plan that takes over an hour on a CPU, also the smaller size that would take
    minutes: the groups resolved again from what was asked at that size, with that size's grid and targets where
    none were given."""
    device = groups[0].settings.device
    plan = group_plan(groups, gflops(device, 0))
    has_presets = any(m.preset for g in groups for listed in g.resolved.values() for m in listed)
    if suggest_smaller and is_long_on_cpu(plan, device) and has_presets:
        candidates = []
        for size in smaller_sizes(groups[0].settings.size):
            smaller = [resolve_group(g.members, replace(g.asked, size=size), g.name) for g in groups]
            s = smaller[0].settings
            candidates.append((f"--size {size} (grid {s.grid}, {s.blocks} x {s.block_len} targets)", group_plan(smaller, plan.gflops)))
        plan.faster = quickest(candidates)
    return plan


def check_members(members: Sequence[Member]) -> None:
    """Before any model runs: every member is another model (by its label, and as a run: a symlink or a path
    spelled otherwise is the same run), and all read one corpus (RECL compares models on one token stream)."""
    labels = [m.label for m in members]
    if len(set(labels)) != len(labels):
        raise TxlabError(f"the group names a model twice: {labels}")
    seen: dict[Path, str] = {}
    for m in members:
        where = m.run_dir.resolve()
        if where in seen:
            raise TxlabError(f"the group names one run twice: {seen[where]} and {m.label} are both {where}")
        seen[where] = m.label
    corpora = {m.label: m.config.data for m in members if not m.source}
    if len({json.dumps(_data_identity(d), sort_keys=True) for d in corpora.values()}) > 1:
        listed = ", ".join(f"{label} on {data.corpus}" for label, data in corpora.items())
        if len({d.corpus for d in corpora.values()}) == 1:
            differing = sorted({k for d in corpora.values() for k, v in _data_identity(d).items() if v != _data_identity(next(iter(corpora.values())))[k]})
            listed += f", with other {', '.join('data.' + k for k in differing)}"
        raise TxlabError(f"the group mixes corpora ({listed}): RECL compares models on one token stream; give --data to put every preset on one corpus")


def check_recipes(members: Sequence[Member]) -> None:
    """Before any model runs: a preset member's run directory that already holds a run is used only if that run
    was configured as the group plans it (:func:`~txlab.runs.train.configuration_changes`; its length is checked
    after training, by :func:`check_training`). Else a run of another recipe (an older preset default, a member
    override changed since) would be scored, or resumed, under this one's name."""
    for m in members:
        changed = configuration_changes(m.run_dir, m.config) if m.preset else []
        if changed:
            raise TxlabError(f"{m.run_dir} holds a {m.label} run of another configuration ({'; '.join(changed)}): move it away to "
                             "train the group's recipe there, give the preset members another models_root, or name the run "
                             "directory itself as a member to score it as it was trained")


def check_room_for_targets(corpus: Corpus, settings: ReclSettings) -> None:
    """The split holds the target blocks after the longest context (else a clear error before anything trains)."""
    sample_blocks(len(corpus.split(settings.split)), settings.blocks, settings.block_len, settings.context_grid()[-1], settings.seed)


def check_hf_members(members: Sequence[Member], corpus: Corpus) -> None:
    """Before any model runs: every Hugging Face member can read the group's corpus (txlab.models.hf.check_corpus)."""
    for m in members:
        if m.source:
            hf.check_corpus(m.source, m.label, corpus)


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


def ensure_trained(members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None], progress: bool) -> None:
    """Train the preset members without a checkpoint (or resume an interrupted one), or refuse when
    ``settings.train_missing`` is off."""
    missing = [m for m in members if _needs_training(m)]
    if not missing:
        return
    if not settings.train_missing:
        commands = "; ".join(
            f"txlab train {m.label} --size {settings.size}" + (f" --data {settings.data}" if settings.data else "")
            + f" --run-dir {m.run_dir}" + "".join(f" --set {s}" for s in [*settings.sets, *member_overrides(settings, [m.label]).get(m.label, [])])
            + (f" --set train.seed={m.config.train.seed}" if settings.train_seeds else "") for m in missing
        )
        raise TxlabError(f"not trained: {', '.join(str(m.run_dir) for m in missing)} (train_missing is false). Train them with: {commands}")
    if settings.launcher == "slurm":
        tasks = [Task(m.label, train_job, (m.config, str(m.run_dir)), partial(_checkpoint_note, m)) for m in missing]
        check_jobs(run_jobs(tasks, settings.slurm, jobs_folder(settings), "txlab-train", echo), "training")
        return
    for m in missing:
        echo(f"training {m.label} ...")
        result = train(m.config, m.run_dir, resume=True, progress=progress, echo=echo)
        echo(f"trained {m.label} to step {result.step}: valid loss {result.valid.get('loss', float('nan')):.4f}")


def collect_job(run_dir: str, settings: ReclSettings) -> str:
    """Collect one member's losses as a scheduler job (blocks already written are skipped); returns their folder."""
    table = collect_run_losses(Path(run_dir), settings.split, settings.context_grid(), settings.blocks, settings.block_len, settings.seed,
                               placebo=bool(settings.placebo), batch_size=settings.batch_size, device=settings.device, progress=True)
    return str(table.path)


def collect_as_jobs(members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None]) -> None:
    """Every member's loss collection as a job of its own, waited for; a failed one stops the group with its log."""
    submitted = time.time()

    def written(member: Member) -> str:
        blocks = [f for f in (member.run_dir / "losses").glob("*/*.npy") if f.stat().st_mtime >= submitted]
        return f"{len(blocks)} loss blocks written"

    tasks = [Task(m.label, collect_job, (str(m.run_dir), settings), partial(written, m)) for m in members]
    check_jobs(run_jobs(tasks, settings.slurm, jobs_folder(settings), "txlab-losses", echo), "loss collection")


def jobs_folder(settings: ReclSettings) -> Path:
    """Where the jobs' scripts and logs go unless ``slurm.logs`` names a folder: beside the preset runs."""
    return Path(settings.models_root) / "jobs"


def train_job(cfg: RunConfig, run_dir: str) -> int:
    """Train one member as a scheduler job (what ``launcher: slurm`` submits), resuming its checkpoint; returns the step reached."""
    return train(cfg, Path(run_dir), resume=True, progress=True).step


def _checkpoint_note(member: Member) -> str:
    return f"checkpoint at step {checkpoint_step(member.run_dir)}/{member.config.train.max_steps}"


ORACLE = "oracle (ground truth)"


def collect_member(member: Member, corpus: Corpus, settings: ReclSettings, progress: bool) -> LossTable:
    """One member's loss table on the group's targets (resumable): a txlab run through its own record, a
    Hugging Face checkpoint read from a fresh start for every window (its context is exactly the c tokens)."""
    grid = settings.context_grid()
    if not member.source:
        return collect_run_losses(member.run_dir, settings.split, grid, settings.blocks, settings.block_len, settings.seed,
                                  placebo=bool(settings.placebo), batch_size=settings.batch_size, device=settings.device, progress=progress)
    model = hf.load_causal_lm(member.source, device=settings.device, precision=settings.precision)
    write_json_atomic(member.run_dir / "member.json", {"kind": "hf", **hf.describe(model), "precision": settings.precision})
    return collect_model_losses(
        model, corpus.split(settings.split), corpus.token_stream_hash(settings.split), member.run_dir, settings.split, grid,
        settings.blocks, settings.block_len, settings.seed, tgt_len=grid[-1], context=Context(mem_len=0),
        identity={"model": hf.fingerprint(member.source)}, placebo=bool(settings.placebo),
        batch_size=settings.batch_size, progress=progress, precision=settings.precision,
    )


def oracle_losses(corpus: Corpus, targets: np.ndarray, settings: ReclSettings) -> np.ndarray | None:
    """[G, T] losses of the ideal model (it sees exactly c tokens) on the group's targets, on a
    synthetic corpus; None otherwise."""
    if corpus.truth is None:
        return None
    truth = corpus.truth[settings.split]
    return np.stack([truth.oracle_loss(c)[targets] for c in settings.context_grid()])


def oracle_rows(oracle: np.ndarray | None, settings: ReclSettings) -> list[table8.Table8Row]:
    """RECL rows of the ideal model, alone in its group; [] without one."""
    if oracle is None:
        return []
    rows = table8.recl_rows(table8.GroupTable(oracle[None], settings.context_grid(), [ORACLE]), rs=settings.rs)
    return [replace(row, ground_truth=True) for row in rows]


@dataclass(frozen=True)
class GroupScores:
    """What a group's loss table gives: Table 8's rows and the points of Figures 3 and 4."""

    rows: list[table8.Table8Row]
    """txlab.analysis.table8.recl_rows rows, with the placebo-aware RECL when placebo losses were collected."""
    figure3_gains: np.ndarray
    """[M, G-1] unnormalised gains at r = FIGURE3_R."""
    perplexity: np.ndarray
    """[M, G] perplexity at each context length."""
    placebo_gains: dict[float, tuple[np.ndarray, np.ndarray]]
    """r -> (step gains [M, G-1], placebo gains [M, G-1]); empty without placebo losses."""


def score_group(losses: GroupLosses, labels: Sequence[str], settings: ReclSettings) -> GroupScores:
    """RECL of every member at each r (bootstrap intervals unless ``settings.n_boot`` is 0) and the figures' points."""
    grid = losses.grid
    caps = {label: losses.caps[name] for label, name in zip(labels, losses.models)}
    bootstrap = table8.Bootstrap(losses.block_len, settings.n_boot, settings.seed) if settings.n_boot else None
    rows = table8.recl_rows(table8.GroupTable(losses.losses, grid, labels, caps, losses.placebo), rs=settings.rs, bootstrap=bootstrap)
    placebo = {}
    if losses.placebo is not None:
        table = recl.prepare_table(losses.losses, grid, labels, caps)
        placebo = {r: (recl.step_gains(table, r), recl.placebo_step_gains(table, losses.placebo, r)) for r in settings.rs}
    return GroupScores(rows, recl.figure3_gains(losses.losses, grid, labels, FIGURE3_R, caps),
                       recl.perplexity_by_context(losses.losses, grid, labels, caps), placebo)


@dataclass(frozen=True)
class GroupResult:
    """One group's RECL as `txlab recl` wrote it (its fields but ``markdown`` and ``files`` are recl.json's)."""

    group: str
    members: list[str]
    run_dirs: list[str]
    settings: ReclSettings
    grid: list[int]
    n_targets: int
    token_stream_sha256: str
    rows: list[table8.Table8Row]
    """Table 8's rows (txlab.analysis.table8.recl_rows, the placebo-aware RECL and the ideal model's where there are)."""
    markdown: str
    files: list[Path]
    train_seed: int | None = None
    """The training seed of the preset members' runs, for one seed's group of ``settings.train_seeds``."""

    def record(self) -> dict[str, Any]:
        """What recl.json holds (``train_seed`` only in one seed's group)."""
        seed = {} if self.train_seed is None else {"train_seed": self.train_seed}
        return {"group": self.group, **seed, "members": self.members, "run_dirs": self.run_dirs, "settings": asdict(self.settings),
                "grid": self.grid, "n_targets": self.n_targets, "token_stream_sha256": self.token_stream_sha256,
                "rows": [row.record() for row in self.rows]}


def run_group(group: Group, train_seed: int | None, out_dir: Path, fig_dir: Path, echo: Callable[[str], None], progress: bool) -> GroupResult:
    """Train what is missing, collect the losses, compute RECL, write the tables and figures of one group (of one
    training seed: ``train_seed``, None for a group without seeds)."""
    settings = group.settings
    grid = settings.context_grid()
    members = group.resolved[train_seed]
    labels = [m.label for m in members]
    corpus = load_corpus(group_data(members, settings), progress=progress)
    check_room_for_targets(corpus, settings)
    check_hf_members(members, corpus)
    ensure_trained(members, settings, echo, progress)
    check_training(members, settings, echo)
    if settings.launcher == "slurm":  # each run's blocks as a job; the group then loads them here
        collect_as_jobs([m for m in members if not m.source], settings, echo)
    echo(f"collecting losses of {len(members)} models: {collection_cost(settings) / 1e6:.1f}M token-steps each "
         f"({settings.blocks} blocks x {settings.block_len} targets, contexts {grid[0]}..{grid[-1]})")
    tables = [collect_member(m, corpus, settings, progress) for m in members]
    losses = load_group_losses([m.run_dir for m in members], settings.split, tables[0].path.name.removeprefix(f"{settings.split}-"))
    scores = score_group(losses, labels, settings)
    oracle = oracle_losses(corpus, losses.targets, settings)
    rows = scores.rows + oracle_rows(oracle, settings)

    table_dir, figure_dir = Path(out_dir) / group.folder(train_seed), Path(fig_dir) / group.folder(train_seed)
    files = table8.write_table8(rows, table_dir / "table8")
    reference = {} if oracle is None else {ORACLE: np.exp(oracle.mean(axis=1))}
    files += recl_figures.write_context_curves(scores.figure3_gains, scores.perplexity, grid, labels, table_dir, scores.placebo_gains, reference)
    settings_file = table_dir / "recl.json"
    result = GroupResult(group.name, group.members, [str(m.run_dir) for m in members], settings, list(grid), int(len(losses.targets)),
                         losses.token_stream_sha256, rows, table8.table8_markdown(rows), [settings_file, *files], train_seed)
    files += draw_figures(table_dir, figure_dir, result.record(), char_level=corpus.level == "char")
    write_text_atomic(settings_file, json.dumps(result.record(), indent=1) + "\n")
    return replace(result, files=[settings_file, *files])


SEED_SUMMARY = "table8-seeds"
"""The stem of a group's RECL over its training seeds (.csv, .md, .json), beside the seeds' folders seed-<s>/."""


@dataclass(frozen=True)
class SeedsResult:
    """A group scored once per training seed (``settings.train_seeds``): each seed's group and the spread over them."""

    group: str
    train_seeds: list[int]
    seeds: list[GroupResult]
    """Each seed's group, as :func:`run_group` wrote it into ``<group>/seed-<s>/``."""
    rows: list[table8.SeedSpreadRow]
    """txlab.analysis.table8.seed_rows rows: per model, r and estimate, the RECL of each seed and their spread."""
    markdown: str
    files: list[Path]

    @property
    def n_targets(self) -> int:
        return self.seeds[0].n_targets

    def record(self) -> dict[str, Any]:
        """What table8-seeds.json holds."""
        first = self.seeds[0]
        return {"group": self.group, "train_seeds": self.train_seeds, "members": first.members,
                "run_dirs": {str(r.train_seed): r.run_dirs for r in self.seeds}, "settings": asdict(first.settings), "grid": first.grid,
                "n_targets": first.n_targets, "token_stream_sha256": first.token_stream_sha256, "rows": [row.record() for row in self.rows]}


def run_seeds(group: Group, out_dir: Path, fig_dir: Path, echo: Callable[[str], None], progress: bool) -> SeedsResult:
    """A group once per training seed (:func:`run_group` of each of ``group.resolved``), then each model's RECL
    of every seed and its spread (txlab.analysis.table8.seed_rows) into ``<out_dir>/<group>/table8-seeds.{csv,md,json}``."""
    if group.settings.launcher == "slurm":  # every seed's missing runs as one batch of jobs, rather than a batch per seed
        ensure_trained([m for listed in group.resolved.values() for m in listed], group.settings, echo, progress)
    results = []
    for seed in group.seeds:
        echo(f"group {group.name}, training seed {seed}:")
        results.append(run_group(group, seed, out_dir, fig_dir, echo, progress))
    same = [m.label for m in group.resolved[group.seeds[0]] if not m.preset] + [ORACLE]
    rows = table8.seed_rows({r.train_seed: r.rows for r in results}, same)
    table_dir = Path(out_dir) / group.name
    files = table8.write_seed_spread(rows, table_dir / SEED_SUMMARY)
    result = SeedsResult(group.name, list(group.settings.train_seeds), results, rows, table8.seed_spread_markdown(rows), [])
    record, record_file = result.record(), table_dir / f"{SEED_SUMMARY}.json"
    write_text_atomic(record_file, json.dumps(record, indent=1) + "\n")
    title = (f"RECL over training seeds {', '.join(map(str, result.train_seeds))}\n"
             f"{models_in_words(record.get('members', []))} ({group.settings.size} size) on {corpus_in_words(record)}")
    files += recl_figures.seed_spread_figure(rows, Path(fig_dir) / group.name / SEED_SUMMARY, title)
    return replace(result, files=[*files, record_file])


def _corpus_of(record: dict[str, Any]) -> str | None:
    """The corpus a group was scored on: its data setting, else the corpus its name ends with."""
    settings = record.get("settings", {})
    if settings.get("data"):
        return settings["data"]
    known = sorted([*CORPORA, *SYNTHETIC], key=len, reverse=True)
    return next((c for c in known if record.get("group", "").endswith("-" + c)), None)


def corpus_in_words(record: dict[str, Any]) -> str:
    """'Tiny Shakespeare', 'the synthetic corpus (small language, copies up to 200 tokens back)', 'own text notes.txt'."""
    settings = record.get("settings", {})
    if settings.get("text"):
        return f"own text {Path(settings['text']).name}"
    corpus = _corpus_of(record)
    return corpora.corpus_in_words(corpus) if corpus else record.get("group", "")


def is_char_level(record: dict[str, Any]) -> bool:
    """Whether a recorded group's corpus is read in characters (so in bits per character)."""
    settings = record.get("settings", {})
    if settings.get("text"):
        return settings.get("tokenizer") in (None, "char")
    corpus = _corpus_of(record)
    return corpus in CORPORA and CORPORA[corpus].level == "char"


def draw_figures(table_dir: Path, figure_dir: Path, record: dict[str, Any], char_level: bool | None = None) -> list[Path]:
    """Figures 3 and 4 of one group from the tables in ``table_dir`` (figure3.csv, figure4.csv, table8.csv's
    bootstrap intervals, placebo.csv where there is one) into ``figure_dir``, titled in words by ``record``
    (recl.json's fields). What a run draws, and what --redraw draws again without scoring anything."""
    table_dir, figure_dir = Path(table_dir), Path(figure_dir)
    size = record.get("settings", {}).get("size")
    about = [f"{size} size"] * bool(size) + [f"training seed {record.get('train_seed')}"] * ("train_seed" in record)
    who = models_in_words(record.get("members", [])) + (f" ({', '.join(about)})" if about else "")
    where = corpus_in_words(record)
    char_level = is_char_level(record) if char_level is None else char_level
    files = recl_figures.figure3(table_dir / "figure3.csv", figure_dir / "figure3.png", title=f"Figure 3: gains from longer context\n{who} on {where}",
                                 intervals=table_dir / "table8.csv", placebo=table_dir / "placebo.csv", r=FIGURE3_R, threshold=recl.DEFAULT_THRESHOLD)
    files += recl_figures.figure4(table_dir / "figure4.csv", figure_dir / "figure4.png", char_level=char_level,
                                  title=f"Figure 4: {'bits per character' if char_level else 'perplexity'} by context length\n{who} on {where}")
    return files


def redraw_group(table_dir: Path, fig_dir: Path) -> list[Path]:
    """Draw a scored group's figures again from its folder of tables (recl.json beside them) into
    ``fig_dir``/<group>/ (one training seed's group: ``fig_dir``/<group>/seed-<s>/): nothing trains or scores."""
    table_dir = Path(table_dir)
    record_file = table_dir / "recl.json"
    if not record_file.is_file():
        raise TxlabError(f"no recl.json in {table_dir}: --redraw takes a group's folder of tables that txlab recl wrote")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    where = table_dir.resolve()
    folder = Path(where.parent.name, where.name) if "train_seed" in record else Path(table_dir.name)
    return draw_figures(table_dir, Path(fig_dir) / folder, record)


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
    for group in groups:  # every group's members are resolved and checked against each other before any model trains
        check_launcher(group.settings.launcher)
        devices.check_device(group.settings.device, "device")
        resolved = group.resolved[group.seeds[0]]
        if any(m.source for m in resolved):  # the tokenizer, vocabulary and target checks need the corpus, not the models
            corpus = load_corpus(group_data(resolved, group.settings), progress=progress)
            check_hf_members(resolved, corpus)
            check_room_for_targets(corpus, group.settings)
    for group in groups:
        s = group.settings
        announce(f"profile: {f'{profile} ({study})' if study else 'command line'} | group {group.name}: {' '.join(group.members)} | "
                 f"size {s.size} | corpus {f'{s.text} (tokenizer {s.tokenizer})' if s.text else s.data or 'each preset its own'} | grid {s.grid} | {s.blocks} blocks x {s.block_len} targets "
                 f"of {s.split} | r {' '.join(f'{r:g}' for r in s.rs)} | placebo {'on' if s.placebo else 'off'} | device {s.device}"
                 + (f" | training seeds {' '.join(map(str, s.train_seeds))}" if s.train_seeds else ""))
        if not s.placebo:
            synthetic = group_data(group.resolved[group.seeds[0]], s).corpus in SYNTHETIC
            announce("  placebo off: nothing tells a gain from context apart from noise that the min() over models turns into gain"
                     + ("; on this synthetic corpus the ideal model's row gives the truth" if synthetic else " (--set placebo=true)"))
    announce(plan_groups(groups, study is None).describe())
    if dry_run:
        return []
    out_dir, fig_dir = Path(out_dir or resolve("results/recl")), Path(fig_dir or resolve("figures/recl"))
    return [run_group(group, None, out_dir, fig_dir, echo, progress) if not group.settings.train_seeds else run_seeds(group, out_dir, fig_dir, echo, progress)
            for group in groups]


def summary(results: Sequence[GroupResult | SeedsResult]) -> dict[str, Any]:
    """The --json document: per group, model and r, the RECL, its interval and whether it is censored (and,
    with placebo losses, the placebo-aware RECL, its interval and whether the RECL is below its placebo).
    A group with training seeds holds that per seed (``seeds``), and per model, r and estimate the RECL of
    every seed with their spread (``spread``)."""
    groups = []
    for result in results:
        if isinstance(result, SeedsResult):
            spread: dict[str, dict[str, Any]] = {}
            for row in result.rows:
                spread.setdefault(row.model, {}).setdefault(str(row.r), {})[row.estimate] = {
                    k: v for k, v in row.record().items() if k not in ("model", "r", "estimate", "seeds")}
            first = result.seeds[0]
            groups.append({"group": result.group, "members": first.members, "train_seeds": result.train_seeds, "grid": first.grid,
                           "n_targets": first.n_targets, "seeds": {str(r.train_seed): _group_summary(r) for r in result.seeds},
                           "spread": spread, "files": [str(f) for f in result.files]})
        else:
            groups.append(_group_summary(result))
    return {"groups": groups}


def _group_summary(result: GroupResult) -> dict[str, Any]:
    per_model: dict[str, dict[str, Any]] = {}
    for row in result.rows:
        record = row.record()
        per_model.setdefault(row.model, {})[str(row.r)] = {
            k: record[k] for k in ("recl", "ci_low", "ci_high", "censored", "label", "placebo_recl", "placebo_ci_low", "placebo_ci_high",
                                   "placebo_censored", "placebo_label", "below_placebo") if k in record
        }
    return {"group": result.group, "members": result.members, "run_dirs": result.run_dirs, "grid": result.grid, "n_targets": result.n_targets,
            "recl": per_model, "files": [str(f) for f in result.files]}
