"""`txlab roles`: what a group of runs has learned on a synthetic corpus, as tables and one figure.

Each run is scored with its evaluation settings (the paper's protocol, txlab.runs.evaluate.evaluate_run) and
its per-token losses are split by token role and copy distance (txlab.data.diagnostics). The figure puts
the runs' copied-value loss against distance beside the ideal model's, with each run's training
attention span marked.

Scoring writes each run's record to RUN/eval/, and :func:`redraw_roles` draws the figure again from
those records alone (no checkpoint: committed runs keep none), through the same labels, title and
figure function as :func:`score_roles`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from txlab.analysis.figures import SPLIT_NAMES, models_in_words, sized_label
from txlab.analysis.roles import role_figure
from txlab.config import RunConfig, load_config
from txlab.data.registry import corpus_in_words
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import read_json
from txlab.runs.evaluate import EvalSettings, evaluate_run, evaluation_context
from txlab.runs.zoo import parameter_count


def _config(run_dir: Path) -> RunConfig:
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise TxlabError(f"{run_dir} has no config.yaml: is it a run directory made by `txlab train`?")
    return load_config(path)


def role_labels(run_dirs: list[Path], configs: list[RunConfig]) -> list[str]:
    """Each run's legend entry, its architecture and real size ('Transformer-XL (xl151m), 0.96M
    parameters'), with the run folder added where runs share one."""
    labels = [sized_label(cfg.preset or Path(run_dir).name, parameter_count(cfg)) for run_dir, cfg in zip(run_dirs, configs)]
    return [f"{label} [{Path(run_dir).name}]" if labels.count(label) > 1 else label for run_dir, label in zip(run_dirs, labels)]


def roles_title(configs: list[RunConfig], run_dirs: list[Path], split: str, max_tokens: int) -> str:
    """The figure's title in words: the models, their size, the corpus and the targets scored."""
    sizes = {cfg.size for cfg in configs}
    who = models_in_words([cfg.preset or Path(run_dir).name for cfg, run_dir in zip(configs, run_dirs)])
    who += f" ({sizes.pop()} size)" if len(sizes) == 1 and "" not in sizes else ""
    corpora = list(dict.fromkeys(cfg.data.corpus for cfg in configs))
    where = corpus_in_words(corpora[0]) if len(corpora) == 1 else " and ".join(corpora)
    split_name = SPLIT_NAMES.get(split, split)
    scored = f"the first {max_tokens:,} {split_name} targets" if max_tokens else f"the {split_name} split"
    return f"What each model learned, by token role: {who}\non {where}, {scored}"


def _figure(run_dirs: list[Path], records: list[dict[str, Any]], configs: list[RunConfig], out: Path, title: str,
            split: str, max_tokens: int) -> dict[str, Any]:
    runs = [{"run_dir": str(run_dir), "label": label, "train_span": cfg.model.training_span or 0, **record}
            for run_dir, label, cfg, record in zip(run_dirs, role_labels(run_dirs, configs), configs, records)]
    title = title or roles_title(configs, run_dirs, split, max_tokens)
    written = role_figure(runs, out, title)
    return {"runs": runs, "title": title, "figures": written.figures, "table": written.table}


def score_roles(
    run_dirs: list[Path], out: Path, *, split: str = "valid", max_tokens: int = 0, device: str = "cpu", title: str = "", progress: bool = True
) -> dict[str, Any]:
    """Score every run by role (records written to each RUN/eval/) and draw the group's figure at ``out``."""
    check_device(device)
    configs = [_config(run_dir) for run_dir in run_dirs]
    settings = EvalSettings(split=split, max_tokens=max_tokens, by_role=True)
    scored = [evaluate_run(Path(run_dir), settings, device=device, progress=progress) for run_dir in run_dirs]
    records = [{**result.as_record(), "path": str(result.path)} for result in scored]  # as role_record reads them back
    return _figure(run_dirs, records, configs, out, title, split, max_tokens)


def role_record(run_dir: Path, cfg: RunConfig, split: str, max_tokens: int) -> dict[str, Any]:
    """The per-role record that scoring ``run_dir`` on ``split`` (its first ``max_tokens`` targets, 0 =
    all) at its evaluation settings wrote in RUN/eval/ (`txlab roles`, or `txlab eval --by-role`).

    The record's name says how many targets it scored (``-n<N>``) and its content the settings it
    was scored with; names of older txlab versions, which left out the batch size, are found too."""
    seg_len, context = evaluation_context(cfg.model, cfg.eval)
    wanted = {"split": split, "tgt_len": seg_len, "mem_len": context.mem_len, "clamp_len": context.clamp_len,
              "same_length": context.same_length, "batch_size": cfg.eval.batch_size, "streams": cfg.eval.streams}

    def targets(path: Path) -> int:  # the -n<N> part of the name; none for the whole split
        match = re.search(r"-n(\d+)-roles\.json$", path.name)
        return int(match.group(1)) if match else 0

    remedy = f"delete it and score the run again with `txlab roles {run_dir}`"
    found = []
    for path in sorted((Path(run_dir) / "eval").glob(f"{split}-*-roles.json")):
        if targets(path) != max_tokens:
            continue
        record = read_json(path, remedy)
        if "by_role" in record and all(record.get(k) == v for k, v in wanted.items()):
            found.append({**record, "path": str(path)})
    scored = f"its first {max_tokens:,} {split} targets" if max_tokens else f"the whole {split} split"
    if not found:
        raise TxlabError(f"{run_dir} has no per-role record of {scored} at its evaluation settings (segment {seg_len}, memory "
                         f"{context.mem_len}, batch {cfg.eval.batch_size}) in {Path(run_dir) / 'eval'}: score it with `txlab roles` "
                         "(which needs its checkpoint), or give the --split and --max-tokens it was scored with")
    if len(found) > 1:
        raise TxlabError(f"{run_dir} has {len(found)} per-role records of {scored} at its evaluation settings "
                         f"({', '.join(Path(r['path']).name for r in found)}): delete all but the one to draw")
    return found[0]


def redraw_roles(run_dirs: list[Path], out: Path, *, split: str = "valid", max_tokens: int = 0, title: str = "") -> dict[str, Any]:
    """The figure :func:`score_roles` draws, from the records it wrote in each RUN/eval/: nothing is
    scored, so runs without a checkpoint (committed ones) are drawn again too."""
    configs = [_config(run_dir) for run_dir in run_dirs]
    records = [role_record(Path(run_dir), cfg, split, max_tokens) for run_dir, cfg in zip(run_dirs, configs)]
    return _figure(run_dirs, records, configs, out, title, split, max_tokens)
