"""The figures of `txlab recl`: Figure 3 (the gain of each step to a longer context, beside its
placebo, over each RECL with its interval), Figure 4 (perplexity against context length, with its
interval), both from the points a group's table writes beside Table 8, and the RECL of every training
seed. Files only: no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from txlab.analysis.figures import ModelLegend, legend_outside, save_figure_with_points, wrapped
from txlab.analysis.table8 import PAPER, PLACEBO_AWARE, SeedSpreadRow, r_label
from txlab.errors import TxlabError
from txlab.fileio import read_csv, write_text_atomic
from txlab.style import CI_ALPHA, REFERENCE_COLORS, themed
from txlab.tables import csv_text

FIGURE4_INTERVALS = "figure4-intervals.csv"
"""Beside figure4.csv: each perplexity's block-bootstrap interval (model, c, ppl_low, ppl_high, ci; in words also
ppl_byte_low, ppl_byte_high: the perplexity per byte's, over the same blocks)."""


def write_context_curves(gains: np.ndarray, perplexity: np.ndarray, grid: Sequence[int], models: Sequence[str], out_dir: Path,
                         placebo: Mapping[float, tuple[np.ndarray, np.ndarray]] | None = None,
                         reference: Mapping[str, np.ndarray] | None = None,
                         intervals: Mapping[str, np.ndarray] | None = None, ci: float = 0.95,
                         byte_perplexity: np.ndarray | None = None, byte_intervals: Mapping[str, np.ndarray] | None = None) -> list[Path]:
    """The points of Figures 3 and 4 as CSV in ``out_dir``: figure3.csv (model, c, c_next, gain: the
    unnormalised gain exp f(c,c) - exp f_i(c,c')), figure4.csv (model, c, ppl, and in words ppl_byte from
    ``byte_perplexity`` [M, G]: txlab.measure.words.byte_perplexity; plus the ``reference``
    curves, name -> [G] perplexity, such as the ideal model's), with ``intervals`` (name -> [G, 2] low and high
    perplexity, txlab.analysis.recl.bootstrap_perplexity at coverage ``ci``; ``byte_intervals`` the same of the
    perplexity per byte, for the members) :data:`FIGURE4_INTERVALS`, and with
    placebo gains ({r: (relative step gains [M, G-1], placebo gains [M, G-1])}), placebo.csv (model, r, c,
    c_next, gain, placebo_gain: a real gain stands well above its placebo)."""
    out_dir = Path(out_dir)
    steps = list(zip(grid[:-1], grid[1:]))
    fig3 = pd.DataFrame([{"model": m, "c": c, "c_next": c2, "gain": float(gains[i][j])}
                         for i, m in enumerate(models) for j, (c, c2) in enumerate(steps)])
    curves = [*zip(models, perplexity), *(reference or {}).items()]
    fig4 = pd.DataFrame([{"model": m, "c": c, "ppl": float(ppl[j])} for m, ppl in curves for j, c in enumerate(grid)])
    if byte_perplexity is not None:
        per_byte = {(m, c): float(ppl[j]) for m, ppl in zip(models, byte_perplexity) for j, c in enumerate(grid)}
        fig4["ppl_byte"] = [per_byte.get((m, c), np.nan) for m, c in zip(fig4["model"], fig4["c"])]
    tables = [("figure3.csv", fig3), ("figure4.csv", fig4)]
    if intervals:
        frame = pd.DataFrame([{"model": m, "c": c, "ppl_low": float(bounds[j][0]), "ppl_high": float(bounds[j][1]), "ci": ci}
                              for m, bounds in intervals.items() for j, c in enumerate(grid)])
        if byte_intervals:
            per_byte = {(m, c): bounds[j] for m, bounds in byte_intervals.items() for j, c in enumerate(grid)}
            for end, k in (("low", 0), ("high", 1)):
                frame[f"ppl_byte_{end}"] = [float(per_byte[m, c][k]) if (m, c) in per_byte else np.nan for m, c in zip(frame["model"], frame["c"])]
        tables.append((FIGURE4_INTERVALS, frame))
    if placebo:
        tables.append(("placebo.csv", pd.DataFrame([{"model": m, "r": r, "c": c, "c_next": c2, "gain": float(real[i][j]), "placebo_gain": float(fake[i][j])}
                                                    for r, (real, fake) in placebo.items() for i, m in enumerate(models) for j, (c, c2) in enumerate(steps)])))
    written = []
    for name, frame in tables:
        write_text_atomic(out_dir / name, csv_text(frame))
        written.append(out_dir / name)
    return written


TABLES = {
    "figure3.csv": (("model",), ("c", "c_next", "gain"), ()),
    "figure4.csv": (("model",), ("c", "ppl"), ("ppl_byte",)),
    FIGURE4_INTERVALS: (("model",), ("c",), ("ppl_low", "ppl_high", "ppl_byte_low", "ppl_byte_high")),
    "placebo.csv": (("model",), ("r", "c", "c_next"), ("gain", "placebo_gain")),
    "table8.csv": (("model",), ("r", "recl"), ("ci_low", "ci_high", "ci", "censored_fraction", "placebo_recl", "placebo_ci_low",
                                                "placebo_ci_high", "placebo_censored_fraction")),
}
"""What each table the figures of a group read must hold (txlab.fileio.read_csv): its text columns, its columns of
numbers, and those of numbers or blanks. Figure 3's and Figure 4's points must be there; the others where written."""
REQUIRED_TABLES = ("figure3.csv", "figure4.csv")
_REMEDY = "run the `txlab recl` that wrote it again (--redraw draws only from its complete tables)"


def _read_points(table: Path, what: str) -> pd.DataFrame:
    if not Path(table).is_file():
        raise TxlabError(f"no {what} points at {table}: run `txlab recl` first")
    return read_csv(table, _REMEDY, *TABLES[Path(table).name])


def _read_optional(table: Path | None) -> pd.DataFrame | None:
    return read_csv(table, _REMEDY, *TABLES[Path(table).name]) if table is not None and Path(table).is_file() else None


def check_tables(table_dir: Path) -> None:
    """Refuse a group's folder of tables whose figures would not draw (a table missing, cut short, or holding text
    where numbers go), in one line naming the file: what --redraw checks of every folder before it draws any."""
    for name in TABLES:
        if name in REQUIRED_TABLES:
            _read_points(Path(table_dir) / name, name.removesuffix(".csv").replace("figure", "Figure "))
        else:
            _read_optional(Path(table_dir) / name)


def _interval_rows(rows: pd.DataFrame, models: Sequence[str], r: float) -> list[tuple[str, str, pd.Series]]:
    """The rows of Figure 3's RECL panel, top to bottom: per model its placebo-aware RECL first, where there is one,
    then the paper's; (model, estimate, the table8.csv row)."""
    marked = rows[np.isclose(rows["r"], r) & rows["model"].isin(models)]
    drawn = []
    for model in models:
        for _, row in marked[marked["model"] == model].iterrows():
            if "placebo_recl" in row and pd.notna(row["placebo_recl"]):
                drawn.append((model, PLACEBO_AWARE, row))
            drawn.append((model, PAPER, row))
    return drawn


def context_axis(unit: str, name: str = "context length c") -> str:
    """An axis of context lengths, in the group's unit: '(words)' or '(tokens)'."""
    return f"{name} ({unit}s)"


def scale_contexts(ax: plt.Axes, contexts: Sequence[float]) -> None:
    """A log2 axis of context lengths where the grid doubles at every step (16, 32, 64, ...), where a linear one
    would crowd its short contexts into one corner; the grid's own values as the ticks."""
    grid = np.unique(np.asarray(contexts, dtype=np.float64))
    if len(grid) >= 3 and grid[0] > 0 and np.allclose(grid[1:] / grid[:-1], 2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(grid, [f"{c:g}" for c in grid])
        ax.minorticks_off()


def scale_perplexity(ax: plt.Axes, values: Sequence[float]) -> None:
    """A log axis of perplexity where the values drawn span more than a decade: on a linear one the best members'
    curves lie flat along the bottom."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values) & (values > 0)]
    if len(values) and values.max() > 10 * values.min():
        ax.set_yscale("log")


def _draw_recl_intervals(ax: plt.Axes, rows: pd.DataFrame, models: Sequence[str], styles: dict, names: Mapping[str, str], r: float,
                         unit: str = "token") -> None:
    """Each model's RECL at ``r`` with its bootstrap interval, one line each in the model's colour and marker: the
    placebo-aware RECL first, solid and filled, then the paper's, dashed and open († where it rests on a step that
    did not beat its placebo); '≥' before a reading and '▸' at an interval's end that ran off the grid. The ideal
    model's RECL is a black line across."""
    drawn = _interval_rows(rows, [m for m in models if not m.startswith("oracle")], r)
    labels = []
    for y, (model, estimate, row) in enumerate(drawn):
        st = styles[model]
        prefix = "placebo_" if estimate == PLACEBO_AWARE else ""
        filled = estimate == PLACEBO_AWARE or not any(e == PLACEBO_AWARE for m, e, _ in drawn if m == model)
        if pd.notna(row.get(prefix + "ci_low")):
            low, high = row[prefix + "ci_low"], row[prefix + "ci_high"]
            # a segment, not an error bar: a bootstrap interval of a statistic on a grid can leave its point outside
            ax.plot([low, high], [y, y], color=st["color"], ls="-" if filled else "--", lw=1.4, marker="|", ms=8)
            if row[prefix + "censored_fraction"] > (1 - row[prefix + "ci"]) / 2:  # the high end ran off the grid too
                ax.plot([high], [y], color=st["color"], marker=">", ms=5)
        recl = row[prefix + "recl"]
        ax.plot([recl], [y], color=st["color"], marker=st["marker"], ms=6, mfc=st["color"] if filled else "white", mew=1.4)
        if bool(row[prefix + "censored"]):
            ax.annotate("\u2265", (recl, y), xytext=(-9, 0), textcoords="offset points", ha="center", va="center", color=st["color"], fontsize=9)
        below = row.get("below_placebo")
        labels.append(f"{names[model]}: " + ("placebo-aware" if estimate == PLACEBO_AWARE else "paper's" + (" \u2020" if pd.notna(below) and bool(below) else "")))
    truth = rows[np.isclose(rows["r"], r) & rows["model"].str.startswith("oracle")]
    for _, row in truth.iterrows():
        ax.axvline(row["recl"], color=REFERENCE_COLORS["ideal"], ls="--", lw=1)
        left = row["recl"] > np.mean(ax.get_xlim())  # the words on the side with room for them
        ax.annotate(f"ideal model: {int(row['recl'])}", (row["recl"], len(drawn) - 0.5), xytext=(-3 if left else 3, 2), textcoords="offset points",
                    ha="right" if left else "left", va="bottom", fontsize=7)
    ax.set_yticks(range(len(drawn)), labels, fontsize=7)
    for tick, (model, _, _) in zip(ax.get_yticklabels(), drawn):
        tick.set_color(styles[model]["color"])
    ax.set_ylim(len(drawn) - 0.5, -0.5)
    ax.set_xlabel(context_axis(unit))
    dagger = "; \u2020: rests on a step below its placebo" if any(estimate == PLACEBO_AWARE for _, estimate, _ in drawn) else ""
    ax.set_title(f"RECL at r = {r:g} and its 95% bootstrap interval (\u2265, \u25b8: beyond the grid{dagger})", fontsize=8)


@themed
def figure3(table: Path, out: Path, title: str = "", intervals: Path | None = None, placebo: Path | None = None,
            r: float = 0.1, threshold: float = 0.01, legend: ModelLegend = ModelLegend(), unit: str = "token") -> list[Path]:
    """Figure 3 from figure3.csv: the unnormalised gain exp f(c,c) - exp f_i(c,c') of each step c -> c',
    plotted at c', one line per model. With ``intervals`` (table8.csv) a panel under the gains gives each
    model's RECL at ``r`` with its bootstrap interval, the placebo-aware RECL first where there is one (the
    reading the paper's RECL is checked against), then the paper's; with ``placebo`` (placebo.csv) a panel
    beside shows the relative gain at ``r`` and the placebo gain (the same step with the context's source
    shuffled), with RECL's ``threshold``: a real gain stands above both. Colours and names: ``legend``; context
    lengths in ``unit`` ('token' or 'word').
    Writes ``out`` (.png and .pdf) and its points (.csv).

    No threshold line on the unnormalised gains: RECL's threshold applies to the gain relative to the
    group's best loss at c (txlab.analysis.recl.relative_gain), which is what the placebo panel shows."""
    points = _read_points(table, "Figure 3")
    models = list(dict.fromkeys(points["model"]))
    styles = legend.styles(models)
    placebo_points = _read_optional(placebo)
    if placebo_points is not None:
        placebo_points = placebo_points[np.isclose(placebo_points["r"], r)]
    with_placebo = placebo_points is not None and not placebo_points.empty
    rows = _read_optional(intervals)
    with_intervals = rows is not None and "ci_low" in rows
    n_rows = len(_interval_rows(rows, models, r)) if with_intervals else 0
    fig = plt.figure(figsize=(6.2 * (1 + with_placebo) + 1.6, 4.2 + (0.22 * n_rows + 0.9) * with_intervals))
    grid = fig.add_gridspec(1 + with_intervals, 1 + with_placebo, height_ratios=[4.2, 0.22 * n_rows + 0.5][: 1 + with_intervals])
    ax = fig.add_subplot(grid[0, 0])
    names = legend.names(models)
    for model in models:
        own = points[points["model"] == model].sort_values("c_next")
        st = styles[model]
        ax.plot(own["c_next"], own["gain"], color=st["color"], ls=st["ls"], marker=st["marker"], ms=4, lw=1.4, label=names[model])
    ax.set(xlabel=context_axis(unit, "context length c' (step c \u2192 c')"),
           ylabel=f"gain exp f(c,c) \u2212 exp f(c,c')\n(perplexity per {unit} of the hardest targets)")
    scale_contexts(ax, points["c_next"])
    ax.set_title(f"unnormalised gain at r = {r:g}", fontsize=9)
    if with_intervals:
        below = fig.add_subplot(grid[1, 0], sharex=ax)
        _draw_recl_intervals(below, rows, models, styles, names, r, unit)
    if with_placebo:
        right = fig.add_subplot(grid[:, 1])
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
        right.set(xlabel=context_axis(unit, "context length c' (step c \u2192 c')"), ylabel="relative gain g(c, c') (fraction of exp f(c, c))")
        scale_contexts(right, placebo_points["c_next"])
        right.set_title(f"relative gain and its placebo at r = {r:g}", fontsize=9)
        right.legend(fontsize=7, loc="best", framealpha=0.9)
    if title:
        fig.suptitle(wrapped(title, 110 if with_placebo else 70), fontsize=10)
    if not with_placebo and not with_intervals:
        legend_outside(ax)
        fig.tight_layout()
    else:  # beside a panel the models' legend would cover it: under the figure instead
        handles, labels = ax.get_legend_handles_labels()
        fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, 1))
        fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=min(len(models), 4 if with_placebo else 2), frameon=False)
    return save_figure_with_points(fig, out, points).paths


@themed
def figure4(table: Path, out: Path, title: str = "", char_level: bool = False, intervals: Path | None = None,
            legend: ModelLegend = ModelLegend(), unit: str = "token", unigram: float | None = None) -> list[Path]:
    """Figure 4 from figure4.csv: perplexity on the shared targets against context length, one line
    per model (and the ideal model's on synthetic corpora, black and dashed), with its block-bootstrap
    interval as a band where ``intervals`` (:data:`FIGURE4_INTERVALS`) gives one; in bits per character
    (log2 of the perplexity) on a character corpus, as txlab reads character corpora everywhere. In words
    (``unit`` 'word') perplexity per word, and where figure4.csv has ``ppl_byte`` a panel beside it in bits per
    byte (log2 of the perplexity per UTF-8 byte), the scale on which members with different tokenizers compare,
    with its band where the intervals hold ``ppl_byte_low``. ``unigram``: the perplexity of the unigram baseline
    (txlab.analysis.table8.UnigramCheck), a grey line a member must be below to be read. Perplexity spanning more
    than a decade is drawn on a log axis, a doubling grid on a log2 one. Colours and names: ``legend``. Writes
    ``out`` (.png and .pdf) and its points (.csv)."""
    points = _read_points(table, "Figure 4")
    models = list(dict.fromkeys(points["model"]))
    styles = legend.styles(models)
    bounds = _read_optional(intervals)
    if bounds is not None:
        points = points.merge(bounds[[k for k in ("model", "c", "ppl_low", "ppl_high", "ppl_byte_low", "ppl_byte_high") if k in bounds]],
                              on=["model", "c"], how="left")
    if char_level:  # bits per character: log2 of the perplexity, and of its bounds
        points = points.assign(**{f"bpc{end}": np.log2(points[f"ppl{end}"]) for end in ("", "_low", "_high") if f"ppl{end}" in points})
    y = "bpc" if char_level else "ppl"
    per_byte = "ppl_byte" in points and points["ppl_byte"].notna().any()
    if per_byte:  # bits per byte: log2 of the perplexity per byte, and of its bounds
        points = points.assign(**{f"bpb{end}": np.log2(points[f"ppl_byte{end}"]) for end in ("", "_low", "_high") if f"ppl_byte{end}" in points})
    fig, axes = plt.subplots(1, 1 + per_byte, figsize=(7.6 + 4.4 * per_byte, 4.2), squeeze=False)
    ax = axes[0][0]
    names = legend.names(models)
    for model in models:
        own = points[points["model"] == model].sort_values("c")
        st = styles[model]
        for panel, column in zip(axes[0], (y, "bpb")):
            if not own[column].notna().any():
                continue
            panel.plot(own["c"], own[column], color=st["color"], ls=st["ls"], marker=st["marker"] or "o", ms=4, lw=1.4, label=names[model])
            if f"{column}_low" in own and own[f"{column}_low"].notna().any():
                panel.fill_between(own["c"], own[f"{column}_low"], own[f"{column}_high"], color=st["color"], alpha=CI_ALPHA, lw=0)
    if unigram is not None:
        ax.axhline(np.log2(unigram) if char_level else unigram, color=REFERENCE_COLORS["bound"], ls=":", lw=1.4,
                   label="unigram of the training split (a member above it is not read)")
    ylabel = "bits per character" if char_level else f"perplexity per {unit}"
    ax.set(xlabel=context_axis(unit), ylabel=ylabel)
    if not char_level:
        scale_perplexity(ax, [*points[[k for k in ("ppl", "ppl_low", "ppl_high") if k in points]].to_numpy().ravel(), *([unigram] if unigram else [])])
    for panel in axes[0]:
        scale_contexts(panel, points["c"])
    if per_byte:
        axes[0][1].set(xlabel=context_axis(unit), ylabel="bits per byte (the words' UTF-8 bytes)")
        axes[0][1].set_title("the same losses per byte of text", fontsize=9)
    legend_outside(axes[0][-1])  # right of the last panel: beside the per-byte panel it names the same lines
    if per_byte and unigram is not None:  # the unigram's line is in the first panel only: its legend goes there
        ax.legend(handles=ax.get_lines()[-1:], fontsize=7, loc="upper right")
    if title:
        band = ""
        if bounds is not None:
            band = "\nband: 95% block-bootstrap interval over the target blocks"
            if per_byte and "bpb_low" not in points:
                band += " (per word only: this group's tables hold no per-byte interval)"
        if per_byte:  # over both panels
            fig.suptitle(wrapped(title, 110) + band, fontsize=10)
        else:
            ax.set_title(wrapped(title) + band, fontsize=10)
    fig.tight_layout()
    return save_figure_with_points(fig, out, points).paths


@themed
def seed_spread_figure(rows: Sequence[SeedSpreadRow], out: Path, title: str = "", legend: ModelLegend = ModelLegend(),
                       unit: str = "token") -> list[Path]:
    """RECL over training seeds (txlab.analysis.table8.seed_rows): one panel per r, one line per model, a dot
    per seed (filled: the paper's RECL; open: the placebo-aware one; ▸: the walk ran off the grid, so at
    least there; the seeds a little apart in height, so equal readings stay countable) and a bar at the mean
    of the readings. Colours and names: ``legend``. Writes ``out`` (.png and .pdf) and its points (.csv)."""
    if not rows:
        raise TxlabError("no RECL rows over seeds to draw")
    points = pd.DataFrame([{"model": row.model, "r": row.r, "estimate": row.estimate, "seed": seed, "recl": value, "censored": censored}
                           for row in rows for seed, value, censored in zip(row.seeds, row.recl, row.censored)])
    models = list(dict.fromkeys(points["model"]))
    styles = legend.styles(models)
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
        ax.set_xlabel("RECL (words)" if unit == "word" else "RECL (tokens)")
        ax.grid(True, axis="x", alpha=0.3)
    names = legend.names(models)
    axes[0][0].set_yticks(range(len(models)), [names[m] for m in models])
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
