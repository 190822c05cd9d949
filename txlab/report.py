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
    """Table 9 as a figure, from the CSV `txlab speed` wrote: the slowdown against attention length
    (ours, the paper's, and the FLOP ratio that equal GFLOP/s on both sides would give; log scale)
    and each model's tokens/s. Writes ``out`` (.png and .pdf)."""
    path = Path(table)
    if not path.is_file():
        raise TxlabError(f"no speed table at {path}: run `txlab speed` first")
    rows = pd.read_csv(path).sort_values("attn_len")
    first = rows.iloc[0]
    fig, (slow, rate) = plt.subplots(1, 2, figsize=(11, 4))
    slow.plot(rows["attn_len"], rows["flop_ratio"], ls=":", color="gray", label="FLOP ratio (equal GFLOP/s on both sides)")
    paper = rows.dropna(subset=["paper_slowdown"])
    if not paper.empty:
        slow.plot(paper["attn_len"], paper["paper_slowdown"], marker="s", ls="--", color="gray", label="Dai et al. (2019), one GPU")
    slow.plot(rows["attn_len"], rows["slowdown"], marker="o", label=f"txlab: {first['model']} ({first['size']}) on {first['device_name']}")
    for series, below in ((rows["slowdown"], True), (paper["paper_slowdown"], False)):
        for x, y in zip(rows.loc[series.index, "attn_len"], series):
            slow.annotate(f"{y:,.0f}x", (x, y), textcoords="offset points", xytext=(0, -12 if below else 6), ha="center", fontsize=8)
    slow.set(xlabel="attention length", ylabel="vanilla slowdown (XL tokens/s / vanilla tokens/s)", yscale="log")
    slow.legend(fontsize=7, loc="lower right")
    rate.plot(rows["attn_len"], rows["xl_tokens_per_s"], marker="o", label="Transformer-XL")
    rate.plot(rows["attn_len"], rows["vanilla_tokens_per_s"], marker="o", label="vanilla (sliding window)")
    rate.set(xlabel="attention length", ylabel="evaluation tokens/s", yscale="log")
    rate.legend(fontsize=8)
    for ax in (slow, rate):
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"Evaluation speed, vanilla vs Transformer-XL ({first['device']}, {int(first['threads'])} threads, batch {int(first['batch_size'])})")
    return save_figure(fig, out)


# --------------------------------------------------------------------------------------------------
# RECL (`txlab recl`): Table 8, Figure 3, Figure 4


def _r_label(r: float) -> str:
    return f"r = {r:g}"


def table8_markdown(rows: list[dict]) -> str:
    """The paper's Table 8 layout from txlab.recl.recl_rows rows: one line per model, one column per r.

    A cell is the RECL ('>= c' when the walk ran off the grid) and, when the rows carry one, the
    bootstrap interval in brackets, e.g. '180 [140, 200]'.
    """
    if not rows:
        raise TxlabError("no RECL rows to tabulate")
    rs = list(dict.fromkeys(row["r"] for row in rows))
    cells: dict[str, dict[float, str]] = {}
    for row in rows:
        cell = row["label"]
        if "ci_low" in row:
            # more censored resamples than the upper tail holds: the high end ran off the grid too
            high_censored = row["censored_fraction"] > (1 - row["ci"]) / 2
            cell += f" [{row['ci_low']}, {'>= ' if high_censored else ''}{row['ci_high']}]"
        cells.setdefault(row["model"], {})[row["r"]] = cell
    lines = ["| model | " + " | ".join(_r_label(r) for r in rs) + " |", "|---|" + "---|" * len(rs)]
    lines += [f"| {model} | " + " | ".join(by_r.get(r, "-") for r in rs) + " |" for model, by_r in cells.items()]
    return "\n".join(lines) + "\n"


def write_table8(rows: list[dict], stem: Path) -> list[Path]:
    """Table 8 as ``stem``.csv (tidy: one row per model and r) and ``stem``.md (:func:`table8_markdown`)."""
    stem = Path(stem)
    csv, md = stem.with_suffix(".csv"), stem.with_suffix(".md")
    write_text_atomic(csv, pd.DataFrame.from_records(rows).to_csv(index=False))
    write_text_atomic(md, table8_markdown(rows))
    return [csv, md]


def write_context_curves(gains, perplexity, grid, models, out_dir: Path, placebo: dict | None = None) -> list[Path]:
    """The points of Figures 3 and 4 as CSV in ``out_dir``: figure3.csv (model, c, c_next, gain: the
    unnormalised gain exp f(c,c) - exp f_i(c,c')), figure4.csv (model, c, ppl) and, with placebo
    gains ({r: (relative step gains [M, G-1], placebo gains [M, G-1])}), placebo.csv (model, r, c,
    c_next, gain, placebo_gain: a real gain stands well above its placebo)."""
    out_dir = Path(out_dir)
    steps = list(zip(grid[:-1], grid[1:]))
    fig3 = pd.DataFrame([{"model": m, "c": c, "c_next": c2, "gain": float(gains[i][j])}
                         for i, m in enumerate(models) for j, (c, c2) in enumerate(steps)])
    fig4 = pd.DataFrame([{"model": m, "c": c, "ppl": float(perplexity[i][j])} for i, m in enumerate(models) for j, c in enumerate(grid)])
    written = []
    for name, frame in (("figure3.csv", fig3), ("figure4.csv", fig4)):
        write_text_atomic(out_dir / name, frame.to_csv(index=False))
        written.append(out_dir / name)
    if placebo:
        rows = [{"model": m, "r": r, "c": c, "c_next": c2, "gain": float(real[i][j]), "placebo_gain": float(fake[i][j])}
                for r, (real, fake) in placebo.items() for i, m in enumerate(models) for j, (c, c2) in enumerate(steps)]
        write_text_atomic(out_dir / "placebo.csv", pd.DataFrame(rows).to_csv(index=False))
        written.append(out_dir / "placebo.csv")
    return written


def _read_points(table: Path, what: str) -> pd.DataFrame:
    if not Path(table).is_file():
        raise TxlabError(f"no {what} points at {table}: run `txlab recl` first")
    return pd.read_csv(table)


def figure3(table: Path, out: Path, title: str = "") -> list[Path]:
    """Figure 3 from figure3.csv: the unnormalised gain exp f(c,c) - exp f_i(c,c') of each step c -> c',
    plotted at c', one line per model. Writes ``out`` (.png and .pdf)."""
    points = _read_points(table, "Figure 3")
    return _lines_by_model(points, "c_next", "gain", "context length c' (step c -> c')", "gain exp f(c,c) - exp f(c,c')", out, title)


def figure4(table: Path, out: Path, title: str = "") -> list[Path]:
    """Figure 4 from figure4.csv: perplexity on the shared targets against context length, one line
    per model. Writes ``out`` (.png and .pdf)."""
    points = _read_points(table, "Figure 4")
    return _lines_by_model(points, "c", "ppl", "context length c", "perplexity exp(mean l(c, t))", out, title)


def _lines_by_model(points: pd.DataFrame, x: str, y: str, xlabel: str, ylabel: str, out: Path, title: str) -> list[Path]:
    """One line per model of ``points[y]`` against ``points[x]``, written as ``out`` (.png and .pdf)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for model, rows in points.groupby("model", sort=False):
        ax.plot(rows[x], rows[y], marker="o", ms=3, label=model)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, out)
