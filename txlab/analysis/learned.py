"""What every run of a study learned on a synthetic corpus, read from its last per-role validation in
training: the loss of each token role that a structure needing context shows in, beside the ideal
model's with and without that context; which runs stalled; and the learned-structure table of a
study (learned.csv, learned.md). Files only: no torch import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from txlab.analysis.run_logs import read_metrics
from txlab.tables import csv_text, latex_text_table, markdown_table


@dataclass(frozen=True)
class LearnedRoles:
    """What the learned-structure table shows for one family of synthetic corpora."""

    headers: dict[str, str]
    """Role -> column header, in column order; the last role is the copied one."""
    structures: tuple[str, ...]
    """The roles whose loss falls well below the no-context loss once the model learns a structure
    that needs context: a run that has learned none of them is stalled (STALL_MARGIN)."""

    def stalled(self, model: Mapping[str, float], ideal_without: Mapping[str, float]) -> bool:
        """Whether a run whose losses per role are ``model`` learned none of the structures: each
        structure role within STALL_MARGIN of the ideal model's loss without context (``ideal_without``)."""
        return not any(model[role] < ideal_without[role] - STALL_MARGIN for role in self.structures)


LEARNED_ROLES = (
    LearnedRoles({"background": "background", "hint": "hint", "source_value": "source value", "copy_value": "copied value"},
                 ("source_value", "copy_value")),
    LearnedRoles({"background": "background", "latch_emission": "latch emission", "recall_key": "recall key", "recalled_value": "recalled value"},
                 ("latch_emission", "recalled_value")),
)
"""For the copy family and the recall family."""

STALL_MARGIN = 0.5
"""Nats below the ideal model's no-context loss that a structure's role must reach to count as learned."""

COPY_BEYOND_SEGMENT = "copy_beyond_segment"
"""The column of the copies whose source lies at or beyond the training segment (only memory reaches them)."""

MEASURES = ("model", "ideal_with", "ideal_without")
"""Whose loss a line of learned.csv holds: the run's, the ideal model's with the needed context, without it."""


def learned_roles(role_names: Iterable[str]) -> LearnedRoles:
    """The LEARNED_ROLES entry of the synthetic family whose roles are ``role_names``."""
    role_names = set(role_names)
    for roles in LEARNED_ROLES:
        if set(roles.headers) <= role_names:
            return roles
    raise ValueError(f"no learned-structure roles for a corpus with roles {sorted(role_names)}")


@dataclass(frozen=True)
class RoleLosses:
    """The mean loss of one group of tokens (a role, or copies by distance) in nats."""

    tokens: int
    """How many targets the group holds."""
    model: float
    """The run's mean loss on them (NaN for no targets)."""
    ideal_with: float
    """The ideal model's, with the needed context in view."""
    ideal_without: float
    """The ideal model's, without it."""

    @classmethod
    def from_record(cls, group: Mapping[str, Any]) -> RoleLosses:
        """One role's entry of a per-role validation record (txlab.data.diagnostics.role_summary)."""
        return cls(group["tokens"], group["model"], group["ideal_with"], group["ideal_without"])


def _buckets_beyond(record: Mapping[str, Any], distance: int) -> list[Mapping[str, Any]]:
    """The copy-distance buckets holding copies that start at or beyond ``distance`` (the bucket holding ``distance``
    itself, if it starts before it, is left out)."""
    return [b for b in record["copy_distance"] if b["lo"] >= distance and b["tokens"]]


def copies_beyond(record: Mapping[str, Any], distance: int) -> RoleLosses:
    """Copied-value loss over the distance buckets that start at or beyond ``distance`` (tokens-weighted
    means of the model and of the ideal model; NaN when no copy lies that far back)."""
    buckets = _buckets_beyond(record, distance)
    tokens = sum(b["tokens"] for b in buckets)
    mean = lambda key: sum(b[key] * b["tokens"] for b in buckets) / tokens if tokens else float("nan")  # noqa: E731
    return RoleLosses(tokens, mean("model"), mean("ideal_with"), mean("ideal_without"))


def distances_beyond(record: Mapping[str, Any], distance: int) -> tuple[int, int] | None:
    """(first, last) distance D that :func:`copies_beyond` covers: the buckets are fixed bands of D, so the first
    may lie past ``distance`` (137 for a segment of 128 on recall-small); None when no copy lies that far back."""
    buckets = _buckets_beyond(record, distance)
    return (int(buckets[0]["lo"]), int(buckets[-1]["hi"]) - 1) if buckets else None


@dataclass(frozen=True)
class LearnedRun:
    """What one run of a study learned, from its last per-role validation in training."""

    row_id: str
    """The study row the run belongs to."""
    seed: int
    """Its training seed."""
    step: int
    """The training step of the validation read."""
    train_segment: int
    """The segment it was trained on (tokens backpropagated through)."""
    measured_segment: int | None
    """The segment that validation read; None where the run's config does not say."""
    measured_memory: int | None
    """The memory that validation carried; None where the run's config does not say."""
    measured_targets: int | None
    """The validation targets read; None for all of them or where the config does not say."""
    losses: dict[str, RoleLosses]
    """Role -> its losses, for the family's roles (LearnedRoles.headers) and COPY_BEYOND_SEGMENT."""
    restarts: int = 0
    """How many times a restart rule (train.max_restarts) started the run again from step 0."""
    beyond: tuple[int, int] | None = None
    """The distances D (first, last) that COPY_BEYOND_SEGMENT covers (:func:`distances_beyond`)."""

    def loss(self, measure: str, role: str) -> float:
        """The loss of ``role`` by ``measure`` (one of MEASURES)."""
        return float(getattr(self.losses[role], measure))

    def stalled(self, roles: LearnedRoles) -> bool:
        """Whether none of the family's structures was learned by this validation (LearnedRoles.stalled)."""
        return roles.stalled({r: self.loss("model", r) for r in roles.structures}, {r: self.loss("ideal_without", r) for r in roles.structures})

    def records(self) -> list[dict[str, Any]]:
        """Its lines of learned.csv: one per measure (MEASURES), with every role's loss."""
        measured = {"train_segment": self.train_segment, "measured_segment": self.measured_segment, "measured_memory": self.measured_memory,
                    "measured_targets": self.measured_targets}
        return [{"row_id": self.row_id, "seed": self.seed, "step": self.step, **measured, "what": measure,
                 **{role: self.loss(measure, role) for role in self.losses}} for measure in MEASURES]


RESTARTS_LOG = "restarts.jsonl"
"""A run's record of the attempts its restart rule abandoned, one JSON line each (txlab.runs.train)."""


def read_restarts(run_dir: Path) -> list[dict[str, Any]]:
    """The attempts a run's restart rule abandoned, oldest first ([] for a run without any)."""
    log = Path(run_dir) / RESTARTS_LOG
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


def _last_role_record(run_dir: Path) -> dict[str, Any] | None:
    """The last per-role validation record of a run's training (None off synthetic corpora)."""
    if not (Path(run_dir) / "metrics.jsonl").is_file():
        return None
    metrics = read_metrics(run_dir)
    records = metrics[metrics["split"] == "valid_by_role"] if "split" in metrics else metrics.iloc[:0]
    return None if records.empty else records.iloc[-1].to_dict()


def _setting(value: Any) -> int | None:
    """A validation setting as the table reads it: None where the config does not give it."""
    return None if value is None or pd.isna(value) else int(value)


def learned_runs(out_dir: Path, runs: pd.DataFrame) -> list[LearnedRun]:
    """What every run of a study learned on a synthetic corpus (``runs``: txlab.analysis.ablation.ablation_curves'
    runs, whose directories are under ``out_dir``/runs), from its last per-role validation in training:
    the loss of each role in its family's LEARNED_ROLES and of the copies whose source lies at or beyond
    the training segment (which only memory can resolve), beside the ideal model's. Runs without
    per-role records are left out."""
    learned = []
    for run in runs.itertuples():
        run_dir = Path(out_dir) / "runs" / run.run_id
        record = _last_role_record(run_dir)
        if record is None:
            continue
        losses = {role: RoleLosses.from_record(record["roles"][role]) for role in learned_roles(record["roles"]).headers}
        losses[COPY_BEYOND_SEGMENT] = copies_beyond(record, int(run.backprop_len))
        learned.append(LearnedRun(run.row_id, int(run.seed), int(record["step"]), int(run.backprop_len), _setting(run.valid_tgt_len),
                                  _setting(run.valid_mem_len), _setting(run.valid_tokens), losses, len(read_restarts(run_dir)),
                                  distances_beyond(record, int(run.backprop_len))))
    return learned


def learned_csv(learned: Sequence[LearnedRun]) -> str:
    """learned.csv: one line per run and measure (:meth:`LearnedRun.records`)."""
    return csv_text(pd.DataFrame([line for run in learned for line in run.records()]))


def _mean_sd(values: Sequence[float]) -> str:
    """'2.00 ± 0.14' over seeds, '2.00' for one, '-' where no value is known (no copy lies that far back)."""
    known = pd.Series(values, dtype=float).dropna()
    if known.empty:
        return "-"
    return f"{known.mean():.2f}" + (f" ± {known.std():.2f}" if len(known) > 1 else "")


def _measured_with(run: LearnedRun) -> str:
    """How a row's validation read its runs (the seeds of a row share their config)."""
    if run.measured_segment is None:
        return "-"
    return f"segment {run.measured_segment}, memory {run.measured_memory} (trained on {run.train_segment})"


def _learned_table(learned: Sequence[LearnedRun]) -> tuple[list[str], list[list[object]], list[str]]:
    """The learned-structure table as headers, rows (the ideal model's two lines, then each study row's mean ± sd
    over seeds with how it was measured) and notes saying that this is not how the table scores the row: what the
    Markdown and the LaTeX table both show."""
    known = {role for run in learned for role, losses in run.losses.items()
             if any(not math.isnan(getattr(losses, measure)) for measure in MEASURES)}
    family = learned_roles(known)
    roles = [*family.headers, COPY_BEYOND_SEGMENT]
    copied = list(family.headers.values())[-1]
    restarted = any(run.restarts for run in learned)  # the column only where a restart rule fired
    spans = {run.train_segment: run.beyond for run in sorted(learned, key=lambda run: run.train_segment) if run.beyond}
    one_span = next(iter(spans.values())) if len(set(spans.values())) == 1 else None
    headers = ["Row", "Seeds", "Stalled", *(["Restarts"] if restarted else []), "Measured with", *family.headers.values(),
               f"{copied}, D {one_span[0]}..{one_span[1]}" if one_span else f"{copied}, D past the training segment"]
    by_row: dict[str, list[LearnedRun]] = {}
    for run in learned:
        by_row.setdefault(run.row_id, []).append(run)
    first = learned[0]
    rows: list[list[object]] = []
    for measure, name in (("ideal_with", "ideal model, needed context in view"), ("ideal_without", "ideal model, without it")):
        rows.append([name, "", "", *([""] if restarted else []), "", *(_mean_sd([first.loss(measure, r)]) for r in roles)])
    for row_id, seeds in by_row.items():
        stalled = sum(run.stalled(family) for run in seeds)
        restarts = [f"{sum(run.restarts for run in seeds)} in {len(seeds)} seed{'s' * (len(seeds) > 1)}"] if restarted else []
        rows.append([row_id, len(seeds), f"{stalled} of {len(seeds)}", *restarts, _measured_with(seeds[0]),
                     *(_mean_sd([run.loss("model", r) for run in seeds]) for r in roles)])
    steps = sorted({run.step for run in learned})
    targets = sorted({run.measured_targets for run in learned if run.measured_targets is not None})
    notes = [
        f"Measured in each run's last validation during training (step {' / '.join(map(str, steps))}"
        + (f", the first {' / '.join(f'{t:,}' for t in targets)} validation targets" if targets else "")
        + ") with the segment and memory shown, not as the table scores the row (attention length A with A tokens of memory). "
        "A row measured with memory 0 sees no token before its segment here, so its copies from farther back are out of view "
        "in these numbers but not in the table's.",
        "Mean ± standard deviation over the row's seeds (n - 1); losses in nats. The last column keeps the copies whose source "
        "lies D tokens back in the distance bands that start at or past the row's training segment: "
        + ("; ".join(f"D {lo}..{hi} for a segment of {segment}" for segment, (lo, hi) in spans.items()) or "none lies that far back") + ".",
        f"Stalled: seeds on which no structure that needs context was learned at that step ({' and '.join(s.replace('_', ' ') for s in family.structures)} "
        f"all within {STALL_MARGIN} nats of the ideal model's loss without context). Every run is counted; none was dropped"
        + (". Restarts: how often the study's restart rule (train.max_restarts) started a seed again from step 0; a seed's numbers are "
           "those of its last attempt, and each run's restarts.jsonl keeps the attempts abandoned." if restarted else " or restarted."),
    ]
    return headers, rows, notes


def learned_markdown(learned: Sequence[LearnedRun]) -> str:
    """The learned-structure table as Markdown (:func:`_learned_table`), its notes as a list under it."""
    headers, rows, notes = _learned_table(learned)
    return markdown_table(headers, rows) + "\n\n" + "".join(f"- {note}\n" for note in notes)


def learned_latex(learned: Sequence[LearnedRun]) -> str:
    """The learned-structure table as a booktabs table for a paper (:func:`_learned_table`), its notes as the caption."""
    return latex_text_table(*_learned_table(learned))
