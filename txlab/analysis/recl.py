"""Relative effective context length (RECL, Dai et al. 2019, Appendix C) and its figures: pure numpy.

Everything here is a pure function of a loss table, so it runs without torch (it is not imported)
and is checked against hand-computed numbers in tests/test_recl.py.

The loss table
--------------
``losses[i, j, t]`` = l_i(c_j, t) = -ln P_i(x_t | the c_j tokens before x_t, fresh state), in nats,
for model i of a group (``models[i]``), context length c_j = ``grid[j]`` (ascending) and target
position t (ascending positions in the token stream; txlab.measure.losses collects such tables). All models
of a group must be scored on the same targets of the same token stream.

Definitions (docs/recl.md gives the reasons; r is the fraction of hardest positions kept)
-----------------------------------------------------------------------------------------
- Baseline: b(c, t) = min_i l_i(c, t), the best loss of the group at context c.
- T(c): the ceil(r * n) positions with the largest b(c, t). Ties are broken by position, lower
  position first (a stable sort), so T(c) is a deterministic function of the table. The same T(c)
  serves f(c, c), f_i(c, c') and every model.
- Relative loss: f_i(c, c') = mean over T(c) of min(b(c, t), l_i(c', t)). Since min(b, l_i(c, t)) = b,
  f_i(c, c) = f(c, c) = mean of b over T(c) for every model.
- Relative gain: g_i(c, c') = (exp f(c, c) - exp f_i(c, c')) / exp f(c, c) >= 0.
- Walk: from c = c0 (the first grid value unless given), step to the next grid value c'; stop at the
  first step with g_i(c, c') < threshold (0.01) and return c. If the grid ends first, return the
  last grid value flagged as censored (shown ">= c_max").

Models with a hard maximum context L_max (the vanilla Transformer): l(c, t) = l(min(c, L_max), t),
and the reported RECL is min(RECL, L_max) -- this is how the paper's 128 arises. See
:func:`cap_losses` for how a table is made to honour the cap.

Placebo-aware RECL (not the paper's; only when placebo losses are given)
------------------------------------------------------------------------
Each step's placebo gain p_i(c, c') (:func:`placebo_gain`) is what the min() makes of extra context
that carries no information. The placebo-aware walk (:func:`placebo_aware_walk`) is the paper's walk
on g_i(c, c') - p_i(c, c'): from the same c0, with the same threshold, the same strict comparison and
the same cap, it stops at the first step whose gain does not beat its placebo gain by the threshold.
The comparison g - p < threshold is exact for the two float64 gains (their rounded difference could
step over the threshold). With no placebo gain (p = 0) it is the paper's RECL exactly; otherwise it
is never larger. A RECL is flagged ``below_placebo`` when the placebo-aware point estimate is smaller,
i.e. when a step it rests on did not beat its placebo gain by the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from txlab.errors import TxlabError

DEFAULT_GRID: tuple[int, ...] = tuple(range(100, 1001, 100))
"""The paper's context lengths: c0 = 100, step 100, up to 1000."""
DEFAULT_THRESHOLD = 0.01
"""A step whose relative gain is below this ends the walk (the paper's 1%)."""
DEFAULT_RS: tuple[float, ...] = (0.1, 0.5, 1.0)
"""The fractions of hardest positions of the paper's Table 8."""


@dataclass(frozen=True)
class ReclResult:
    """RECL of one model of a group at one r."""

    model: str
    r: float
    recl: int
    """The context where the walk stopped, capped at the model's maximum context."""
    censored: bool
    """True when the walk ran off the end of the grid: the RECL is at least ``recl``."""
    gains: tuple[float, ...]
    """Relative gain g(c_j, c_{j+1}) of every grid step (walked or not), in grid order."""
    placebo_recl: int | None = None
    """The placebo-aware RECL (None without placebo losses)."""
    placebo_censored: bool | None = None
    placebo_gains: tuple[float, ...] | None = None
    """Placebo gain p(c_j, c_{j+1}) of every grid step, in grid order."""

    @property
    def label(self) -> str:
        return recl_label(self.recl, self.censored)

    @property
    def below_placebo(self) -> bool | None:
        """True when a step this RECL rests on did not beat its placebo gain by the threshold."""
        return None if self.placebo_recl is None else self.placebo_recl < self.recl


@dataclass(frozen=True)
class ReclInterval:
    """A block-bootstrap confidence interval around a RECL point estimate."""

    model: str
    r: float
    recl: int
    censored: bool
    low: int
    high: int
    censored_fraction: float
    """Share of resamples whose walk ran off the grid (then ``high`` is only a lower bound)."""
    placebo: ReclInterval | None = None
    """The same for the placebo-aware RECL, when placebo losses are given."""

    @property
    def below_placebo(self) -> bool | None:
        """True when a step the point estimate rests on did not beat its placebo gain by the threshold."""
        return None if self.placebo is None else self.placebo.recl < self.recl


def recl_label(recl: int, censored: bool) -> str:
    """How a table shows a RECL: '900', or '>= 1000' when the walk ran off the grid."""
    return f">= {recl}" if censored else str(recl)


# --------------------------------------------------------------------------------------------------
# The metric, piece by piece


def baseline(losses: np.ndarray) -> np.ndarray:
    """b = min over models (axis 0): [M, ...] -> [...]."""
    return np.min(losses, axis=0)


def n_selected(r: float, n: int) -> int:
    """ceil(r * n) for 0 < r <= 1, without float surprises: 0.07 * 100 is 7.000000000000001 and 0.29 * 100
    is 28.999999999999996 in floating point, so r * n is rounded to 9 decimals before the ceiling."""
    if not 0 < r <= 1:
        raise TxlabError(f"r must lie in (0, 1], got {r}")
    return max(1, math.ceil(round(r * n, 9)))


def top_r_positions(baseline_c: np.ndarray, r: float) -> np.ndarray:
    """Indices (ascending) of the ceil(r * n) largest values of baseline_c [n]; ties: lower index first."""
    n = baseline_c.shape[-1]
    k = n_selected(r, n)
    if k == n:
        return np.arange(n)
    # a partition finds the k-th largest value in linear time (a full stable sort took 90% of a bootstrap);
    # everything above it is in, and of the values equal to it the lowest positions fill the remaining places
    kth = np.partition(baseline_c, n - k)[n - k]
    above = np.flatnonzero(baseline_c > kth)
    ties = np.flatnonzero(baseline_c == kth)[: k - len(above)]
    return np.sort(np.concatenate([above, ties]))


def relative_loss(baseline_c: np.ndarray, losses_c2: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """f(c, c') = mean over ``positions`` of min(b(c, t), l(c', t)): b [T], l [..., T] -> [...] (float64)."""
    b = np.asarray(baseline_c[positions], dtype=np.float64)
    return np.minimum(b, np.asarray(losses_c2[..., positions], dtype=np.float64)).mean(axis=-1)


def relative_gain(baseline_c: np.ndarray, losses_c2: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """g(c, c') = (exp f(c, c) - exp f(c, c')) / exp f(c, c): b [T], l [..., T] -> [...], in [0, 1).

    Computed as 1 - exp(f(c, c') - f(c, c)) with f(c, c') - f(c, c) = mean of min(l(c', t) - b(c, t), 0)
    in float64: every term is <= 0, so g is never negative and is exactly 0 when no position of T(c)
    improves (two separate float32 means of 10^4 losses would differ by ~1e-4 on their own).
    """
    b = np.asarray(baseline_c[positions], dtype=np.float64)
    l = np.asarray(losses_c2[..., positions], dtype=np.float64)
    deficit = np.minimum(l - b, 0.0).mean(axis=-1)  # f(c, c') - f(c, c) <= 0
    return 0.0 - np.expm1(deficit)  # accurate for small gains; "0.0 -" turns -0.0 into 0.0


def step_gains(losses: np.ndarray, r: float) -> np.ndarray:
    """Relative gain of every model at every grid step c_j -> c_{j+1}: [M, G, T] -> [M, G-1]."""
    n_models, n_grid, _ = losses.shape
    gains = np.empty((n_models, n_grid - 1))
    for j in range(n_grid - 1):
        b = baseline(losses[:, j])  # [T]
        gains[:, j] = relative_gain(b, losses[:, j + 1], top_r_positions(b, r))
    return gains


def walk(gains: Sequence[float], grid: Sequence[int], threshold: float = DEFAULT_THRESHOLD, start: int = 0) -> tuple[int, bool]:
    """(c, censored): the first grid value from ``grid[start]`` whose step gain is below threshold."""
    for j in range(start, len(grid) - 1):
        if gains[j] < threshold:
            return int(grid[j]), False
    return int(grid[-1]), True


def falls_short(gain: float, placebo_gain: float, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """gain - placebo_gain < threshold, decided exactly for the two float64 numbers.

    Their float difference is rounded (by up to half a unit of 0.01's last place, ~9e-19), which could
    step over the threshold. Rounding to nearest is monotone and the threshold is a float, so a
    rounded difference below (above) the threshold has the exact one below (above) it too; only a
    rounded difference equal to the threshold needs the exact rational arithmetic. The gains
    themselves carry the rounding of their float64 mean and expm1 (a relative error of order 1e-15 at
    most), which no comparison can undo: the walk reads the gains it reports exactly as they are.
    """
    difference = float(gain) - float(placebo_gain)
    if difference != threshold:
        return difference < threshold
    return Fraction(float(gain)) - Fraction(float(placebo_gain)) < Fraction(float(threshold))


def capped(c: int, censored: bool, cap: int | None) -> tuple[int, bool]:
    """A walk's (c, censored) for a model that can use at most ``cap`` tokens: min(c, cap), exact.

    A walk that ran off the grid's end at or beyond the cap is not censored: it cannot have gone further.
    """
    if cap is not None and cap <= c:
        return int(cap), False
    return int(c), censored


def placebo_aware_walk(
    gains: Sequence[float], placebo_gains: Sequence[float], grid: Sequence[int], threshold: float = DEFAULT_THRESHOLD,
    start: int = 0, cap: int | None = None,
) -> tuple[int, bool]:
    """(c, censored) of the placebo-aware walk, capped: the paper's walk from ``grid[start]`` on
    gain - placebo gain, stopping at the first step where it falls below ``threshold`` (:func:`falls_short`)."""
    for j in range(start, len(grid) - 1):
        if falls_short(gains[j], placebo_gains[j], threshold):
            return capped(int(grid[j]), False, cap)
    return capped(int(grid[-1]), True, cap)


def cap_losses(losses_i: np.ndarray, grid: Sequence[int], cap: int) -> np.ndarray:
    """The [G, T] table of a model that can use at most ``cap`` tokens: column c holds l(min(c, cap), t).

    - ``cap`` in the grid: every column c > cap becomes a copy of column ``cap`` (exact for any table).
    - ``cap`` not in the grid: no column holds l(cap, t), so the table must already carry it in every
      column c > cap, as txlab.measure.losses stores it for a model with ``max_context``; the table is
      returned unchanged, and one whose columns beyond the cap differ is refused. (Substituting the
      largest grid value below the cap would turn the paper's 128 into 100.)
    """
    grid = np.asarray(grid)
    beyond = np.flatnonzero(grid > cap)
    if len(beyond) == 0:
        return losses_i
    if cap in grid:
        capped = losses_i.copy()
        capped[beyond] = losses_i[int(np.flatnonzero(grid == cap)[0])]
        return capped
    if not all(np.array_equal(losses_i[beyond[0]], losses_i[j]) for j in beyond[1:]):
        raise TxlabError(
            f"the model's maximum context {cap} is not in the grid and its losses beyond it differ between "
            f"context lengths: put {cap} in the grid, or collect the losses with txlab.measure.losses (which stores "
            f"l(min(c, {cap}), t) in every column)"
        )
    return losses_i


# --------------------------------------------------------------------------------------------------
# RECL of a group


def check_grid(grid: Sequence[int], spec: object = None) -> tuple[int, ...]:
    """The grid as a tuple of ints, refused unless it holds at least two strictly ascending positive lengths
    (``spec``: the text it was parsed from, for the message). The one check of a grid, wherever it comes from."""
    grid = tuple(int(c) for c in grid)
    if len(grid) < 2 or grid[0] < 1 or any(b <= a for a, b in zip(grid, grid[1:])):
        what = f"the grid {spec!r}" if spec is not None else "the context grid"
        raise TxlabError(f"{what} must hold at least two strictly ascending positive lengths, got {list(grid)}")
    return grid


def prepare_table(losses: np.ndarray, grid: Sequence[int], models: Sequence[str], caps: Mapping[str, int | None] | None = None) -> np.ndarray:
    """Check a loss table [M, G, T] against ``grid`` and ``models`` and apply the caps; float64 copy."""
    grid = check_grid(grid)
    table = np.array(losses, dtype=np.float64)
    expected = (len(models), len(grid))
    if table.ndim != 3 or table.shape[:2] != expected or table.shape[2] == 0:
        raise TxlabError(f"a loss table must be [models, grid, targets] = [{expected[0]}, {expected[1]}, T > 0], got {list(table.shape)}")
    if len(set(models)) != len(models):
        raise TxlabError(f"model names must be unique, got {list(models)}")
    if not np.isfinite(table).all():
        raise TxlabError("the loss table holds NaN or infinite values")
    unknown = set(caps or {}) - set(models)
    if unknown:
        raise TxlabError(f"caps given for models not in the group: {sorted(unknown)}")
    for i, name in enumerate(models):
        cap = (caps or {}).get(name)
        if cap is not None:
            table[i] = cap_losses(table[i], grid, cap)
    return table


def _start_index(grid: tuple[int, ...], c0: int | None) -> int:
    if c0 is None:
        return 0
    if c0 not in grid[:-1]:
        raise TxlabError(f"c0={c0} must be a grid value with a next one; grid is {list(grid)}")
    return grid.index(c0)


def _check_placebo(placebo: np.ndarray | None, table: np.ndarray) -> np.ndarray | None:
    """The placebo table [M, G-1, T] as float64, checked against the loss table [M, G, T]."""
    if placebo is None:
        return None
    placebo = np.array(placebo, dtype=np.float64)
    n_models, n_grid, n_targets = table.shape
    if placebo.shape != (n_models, n_grid - 1, n_targets):
        raise TxlabError(f"placebo losses must be [models, grid steps, targets] = {[n_models, n_grid - 1, n_targets]}, got {list(placebo.shape)}")
    if not np.isfinite(placebo).all():
        raise TxlabError("the placebo table holds NaN or infinite values")
    return placebo


def _walk_models(table, grid, models, r, threshold, caps, start, placebo=None) -> list[ReclResult]:
    gains = step_gains(table, r)  # [M, G-1]
    placebo_gains = None if placebo is None else placebo_step_gains(table, placebo, r)  # [M, G-1]
    results = []
    for i, name in enumerate(models):
        cap = (caps or {}).get(name)
        c, censored = capped(*walk(gains[i], grid, threshold, start), cap)  # RECL = min(RECL, L_max)
        beyond_placebo = {}
        if placebo_gains is not None:
            placebo_c, placebo_censored = placebo_aware_walk(gains[i], placebo_gains[i], grid, threshold, start, cap)
            beyond_placebo = {"placebo_recl": placebo_c, "placebo_censored": placebo_censored,
                              "placebo_gains": tuple(float(g) for g in placebo_gains[i])}
        results.append(ReclResult(name, r, c, censored, tuple(float(g) for g in gains[i]), **beyond_placebo))
    return results


def recl(
    losses: np.ndarray,
    grid: Sequence[int],
    models: Sequence[str],
    r: float,
    threshold: float = DEFAULT_THRESHOLD,
    caps: Mapping[str, int | None] | None = None,
    c0: int | None = None,
    placebo: np.ndarray | None = None,
) -> list[ReclResult]:
    """RECL of every model of the group (losses [M, G, T]) at one r, in ``models`` order.

    ``caps``: model name -> maximum context (None or absent = unbounded); see :func:`cap_losses`.
    ``c0``: where the walk starts (default the first grid value).
    ``placebo``: placebo losses [M, G-1, T] (txlab.measure.losses); adds the placebo-aware RECL.
    """
    grid = check_grid(grid)
    table = prepare_table(losses, grid, models, caps)
    return _walk_models(table, grid, list(models), r, threshold, caps, _start_index(grid, c0), _check_placebo(placebo, table))


def recl_table(
    losses: np.ndarray,
    grid: Sequence[int],
    models: Sequence[str],
    rs: Sequence[float] = DEFAULT_RS,
    threshold: float = DEFAULT_THRESHOLD,
    caps: Mapping[str, int | None] | None = None,
    c0: int | None = None,
    placebo: np.ndarray | None = None,
) -> list[ReclResult]:
    """:func:`recl` for each r (the paper's Table 8 rows): r-major, then ``models`` order."""
    return [result for r in rs for result in recl(losses, grid, models, r, threshold, caps, c0, placebo)]


def _check_resampling(n_targets: int, block_size: int, n_boot: int, ci: float) -> int:
    """The number of blocks of ``block_size`` the targets split into, once the bootstrap's settings are checked."""
    if block_size < 1 or n_targets % block_size:
        raise TxlabError(f"{n_targets} targets do not split into blocks of {block_size}")
    if not 0 < ci < 1 or n_boot < 1:
        raise TxlabError(f"need 0 < ci < 1 and n_boot >= 1, got ci={ci}, n_boot={n_boot}")
    return n_targets // block_size


def bootstrap_recl(
    losses: np.ndarray,
    grid: Sequence[int],
    models: Sequence[str],
    r: float,
    block_size: int,
    n_boot: int = 200,
    seed: int = 0,
    ci: float = 0.95,
    threshold: float = DEFAULT_THRESHOLD,
    caps: Mapping[str, int | None] | None = None,
    c0: int | None = None,
    placebo: np.ndarray | None = None,
) -> list[ReclInterval]:
    """Block-bootstrap confidence interval of every model's RECL (and placebo-aware RECL) at one r.

    The targets are cut into contiguous blocks of ``block_size`` positions (the collection's target
    blocks: neighbouring losses are correlated, so resampling single positions would understate the
    spread). Each resample draws as many blocks with replacement, recomputes the whole group's RECL
    (baseline and T(c) included) and the interval is the (1-ci)/2 and (1+ci)/2 quantiles, taken as
    grid values on the conservative side (lower for the low end, higher for the high end). Placebo
    losses [M, G-1, T] are resampled with the same blocks.
    """
    grid = check_grid(grid)
    models = list(models)
    table = prepare_table(losses, grid, models, caps)
    placebo = _check_placebo(placebo, table)
    n_models, n_grid, n_targets = table.shape
    start = _start_index(grid, c0)
    n_blocks = _check_resampling(n_targets, block_size, n_boot, ci)
    blocks = table.reshape(n_models, n_grid, n_blocks, block_size)  # [M, G, blocks, block_size]
    placebo_blocks = None if placebo is None else placebo.reshape(n_models, n_grid - 1, n_blocks, block_size)
    rng = np.random.default_rng(seed)
    # [resample, model, paper / placebo-aware]
    samples = np.zeros((n_boot, n_models, 2), dtype=np.int64)
    censored = np.zeros((n_boot, n_models, 2), dtype=bool)
    for k in range(n_boot):
        chosen = rng.integers(0, n_blocks, n_blocks)
        picked = blocks[:, :, chosen].reshape(n_models, n_grid, n_targets)  # [M, G, T]
        picked_placebo = None if placebo is None else placebo_blocks[:, :, chosen].reshape(n_models, n_grid - 1, n_targets)
        for i, result in enumerate(_walk_models(picked, grid, models, r, threshold, caps, start, picked_placebo)):
            samples[k, i, 0], censored[k, i, 0] = result.recl, result.censored
            if placebo is not None:
                samples[k, i, 1], censored[k, i, 1] = result.placebo_recl, result.placebo_censored
    alpha = (1 - ci) / 2
    low = np.quantile(samples, alpha, axis=0, method="lower")  # [M, 2]
    high = np.quantile(samples, 1 - alpha, axis=0, method="higher")
    point = _walk_models(table, grid, models, r, threshold, caps, start, placebo)
    intervals = []
    for i, p in enumerate(point):
        beyond_placebo = None
        if placebo is not None:
            beyond_placebo = ReclInterval(p.model, r, p.placebo_recl, p.placebo_censored, int(low[i, 1]), int(high[i, 1]),
                                          float(censored[:, i, 1].mean()))
        intervals.append(ReclInterval(p.model, r, p.recl, p.censored, int(low[i, 0]), int(high[i, 0]), float(censored[:, i, 0].mean()),
                                      beyond_placebo))
    return intervals


def placebo_gain(losses_c: np.ndarray, placebo_c2: np.ndarray, r: float) -> np.ndarray:
    """The relative gain of a step c -> c' whose extra context was replaced by a distant span: [M].

    losses_c [M, T]: the group's true losses at c (they fix b(c, t) and T(c)); placebo_c2 [M, T]:
    each model's loss at c' with x_{t-c'} .. x_{t-c-1} swapped for unrelated tokens (see
    txlab.measure.losses). The extra tokens carry no information about x_t, so a gain well above 0 is noise
    turned into "gain" by the min(), or a model rewarding sheer length.
    """
    b = baseline(losses_c)  # [T]
    return relative_gain(b, placebo_c2, top_r_positions(b, r))


def placebo_step_gains(losses: np.ndarray, placebo: np.ndarray, r: float) -> np.ndarray:
    """:func:`placebo_gain` of every grid step: losses [M, G, T], placebo [M, G-1, T] -> [M, G-1].

    Compare with :func:`step_gains`: a real gain stands well above its placebo.
    """
    placebo = _check_placebo(placebo, losses)
    return np.stack([placebo_gain(losses[:, j], placebo[:, j], r) for j in range(placebo.shape[1])], axis=1)


# --------------------------------------------------------------------------------------------------
# Figures


def figure3_gains(
    losses: np.ndarray, grid: Sequence[int], models: Sequence[str], r: float = 0.1, caps: Mapping[str, int | None] | None = None
) -> np.ndarray:
    """Figure 3: the unnormalised gain exp f(c, c) - exp f_i(c, c') of each grid step: [M, G-1]."""
    table = prepare_table(losses, grid, models, caps)
    gains = np.empty((table.shape[0], table.shape[1] - 1))
    for j in range(table.shape[1] - 1):
        b = baseline(table[:, j])  # [T]
        positions = top_r_positions(b, r)
        # exp f(c,c) - exp f_i(c,c') = exp f(c,c) * g_i(c,c'): the same numbers as the walk uses
        gains[:, j] = np.exp(b[positions].mean()) * relative_gain(b, table[:, j + 1], positions)
    return gains


def perplexity_by_context(
    losses: np.ndarray, grid: Sequence[int], models: Sequence[str], caps: Mapping[str, int | None] | None = None
) -> np.ndarray:
    """Figure 4: ordinary perplexity exp(mean_t l_i(c, t)) over all targets: [M, G]."""
    return np.exp(prepare_table(losses, grid, models, caps).mean(axis=-1))


def bootstrap_perplexity(
    losses: np.ndarray,
    grid: Sequence[int],
    models: Sequence[str],
    block_size: int,
    n_boot: int = 200,
    seed: int = 0,
    ci: float = 0.95,
    caps: Mapping[str, int | None] | None = None,
    units: np.ndarray | None = None,
) -> np.ndarray:
    """Block-bootstrap interval of Figure 4's perplexity at every context length: [M, G, 2] (low, high).

    Resampled as :func:`bootstrap_recl` resamples: the targets cut into their contiguous blocks of ``block_size``,
    as many blocks drawn with replacement, the same blocks for every model and context length; the interval is
    the (1-ci)/2 and (1+ci)/2 quantiles of exp(total loss / total units) over the resamples. ``units`` [T]: what each
    target counts for in the denominator (in words, the UTF-8 bytes of its span: perplexity per byte); None: one each
    (perplexity per target). The same ``seed`` draws the same blocks for either."""
    table = prepare_table(losses, grid, models, caps)
    n_models, n_grid, n_targets = table.shape
    n_blocks = _check_resampling(n_targets, block_size, n_boot, ci)
    weights = np.ones(n_targets) if units is None else np.asarray(units, dtype=np.float64)
    block_sums = table.reshape(n_models, n_grid, n_blocks, block_size).sum(axis=-1)  # [M, G, blocks]
    block_units = weights.reshape(n_blocks, block_size).sum(axis=-1)  # [blocks]
    chosen = np.random.default_rng(seed).integers(0, n_blocks, (n_boot, n_blocks))  # [resample, blocks]
    perplexity = np.exp(block_sums[:, :, chosen].sum(axis=-1) / block_units[chosen].sum(axis=-1))  # [M, G, resample]
    alpha = (1 - ci) / 2
    return np.stack([np.quantile(perplexity, alpha, axis=-1), np.quantile(perplexity, 1 - alpha, axis=-1)], axis=-1)


# --------------------------------------------------------------------------------------------------
# Over training seeds: one group per seed, one RECL per seed, and their spread


@dataclass(frozen=True)
class SeedSpread:
    """The spread over training seeds of one model's RECL at one r, with censoring carried through: a
    censored reading (the walk ran off the grid) says only that the RECL is at least its value."""

    n: int
    """Readings: one per seed."""
    min: int
    """The smallest reading."""
    min_censored: bool
    """True when every reading at the minimum is censored: the smallest RECL is at least ``min``."""
    max: int
    """The largest reading."""
    max_censored: bool
    """True when any reading is censored: that seed's RECL, and so the largest, may lie beyond ``max``."""
    mean: float
    """The mean of the readings."""
    mean_censored: bool
    """True when any reading is censored: the mean of the readings is then a lower bound."""
    sd: float | None
    """Sample standard deviation (n - 1) of the readings as they stand; None for one seed. With censored
    readings the true spread is unknown (it may be larger or smaller), which ``n_censored`` says."""
    n_censored: int
    """Readings whose walk ran off the grid."""

    @property
    def min_label(self) -> str:
        """The minimum as tables print it: '>= 240' for a bound."""
        return recl_label(self.min, self.min_censored)

    @property
    def max_label(self) -> str:
        """The maximum as tables print it: '>= 240' when a reading is a bound."""
        return recl_label(self.max, self.max_censored)

    @property
    def mean_label(self) -> str:
        """The mean to one decimal, '>= ' before it when a reading is a bound."""
        return f"{'>= ' if self.mean_censored else ''}{self.mean:.1f}"

    @property
    def sd_label(self) -> str:
        """The sd to one decimal; '-' for one seed."""
        return "-" if self.sd is None else f"{self.sd:.1f}"

    def record(self) -> dict[str, Any]:
        """The spread as a table row's cells: each statistic, its flag and its label."""
        return {"min": self.min, "min_censored": self.min_censored, "min_label": self.min_label,
                "max": self.max, "max_censored": self.max_censored, "max_label": self.max_label,
                "mean": self.mean, "mean_censored": self.mean_censored, "mean_label": self.mean_label,
                "sd": self.sd, "sd_label": self.sd_label, "n_censored": self.n_censored}


def seed_spread(recls: Sequence[int], censored: Sequence[bool]) -> SeedSpread:
    """Min, max, mean and sd of one RECL read once per training seed (``recls[k]``, censored when
    ``censored[k]``): each a plain statistic of the readings, flagged where a censored reading makes
    it a lower bound (see :class:`SeedSpread`)."""
    values = np.asarray(recls, dtype=np.int64)
    flags = np.asarray(censored, dtype=bool)
    if values.ndim != 1 or values.size == 0 or flags.shape != values.shape:
        raise TxlabError(f"one censoring flag per reading and at least one reading, got {list(recls)} and {list(censored)}")
    low = int(values.min())
    return SeedSpread(
        n=int(values.size),
        min=low, min_censored=bool(flags[values == low].all()),
        max=int(values.max()), max_censored=bool(flags.any()),
        mean=float(values.mean()), mean_censored=bool(flags.any()),
        sd=float(values.std(ddof=1)) if values.size > 1 else None,
        n_censored=int(flags.sum()),
    )
