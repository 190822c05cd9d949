"""Tables and figures from run directories (files only: no torch import).

Everything here reads what runs wrote (``config.yaml``, ``metrics.jsonl``) and writes CSV/Markdown
tables and PNG/PDF figures, so reports can be rebuilt anywhere without a model or a GPU.
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from txlab.analysis.claims import Claim, claims_markdown, evaluate_claims  # noqa: E402
from txlab.errors import TxlabError  # noqa: E402
from txlab.fileio import DamagedFile, read_json, read_metrics_log, read_yaml_mapping, write_atomic, write_text_atomic  # noqa: E402
from txlab.style import CI_ALPHA, MARKERS, REFERENCE_COLORS, distinct_colors, themed  # noqa: E402
from txlab.tables import markdown_table  # noqa: E402


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


def save_figure_with_points(fig: plt.Figure, out: Path, points: pd.DataFrame, title: str = "") -> dict[str, list[Path] | Path]:
    """Write a figure (PNG and PDF) and the points it plots as a CSV beside it, titled if ``title``."""
    if title:
        fig.suptitle(title)
    written = save_figure(fig, out)
    csv = Path(out).with_suffix(".csv")
    write_text_atomic(csv, points.to_csv(index=False))
    return {"figures": written, "table": csv}


def runs_stem(run_dirs: list[Path]) -> str:
    """A file stem naming the runs a figure draws: their folder names joined by '+', shortened with a
    hash of their paths when that would be long, so a figure of other runs gets another file."""
    names = [Path(run_dir).resolve().name for run_dir in run_dirs]
    joined = "+".join(names)
    if len(joined) <= 100:
        return joined
    digest = hashlib.sha256("\n".join(str(Path(run_dir).resolve()) for run_dir in run_dirs).encode()).hexdigest()[:8]
    return f"{names[0]}+{len(names) - 1}-more-{digest}"


@themed
def learning_curves(run_dirs: list[Path], out: Path, title: str = "") -> dict[str, list[Path] | Path]:
    """Training and validation loss against training tokens, and validation loss against wall-clock
    time, one colour per run: the training loss as a thin line (logged every ``log_interval`` steps),
    the validation loss with markers. A run still short of its first validation draws its training
    loss alone. In bits per character when every run is on a character corpus (the CSV's ``loss``
    column then holds bpc).

    Writes ``out`` (.png and .pdf) and a CSV of the plotted points beside it (``split`` says which loss).
    """
    if not run_dirs:
        raise TxlabError("learning_curves needs at least one run directory")
    frames = []
    for run_dir, label in zip(run_dirs, seed_group_labels(run_dirs)):
        metrics = read_metrics(run_dir)
        if "split" not in metrics:
            raise TxlabError(f"{run_dir} has no training or validation records yet")
        logged = metrics[metrics["split"].isin(["train", "valid"])].copy()
        if logged.empty:
            raise TxlabError(f"{run_dir} has no training or validation records yet")
        for column in ("tokens_seen", "tokens"):
            if column not in logged:
                logged[column] = np.nan
        # training records count the tokens seen in 'tokens'; validation records in 'tokens_seen'
        logged["tokens_seen"] = logged["tokens_seen"].where(logged["split"] == "valid", logged["tokens"])
        logged["label"] = label
        frames.append(logged)
    points = pd.concat(frames, ignore_index=True)
    valid_rows = points[points["split"] == "valid"]
    # character corpora are read in bits per character everywhere else in txlab; mixed groups stay in nats
    in_bpc = not valid_rows.empty and "bpc" in points and valid_rows["bpc"].notna().all() and points.loc[points["split"] == "valid", "run"].nunique() == len(run_dirs)
    # validation records carry their bpc; the training loss is logged in nats
    loss = points["bpc"].where(points["split"] == "valid", points["loss"] / np.log(2)) if in_bpc else points["loss"]
    points = points.assign(loss=loss)[["label", "run", "split", "step", "tokens_seen", "elapsed_s", "loss"]]

    fig, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    palette = distinct_colors(points["label"].nunique())
    seeds = False
    for i, (label, own) in enumerate(points.groupby("label", sort=False)):
        for split, style in (("train", {"lw": 0.8, "alpha": 0.55}), ("valid", {"marker": "o", "ms": 3, "lw": 1.5})):
            rows = own[own["split"] == split]
            if rows.empty:
                continue
            curve = rows.groupby("step", sort=True).agg(tokens_m=("tokens_seen", "mean"), minutes=("elapsed_s", "mean")).reset_index()
            curve = curve.merge(mean_intervals(rows, ["step"], "loss"), on="step")
            curve = curve.assign(tokens_m=curve["tokens_m"] / 1e6, minutes=curve["minutes"] / 60)
            axes = ((by_tokens, "tokens_m"),) if split == "train" else ((by_tokens, "tokens_m"), (by_time, "minutes"))
            for ax, x in axes:
                ax.plot(curve[x], curve["mean"], color=palette[i], label=label if ax is by_time else None, **style)
                if (curve["n"] > 1).any():
                    seeds = True
                    ax.fill_between(curve[x], curve["ci_low"], curve["ci_high"], color=palette[i], alpha=CI_ALPHA, lw=0)
        if own[own["split"] == "valid"].empty:  # still in the legend, which the validation panel holds
            by_time.plot([], [], color=palette[i], label=f"{label} (no validation yet)")
    unit = "bits per character" if in_bpc else "loss (nats/token)"
    by_tokens.set(xlabel="training tokens (millions)", ylabel=unit, title="training (thin) and validation (markers)")
    by_time.set(xlabel="training wall time (minutes)", title="validation")
    # below both panels: a legend inside one covered its curves once there were more than a few runs
    handles, labels = by_time.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2 if len(labels) > 3 else len(labels), fontsize=8, frameon=False,
               title="band: 95% interval of the mean over seeds" if seeds else None, title_fontsize=8)
    fig.subplots_adjust(bottom=0.16 + 0.045 * ((len(labels) + 1) // 2), top=0.86)
    return save_figure_with_points(fig, out, points, title or f"Learning curves: {'bits per character' if in_bpc else 'loss in nats per token'}")


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


@themed
def table9_figure(table: Path, out: Path) -> list[Path]:
    """Table 9 as a figure, from the CSV `txlab speed` wrote: the slowdown against attention length
    (ours, the paper's, and the FLOP ratio that equal GFLOP/s on both sides would give; log scale)
    and each method's tokens/s (today's baselines too, in tables that have them). Writes ``out`` (.png and .pdf) and the plotted columns as a CSV beside it.

    Drawn with matplotlib under the shared theme: each point carries its value as a label, which
    seaborn's plotting functions do not place. Ours are labelled above their points and the paper's
    below, so values that nearly coincide (1,874x against 1,796x) never overlap; a table timed while
    other processes took more than :data:`txlab.timing.CONTENDED_SHARE` of the CPU says so under the title."""
    from txlab.timing import contention_note

    path = Path(table)
    if not path.is_file():
        raise TxlabError(f"no speed table at {path}: run `txlab speed` first")
    rows = pd.read_csv(path).sort_values("attn_len")
    first = rows.iloc[0]
    fig, (slow, rate) = plt.subplots(1, 2, figsize=(11, 4.8))
    slow.plot(rows["attn_len"], rows["flop_ratio"], ls=":", color=REFERENCE_COLORS["bound"], label="FLOP ratio (equal GFLOP/s on both sides)")
    paper = rows.dropna(subset=["paper_slowdown"])
    if not paper.empty:
        slow.plot(paper["attn_len"], paper["paper_slowdown"], marker="s", ls="--", color=REFERENCE_COLORS["paper"], label="Dai et al. (2019), one GPU")
    threads = f"{int(first['threads'])} thread" + ("s" if int(first["threads"]) != 1 else "")
    on = first["device_name"] if first["device"] != "cpu" else f"{first['device_name']}, {threads}"
    slow.plot(rows["attn_len"], rows["slowdown"], marker="o", label=f"txlab: {first['model']} at {first['size']} size on {on}")
    for series, other in ((rows["slowdown"], rows["paper_slowdown"]), (paper["paper_slowdown"], rows["slowdown"])):
        for index, y in series.items():
            above = pd.isna(other[index]) or y >= other[index]  # each label on the side away from the other line's point
            slow.annotate(f"{y:,.0f}x", (rows.loc[index, "attn_len"], y), textcoords="offset points", xytext=(0, 7 if above else -7),
                          ha="center", va="bottom" if above else "top", fontsize=8)
    slow.set(xlabel="attention length (tokens)", ylabel="slowdown of vanilla (XL tokens/s / vanilla tokens/s)", yscale="log")
    rate.plot(rows["attn_len"], rows["xl_tokens_per_s"], marker="o", label="Transformer-XL segments")
    rate.plot(rows["attn_len"], rows["vanilla_tokens_per_s"], marker="o", label="vanilla recompute (sliding window)")
    baselines = [column for column in ("strided_tokens_per_s", "rolling_tokens_per_s") if column in rows]  # tables before 2026-11-24 have none
    if "strided_tokens_per_s" in baselines:
        rate.plot(rows["attn_len"], rows["strided_tokens_per_s"], marker="^", label=f"strided recompute (s = {int(first['stride'])})")
    if "rolling_tokens_per_s" in baselines:
        rate.plot(rows["attn_len"], rows["rolling_tokens_per_s"], marker="v", label="rolling KV cache (one token at a time)")
    rate.set(xlabel="attention length (tokens)", ylabel="evaluation tokens/s", yscale="log")
    rate.legend(fontsize=8)
    for ax in (slow, rate):
        ax.grid(True, which="minor", alpha=0.3)
        if len(rows) == 1:  # one length: a readable span around it, and the length as the only tick
            n = int(first["attn_len"])
            ax.set_xlim(n * 0.5, n * 1.5)
            ax.set_xticks([n])
        else:
            ax.margins(x=0.08, y=0.15)
    slow.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, frameon=False)  # below the axes, over no point
    where = (f"{first['device_name']}, batch {int(first['batch_size'])}" if first["device"] != "cpu"
             else f"CPU, {threads}, batch {int(first['batch_size'])}")
    title = (f"Evaluation speed: Table 9 with today's baselines ({where})" if baselines else
             f"Evaluation speed, vanilla Transformer vs Transformer-XL ({where})")
    shares = [(int(r.attn_len), None if pd.isna(r.others_cpu) else float(r.others_cpu)) for r in rows.itertuples()] if "others_cpu" in rows else []
    warning = contention_note(shares, "attention length")
    if warning:  # under the legend, where bbox_inches="tight" keeps it and it covers nothing
        fig.text(0.5, -0.16, f"Warning: {warning}.", ha="center", va="top", fontsize=9, color="#b2182b")
    points = rows[["attn_len", "slowdown", "paper_slowdown", "flop_ratio", "xl_tokens_per_s", "vanilla_tokens_per_s", *baselines]]
    written = save_figure_with_points(fig, out, points, title)
    return [*written["figures"], written["table"]]


# --------------------------------------------------------------------------------------------------
# RECL (`txlab recl`): Table 8, Figure 3, Figure 4


def _r_label(r: float) -> str:
    return f"r = {r:g}"


def table8_markdown(rows: list[dict]) -> str:
    """The paper's Table 8 layout from txlab.analysis.recl.recl_rows rows: one line per model, one column per r.

    A cell is the RECL ('>= c' when the walk ran off the grid) and, when the rows carry one, the
    bootstrap interval in brackets, e.g. '180 [140, 200]'. Rows with placebo losses add, beside each
    r, the placebo-aware RECL, and mark with a dagger every RECL that rests on a step which did not
    beat its placebo gain by the threshold (a note under the table says so).
    """
    if not rows:
        raise TxlabError("no RECL rows to tabulate")
    rs = list(dict.fromkeys(row["r"] for row in rows))
    with_placebo = any("placebo_recl" in row for row in rows)
    columns = [(r, prefix) for r in rs for prefix in ("", "placebo_")[: 1 + with_placebo]]
    cells: dict[str, dict[tuple[float, str], str]] = {}
    for row in rows:
        by_column = cells.setdefault(row["model"], {})
        by_column[row["r"], ""] = _recl_cell(row) + (" †" if row.get("below_placebo") else "")
        if "placebo_recl" in row:
            by_column[row["r"], "placebo_"] = _recl_cell(row, "placebo_")
    headers = [_r_label(r) + (", placebo-aware" if prefix else "") for r, prefix in columns]
    lines = [markdown_table(["model", *headers], ([model, *(by_column.get(column, "-") for column in columns)] for model, by_column in cells.items()))]
    if any(row.get("below_placebo") for row in rows):
        lines += ["", "† a step this RECL rests on did not beat its placebo gain (extra context from far away) by the threshold; "
                      "the placebo-aware RECL stops at the first such step."]
    return "\n".join(lines) + "\n"


def _recl_cell(row: dict, prefix: str = "") -> str:
    """'180 [140, 200]': a RECL (``prefix`` + 'label') and, when the row has one, its bootstrap interval."""
    cell = row[prefix + "label"]
    if prefix + "ci_low" in row:
        # more censored resamples than the upper tail holds: the high end ran off the grid too
        high_censored = row[prefix + "censored_fraction"] > (1 - row["ci"]) / 2
        cell += f" [{row[prefix + 'ci_low']}, {'>= ' if high_censored else ''}{row[prefix + 'ci_high']}]"
    return cell


def write_table8(rows: list[dict], stem: Path) -> list[Path]:
    """Table 8 as ``stem``.csv (tidy: one row per model and r) and ``stem``.md (:func:`table8_markdown`)."""
    stem = Path(stem)
    csv, md = stem.with_suffix(".csv"), stem.with_suffix(".md")
    write_text_atomic(csv, pd.DataFrame.from_records(rows).to_csv(index=False))
    write_text_atomic(md, table8_markdown(rows))
    return [csv, md]


def seed_spread_markdown(rows: list[dict]) -> str:
    """RECL over training seeds from txlab.analysis.recl.seed_rows rows: one line per r, model and estimate (the
    paper's RECL, the placebo-aware one), each seed's reading as Table 8 prints it ('>= c', '†') and
    their min, max, mean and sd, with notes on what a bound means and on members the same for every seed."""
    if not rows:
        raise TxlabError("no RECL rows over seeds to tabulate")
    seeds = rows[0]["seeds"]
    body = [[row["model"], f"{row['r']:g}", row["estimate"], *row["labels"], row["min_label"], row["max_label"], row["mean_label"],
             row["sd_label"] + (" *" if row["n_censored"] and row["sd"] is not None else "")] for row in rows]
    lines = [markdown_table(["model", "r", "RECL", *(f"seed {s}" for s in seeds), "min", "max", "mean", "sd"], body)]
    notes = []
    if any(row["n_censored"] for row in rows):
        notes.append("'>= c': the walk ran off the grid, so that RECL is at least c, and a min, max or mean marked '>=' is a lower "
                     "bound for the same reason. * the sd of readings some of which are such bounds: the true spread may be larger or smaller.")
    if any(any(row.get("below_placebo") or []) for row in rows):
        notes.append("† a step this RECL rests on did not beat its placebo gain (extra context from far away) by the threshold; "
                     "the placebo-aware RECL stops at the first such step.")
    same = list(dict.fromkeys(row["model"] for row in rows if row["same_every_seed"] and not row.get("ground_truth")))
    if same:
        notes.append(f"{', '.join(same)}: the same model for every seed (used as it is); {'its' if len(same) == 1 else 'their'} RECL "
                     "changes from seed to seed only because RECL is relative to the group's other members, which are trained once per seed.")
    return "\n".join(lines + [f"\n{note}" for note in notes]) + "\n"


def write_seed_spread(rows: list[dict], stem: Path) -> list[Path]:
    """RECL over seeds as ``stem``.csv (one row per model, r and estimate: each seed's label, RECL and censoring in
    columns of its own, then the spread) and ``stem``.md (:func:`seed_spread_markdown`)."""
    stem = Path(stem)
    flat = []
    for row in rows:
        cells = {k: row[k] for k in ("model", "r", "estimate", "same_every_seed")}
        for k, seed in enumerate(row["seeds"]):
            cells.update({f"seed_{seed}": row["labels"][k], f"recl_seed_{seed}": row["recl"][k], f"censored_seed_{seed}": row["censored"][k]})
            if "below_placebo" in row:
                cells[f"below_placebo_seed_{seed}"] = row["below_placebo"][k]
        spread = ("min", "min_censored", "min_label", "max", "max_censored", "max_label", "mean", "mean_censored", "mean_label", "sd", "n_censored")
        flat.append({**cells, **{k: row[k] for k in spread}})
    csv, md = stem.with_suffix(".csv"), stem.with_suffix(".md")
    write_text_atomic(csv, pd.DataFrame.from_records(flat).to_csv(index=False))
    write_text_atomic(md, seed_spread_markdown(rows))
    return [csv, md]


@themed
def seed_spread_figure(rows: list[dict], out: Path, title: str = "") -> list[Path]:
    """RECL over training seeds from txlab.analysis.recl.seed_rows rows: one panel per r, one line per model, a dot
    per seed (filled: the paper's RECL; open: the placebo-aware one; ▸: the walk ran off the grid, so at
    least there; the seeds a little apart in height, so equal readings stay countable) and a bar at the mean
    of the readings. Writes ``out`` (.png and .pdf) and its points (.csv)."""
    if not rows:
        raise TxlabError("no RECL rows over seeds to draw")
    points = pd.DataFrame([{"model": row["model"], "r": row["r"], "estimate": row["estimate"], "seed": seed, "recl": value, "censored": censored}
                           for row in rows for seed, value, censored in zip(row["seeds"], row["recl"], row["censored"])])
    models = list(dict.fromkeys(points["model"]))
    styles = _model_styles(models)
    rs = list(dict.fromkeys(points["r"]))
    title = _wrapped(title, 45 * len(rs) + 30) if title else ""
    height = 0.8 * len(models) + 1.2 + 0.25 * (title.count("\n") + 1) * bool(title)
    fig, axes = plt.subplots(1, len(rs), figsize=(3.4 * len(rs) + 1.8, height), sharex=True, sharey=True, squeeze=False)
    for ax, r in zip(axes[0], rs):
        for row in (row for row in rows if row["r"] == r):
            y = models.index(row["model"]) + (0.2 if row["estimate"] == "placebo-aware" else -0.2)
            color = styles[row["model"]]["color"]
            filled = row["estimate"] == "paper"
            for k, (value, censored) in enumerate(zip(row["recl"], row["censored"])):
                apart = 0.16 / max(len(row["recl"]) - 1, 1) * (k - (len(row["recl"]) - 1) / 2)
                ax.plot([value], [y + apart], marker=">" if censored else "o", ms=5, ls="", color=color, mfc=color if filled else "none", alpha=0.85)
            ax.plot([row["mean"]], [y], marker="|", ms=12, mew=2, color=color)
        ax.set_title(_r_label(r), fontsize=9)
        ax.set_xlabel("RECL (tokens)")
        ax.grid(True, axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(models)), [model_name(m) for m in models])
    axes[0][0].set_ylim(len(models) - 0.5, -0.5)
    handles = [plt.Line2D([], [], marker="o", ls="", color="0.3", label="paper's RECL, one seed"),
               plt.Line2D([], [], marker="o", ls="", color="0.3", mfc="none", label="placebo-aware RECL, one seed"),
               plt.Line2D([], [], marker=">", ls="", color="0.3", label="ran off the grid (at least)"),
               plt.Line2D([], [], marker="|", ms=12, mew=2, ls="", color="0.3", label="mean of the seeds")]
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.55 / height, 1, 1))
    fig.legend(handles=handles, fontsize=8, loc="lower center", ncol=2 if len(rs) < 3 else 4, frameon=False)
    written = save_figure_with_points(fig, out, points)
    return [*written["figures"], written["table"]]


def write_context_curves(gains, perplexity, grid, models, out_dir: Path, placebo: dict | None = None,
                         reference: dict[str, Any] | None = None) -> list[Path]:
    """The points of Figures 3 and 4 as CSV in ``out_dir``: figure3.csv (model, c, c_next, gain: the
    unnormalised gain exp f(c,c) - exp f_i(c,c')), figure4.csv (model, c, ppl; plus the ``reference``
    curves, name -> [G] perplexity, such as the ideal model's) and, with placebo
    gains ({r: (relative step gains [M, G-1], placebo gains [M, G-1])}), placebo.csv (model, r, c,
    c_next, gain, placebo_gain: a real gain stands well above its placebo)."""
    out_dir = Path(out_dir)
    steps = list(zip(grid[:-1], grid[1:]))
    fig3 = pd.DataFrame([{"model": m, "c": c, "c_next": c2, "gain": float(gains[i][j])}
                         for i, m in enumerate(models) for j, (c, c2) in enumerate(steps)])
    curves = [*zip(models, perplexity), *(reference or {}).items()]
    fig4 = pd.DataFrame([{"model": m, "c": c, "ppl": float(ppl[j])} for m, ppl in curves for j, c in enumerate(grid)])
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


MODEL_NAMES = {
    "xl151m": "Transformer-XL", "xl128m": "Transformer-XL", "xl128m-shaw": "Transformer-XL, Shaw et al. encoding",
    "xl128m-norecur": "Transformer-XL without recurrence", "transformer128m": "vanilla Transformer",
    "qrnn": "QRNN", "lstm": "LSTM", "gpt2": "GPT-2", "llama": "Llama",
}
"""How figures name a preset: its architecture in words (a preset's name carries its paper size, which
a cpu or tiny size does not have)."""


def model_name(label: str) -> str:
    """A group member's legend entry: the preset's architecture in words with its label, e.g.
    'Transformer-XL (xl151m)', 'QRNN'; a label no preset starts (a run folder, hf:PATH) as it is."""
    key = label if label in MODEL_NAMES else next((k for k in sorted(MODEL_NAMES, key=len, reverse=True) if label.startswith(k + "-")), None)
    if key is None:
        return label
    # a run folder's label repeats the size and corpus the title already gives: the preset says which
    return MODEL_NAMES[key] if MODEL_NAMES[key].lower() == key else f"{MODEL_NAMES[key]} ({key})"


def models_in_words(names: list[str]) -> str:
    """A figure title's models: 'Transformer-XL, QRNN and LSTM' from presets, run folders or hf: paths
    (each architecture once), '4 models' past three, where the legend names each."""
    words = []
    for name in names:
        base = Path(str(name).removeprefix("hf:")).name
        key = base if base in MODEL_NAMES else next((k for k in sorted(MODEL_NAMES, key=len, reverse=True) if base.startswith(k + "-")), None)
        words.append(MODEL_NAMES[key] if key else base)
    words = list(dict.fromkeys(words))
    if len(words) > 3:  # a title listing four or more would outgrow the figure
        return f"{len(words)} models"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


SPLIT_NAMES = {"train": "training", "valid": "validation", "test": "test"}
"""How titles name a split."""


def sized_label(name: str, params: int | None) -> str:
    """A model's legend entry with the size it really has: 'Transformer-XL (xl128m), 0.96M parameters'
    (a preset's name carries its paper size, 128M, which a cpu or tiny size does not have)."""
    if params is None:
        return model_name(name)
    size = f"{params / 1e6:.2f}M" if params >= 100_000 else f"{params / 1e3:.1f}k"
    return f"{model_name(name)}, {size} parameters"


def _model_styles(models: list[str]) -> dict[str, dict[str, Any]]:
    """One colour and marker per model, the same in Figures 3 and 4; the oracle (ground truth) in the
    reference black, dashed, so it never reads as a model's colour."""
    palette = distinct_colors(sum(not m.startswith("oracle") for m in models))
    styles, i = {}, 0
    for model in models:
        if model.startswith("oracle"):
            styles[model] = {"color": REFERENCE_COLORS["ideal"], "ls": "--", "marker": None}
        else:
            styles[model] = {"color": palette[i], "ls": "-", "marker": MARKERS[i % len(MARKERS)]}
            i += 1
    return styles


def _wrapped(title: str, width: int = 70) -> str:
    """A title's lines wrapped to the figure's width (a long corpus description ran past the edges)."""
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


def _legend_outside(ax: plt.Axes) -> None:
    """The legend right of the plot, where it covers no line."""
    ax.legend(fontsize=8, title=None, loc="upper left", bbox_to_anchor=(1.02, 1.0))


@themed
def figure3(table: Path, out: Path, title: str = "", intervals: Path | None = None, placebo: Path | None = None,
            r: float = 0.1, threshold: float = 0.01) -> list[Path]:
    """Figure 3 from figure3.csv: the unnormalised gain exp f(c,c) - exp f_i(c,c') of each step c -> c',
    plotted at c', one line per model. With ``intervals`` (table8.csv) each model's RECL at ``r`` is
    marked under its gains with its bootstrap interval; with ``placebo`` (placebo.csv) a second panel
    shows the relative gain at ``r`` beside the placebo gain (the same step with the context's source
    shuffled), with RECL's ``threshold``: a real gain stands above both. Writes ``out`` (.png and .pdf)
    and its points (.csv).

    No threshold line on the unnormalised gains: RECL's threshold applies to the gain relative to the
    group's best loss at c (txlab.analysis.recl.relative_gain), which is what the placebo panel shows."""
    points = _read_points(table, "Figure 3")
    models = list(dict.fromkeys(points["model"]))
    styles = _model_styles(models)
    placebo_points = pd.read_csv(placebo) if placebo is not None and Path(placebo).is_file() else None
    if placebo_points is not None:
        placebo_points = placebo_points[np.isclose(placebo_points["r"], r)]
    panels = 2 if placebo_points is not None and not placebo_points.empty else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.2 * panels + 1.6, 4.2), squeeze=False)
    ax = axes[0][0]
    for model in models:
        own = points[points["model"] == model].sort_values("c_next")
        st = styles[model]
        ax.plot(own["c_next"], own["gain"], color=st["color"], ls=st["ls"], marker=st["marker"], ms=4, lw=1.4, label=model_name(model))
    ax.set(xlabel="context length c' (step c \u2192 c')", ylabel="gain exp f(c,c) \u2212 exp f(c,c')")
    ax.set_title(f"unnormalised gain at r = {r:g}", fontsize=9)
    rows = pd.read_csv(intervals) if intervals is not None and Path(intervals).is_file() else None
    if rows is not None and "ci_low" in rows:
        marked = rows[np.isclose(rows["r"], r) & rows["model"].isin(models)]
        lo, hi = ax.get_ylim()
        span = hi - lo
        ax.set_ylim(lo - 0.08 * span * (len(marked) + 1), hi)
        for k, row in enumerate(marked.itertuples()):
            y = lo - 0.08 * span * (k + 1)
            st = styles[row.model]
            ax.errorbar([row.recl], [y], xerr=[[row.recl - row.ci_low], [row.ci_high - row.recl]], color=st["color"],
                        marker=">" if row.censored else "D", ms=5, capsize=3, lw=1.2)
        ax.set_title(f"unnormalised gain at r = {r:g}\nbelow: RECL with its 95% bootstrap interval (\u25b8: beyond the grid)", fontsize=9)
    if panels == 2:
        right = axes[0][1]
        for model in models:
            own = placebo_points[placebo_points["model"] == model].sort_values("c_next")
            if own.empty:
                continue
            st = styles[model]
            right.plot(own["c_next"], own["gain"], color=st["color"], marker=st["marker"], ms=4, lw=1.4)
            right.plot(own["c_next"], own["placebo_gain"], color=st["color"], ls=":", lw=1.2)
        right.axhline(threshold, color=REFERENCE_COLORS["bound"], lw=1, ls="--")
        right.plot([], [], color="0.3", lw=1.4, label="gain")
        right.plot([], [], color="0.3", ls=":", lw=1.2, label="placebo gain (far context)")
        right.plot([], [], color=REFERENCE_COLORS["bound"], ls="--", lw=1, label=f"threshold {threshold:g}")
        right.set(xlabel="context length c' (step c \u2192 c')", ylabel="relative gain g(c, c')")
        right.set_title(f"relative gain and its placebo at r = {r:g}", fontsize=9)
        right.legend(fontsize=7, loc="best", framealpha=0.9)
    if title:
        fig.suptitle(_wrapped(title, 110 if panels == 2 else 70), fontsize=10)
    if panels == 1:
        _legend_outside(ax)
        fig.tight_layout()
    else:  # between the panels the models' legend would cover the right one: under the figure instead
        handles, labels = ax.get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(len(models), 4), frameon=False)
    written = save_figure_with_points(fig, out, points)
    return [*written["figures"], written["table"]]


@themed
def figure4(table: Path, out: Path, title: str = "", char_level: bool = False) -> list[Path]:
    """Figure 4 from figure4.csv: perplexity on the shared targets against context length, one line
    per model (and the ideal model's on synthetic corpora, black and dashed); in bits per character
    (log2 of the perplexity) on a character corpus, as txlab reads character corpora everywhere.
    Writes ``out`` (.png and .pdf) and its points (.csv)."""
    points = _read_points(table, "Figure 4")
    models = list(dict.fromkeys(points["model"]))
    styles = _model_styles(models)
    y = np.log2(points["ppl"]) if char_level else points["ppl"]
    points = points.assign(bpc=y) if char_level else points
    fig, ax = plt.subplots(figsize=(7.6, 4.2))
    for model in models:
        own = points[points["model"] == model].sort_values("c")
        st = styles[model]
        ax.plot(own["c"], own["bpc" if char_level else "ppl"], color=st["color"], ls=st["ls"], marker=st["marker"] or "o", ms=4, lw=1.4,
                label=model_name(model))
    ax.set(xlabel="context length c", ylabel="bits per character" if char_level else "perplexity exp(mean l(c, t))")
    _legend_outside(ax)
    if title:
        ax.set_title(_wrapped(title), fontsize=10)
    fig.tight_layout()
    written = save_figure_with_points(fig, out, points)
    return [*written["figures"], written["table"]]


# --------------------------------------------------------------------------------------------------
# Ablations (`txlab ablate`): Tables 6, 7 and 10, perplexity against evaluation attention length

ABLATION_COLUMNS = {
    "remark": "Remark",
    "row": "Row",
    "recurrence": "Recurrence",
    "encoding": "Encoding",
    "loss": "Loss",
    "backprop_len": "Backprop Len",
    "mem_len": "Mem Len",
    "params": "Params",
    "train_memory": "Train memory (MiB)",
    "ppl_init": "PPL init",
    "ppl_best": "PPL best",
    "attn_len": "Attn Len",
    "seeds": "Seeds",
}
"""Columns an ablation table can show, with their default headers ("PPL" reads "bpc" on character corpora)."""

TABLE6_COLUMNS = ("remark", "recurrence", "encoding", "loss", "ppl_init", "ppl_best", "attn_len")

ENCODING_NAMES = {"ours": "Ours", "shaw": "Shaw et al. (2018)", "vaswani": "Vaswani et al. (2017)", "alrfou": "Al-Rfou et al. (2018)"}


def ablation_eval_name(length: int, split: str, tokens: int) -> str:
    """File name of a run's score at one evaluation attention length."""
    return f"attn{length}-{split}-n{tokens or 'all'}.json"


def init_best(lengths: list[int], values: list[float], init_len: int) -> tuple[float, float, int]:
    """(value at the training length, best value, shortest length reaching the best) of one curve.

    Lower is better (perplexity, bpc); ``init_len`` must be one of ``lengths``.
    """
    if len(lengths) != len(values) or not lengths:
        raise TxlabError("init_best needs one value per length")
    by_length = dict(zip(lengths, values))
    if init_len not in by_length:
        raise TxlabError(f"the training length {init_len} was not evaluated (lengths: {sorted(by_length)})")
    best = min(by_length.values())
    return by_length[init_len], best, min(a for a, v in by_length.items() if v == best)


STUDY_REMEDY = "delete it and rerun `txlab ablate` to rebuild it"
ROW_RECORD_KEYS = {"row_id": str, "remark": str, "seed": int, "init_len": int, "eval_lens": list, "split": str, "eval_tokens": int}
"""What a study run's ablate/row.json must hold."""


def _read_json(path: Path) -> dict:
    return read_json(path, STUDY_REMEDY)


def ablation_curves(out_dir: Path, run_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of the study runs present under ``out_dir/runs``: one row per run with what the
    table needs from its config, and one row per (run, evaluation length) that has been scored."""
    runs, points = [], []
    for run_id in run_ids:
        run_dir = Path(out_dir) / "runs" / run_id
        row_file = run_dir / "ablate" / "row.json"
        if not row_file.is_file() or not (run_dir / "config.yaml").is_file():
            continue
        row = read_json(row_file, STUDY_REMEDY, keys=ROW_RECORD_KEYS)
        cfg = read_yaml_mapping(run_dir / "config.yaml", STUDY_REMEDY)
        if not (isinstance(cfg.get("model"), dict) and isinstance(cfg.get("train"), dict)):
            raise DamagedFile(run_dir / "config.yaml", "no 'model' or 'train' section", STUDY_REMEDY)
        model = cfg["model"]
        memory_file = next((f for f in (run_dir / "fit.json", run_dir / "memory.json") if f.is_file()), None)
        memory = _read_json(memory_file) if memory_file else {}
        runs.append({
            "run_id": run_id, "row_id": row["row_id"], "remark": row["remark"], "seed": row["seed"], "init_len": row["init_len"],
            "recurrence": model["mem_len"] > 0, "encoding": ENCODING_NAMES.get(model["pos_enc"], model["pos_enc"]) if model["family"] in ("xl", "vanilla") else model["family"].upper(),
            "loss": cfg["train"]["loss"].capitalize(), "backprop_len": model["tgt_len"], "mem_len": model["mem_len"], "params": row.get("params"),
            "train_memory": memory["bytes"] / 2**20 if memory else None, "n_lengths": len(row["eval_lens"]),
            **_validation_context(cfg),
        })
        for length in row["eval_lens"]:
            path = run_dir / "ablate" / ablation_eval_name(length, row["split"], row["eval_tokens"])
            if path.is_file():
                record = read_json(path, STUDY_REMEDY, keys={"loss": (int, float), "tokens": int})
                metric = "ppl" if "ppl" in record else "bpc"
                points.append({"run_id": run_id, "row_id": row["row_id"], "seed": row["seed"], "attn_len": length,
                               "metric": metric, "value": record[metric], "loss": record["loss"], "tokens": record["tokens"]})
    return pd.DataFrame(runs), pd.DataFrame(points)


def _validation_context(cfg: dict) -> dict[str, int | None]:
    """How training's periodic validation scored the run (segment, memory, targets), as
    txlab.runs.evaluate.evaluation_context resolves it (-1: as in training); None where the config lacks it."""
    model, evaluation, train = cfg["model"], cfg.get("eval") or {}, cfg["train"]
    pick = lambda key: None if evaluation.get(key) is None else model[key] if evaluation[key] < 0 else evaluation[key]  # noqa: E731
    return {"valid_tgt_len": pick("tgt_len"), "valid_mem_len": pick("mem_len"), "valid_tokens": train.get("eval_tokens")}


def _complete_points(runs: pd.DataFrame, curves: pd.DataFrame, row_id: str) -> pd.DataFrame:
    """The curve points of a row's seeds that are scored at every length (seeds still being scored wait)."""
    points = curves[curves["row_id"] == row_id] if not curves.empty else curves
    if points.empty:
        return points
    n_lengths = runs.loc[runs["row_id"] == row_id, "n_lengths"].iloc[0]
    lengths_scored = points.groupby("seed")["attn_len"].nunique()
    return points[points["seed"].isin(lengths_scored.index[lengths_scored == n_lengths])]


def seed_scores(runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """One line per finished (row, seed), the numbers every table, claim and figure of the row reads:
    the seed's score at the training length (ppl_init) and at the row's Attn Len (ppl_best), in the
    table's metric and as log-perplexity in nats (loss_init, loss_best).

    The row's Attn Len is the length where its mean over seeds is lowest (the shortest on ties): one
    length per row, as in the paper, so the row's "PPL best" is the mean of these per-seed values.
    It is chosen on the same targets it is reported on, so it is optimistic by that choice among
    ``n_lengths`` lengths (the scores are whole-split means, with no held-out half to choose on)."""
    lines = []
    for row_id, members in runs.groupby("row_id", sort=False):
        init_len = int(members.iloc[0]["init_len"])
        points = _complete_points(runs, curves, row_id)
        if points.empty:
            continue
        mean = points.groupby("attn_len")["value"].mean()
        _, _, best_len = init_best(list(mean.index), list(mean.values), init_len)
        for seed, p in points.groupby("seed"):
            at = p.set_index("attn_len")
            lines.append({"row_id": row_id, "seed": int(seed), "init_len": init_len, "attn_len": int(best_len), "n_lengths": len(at),
                          "ppl_init": float(at.loc[init_len, "value"]), "ppl_best": float(at.loc[best_len, "value"]),
                          "loss_init": float(at.loc[init_len, "loss"]), "loss_best": float(at.loc[best_len, "loss"])})
    return pd.DataFrame(lines, columns=["row_id", "seed", "init_len", "attn_len", "n_lengths", "ppl_init", "ppl_best", "loss_init", "loss_best"])


def ablation_rows(runs: pd.DataFrame, curves: pd.DataFrame) -> list[dict]:
    """One table row per study row: its settings and, over its finished seeds (:func:`seed_scores`),
    the mean and standard deviation of the value at the training length and at the row's Attn Len."""
    scores = seed_scores(runs, curves)
    rows = []
    for row_id, members in runs.groupby("row_id", sort=False):
        first = members.iloc[0]
        out = {k: (v.item() if hasattr(v, "item") else v) for k, v in first.items() if k not in ("run_id", "seed", "n_lengths")}
        out.update(seeds=0, metric=None, ppl_init=None, ppl_best=None, attn_len=None, ppl_init_std=None, ppl_best_std=None, n_lengths=None)
        mine = scores[scores["row_id"] == row_id]
        if not mine.empty:
            spread = lambda xs: float(xs.std(ddof=1)) if len(xs) > 1 else None  # noqa: E731
            out.update(seeds=len(mine), metric=curves.loc[curves["row_id"] == row_id, "metric"].iloc[0],
                       ppl_init=float(mine["ppl_init"].mean()), ppl_best=float(mine["ppl_best"].mean()), attn_len=int(mine["attn_len"].iloc[0]),
                       ppl_init_std=spread(mine["ppl_init"]), ppl_best_std=spread(mine["ppl_best"]), n_lengths=int(mine["n_lengths"].iloc[0]))
        rows.append(out)
    return rows


def _cell(row: dict, key: str, latex: bool) -> str:
    """A table cell as Markdown text, or as LaTeX (plain text escaped, symbols in math mode)."""
    value = row.get("row_id" if key == "row" else key)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "-"
    if key == "recurrence":
        return ("$\\checkmark$" if value else "$\\times$") if latex else ("✓" if value else "✗")
    if key == "params":
        return f"{value / 1e6:.2f}M"
    if key == "train_memory":
        return f"{value:.1f}"
    if key in ("ppl_init", "ppl_best"):
        digits = 3 if row.get("metric") == "bpc" else 2
        spread = row.get(f"{key}_std")
        pm = " $\\pm$ " if latex else " ± "
        return f"{value:.{digits}f}" + (f"{pm}{spread:.{digits}f}" if spread is not None else "")
    return _latex_escape(str(value)) if latex else str(value)


def _headers(columns: list[tuple[str, str]], rows: list[dict]) -> list[str]:
    bpc = any(r.get("metric") == "bpc" for r in rows)
    return [h.replace("PPL", "bpc") if bpc else h for _, h in columns]


def ablation_notes(rows: list[dict], columns: list[tuple[str, str]]) -> list[str]:
    """What the table's ± and PPL columns are, one sentence each (under the table, so no reader has to guess)."""
    headers = dict(zip((k for k, _ in columns), _headers(columns, rows)))
    notes = []
    if "ppl_init" in headers:
        notes.append(f"{headers['ppl_init']}: at the training attention length (segment + memory), the mean over seeds.")
    if "ppl_best" in headers:
        counts = sorted({r["n_lengths"] for r in rows if r.get("n_lengths")})
        lengths = (f"its {counts[0]} evaluation lengths" if len(counts) == 1 else
                   f"its evaluation lengths ({counts[0]} to {counts[-1]} per row)" if counts else "its evaluation lengths")
        where = f", at {headers['attn_len']}" if "attn_len" in headers else ""
        notes.append(f"{headers['ppl_best']}: the row's lowest mean over seeds among {lengths}{where}, every seed "
                     "taken at that one length. It is chosen and reported on the same validation targets, so it is optimistic by "
                     "that choice: the scores are whole-split means, with no held-out half to choose on.")
    several = sorted({r["seeds"] for r in rows if (r.get("seeds") or 0) > 1})
    if several and {"ppl_init", "ppl_best"} & set(headers):
        notes.append(f"±: standard deviation over the row's seeds ({' or '.join(map(str, several))}; with n - 1); "
                     "a value without ± comes from one seed.")
    return notes


def ablation_markdown(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """The table, then :func:`ablation_notes` as a list under it."""
    table = markdown_table(_headers(columns, rows), ([_cell(r, k, False) for k, _ in columns] for r in rows)) + "\n"
    notes = ablation_notes(rows, columns)
    return table + ("\n" + "".join(f"- {note}\n" for note in notes) if notes else "")


def _latex_escape(text: str) -> str:
    return re.sub(r"([&%_#$])", r"\\\1", text)


def ablation_latex(rows: list[dict], columns: list[tuple[str, str]], caption: str = "") -> str:
    """A booktabs table for a paper (needs \\usepackage{booktabs, amssymb})."""
    headers = [_latex_escape(h) for h in _headers(columns, rows)]
    lines = ["\\begin{table}[t]", "\\centering", f"\\begin{{tabular}}{{{'l' * len(columns)}}}", "\\toprule", " & ".join(headers) + " \\\\", "\\midrule"]
    lines += [" & ".join(_cell(r, k, True) for k, _ in columns) + " \\\\" for r in rows]
    lines += ["\\bottomrule", "\\end{tabular}"]
    notes = " ".join(ablation_notes(rows, columns))
    if caption or notes:  # the notes say what ± and the PPL columns are, as under the Markdown table
        text = " ".join(_latex_escape(part) for part in (caption + ("." if caption and notes else ""), notes) if part)
        text = text.replace("±", "$\\pm$")
        lines.append(f"\\caption{{{text}}}")
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def mean_intervals(frame: pd.DataFrame, keys: list[str], value: str, level: float = 0.95) -> pd.DataFrame:
    """Per group of ``keys``: the number of values n, their mean and its t-interval at ``level``
    (NaN bounds for n = 1): keys..., n, mean, ci_low, ci_high."""
    table = frame.groupby(keys, sort=False)[value].agg(n="count", mean="mean", sd="std").reset_index()
    half = stats.t.ppf(0.5 + level / 2, table["n"] - 1) * table["sd"] / np.sqrt(table["n"])
    return table.assign(ci_low=table["mean"] - half, ci_high=table["mean"] + half).drop(columns="sd")


def seed_intervals(curves: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per study row and attention length: the mean over seeds and its t-interval at ``level``
    (NaN bounds with one seed): row_id, attn_len, seeds, mean, ci_low, ci_high."""
    return mean_intervals(curves, ["row_id", "attn_len"], "value", level).rename(columns={"n": "seeds"})


@themed
def ablation_figure(curves: pd.DataFrame, runs: pd.DataFrame, out: Path, title: str = "") -> list[Path]:
    """Perplexity (or bpc) against evaluation attention length, one line per study row (mean over
    seeds) with each seed as a thin line of the same colour, the training length marked with an open
    circle. The mean at each length is the one the table reads (its PPL best is the lowest of them).
    Writes ``out`` (.png, .pdf) and the means with their 95% t-intervals and standard deviations over
    seeds (.csv).

    Seeds are drawn one by one rather than as an interval band: at this scale a seed either learns a
    structure or stalls, and a t-interval over three such seeds spans the whole plot (below zero
    perplexity) where the lines show two clusters."""
    intervals = seed_intervals(curves)
    # the table's ± is the sd over seeds: the plotted numbers carry it beside the t-interval
    sd = curves.groupby(["row_id", "attn_len"], sort=False)["value"].std(ddof=1).rename("sd").reset_index()
    intervals = intervals.merge(sd, on=["row_id", "attn_len"])
    if intervals.groupby("row_id")["attn_len"].nunique().max() == 1:
        return _ablation_dots(curves, runs, intervals, out, title)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    palette = distinct_colors(intervals["row_id"].nunique())
    for i, (row_id, points) in enumerate(intervals.groupby("row_id", sort=False)):
        points = points.sort_values("attn_len")
        color, marker = palette[i], MARKERS[i % len(MARKERS)]
        ax.plot(points["attn_len"], points["mean"], marker=marker, ms=4, lw=1.3, color=color, label=ablation_label(runs, row_id),
                ls="-" if i < 10 else "--")
        if (points["seeds"] > 1).any():
            for _, seed in curves[curves["row_id"] == row_id].groupby("seed"):
                seed = seed.sort_values("attn_len")
                ax.plot(seed["attn_len"], seed["value"], lw=0.6, alpha=0.45, color=color)
        init = int(runs.loc[runs["row_id"] == row_id, "init_len"].iloc[0])
        at_init = points[points["attn_len"] == init]
        if not at_init.empty:
            ax.plot([init], at_init["mean"], marker="o", ms=9, mfc="none", color=color)
    metric = curves["metric"].iloc[0]
    lengths = sorted(curves["attn_len"].unique())
    ax.set_xscale("log", base=2)  # the lengths roughly double; equal steps read as equal ratios
    ax.set_xticks(lengths, [str(a) for a in lengths])
    ax.minorticks_off()
    ax.set(xlabel="evaluation attention length", ylabel="perplexity" if metric == "ppl" else "bits per character")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title((title + "\n" if title else "") + "thick: mean over seeds; thin: each seed; open circle: the training attention length (PPL init)", fontsize=9)
    written = save_figure_with_points(fig, out, intervals)
    return [*written["figures"], written["table"]]


def ablation_label(runs: pd.DataFrame, row_id: str) -> str:
    """A study row's legend entry: its id, its remark where it adds something, and the size its runs
    really have (a remark such as 'Transformer-XL (128M)' names the paper's model, not a cpu profile's ~1M)."""
    row = runs.loc[runs["row_id"] == row_id].iloc[0]
    remark = re.sub(r"\s*\(\d+(\.\d+)?[KMB]\)", "", str(row.get("remark") or "")).strip()
    label = row_id if not remark or remark.lower() == row_id.lower() else f"{row_id}: {remark}"
    params = row.get("params")
    return label + (f" ({params / 1e6:.2f}M)" if params is not None and pd.notna(params) else "")


@themed
def _ablation_dots(curves: pd.DataFrame, runs: pd.DataFrame, intervals: pd.DataFrame, out: Path, title: str) -> list[Path]:
    """A study whose rows are each scored at one attention length (Table 7): one line of dots per row,
    each seed small, the mean large with its sd over seeds, the length written beside it (three lone
    points on an attention-length axis read as nothing)."""
    rows = list(dict.fromkeys(intervals["row_id"]))
    palette = distinct_colors(len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 0.7 * len(rows) + 1.6))
    for i, row_id in enumerate(rows):
        y = len(rows) - 1 - i
        mean = intervals[intervals["row_id"] == row_id].iloc[0]
        seeds = curves[curves["row_id"] == row_id]["value"]
        ax.scatter(seeds, np.full(len(seeds), y), s=14, color=palette[i], alpha=0.55, zorder=2)
        sd = mean["sd"] if pd.notna(mean["sd"]) else 0.0
        ax.errorbar([mean["mean"]], [y], xerr=[[sd], [sd]], fmt=MARKERS[i % len(MARKERS)], ms=8, color=palette[i], capsize=4, zorder=3)
        ax.annotate(f"attention length {int(mean['attn_len'])}", (mean["mean"], y), xytext=(0, 9), textcoords="offset points",
                    ha="center", fontsize=7, color="0.3")
    ax.set_yticks(range(len(rows)), [ablation_label(runs, r) for r in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.2)
    metric = curves["metric"].iloc[0]
    ax.set_xlabel("perplexity" if metric == "ppl" else "bits per character")
    ax.set_title((_wrapped(title) + "\n" if title else "") + "large: mean over seeds \u00b1 sd; small: each seed", fontsize=9)
    fig.tight_layout()
    written = save_figure_with_points(fig, out, intervals)
    return [*written["figures"], written["table"]]


@dataclass(frozen=True)
class LearnedRoles:
    """What the learned-structure table shows for one family of synthetic corpora."""

    headers: dict[str, str]
    """Role -> column header, in column order; the last role is the copied one."""
    structures: tuple[str, ...]
    """The roles whose loss falls well below the no-context loss once the model learns a structure
    that needs context: a run that has learned none of them is stalled (STALL_MARGIN)."""


LEARNED_ROLES = (
    LearnedRoles({"background": "background", "hint": "hint", "source_value": "source value", "copy_value": "copied value"},
                 ("source_value", "copy_value")),
    LearnedRoles({"background": "background", "latch_emission": "latch emission", "recall_key": "recall key", "recalled_value": "recalled value"},
                 ("latch_emission", "recalled_value")),
)
"""For the copy family and the recall family."""

STALL_MARGIN = 0.5
"""Nats below the ideal model's no-context loss that a structure's role must reach to count as learned."""


def learned_roles(role_names) -> LearnedRoles:
    """The LEARNED_ROLES entry of the synthetic family whose roles are ``role_names``."""
    for roles in LEARNED_ROLES:
        if set(roles.headers) <= set(role_names):
            return roles
    raise ValueError(f"no learned-structure roles for a corpus with roles {sorted(role_names)}")


def stalled_runs(learned: pd.DataFrame, roles: LearnedRoles) -> pd.Series:
    """Per (row_id, seed): True where the run's last validation shows none of the family's structures
    learned (each structure role within STALL_MARGIN of the ideal model's loss without context)."""
    key = ["row_id", "seed"]
    model = learned[learned["what"] == "model"].set_index(key)
    without = learned[learned["what"] == "ideal_without"].set_index(key)
    learned_any = pd.concat([model[r] < without[r] - STALL_MARGIN for r in roles.structures], axis=1).any(axis=1)
    return ~learned_any


def _last_role_record(run_dir: Path) -> dict | None:
    """The last per-role validation record of a run's training (None off synthetic corpora)."""
    if not (Path(run_dir) / "metrics.jsonl").is_file():
        return None
    metrics = read_metrics(run_dir)
    records = metrics[metrics["split"] == "valid_by_role"] if "split" in metrics else metrics.iloc[:0]
    return None if records.empty else records.iloc[-1].to_dict()


def copies_beyond(record: dict, distance: int) -> dict:
    """Copied-value loss over the distance buckets that start at or beyond ``distance`` (tokens-weighted
    means of the model and of the ideal model; NaN when no copy lies that far back)."""
    buckets = [b for b in record["copy_distance"] if b["lo"] >= distance and b["tokens"]]
    tokens = sum(b["tokens"] for b in buckets)
    mean = lambda key: sum(b[key] * b["tokens"] for b in buckets) / tokens if tokens else float("nan")  # noqa: E731
    return {"tokens": tokens, "model": mean("model"), "ideal_with": mean("ideal_with"), "ideal_without": mean("ideal_without")}


def learned_rows(out_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """What every run of a study learned on a synthetic corpus, from its last per-role validation in
    training: one line per run with the loss of each role in its family's LEARNED_ROLES and of the copies whose
    source lies at or beyond the training segment (which only memory can resolve), and the ideal
    model's losses with and without the needed context. Empty when no run has per-role records."""
    lines = []
    for run in runs.itertuples():
        record = _last_role_record(Path(out_dir) / "runs" / run.run_id)
        if record is None:
            continue
        groups = {role: record["roles"][role] for role in learned_roles(record["roles"]).headers} | {"copy_beyond_segment": copies_beyond(record, int(run.backprop_len))}
        measured = {"train_segment": int(run.backprop_len), "measured_segment": run.valid_tgt_len, "measured_memory": run.valid_mem_len,
                    "measured_targets": run.valid_tokens}
        for what in ("model", "ideal_with", "ideal_without"):
            lines.append({"row_id": run.row_id, "seed": run.seed, "step": record["step"], **measured, "what": what,
                          **{role: float(group[what]) for role, group in groups.items()}})
    return pd.DataFrame(lines)


def learned_markdown(learned: pd.DataFrame) -> str:
    """The learned-structure table: the ideal model's two lines, then each study row's mean ± sd over
    seeds with how it was measured, and notes saying that this is not how the table scores the row."""
    family = learned_roles([c for c in learned.columns if not pd.isna(learned[c]).all()])
    roles = [*family.headers, "copy_beyond_segment"]
    copied = list(family.headers.values())[-1]
    headers = ["Row", "Seeds", "Stalled", "Measured with", *family.headers.values(), f"{copied}, D >= training segment"]
    stalled = stalled_runs(learned, family)
    rows: list[list[object]] = []
    first = learned[learned["row_id"] == learned["row_id"].iloc[0]]
    def cell(values: pd.Series) -> str:  # '-' where no copy lies that far back (a corpus of short copies)
        values = values.dropna()
        if values.empty:
            return "-"
        return f"{values.mean():.2f}" + (f" ± {values.std():.2f}" if len(values) > 1 else "")

    def measured_with(seeds: pd.DataFrame) -> str:  # one setting per row: the seeds of a row share their config
        line = seeds.iloc[0]
        if pd.isna(line.get("measured_segment")):
            return "-"
        return f"segment {int(line['measured_segment'])}, memory {int(line['measured_memory'])} (trained on {int(line['train_segment'])})"

    for what, name in (("ideal_with", "ideal model, needed context in view"), ("ideal_without", "ideal model, without it")):
        ideal = first[first["what"] == what].iloc[:1]
        rows.append([name, "", "", "", *(cell(ideal[r]) for r in roles)])
    model = learned[learned["what"] == "model"]
    for row_id, seeds in model.groupby("row_id", sort=False):
        rows.append([row_id, len(seeds), f"{int(stalled.loc[row_id].sum())} of {len(seeds)}", measured_with(seeds), *(cell(seeds[r]) for r in roles)])
    steps = sorted(set(model["step"]))
    targets = sorted({int(t) for t in model.get("measured_targets", pd.Series(dtype=float)).dropna()})
    notes = [
        f"Measured in each run's last validation during training (step {' / '.join(map(str, steps))}"
        + (f", the first {' / '.join(f'{t:,}' for t in targets)} validation targets" if targets else "")
        + ") with the segment and memory shown, not as the table scores the row (attention length A with A tokens of memory). "
        "A row measured with memory 0 sees no token before its segment here, so its copies from farther back are out of view "
        "in these numbers but not in the table's.",
        "Mean ± standard deviation over the row's seeds (n - 1); losses in nats. The last column keeps the copies whose source "
        "lies at or beyond the row's training segment.",
        f"Stalled: seeds on which no structure that needs context was learned at that step ({' and '.join(s.replace('_', ' ') for s in family.structures)} "
        f"all within {STALL_MARGIN} nats of the ideal model's loss without context). Every run is counted; none was dropped or restarted.",
    ]
    return markdown_table(headers, rows) + "\n\n" + "".join(f"- {note}\n" for note in notes)


def write_ablation_report(
    out_dir: Path, fig_dir: Path, columns: list[tuple[str, str]], run_ids: list[str], title: str = "", claims: list[Claim] | None = None
) -> dict:
    """The study's table (table.csv with every number, table.md, table.tex), the curves behind it
    (curves.csv) and the figure (ppl-vs-attn-len.png/.pdf), from the run directories present; with
    ``claims``, their exact paired tests over seeds as one family (claims.csv, claims.md;
    :func:`txlab.analysis.claims.evaluate_claims`), each row read the one way :func:`seed_scores` gives;
    on synthetic corpora, what the runs learned per token role (learned.csv, learned.md)."""
    out_dir, fig_dir = Path(out_dir), Path(fig_dir)
    runs, curves = ablation_curves(out_dir, run_ids)
    if runs.empty:
        raise TxlabError(f"no runs of the study under {out_dir / 'runs'} yet: run the study first")
    rows = ablation_rows(runs, curves)
    markdown = ablation_markdown(rows, columns)
    outputs = [("table.csv", pd.DataFrame.from_records(rows).to_csv(index=False)), ("table.md", markdown),
               ("table.tex", ablation_latex(rows, columns, title)), ("curves.csv", curves.to_csv(index=False))]
    tested = evaluate_claims(seed_scores(runs, curves), claims) if claims else []
    if tested:
        outputs += [("claims.csv", pd.DataFrame.from_records([t.record() for t in tested]).to_csv(index=False)), ("claims.md", claims_markdown(tested))]
    learned = learned_rows(out_dir, runs)
    if not learned.empty:
        outputs += [("learned.csv", learned.to_csv(index=False)), ("learned.md", learned_markdown(learned))]
    files = []
    for name, text in outputs:
        files.append(write_text_atomic(out_dir / name, text))
    if not curves.empty:  # the seeds the table reads: those scored at every length
        complete = pd.concat([_complete_points(runs, curves, row_id) for row_id in runs["row_id"].unique()])
        files += ablation_figure(complete, runs, fig_dir / "ppl-vs-attn-len", title)
    finished = sum(r["seeds"] > 0 for r in rows)
    return {"rows": rows, "markdown": markdown, "files": [str(f) for f in files], "finished_runs": len(curves.groupby("run_id")) if not curves.empty else 0,
            "rows_finished": finished, "claims": tested}


@themed
def role_figure(runs: list[dict], out: Path, title: str = "") -> dict[str, list[Path] | Path]:
    """Copied-value loss against copy distance (left) and loss per token role (right) for a group of runs.

    ``runs`` are dicts with ``label``, ``train_span`` (the training attention span tgt_len + mem_len;
    0 to leave it unmarked) and ``by_role`` (a :func:`txlab.data.diagnostics.role_summary`). The left panel
    draws the ideal model with the source in view (0 nats) and without it (ln n_values): a model uses
    context as far back as its curve stays near the first. Each run keeps one colour and marker in
    both panels; one legend under both covers no line or bar. Writes ``out`` (.png and .pdf) and a
    CSV of every plotted number beside it.
    """
    if not runs:
        raise TxlabError("role_figure needs at least one run")
    rows = []
    for i, run in enumerate(runs):
        for bucket in run["by_role"]["copy_distance"]:
            rows.append({"run": i, "label": run["label"], "group": "copy_distance", "lo": bucket["lo"], "hi": bucket["hi"],
                         **{k: bucket[k] for k in ("tokens", "model", "ideal_with", "ideal_without")}})
        for role, group in run["by_role"]["roles"].items():
            rows.append({"run": i, "label": run["label"], "group": role, **{k: group[k] for k in ("tokens", "model", "ideal_with", "ideal_without")}})
    points = pd.DataFrame.from_records(rows)
    palette = distinct_colors(len(runs))

    fig, (by_distance, by_role) = plt.subplots(1, 2, figsize=(12, 5.4), gridspec_kw={"width_ratios": [3, 2]}, layout="constrained")
    copies = points[points["group"] == "copy_distance"].copy()
    copies["mid"] = (copies["lo"] + copies["hi"] - 1) / 2
    first = copies[copies["run"] == 0]
    # over the models' lines: a model at the ideal model's loss without the source reads as just that
    by_distance.step(first["mid"], first["ideal_without"], where="mid", color=REFERENCE_COLORS["bound"], ls="--", zorder=3)
    by_distance.step(first["mid"], first["ideal_with"], where="mid", color=REFERENCE_COLORS["ideal"], ls="--", zorder=3)
    spans: dict[int, int] = {}  # span -> runs marked there so far
    for i, run in enumerate(runs):
        mine = copies[copies["run"] == i]
        by_distance.plot(mine["mid"], mine["model"], marker=MARKERS[i % len(MARKERS)], ms=4, lw=1.4, color=palette[i], label=run["label"])
        span = run.get("train_span")
        if span:
            # one grey line per span and the run's marker above the top edge, stacked: coloured lines of
            # runs of one span were drawn over each other, so only the last one's colour showed
            if span not in spans:
                by_distance.axvline(span, color=REFERENCE_COLORS["bound"], ls=":", lw=1)
            spans[span] = spans.get(span, 0) + 1
            by_distance.plot([span], [1 + 0.045 * spans[span]], marker=MARKERS[i % len(MARKERS)], ms=4.5, color=palette[i],
                             transform=by_distance.get_xaxis_transform(), clip_on=False)
    by_distance.set(xlabel="copy distance D (tokens back to the source value)", ylabel="copied-value loss (nats)")
    by_distance.set_title("copied values by distance to their source" + ("\ndotted: training span, with the models' markers above" if spans else ""),
                          fontsize=9, pad=8 + 9 * max(spans.values(), default=0))

    roles = [r for r in runs[0]["by_role"]["roles"] if runs[0]["by_role"]["roles"][r]["tokens"]]
    width = 0.8 / (len(runs) + 1)
    table = points[points["group"].isin(roles)]
    for i in range(len(runs)):
        mine = table[table["run"] == i].set_index("group").loc[roles]
        by_role.bar([j + i * width for j in range(len(roles))], mine["model"], width, color=palette[i])
    ideal = table[table["run"] == 0].set_index("group").loc[roles]
    by_role.bar([j + len(runs) * width for j in range(len(roles))], ideal["ideal_with"], width, color=REFERENCE_COLORS["ideal"])
    by_role.scatter([j + (len(runs) * width) / 2 for j in range(len(roles))], ideal["ideal_without"], marker="_", s=300,
                    color=REFERENCE_COLORS["bound"], zorder=3)
    by_role.set_xticks([j + (len(runs) * width) / 2 for j in range(len(roles))], [r.replace("_", " ") for r in roles], rotation=30, fontsize=8)
    by_role.set(ylabel="loss (nats)")
    by_role.set_title("every token role\nbars: the models, then the ideal model", fontsize=9, pad=8 + 9 * max(spans.values(), default=0))
    by_role.grid(False, axis="x")

    # one legend for both panels, under them: inside either it covered a curve or a bar
    handles, labels = by_distance.get_legend_handles_labels()
    handles += [plt.Line2D([], [], color=REFERENCE_COLORS["ideal"], ls="--", lw=1.5),
                plt.Line2D([], [], color=REFERENCE_COLORS["bound"], ls="--", lw=1.5)]
    labels += ["ideal model, the needed context in view (left: dashed; right: black bar)",
               "ideal model without it (left: dashed; right: grey tick)"]
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    if title:
        fig.suptitle(_wrapped(title, 110), fontsize=10)
    return save_figure_with_points(fig, out, points)


@themed
def role_curves(run_dirs: list[Path], out: Path, title: str = "") -> dict[str, list[Path] | Path]:
    """Learning curves per token role: the validation loss of each role against training tokens, one
    panel per role, the ideal model with and without the needed context as dashed lines.

    Reads the ``valid_by_role`` records that training writes on synthetic corpora. Writes ``out``
    (.png and .pdf) and a CSV of the plotted points beside it.
    """
    if not run_dirs:
        raise TxlabError("role_curves needs at least one run directory")
    rows = []
    for run_dir in run_dirs:
        metrics = read_metrics(run_dir)
        records = metrics[metrics["split"] == "valid_by_role"] if "split" in metrics else metrics.iloc[:0]
        if records.empty:
            raise TxlabError(f"{run_dir} has no per-role validation records: it was not trained on a synthetic corpus, or before txlab logged them")
        label = run_label(run_dir)
        for record in records.itertuples():
            for role, group in record.roles.items():
                if group["tokens"]:
                    rows.append({"label": label, "run": Path(run_dir).name, "step": record.step, "tokens_seen": record.tokens_seen,
                                 "elapsed_s": record.elapsed_s, "role": role, **group})
    points = pd.DataFrame.from_records(rows)
    roles = list(dict.fromkeys(points["role"]))
    fig, axes = plt.subplots(2, (len(roles) + 1) // 2, figsize=(4 * ((len(roles) + 1) // 2), 6.5), sharex=True)
    for ax, role in zip(axes.flat, roles):
        mine = points[points["role"] == role]
        for (label, run), group in mine.groupby(["label", "run"], sort=False):
            ax.plot(group["tokens_seen"] / 1e6, group["model"], marker="o", ms=2.5, label=f"{run}")
        ideal = mine.iloc[-1]
        ax.axhline(ideal["ideal_with"], color=REFERENCE_COLORS["ideal"], ls="--", lw=1)
        ax.axhline(ideal["ideal_without"], color=REFERENCE_COLORS["bound"], ls="--", lw=1)
        ax.set_title(role.replace("_", " "), fontsize=9)
    for ax in axes.flat[len(roles):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("training tokens (millions)")
    for ax in axes[:, 0]:
        ax.set_ylabel("validation loss (nats)")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle((title + "\n" if title else "") + "dashed: ideal model with (black) and without (gray) the needed context", fontsize=9)
    return save_figure_with_points(fig, out, points)
