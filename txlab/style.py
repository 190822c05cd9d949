"""The one look every txlab figure shares: seaborn's whitegrid theme at its paper scale, the
colorblind-safe palette for lines and bars, and one sequential colormap for heatmaps.

Figure functions draw and save under :func:`themed`, so the look applies to txlab's figures only and
leaves the matplotlib settings of a program that imports txlab as they were.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import Colormap  # noqa: E402

PALETTE = "colorblind"
"""Seaborn palette of lines and bars: distinguishable with the common colour-vision deficiencies."""
SEQUENTIAL = "mako_r"
"""Seaborn colormap of heatmaps (light = low, dark = high): perceptually uniform, and it prints in grey."""
REFERENCE_COLORS = {"ideal": "black", "paper": "0.45", "bound": "0.65"}
"""Lines that are not a txlab model: the ideal model, the paper's numbers, an analytic bound."""
CI_ALPHA = 0.2
"""Opacity of a confidence band drawn around its line."""

Draw = TypeVar("Draw", bound=Callable[..., Any])


def theme() -> dict[str, Any]:
    """The matplotlib settings of the look (seaborn's whitegrid style and paper context, the palette)."""
    return {**sns.axes_style("whitegrid"), **sns.plotting_context("paper", font_scale=1.15),
            "axes.prop_cycle": matplotlib.cycler(color=sns.color_palette(PALETTE)), "legend.frameon": False,
            "figure.dpi": 100, "savefig.dpi": 150}


def themed(draw: Draw) -> Draw:
    """Run a figure function (drawing and saving) under :func:`theme`."""

    @functools.wraps(draw)
    def inside_theme(*args: Any, **kwargs: Any) -> Any:
        with plt.rc_context(theme()):
            return draw(*args, **kwargs)

    return inside_theme  # type: ignore[return-value]


def colors(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours of the palette (it repeats past its ten)."""
    return sns.color_palette(PALETTE, n)


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
"""One marker per line, so that lines of near colours (and a print in grey) still tell apart."""


def distinct_colors(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours that differ in hue: the palette's for up to six lines; past six its light and dark
    twins (blue and sky blue, orange and vermillion) read as one colour, so matplotlib's tab10 instead."""
    return colors(n) if n <= 6 else sns.color_palette("tab10", n)


def identity_colors() -> list[tuple[float, float, float]]:
    """The palette a model's colour is hashed into, so it keeps it across figures (txlab.analysis.figures.ModelLegend):
    tab10's nine hues without its grey, which would read as a reference line (:data:`REFERENCE_COLORS`)."""
    return [color for i, color in enumerate(sns.color_palette("tab10", 10)) if i != 7]


def sequential_cmap() -> Colormap:
    return sns.color_palette(SEQUENTIAL, as_cmap=True)
