"""`txlab roles`: what a group of runs has learned on a synthetic corpus, as tables and one figure.

Each run is scored with its evaluation settings (the paper's protocol, txlab.evaluate.evaluate_run) and
its per-token losses are split by token role and copy distance (txlab.diagnostics). The figure puts
the runs' copied-value loss against distance beside the ideal model's, with each run's training
attention span marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from txlab.config import load_config
from txlab.evaluate import evaluate_run
from txlab.report import distinct_labels, role_figure


def training_span(run_dir: Path) -> int:
    """Tokens a run attended to in training: segment + memory for Transformers, 0 (unbounded) for RNNs."""
    cfg = load_config(Path(run_dir) / "config.yaml").model
    if cfg.family in ("lstm", "qrnn"):
        return 0
    return cfg.tgt_len + cfg.mem_len


def score_roles(
    run_dirs: list[Path], out: Path, *, split: str = "valid", max_tokens: int = 0, device: str = "cpu", title: str = "", progress: bool = True
) -> dict[str, Any]:
    """Score every run by role (records written to each RUN/eval/) and draw the group's figure at ``out``."""
    runs = []
    for run_dir, label in zip(run_dirs, distinct_labels(run_dirs)):
        record = evaluate_run(Path(run_dir), split=split, max_tokens=max_tokens, device=device, progress=progress, by_role=True)
        runs.append({"run_dir": str(run_dir), "label": label, "train_span": training_span(Path(run_dir)), **record})
    return {"runs": runs, **role_figure(runs, out, title)}
