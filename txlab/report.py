"""Tables and figures from run directories (files only: no torch import).

Everything here reads what runs wrote (``config.yaml``, ``metrics.jsonl``) and writes CSV/Markdown
tables and PNG/PDF figures, so reports can be rebuilt anywhere without a model or a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from txlab.errors import TxlabError  # noqa: E402
from txlab.fileio import write_atomic, write_text_atomic  # noqa: E402


def read_metrics(run_dir: Path) -> pd.DataFrame:
    """A run's metrics.jsonl as a table (one row per logged record), with the run's name attached."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise TxlabError(f"{run_dir} has no metrics.jsonl: is it a run directory made by `txlab train`?")
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise TxlabError(f"{path} is corrupt: {err}") from None
    frame = pd.DataFrame.from_records(records)
    frame["run"] = Path(run_dir).name
    return frame


def run_label(run_dir: Path) -> str:
    """'<preset> (<size>) on <corpus>' from the run's saved config, else the directory name."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return Path(run_dir).name
    cfg = yaml.safe_load(path.read_text())
    name = cfg.get("preset") or cfg.get("name") or Path(run_dir).name
    return f"{name} ({cfg.get('size') or 'custom'}) on {cfg['data']['corpus']}"


def save_figure(fig: plt.Figure, path: Path) -> list[Path]:
    """Write a figure as PNG (and PDF beside it), atomically."""
    path = Path(path).with_suffix(".png")
    written = []
    for suffix in (".png", ".pdf"):
        target = path.with_suffix(suffix)
        write_atomic(target, lambda fh, fmt=suffix[1:]: fig.savefig(fh, format=fmt, dpi=150, bbox_inches="tight"))
        written.append(target)
    plt.close(fig)
    return written


def learning_curves(run_dirs: list[Path], out: Path, title: str = "") -> dict[str, list[Path] | Path]:
    """Validation loss against training tokens and against wall-clock time, one line per run.

    Writes ``out`` (.png and .pdf) and a CSV of the plotted points beside it.
    """
    if not run_dirs:
        raise TxlabError("learning_curves needs at least one run directory")
    frames = []
    for run_dir in run_dirs:
        metrics = read_metrics(run_dir)
        valid = metrics[metrics["split"] == "valid"].copy()
        if valid.empty:
            raise TxlabError(f"{run_dir} has no validation records yet")
        valid["label"] = run_label(run_dir)
        frames.append(valid)
    points = pd.concat(frames, ignore_index=True)[["label", "run", "step", "tokens_seen", "elapsed_s", "loss"]]

    fig, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, group in points.groupby("label", sort=False):
        by_tokens.plot(group["tokens_seen"] / 1e6, group["loss"], marker="o", ms=3, label=label)
        by_time.plot(group["elapsed_s"] / 60, group["loss"], marker="o", ms=3, label=label)
    by_tokens.set(xlabel="training tokens (millions)", ylabel="validation loss (nats/token)")
    by_time.set(xlabel="training wall time (minutes)")
    for ax in (by_tokens, by_time):
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    written = save_figure(fig, out)
    csv = Path(out).with_suffix(".csv")
    write_text_atomic(csv, points.to_csv(index=False))
    return {"figures": written, "table": csv}


def table9_figure(table: Path, out: Path) -> list[Path]:
    """Table 9 as a figure, from the CSV `txlab speed` wrote: slowdown against attention length
    (ours beside the paper's, log scale) and each model's tokens/s. Writes ``out`` (.png and .pdf)."""
    path = Path(table)
    if not path.is_file():
        raise TxlabError(f"no speed table at {path}: run `txlab speed` first")
    rows = pd.read_csv(path).sort_values("attn_len")
    first = rows.iloc[0]
    label = f"{first['model']} ({first['size']}) on {first['device_name']}"
    fig, (slow, rate) = plt.subplots(1, 2, figsize=(11, 4))
    slow.plot(rows["attn_len"], rows["slowdown"], marker="o", label=f"txlab: {label}")
    paper = rows.dropna(subset=["paper_slowdown"])
    if not paper.empty:
        slow.plot(paper["attn_len"], paper["paper_slowdown"], marker="s", ls="--", color="gray", label="Dai et al. (2019), one GPU")
    for x, y in zip(rows["attn_len"], rows["slowdown"]):
        slow.annotate(f"{y:,.0f}x", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    slow.set(xlabel="attention length", ylabel="vanilla slowdown (XL tokens/s / vanilla tokens/s)", yscale="log")
    slow.legend(fontsize=8)
    rate.plot(rows["attn_len"], rows["xl_tokens_per_s"], marker="o", label="Transformer-XL")
    rate.plot(rows["attn_len"], rows["vanilla_tokens_per_s"], marker="o", label="vanilla (sliding window)")
    rate.set(xlabel="attention length", ylabel="evaluation tokens/s", yscale="log")
    rate.legend(fontsize=8)
    for ax in (slow, rate):
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"Evaluation speed, vanilla vs Transformer-XL ({first['device']}, {int(first['threads'])} threads, batch {int(first['batch_size'])})")
    return save_figure(fig, out)
