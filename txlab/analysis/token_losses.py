"""A group's per-token losses as one tidy table, for a reader's own analysis: one row per member, context length and
target (member, unit, c, target, target_text, loss, placebo_loss), the very numbers RECL and Figures 3 and 4 are
computed from. Written as CSV, and as Parquet where pyarrow is installed. Pure numpy and pandas.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from txlab.errors import TxlabError
from txlab.fileio import write_atomic, write_text_atomic
from txlab.tables import csv_text

COLUMNS = ("member", "unit", "c", "target", "target_text", "loss", "placebo_loss")
"""The table's columns: the member's name in the group's tables; what a target is (token or word); the context
length; the target's position in the split; the target as text; its loss in nats with exactly c units of context
from a fresh state; the loss at c with the context beyond the grid's previous length taken from far away (the
placebo of the step to c; empty at the grid's first length and without placebo losses)."""


def token_loss_table(losses: np.ndarray, grid: Sequence[int], members: Sequence[str], targets: np.ndarray, texts: Sequence[str],
                     unit: str, placebo: np.ndarray | None = None) -> pd.DataFrame:
    """The tidy table of a group's losses [M, G, T] (placebo losses [M, G-1, T] or None), member-major, then
    context length, then target: M x G x T rows of :data:`COLUMNS`."""
    n_members, n_grid, n_targets = losses.shape
    if (n_members, n_grid) != (len(members), len(grid)) or len(targets) != n_targets or len(texts) != n_targets:
        raise TxlabError(f"a loss table of {list(losses.shape)} does not match {len(members)} members, {len(grid)} context lengths "
                         f"and {len(targets)} targets with {len(texts)} texts")
    fake = np.full(losses.shape, np.nan)  # [M, G, T]: no placebo at the grid's first length
    if placebo is not None:
        fake[:, 1:] = placebo  # placebo[:, j] is the step grid[j] -> grid[j + 1], scored at grid[j + 1]
    return pd.DataFrame({
        "member": np.repeat(np.asarray(members, dtype=object), n_grid * n_targets),
        "unit": unit,
        "c": np.tile(np.repeat(np.asarray(grid), n_targets), n_members),
        "target": np.tile(np.asarray(targets), n_members * n_grid),
        "target_text": np.tile(np.asarray(texts, dtype=object), n_members * n_grid),
        "loss": losses.reshape(-1).astype(np.float64),  # [M * G * T], member-major as the columns above
        "placebo_loss": fake.reshape(-1),
    }, columns=list(COLUMNS))


def write_token_losses(table: pd.DataFrame, stem: Path) -> list[Path]:
    """``table`` as ``stem``.csv, and ``stem``.parquet where pyarrow is installed (pandas writes Parquet through it)."""
    stem = Path(stem)
    written = [write_text_atomic(stem.with_suffix(".csv"), csv_text(table))]
    if importlib.util.find_spec("pyarrow") is not None:
        parquet = stem.with_suffix(".parquet")
        write_atomic(parquet, lambda fh: table.to_parquet(fh, index=False))
        written.append(parquet)
    return written
