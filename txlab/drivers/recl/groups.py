"""A group's members, resolved once: presets (trained when missing), run directories and Hugging Face checkpoints,
once per training seed, checked against each other, with the settings' unset values given (:func:`collection_defaults`)
and the group's name made from what it collects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from txlab.config import DataConfig, RunConfig, to_dict
from txlab.data.registry import CORPORA, TEXT_CORPUS
from txlab.data.synthetic import VARIANTS as SYNTHETIC
from txlab.drivers.recl.settings import PAPER_COLLECTION, SMALL_COLLECTION, ReclSettings, command_line, load_study
from txlab.errors import TxlabError, did_you_mean
from txlab.measure.collection import Collection
from txlab.models import hf
from txlab.presets import PRESETS
from txlab.runs.checkpoint import has_checkpoint, saved_config
from txlab.runs.train import configuration_changes
from txlab.runs.zoo import run_config, run_dir
from txlab.workspace import check_name, resolve


@dataclass(frozen=True)
class Member:
    """One member of a group, resolved once: what it is, where its run lives, and how it was (or will be) trained."""

    label: str
    """How tables and figures name it: its display name (``settings.labels``), else :func:`default_label`."""
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
    collection: Collection
    """What every member is scored on, resolved once from ``settings``."""
    resolved: dict[int | None, list[Member]]
    """Training seed (None for a group without ``settings.train_seeds``) -> the members of that seed's group:
    its preset runs of that seed, its run directories and Hugging Face members as they are."""
    defaulted: tuple[str, ...] = ()
    """The settings nobody gave, which took their default (:func:`collection_defaults`): unset again, the group
    is resolved at another size with that size's defaults."""
    suffix: str = ""
    """What the group's name adds when it collects other targets than the usual ones (:func:`collection_suffix`)."""
    model_order: tuple[str, ...] = ()
    """Every member's name (display name or default label) over all groups of the study, in the order they first
    appear (a command-line group: its own members): figures colour a model by its place here, so it keeps one
    colour in every figure of the study."""

    def unset_defaults(self) -> ReclSettings:
        """The settings as asked: the defaulted ones unset again."""
        return replace(self.settings, **dict.fromkeys(self.defaulted))

    @property
    def seeds(self) -> list[int | None]:
        return list(self.resolved)

    def folder(self, train_seed: int | None) -> Path:
        """Where one seed's tables and figures go under the output folders: ``<name>``, or ``<name>/seed-<s>``."""
        return Path(self.name) if train_seed is None else Path(self.name) / f"seed-{train_seed}"


def resolve_groups(members: Sequence[str], study: str | Path | None, profile: str, name: str | None,
                   options: dict[str, Any] | None = None, sets: Sequence[str] = ()) -> list[Group]:
    """The groups one command runs: the study's (all, or those ``members`` name) or ``members`` as one group,
    each resolved by :func:`resolve_group` from the study's profile (or the defaults) under the command
    line's ``options`` and ``sets`` (:func:`command_line`)."""
    if name is not None:
        check_name(name, "--name")  # a group's folders are named by it, inside the output folders
    if study is None:
        if not members:
            raise TxlabError("name the group's members (presets or run directories), e.g. `txlab recl --group xl151m qrnn lstm`, or give --study")
        numbers = [m for m in members if _is_number(m)]
        if numbers:
            raise TxlabError(f"{numbers[0]!r} is not a model: give each r its own option (--r 0.1 --r 0.5) or separate them by commas (--r 0.1,0.5)")
        asked = command_line(_at_home(ReclSettings()), options, sets)
        group = resolve_group(list(members), asked, ReclSettings())
        named = name or default_group_name(members, group.settings, size_label(group.resolved[group.seeds[0]])) + group.suffix
        return [replace(group, name=named, model_order=model_order([list(members)], asked.labels))]
    chosen_study = load_study(study, profile)
    asked = command_line(_at_home(chosen_study.settings), options, sets)
    chosen = list(members) or list(chosen_study.groups)
    for group in chosen:
        if group not in chosen_study.groups:
            raise did_you_mean(group, chosen_study.groups, f"group in {study}")
    order = model_order(list(chosen_study.groups.values()), asked.labels)
    corpus = f"-{asked.data}" if asked.data else f"-text-{Path(asked.text).stem}" if asked.text else ""
    groups = []
    for group in chosen:
        resolved = resolve_group(chosen_study.groups[group], asked, chosen_study.settings)
        named = name if name and len(chosen) == 1 else f"{chosen_study.name}-{group}-{profile}{corpus}{resolved.suffix}"
        groups.append(replace(resolved, name=named, model_order=order))
    return groups


def resolve_group(members: list[str], asked: ReclSettings, usual: ReclSettings | None = None, name: str = "") -> Group:
    """A group's members resolved once per training seed (:func:`resolve_member`) and checked against each
    other (:func:`check_members`), its settings with every unset one given its default (:func:`collection_defaults`),
    once, and its name's suffix where it collects otherwise than ``usual`` (the study profile's settings, or the
    defaults; None: no suffix)."""
    settings = settle_tokenizer(asked, members)
    for item in settings.member_sets:  # a study's profile serves every group: a preset the group lacks is left alone
        named = item.partition(":")[0]
        if named not in PRESETS:
            raise did_you_mean(named, PRESETS, "preset in member_sets")
    names = display_names(settings.labels)
    resolved = {seed: [with_display_name(resolve_member(m, settings, seed), m, names) for m in members] for seed in training_seeds(settings, members)}
    for listed in resolved.values():
        check_members(listed, settings.unit)
        check_recipes(listed)
    if settings.unit == "word":
        check_word_group(next(iter(resolved.values())), settings)
    defaults = collection_defaults(settings, next(iter(resolved.values())))
    defaulted = tuple(key for key in defaults if getattr(settings, key) is None)
    settings = replace(settings, **{key: defaults[key] for key in defaulted})
    suffix = "" if usual is None else collection_suffix(settings, usual, defaults)
    return Group(name, members, settings, settings.collection(), resolved, defaulted, suffix)


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
    """Own text without a tokenizer is read, in tokens, by the first Hugging Face member's own tokenizer, else by
    characters; in words each preset member by its own ``data.tokenizer`` (a member override), else by characters."""
    if not settings.text:
        if settings.tokenizer:
            raise TxlabError("--tokenizer says how own text is read: give the text with --text FILE_OR_DIR")
        return settings
    if settings.data:
        raise TxlabError(f"give a corpus (--data {settings.data}) or own text (--text {settings.text}), not both")
    if settings.tokenizer or settings.unit == "word":  # in words each preset reads the text by its own data.tokenizer (else char)
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


MIXED = "mixed"
"""The size of a group whose members have different sizes."""


def size_label(members: Sequence[Member]) -> str:
    """The size a group's members have (not the settings' size, which names only what presets train at): their one
    size ('tiny'), MIXED where sizes differ or some members have one and others none (a Hugging Face checkpoint, a run of
    no preset), '' where none has one."""
    sizes = {m.config.size if m.config is not None else "" for m in members}
    return "" if sizes == {""} else sizes.pop() if len(sizes) == 1 else MIXED


def corpus_tag(settings: ReclSettings, size: str) -> str:
    """'<size>-<corpus>' (or just the size when each preset keeps its own corpus), ``size`` the members'
    (:func:`size_label`; none for members of no size)."""
    corpus = f"text-{Path(settings.text).stem}" if settings.text else settings.data
    return "-".join(part for part in (size, corpus) if part) or "group"


NAMED_COLLECTION = ("unit", "grid", "blocks", "block_len", "split", "seed", "stride", "train_seeds")
"""Settings that change which losses a group's tables are computed from (the training seeds: which
runs; a stride: strided contexts), and so its name when they differ from the study's (or, on the command line, from the size's
usual collection): '-train_seeds-0-1-2' keeps a group over seeds apart from the single runs' tables.
Member overrides (train.max_steps, ...) are not among them: the group's checks compare members' training."""


def collection_suffix(settings: ReclSettings, usual: ReclSettings, defaults: dict[str, Any]) -> str:
    """'' for the usual collection, else what differs, e.g. '-grid-20-480-20-blocks-16': a group scored
    on another grid or other targets gets its own folders, so its tables never replace the usual ones,
    and the same command finds its own again. ``usual``: the study profile's settings, or the defaults, each
    unset one taking the group's default (``defaults``, :func:`collection_defaults`)."""
    def usual_value(key: str) -> Any:
        value = getattr(usual, key)
        return defaults.get(key) if value is None else value

    parts = [f"{key}-{getattr(settings, key):g}" if isinstance(getattr(settings, key), float) else f"{key}-{getattr(settings, key)}"
             for key in NAMED_COLLECTION if getattr(settings, key) != usual_value(key)]
    return "".join(f"-{re.sub(r'[^A-Za-z0-9_.]+', '-', part).strip('-')}" for part in parts)


def default_group_name(members: Sequence[str], settings: ReclSettings, size: str) -> str:
    """Members joined by '+', then size and corpus: 'xl151m+qrnn+lstm-cpu-synthetic-short'. A member with a display
    name gives it, made a file name ('GPT-2 (mine)' -> 'GPT-2-mine')."""
    names = display_names(settings.labels)

    def part(member: str) -> str:
        name = names.get(member, names.get(default_label(member)))
        return default_label(member) if name is None else re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")

    # a leading dot would hide the group's folders (a member named ./.x): names begin with what they name
    return "+".join(part(m) for m in members).lstrip(".") + f"-{corpus_tag(settings, size)}"


def default_label(member: str) -> str:
    """How tables name a member (as the group names it) that has no display name: the preset, the run directory's
    name, the Hugging Face checkpoint folder's name."""
    return Path(member[len(hf.PREFIX):].strip() if hf.is_hf_spec(member) else member).name


def display_names(labels: Sequence[str]) -> dict[str, str]:
    """``labels`` (MEMBER=NAME items) as member -> display name, each checked: a name fits a table cell and a legend
    (one line, no '|', which would cut a Markdown table's cell) and is not the ideal model's."""
    names: dict[str, str] = {}
    for item in labels:
        member, sep, name = (part.strip() for part in item.partition("="))
        if not sep or not member or not name:
            raise TxlabError(f"labels: {item!r} must look like MEMBER=NAME, e.g. --label hf:ckpt/gpt2=GPT-2 or --label gpt2-A=GPT-2")
        if "|" in name or any(ord(c) < 32 for c in name) or name.startswith("oracle"):
            raise TxlabError(f"labels: {name!r} is not a display name: one line, no '|', not starting 'oracle' (the ideal model's row)")
        if names.get(member, name) != name:
            raise TxlabError(f"labels: {member} is named twice, {names[member]!r} and {name!r}")
        names[member] = name
    return names


def with_display_name(member: Member, spec: str, names: dict[str, str]) -> Member:
    """``member`` (``spec`` as the group names it) under its display name, if ``names`` gives one."""
    return replace(member, label=names.get(spec, names.get(member.label, member.label)))


def model_order(groups: Sequence[Sequence[str]], labels: Sequence[str]) -> tuple[str, ...]:
    """The names of every member of ``groups`` (lists of members as the study names them), each once, in the order
    they first appear: what :attr:`Group.model_order` holds. A label naming none of them is refused (a typo would
    otherwise leave its member unnamed without a word)."""
    names = display_names(labels)
    specs = [m for members in groups for m in members]
    known = {*specs, *map(default_label, specs)}
    for member in names:
        if member not in known:
            raise did_you_mean(member, known, "member in labels")
    return tuple(dict.fromkeys(names.get(m, names.get(default_label(m), default_label(m))) for m in specs))


def resolve_member(member: str, settings: ReclSettings, train_seed: int | None = None) -> Member:
    """An existing directory is a run used as-is; a preset name resolves to its zoo directory; ``hf:SOURCE``
    is a Hugging Face checkpoint, whose losses go to ``<models_root>/hf/<name>-<fingerprint>/``.

    With a ``train_seed`` a preset's run trains with that seed in its own directory, the zoo's name
    ending ``-seed<s>`` (seed 0 too: the name without a seed says nothing of the seed its run was trained
    with, since ``--set train.seed=3`` trains into it as well); the other members are the same for every seed."""
    if hf.is_hf_spec(member):
        source = hf.hf_source(member)  # checked: a folder with a config.json, or a Hub id
        label = default_label(member)
        return Member(label, Path(settings.models_root) / "hf" / f"{label}-{hf.fingerprint(source)}", None, source=source)
    path = Path(member)
    if path.is_dir():
        if not has_checkpoint(path):
            raise TxlabError(f"{path} holds no checkpoint: is it a run directory made by `txlab train`?")
        return Member(default_label(member), path, saved_config(path))
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


def scaled_grid(span: int) -> str:
    """About ten context lengths up to a training span: steps of a multiple of 10 (20:240:20 for 256)."""
    step = 10 * max(1, span // 120) if span >= 120 else max(1, span // 12)
    return f"{step}:{span // step * step}:{step}"


def member_span(member: Member) -> int | None:
    """The longest context a member attended in training: a txlab run's ``model.training_span`` (None for a recurrent
    model), a Hugging Face checkpoint's position table (None when its config names none)."""
    if member.source:
        return hf.trained_length(member.source)
    return member.config.model.training_span


def collection_defaults(settings: ReclSettings, members: Sequence[Member]) -> dict[str, Any]:
    """The value each setting nobody gave takes, here and nowhere else: at size paper the paper's grid and 20 x 500
    targets; at a smaller size a grid up to the members' longest training span and the 2,000 targets of the cpu
    profile, minutes on a laptop; placebo losses except on a synthetic corpus, whose ideal model gives the truth.
    In words no grid follows from the members (a training span counts tokens: the grid is refused unset), and
    placebo losses are on (a text in words has no ideal model)."""
    chosen: dict[str, Any] = dict(PAPER_COLLECTION if settings.size == "paper" else SMALL_COLLECTION)
    if settings.unit == "word":
        if settings.grid is None:
            raise TxlabError("in words, give the grid (e.g. --set grid=2:40:2): a member's training span counts its own tokens "
                             "(256 characters are about 45 English words, 256 BPE tokens about 190), so no grid in words follows from it")
        return {**{key: value for key, value in chosen.items() if key != "grid"}, "placebo": True}
    if settings.size != "paper":
        spans = [span for span in map(member_span, members) if span]
        if not spans:  # recurrent members only: in training their gradient reached one segment back
            spans = [m.config.model.tgt_len for m in members if m.config is not None]
        if not spans and settings.grid is None:
            raise TxlabError("no member says how long a context it was trained on: give the grid, e.g. --set grid=32:512:32")
        if spans:
            chosen["grid"] = scaled_grid(max(spans))
    chosen["placebo"] = group_data(members, settings).corpus not in SYNTHETIC
    return chosen


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


def check_members(members: Sequence[Member], unit: str = "token") -> None:
    """Before any model runs: every member is another model (by its label, and as a run: a symlink or a path
    spelled otherwise is the same run), and, in tokens, all read one corpus (RECL compares models on one token
    stream; in words each reads the group's text with its own tokenizer)."""
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
    if unit == "token" and len({json.dumps(_data_identity(d), sort_keys=True) for d in corpora.values()}) > 1:
        listed = ", ".join(f"{label} on {data.corpus}" for label, data in corpora.items())
        if len({d.corpus for d in corpora.values()}) == 1:
            differing = sorted({k for d in corpora.values() for k, v in _data_identity(d).items() if v != _data_identity(next(iter(corpora.values())))[k]})
            listed += f", with other {', '.join('data.' + k for k in differing)}"
        fix = ("; or score them on shared words of one text, whatever their tokenizers: --unit word --text FILE"
               if not {d.corpus for d in corpora.values()} & set(SYNTHETIC) else "")
        raise TxlabError(f"the group mixes corpora ({listed}): RECL compares models on one token stream; give --data to put every preset "
                         f"on one corpus{fix}")


def check_word_group(members: Sequence[Member], settings: ReclSettings) -> None:
    """Before any model runs, in words: every member reads text (a Hugging Face member brings its tokenizer; a txlab run
    was trained on own text or on a registry corpus, not on a synthetic one, whose tokens are symbols) and the group
    has one text (:func:`word_text`)."""
    for m in members:
        if m.source and hf.load_tokenizer(m.source) is None:
            raise TxlabError(f"{m.label} ({m.source}) brings no tokenizer: in words every member reads the text with its own")
        if not m.source and m.config.data.corpus in SYNTHETIC:
            raise TxlabError(f"{m.label} was trained on the synthetic corpus {m.config.data.corpus!r}, whose tokens are symbols, not text: in "
                             "words every txlab member is a run trained on text (own text, --text FILE, or a registry corpus such as "
                             "wikitext-103); score it in tokens (--unit token)")
    word_text(members, settings)


def word_text(members: Sequence[Member], settings: ReclSettings) -> DataConfig:
    """The corpus whose text a group in words is scored on (txlab.data.corpus.split_text_of): the settings' own
    ``text`` (cut by the settings' splits), else the text its txlab runs were trained on, which they must share: own
    text, or a registry corpus's text recovered from its tokens."""
    if settings.text:
        return run_config(None, overrides=[s for s in settings.sets if s.startswith("data.")], text=settings.text,
                          tokenizer=settings.tokenizer or "char").data
    texts = {_text_name(m.config.data): m.config.data for m in members if not m.source}
    if len(texts) != 1:
        found = f"its runs were trained on {len(texts)} texts ({', '.join(texts)})" if texts else "no member is a txlab run trained on one"
        raise TxlabError(f"in words the group is scored on one text, and {found}: give it with --text FILE_OR_DIR")
    return next(iter(texts.values()))


def _text_name(data: DataConfig) -> str:
    """Which text a run was trained on: own text's resolved path, or a registry corpus (enwik8 and text8 without their
    newlines, where the run dropped them, are another text)."""
    if data.corpus == TEXT_CORPUS:
        return str(Path(data.text).expanduser().resolve())
    return f"{data.corpus} without newlines" if data.enwik8_drop_newlines and CORPORA[data.corpus].reader == "bytes" else data.corpus


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
