"""Ablation studies from YAML: expand rows and grids into runs, run them stage by stage, report.

A study file (see ``studies/table6.yaml``) holds (each key declared with what it takes in :class:`StudyFile`,
:class:`StudyBase` and :class:`StudyRow`, which txlab.config.read_section checks):

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
                 evaluation lengths, ...

Every run lives in ``<out>/<name>-<profile>/runs/<run id>/`` and goes through stages that each
leave a file behind, so a rerun skips what is done and an interrupted study resumes:

    fit    (rows with ``fit`` only) fit.json: the config value that fits the memory budget
    train  checkpoint/ at train.max_steps (an interrupted training resumes from its checkpoint;
           a run whose checkpoint was not kept counts as trained when metrics.jsonl reached
           max_steps and every length is scored, as for committed results)
    eval   ablate/attn<A>-<split>-n<tokens>.json for every evaluation attention length A

``--shard i/N`` runs every N-th run starting at the i-th, so N machines split a study; copying
their ``runs/`` folders together merges them (run ids are stable), and ``--report`` rebuilds the
table from whatever runs are present. ``--seeds`` keeps some training seeds (before the shards split
them), so a long study can be done a few seeds at a time.

The driver of `txlab ablate`, named after it and built as every study driver (txlab.drivers): the
profile read by :func:`txlab.config.read_profile` into :class:`AblationSettings`, ``--set`` applied
by :func:`txlab.config.override_settings`, and an :class:`AblationResult` back.

Attention length: with memory, evaluation at length A keeps A tokens of memory with
``same_length`` on, so every query attends exactly A keys (its own and the A-1 before it).
A model with a fixed window (the vanilla Transformer) is scored on segments of A tokens without
memory, as it was trained, and cannot take A beyond its window. The training attention length
("PPL init") is the longest span a query sees in training, ``tgt_len + mem_len``.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import yaml

from txlab.analysis.ablation import ABLATION_COLUMNS, TABLE6_COLUMNS, AblationReport, ablation_eval_name, write_ablation_report
from txlab.analysis.claims import Claim, read_claims
from txlab.config import NON_NEGATIVE, POS_ENCODINGS, POSITIVE, SEED, RunConfig, apply_overrides, entry, override_settings, read_profile, read_section, read_yaml, setting, to_dict, update_dataclass
from txlab.data.corpus import load_corpus
from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import read_json, read_yaml_mapping, write_json_atomic, write_text_atomic
from txlab.presets import PRESETS, SIZES, resolve_preset
from txlab.runs.checkpoint import config_differences, has_checkpoint, read_meta
from txlab.runs.evaluate import EvalSettings, evaluate_run
from txlab.runs.footprint import MIB, fit_length, training_memory
from txlab.runs.launch import Failure, SlurmSettings, Task, check_launcher, run_jobs
from txlab.runs.plan import (
    COMPUTE_EFFICIENCY,
    LONG_S,
    MODEL_OVERHEAD_S,
    STARTUP_S,
    Plan,
    format_count,
    format_seconds,
    machine_gflops,
    model_counts,
    quickest,
    seconds_for,
    split_tokens,
    training_flops,
    vocab_size,
)
from txlab.runs.train import train
from txlab.runs.zoo import known_vocab_size, logged_training_step
from txlab.workspace import resolve

SEMANTIC_KEYS = {"recurrence": "model.mem_len", "encoding": "model.pos_enc", "loss": "train.loss"}
"""Row keys named as the paper's table columns, and the config key each one sets."""

@dataclass(frozen=True)
class AblationSettings:
    """One profile of a study: everything besides the rows (the study profile's keys, ``--set`` on the command line)."""

    size: str = setting("cpu", "Preset size of every run.", SIZES)
    data: str = setting("", "Corpus of every run (empty: the preset's own).")
    sets: list[str] = setting([], "Config overrides (key=value) applied to every run, before the rows' own changes.")
    row_sets: list[str] = setting([], "Overrides for single rows of this profile: <row id>:<key>=<value> (e.g. a larger cpu model for one row).")
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


@dataclass
class AblationResult:
    """What one ``txlab ablate`` did: the plan, and unless it was a dry run the table it wrote."""

    study: str
    profile: str
    shard: tuple[int, int]
    """(i, N): the i-th of N shards (1, 1 for the whole study)."""
    plan: dict[str, Any]
    """Per-run costs and the estimated time (:func:`estimate`)."""
    out_dir: str
    table: AblationReport | None = None
    """None for a dry run."""
    failed: list[Failure] | None = None
    """The jobs that failed, with their logs (None unless the runs went to a scheduler)."""
    elapsed_s: float | None = None

    def summary(self) -> dict[str, Any]:
        """The --json document: the plan, and the rows, claims and failed jobs where there are any."""
        doc: dict[str, Any] = {"study": self.study, "profile": self.profile, "shard": list(self.shard), "out_dir": self.out_dir}
        if self.table is not None:
            doc.update(rows=[row.record() for row in self.table.rows], claims=[claim.record() for claim in self.table.claims])
        doc["plan"] = self.plan
        if self.failed is not None:
            doc["failed"] = [asdict(f) for f in self.failed]
        return doc


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


def _scoring_lengths(row: Row, cfg: RunConfig, settings: AblationSettings) -> tuple[tuple[int, ...], int]:
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
    data, settings = read_profile(path, tuple(f.name for f in dataclasses.fields(StudyFile)), profile, AblationSettings())
    study = read_section(StudyFile, {key: value for key, value in data.items() if key != "profiles"}, str(path), "study")
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
        eval_lens, init_len = _scoring_lengths(row, cfg, settings)
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


def parse_shard(spec: str | None) -> tuple[int, int]:
    """'2/4' -> (2, 4): the second of four shards (1-based); None -> (1, 1)."""
    if not spec:
        return 1, 1
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise TxlabError(f"--shard takes i/N with 1 <= i <= N (e.g. 1/4), got {spec!r}")
    return int(match[1]), int(match[2])


def runs_of_seeds(study: AblationStudy, seeds: Sequence[int] | None) -> list[PlannedRun]:
    """The study's runs of the training seeds ``seeds`` (every run for None); a seed no run has is refused."""
    if seeds is None:
        return list(study.runs)
    planned = sorted({run.seed for run in study.runs})
    unknown = [seed for seed in seeds if seed not in planned]
    if unknown:
        raise TxlabError(f"--seeds {','.join(map(str, unknown))}: the profile {study.profile!r} trains seeds {','.join(map(str, planned))}")
    return [run for run in study.runs if run.seed in seeds]


def shard_runs(runs: Sequence[PlannedRun], index: int, count: int) -> list[PlannedRun]:
    """The runs of shard ``index`` of ``count``: every count-th run, starting at the index-th."""
    return [run for i, run in enumerate(runs) if i % count == index - 1]


# --------------------------------------------------------------------------------------------------
# Cost estimate


def run_cost(run: PlannedRun, settings: AblationSettings) -> dict[str, Any]:
    """Parameters and FLOPs of a run's training (forward + backward) and evaluation (analytic)."""
    cfg = run.config
    n_token = vocab_size(cfg)
    row: dict[str, Any] = {"run_id": run.run_id, "params": None, "train_flops": None, "eval_flops": None}
    if n_token is None:
        return row
    model = model_counts(cfg, n_token)
    row["params"] = model.parameters
    row["train_flops"] = training_flops(cfg)
    eval_tokens = settings.eval_tokens or split_tokens(cfg, settings.split)
    if eval_tokens is not None:
        row["eval_flops"] = sum(eval_tokens * model.flops_per_token(length) for length in run.eval_lens)
    return row


def estimate(study: AblationStudy, runs: Sequence[PlannedRun], gflops: float | None) -> dict[str, Any]:
    """Per-run costs and the study's estimated time at ``COMPUTE_EFFICIENCY`` x ``gflops``."""
    rows = [run_cost(run, study.settings) for run in runs]
    for r in rows:
        known = r["train_flops"] is not None and r["eval_flops"] is not None
        compute = seconds_for(r["train_flops"] + r["eval_flops"], gflops) if known else None
        r["seconds"] = None if compute is None else compute + MODEL_OVERHEAD_S  # each run builds, trains and scores a model
    flops = [r[k] for r in rows for k in ("train_flops", "eval_flops")]
    known = None if any(f is None for f in flops) else sum(flops)
    compute = seconds_for(known, gflops)
    seconds = None if compute is None else compute + STARTUP_S + MODEL_OVERHEAD_S * len(rows)
    return {"runs": rows, "total_flops": known, "gflops": gflops, "seconds": seconds}


def describe_plan(study: AblationStudy, runs: Sequence[PlannedRun], cost: dict[str, Any]) -> str:
    """The runs to do, one line each, with parameters, evaluation lengths, estimated time and status."""
    lines = [f"{'run':<34} {'params':>8} {'tgt/mem':>9} {'loss':>5} {'eval lengths':<28} {'est.':>7}  status"]
    by_id = {r["run_id"]: r for r in cost["runs"]}
    for run in runs:
        c, est = run.config, by_id[run.run_id]
        params = f"{est['params'] / 1e6:.2f}M" if est["params"] else "-"
        shape = f"{'fit' if run.row.fit == 'model.tgt_len' else c.model.tgt_len}/{c.model.mem_len}"
        lens = ",".join(map(str, run.eval_lens))
        lines.append(f"{run.run_id:<34} {params:>8} {shape:>9} {c.train.loss:>5} {lens:<28} {format_seconds(est['seconds']):>7}  {run_status(run, study.settings)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Running


def _eval_record_path(run: PlannedRun, length: int, settings: AblationSettings) -> Path:
    return run.directory / "ablate" / ablation_eval_name(length, settings.split, settings.eval_tokens)


def _is_trained(run: PlannedRun, config: RunConfig) -> bool:
    if not has_checkpoint(run.directory):
        return False
    return read_meta(run.directory)["step"] >= config.train.max_steps


def run_status(run: PlannedRun, settings: AblationSettings) -> str:
    """'done', 'trained, k/n lengths scored', 'resumes at step s' or 'new'.

    A run whose checkpoint is gone (committed results keep records, not weights) is done when its
    training reached max_steps and every length is scored; otherwise it has to train again."""
    try:  # the planned config before its fit: the fitted key is the one it may differ in
        _check_same_config(run, run.config, also_ignored=_fitted_keys(run, settings))
    except TxlabError:  # said in the plan, not found by the run after training the others
        return "another configuration in its folder: the run refuses it"
    run = _as_fitted(run, settings)
    scored = sum(_eval_record_path(run, a, settings).is_file() for a in run.eval_lens)
    steps = run.config.train.max_steps
    if has_checkpoint(run.directory):
        step = read_meta(run.directory)["step"]
        if step >= steps:
            return "done" if scored == len(run.eval_lens) else f"trained, {scored}/{len(run.eval_lens)} lengths scored"
        return f"resumes at step {step}"
    if scored == len(run.eval_lens) and logged_training_step(run.directory) >= steps:
        return "done"
    return "new"


def _as_fitted(run: PlannedRun, settings: AblationSettings) -> PlannedRun:
    """A fitted row's run as its saved config has it (the fitted key, its steps under fit_equal_tokens, the lengths it is
    scored at); the plan as it is for any other run, or before the fit."""
    saved = run.directory / "config.yaml"
    if not (run.row.fit and saved.is_file()):
        return run
    config = update_dataclass(RunConfig(), read_yaml_mapping(saved, "delete it and rerun `txlab ablate` to write it again"))
    eval_lens, init_len = _scoring_lengths(run.row, config, settings)
    return replace(run, config=config, eval_lens=eval_lens, init_len=init_len)


def _fitted_keys(run: PlannedRun, settings: AblationSettings) -> tuple[str, ...]:
    """Config keys (as config_differences names them) that a run's fit sets, so its saved config may differ from the plan in them."""
    if not run.row.fit:
        return ()
    return (f"{run.row.fit}:", "train.max_steps:") if settings.fit_equal_tokens else (f"{run.row.fit}:",)


def _check_same_config(run: PlannedRun, config: RunConfig, also_ignored: tuple[str, ...] = ()) -> None:
    saved = run.directory / "config.yaml"
    if not saved.is_file():
        return
    # read through the config classes, so a key added to txlab since the run was saved compares as its default,
    # which by design reproduces what the run did before the key existed
    written = update_dataclass(RunConfig(), read_yaml_mapping(saved, "delete it and rerun `txlab ablate` to write it again"))
    differences = config_differences(to_dict(written), to_dict(config))
    differences = [d for d in differences if not d.startswith(("model.n_token", "train.device", "train.threads", *also_ignored))]
    if differences:
        raise TxlabError(
            f"{run.directory} was made with another configuration ({'; '.join(differences[:3])}); "
            "move it away to rerun, or restore the study as it was"
        )


def _n_token(cfg: RunConfig) -> int:
    return cfg.model.n_token or known_vocab_size(cfg.data.corpus) or load_corpus(cfg.data, progress=False).n_token


def _fit_run(run: PlannedRun, study: AblationStudy, budget_bytes: Callable[[], int], echo: Callable[[str], None]) -> RunConfig:
    """The run's configuration with its ``fit`` key set to the largest value within the budget (cached in fit.json)."""
    if not run.row.fit:
        return run.config
    record_path = run.directory / "fit.json"
    if record_path.is_file():
        record = read_json(record_path, "delete it and rerun `txlab ablate` to measure it again", keys={"key": str, "value": int})
    else:
        n_token = _n_token(run.config)
        budget = budget_bytes()
        value, used = fit_length(
            run.config, run.row.fit, budget, lambda cfg: training_memory(cfg, n_token, study.settings.device), step=study.settings.fit_step
        )
        record = {"key": run.row.fit, "value": value, "bytes": used, "budget_bytes": budget, "device": study.settings.device}
        write_json_atomic(record_path, record)
        echo(f"{run.run_id}: {run.row.fit} = {value} fits the memory budget ({used / MIB:.1f} of {budget / MIB:.1f} MiB)")
    section, _, key = record["key"].partition(".")
    fitted = update_dataclass(run.config, {section: {key: record["value"]}})
    if study.settings.fit_equal_tokens:
        fitted = update_dataclass(fitted, {"train": {"max_steps": equal_token_steps(_budget_row_config(study), fitted)}})
    return fitted


def equal_token_steps(reference: RunConfig, cfg: RunConfig) -> int:
    """The steps at which ``cfg`` reads as many training tokens as ``reference`` does in its max_steps (to the nearest step)."""
    return max(1, round(reference.train.max_steps * reference.tokens_per_step / cfg.tokens_per_step))


def _budget_row_config(study: AblationStudy) -> RunConfig:
    return next(run.config for run in study.runs if run.row.id == study.memory_budget)


def _budget(study: AblationStudy) -> Callable[[], int]:
    """The memory budget in bytes, measured once on first use."""
    cache: list[int] = []

    def measure() -> int:
        if not cache:
            budget = study.memory_budget
            if isinstance(budget, str):
                row_runs = [run for run in study.runs if run.row.id == budget]
                cache.append(training_memory(row_runs[0].config, _n_token(row_runs[0].config), study.settings.device))
                for run in row_runs:  # the table shows the budget beside the fitted rows' memory
                    write_json_atomic(run.directory / "memory.json", {"bytes": cache[0], "device": study.settings.device})
            else:
                cache.append(int(float(budget) * MIB))
        return cache[0]

    return measure


def _evaluate(run: PlannedRun, config: RunConfig, settings: AblationSettings, window: int | None, progress: bool, echo: Callable[[str], None]) -> None:
    for length in run.eval_lens:
        record_path = _eval_record_path(run, length, settings)
        if record_path.is_file():
            continue
        if window is None:  # memory of `length` tokens, every query attending exactly `length` keys
            scoring = {"tgt_len": config.eval.tgt_len if config.eval.tgt_len > 0 else config.model.tgt_len, "attn_len": length}
        else:  # a fixed window: segments of `length` tokens without memory, as in training
            scoring = {"tgt_len": length, "mem_len": 0}
        evaluation = EvalSettings(split=settings.split, batch_size=settings.eval_batch_size or None, max_tokens=settings.eval_tokens, **scoring)
        metric, value = evaluate_run(run.directory, evaluation, device=settings.device, progress=progress, record_path=record_path).metric
        echo(f"{run.run_id}: attention length {length}: {metric} {value:.3f}")


def _write_row_record(run: PlannedRun, config: RunConfig, study: AblationStudy) -> None:
    """What the report needs to know of a run besides its config: its row, seed and how it is scored."""
    write_json_atomic(run.directory / "ablate" / "row.json", {
        "params": model_counts(config, _n_token(config)).parameters, "run_id": run.run_id,
        "row_id": run.row.id, "remark": run.row.remark, "seed": run.seed, "init_len": run.init_len,
        "eval_lens": list(run.eval_lens), "split": study.settings.split, "eval_tokens": study.settings.eval_tokens,
        "study": study.name, "profile": study.profile,
    })


def run_one(run: PlannedRun, config: RunConfig, study: AblationStudy, progress: bool, echo: Callable[[str], None]) -> None:
    """The missing stages of one run after ``fit`` (``config`` holds the fitted value): train, evaluate."""
    if not _is_trained(run, config):
        from_scratch = not has_checkpoint(run.directory)
        if from_scratch:  # scores and records of an earlier model are stale: the study replaces them on purpose
            for stale in (run.directory / "ablate").glob("attn*.json"):
                stale.unlink()
        echo(f"{run.run_id}: training ({config.train.max_steps} steps)")
        train(config, run.directory, resume=not from_scratch, progress=progress, echo=echo)
    _evaluate(run, config, study.settings, model_window(config), progress, echo)


def quicker_profile(study: AblationStudy, gflops: float) -> str:
    """'--profile P would take about T' for the first other profile of the study that takes under an
    hour here on a CPU, else ''."""
    candidates = []
    for name in read_yaml(study.path)["profiles"]:
        if name == study.profile:
            continue
        other = load_study(study.path, name)
        if torch.device(other.settings.device).type == "cpu":
            candidates.append((f"--profile {name} ({len(other.runs)} runs, size {other.settings.size})",
                               Plan(flops=estimate(other, other.runs, gflops)["total_flops"], gflops=gflops,
                                    budget_s=MODEL_OVERHEAD_S * len(other.runs))))
    return quickest(candidates)


def run_planned(run: PlannedRun, study: AblationStudy, budget_bytes: Callable[[], int], progress: bool, echo: Callable[[str], None], counter: str = "") -> None:
    """Every missing stage of one run: fit, train, evaluate (nothing when it is done)."""
    config = _fit_run(run, study, budget_bytes, echo)
    if run.row.fit:  # a fitted segment length moves the training attention length (PPL init)
        eval_lens, init_len = _scoring_lengths(run.row, config, study.settings)
        run = replace(run, eval_lens=eval_lens, init_len=init_len)
    _check_same_config(run, config)  # a finished run of another configuration is not this study's result
    _write_row_record(run, config, study)
    status = run_status(run, study.settings)
    echo(f"{counter}{run.run_id}: {status}")
    if status != "done":
        run_one(run, config, study, progress, echo)


def run_job(path: str, profile: str, run_id: str, sets: list[str]) -> str:
    """One run of a study as a scheduler job (what ``--launcher slurm`` submits): reads the study as
    the submitting command did and does the run's missing stages. Returns the run's directory."""
    study = load_study(path, profile, sets)
    (run,) = [run for run in study.runs if run.run_id == run_id]
    run_planned(run, study, _budget(study), progress=True, echo=print)
    return str(run.directory)


def job_progress(run: PlannedRun, settings: AblationSettings) -> str:
    """'step s/n, k/m lengths scored', from the files a run's job writes."""
    run = _as_fitted(run, settings)
    scored = sum(_eval_record_path(run, a, settings).is_file() for a in run.eval_lens)
    return f"step {logged_training_step(run.directory)}/{run.config.train.max_steps}, {scored}/{len(run.eval_lens)} lengths scored"


def run_study(
    path: str | Path,
    profile: str = "cpu",
    *,
    shard: str | None = None,
    seeds: Sequence[int] | None = None,
    dry_run: bool = False,
    report_only: bool = False,
    launcher: str = "local",
    sets: Sequence[str] = (),
    progress: bool = True,
    announce: Callable[[str], None] = print,
    echo: Callable[[str], None] = print,
) -> AblationResult:
    """What ``txlab ablate`` does: plan, (run the missing stages of this shard's runs, here or as
    scheduler jobs with ``launcher`` slurm), report.

    ``seeds`` keeps the runs of those training seeds (before ``shard`` splits them), for a study done in parts;
    the report covers every run present.

    Returns the plan and, unless ``dry_run``, the table written (and with the slurm launcher the jobs
    that failed, with their logs).
    """
    check_launcher(launcher)
    study = load_study(path, profile, sets)
    index, count = parse_shard(shard)
    runs = shard_runs(runs_of_seeds(study, seeds), index, count)
    settings = study.settings
    gflops = None if report_only else machine_gflops(settings.device, settings.threads)
    cost = estimate(study, runs, gflops)
    shard_note = f", shard {index}/{count}" if count > 1 else ""
    announce(
        f"study {study.name} ({study.path}), profile {profile!r}: size {settings.size}, corpus {settings.data or 'per preset'}, "
        f"device {settings.device}; {len(runs)} of {len(study.runs)} runs{shard_note}"
    )
    if not report_only and not gflops:
        announce(f"no time estimate: device {settings.device} cannot be measured on this machine")
    if gflops:
        announce(f"estimated time {format_seconds(cost['seconds'])} for all of them from scratch "
                 f"({format_count(cost['total_flops'])}FLOP at {COMPUTE_EFFICIENCY:.0%} of the measured {gflops:.0f} GFLOP/s matmul ceiling, "
                 f"and {format_seconds(STARTUP_S + MODEL_OVERHEAD_S * len(runs))} of start-up and per-run overheads)")
        if cost["seconds"] is not None and cost["seconds"] > LONG_S and torch.device(settings.device).type == "cpu":
            quicker = quicker_profile(study, gflops)
            if quicker:
                announce(f"that is over an hour on this CPU: {quicker}")
    result = AblationResult(study.name, profile, (index, count), cost, str(study.out_dir))
    if dry_run:
        announce(describe_plan(study, runs, cost))
        return result
    if not report_only:
        write_text_atomic(study.out_dir / "study.yaml", yaml.safe_dump(
            {"study": str(study.path), "profile": profile, "settings": asdict(study.settings),
             "runs": [run.run_id for run in study.runs]}, sort_keys=False))
        budget_bytes = _budget(study)
        if isinstance(study.memory_budget, str) and any(run.row.fit for run in runs):
            budget_bytes()  # measured (and recorded beside the budget row) even when every fit is cached
        started = time.perf_counter()
        if launcher == "slurm":
            pending = [run for run in runs if run_status(run, settings) != "done"]
            echo(f"{len(runs) - len(pending)} of {len(runs)} runs done; submitting the other {len(pending)}")
            tasks = [Task(run.run_id, run_job, (str(study.path), profile, run.run_id, list(sets)), partial(job_progress, run, settings))
                     for run in pending]
            result.failed = run_jobs(tasks, settings.slurm, study.out_dir / "jobs", f"txlab-{study.name}-{profile}", echo)
        else:
            for i, run in enumerate(runs, 1):
                run_planned(run, study, budget_bytes, progress, echo, f"[{i}/{len(runs)}] ")
        result.elapsed_s = time.perf_counter() - started
    result.table = write_ablation_report(
        study.out_dir, study.fig_dir, study.columns,
        [run.run_id for run in study.runs], title=f"{study.description or study.name} ({profile} profile)", claims=study.claims,
    )
    return result
