"""What a run directory recorded, read without a model: its metrics log as a table, and its label in
words from its saved configuration (runs that differ only in their training seed share one).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from txlab.errors import TxlabError
from txlab.fileio import read_metrics_log, read_yaml_mapping


def read_metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics.jsonl as a table (one row per logged record), with the run's name attached."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise TxlabError(f"{run_dir} has no metrics.jsonl: is it a run directory made by `txlab train`?")
    records = read_metrics_log(path, on_torn_last_line=lambda message: None)  # a run still training may be mid-line
    frame = pd.DataFrame.from_records(records)
    frame["run"] = Path(run_dir).name
    return frame


def run_label(run_dir: Path) -> str:
    """'<preset> (<size>) on <corpus>' from the run's saved config, else the directory name."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return Path(run_dir).name
    cfg = read_yaml_mapping(path, "delete it and rerun `txlab train` to write it again")
    name = cfg.get("preset") or cfg.get("name") or Path(run_dir).name
    return f"{name} ({cfg.get('size') or 'custom'}) on {cfg['data']['corpus']}"


def distinct_labels(run_dirs: list[Path]) -> list[str]:
    """:func:`run_label` of each run, with the directory name added where runs share a label
    (several runs of one preset on one corpus)."""
    labels = [run_label(run_dir) for run_dir in run_dirs]
    return [f"{label} [{Path(run_dir).name}]" if labels.count(label) > 1 else label for run_dir, label in zip(run_dirs, labels)]


def seed_group_labels(run_dirs: list[Path]) -> list[str]:
    """:func:`distinct_labels`, except that runs whose config.yaml differ only in ``train.seed`` (and
    their name) are seeds of one configuration: they share the first one's label with ', k seeds'."""
    labels = distinct_labels(run_dirs)
    keys = []
    for run_dir in run_dirs:
        path = Path(run_dir) / "config.yaml"
        cfg = read_yaml_mapping(path, "delete it and rerun `txlab train` to write it again") if path.is_file() else {"run": str(run_dir)}
        train = {k: v for k, v in (cfg.get("train") or {}).items() if k != "seed"}
        keys.append(repr(sorted({**cfg, "name": None, "train": sorted(train.items())}.items())))
    first = {key: labels[keys.index(key)] for key in keys}
    return [f"{first[key]}, {keys.count(key)} seeds" if keys.count(key) > 1 else label for key, label in zip(keys, labels)]
