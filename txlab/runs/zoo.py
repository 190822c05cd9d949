"""The model zoo: a preset trained on a corpus at a size resolves to one run directory.

``<home>/results/models/<preset>-<size>-<corpus>/`` is where ``txlab train`` puts a preset's run and
where later commands (recl, models) look for it; the home is the workspace (``runs/`` by default)
or, with ``txlab --home .``, the repository's committed evidence (see :mod:`txlab.workspace`). This module resolves run configurations from the
command line's pieces, names run directories, lists presets with their parameter counts and
what has been trained, and lists the run directories under any folder (``txlab runs``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from txlab.config import RunConfig, apply_overrides, read_yaml, update_dataclass
from txlab.data import synthetic
from txlab.data.registry import TEXT_CORPUS
from txlab.errors import TxlabError
from txlab.fileio import read_metrics_log, read_yaml_mapping
from txlab.models.build import count_model
from txlab.presets import PAPER_VOCAB, PRESETS, SIZES, get_preset, resolve_preset
from txlab.runs.checkpoint import has_checkpoint, read_meta
from txlab.tables import count_label
from txlab.workspace import check_name, models_root, resolve


def run_config(
    preset: str | None,
    size: str = "cpu",
    corpus: str | None = None,
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
    text: str = "",
    tokenizer: str = "",
) -> RunConfig:
    """Resolve a run: preset at ``size`` (or defaults), then a YAML file, then ``corpus``, then overrides;
    then own ``text`` read by ``tokenizer`` (:func:`txlab.data.textdata.text_data_config`) in place of a corpus."""
    if text and corpus:
        raise TxlabError(f"give a corpus (--data {corpus}) or own text (--text {text}), not both")
    if tokenizer and not text:
        raise TxlabError("--tokenizer says how own text is read: give the text with --text FILE_OR_DIR")
    cfg = resolve_preset(preset, size) if preset else RunConfig()
    if config_file:
        cfg = update_dataclass(cfg, read_yaml(config_file))
    if corpus:
        cfg = update_dataclass(cfg, {"data": {"corpus": corpus}})
    cfg = apply_overrides(cfg, overrides or [])
    if text:
        from txlab.data.textdata import text_data_config

        cfg = replace(cfg, data=text_data_config(text, tokenizer or cfg.data.tokenizer or "char", cfg.data))
    return cfg


def corpus_label(cfg: RunConfig) -> str:
    """The corpus as run names show it: its name, or for own text :func:`txlab.data.textdata.text_corpus_name`."""
    if cfg.data.corpus == TEXT_CORPUS:
        from txlab.data.textdata import text_corpus_name  # reads the text's hash; only own text needs it

        return text_corpus_name(cfg.data)
    return cfg.data.corpus


def run_name(cfg: RunConfig) -> str:
    """``cfg.name``, else ``<preset>-<size>-<corpus label>`` (own text: ``<preset>-<size>-text-<stem>-<hash>-<tokenizer>``)."""
    if cfg.name:
        return check_name(cfg.name, "the run name (name)")
    if not cfg.preset:
        raise TxlabError("a run needs a name (--set name=...) when it does not start from a preset")
    return f"{cfg.preset}-{cfg.size}-{corpus_label(cfg)}"


def train_run_dir(cfg: RunConfig, root: Path | None = None) -> Path:
    """Where `txlab train` puts a run without --run-dir: :func:`run_dir`, with ``-<N>steps`` for a trial
    run whose length differs from the size's recipe (:func:`trial_steps`), so the README's 300-step
    first step and the 2,000-step quick start never resume each other, and ``-bf16`` or ``-fp16`` for
    a run in mixed precision (another model than the fp32 recipe's). A run named by ``name`` keeps its
    name. (A RECL group's members keep :func:`run_dir`: there another length is the group's recipe,
    checked member against member.)"""
    directory = run_dir(cfg, root)
    if cfg.name:
        return directory
    trial = trial_steps(cfg)
    suffix = (f"-{trial}steps" if trial else "") + ("" if cfg.train.precision == "fp32" else f"-{cfg.train.precision}")
    return directory.with_name(directory.name + suffix)


def recipe_steps(cfg: RunConfig) -> int | None:
    """The training steps of the recipe of ``cfg``'s preset at its size (None without a preset)."""
    if not cfg.preset or cfg.size not in get_preset(cfg.preset).sizes:
        return None
    return resolve_preset(cfg.preset, cfg.size).train.max_steps


def trial_steps(cfg: RunConfig) -> int | None:
    """``train.max_steps`` when it differs from the recipe's, else None. A trial (300 steps) and the
    recipe (2,000) are different models: resuming one as the other would stretch the learning-rate
    schedule, so each gets its own run directory and neither resumes the other by accident."""
    recipe = recipe_steps(cfg)
    return cfg.train.max_steps if recipe is not None and cfg.train.max_steps != recipe else None


def run_dir(cfg: RunConfig, root: Path | None = None) -> Path:
    """``<root>/<run name>``; the root defaults to the home's models folder."""
    return Path(root or models_root()) / run_name(cfg)


def known_vocab_size(corpus: str) -> int | None:
    """Vocabulary size of a corpus known without reading data (paper corpora, synthetic ones)."""
    if corpus in PAPER_VOCAB:
        return PAPER_VOCAB[corpus]
    if corpus in synthetic.VARIANTS:
        return synthetic.get_spec(corpus).vocab_size
    return None


def parameter_count(cfg: RunConfig) -> int | None:
    """Parameters of the model ``cfg`` describes, counted from its configuration (txlab.models.build.count_model:
    nothing built, no data read); None when its vocabulary is not known without reading the corpus."""
    n_token = cfg.model.n_token or known_vocab_size(cfg.data.corpus)
    if n_token is None:
        return None
    return count_model(replace(cfg.model, n_token=n_token)).parameters


def list_models(sizes: tuple[str, ...] = SIZES, root: Path | None = None) -> list[dict[str, Any]]:
    """One row per (preset, size): family, encoding, corpus, parameters, and the trained run if any."""
    rows = []
    for name in PRESETS:
        for size in sizes:
            if size not in get_preset(name).sizes:
                continue
            cfg = resolve_preset(name, size)
            directory = run_dir(cfg, root)
            row: dict[str, Any] = {
                "name": name, "size": size, "family": cfg.model.family, "pos_enc": cfg.model.pos_enc if cfg.model.family in ("xl", "vanilla") else "-",
                "mem_len": cfg.model.mem_len, "corpus": cfg.data.corpus, "params": parameter_count(cfg),
                "summary": get_preset(name).summary, "trained": False, "run_dir": str(directory),
            }
            if has_checkpoint(directory):
                meta = read_meta(directory)
                valid = meta.get("metrics", {}).get("valid", {})
                row.update(trained=True, step=meta["step"], valid_loss=valid.get("loss"), valid_ppl=valid.get("ppl"), valid_bpc=valid.get("bpc"))
            rows.append(row)
    return rows


def format_params(n: int | None) -> str:
    return "-" if n is None else count_label(n)


def format_models(rows: list[dict[str, Any]]) -> str:
    # columns as wide as their longest entry: a fixed width let long corpus names push the rest of the row
    wide = {key: max([len(head), *(len(str(r[key])) for r in rows)]) for key, head in (("name", "preset"), ("corpus", "corpus"))}
    lines = [f"{'preset':<{wide['name']}} {'size':<6} {'family':<8} {'enc':<8} {'mem':>5} {'corpus':<{wide['corpus']}} {'params':>8}  trained"]
    for r in rows:
        trained = "-"
        if r["trained"]:
            metric = f"ppl {r['valid_ppl']:.2f}" if r.get("valid_ppl") else f"bpc {r['valid_bpc']:.3f}" if r.get("valid_bpc") else ""
            trained = f"step {r['step']}, valid {metric}".rstrip(", valid ")
        lines.append(f"{r['name']:<{wide['name']}} {r['size']:<6} {r['family']:<8} {r['pos_enc']:<8} {r['mem_len']:>5} "
                     f"{r['corpus']:<{wide['corpus']}} {format_params(r['params']):>8}  {trained}")
    return "\n".join(lines)



def _last_record(records: list[dict[str, Any]], split: str) -> dict[str, Any]:
    return next((r for r in reversed(records) if r.get("split") == split), {})


def _metrics(directory: Path) -> list[dict[str, Any]]:
    path = Path(directory) / "metrics.jsonl"
    # a torn last line is what a kill leaves; training drops it with a warning when it resumes
    return read_metrics_log(path, on_torn_last_line=lambda message: None) if path.is_file() else []


def logged_training_step(directory: Path) -> int:
    """The last training step a run's metrics.jsonl records (0 if none): what a run whose checkpoint
    was not kept (as in committed results) shows of its training."""
    return _last_record(_metrics(directory), "train").get("step", 0)


def default_run_folders() -> list[Path]:
    """Where `txlab runs` looks when given no folder: the home's results, and the repository's committed
    results when run from a checkout (the same folder with ``--home .``)."""
    folders = [resolve("results"), Path("results")]
    return [folder for i, folder in enumerate(folders) if folder.is_dir() and folder not in folders[:i]]


def list_runs(roots: list[Path]) -> list[dict[str, Any]]:
    """Every run directory under ``roots`` (a folder with config.yaml and metrics.jsonl, any corpus, any
    place): its preset, size, family, corpus, training reached, last validation and whether its
    checkpoint is there (committed results keep their records but not their weights)."""
    rows = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise TxlabError(f"no folder {root}")
        for config_file in sorted(root.rglob("config.yaml")):
            directory = config_file.parent
            if not (directory / "metrics.jsonl").is_file():
                continue
            cfg = read_yaml_mapping(config_file, "it is not a run's configuration, or the run is damaged: rerun `txlab train`")
            records = _metrics(directory)
            valid = _last_record(records, "valid")
            checkpoint = has_checkpoint(directory)
            model, data = cfg.get("model") or {}, cfg.get("data") or {}
            rows.append({
                "run_dir": str(directory), "preset": cfg.get("preset") or cfg.get("name") or "-", "size": cfg.get("size") or "-",
                "family": model.get("family", "-"), "corpus": data.get("corpus", "-"),
                "step": read_meta(directory)["step"] if checkpoint else _last_record(records, "train").get("step", 0),
                "max_steps": (cfg.get("train") or {}).get("max_steps"), "valid_ppl": valid.get("ppl"), "valid_bpc": valid.get("bpc"),
                "checkpoint": checkpoint,
            })
    return rows


def format_runs(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no runs found (a run directory holds config.yaml and metrics.jsonl)"
    lines = [f"{'preset':<16} {'size':<6} {'family':<8} {'corpus':<22} {'steps':>13} {'valid':>11}  {'ckpt':<4}  run directory"]
    for r in rows:
        metric = f"ppl {r['valid_ppl']:.2f}" if r.get("valid_ppl") else f"bpc {r['valid_bpc']:.3f}" if r.get("valid_bpc") else "-"
        steps = f"{r['step']:,}/{r['max_steps']:,}" if r.get("max_steps") else f"{r['step']:,}"
        lines.append(f"{r['preset']:<16} {r['size']:<6} {r['family']:<8} {r['corpus']:<22} {steps:>13} {metric:>11}  "
                     f"{'yes' if r['checkpoint'] else 'no':<4}  {r['run_dir']}")
    return "\n".join(lines)
