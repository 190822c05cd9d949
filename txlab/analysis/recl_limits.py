"""What RECL can and cannot tell you: loss tables with a known answer, run through txlab.analysis.recl.

The tables of docs/recl-limits.md come from here::

    python -m txlab.analysis.recl_limits                              # print them
    python -m txlab.analysis.recl_limits --write docs/recl-limits.md  # refresh them in the page, prose untouched

The known-answer corpus
-----------------------
``n_targets`` targets. A share of them (``recall_share``) recall a token ``d`` positions back, with d
spread evenly over 1 .. ``horizon`` (every 100-token step of the paper's grid holds the same number);
they cost ``UNRESOLVED`` nats to a model that does not use the token d back and ``resolved`` nats to
one that does. The others are background targets whose loss no context changes, spread evenly over
0.5 .. 5.5 nats. Positions are shuffled with a seed. A *reader* is a model defined by what it does
with that corpus: the window it sees, the loss it reaches on a recalled token, how its recall decays
with distance, and the noise on its losses. Nothing here is trained, so every answer is known.

Pure numpy, like txlab.analysis.recl: nothing here imports torch.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from txlab.analysis import recl
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic
from txlab.tables import markdown_table

GRID: tuple[int, ...] = recl.DEFAULT_GRID
RS: tuple[float, ...] = recl.DEFAULT_RS
UNRESOLVED = 11.5
"""Loss of a recalled token without its dependency, nats (a word of a 100,000-word vocabulary: ln 1e5)."""
BACKGROUND = (0.5, 5.5)
"""Range of the background targets' losses, nats: all easier than an unresolved recall."""
N_TARGETS = 20_000
BLOCK = 500
"""Targets per bootstrap block."""
CI = 0.95


@dataclass(frozen=True)
class Corpus:
    distance: np.ndarray
    """[T] int: how far back the token a target recalls lies; 0 for a background target."""
    background: np.ndarray
    """[T] the loss of each background target (any context); unused for recall targets."""
    chance: np.ndarray
    """[T] uniform draws in [0, 1): a decaying reader recalls target t when chance[t] < its recall probability."""


def make_corpus(n_targets: int = N_TARGETS, recall_share: float = 0.1, horizon: int = 1000, seed: int = 0) -> Corpus:
    """The corpus above; the same seed gives the same corpus."""
    n_recall = round(n_targets * recall_share)
    distance = np.zeros(n_targets, dtype=np.int64)
    distance[:n_recall] = 1 + np.arange(n_recall) * horizon // n_recall  # evenly over 1 .. horizon
    background = np.zeros(n_targets)
    background[n_recall:] = np.linspace(*BACKGROUND, n_targets - n_recall)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_targets)
    return Corpus(distance[order], background[order], rng.random(n_targets))


@dataclass(frozen=True)
class Reader:
    window: int | None = None
    """The farthest token it can use (None: any)."""
    resolved: float = 0.0
    """Its loss on a recalled token whose dependency it sees and recalls, nats."""
    decay: float | None = None
    """Recall probability exp(-d / decay) for a dependency d back (None: it always recalls)."""
    noise: float = 0.0
    """Standard deviation of independent Gaussian noise on every loss, nats."""


def recalled(corpus: Corpus, reader: Reader, context: int) -> np.ndarray:
    """[T] bool: the recall targets this reader resolves when it reads ``context`` tokens."""
    reach = context if reader.window is None else min(context, reader.window)
    seen = (corpus.distance > 0) & (corpus.distance <= reach)
    if reader.decay is not None:
        seen &= corpus.chance < np.exp(-corpus.distance / reader.decay)
    return seen


def clean_loss(corpus: Corpus, reader: Reader, context: int) -> np.ndarray:
    """[T] the reader's loss at ``context`` before noise."""
    loss = np.where(corpus.distance > 0, UNRESOLVED, corpus.background)
    return np.where(recalled(corpus, reader, context), reader.resolved, loss)


def _with_noise(clean: np.ndarray, reader: Reader, seed: int) -> np.ndarray:
    if not reader.noise:
        return clean
    return clean + np.random.default_rng(seed).normal(0.0, reader.noise, clean.shape)


def loss_table(corpus: Corpus, reader: Reader, grid: Sequence[int] = GRID, seed: int = 1) -> np.ndarray:
    """[G, T] l(c, t), with fresh noise for every (c, t)."""
    return _with_noise(np.stack([clean_loss(corpus, reader, c) for c in grid]), reader, seed)


def placebo_table(corpus: Corpus, reader: Reader, grid: Sequence[int] = GRID, seed: int = 2) -> np.ndarray:
    """[G-1, T] placebo losses of each step c -> c': the extra tokens come from far away, so the reader
    resolves only what its nearest c tokens hold; its noise is drawn afresh."""
    return _with_noise(np.stack([clean_loss(corpus, reader, c) for c in grid[:-1]]), reader, seed)


# --------------------------------------------------------------------------------------------------
# The cases: each returns a Markdown table


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return markdown_table(headers, rows) + "\n"


def _r(r: float) -> str:
    return f"r = {r:g}"


def _alone(table: np.ndarray, r: float, grid: Sequence[int] = GRID, **kwargs) -> recl.ReclResult:
    (result,) = recl.recl(table[None], grid, ["reader"], r, **kwargs)
    return result


def _step_gain(result: recl.ReclResult, c: int, grid: Sequence[int] = GRID) -> str:
    return f"{100 * result.gains[list(grid).index(c)]:.3f}%"


def windows_case(corpus: Corpus | None = None) -> str:
    """Readers that see exactly w tokens, w on a grid value or just above one."""
    corpus = corpus or make_corpus()
    windows = (300, 301, 302, 305, 310, 350, 399, 400)
    rows = []
    for w in windows:
        table = loss_table(corpus, Reader(window=w))
        results = [_alone(table, r) for r in RS]
        ideal = min(c for c in GRID if c >= w)
        rows.append([w, ideal, *(res.label for res in results), *(_step_gain(res, 300) for res in results)])
    return _table(["window w", "smallest grid value >= w", *(f"RECL {_r(r)}" for r in RS),
                      *(f"gain 300 -> 400, {_r(r)}" for r in RS)], rows)


def grid_step_case(corpus: Corpus | None = None) -> str:
    """The same readers on finer grids from 100 to 1000."""
    corpus = corpus or make_corpus()
    steps = (100, 50, 20, 10, 5)
    rows = []
    for w in (301, 350, 500):
        for step in steps:
            grid = tuple(range(100, 1001, step))
            table = loss_table(corpus, Reader(window=w), grid)
            rows.append([w, step, *(_alone(table, r, grid).label for r in RS)])
    return _table(["window w", "grid step", *(f"RECL {_r(r)}" for r in RS)], rows)


def partial_case() -> str:
    """Readers that see 500 tokens but bring a recalled token only down to ``resolved`` nats."""
    rows = []
    for share in (0.1, 0.02):
        corpus = make_corpus(recall_share=share)
        for resolved in (0.0, 9.0, 10.5, 11.0):
            results = [_alone(loss_table(corpus, Reader(window=500, resolved=resolved)), r) for r in RS]
            rows.append([f"{share:.0%}", f"{resolved:g}", *(res.label for res in results), *(_step_gain(res, 100) for res in results)])
    return _table(["targets that recall", "loss of a recalled token (nats)", *(f"RECL {_r(r)}" for r in RS),
                      *(f"gain 100 -> 200, {_r(r)}" for r in RS)], rows)


def decay_case(corpus: Corpus | None = None) -> str:
    """Readers that see everything but recall a dependency d back with probability exp(-d / decay)."""
    corpus = corpus or make_corpus()
    rows = []
    for decay in (100, 200, 400, 800):
        table = loss_table(corpus, Reader(decay=decay))
        rows.append([decay, round(decay * np.log(2)), round(decay * np.log(10)), *(_alone(table, r).label for r in RS)])
    return _table(["decay length", "recall 50% at d =", "recall 10% at d =", *(f"RECL {_r(r)}" for r in RS)], rows)


def _interval(interval: recl.ReclInterval) -> str:
    """'500 [500, 500]', as Table 8 shows it: '>= ' before the high end when its tail ran off the grid."""
    high_censored = interval.censored_fraction > (1 - CI) / 2
    return f"{recl.recl_label(interval.recl, interval.censored)} [{interval.low}, {'>= ' if high_censored else ''}{interval.high}]"


def noise_case(corpus: Corpus | None = None, n_boot: int = 25) -> str:
    """A reader that sees 500 tokens, with independent noise on every loss, with and without its placebo."""
    corpus = corpus or make_corpus()
    rows = []
    for noise in (0.0, 0.01, 0.02, 0.05):
        reader = Reader(window=500, noise=noise)
        table, placebo = loss_table(corpus, reader)[None], placebo_table(corpus, reader)[None]
        cells = []
        for r in RS:
            (interval,) = recl.bootstrap_recl(table, GRID, ["reader"], r, BLOCK, n_boot, ci=CI, placebo=placebo)
            cells += [_interval(interval), _interval(interval.placebo)]
        rows.append([f"{noise:g}", *cells])
    return _table(["noise (nats)", *(f"{name}, {_r(r)}" for r in RS for name in ("RECL", "placebo-aware RECL"))], rows)


def noise_gains_case(corpus: Corpus | None = None, noise: float = 0.05, r: float = 0.1) -> str:
    """Each step's gain and placebo gain for the noisy reader of :func:`noise_case`."""
    corpus = corpus or make_corpus()
    reader = Reader(window=500, noise=noise)
    result = _alone(loss_table(corpus, reader), r, placebo=placebo_table(corpus, reader)[None])
    rows = [[f"{c} -> {c2}", f"{g:.4f}", f"{p:.4f}", f"{g - p:+.4f}"]
            for c, c2, g, p in zip(GRID, GRID[1:], result.gains, result.placebo_gains)]
    return _table(["step", "gain", "placebo gain", "gain - placebo gain"], rows)


CASES: dict[str, Callable[[], str]] = {
    "windows": windows_case,
    "grid-step": grid_step_case,
    "partial": partial_case,
    "decay": decay_case,
    "noise": noise_case,
    "noise-gains": noise_gains_case,
}
"""Name -> the case's table. A page holds each between ``<!-- recl-limits:NAME -->`` and ``<!-- /recl-limits:NAME -->``."""


def render_cases(names: Sequence[str] | None = None) -> dict[str, str]:
    """Name -> Markdown table of each case (all by default)."""
    names = list(CASES) if names is None else list(names)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise TxlabError(f"no RECL case {unknown[0]!r}; the cases are {', '.join(CASES)}")
    return {name: CASES[name]() for name in names}


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- recl-limits:{re.escape(name)} -->\n)(.*?)(<!-- /recl-limits:{re.escape(name)} -->)", re.S)


def fill_page(page: str, tables: dict[str, str]) -> str:
    """``page`` with each case's table put between its markers; every case must have its markers."""
    for name, table in tables.items():
        pattern = _block(name)
        if not pattern.search(page):
            raise TxlabError(f"the page has no <!-- recl-limits:{name} --> ... <!-- /recl-limits:{name} --> markers")
        page = pattern.sub(lambda m: m.group(1) + table + m.group(3), page)
    return page


def page_tables(page: str) -> dict[str, str]:
    """Name -> the table a page holds between each case's markers."""
    return {name: m.group(2) for name in CASES if (m := _block(name).search(page))}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m txlab.analysis.recl_limits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="refresh the tables of this page (docs/recl-limits.md) in place")
    parser.add_argument("cases", nargs="*", help=f"cases to run (default all): {', '.join(CASES)}")
    args = parser.parse_args(argv)
    try:
        tables = render_cases(args.cases or None)
        if args.write:
            write_text_atomic(args.write, fill_page(args.write.read_text(), tables))
            print(f"written {args.write}")
        else:
            for name, table in tables.items():
                print(f"{name}:\n{table}")
    except TxlabError as error:
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
