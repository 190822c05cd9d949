"""Table 8 as typed rows, and as the tables `txlab recl` writes: one row per model and r (the paper's
RECL, its block-bootstrap interval, the placebo-aware RECL) from a group's loss table
(:func:`recl_rows`), one row per model, r and estimate over training seeds with their spread
(:func:`seed_rows`), each as Markdown and CSV. Pure numpy and pandas: the figures are in
txlab.analysis.recl_figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from txlab.analysis.recl import DEFAULT_RS, DEFAULT_THRESHOLD, ReclInterval, SeedSpread, bootstrap_recl, recl, recl_label, seed_spread
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic
from txlab.tables import csv_text, latex_text_table, markdown_table

PLACEBO_NOTE = ("† a step this RECL rests on did not beat its placebo gain (extra context from far away) by the threshold; "
                "the placebo-aware RECL stops at the first such step.")
"""What the dagger under a table of RECLs says."""
RELATIVE_NOTE = ("RECL is relative to the group: each member's gain is counted against the group's best loss at each context "
                 "length, so adding or removing a member can move another member's reading.")
"""What every table and Figure 3 of a group say of how to read a RECL: with its group."""
NOT_READ_MARK = "§"
"""How a table marks a member that does not beat the unigram baseline (:class:`UnigramCheck`)."""


@dataclass(frozen=True, eq=False)
class GroupTable:
    """A group's per-token losses at each context length, as RECL reads them (txlab.measure.losses
    collects them; every model on the same targets of the same token stream)."""

    losses: np.ndarray
    """[M, G, T] losses in nats of model i at context length grid[j] on target t."""
    grid: Sequence[int]
    """The context lengths, strictly ascending."""
    models: Sequence[str]
    """The models' names, one per row of ``losses``."""
    caps: Mapping[str, int | None] | None = None
    """Model name -> the most context it can use (None or absent: unbounded; txlab.analysis.recl.cap_losses)."""
    placebo: np.ndarray | None = None
    """[M, G-1, T] placebo losses of each grid step, which add the placebo-aware RECL; None without."""


@dataclass(frozen=True)
class Bootstrap:
    """How a RECL's block-bootstrap interval is drawn (txlab.analysis.recl.bootstrap_recl)."""

    block_size: int
    """Targets per block: the collection's contiguous blocks, each resampled whole."""
    n_boot: int = 200
    """Resamples."""
    seed: int = 0
    """Seed of the resampling."""
    ci: float = 0.95
    """Coverage of the interval."""


@dataclass(frozen=True)
class Interval:
    """A RECL's block-bootstrap interval, in grid values taken on the conservative side."""

    low: int
    """The (1 - level) / 2 quantile of the resampled RECLs."""
    high: int
    """The (1 + level) / 2 quantile of the resampled RECLs."""
    level: float
    """Coverage (0.95)."""
    censored_fraction: float
    """Share of resamples whose walk ran off the grid."""

    @property
    def high_censored(self) -> bool:
        """More censored resamples than the upper tail holds: the high end ran off the grid too, so it
        is only a lower bound."""
        return self.censored_fraction > (1 - self.level) / 2


@dataclass(frozen=True)
class ReclEstimate:
    """One RECL as a table shows it: the context where the walk stopped, whether it ran off the grid,
    and its interval where one was drawn."""

    recl: int
    """The context where the walk stopped (capped at the model's maximum context)."""
    censored: bool
    """True when the walk ran off the grid: the RECL is at least ``recl``."""
    interval: Interval | None = None
    """The block-bootstrap interval; None when none was drawn."""

    @property
    def label(self) -> str:
        """'180', or '>= 240' when censored."""
        return recl_label(self.recl, self.censored)

    def cell(self) -> str:
        """'180 [140, 200]': the RECL and, when it has one, its interval ('>= ' before a high end that
        ran off the grid)."""
        if self.interval is None:
            return self.label
        return f"{self.label} [{self.interval.low}, {'>= ' if self.interval.high_censored else ''}{self.interval.high}]"

    def record(self, prefix: str = "") -> dict[str, Any]:
        """The columns of table8.csv and the keys of recl.json, each name after ``prefix``: recl,
        censored, label and, with an interval, ci_low, ci_high, ci, censored_fraction."""
        cells: dict[str, Any] = {"recl": self.recl, "censored": self.censored, "label": self.label}
        if self.interval is not None:
            cells.update(ci_low=self.interval.low, ci_high=self.interval.high, ci=self.interval.level,
                         censored_fraction=self.interval.censored_fraction)
        return {prefix + key: value for key, value in cells.items()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any], prefix: str = "") -> ReclEstimate:
        """The estimate :meth:`record` wrote under ``prefix`` (the label is derived, not read)."""
        interval = None
        if prefix + "ci_low" in record:
            interval = Interval(record[prefix + "ci_low"], record[prefix + "ci_high"], record[prefix + "ci"], record[prefix + "censored_fraction"])
        return cls(record[prefix + "recl"], record[prefix + "censored"], interval)


@dataclass(frozen=True)
class Table8Row:
    """One model's RECL at one r: the paper's, and the placebo-aware one where placebo losses were collected."""

    model: str
    """The member's label in its group (or the ideal model's)."""
    r: float
    """The fraction of hardest positions kept."""
    paper: ReclEstimate
    """The paper's RECL."""
    placebo_aware: ReclEstimate | None = None
    """The RECL whose every step beat its placebo gain by the threshold; None without placebo losses."""
    ground_truth: bool = False
    """True for the ideal model of a synthetic corpus, which gives the answer the others are read against."""
    beats_unigram: bool | None = None
    """Whether the member beats the unigram baseline (:class:`UnigramCheck`); False: its RECL is not read. None where
    no unigram was fitted (and for the ideal model)."""

    @property
    def below_placebo(self) -> bool | None:
        """True when a step the paper's RECL rests on did not beat its placebo gain by the threshold;
        None without placebo losses."""
        return None if self.placebo_aware is None else self.placebo_aware.recl < self.paper.recl

    def cell(self) -> str:
        """The paper's RECL as Table 8 prints it: :meth:`ReclEstimate.cell`, with '†' when below its placebo."""
        return self.paper.cell() + (" †" if self.below_placebo else "")

    def record(self) -> dict[str, Any]:
        """A row of table8.csv and of recl.json: model, r, the paper's RECL, the placebo-aware one
        (``placebo_`` keys) with below_placebo, and ground_truth on the ideal model's row."""
        cells = {"model": self.model, "r": self.r, **self.paper.record()}
        if self.placebo_aware is not None:
            cells.update(self.placebo_aware.record("placebo_"), below_placebo=self.below_placebo)
        if self.ground_truth:
            cells["ground_truth"] = True
        if self.beats_unigram is not None:
            cells["beats_unigram"] = self.beats_unigram
        return cells

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Table8Row:
        """The row :meth:`record` wrote (a row of a recl.json)."""
        placebo = ReclEstimate.from_record(record, "placebo_") if "placebo_recl" in record else None
        return cls(record["model"], record["r"], ReclEstimate.from_record(record), placebo, bool(record.get("ground_truth")),
                   record.get("beats_unigram"))


def recl_rows(table: GroupTable, *, rs: Sequence[float] = DEFAULT_RS, bootstrap: Bootstrap | None = None,
              threshold: float = DEFAULT_THRESHOLD, c0: int | None = None) -> list[Table8Row]:
    """The RECL of every model of the group at each r of ``rs`` (r-major, then the group's order): what
    a command prints and saves. With ``bootstrap``, each RECL carries its block-bootstrap interval;
    with the table's placebo losses, each row also holds the placebo-aware RECL. ``threshold`` and
    ``c0`` are the walk's (txlab.analysis.recl.recl)."""
    rows = []
    for r in rs:
        if bootstrap is not None:
            intervals = bootstrap_recl(table.losses, table.grid, table.models, r, bootstrap.block_size, bootstrap.n_boot, bootstrap.seed,
                                       bootstrap.ci, threshold, table.caps, c0, table.placebo)
            for found in intervals:
                placebo = None if found.placebo is None else _with_interval(found.placebo, bootstrap.ci)
                rows.append(Table8Row(found.model, r, _with_interval(found, bootstrap.ci), placebo))
        else:
            for found in recl(table.losses, table.grid, table.models, r, threshold, table.caps, c0, table.placebo):
                placebo = None if found.placebo_recl is None else ReclEstimate(found.placebo_recl, found.placebo_censored)
                rows.append(Table8Row(found.model, r, ReclEstimate(found.recl, found.censored), placebo))
    return rows


def _with_interval(found: ReclInterval, level: float) -> ReclEstimate:
    return ReclEstimate(found.recl, found.censored, Interval(found.low, found.high, level, found.censored_fraction))


def r_label(r: float) -> str:
    """How a table or figure heads a fraction r: 'r = 0.1'."""
    return f"r = {r:g}"


@dataclass(frozen=True)
class UnigramCheck:
    """docs/recl.md's rule, applied: a member whose perplexity at the grid's longest context does not beat a unigram
    fitted on the training split (txlab.analysis.per_unit.unigram_perplexity), on the same targets, has learned too
    little for its RECL to say anything about how it uses context, so it is not read."""

    perplexity: float
    """The unigram's perplexity on the group's targets (per word in words, per token in tokens)."""
    unit: str
    """'word' or 'token'."""
    c: int
    """The context length at which the members are compared: the grid's longest."""
    members: dict[str, float]
    """Member -> its perplexity at ``c`` on the same targets."""
    fit: str = ""
    """How the unigram was fitted and smoothed, in words (txlab.analysis.per_unit.UNIGRAM_FIT)."""

    def beats(self, member: str) -> bool:
        return self.members[member] < self.perplexity

    @property
    def not_read(self) -> list[str]:
        """The members that do not beat the unigram, in the group's order."""
        return [m for m in self.members if not self.beats(m)]

    def mark(self, rows: Sequence[Table8Row]) -> list[Table8Row]:
        """``rows`` with each member's :attr:`Table8Row.beats_unigram` set (the ideal model's left None)."""
        return [row if row.ground_truth or row.model not in self.members else replace(row, beats_unigram=self.beats(row.model)) for row in rows]

    def note(self) -> str:
        """The paragraph under Table 8: the unigram's perplexity, each member's, and which are not read."""
        per = f"per {self.unit}"
        members = ", ".join(f"{m} {p:,.{_digits(p)}f}" + f" {NOT_READ_MARK}" * (not self.beats(m)) for m, p in self.members.items())
        verdict = (f"{NOT_READ_MARK} does not beat it: its RECL says nothing about how it uses context, so it is not read."
                   if self.not_read else "Every member beats it, so every RECL may be read.")
        return (f"\nA unigram fitted on the training split ({self.fit}) has perplexity {per} {self.perplexity:,.{_digits(self.perplexity)}f} "
                f"on these targets; the members' at c = {self.c:,}: {members}. {verdict}\n")

    def record(self) -> dict[str, Any]:
        """recl.json's ``unigram``: the unigram's perplexity, how it was fitted, and per member its perplexity and verdict."""
        return {"perplexity": self.perplexity, "unit": self.unit, "c": self.c, "fit": self.fit,
                "members": {m: {"perplexity": p, "beats_unigram": self.beats(m)} for m, p in self.members.items()}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> UnigramCheck:
        return cls(record["perplexity"], record["unit"], record["c"], {m: v["perplexity"] for m, v in record["members"].items()}, record["fit"])


def _digits(perplexity: float) -> int:
    """Decimals a perplexity is printed with: none from 100 on (1,322), two below (3.97)."""
    return 0 if perplexity >= 100 else 2


@dataclass(frozen=True)
class TableText:
    """A table as text, before it is written as Markdown or LaTeX: its headers, its cells and the notes under it."""

    headers: list[str]
    body: list[list[str]]
    notes: list[str]

    def markdown(self) -> str:
        """The table in Markdown, each note a paragraph under it."""
        return "\n".join([markdown_table(self.headers, self.body), *(f"\n{note}" for note in self.notes)]) + "\n"

    def latex(self, caption: str) -> str:
        """The table in LaTeX (booktabs), ``caption`` and the notes as its caption."""
        return latex_text_table(self.headers, self.body, [caption, *self.notes])


TABLE8_CAPTION = ("Relative effective context length (RECL) of each model at each r, with its 95% block-bootstrap interval in "
                  "brackets; >= c: the walk ran off the grid, so the RECL is at least c.")
"""The caption of Table 8 in LaTeX."""
SEEDS_CAPTION = "RECL of each model at each r over training seeds: each seed's reading, their min, max, mean and sd."
"""The caption of the RECL over training seeds in LaTeX."""


def table8_text(rows: Sequence[Table8Row]) -> TableText:
    """The paper's Table 8 layout: one line per model, one column per r.

    A cell is :meth:`Table8Row.cell`, e.g. '180 [140, 200]'. Rows with placebo losses add, beside each
    r, the placebo-aware RECL, and mark with a dagger every RECL that rests on a step which did not
    beat its placebo gain by the threshold (a note under the table says so).
    """
    if not rows:
        raise TxlabError("no RECL rows to tabulate")
    rs = list(dict.fromkeys(row.r for row in rows))
    with_placebo = any(row.placebo_aware is not None for row in rows)
    columns = [(r, placebo_aware) for r in rs for placebo_aware in (False, True)[: 1 + with_placebo]]
    cells: dict[str, dict[tuple[float, bool], str]] = {}
    for row in rows:
        by_column = cells.setdefault(row.model, {})
        by_column[row.r, False] = row.cell()
        if row.placebo_aware is not None:
            by_column[row.r, True] = row.placebo_aware.cell()
    headers = [r_label(r) + (", placebo-aware" if placebo_aware else "") for r, placebo_aware in columns]
    not_read = {row.model for row in rows if row.beats_unigram is False}
    body = [[model + f" {NOT_READ_MARK}" * (model in not_read), *(by_column.get(column, "-") for column in columns)]
            for model, by_column in cells.items()]
    return TableText(["model", *headers], body, [PLACEBO_NOTE] * any(row.below_placebo for row in rows))


def table8_markdown(rows: Sequence[Table8Row]) -> str:
    """:func:`table8_text` in Markdown: what table8.md holds and the command prints."""
    return table8_text(rows).markdown()


def write_table8(rows: Sequence[Table8Row], stem: Path, note: str = "") -> list[Path]:
    """Table 8 as ``stem``.csv (tidy: one row per model and r, :meth:`Table8Row.record`), ``stem``.md
    (:func:`table8_markdown`, then ``note``) and ``stem``.tex (the same in LaTeX, booktabs, ``note`` in its caption)."""
    stem = Path(stem)
    csv, md, tex = stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")
    write_text_atomic(csv, csv_text(pd.DataFrame.from_records([row.record() for row in rows])))
    write_text_atomic(md, table8_markdown(rows) + note)
    write_text_atomic(tex, table8_text(rows).latex(" ".join(part for part in (TABLE8_CAPTION, note.strip()) if part)))
    return [csv, md, tex]


# --------------------------------------------------------------------------------------------------
# Over training seeds: one group per seed, one RECL per seed, and their spread

PAPER, PLACEBO_AWARE = "paper", "placebo-aware"
"""The estimates a row over seeds reads: the paper's RECL, the placebo-aware one."""


@dataclass(frozen=True)
class SeedSpreadRow:
    """One model's RECL at one r, by one estimate, read once per training seed, and the spread of the readings."""

    model: str
    """The member's label in its group."""
    r: float
    """The fraction of hardest positions kept."""
    estimate: str
    """Which RECL: PAPER or PLACEBO_AWARE."""
    same_every_seed: bool
    """True for a member that is the same model for every seed (a run directory, a Hugging Face
    checkpoint, the ideal model): its RECL moves only with the group's other members."""
    seeds: tuple[int, ...]
    """The training seeds, in the order the readings are."""
    recl: tuple[int, ...]
    """The RECL of each seed."""
    censored: tuple[bool, ...]
    """Whether each seed's walk ran off the grid (its RECL is at least the reading)."""
    below_placebo: tuple[bool, ...] | None
    """For the paper's RECL with placebo losses: whether each seed's RECL rests on a step that did not
    beat its placebo gain; None otherwise."""
    spread: SeedSpread
    """Min, max, mean and sd of the readings, censoring carried through (txlab.analysis.recl.seed_spread)."""
    ground_truth: bool = False
    """True for the ideal model of a synthetic corpus."""

    @property
    def labels(self) -> list[str]:
        """Each seed's reading as Table 8 prints it: '>= c' when censored, '†' when below its placebo."""
        below = self.below_placebo or (False,) * len(self.recl)
        return [recl_label(c, cut) + (" †" if flag else "") for c, cut, flag in zip(self.recl, self.censored, below)]

    def record(self) -> dict[str, Any]:
        """A row of table8-seeds.json: the keys above (lists), each seed's label and the spread's numbers and labels."""
        cells: dict[str, Any] = {"model": self.model, "r": self.r, "estimate": self.estimate, "same_every_seed": self.same_every_seed,
                                 "seeds": list(self.seeds), "recl": list(self.recl), "censored": list(self.censored), "labels": self.labels}
        if self.below_placebo is not None:
            cells["below_placebo"] = list(self.below_placebo)
        if self.ground_truth:
            cells["ground_truth"] = True
        return {**cells, **self.spread.record()}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SeedSpreadRow:
        """The row :meth:`record` wrote (a row of a table8-seeds.json); the spread is computed again from the readings."""
        below = record.get("below_placebo")
        return cls(record["model"], record["r"], record["estimate"], record["same_every_seed"], tuple(record["seeds"]), tuple(record["recl"]),
                   tuple(record["censored"]), None if below is None else tuple(below), seed_spread(record["recl"], record["censored"]),
                   bool(record.get("ground_truth")))

    def csv_record(self) -> dict[str, Any]:
        """A row of table8-seeds.csv: each seed's label, RECL and censoring (and placebo flag) in columns
        of its own, then the spread."""
        cells: dict[str, Any] = {"model": self.model, "r": self.r, "estimate": self.estimate, "same_every_seed": self.same_every_seed}
        below = self.below_placebo
        for k, (seed, label) in enumerate(zip(self.seeds, self.labels)):
            cells.update({f"seed_{seed}": label, f"recl_seed_{seed}": self.recl[k], f"censored_seed_{seed}": self.censored[k]})
            if below is not None:
                cells[f"below_placebo_seed_{seed}"] = below[k]
        spread = self.spread.record()
        del spread["sd_label"]
        return {**cells, **spread}


def seed_rows(rows_by_seed: Mapping[int, Sequence[Table8Row]], same_every_seed: Sequence[str] = ()) -> list[SeedSpreadRow]:
    """Each seed's :func:`recl_rows` (training seed -> that seed's group's rows) as one row per model, r and
    estimate (PAPER, and PLACEBO_AWARE where the rows carry it), in the rows' order: every seed's
    reading and their spread. ``same_every_seed``: the models that are the same for every seed."""
    seeds = list(rows_by_seed)
    if not seeds:
        raise TxlabError("no seeds' rows to summarise")
    keyed = {seed: {(row.model, row.r): row for row in rows} for seed, rows in rows_by_seed.items()}
    keys = list(keyed[seeds[0]])
    for seed in seeds[1:]:
        if set(keyed[seed]) != set(keys):
            raise TxlabError(f"seed {seed}'s group reads other models or r than seed {seeds[0]}'s: {sorted(set(keyed[seed]) ^ set(keys))}")
    rows = []
    for model, r in keys:
        readings = [keyed[seed][model, r] for seed in seeds]
        with_placebo = readings[0].placebo_aware is not None
        estimates = [(PAPER, [x.paper for x in readings])] + [(PLACEBO_AWARE, [x.placebo_aware for x in readings])] * with_placebo
        for estimate, values in estimates:
            recls, censored = tuple(int(x.recl) for x in values), tuple(bool(x.censored) for x in values)
            below = tuple(bool(x.below_placebo) for x in readings) if estimate == PAPER and with_placebo else None
            rows.append(SeedSpreadRow(model, r, estimate, model in same_every_seed, tuple(seeds), recls, censored, below,
                                      seed_spread(recls, censored), readings[0].ground_truth))
    return rows


def seed_spread_text(rows: Sequence[SeedSpreadRow]) -> TableText:
    """RECL over training seeds: one line per r, model and estimate, each seed's reading as Table 8
    prints it ('>= c', '†') and their min, max, mean and sd, with notes on what a bound means and on
    members the same for every seed."""
    if not rows:
        raise TxlabError("no RECL rows over seeds to tabulate")
    seeds = rows[0].seeds
    body = [[row.model, f"{row.r:g}", row.estimate, *row.labels, row.spread.min_label, row.spread.max_label, row.spread.mean_label,
             row.spread.sd_label + (" *" if row.spread.n_censored and row.spread.sd is not None else "")] for row in rows]
    notes = []
    if any(row.spread.n_censored for row in rows):
        notes.append("'>= c': the walk ran off the grid, so that RECL is at least c, and a min, max or mean marked '>=' is a lower "
                     "bound for the same reason. * the sd of readings some of which are such bounds: the true spread may be larger or smaller.")
    if any(any(row.below_placebo or ()) for row in rows):
        notes.append(PLACEBO_NOTE)
    same = list(dict.fromkeys(row.model for row in rows if row.same_every_seed and not row.ground_truth))
    if same:
        notes.append(f"{', '.join(same)}: the same model for every seed (used as it is); {'its' if len(same) == 1 else 'their'} RECL "
                     "changes from seed to seed only because RECL is relative to the group's other members, which are trained once per seed.")
    return TableText(["model", "r", "RECL", *(f"seed {s}" for s in seeds), "min", "max", "mean", "sd"], body, notes)


def seed_spread_markdown(rows: Sequence[SeedSpreadRow]) -> str:
    """:func:`seed_spread_text` in Markdown: what table8-seeds.md holds and the command prints."""
    return seed_spread_text(rows).markdown()


def write_seed_spread(rows: Sequence[SeedSpreadRow], stem: Path) -> list[Path]:
    """RECL over seeds as ``stem``.csv (:meth:`SeedSpreadRow.csv_record`), ``stem``.md (:func:`seed_spread_markdown`) and
    ``stem``.tex (the same in LaTeX, booktabs)."""
    stem = Path(stem)
    csv, md, tex = stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")
    write_text_atomic(csv, csv_text(pd.DataFrame.from_records([row.csv_record() for row in rows])))
    write_text_atomic(md, seed_spread_markdown(rows))
    write_text_atomic(tex, seed_spread_text(rows).latex(SEEDS_CAPTION))
    return [csv, md, tex]
