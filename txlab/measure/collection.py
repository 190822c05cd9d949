"""What a loss collection measures, as one value: the targets, the context grid and how they are read.

Every model of a RECL group is collected with the same :class:`Collection`, so their tables line up target for
target (txlab.measure.losses). It is resolved once, with every default filled in, and passed whole: the grid is a
tuple of ints checked once, by txlab.analysis.recl.check_grid, and the cost of a collection is counted here
(:meth:`Collection.token_steps`) for the plans that print it, by the functions txlab.measure.losses chooses its
method with (:func:`read_cost`, :func:`cheaper_method`, :func:`placebo_groups`, :func:`strided_cost`), so a plan
counts what is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from txlab.analysis.recl import check_grid
from txlab.errors import TxlabError

METHODS = ("auto", "window", "naive")
"""How a table is computed: ``window`` (one window per start serves every c), ``naive`` (one window per (c, t)),
``auto`` (of the two, the one that reads fewer token-steps, the window method only for a prefix-causal model;
txlab.measure.losses.choose_methods)."""

UNITS = ("token", "word")
"""What a context length and a target count: the tokens of the group's one token stream, or the words of its text
(txlab.measure.words), which members with different tokenizers share."""


def window_runs(near: Sequence[int], block_len: int) -> list[tuple[int, int, int]]:
    """The windows the window method reads for targets 0 .. ``block_len`` - 1 and contexts ``near`` (ascending), as runs
    (first start, windows, length) in ascending starts: the window at start s is read to its own longest needed context,
    the longest c of ``near`` with 0 <= s + c < block_len, and not at all where no c lands in the block. A run of one
    length is one stretch of starts: block_len windows of c_max, then min(c' - c, block_len) of each shorter c (c' the
    next length), the cheapest exact reading with one window per start."""
    runs = []
    for c, longer in zip(near, [*near[1:], None]):
        first = -c if longer is None else max(block_len - longer, -c)  # starts whose longer contexts overrun the block
        if block_len - c > first:
            runs.append((first, block_len - c - first, c))
    return runs[::-1]


def read_cost(near: Sequence[int], block_len: int, method: str, extra: int = 0) -> int:
    """Token-steps to score ``block_len`` contiguous targets after contexts of c tokens for every c of ``near``
    (ascending), each context preceded by ``extra`` more tokens (a placebo's far span; 0 for the main table).

    ``window``: what the window method reads, each window to its own longest needed context (:func:`window_runs`),
    plus ``extra`` each. ``naive``: one window of extra + c tokens per (c, t).
    """
    if method == "window":
        return sum(count * (extra + c) for _, count, c in window_runs(near, block_len))
    return block_len * sum(c + extra for c in near)


def strided_cost(c: int, stride: int, block_len: int, extra: int = 0) -> int:
    """Token-steps to score ``block_len`` contiguous targets in runs of ``stride``, each run read once from c tokens
    before its first target (txlab.measure.strided): a run of r targets reads extra + c + r - 1 tokens, about
    T x (c / s + 1) in all. ``extra``: a placebo's far span before each run (0 for the main table)."""
    full, rest = divmod(block_len, stride)
    return full * (extra + c + stride - 1) + (extra + c + rest - 1 if rest else 0)


def check_stride(stride: float, method: str = "auto") -> None:
    """Refuse a stride that is neither a whole number of tokens >= 1 nor a fraction of c in (0, 1), or one asked
    together with an exact method (a stride is its own method)."""
    s = stride
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not s > 0 or (s > 1 and not float(s).is_integer()):
        raise TxlabError(f"a stride is a whole number of tokens >= 1 (--set stride=512) or a fraction of c in (0, 1) "
                         f"(--set stride=0.25), got {s!r}")
    if method != "auto":
        raise TxlabError(f"a stride is its own method (strided): it cannot be combined with method {method!r}")


def stride_tokens(stride: float, c: int) -> int:
    """s at context length c: ``stride`` tokens when it is 1 or more, else that fraction of c, at least 1."""
    return int(stride) if stride >= 1 else max(1, round(stride * c))


def cheaper_method(near: Sequence[int], block_len: int, extra: int = 0) -> str:
    """The exact method that reads fewer token-steps (the window method on a tie)."""
    return "window" if read_cost(near, block_len, "window", extra) <= read_cost(near, block_len, "naive", extra) else "naive"


def placebo_groups(grid: Sequence[int], max_context: int | None = None) -> tuple[dict[int, tuple[int, ...]], tuple[int, ...]]:
    """(groups, alone): the placebo steps c -> c' of ``grid`` that one window can serve together, and those it cannot.

    A step's far span depends only on its window's start and its size c' - c, so the steps of one size share
    windows: ``groups`` maps c' - c to the near lengths c of those steps. ``alone``: the indices j of steps
    grid[j] -> grid[j+1] read one window per (c, t) whatever the method, those whose c' exceeds a model's
    maximum context (its placebo window is cut to the nearest ``max_context`` tokens, so its start moves with c).
    """
    groups: dict[int, tuple[int, ...]] = {}
    alone = []
    for j, (c, c2) in enumerate(zip(grid, grid[1:])):
        if max_context and c2 > max_context:
            alone.append(j)
        else:
            groups[c2 - c] = (*groups.get(c2 - c, ()), c)
    return groups, tuple(alone)


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
    unit: str = "token"
    """What c and the targets count: one of :data:`UNITS`."""
    stride: float | None = None
    """Strided collection (opt-in, in tokens; txlab.measure.strided): the targets of a block are read in runs of s, each
    run once from c tokens before its first target, so a target's context lies in [c, c + s) instead of being exactly c.
    A whole number >= 1: s tokens; a fraction in (0, 1): s = max(1, round(stride * c)) at each c. None: exact contexts."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", check_grid(self.grid))
        if self.blocks < 1 or self.block_len < 1:
            raise TxlabError(f"a collection needs at least one block of at least one target, got {self.blocks} x {self.block_len}")
        if self.method not in METHODS:
            raise TxlabError(f"unknown collection method {self.method!r}; choose {', '.join(METHODS)}")
        if self.unit not in UNITS:
            raise TxlabError(f"unknown unit {self.unit!r}; choose {', '.join(UNITS)}")
        if self.stride is not None:
            self._check_stride()

    def _check_stride(self) -> None:
        if self.unit != "token":
            raise TxlabError("a stride counts tokens: strided collection is not defined in words (drop --set stride, or use --unit token)")
        check_stride(self.stride, self.method)

    @property
    def n_targets(self) -> int:
        return self.blocks * self.block_len

    def stride_at(self, c: int) -> int:
        """s at context length c: the stride's tokens, or its fraction of c (at least 1); 1 without a stride."""
        return 1 if self.stride is None else stride_tokens(self.stride, c)

    def stride_words(self) -> str:
        """How the stride is said everywhere: 's = 512 tokens', 's = 0.25 c (4..32 tokens)'; '' without one."""
        if self.stride is None:
            return ""
        if self.stride >= 1:
            return f"s = {int(self.stride)} tokens"
        return f"s = {self.stride:g} c ({self.stride_at(self.grid[0])}..{self.stride_at(self.grid[-1])} tokens)"

    def main_method(self) -> str:
        """How the main table of a prefix-causal model is computed: ``strided`` with a stride, else the method asked, or
        under ``auto`` the cheaper one (:func:`cheaper_method`). A model that is not prefix-causal is read one window per
        (c, t), and refused with a stride."""
        if self.stride is not None:
            return "strided"
        return cheaper_method(self.grid, self.block_len) if self.method == "auto" else self.method

    def token_steps(self) -> int:
        """Token-steps of the main table per prefix-causal model, by :meth:`main_method` (:func:`read_cost`,
        :func:`strided_cost`); in words, the word-steps (a member reads about its tokens per word times as many)."""
        if self.stride is not None:
            return self.blocks * sum(strided_cost(c, self.stride_at(c), self.block_len) for c in self.grid)
        return self.blocks * read_cost(self.grid, self.block_len, self.main_method())

    def placebo_token_steps(self) -> int:
        """Token-steps of the placebo losses per prefix-causal model: each group of steps of one size c' - c
        (:func:`placebo_groups`) by the cheaper exact method, or one window per (c, t) under method ``naive``.
        On a uniform grid that is one group read by windows of c_max tokens from fewer starts than the main
        table's, so the placebo costs less than the main table; a grid of k step sizes costs up to k times more. With a
        stride, each run of the main table at c is read once more behind a far span of c' - c tokens. In words, the
        word-steps of one window per step length and first near word (txlab.measure.words.placebo_cells; a member
        reads about its tokens per word times as many)."""
        if not self.placebo:
            return 0
        if self.stride is not None:  # the far span of c' - c before each run of the main table at c
            return self.blocks * sum(strided_cost(c, self.stride_at(c), self.block_len, c2 - c) for c, c2 in zip(self.grid, self.grid[1:]))
        groups, _ = placebo_groups(self.grid)

        def method(near: Sequence[int], extra: int) -> str:  # words read every group by its windows, tokens by the cheaper
            if self.method == "naive":
                return "naive"
            return "window" if self.unit == "word" else cheaper_method(near, self.block_len, extra)

        return self.blocks * sum(read_cost(near, self.block_len, method(near, extra), extra) for extra, near in groups.items())
