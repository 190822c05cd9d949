"""Table 9 as a figure, from the table `txlab speed` wrote: the slowdown of the vanilla Transformer
against attention length beside the paper's, and each method's tokens/s. Files only: no torch import.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from txlab.analysis.figures import save_figure_with_points
from txlab.errors import TxlabError
from txlab.fileio import read_csv
from txlab.style import REFERENCE_COLORS, themed


@themed
def table9_figure(table: Path, out: Path) -> list[Path]:
    """Table 9 as a figure, from the CSV `txlab speed` wrote: the slowdown against attention length
    (ours with the range of its rounds' own slowdowns where the table has them, the paper's, and the FLOP ratio that
    equal GFLOP/s on both sides would give; log scale) and each method's tokens/s (today's baselines too, in tables that have them). Writes ``out`` (.png and .pdf) and the plotted columns as a CSV beside it.

    Drawn with matplotlib under the shared theme: each point carries its value as a label, which
    seaborn's plotting functions do not place. Ours are labelled above their points and the paper's
    below, so values that nearly coincide (1,874x against 1,796x) never overlap; a table timed while
    other processes took more than :data:`txlab.timing.CONTENDED_SHARE` of the CPU says so under the title."""
    from txlab.timing import contention_note  # txlab.timing loads torch: only when a table is drawn

    path = Path(table)
    if not path.is_file():
        raise TxlabError(f"no speed table at {path}: run `txlab speed` first")
    rows = read_csv(path, "run the `txlab speed` that wrote it again", ("model", "size", "device", "device_name"),
                    ("attn_len", "slowdown", "flop_ratio", "xl_tokens_per_s", "vanilla_tokens_per_s", "threads", "batch_size"),
                    ("paper_slowdown", "strided_tokens_per_s", "rolling_tokens_per_s", "stride")).sort_values("attn_len")
    first = rows.iloc[0]
    fig, (slow, rate) = plt.subplots(1, 2, figsize=(11, 4.8))
    slow.plot(rows["attn_len"], rows["flop_ratio"], ls=":", color=REFERENCE_COLORS["bound"], label="FLOP ratio (equal GFLOP/s on both sides)")
    paper = rows.dropna(subset=["paper_slowdown"])
    if not paper.empty:
        slow.plot(paper["attn_len"], paper["paper_slowdown"], marker="s", ls="--", color=REFERENCE_COLORS["paper"], label="Dai et al. (2019), one GPU")
    threads = f"{int(first['threads'])} thread" + ("s" if int(first["threads"]) != 1 else "")
    on = first["device_name"] if first["device"] != "cpu" else f"{first['device_name']}, {threads}"
    slow.plot(rows["attn_len"], rows["slowdown"], marker="o", label=f"txlab: {first['model']} at {first['size']} size on {on}")
    # the rounds and their spread (txlab.measure.speed.SPREAD_COLUMNS); tables timed before the rounds alternated have none
    spread = [column for column in rows if column == "rounds" or column.rsplit("_", 1)[-1] in ("min", "median", "max")]
    if spread:  # the range of the rounds' own slowdowns (the overall one, a ratio of medians over all calls, may lie outside it)
        slow.vlines(rows["attn_len"], rows["slowdown_min"], rows["slowdown_max"], color=slow.get_lines()[-1].get_color(), alpha=0.5, lw=4,
                    label="txlab: each timed round's own slowdown, min to max")
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
    points = rows[["attn_len", "slowdown", "paper_slowdown", "flop_ratio", "xl_tokens_per_s", "vanilla_tokens_per_s", *baselines, *spread]]
    return save_figure_with_points(fig, out, points, title).paths
