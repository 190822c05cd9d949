"""What a RECL run depends on besides its members: :class:`ReclSettings` (a study profile's keys, ``--set`` on the
command line), the study file that names groups and profiles, and how the command line goes over them.

A setting nobody gave stays unset (None) until :func:`~txlab.drivers.recl.groups.collection_defaults` gives it the
value of the size and the members; then :meth:`ReclSettings.collection` turns the settings into the one
:class:`~txlab.measure.collection.Collection` every member of the group is scored on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txlab.analysis import recl
from txlab.config import COMPILE_MODES, NON_NEGATIVE, POSITIVE, POSITIVE_REAL, PRECISIONS, SEED, Range, override_settings, setting
from txlab.errors import TxlabError
from txlab.measure.collection import UNITS, Collection, parse_grid
from txlab.presets import SIZES
from txlab.runs.launch import LAUNCHERS, SlurmSettings
from txlab.study import entry, read_study
from txlab.workspace import MODELS

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

    A setting whose default is None is unset until given: :func:`~txlab.drivers.recl.groups.collection_defaults` gives it its value from
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
    labels: list[str] = setting([], "Display names of members, MEMBER=NAME (--label gpt2-A=GPT-2): the name tables, legends, recl.json and "
                                "a command-line group's folder give the member. MEMBER as the group names it (a preset, a run directory, "
                                "hf:PATH) or as the table would (the preset, the folder's name); unnamed members keep that name.", overrides=True)
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
    unit: str = setting("token", "What context lengths, targets and blocks count: token (the group's one token stream; its members share "
                        "one tokenizer) or word (words of the text, runs of non-whitespace, shared by members with any tokenizers: "
                        "l(c, w) is the sum of a member's token losses over the tokens that spell word w after exactly c words; "
                        "docs/recl.md).", UNITS)
    stride: float | None = setting(None, "Strided collection for long contexts (opt-in, tokens only): each block's targets are read in runs "
                                   "of s, each run once from c tokens before its first target, so a target's context lies in [c, c + s) "
                                   "and a c costs about T x (c / s + 1) token-steps instead of up to (T + c) x c. A whole number: s tokens "
                                   "(--set stride=512); a fraction in (0, 1): s = that fraction of c (--set stride=0.25). Unset: exact "
                                   "contexts (docs/recl.md).", valid=POSITIVE_REAL)
    split: str = setting("valid", "Split the targets are drawn from.", ("train", "valid", "test"))
    seed: int = setting(0, "Draws the target blocks and the bootstrap resamples.", valid=SEED)
    n_boot: int = setting(200, "Bootstrap resamples for the confidence intervals (0: none).", valid=NON_NEGATIVE)
    placebo: bool | None = setting(None, "Also collect placebo losses (extra context from far away): the table adds a placebo-aware RECL "
                                   "beside the paper's and marks each RECL resting on a step that does not beat its placebo. Unset: on, "
                                   "except on a synthetic corpus, whose ideal model shows what context holds (false: off, and noise in "
                                   "the losses can then read as context).")
    export_losses: bool = setting(False, "Also write every member's per-token losses as one tidy table beside Table 8, losses.csv (and "
                                  "losses.parquet where pyarrow is installed): member, unit, c, target, target_text, loss, placebo_loss.")
    batch_size: int = setting(16, "Windows per forward pass.", valid=POSITIVE)
    device: str = setting("cpu", "Torch device of the loss collection (cpu, cuda, cuda:1, ...).")
    precision: str = setting("fp32", "Hugging Face members: the precision of their weights and computation (bf16 halves the memory on a "
                             "GPU; the log-softmax is always taken in fp32, but reduced-precision noise can read as gain). txlab runs are "
                             "read in their own eval.precision.", PRECISIONS)
    compile: str = setting("auto", "Hugging Face members: run their layers compiled while they are scored (torch.compile, dynamic "
                           "shapes; seconds on the first forward). auto: on a CUDA GPU, where it fuses the elementwise work around "
                           "the matrix products; on: on any device (the CPU needs a C++ compiler); off: as written. txlab runs compute as "
                           "their own model.compile says.", COMPILE_MODES)
    train_missing: bool = setting(True, "Train preset members that have no checkpoint, or resume one interrupted under the same recipe "
                                  "(false: refuse instead).")
    allow_unequal: bool = setting(False, "Score a group whose preset members were not all trained to their recipe's steps (else refused): "
                                  "RECL compares models, and a model trained less than its recipe is not the model the group names.")
    models_root: str = setting(str(MODELS), "Where preset members live: <models_root>/<preset>-<size>-<corpus>/ (a relative path in a "
                               "study file is read under the home, see txlab.workspace; one given on the command line, from the current directory).")
    launcher: str = setting("local", "How missing members train and each member's losses are collected: local (here, one after the "
                            "other) or slurm (one submitit job each, waited for).", LAUNCHERS)
    slurm: SlurmSettings = setting(SlurmSettings, "The jobs' settings with launcher slurm (slurm.partition, slurm.time_min, ...).")

    def collection(self) -> Collection:
        """What these settings collect, as one value: the grid parsed and checked (a grid given as text is refused
        here). Called once per group, after :func:`~txlab.drivers.recl.groups.collection_defaults` set every value."""
        if self.grid is None or self.blocks is None or self.block_len is None:
            raise ValueError("the collection is unset until collection_defaults gives it its values")
        return Collection(self.split, parse_grid(self.grid), self.blocks, self.block_len, self.seed, bool(self.placebo), unit=self.unit,
                          stride=self.stride)


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
