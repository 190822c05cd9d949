"""What a loss collection measures, as one value: the targets, the context grid and how they are read.

Every model of a RECL group is collected with the same :class:`Collection`, so their tables line up target for
target (txlab.measure.losses). It is resolved once, with every default filled in, and passed whole: the grid is a
tuple of ints checked once, by txlab.analysis.recl.check_grid, and the cost of a collection is counted here
(:meth:`Collection.token_steps`) for the plans that print it.
"""

from __future__ import annotations

from dataclasses import dataclass

from txlab.analysis.recl import check_grid
from txlab.errors import TxlabError

METHODS = ("auto", "window", "naive")
"""How a table is computed: ``window`` (one window per start serves every c), ``naive`` (one window per (c, t)),
``auto`` (the window method when the model is prefix-causal; txlab.measure.losses.choose_method)."""


def parse_grid(spec: str) -> tuple[int, ...]:
    """'100:1000:100' -> (100, 200, ..., 1000); '16,32,64' -> (16, 32, 64)."""
    try:
        if ":" in spec:
            start, stop, step = (int(x) for x in spec.split(":"))
            if step < 1:
                raise ValueError
            grid = tuple(range(start, stop + 1, step))
        else:
            grid = tuple(int(x) for x in spec.split(","))
    except ValueError:
        raise TxlabError(f"a grid is start:stop:step (stop included) or a comma-separated list of lengths, got {spec!r}") from None
    return check_grid(grid, spec)


@dataclass(frozen=True)
class Collection:
    """The targets and contexts every model of a group is scored on, and how its tables are computed."""

    split: str
    """The split the targets are drawn from (train, valid or test)."""
    grid: tuple[int, ...]
    """Context lengths c, strictly ascending."""
    blocks: int
    """Contiguous target blocks drawn from the split (txlab.measure.losses.sample_blocks)."""
    block_len: int
    """Targets per block; also the block of the block bootstrap."""
    seed: int = 0
    """Draws the target blocks (and, in RECL, the bootstrap resamples)."""
    placebo: bool = False
    """Also the placebo losses of every grid step (extra context from far away)."""
    method: str = "auto"
    """How a table is computed: one of :data:`METHODS`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", check_grid(self.grid))
        if self.blocks < 1 or self.block_len < 1:
            raise TxlabError(f"a collection needs at least one block of at least one target, got {self.blocks} x {self.block_len}")
        if self.method not in METHODS:
            raise TxlabError(f"unknown collection method {self.method!r}; choose {', '.join(METHODS)}")

    @property
    def n_targets(self) -> int:
        return self.blocks * self.block_len

    def token_steps(self) -> int:
        """Token-steps of the window method per model: blocks * (block_len + c_max - c_min) * c_max."""
        return self.blocks * (self.block_len + self.grid[-1] - self.grid[0]) * self.grid[-1]

    def placebo_token_steps(self) -> int:
        """Token-steps of the placebo losses per model: every target once per grid step c -> c', reading c' tokens."""
        return self.n_targets * sum(self.grid[1:]) if self.placebo else 0
