"""The figures of `txlab recl`: Figure 3 (the gain of each step to a longer context, beside its
placebo), Figure 4 (perplexity against context length), both from the points a group's table
writes beside Table 8, and the RECL of every training seed. Files only: no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from txlab.analysis.figures import legend_outside, model_name, model_styles, save_figure_with_points, wrapped
from txlab.analysis.table8 import PAPER, PLACEBO_AWARE, SeedSpreadRow, r_label
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic
from txlab.style import REFERENCE_COLORS, themed


def write_context_curves(gains: np.ndarray, perplexity: np.ndarray, grid: Sequence[int], models: Sequence[str], out_dir: Path,
                         placebo: Mapping[float, tuple[np.ndarray, np.ndarray]] | None = None,
                         reference: Mapping[str, np.ndarray] | None = None) -> list[Path]:
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
    styles = model_styles(models)
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
            # drawn as a segment, not an error bar: a bootstrap interval of a statistic on a grid can leave its point outside
            ax.plot([row.ci_low, row.ci_high], [y, y], color=st["color"], marker="|", ms=7, lw=1.2)
            ax.plot([row.recl], [y], color=st["color"], marker=">" if row.censored else "D", ms=5)
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
        fig.suptitle(wrapped(title, 110 if panels == 2 else 70), fontsize=10)
    if panels == 1:
        legend_outside(ax)
        fig.tight_layout()
    else:  # between the panels the models' legend would cover the right one: under the figure instead
        handles, labels = ax.get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(len(models), 4), frameon=False)
    return save_figure_with_points(fig, out, points).paths


@themed
def figure4(table: Path, out: Path, title: str = "", char_level: bool = False) -> list[Path]:
    """Figure 4 from figure4.csv: perplexity on the shared targets against context length, one line
    per model (and the ideal model's on synthetic corpora, black and dashed); in bits per character
    (log2 of the perplexity) on a character corpus, as txlab reads character corpora everywhere.
    Writes ``out`` (.png and .pdf) and its points (.csv)."""
    points = _read_points(table, "Figure 4")
    models = list(dict.fromkeys(points["model"]))
    styles = model_styles(models)
    y = np.log2(points["ppl"]) if char_level else points["ppl"]
    points = points.assign(bpc=y) if char_level else points
    fig, ax = plt.subplots(figsize=(7.6, 4.2))
    for model in models:
        own = points[points["model"] == model].sort_values("c")
        st = styles[model]
        ax.plot(own["c"], own["bpc" if char_level else "ppl"], color=st["color"], ls=st["ls"], marker=st["marker"] or "o", ms=4, lw=1.4,
                label=model_name(model))
    ax.set(xlabel="context length c", ylabel="bits per character" if char_level else "perplexity exp(mean l(c, t))")
    legend_outside(ax)
    if title:
        ax.set_title(wrapped(title), fontsize=10)
    fig.tight_layout()
    return save_figure_with_points(fig, out, points).paths


@themed
def seed_spread_figure(rows: Sequence[SeedSpreadRow], out: Path, title: str = "") -> list[Path]:
    """RECL over training seeds (txlab.analysis.table8.seed_rows): one panel per r, one line per model, a dot
    per seed (filled: the paper's RECL; open: the placebo-aware one; ▸: the walk ran off the grid, so at
    least there; the seeds a little apart in height, so equal readings stay countable) and a bar at the mean
    of the readings. Writes ``out`` (.png and .pdf) and its points (.csv)."""
    if not rows:
        raise TxlabError("no RECL rows over seeds to draw")
    points = pd.DataFrame([{"model": row.model, "r": row.r, "estimate": row.estimate, "seed": seed, "recl": value, "censored": censored}
                           for row in rows for seed, value, censored in zip(row.seeds, row.recl, row.censored)])
    models = list(dict.fromkeys(points["model"]))
    styles = model_styles(models)
    rs = list(dict.fromkeys(points["r"]))
    title = wrapped(title, 45 * len(rs) + 30) if title else ""
    height = 0.8 * len(models) + 1.2 + 0.25 * (title.count("\n") + 1) * bool(title)
    fig, axes = plt.subplots(1, len(rs), figsize=(3.4 * len(rs) + 1.8, height), sharex=True, sharey=True, squeeze=False)
    for ax, r in zip(axes[0], rs):
        for row in (row for row in rows if row.r == r):
            y = models.index(row.model) + (0.2 if row.estimate == PLACEBO_AWARE else -0.2)
            color = styles[row.model]["color"]
            filled = row.estimate == PAPER
            for k, (value, censored) in enumerate(zip(row.recl, row.censored)):
                apart = 0.16 / max(len(row.recl) - 1, 1) * (k - (len(row.recl) - 1) / 2)
                ax.plot([value], [y + apart], marker=">" if censored else "o", ms=5, ls="", color=color, mfc=color if filled else "none", alpha=0.85)
            ax.plot([row.spread.mean], [y], marker="|", ms=12, mew=2, color=color)
        ax.set_title(r_label(r), fontsize=9)
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
    return save_figure_with_points(fig, out, points).paths
