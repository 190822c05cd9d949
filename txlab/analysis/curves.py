"""Learning curves from run directories: training and validation loss against training tokens and
wall time, one colour per configuration, seeds of one configuration as a band. Files only: no torch import.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from txlab.analysis.figures import FigureFiles, mean_intervals, save_figure_with_points
from txlab.analysis.run_logs import read_metrics, seed_group_labels
from txlab.errors import TxlabError
from txlab.style import CI_ALPHA, distinct_colors, themed


@themed
def learning_curves(run_dirs: list[Path], out: Path, title: str = "") -> FigureFiles:
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
