"""What runs learned on a synthetic corpus, by token role: copied-value loss against copy distance and
the loss of every role beside the ideal model's (a group of runs), and each role's validation loss
as training went on. Files only: no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from txlab.analysis.figures import FigureFiles, save_figure_with_points, wrapped
from txlab.analysis.run_logs import read_metrics, run_label
from txlab.errors import TxlabError
from txlab.style import MARKERS, REFERENCE_COLORS, distinct_colors, themed


@themed
def role_figure(runs: Sequence[Mapping[str, Any]], out: Path, title: str = "") -> FigureFiles:
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
        fig.suptitle(wrapped(title, 110), fontsize=10)
    return save_figure_with_points(fig, out, points)


@themed
def role_curves(run_dirs: list[Path], out: Path, title: str = "") -> FigureFiles:
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
