"""The model zoo: a preset trained on a corpus at a size resolves to one run directory.

``results/models/<preset>-<size>-<corpus>/`` is where ``txlab train`` puts a preset's run and where
later commands (recl, ablate) look for it. This module resolves run configurations from the
command line's pieces, names run directories, and lists presets with their parameter counts and
what has been trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from txlab import synthetic
from txlab.build import build_model
from txlab.checkpoint import has_checkpoint, read_meta
from txlab.config import RunConfig, apply_overrides, read_yaml, update_dataclass
from txlab.errors import TxlabError
from txlab.presets import PAPER_VOCAB, PRESETS, SIZES, get_preset, resolve_preset

MODELS_ROOT = Path("results/models")


def run_config(
    preset: str | None,
    size: str = "cpu",
    corpus: str | None = None,
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
) -> RunConfig:
    """Resolve a run: preset at ``size`` (or defaults), then a YAML file, then ``corpus``, then overrides."""
    cfg = resolve_preset(preset, size) if preset else RunConfig()
    if config_file:
        cfg = update_dataclass(cfg, read_yaml(config_file))
    if corpus:
        cfg = update_dataclass(cfg, {"data": {"corpus": corpus}})
    return apply_overrides(cfg, overrides or [])


def run_name(cfg: RunConfig) -> str:
    """``cfg.name``, else ``<preset>-<size>-<corpus>``."""
    if cfg.name:
        return cfg.name
    if not cfg.preset:
        raise TxlabError("a run needs a name (--set name=...) when it does not start from a preset")
    return f"{cfg.preset}-{cfg.size}-{cfg.data.corpus}"


def run_dir(cfg: RunConfig, root: Path = MODELS_ROOT) -> Path:
    return Path(root) / run_name(cfg)


def known_vocab_size(corpus: str) -> int | None:
    """Vocabulary size of a corpus known without reading data (paper corpora, synthetic ones)."""
    if corpus in PAPER_VOCAB:
        return PAPER_VOCAB[corpus]
    if corpus in synthetic.VARIANTS:
        return synthetic.get_spec(corpus).vocab_size
    return None


def parameter_count(cfg: RunConfig) -> int | None:
    """Parameters of the model ``cfg`` describes, built on the meta device (no memory, no data)."""
    n_token = cfg.model.n_token or known_vocab_size(cfg.data.corpus)
    if n_token is None:
        return None
    with torch.device("meta"):
        return build_model(update_dataclass(cfg.model, {"n_token": n_token})).num_parameters()


def list_models(sizes: tuple[str, ...] = SIZES, root: Path = MODELS_ROOT) -> list[dict[str, Any]]:
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
    if n is None:
        return "-"
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def format_models(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'preset':<16} {'size':<6} {'family':<8} {'enc':<8} {'mem':>5} {'corpus':<13} {'params':>8}  trained"]
    for r in rows:
        trained = "-"
        if r["trained"]:
            metric = f"ppl {r['valid_ppl']:.2f}" if r.get("valid_ppl") else f"bpc {r['valid_bpc']:.3f}" if r.get("valid_bpc") else ""
            trained = f"step {r['step']}, valid {metric}".rstrip(", valid ")
        lines.append(f"{r['name']:<16} {r['size']:<6} {r['family']:<8} {r['pos_enc']:<8} {r['mem_len']:>5} {r['corpus']:<13} {format_params(r['params']):>8}  {trained}")
    return "\n".join(lines)

