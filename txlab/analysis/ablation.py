"""Ablation studies' tables and figures (`txlab ablate`: Tables 6, 7 and 10) from their run directories:
each run's scores at every evaluation attention length, each row's seeds read at one length, the
table's typed rows (mean and sd over seeds in the study's metric) as CSV, Markdown and LaTeX, the
figure of score against attention length, the claims tested over seeds and what the runs learned.
Files only: no torch import.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter
import numpy as np
import pandas as pd

from txlab.analysis.claims import AsTrained, Claim, TestedClaim, claims_latex, claims_markdown, evaluate_claims
from txlab.analysis.figures import mean_intervals, save_figure_with_points, wrapped
from txlab.analysis.learned import learned_csv, learned_latex, learned_markdown, learned_runs
from txlab.config import RunConfig, update_dataclass
from txlab.errors import TxlabError
from txlab.fileio import DamagedFile, read_json, read_yaml_mapping, write_text_atomic
from txlab.style import MARKERS, distinct_colors, themed
from txlab.tables import count_label, csv_text, latex_table, latex_text, markdown_table

ABLATION_COLUMNS = {
    "remark": "Remark",
    "row": "Row",
    "recurrence": "Recurrence",
    "encoding": "Encoding",
    "loss": "Loss",
    "backprop_len": "Backprop Len",
    "mem_len": "Mem Len",
    "params": "Params",
    "train_memory": "Train memory (MiB)",
    "train_tokens": "Train tokens",
    "ppl_init": "PPL init",
    "ppl_best": "PPL best",
    "attn_len": "Attn Len",
    "seeds": "Seeds",
}
"""Columns an ablation table can show, with their default headers (in the paper's word, PPL: Metric.header)."""

TABLE6_COLUMNS = ("remark", "recurrence", "encoding", "loss", "ppl_init", "ppl_best", "attn_len")

ENCODING_NAMES = {"ours": "Ours", "shaw": "Shaw et al. (2018)", "vaswani": "Vaswani et al. (2017)", "alrfou": "Al-Rfou et al. (2018)"}


def ablation_eval_name(length: int, split: str, tokens: int) -> str:
    """File name of a run's score at one evaluation attention length."""
    return f"attn{length}-{split}-n{tokens or 'all'}.json"


def init_best(lengths: list[int], values: list[float], init_len: int) -> tuple[float, float, int]:
    """(value at the training length, best value, shortest length reaching the best) of one curve.

    Lower is better (perplexity, bpc); ``init_len`` must be one of ``lengths``.
    """
    if len(lengths) != len(values) or not lengths:
        raise TxlabError("init_best needs one value per length")
    by_length = dict(zip(lengths, values))
    if init_len not in by_length:
        raise TxlabError(f"the training length {init_len} was not evaluated (lengths: {sorted(by_length)})")
    best = min(by_length.values())
    return by_length[init_len], best, min(a for a, v in by_length.items() if v == best)


STUDY_REMEDY = "delete it and rerun `txlab ablate` to rebuild it"
ROW_RECORD_KEYS = {"row_id": str, "remark": str, "seed": int, "init_len": int, "eval_lens": list, "split": str, "eval_tokens": int}
"""What a study run's ablate/row.json must hold."""


def _read_json(path: Path) -> dict:
    return read_json(path, STUDY_REMEDY)


def ablation_curves(out_dir: Path, run_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of the study runs present under ``out_dir/runs``: one row per run with what the
    table needs from its config, and one row per (run, evaluation length) that has been scored."""
    runs, points = [], []
    for run_id in run_ids:
        run_dir = Path(out_dir) / "runs" / run_id
        row_file = run_dir / "ablate" / "row.json"
        if not row_file.is_file() or not (run_dir / "config.yaml").is_file():
            continue
        row = read_json(row_file, STUDY_REMEDY, keys=ROW_RECORD_KEYS)
        cfg = read_yaml_mapping(run_dir / "config.yaml", STUDY_REMEDY)
        if not (isinstance(cfg.get("model"), dict) and isinstance(cfg.get("train"), dict)):
            raise DamagedFile(run_dir / "config.yaml", "no 'model' or 'train' section", STUDY_REMEDY)
        model = cfg["model"]
        memory_file = next((f for f in (run_dir / "fit.json", run_dir / "memory.json") if f.is_file()), None)
        memory = _read_json(memory_file) if memory_file else {}
        as_trained = _as_trained_record(run_dir, cfg, row["split"], row["eval_tokens"])
        runs.append({
            "run_id": run_id, "row_id": row["row_id"], "remark": row["remark"], "seed": row["seed"], "init_len": row["init_len"],
            "recurrence": model["mem_len"] > 0, "encoding": ENCODING_NAMES.get(model["pos_enc"], model["pos_enc"]) if model["family"] in ("xl", "vanilla") else model["family"].upper(),
            "loss": cfg["train"]["loss"].capitalize(), "backprop_len": model["tgt_len"], "mem_len": model["mem_len"], "params": row.get("params"),
            "train_memory": memory["bytes"] / 2**20 if memory else None, "n_lengths": len(row["eval_lens"]),
            "train_tokens": _training_tokens(cfg),
            **_validation_context(cfg), "memory_unseen": False,
            "as_trained_value": _metric_value(as_trained) if as_trained else None, "as_trained_loss": as_trained["loss"] if as_trained else None,
        })
        for length in row["eval_lens"]:
            path = run_dir / "ablate" / ablation_eval_name(length, row["split"], row["eval_tokens"])
            if path.is_file():
                record = read_json(path, STUDY_REMEDY, keys={"loss": (int, float), "tokens": int})
                runs[-1]["memory_unseen"] |= model["mem_len"] == 0 and record.get("mem_len", 0) > 0
                metric = "ppl" if "ppl" in record else "bpc"
                points.append({"run_id": run_id, "row_id": row["row_id"], "seed": row["seed"], "attn_len": length,
                               "metric": metric, "value": record[metric], "loss": record["loss"], "tokens": record["tokens"]})
    return pd.DataFrame(runs), pd.DataFrame(points)


def _metric_value(record: dict) -> float:
    """A score record's perplexity, or bpc on a character corpus."""
    return record["ppl" if "ppl" in record else "bpc"]


def _as_trained_record(run_dir: Path, cfg: dict, split: str, tokens: int) -> dict | None:
    """The run's evaluation record read as it trained, if it has one (RUN/eval/, `txlab eval RUN --tgt-len T --mem-len M
    --no-same-length --max-tokens N`): its training segment, memory, clamp and streams, on the study's split and targets."""
    model, train = cfg["model"], cfg["train"]
    trained = {"split": split, "max_tokens": tokens, "tgt_len": model["tgt_len"], "mem_len": model["mem_len"],
               "same_length": model.get("same_length", False), "clamp_len": model.get("clamp_len", 0), "batch_size": train.get("batch_size"),
               "streams": "exact", "precision": "fp32"}
    for path in sorted((run_dir / "eval").glob(f"{split}-*.json")):
        record = _read_json(path)
        if all(record.get(key) == value for key, value in trained.items()):
            return record
    return None


def as_trained_scores(runs: pd.DataFrame) -> AsTrained:
    """Each run read as it trained (where its record is there), and the rows the protocol scores with a memory they
    never trained with: what a claim naming such a row is read again on (txlab.analysis.claims.AsTrained)."""
    read = runs[runs["as_trained_loss"].notna()] if not runs.empty else runs
    scores = pd.DataFrame({"row_id": read.get("row_id", []), "seed": read.get("seed", []), "value": read.get("as_trained_value", []),
                           "loss": read.get("as_trained_loss", [])})
    return AsTrained(frozenset(runs.loc[runs["memory_unseen"], "row_id"]) if not runs.empty else frozenset(), scores)


def _training_tokens(cfg: dict) -> int:
    """Tokens a run's training read (its steps x RunConfig.tokens_per_step), from its saved config."""
    run = update_dataclass(RunConfig(), cfg)
    return run.train.max_steps * run.tokens_per_step


def _validation_context(cfg: dict) -> dict[str, int | None]:
    """How training's periodic validation scored the run (segment, memory, targets), as
    txlab.runs.evaluate.evaluation_context resolves it (-1: as in training); None where the config lacks it."""
    model, evaluation, train = cfg["model"], cfg.get("eval") or {}, cfg["train"]
    pick = lambda key: None if evaluation.get(key) is None else model[key] if evaluation[key] < 0 else evaluation[key]  # noqa: E731
    return {"valid_tgt_len": pick("tgt_len"), "valid_mem_len": pick("mem_len"), "valid_tokens": train.get("eval_tokens")}


def _complete_points(runs: pd.DataFrame, curves: pd.DataFrame, row_id: str) -> pd.DataFrame:
    """The curve points of a row's seeds that are scored at every length (seeds still being scored wait)."""
    points = curves[curves["row_id"] == row_id] if not curves.empty else curves
    if points.empty:
        return points
    n_lengths = runs.loc[runs["row_id"] == row_id, "n_lengths"].iloc[0]
    lengths_scored = points.groupby("seed")["attn_len"].nunique()
    return points[points["seed"].isin(lengths_scored.index[lengths_scored == n_lengths])]


def seed_scores(runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """One line per finished (row, seed), the numbers every table, claim and figure of the row reads:
    the seed's score at the training length (ppl_init) and at the row's Attn Len (ppl_best), in the
    table's metric and as log-perplexity in nats (loss_init, loss_best).

    The row's Attn Len is the length where its mean over seeds is lowest (the shortest on ties): one
    length per row, as in the paper, so the row's "PPL best" is the mean of these per-seed values.
    It is chosen on the same targets it is reported on, so it is optimistic by that choice among
    ``n_lengths`` lengths (the scores are whole-split means, with no held-out half to choose on)."""
    lines = []
    for row_id, members in runs.groupby("row_id", sort=False):
        init_len = int(members.iloc[0]["init_len"])
        points = _complete_points(runs, curves, row_id)
        if points.empty:
            continue
        mean = points.groupby("attn_len")["value"].mean()
        _, _, best_len = init_best(list(mean.index), list(mean.values), init_len)
        for seed, p in points.groupby("seed"):
            at = p.set_index("attn_len")
            lines.append({"row_id": row_id, "seed": int(seed), "init_len": init_len, "attn_len": int(best_len), "n_lengths": len(at),
                          "ppl_init": float(at.loc[init_len, "value"]), "ppl_best": float(at.loc[best_len, "value"]),
                          "loss_init": float(at.loc[init_len, "loss"]), "loss_best": float(at.loc[best_len, "loss"])})
    return pd.DataFrame(lines, columns=["row_id", "seed", "init_len", "attn_len", "n_lengths", "ppl_init", "ppl_best", "loss_init", "loss_best"])


@dataclass(frozen=True)
class Metric:
    """What a study's scores are: perplexity on word corpora, bits per character on character corpora."""

    key: str
    """The key of a run's score file and of the table's ``metric`` column: 'ppl' or 'bpc'."""
    word: str
    """How headers name it: 'PPL' (the paper's word, in which study files write their headers) or 'bpc'."""
    digits: int
    """Decimals a table gives a score."""
    axis_label: str
    """How a figure's axis names it."""

    def header(self, header: str) -> str:
        """A column header written in the paper's word (ABLATION_COLUMNS, a study's ``columns``) as it
        reads for this metric: 'PPL best' is 'bpc best' on a character corpus."""
        return header.replace(METRICS["ppl"].word, self.word)


METRICS = {"ppl": Metric("ppl", "PPL", 2, "perplexity"), "bpc": Metric("bpc", "bpc", 3, "bits per character")}
"""The metrics a study scores in, by key."""


@dataclass(frozen=True)
class OverSeeds:
    """A score of a study row over its finished seeds."""

    mean: float
    """The mean over seeds."""
    sd: float | None
    """The standard deviation over seeds (n - 1); None for one seed."""

    def text(self, digits: int, latex: bool = False) -> str:
        """'29.00 ± 1.41' (LaTeX: '29.00 $\\pm$ 1.41'), '29.00' for one seed."""
        pm = " $\\pm$ " if latex else " ± "
        return f"{self.mean:.{digits}f}" + (f"{pm}{self.sd:.{digits}f}" if self.sd is not None else "")


@dataclass(frozen=True)
class AblationRow:
    """One row of an ablation table: what the study row sets and, over its finished seeds, its scores."""

    row_id: str
    """The study row's id."""
    remark: str
    """The study's remark for it ('' where none)."""
    init_len: int
    """The training attention length (segment + memory), where PPL init is read."""
    recurrence: bool
    """Whether the model carries memory across segments."""
    encoding: str
    """The positional encoding in words (a recurrent family's name for LSTM and QRNN)."""
    loss: str
    """'Full' or 'Half': the training loss over the whole segment or its second half."""
    backprop_len: int
    """The training segment (tokens backpropagated through)."""
    mem_len: int
    """The training memory."""
    params: int | None = None
    """Parameters of the model; None where the run did not record them."""
    train_memory: float | None = None
    """The peak memory of a training step in MiB, where the study measured it."""
    train_tokens: int | None = None
    """Tokens the training read: steps x streams x segment (of the attempt that finished); None where the config does not say."""
    valid_tgt_len: int | None = None
    """The segment of training's periodic validation; None where the config does not say."""
    valid_mem_len: int | None = None
    """The memory of training's periodic validation; None where the config does not say."""
    valid_tokens: int | None = None
    """The targets of training's periodic validation; None for all of them."""
    seeds: int = 0
    """Seeds finished (scored at every length); the scores below are over them."""
    metric: Metric | None = None
    """What the scores are; None before any seed finished."""
    init: OverSeeds | None = None
    """The score at the training attention length (PPL init)."""
    best: OverSeeds | None = None
    """The score at the row's Attn Len (PPL best): where its mean over seeds is lowest."""
    attn_len: int | None = None
    """The row's Attn Len."""
    n_lengths: int | None = None
    """How many evaluation lengths the row's Attn Len was chosen among."""

    def record(self) -> dict[str, Any]:
        """A row of table.csv and of the --json document: the fields above, the scores as ppl_init,
        ppl_best, ppl_init_std and ppl_best_std (in the metric named by ``metric``)."""
        return {"row_id": self.row_id, "remark": self.remark, "init_len": self.init_len, "recurrence": self.recurrence,
                "encoding": self.encoding, "loss": self.loss, "backprop_len": self.backprop_len, "mem_len": self.mem_len,
                "params": self.params, "train_memory": self.train_memory, "train_tokens": self.train_tokens, "valid_tgt_len": self.valid_tgt_len,
                "valid_mem_len": self.valid_mem_len, "valid_tokens": self.valid_tokens, "seeds": self.seeds,
                "metric": None if self.metric is None else self.metric.key,
                "ppl_init": None if self.init is None else self.init.mean, "ppl_best": None if self.best is None else self.best.mean,
                "attn_len": self.attn_len, "ppl_init_std": None if self.init is None else self.init.sd,
                "ppl_best_std": None if self.best is None else self.best.sd, "n_lengths": self.n_lengths}

    def cell(self, column: str, latex: bool = False) -> str:
        """The row's cell in ``column`` (a key of ABLATION_COLUMNS) as Markdown text, or as LaTeX (plain
        text escaped, symbols in math mode); '-' where there is no value."""
        if column in ("ppl_init", "ppl_best"):
            score = self.init if column == "ppl_init" else self.best
            return "-" if score is None or self.metric is None else score.text(self.metric.digits, latex)
        value = self.row_id if column == "row" else getattr(self, column)
        if value is None:
            return "-"
        if column == "recurrence":
            return ("$\\checkmark$" if value else "$\\times$") if latex else ("✓" if value else "✗")
        if column == "params":
            return count_label(value)
        if column == "remark":
            value = remark_at_size(value, self.params)
        if column == "train_memory":
            return f"{value:.1f}"
        if column == "train_tokens":
            return f"{value / 1e6:.2f}M"
        return latex_text(value) if latex else str(value)


def _optional(value: Any, kind: type) -> Any:
    """A setting read from the runs table, None where a run did not record it (pandas gives NaN)."""
    return None if value is None or pd.isna(value) else kind(value)


def ablation_rows(runs: pd.DataFrame, curves: pd.DataFrame) -> list[AblationRow]:
    """One table row per study row: its settings and, over its finished seeds (:func:`seed_scores`),
    the mean and standard deviation of the value at the training length and at the row's Attn Len."""
    scores = seed_scores(runs, curves)
    rows = []
    for row_id, members in runs.groupby("row_id", sort=False):
        first = members.iloc[0]
        row = AblationRow(
            row_id=str(row_id), remark=str(first["remark"]), init_len=int(first["init_len"]), recurrence=bool(first["recurrence"]),
            encoding=str(first["encoding"]), loss=str(first["loss"]), backprop_len=int(first["backprop_len"]), mem_len=int(first["mem_len"]),
            params=_optional(first["params"], int), train_memory=_optional(first["train_memory"], float),
            train_tokens=_optional(first["train_tokens"], int),
            valid_tgt_len=_optional(first["valid_tgt_len"], int), valid_mem_len=_optional(first["valid_mem_len"], int),
            valid_tokens=_optional(first["valid_tokens"], int))
        mine = scores[scores["row_id"] == row_id]
        if not mine.empty:
            spread = lambda xs: float(xs.std(ddof=1)) if len(xs) > 1 else None  # noqa: E731
            row = replace(row, seeds=len(mine), metric=METRICS[curves.loc[curves["row_id"] == row_id, "metric"].iloc[0]],
                          init=OverSeeds(float(mine["ppl_init"].mean()), spread(mine["ppl_init"])),
                          best=OverSeeds(float(mine["ppl_best"].mean()), spread(mine["ppl_best"])),
                          attn_len=int(mine["attn_len"].iloc[0]), n_lengths=int(mine["n_lengths"].iloc[0]))
        rows.append(row)
    return rows


def table_metric(rows: Sequence[AblationRow]) -> Metric:
    """The metric a table's headers name: bits per character when a row is scored in it, else perplexity."""
    return METRICS["bpc"] if any(row.metric is not None and row.metric.key == "bpc" for row in rows) else METRICS["ppl"]


def _headers(columns: Sequence[tuple[str, str]], rows: Sequence[AblationRow]) -> list[str]:
    metric = table_metric(rows)
    return [metric.header(header) for _, header in columns]


def ablation_notes(rows: Sequence[AblationRow], columns: Sequence[tuple[str, str]]) -> list[str]:
    """What the table's ± and PPL columns are, one sentence each (under the table, so no reader has to guess)."""
    headers = dict(zip((k for k, _ in columns), _headers(columns, rows)))
    notes = []
    if "ppl_init" in headers:
        notes.append(f"{headers['ppl_init']}: at the training attention length (segment + memory), the mean over seeds.")
    if "ppl_best" in headers:
        counts = sorted({r.n_lengths for r in rows if r.n_lengths})
        lengths = (f"its {counts[0]} evaluation lengths" if len(counts) == 1 else
                   f"its evaluation lengths ({counts[0]} to {counts[-1]} per row)" if counts else "its evaluation lengths")
        where = f", at {headers['attn_len']}" if "attn_len" in headers else ""
        notes.append(f"{headers['ppl_best']}: the row's lowest mean over seeds among {lengths}{where}, every seed "
                     "taken at that one length. It is chosen and reported on the same validation targets, so it is optimistic by "
                     "that choice: the scores are whole-split means, with no held-out half to choose on.")
    several = sorted({r.seeds for r in rows if r.seeds > 1})
    if several and {"ppl_init", "ppl_best"} & set(headers):
        notes.append(f"±: standard deviation over the row's seeds ({' or '.join(map(str, several))}; with n - 1); "
                     "a value without ± comes from one seed.")
    return notes


def ablation_markdown(rows: Sequence[AblationRow], columns: Sequence[tuple[str, str]]) -> str:
    """The table, then :func:`ablation_notes` as a list under it."""
    table = markdown_table(_headers(columns, rows), ([r.cell(k) for k, _ in columns] for r in rows)) + "\n"
    notes = ablation_notes(rows, columns)
    return table + ("\n" + "".join(f"- {note}\n" for note in notes) if notes else "")


def ablation_latex(rows: Sequence[AblationRow], columns: Sequence[tuple[str, str]], caption: str = "") -> str:
    """A booktabs table for a paper (needs \\usepackage{booktabs, amssymb}), :func:`ablation_notes` in its caption."""
    notes = " ".join(ablation_notes(rows, columns))
    # the notes say what ± and the PPL columns are, as under the Markdown table
    text = " ".join(latex_text(part) for part in (caption + ("." if caption and notes else ""), notes) if part)
    return latex_table([latex_text(h) for h in _headers(columns, rows)], ([r.cell(k, latex=True) for k, _ in columns] for r in rows), text)


def seed_intervals(curves: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Per study row and attention length: the mean over seeds and its t-interval at ``level``
    (NaN bounds with one seed): row_id, attn_len, seeds, mean, ci_low, ci_high."""
    return mean_intervals(curves, ["row_id", "attn_len"], "value", level).rename(columns={"n": "seeds"})


ZOOM_WHEN = 3.0
"""A figure whose highest mean is this many times its lowest draws on a log axis beside a zoom on the lowest means:
on one linear axis a row far above the others (an absolute encoding at 120) flattens the few percent the study's
comparisons are about (5.06 against 5.20)."""
ZOOM_SPAN = 1.5
"""The zoom shows the means from the lowest up to this many times it, each with its sd over seeds (the table's ±)."""


@themed
def ablation_figure(curves: pd.DataFrame, runs: pd.DataFrame, out: Path, title: str = "") -> list[Path]:
    """Perplexity (or bpc) against evaluation attention length, one line per study row (mean over
    seeds) with each seed as a thin line of the same colour, the training length marked with an open
    circle. The mean at each length is the one the table reads (its PPL best is the lowest of them).
    Where the means span more than :data:`ZOOM_WHEN` times, the axis is logarithmic and a second panel
    zooms on the lowest means (:data:`ZOOM_SPAN`), each with its sd over seeds (the table's ±). Writes ``out`` (.png, .pdf)
    and the means with their 95% t-intervals and standard deviations over seeds (.csv).

    Seeds are drawn one by one rather than as an interval band: at this scale a seed either learns a
    structure or stalls, and a t-interval over three such seeds spans the whole plot (below zero
    perplexity) where the lines show two clusters."""
    intervals = seed_intervals(curves)
    # the table's ± is the sd over seeds: the plotted numbers carry it beside the t-interval
    sd = curves.groupby(["row_id", "attn_len"], sort=False)["value"].std(ddof=1).rename("sd").reset_index()
    intervals = intervals.merge(sd, on=["row_id", "attn_len"])
    if intervals.groupby("row_id")["attn_len"].nunique().max() == 1:
        return _ablation_dots(curves, runs, intervals, out, title)
    lowest = intervals["mean"].min()
    zoom = intervals["mean"].max() > ZOOM_WHEN * lowest
    fig, axes = plt.subplots(1, 1 + zoom, figsize=(7.5 + 5 * zoom, 4.2 + 0.4 * zoom), squeeze=False)
    ax = axes[0][0]
    n_rows = intervals["row_id"].nunique()
    palette = distinct_colors(n_rows)
    for i, (row_id, points) in enumerate(intervals.groupby("row_id", sort=False)):
        points = points.sort_values("attn_len")
        color, marker = palette[i], MARKERS[i % len(MARKERS)]
        ax.plot(points["attn_len"], points["mean"], marker=marker, ms=4, lw=1.3, color=color, label=ablation_label(runs, row_id),
                ls="-" if i < 10 else "--")
        if (points["seeds"] > 1).any():
            for _, seed in curves[curves["row_id"] == row_id].groupby("seed"):
                seed = seed.sort_values("attn_len")
                ax.plot(seed["attn_len"], seed["value"], lw=0.6, alpha=0.45, color=color)
        init = int(runs.loc[runs["row_id"] == row_id, "init_len"].iloc[0])
        at_init = points[points["attn_len"] == init]
        if not at_init.empty:
            ax.plot([init], at_init["mean"], marker="o", ms=9, mfc="none", color=color)
        if zoom:  # each row a little apart in x (log axis: a factor), so that the bars at one length stay apart
            apart = 2 ** (0.01 * (i - (n_rows - 1) / 2))
            axes[0][1].errorbar(points["attn_len"] * apart, points["mean"], yerr=points["sd"].fillna(0), marker=marker, ms=4, lw=1.3,
                                color=color, capsize=2, elinewidth=0.8, ls="-" if i < 10 else "--")
    metric = curves["metric"].iloc[0]
    lengths = sorted(curves["attn_len"].unique())
    for panel in axes[0]:
        panel.set_xscale("log", base=2)  # the lengths roughly double; equal steps read as equal ratios
        panel.set_xticks(lengths, [str(a) for a in lengths])
        panel.minorticks_off()
        panel.set(xlabel="evaluation attention length", ylabel=METRICS[metric].axis_label)
    how = "thick: mean over seeds; thin: each seed; open circle: the training attention length (PPL init)"
    if zoom:
        ax.set_yscale("log")
        # 20 and 50, not 2 x 10^1 and 5 x 10^1, and no label on the other minor ticks (they crowd near the top of a decade)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}" if f"{value:g}"[0] in "25" else ""))
        ax.axhspan(lowest * 0.97, lowest * ZOOM_SPAN, color="0.5", alpha=0.12, lw=0)
        axes[0][1].set_ylim(lowest * 0.97, lowest * ZOOM_SPAN)
        axes[0][1].set_title(f"the shaded band, up to {ZOOM_SPAN:g}x the lowest mean: means \u00b1 sd over seeds (the table's \u00b1)", fontsize=8)
        ax.set_title("all rows, log scale", fontsize=8)
        fig.suptitle((title + "\n" if title else "") + how, fontsize=9)
        axes[0][1].legend(*ax.get_legend_handles_labels(), fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
    else:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_title((title + "\n" if title else "") + how, fontsize=9)
    return save_figure_with_points(fig, out, intervals).paths


def ablation_label(runs: pd.DataFrame, row_id: str) -> str:
    """A study row's legend entry: its id, its remark where it adds something, and the size its runs
    really have (a remark such as 'Transformer-XL (128M)' names the paper's model, not a cpu profile's ~1M)."""
    row = runs.loc[runs["row_id"] == row_id].iloc[0]
    remark = re.sub(PAPER_SIZE, "", str(row.get("remark") or "")).strip()
    label = row_id if not remark or remark.lower() == row_id.lower() else f"{row_id}: {remark}"
    params = row.get("params")
    return label + (f" ({count_label(params)})" if params is not None and pd.notna(params) else "")


PAPER_SIZE = re.compile(r"\s*\((\d+(?:\.\d+)?)([KMB])\)")
"""A size in a study's remark, 'Transformer-XL (151M)': the paper's model's, which a cpu or tiny run does not have."""


def remark_at_size(remark: str, params: int | None) -> str:
    """A study's remark beside the row's real size: a size in it that is not the row's within 10% ('(151M)' beside a
    tiny run's 0.19M) is dropped, as the Params column gives the real one."""
    found = PAPER_SIZE.search(remark)
    if found is None or params is None:
        return remark
    stated = float(found.group(1)) * {"K": 1e3, "M": 1e6, "B": 1e9}[found.group(2)]
    return remark if abs(stated - params) <= 0.1 * stated else PAPER_SIZE.sub("", remark).strip()


@themed
def _ablation_dots(curves: pd.DataFrame, runs: pd.DataFrame, intervals: pd.DataFrame, out: Path, title: str) -> list[Path]:
    """A study whose rows are each scored at one attention length (Table 7): one line of dots per row,
    each seed small, the mean large with its sd over seeds, the length written beside it (three lone
    points on an attention-length axis read as nothing)."""
    rows = list(dict.fromkeys(intervals["row_id"]))
    palette = distinct_colors(len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 0.7 * len(rows) + 1.6))
    for i, row_id in enumerate(rows):
        y = len(rows) - 1 - i
        mean = intervals[intervals["row_id"] == row_id].iloc[0]
        seeds = curves[curves["row_id"] == row_id]["value"]
        ax.scatter(seeds, np.full(len(seeds), y), s=14, color=palette[i], alpha=0.55, zorder=2)
        sd = mean["sd"] if pd.notna(mean["sd"]) else 0.0
        ax.errorbar([mean["mean"]], [y], xerr=[[sd], [sd]], fmt=MARKERS[i % len(MARKERS)], ms=8, color=palette[i], capsize=4, zorder=3)
        ax.annotate(f"attention length {int(mean['attn_len'])}", (mean["mean"], y), xytext=(0, 9), textcoords="offset points",
                    ha="center", fontsize=7, color="0.3")
    ax.set_yticks(range(len(rows)), [ablation_label(runs, r) for r in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.2)
    metric = curves["metric"].iloc[0]
    ax.set_xlabel(METRICS[metric].axis_label)
    ax.set_title((wrapped(title) + "\n" if title else "") + "large: mean over seeds \u00b1 sd; small: each seed", fontsize=9)
    fig.tight_layout()
    return save_figure_with_points(fig, out, intervals).paths


@dataclass(frozen=True)
class AblationReport:
    """The table, figure and claims an ablation study wrote (:func:`write_ablation_report`)."""

    rows: list[AblationRow]
    """One per row of the study: its columns, over the seeds that finished."""
    markdown: str
    """table.md."""
    files: list[str]
    """Every file written."""
    claims: list[TestedClaim]
    """The paper's claims, tested seed by seed as one family (txlab.analysis.claims)."""
    finished_runs: int
    """Runs scored at one length at least."""
    rows_finished: int
    """Rows with at least one finished seed."""


def write_ablation_report(
    out_dir: Path, fig_dir: Path, columns: list[tuple[str, str]], run_ids: list[str], title: str = "", claims: list[Claim] | None = None
) -> AblationReport:
    """The study's table (table.csv with every number, table.md, table.tex), the curves behind it
    (curves.csv) and the figure (ppl-vs-attn-len.png/.pdf), from the run directories present; with
    ``claims``, their exact paired tests over seeds as one family (claims.csv, claims.md, claims.tex;
    :func:`txlab.analysis.claims.evaluate_claims`), each row read the one way :func:`seed_scores` gives;
    on synthetic corpora, what the runs learned per token role (learned.csv, learned.md, learned.tex)."""
    out_dir, fig_dir = Path(out_dir), Path(fig_dir)
    runs, curves = ablation_curves(out_dir, run_ids)
    if runs.empty:
        raise TxlabError(f"no runs of the study under {out_dir / 'runs'} yet: run the study first")
    rows = ablation_rows(runs, curves)
    markdown = ablation_markdown(rows, columns)
    outputs = [("table.csv", csv_text(pd.DataFrame.from_records([row.record() for row in rows]))), ("table.md", markdown),
               ("table.tex", ablation_latex(rows, columns, title)), ("curves.csv", csv_text(curves))]
    tested = evaluate_claims(seed_scores(runs, curves), claims, as_trained=as_trained_scores(runs)) if claims else []
    if tested:
        outputs += [("claims.csv", csv_text(pd.DataFrame.from_records([t.record() for t in tested]))), ("claims.md", claims_markdown(tested)),
                    ("claims.tex", claims_latex(tested))]
    learned = learned_runs(out_dir, runs)
    if learned:
        outputs += [("learned.csv", learned_csv(learned)), ("learned.md", learned_markdown(learned)), ("learned.tex", learned_latex(learned))]
    files = []
    for name, text in outputs:
        files.append(write_text_atomic(out_dir / name, text))
    if not curves.empty:  # the seeds the table reads: those scored at every length
        complete = pd.concat([_complete_points(runs, curves, row_id) for row_id in runs["row_id"].unique()])
        files += ablation_figure(complete, runs, fig_dir / "ppl-vs-attn-len", title)
    return AblationReport(rows, markdown, [str(f) for f in files], tested, len(curves.groupby("run_id")) if not curves.empty else 0,
                          sum(row.seeds > 0 for row in rows))
