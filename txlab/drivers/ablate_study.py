"""An ablation study file (``txlab ablate``'s): its keys, its profiles, and the runs it expands into.

A study file (see ``studies/table6.yaml``) holds (each key declared with what it takes in :class:`StudyFile`,
:class:`StudyBase` and :class:`StudyRow`, which txlab.study.read_section checks):

    name         prefix of the output folders
    description  one line for the report
    base         what every run starts from: ``preset`` and ``set`` (config overrides)
    rows         explicit variants (Table 6 is a list, not a product); each may give
                 id, remark, preset, recurrence, encoding, loss, set, eval_lens, fit
    grid         axes crossed with every row: key -> values (key: recurrence, encoding, loss or a
                 dotted config key such as train.lr)
    seeds        training seeds of every variant (the table shows mean and spread)
    columns      the table's columns (see txlab.analysis.ablation.ABLATION_COLUMNS), optionally renamed
    memory_budget  for rows with ``fit``: the id of the row whose training memory is the budget,
                 or a number of MiB
    claims       the paper's claims as {claim, better, worse, metric, two_sided} (row ids; metric
                 ppl_init or ppl_best; one-sided unless two_sided: true), tested seed by seed as one
                 family in the report (txlab.analysis.claims: exact sign-flip test on log-perplexity, Holm)
    profiles     profile name -> settings (:class:`AblationSettings`): size, corpus, overrides,
                 evaluation lengths, ...; a profile may start from another's with ``extends`` (txlab.study)

:func:`load_study` reads the file at one profile (through :func:`txlab.study.read_study`, as every study
command does), applies the command line's ``--set`` (:func:`txlab.config.override_settings`) and
expands the rows and the grid into :class:`PlannedRun`'s, checking everything before any run starts.

Attention length: with memory, evaluation at length A keeps A tokens of memory with
``same_length`` on, so every query attends exactly A keys (its own and the A-1 before it).
A model with a fixed window (the vanilla Transformer) is scored on segments of A tokens without
memory, as it was trained, and cannot take A beyond its window. The training attention length
("PPL init") is the longest span a query sees in training, ``tgt_len + mem_len``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from txlab.analysis.ablation import ABLATION_COLUMNS, TABLE6_COLUMNS
from txlab.analysis.claims import Claim, read_claims
from txlab.config import NON_NEGATIVE, POS_ENCODINGS, POSITIVE, SEED, RunConfig, apply_overrides, override_settings, setting, update_dataclass
from txlab.errors import TxlabError, did_you_mean
from txlab.presets import PRESETS, SIZES, resolve_preset
from txlab.runs.launch import SlurmSettings
from txlab.runs.plan import model_counts
from txlab.study import entry, read_section, read_study
from txlab.workspace import resolve

SEMANTIC_KEYS = {"recurrence": "model.mem_len", "encoding": "model.pos_enc", "loss": "train.loss"}
"""Row keys named as the paper's table columns, and the config key each one sets."""


@dataclass(frozen=True)
class AblationSettings:
    """One profile of a study: everything besides the rows (the study profile's keys, ``--set`` on the command line)."""

    size: str = setting("cpu", "Preset size of every run.", SIZES)
    data: str = setting("", "Corpus of every run (empty: the preset's own).")
    sets: list[str] = setting([], "Config overrides (key=value) applied to every run, before the rows' own changes.", overrides=True)
    row_sets: list[str] = setting([], "Overrides for single rows of this profile: <row id>:<key>=<value> (e.g. a larger cpu model for one row).",
                                  overrides=True)
    seeds: list[int] = setting([], "Training seeds (empty: the study's seeds, else [0]).", valid=SEED)
    row_seeds: list[str] = setting([], "Seeds for single rows of this profile: <row id>:<seed>,<seed>... (rows that decide no claim "
                                   "can take one seed where compute is short).")
    eval_lens: list[int] = setting([], "Evaluation attention lengths; each run is also scored at its training length (PPL init).", valid=POSITIVE)
    eval_tokens: int = setting(0, "Targets scored at each length from the start of the split (0: the whole split).", valid=NON_NEGATIVE)
    eval_batch_size: int = setting(0, "Evaluation streams (0: each run's eval.batch_size).", valid=NON_NEGATIVE)
    split: str = setting("valid", "Split every run is scored on.", ("train", "valid", "test"))
    device: str = setting("cpu", "Torch device of training and evaluation (cpu, cuda, cuda:1, ...).")
    threads: int = setting(0, "CPU threads for torch (0: torch's default).", valid=NON_NEGATIVE)
    fit_step: int = setting(8, "Granularity of the length that a row's fit searches.", valid=POSITIVE)
    fit_equal_tokens: bool = setting(False, "Rows with fit train on as many tokens as the memory_budget row: their train.max_steps "
                                     "is scaled by the budget row's tokens per step over theirs (to the nearest step). Off: the "
                                     "same steps, so a longer fitted segment reads more tokens.")
    out: str = setting("results/ablate", "Runs and tables go to <out>/<name>-<profile>/; a relative path is read under the home (txlab.workspace).")
    figures: str = setting("figures/ablate", "Figures go to <figures>/<name>-<profile>/; a relative path is read under the home.")
    slurm: SlurmSettings = setting(SlurmSettings, "How each run is submitted with --launcher slurm (slurm.partition, slurm.time_min, ...).")


@dataclass(frozen=True)
class Row:
    """One variant of the study (an explicit row, crossed with one point of the grid)."""

    id: str
    remark: str
    preset: str
    changes: dict[str, Any]
    """Semantic keys (recurrence, encoding, loss) and dotted config keys with their values."""
    eval_lens: tuple[int, ...] | None
    fit: str
    """Config key to fit under the memory budget ('' for none)."""
    where: str
    """Where the row is defined (file:line), for error messages."""


@dataclass(frozen=True)
class PlannedRun:
    """One training run of the study and how it is scored."""

    run_id: str
    row: Row
    seed: int
    config: RunConfig
    """Resolved configuration (before any ``fit``; ``model.n_token`` 0 = from the corpus)."""
    eval_lens: tuple[int, ...]
    """Evaluation attention lengths, ascending, the training length included."""
    init_len: int
    """The training attention length, tgt_len + mem_len (the paper's "PPL init")."""
    directory: Path


@dataclass(frozen=True)
class AblationStudy:
    """A study file read at one profile: its runs, expanded and checked, and how the table is built."""

    name: str
    description: str
    profile: str
    settings: AblationSettings
    runs: list[PlannedRun]
    columns: list[tuple[str, str]]
    """(column key, header) pairs of the table."""
    memory_budget: str | float | None
    path: Path
    claims: list[Claim] = field(default_factory=list)
    """The paper's claims about the rows, tested over seeds in the report."""
    variant: str = ""
    """What the command line's --set changed in the runs (:func:`variant_suffix`), part of the folders' name."""

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.profile}{self.variant}"

    @property
    def out_dir(self) -> Path:
        return Path(self.settings.out) / self.folder

    @property
    def fig_dir(self) -> Path:
        return Path(self.settings.figures) / self.folder


# --------------------------------------------------------------------------------------------------
# Reading and expanding a study file


def _row_lines(path: Path) -> list[int]:
    """1-based line of every item of the file's ``rows`` list (for error messages)."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    for key, value in root.value:
        if key.value == "rows" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-")


def _part(key: str, value: Any) -> str:
    """Readable id fragment of one change: 'norecur', 'shaw', 'half', 'tgt_len176'."""
    if key == "recurrence":
        return "recur" if value else "norecur"
    if key in ("loss", "encoding"):
        return str(value)
    return f"{key.rsplit('.', 1)[-1]}{value}"


def _as_changes(raw: dict[str, Any] | list[str], where: str) -> dict[str, Any]:
    """A ``set``: a mapping of dotted keys, or a list of ``key=value`` strings."""
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    changes = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep:
            raise TxlabError(f"{where}: override {item!r} must look like section.key=value")
        changes[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    return changes


def _lengths_problem(lengths: list[int]) -> str:
    return f"evaluation attention lengths must be >= 1, got {sorted(lengths)}" if any(x < 1 for x in lengths) else ""


def _grid_problem(grid: dict[str, list[Any]]) -> str:
    empty = [key for key, values in grid.items() if not values]
    return f"grid axis {empty[0]!r} has no values" if empty else ""


def _budget_problem(budget: str | float) -> str:
    return "" if isinstance(budget, str) or budget > 0 else f"memory_budget must be a row id or a positive number of MiB, got {budget!r}"


def _columns_problem(columns: list[str | dict[str, Any]]) -> str:
    mappings = [item for item in columns if isinstance(item, dict) and len(item) != 1]
    return f"a column given as a mapping names one column (name: header), got {mappings[0]!r}" if mappings else ""


CHANGES = "a mapping of config keys to values (or a list of key=value strings)"


@dataclass(frozen=True)
class StudyBase:
    """A study file's ``base``: what every run starts from."""

    preset: str = entry("", "a preset name")
    set: dict[str, Any] | list[str] = entry({}, CHANGES)


@dataclass(frozen=True)
class StudyRow:
    """One item of a study file's ``rows``, as written (:class:`Row` is what it expands to)."""

    id: str | int | None = entry(None, "a name (letters, digits, '.', '_')")
    remark: str = entry("", "text")
    preset: str = entry("", "a preset name")
    recurrence: bool | None = entry(None, "true or false")
    encoding: str | None = entry(None, f"one of {', '.join(POS_ENCODINGS)}")
    loss: str | None = entry(None, "full or half")
    set: dict[str, Any] | list[str] = entry({}, CHANGES)
    eval_lens: list[int] | None = entry(None, "a list of integers", _lengths_problem)
    fit: str = entry("", "one config key (e.g. model.tgt_len)")


@dataclass(frozen=True)
class StudyFile:
    """A study file's keys besides ``profiles``, each declared with what it takes (the module docstring says what each means)."""

    name: str = entry("", "text (the prefix of the output folders)")
    description: str = entry("", "one line of text")
    base: StudyBase = entry(StudyBase, "a mapping with the keys preset and set")
    rows: list[Any] = entry([{}], "a list of mappings")
    """Each read as a :class:`StudyRow` where it stands (file:line)."""
    grid: dict[str, list[Any]] = entry({}, "a mapping of keys (recurrence, encoding, loss or config keys) to non-empty lists of values", _grid_problem)
    seeds: list[int] = entry([], "a list of distinct integers (none: the profile's seeds, else [0])")
    columns: list[str | dict[str, Any]] = entry(list(TABLE6_COLUMNS), "a list of column names (or one-key mappings name: header)",
                                                _columns_problem)
    memory_budget: str | float | None = entry(None, "a row id or a positive number of MiB", _budget_problem)
    claims: Any = entry(None, "a list of claims")
    """Read by txlab.analysis.claims.read_claims, which checks them against the rows."""


def _read_row(raw: Any, base_preset: str, where: str) -> Row:
    entries = read_section(StudyRow, raw, where, "row")
    changes = {k: getattr(entries, k) for k in SEMANTIC_KEYS if getattr(entries, k) is not None}
    for key, value in _as_changes(entries.set, where).items():
        semantic = next((s for s, dotted in SEMANTIC_KEYS.items() if dotted == key), None)
        if semantic in changes and semantic != "recurrence" and changes[semantic] != value:
            raise TxlabError(f"{where}: {semantic}: {changes[semantic]!r} contradicts set {key}={value!r}")
        if semantic == "recurrence" and changes.get("recurrence") is False and value != 0:
            raise TxlabError(f"{where}: recurrence: false contradicts set {key}={value!r} (no recurrence means mem_len 0)")
        changes[key] = value
    preset = entries.preset or base_preset
    if preset not in PRESETS:
        raise did_you_mean(preset, PRESETS, f"preset at {where}")
    row_id = entries.id
    if row_id is None:
        parts = ([preset] if preset != base_preset else []) + [_part(k, v) for k, v in changes.items()]
        row_id = "-".join(parts) or "base"
    row_id = _slug(str(row_id))
    if not row_id:
        raise TxlabError(f"{where}: the row id must hold letters or digits")
    eval_lens = tuple(sorted(set(entries.eval_lens))) if entries.eval_lens is not None else None
    return Row(row_id, entries.remark, preset, changes, eval_lens, entries.fit, where)


def _grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every point of the grid's cartesian product, in file order (one empty point without a grid)."""
    keys = [str(k) for k in grid]
    return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]


def _apply_changes(cfg: RunConfig, changes: dict[str, Any], where: str) -> RunConfig:
    for key, value in changes.items():
        if key == "recurrence":
            if value is False:
                cfg = update_dataclass(cfg, {"model": {"mem_len": 0}, "eval": {"mem_len": 0}})
            continue
        dotted = SEMANTIC_KEYS.get(key, key)
        nested: Any = value
        for part in reversed(dotted.split(".")):
            nested = {part: nested}
        try:
            cfg = update_dataclass(cfg, nested)
        except TxlabError as err:
            raise TxlabError(f"{where}: {err}") from None
    if changes.get("recurrence") is True and cfg.model.mem_len == 0:
        raise TxlabError(f"{where}: recurrence: true, but model.mem_len is 0 in the resolved configuration (set model.mem_len)")
    return cfg


def _row_sets(settings: AblationSettings, row_ids: set[str], profile: str) -> dict[str, list[str]]:
    by_row: dict[str, list[str]] = {}
    for item in settings.row_sets:
        row_id, sep, override = item.partition(":")
        if not sep or "=" not in override:
            raise TxlabError(f"profiles.{profile}.row_sets: {item!r} must look like <row id>:<key>=<value>")
        if row_id not in row_ids:
            raise did_you_mean(row_id, sorted(row_ids), f"row id in profiles.{profile}.row_sets")
        by_row.setdefault(row_id, []).append(override)
    return by_row


def _row_seeds(settings: AblationSettings, row_ids: set[str], profile: str) -> dict[str, list[int]]:
    by_row: dict[str, list[int]] = {}
    for item in settings.row_seeds:
        row_id, sep, listed = item.partition(":")
        try:
            seeds = [int(s) for s in listed.split(",")] if sep else []
        except ValueError:
            seeds = []
        if not seeds or len(set(seeds)) != len(seeds):
            raise TxlabError(f"profiles.{profile}.row_seeds: {item!r} must look like <row id>:<seed>,<seed>... (distinct integers)")
        if row_id not in row_ids:
            raise did_you_mean(row_id, sorted(row_ids), f"row id in profiles.{profile}.row_seeds")
        if row_id in by_row:
            raise TxlabError(f"profiles.{profile}.row_seeds: row {row_id!r} is listed twice")
        by_row[row_id] = seeds
    return by_row


def model_window(cfg: RunConfig) -> int | None:
    """The longest context the configured model can use at all (a fixed window), or None."""
    return model_counts(cfg).max_context


def _columns(raw: list[str | dict[str, Any]], path: Path) -> list[tuple[str, str]]:
    columns = []
    for item in raw:
        key, header = next(iter(item.items())) if isinstance(item, dict) else (item, None)
        if key not in ABLATION_COLUMNS:
            raise did_you_mean(str(key), ABLATION_COLUMNS, f"column in {path}")
        columns.append((key, str(header) if header else ABLATION_COLUMNS[key]))
    return columns


def _row_config(row: Row, base: dict[str, Any], settings: AblationSettings, row_sets: list[str], path: Path, profile: str) -> RunConfig:
    """A row's configuration: the preset at the profile's size, then each layer below over the ones before it."""
    where_it_runs = {"train.device": settings.device, **({"train.threads": settings.threads} if settings.threads else {})}
    layers: list[tuple[str, dict[str, Any] | list[str]]] = [
        (f"profiles.{profile}.data", {"data.corpus": settings.data} if settings.data else {}),
        (f"{path}: base", base),
        (f"profiles.{profile}.sets", settings.sets),
        (row.where, row.changes),
        (f"profiles.{profile}.row_sets ({row.id})", row_sets),
        (f"profiles.{profile}", where_it_runs),
    ]
    cfg = resolve_preset(row.preset, settings.size)
    for where, changes in layers:
        cfg = _apply_changes(cfg, changes, where) if isinstance(changes, dict) else _apply_sets(cfg, changes, where)
    return cfg


def _apply_sets(cfg: RunConfig, sets: list[str], where: str) -> RunConfig:
    try:
        return apply_overrides(cfg, sets)
    except TxlabError as err:
        raise TxlabError(f"{where}: {err}") from None


def scoring_lengths(row: Row, cfg: RunConfig, settings: AblationSettings) -> tuple[tuple[int, ...], int]:
    """(evaluation attention lengths, the training one among them) of a row; refuses lengths its model cannot take."""
    init_len = cfg.model.tgt_len + cfg.model.mem_len
    asked = row.eval_lens if row.eval_lens is not None else tuple(settings.eval_lens)
    window = model_window(cfg)
    if window is not None:
        too_long = [a for a in asked if a > window]
        if too_long:
            raise TxlabError(
                f"{row.where}: row {row.id!r} is a fixed-window model ({window} tokens) and cannot be evaluated at "
                f"attention length {too_long[0]}; give the row its own eval_lens (at most {window})"
            )
        init_len = min(init_len, window)
    return tuple(sorted({*asked, init_len})), init_len


WHERE_IT_RUNS = ("device", "threads", "eval_batch_size", "out", "figures", "slurm.")
"""Settings that leave a study's runs and scores as they are (where and how fast they run), and so out of its folders' name."""


def variant_suffix(sets: Sequence[str]) -> str:
    """'' when ``--set`` changes only where the study runs, else what it changes, e.g. '-size-tiny': a
    study at other settings gets folders of its own instead of resuming (or refusing) the profile's."""
    parts = [item for item in sets if not item.split("=", 1)[0].strip().startswith(WHERE_IT_RUNS)]
    return "".join(f"-{_slug(item.replace('=', '-'))}" for item in parts)


def load_study(path: str | Path, profile: str = "cpu", sets: Sequence[str] = ()) -> AblationStudy:
    """Read, expand and check a study, with ``sets`` (``key=value``) over the profile's settings:
    every problem is reported before any run starts."""
    path = Path(path)
    study, settings = read_study(path, StudyFile, profile, AblationSettings())
    settings = replace(settings, out=str(resolve(settings.out)), figures=str(resolve(settings.figures)))
    settings = override_settings(settings, sets=sets)
    name = _slug(study.name or path.stem)
    if study.base.preset not in PRESETS:
        raise did_you_mean(study.base.preset, PRESETS, f"base preset in {path}")
    base = _as_changes(study.base.set, f"{path}: base")

    lines = _row_lines(path)
    rows = [_read_row(raw, study.base.preset, f"{path}:{lines[i]}" if i < len(lines) else f"{path}: row {i + 1}")
            for i, raw in enumerate(study.rows or [{}])]
    expanded = []
    for row in rows:
        for point in _grid_points(study.grid):
            for key in point:
                if key in row.changes:
                    raise TxlabError(f"{row.where}: the row sets {key!r}, which is also a grid axis")
            suffix = "-".join(_part(k, v) for k, v in point.items())
            row_id = f"{row.id}-{_slug(suffix)}" if suffix else row.id
            expanded.append(replace(row, id=row_id, changes={**row.changes, **point}))
    ids = [row.id for row in expanded]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise TxlabError(f"{path}: rows with the same id {duplicates[0]!r}: give them distinct 'id' values")

    seeds = settings.seeds or study.seeds or [0]
    if len(set(seeds)) != len(seeds):
        raise TxlabError(f"{path}: seeds must be distinct, got {seeds}")
    per_row = _row_sets(settings, set(ids), profile)
    seeds_of_row = _row_seeds(settings, set(ids), profile)
    variant = variant_suffix(sets)
    out_dir = Path(settings.out) / f"{name}-{profile}{variant}"

    runs = []
    for row in expanded:
        cfg = _row_config(row, base, settings, per_row.get(row.id, []), path, profile)
        if row.fit and study.memory_budget is None:
            raise TxlabError(f"{row.where}: fit needs the study's memory_budget (a row id or a number of MiB)")
        eval_lens, init_len = scoring_lengths(row, cfg, settings)
        for seed in seeds_of_row.get(row.id, seeds):
            run_id = f"{row.id}-s{seed}"
            run_cfg = update_dataclass(cfg, {"name": run_id, "train": {"seed": seed}})
            runs.append(PlannedRun(run_id, row, seed, run_cfg, eval_lens, init_len, out_dir / "runs" / run_id))

    if isinstance(study.memory_budget, str) and study.memory_budget not in ids:
        raise did_you_mean(study.memory_budget, ids, f"memory_budget row in {path}")
    if settings.fit_equal_tokens and not isinstance(study.memory_budget, str):
        raise TxlabError(f"{path}: profile {profile!r} sets fit_equal_tokens, which needs memory_budget to name a row "
                         f"(whose training tokens the fitted rows match), not {study.memory_budget!r}")
    claims = read_claims(study.claims, ids, str(path))
    return AblationStudy(name, study.description, profile, settings, runs, _columns(study.columns, path), study.memory_budget, path, claims,
                         variant)
