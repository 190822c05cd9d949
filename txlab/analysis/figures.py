"""What every figure of txlab shares: how it is saved (PNG and PDF, with its plotted numbers as a CSV),
the file stem of a figure of runs, how a model is named in a legend or a title, one colour and marker
per model, wrapped titles and the band of a mean over seeds. Files only: no torch import.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from txlab.fileio import write_atomic, write_text_atomic  # noqa: E402
from txlab.style import MARKERS, REFERENCE_COLORS, identity_colors  # noqa: E402
from txlab.tables import count_label, csv_text  # noqa: E402


@dataclass(frozen=True)
class FigureFiles:
    """A figure as written: its image files and the table of the numbers it plots."""

    figures: list[Path]
    """The figure as PNG, then as PDF."""
    table: Path
    """The CSV of every plotted number, beside the figure."""

    @property
    def paths(self) -> list[Path]:
        """Every file written: the figures, then the table."""
        return [*self.figures, self.table]


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


def save_figure_with_points(fig: plt.Figure, out: Path, points: pd.DataFrame, title: str = "") -> FigureFiles:
    """Write a figure (PNG and PDF) and the points it plots as a CSV beside it, titled if ``title``."""
    if title:
        fig.suptitle(title)
    written = save_figure(fig, out)
    csv = Path(out).with_suffix(".csv")
    write_text_atomic(csv, csv_text(points))
    return FigureFiles(written, csv)


def runs_stem(run_dirs: list[Path]) -> str:
    """A file stem naming the runs a figure draws: their folder names joined by '+', shortened with a
    hash of their paths when that would be long, so a figure of other runs gets another file."""
    names = [Path(run_dir).resolve().name for run_dir in run_dirs]
    joined = "+".join(names)
    if len(joined) <= 100:
        return joined
    digest = hashlib.sha256("\n".join(str(Path(run_dir).resolve()) for run_dir in run_dirs).encode()).hexdigest()[:8]
    return f"{names[0]}+{len(names) - 1}-more-{digest}"


MODEL_NAMES = {
    "xl151m": "Transformer-XL", "xl128m": "Transformer-XL", "xl128m-shaw": "Transformer-XL, Shaw et al. encoding",
    "xl128m-norecur": "Transformer-XL without recurrence", "transformer128m": "vanilla Transformer",
    "qrnn": "QRNN", "lstm": "LSTM", "gpt2": "GPT-2", "llama": "Llama",
}
"""How figures name a preset: its architecture in words (a preset's name carries its paper size, which
a cpu or tiny size does not have)."""


def _preset_key(label: str) -> str | None:
    """The preset a label is or starts ('xl128m-shaw-cpu-recall-small-seed0' -> 'xl128m-shaw'); None for others."""
    return label if label in MODEL_NAMES else next((k for k in sorted(MODEL_NAMES, key=len, reverse=True) if label.startswith(k + "-")), None)


def model_name(label: str) -> str:
    """A group member's legend entry: the preset's architecture in words with its label, e.g.
    'Transformer-XL (xl151m)', 'QRNN'; a label no preset starts (a run folder, hf:PATH) as it is."""
    key = _preset_key(label)
    if key is None:
        return label
    # a run folder's label repeats the size and corpus the title already gives: the preset says which
    return MODEL_NAMES[key] if MODEL_NAMES[key].lower() == key else f"{MODEL_NAMES[key]} ({key})"


def models_in_words(names: list[str], verbatim: Collection[str] = ()) -> str:
    """A figure title's models: 'Transformer-XL, QRNN and LSTM' from presets, run folders or hf: paths
    (each architecture once), '4 models' past three, where the legend names each. A name in ``verbatim``
    (a display name the user gave) is given as it is."""
    words = []
    for name in names:
        if name in verbatim:
            words.append(name)
            continue
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
    return f"{model_name(name)}, {count_label(params)} parameters"


NOT_READ = "not read: loses to a unigram"
"""What a legend adds to a member that does not beat the unigram baseline (txlab.analysis.table8.UnigramCheck)."""


@dataclass(frozen=True)
class ModelLegend:
    """How the figures show their models: one colour and marker per model, the same in every figure that draws it,
    in one study or in separate ones, and each model's name in a legend."""

    order: tuple[str, ...] = ()
    """The study's models (txlab.drivers.recl.groups.Group.model_order): where two of them would take one colour, the
    earlier keeps it. A model not in it comes after them, in the order its figure lists it."""
    verbatim: frozenset[str] = frozenset()
    """Display names the user gave: legends show them as they are, other names through :func:`model_name`."""
    not_read: frozenset[str] = frozenset()
    """Members that do not beat the unigram baseline: their legend entry says they are not read."""
    colors: Mapping[str, int] = field(default_factory=dict)
    """Model -> its slot in the palette (txlab.style.identity_colors, 0-8), overriding the one its name hashes to."""

    def names(self, models: Sequence[str]) -> dict[str, str]:
        """Each model's legend entry in a figure of ``models``: a given display name as it is, else
        :func:`model_name`; where that names two models alike (runs of one preset, 'lstm-s0' and 'lstm-s1'),
        their architecture with their label, 'LSTM (lstm-s0)'; a member not read says so."""
        names = {m: m if m in self.verbatim else model_name(m) for m in models}
        shared = {name for name in names.values() if list(names.values()).count(name) > 1}
        return {m: (f"{MODEL_NAMES[_preset_key(m)]} ({m})" if name in shared and m not in self.verbatim and _preset_key(m) else name)
                + (f" ({NOT_READ})" if m in self.not_read else "") for m, name in names.items()}

    def styles(self, models: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Colour, line style and marker of each of ``models``: the palette's slot its name hashes to
        (:func:`identity_slot`; :attr:`colors` overrides it), so a model keeps its colour in separate groups and
        studies; where that slot is taken by a model earlier in :attr:`order`, the next free one. The oracle (ground
        truth) in the reference black, dashed, so it never reads as a model's colour."""
        ranked = [m for m in dict.fromkeys([*self.order, *models]) if not m.startswith("oracle")]
        palette = identity_colors()
        markers = [m for m in MARKERS if m not in "<>"]  # an arrow marks a reading beyond the grid in Figure 3's RECL panel
        taken: dict[str, int] = {m: self.colors[m] % len(palette) for m in ranked if m in self.colors}
        for model in ranked:
            if model not in taken:
                slot = identity_slot(model, len(palette))
                while slot in taken.values() and len(taken) < len(palette):
                    slot = (slot + 1) % len(palette)
                taken[model] = slot
        styles = {}
        for model in models:
            if model.startswith("oracle"):
                styles[model] = {"color": REFERENCE_COLORS["ideal"], "ls": "--", "marker": None}
            else:
                styles[model] = {"color": palette[taken[model]], "ls": "-", "marker": markers[taken[model] % len(markers)]}
        return styles


def identity_slot(model: str, slots: int) -> int:
    """The palette slot a model's name hashes to (sha256, stable across processes and machines, unlike hash())."""
    return int.from_bytes(hashlib.sha256(model.encode("utf-8")).digest()[:4], "big") % slots


def wrapped(title: str, width: int = 70) -> str:
    """A title's lines wrapped to the figure's width (a long corpus description ran past the edges)."""
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


def legend_outside(ax: plt.Axes) -> None:
    """The legend right of the plot, where it covers no line."""
    ax.legend(fontsize=8, title=None, loc="upper left", bbox_to_anchor=(1.02, 1.0))


def mean_intervals(frame: pd.DataFrame, keys: list[str], value: str, level: float = 0.95) -> pd.DataFrame:
    """Per group of ``keys``: the number of values n, their mean and its t-interval at ``level``
    (NaN bounds for n = 1): keys..., n, mean, ci_low, ci_high."""
    table = frame.groupby(keys, sort=False)[value].agg(n="count", mean="mean", sd="std").reset_index()
    half = stats.t.ppf(0.5 + level / 2, table["n"] - 1) * table["sd"] / np.sqrt(table["n"])
    return table.assign(ci_low=table["mean"] - half, ci_high=table["mean"] + half).drop(columns="sd")
