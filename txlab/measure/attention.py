"""Where a trained Transformer-XL attends: the figures of the paper's Appendix D.

:func:`attention_analysis` streams a split through the model with its evaluation memory, records
every layer's attention (:func:`txlab.models.transformer.capture_attention`) once the memory is full, and writes:

- Figure 5: for every head of every layer, the attention probability averaged over all queries, as
  a function of the relative distance from query to key (rows: heads grouped by layer; columns:
  distance 0 = the query's own token). Each row sums to one.
- Figure 6: the heads with the widest span (largest mean attended distance in Figure 5), for a
  sample position: the last ``sample_rows`` queries of the last segment read in the first stream
  (rows), against every context position they see, memory included (columns).
- Figure 7: the Figure 5 average for the score terms (a) content-content, (b) content-position and
  (d) global position bias taken separately: each term alone is put through the softmax over the
  same keys, then averaged by distance, as the paper does. (c), the global content bias, is left
  out as in the paper (it can be asked for).

Positional schemes: the paper's (``ours``) has all four terms. Shaw et al. have (a) and (b) only, so
Figure 7 shows those and says (d) does not exist. The absolute schemes (``vaswani``, ``alrfou``) add
positions to the inputs, so the score is one product with no separate terms: Figure 7 is skipped
with a note. Figures 5 and 6 work for every scheme. Models that are not Transformer-XL (the vanilla
Transformer, LSTM, QRNN) are refused.

Layers and heads are numbered from 1 in every output (layer 1 is the bottom layer), as the paper does.

The figures are drawn from the tables written beside them (:func:`draw_attention_figures`), so
:func:`redraw_attention` draws them again from those tables alone, without the checkpoint that
committed runs do not keep.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.colors import LogNorm, PowerNorm
from matplotlib.ticker import MaxNLocator

from txlab.analysis.figures import SPLIT_NAMES, save_figure, sized_label
from txlab.analysis.run_logs import run_label
from txlab.config import RunConfig, load_config, update_dataclass
from txlab.data.batching import batchify
from txlab.data.corpus import Corpus, load_corpus_for_model
from txlab.data.registry import corpus_in_words
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import read_json, write_json_atomic, write_text_atomic
from txlab.models.attention import SCORE_TERMS, AttentionRecord
from txlab.models.hf import is_hf_spec
from txlab.models.transformer import TransformerXL, capture_attention
from txlab.progress import Progress
from txlab.runs.checkpoint import Checkpoint, load_checkpoint
from txlab.runs.evaluate import evaluation_context, read_in_chunks
from txlab.runs.zoo import parameter_count
from txlab.style import colors, sequential_cmap, themed
from txlab.tables import csv_text
from txlab.workspace import command_prefix, resolve

PAPER_TERMS = ("a", "b", "d")
"""Figure 7's terms: (c), the global content bias, is a prior over keys whatever the query, so the paper leaves it out."""

MEMORY_EDGE = colors(4)[3]
"""The palette's vermillion: the dashed line between the memory and the current segment in Figure 6."""


# --------------------------------------------------------------------------------------------------
# Averages by distance


def by_distance(probs: torch.Tensor) -> torch.Tensor:
    """Sum of attention probabilities [B, H, T, K] over batch and queries, by distance: [H, K] float64.

    Column d holds the probability mass at distance d (query i sits at window position K-T+i, so
    key j is at distance K-T+i-j). Future keys have probability exactly 0 and are folded onto d = 0.
    """
    _, n_head, n_query, n_keys = probs.shape
    query_pos = torch.arange(n_keys - n_query, n_keys, device=probs.device)[:, None]  # [T, 1]
    distance = (query_pos - torch.arange(n_keys, device=probs.device)[None, :]).clamp(min=0)  # [T, K]
    flat = probs.sum(0, dtype=torch.float64).flatten(1)  # [H, T*K]
    return flat.new_zeros(n_head, n_keys).index_add_(1, distance.flatten(), flat)  # [H, K]


@dataclass
class _Averages:
    """Running sums by distance for the full attention and each term, per layer: [H, D] each."""

    terms: Sequence[str]
    attention: list[torch.Tensor] = field(default_factory=list)
    by_term: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    n_queries: int = 0

    def add(self, records: list[AttentionRecord]) -> None:
        """Add one chunk: the record of every layer, bottom first."""
        for layer, record in enumerate(records):
            self._accumulate(self.attention, layer, by_distance(record.probs))
            for term in self.terms:
                alone = (record.terms[term] + record.mask).softmax(-1)  # [B, H, T, K]: this term alone over the same keys
                self._accumulate(self.by_term.setdefault(term, []), layer, by_distance(alone))
        batch, _, n_query, _ = records[0].probs.shape
        self.n_queries += batch * n_query

    @staticmethod
    def _accumulate(sums: list[torch.Tensor], layer: int, chunk: torch.Tensor) -> None:
        if layer == len(sums):
            sums.append(chunk)
            return
        width = max(sums[layer].size(1), chunk.size(1))  # chunks differ in K while the memory fills
        sums[layer] = _pad(sums[layer], width) + _pad(chunk, width)

    def means(self, sums: list[torch.Tensor]) -> np.ndarray:
        """[L, H, D] probability by distance averaged over queries, D = the longest distance any query saw + 1."""
        width = max(s.size(1) for s in sums)
        mean = torch.stack([_pad(s, width) for s in sums]).cpu().numpy() / self.n_queries  # [L, H, D]
        seen = np.flatnonzero(mean.sum((0, 1)) > 0)
        return mean[:, :, : seen[-1] + 1]


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, width - x.size(1)))


def mean_distance(by_dist: np.ndarray) -> np.ndarray:
    """Mean attended distance [...] of distributions over distance [..., D]."""
    return by_dist @ np.arange(by_dist.shape[-1])


# --------------------------------------------------------------------------------------------------
# Reading the split


@dataclass
class _Sample:
    """The attention of one chunk of the first stream, for Figure 6."""

    probs: np.ndarray
    """[L, H, T, K] probabilities over the window's keys."""
    visible: np.ndarray
    """[T, K] bool: which keys each query may attend."""
    start: int
    """Position in the split of the chunk's first query."""


def _collect(model: TransformerXL, streams: torch.Tensor, seg_len: int, warm: int, n_segments: int, terms: Sequence[str],
             progress: bool) -> tuple[_Averages, _Sample]:
    """Read ``warm`` tokens of every stream to fill the memory, then ``n_segments`` recorded chunks."""
    averages = _Averages(terms)
    sample = None
    n_chunks = warm // seg_len + n_segments
    with torch.inference_mode(), capture_attention(model) as records:
        chunks = read_in_chunks(model, streams[:, : n_chunks * seg_len], seg_len)
        for start, _ in Progress(chunks, total=n_chunks, desc="attention", unit="seg", disable=not progress, leave=False):
            if start >= warm:
                chunk = [layer.pop() for layer in records]
                averages.add(chunk)
                sample = _Sample(torch.stack([r.probs[0] for r in chunk]).cpu().numpy(), chunk[0].mask.isfinite().cpu().numpy(), start)
            for layer in records:  # the warm-up chunks are not needed
                layer.clear()
    return averages, sample


def _check_terms(model: TransformerXL, terms: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """The terms Figure 7 shows, and notes on those of the paper's the model lacks."""
    have = model.blocks[0].attn.terms
    scheme = model.pos_enc
    if terms is None:
        if not have:
            return [], [f"no Figure 7: with pos_enc {scheme!r} positions are added to the inputs, so the attention score is "
                        "one product that does not split into content and position terms"]
        missing = [t for t in PAPER_TERMS if t not in have]
        notes = [f"Figure 7 has no term ({t}) {SCORE_TERMS[t]}: the pos_enc {scheme!r} score has only "
                 f"{', '.join(f'({h})' for h in have)}" for t in missing]
        return [t for t in PAPER_TERMS if t in have], notes
    unknown = [t for t in terms if t not in SCORE_TERMS]
    if unknown:
        raise TxlabError(f"unknown score term {unknown[0]!r}: the terms are " + ", ".join(f"{k} ({v})" for k, v in SCORE_TERMS.items()))
    absent = [t for t in terms if t not in have]
    if absent:
        what = (f"its score has only {', '.join(f'({h})' for h in have)}" if have else
                "positions are added to the inputs, so the score has no separate terms")
        raise TxlabError(f"this model (pos_enc {scheme!r}) has no term ({absent[0]}) {SCORE_TERMS[absent[0]]}: {what}")
    return list(dict.fromkeys(terms)), []


def _load(run_dir: Path, split: str, device: str) -> tuple[Checkpoint, Corpus]:
    needs = "attention analysis needs a Transformer-XL run (model.family 'xl'), whose attention reaches back into its memory by relative distance"
    if is_hf_spec(str(run_dir)):
        raise TxlabError(f"{run_dir} is a Hugging Face checkpoint: {needs}")
    if not Path(run_dir).is_dir():
        raise TxlabError(f"no run directory {run_dir}")
    ckpt = load_checkpoint(run_dir, map_location=device)
    family = ckpt.config.model.family
    if family != "xl":
        kind = {"vanilla": "a vanilla Transformer (absolute positions, no memory)", "lstm": "an LSTM", "qrnn": "a QRNN",
                "hf": "a Hugging Face architecture (GPT-2 or Llama)"}.get(family, family)
        raise TxlabError(f"{run_dir} is {kind}: {needs}")
    return ckpt, load_corpus_for_model(ckpt.config.data, ckpt.meta["vocab_hash"], ckpt.vocab, split, str(run_dir), progress=False)


# --------------------------------------------------------------------------------------------------
# The command


def attention_analysis(
    run_dir: Path,
    *,
    split: str = "valid",
    n_targets: int = 10_000,
    tgt_len: int | None = None,
    mem_len: int | None = None,
    batch_size: int | None = None,
    heads: int = 3,
    sample_rows: int = 16,
    terms: Sequence[str] | None = None,
    out_dir: Path | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> dict[str, Any]:
    """Appendix D's Figures 5-7 for a trained Transformer-XL run, with the numbers behind them.

    Reads at least ``n_targets`` queries of ``split`` (0 = the whole split) with the run's evaluation
    settings (``tgt_len``, ``mem_len`` and ``batch_size`` override them), after filling the memory.
    ``terms``: Figure 7's terms (default: those of (a), (b), (d) the model has). Writes under
    ``out_dir/<run name>/`` (default ``<home>/figures/attention``, see txlab.workspace) and returns the settings, per-head mean distances, the widest heads,
    notes on what was left out, and the files written.
    """
    run_dir = Path(run_dir)
    if n_targets < 0 or heads < 1 or sample_rows < 1:
        raise TxlabError("--tokens must be >= 0 (0 = the whole split), --heads and --sample-rows >= 1")
    check_device(device)
    ckpt, corpus = _load(run_dir, split, device)
    model: TransformerXL = ckpt.model.eval()
    terms, notes = _check_terms(model, terms)
    changes = {k: v for k, v in {"tgt_len": tgt_len, "mem_len": mem_len, "batch_size": batch_size}.items() if v is not None}
    eval_cfg = update_dataclass(ckpt.config.eval, changes)
    seg_len, context = evaluation_context(ckpt.config.model, eval_cfg)
    model.set_context(context)

    streams = torch.as_tensor(batchify(corpus.split(split), eval_cfg.batch_size).astype(np.int64), device=model.device)  # [B, n]
    warm = math.ceil(context.mem_len / seg_len) * seg_len  # the memory is full from here on
    available = (streams.size(1) - warm) // seg_len
    wanted = math.ceil(n_targets / (streams.size(0) * seg_len)) if n_targets else available
    if available < 1:
        raise TxlabError(f"the {split} split is too short: each of {streams.size(0)} streams needs {warm} tokens to fill the "
                         f"memory and {seg_len} more to record one segment, and has {streams.size(1)}")
    averages, sample = _collect(model, streams, seg_len, warm, min(wanted, available), terms, progress)

    attention = averages.means(averages.attention)  # [L, H, D]
    term_means = {t: averages.means(averages.by_term[t]) for t in terms}
    spans = mean_distance(attention)  # [L, H]
    widest = [tuple(int(i) for i in np.unravel_index(flat, spans.shape)) for flat in np.argsort(-spans, axis=None)[:heads]]

    target = Path(out_dir or resolve("figures/attention")) / run_dir.name
    rows = min(sample_rows, seg_len)
    tables = _write_tables(target, attention, term_means, widest, sample, rows, streams[0].cpu().numpy(), corpus)
    command = (f"{command_prefix()} attention {run_dir} --split {split} --tokens {n_targets} --tgt-len {seg_len} --mem-len {context.mem_len} "
               f"--batch-size {streams.size(0)} --heads {heads} --sample-rows {sample_rows}" + (f" --terms {','.join(terms)}" if terms else ""))
    summary = {
        "command": command, "run": str(run_dir), "label": run_label(run_dir), "step": ckpt.meta["step"], "split": split, "queries": averages.n_queries,
        "tgt_len": seg_len, "mem_len": context.mem_len, "same_length": context.same_length, "clamp_len": context.clamp_len,
        "pos_enc": model.pos_enc, "terms": terms, "notes": notes,
        "heads": [{"layer": l + 1, "head": h + 1, "mean_distance": float(spans[l, h])} for l, h in np.ndindex(*spans.shape)],
        "widest": [{"layer": l + 1, "head": h + 1, "mean_distance": float(spans[l, h])} for l, h in widest],
        "term_mean_distance": {t: float(mean_distance(m).mean()) for t, m in term_means.items()},
        "sample_queries": [sample.start + seg_len - rows, sample.start + seg_len - 1],
    }
    figures = draw_attention_figures(target, summary, model_in_words(ckpt.config))
    summary["files"] = [str(p) for p in [*tables, *figures, target / "attention.json"]]
    write_json_atomic(target / "attention.json", summary)
    return summary


def redraw_attention(run_dir: Path, out_dir: Path | None = None) -> dict[str, Any]:
    """Figures 5-7 drawn again from the tables :func:`attention_analysis` wrote in ``out_dir/<run name>/``
    (attention.json beside them), titled from the run's config.yaml: no checkpoint needed, nothing is read
    through the model. Returns attention.json's summary with the figures written."""
    run_dir = Path(run_dir)
    target = Path(out_dir or resolve("figures/attention")) / run_dir.name
    if not (target / "attention.json").is_file():
        raise TxlabError(f"no attention.json in {target}: the tables are drawn again from where `txlab attention {run_dir}` wrote them "
                         "(give the same --out-dir)")
    if not (run_dir / "config.yaml").is_file():
        raise TxlabError(f"{run_dir} has no config.yaml, which names the model and its size in the titles: is it a run directory made by `txlab train`?")
    summary = read_json(target / "attention.json", f"delete it and run `txlab attention {run_dir}` again (it needs the checkpoint)")
    figures = draw_attention_figures(target, summary, model_in_words(load_config(run_dir / "config.yaml")))
    return {**summary, "files": [str(p) for p in figures]}


def model_in_words(cfg: RunConfig) -> str:
    """The model of a run as the titles name it, on two lines: 'Transformer-XL (xl128m), 0.96M parameters,
    cpu size' and 'on the synthetic corpus (...)': the size it really has, not its preset's paper size."""
    size = f", {cfg.size} size" if cfg.size else ""
    return f"{sized_label(cfg.preset or cfg.name, parameter_count(cfg))}{size}\non {corpus_in_words(cfg.data.corpus)}"


# --------------------------------------------------------------------------------------------------
# Tables and figures


def _distance_table(means: np.ndarray, keys: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per (layer, head): mean distance, then the probability at each distance d0, d1, ..."""
    n_layer, n_head, width = means.shape
    rows = pd.DataFrame({"layer": np.repeat(np.arange(1, n_layer + 1), n_head), "head": np.tile(np.arange(1, n_head + 1), n_layer)})
    for key, value in (keys or {}).items():
        rows.insert(0, key, value)
    rows["mean_distance"] = mean_distance(means).reshape(-1)
    probs = pd.DataFrame(means.reshape(n_layer * n_head, width), columns=[f"d{d}" for d in range(width)])
    return pd.concat([rows, probs], axis=1)


def _write_tables(target, attention, term_means, widest, sample, rows, stream, corpus) -> list[Path]:
    """figure5.csv, figure6.csv with figure6_context.csv, figure7.csv (with terms): every number the figures draw."""
    tables = {"figure5.csv": _distance_table(attention)}
    tables["figure6.csv"], tables["figure6_context.csv"] = _sample_tables(sample, widest, rows, stream, corpus)
    if term_means:
        tables["figure7.csv"] = pd.concat([_distance_table(m, {"term": t}) for t, m in term_means.items()], ignore_index=True)
    for name, table in tables.items():
        write_text_atomic(target / name, csv_text(table, float_format="%.6g"))
    return [target / name for name in tables]


@themed
def draw_attention_figures(target: Path, summary: dict[str, Any], model: str) -> list[Path]:
    """Figures 5, 6 and 7 (with score terms) from the tables in ``target``, with the settings
    of ``summary`` (attention.json's fields) and ``model`` (:func:`model_in_words`) in the titles.

    The analysis draws its figures this way too, from the tables it has just written, so a redraw
    gives the same figures."""
    target = Path(target)
    split = SPLIT_NAMES.get(summary["split"], summary["split"])
    setting = (f"{split} split, {summary['queries']:,} queries, segment {summary['tgt_len']}, memory {summary['mem_len']}"
               f"{' (same length)' if summary['same_length'] else ''}, step {summary['step']}")

    def heading(what: str) -> str:
        return "\n".join([what, model, setting])

    files = save_figure(_heatmap_figure({"": _distances(_read_table(target / "figure5.csv"))},
                                        heading("Figure 5: average attention by relative distance, every head")), target / "figure5.png")
    widest = len(summary["widest"])
    files += save_figure(_sample_figure(_read_sample(target, summary), summary,
                                        heading(f"Figure 6: the {widest} widest-span head{'s' if widest != 1 else ''} at one position")),
                         target / "figure6.png")
    if summary["terms"]:
        terms = _read_table(target / "figure7.csv")
        panels = {f"({t}) {SCORE_TERMS[t]}": _distances(terms[terms["term"] == t]) for t in dict.fromkeys(terms["term"])}
        title = heading("Figure 7: each score term alone, averaged by distance")
        if summary["notes"]:
            title += "\n" + "; ".join(summary["notes"])
        files += save_figure(_heatmap_figure(panels, title), target / "figure7.png")
    return files


def _distances(table: pd.DataFrame) -> np.ndarray:
    """[L, H, D] probabilities by distance from a table of :func:`_distance_table`."""
    n_layer, n_head = int(table["layer"].max()), int(table["head"].max())
    return table.sort_values(["layer", "head"]).filter(regex=r"^d\d+$").to_numpy().reshape(n_layer, n_head, -1)


def _read_table(path: Path, **options: Any) -> pd.DataFrame:
    if not path.is_file():
        raise TxlabError(f"no {path.name} in {path.parent}: run `txlab attention` on the run again to write its tables")
    return pd.read_csv(path, **options)


def _heatmap_figure(panels: dict[str, np.ndarray], title: str):
    """Side-by-side heatmaps of [L, H, D] averages: a row per head, grouped by layer, a column per distance.

    imshow under the shared theme rather than seaborn's heatmap: hundreds of distance columns need a
    numeric axis with a few ticks (heatmap labels every cell) and lines between the layers."""
    first = next(iter(panels.values()))
    n_layer, n_head, _ = first.shape
    positive = np.concatenate([m[m > 0] for m in panels.values()])
    # A log scale: the mass at distance 0-2 is orders of magnitude above the tail the figure is about.
    norm = LogNorm(vmin=max(np.percentile(positive, 1), positive.max() * 1e-6), vmax=positive.max())
    height = min(14.0, 1.6 + 0.16 * n_layer * n_head)
    # at most two panels a row: Figure 7's four terms in one row made a 24-inch strip with unreadable text
    n_cols = min(2, len(panels))
    n_rows = -(-len(panels) // n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(6.0 * n_cols + 1.5, height * n_rows + 0.6), squeeze=False, sharey=True,
                             layout="constrained")
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, means) in zip(axes.flat, panels.items()):
        grid = np.ma.masked_less_equal(means.reshape(n_layer * n_head, -1), 0)  # [L*H, D]
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=sequential_cmap(), norm=norm,
                          extent=(-0.5, grid.shape[1] - 0.5, n_layer * n_head - 0.5, -0.5))
        for layer in range(1, n_layer):
            ax.axhline(layer * n_head - 0.5, color="0.4", lw=0.6)
        ax.set(xlabel="relative distance (0 = the query's own token)", title=name)
        ax.grid(False)  # the theme's grid would cross the cells
    for row in axes:
        row[0].set_yticks([l * n_head + (n_head - 1) / 2 for l in range(n_layer)], [f"layer {l + 1}" for l in range(n_layer)])
        row[0].set_ylabel(f"heads 1..{n_head} of each layer")
    fig.colorbar(image, ax=axes.ravel().tolist(), label="mean attention probability (log scale)", fraction=0.03, pad=0.01)
    fig.suptitle(title, fontsize=9)
    return fig


def _sample_tables(sample: _Sample, widest, rows, stream, corpus) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Figure 6's numbers: for each widest head, the last ``rows`` queries of the sample chunk with their
    attention by distance over the keys they see (figure6.csv), and the context positions any of them
    sees with their tokens (figure6_context.csv)."""
    _, _, n_query, n_keys = sample.probs.shape
    visible = sample.visible[n_query - rows :]  # [rows, K]
    seen = np.flatnonzero(visible.any(0))
    keys = np.arange(seen[0], seen[-1] + 1)  # window keys any sample query sees
    visible = visible[:, keys]  # [rows, C]
    queries = np.arange(sample.start + n_query - rows, sample.start + n_query)  # split positions
    context = sample.start + n_query - n_keys + keys  # split positions of those keys
    distance = queries[:, None] - context[None, :]  # [rows, C]
    table = []
    for layer, head in widest:
        probs = sample.probs[layer, head, n_query - rows :][:, keys]  # [rows, C]
        for row, query in enumerate(queries):
            seen_row = visible[row][::-1]  # context runs forward, so reversed it runs from distance 0 back
            cells = zip(distance[row][::-1][seen_row], probs[row][::-1][seen_row])
            table.append({"layer": layer + 1, "head": head + 1, "query_position": int(query),
                          "query_token": corpus.vocab.symbols[stream[query]], **{f"d{d}": p for d, p in cells}})
    tokens = pd.DataFrame({"position": context, "token": corpus.vocab.decode(stream[context])})
    return pd.DataFrame(table), tokens


def _read_sample(target: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Figure 6's panels from figure6.csv and figure6_context.csv: per widest head, its queries, the
    context positions, and the [queries, positions] attention (NaN where a query does not see the key)."""
    table = _read_table(target / "figure6.csv")
    context = _read_table(target / "figure6_context.csv", usecols=["position"])["position"].to_numpy()
    columns = [c for c in table.columns if re.fullmatch(r"d\d+", c)]
    distance = np.array([int(c[1:]) for c in columns])
    panels = []
    for head in summary["widest"]:
        mine = table[(table["layer"] == head["layer"]) & (table["head"] == head["head"])].sort_values("query_position")
        queries = mine["query_position"].to_numpy()
        probs = np.full((len(queries), len(context)), np.nan)
        for row, (query, values) in enumerate(zip(queries, mine[columns].to_numpy(dtype=float))):
            seen = ~np.isnan(values)  # the distances this query sees
            probs[row, query - distance[seen] - context[0]] = values[seen]
        panels.append({**head, "queries": queries, "context": context, "probs": probs})
    return panels


def _sample_figure(panels: list[dict[str, Any]], summary: dict[str, Any], title: str):
    """Figure 6: one panel per head, the sample queries against the context positions they see."""
    segment_start = summary["sample_queries"][1] + 1 - summary["tgt_len"]  # the sample queries end their segment
    rows = len(panels[0]["queries"])
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.4 + len(panels) * (0.6 + 0.11 * rows)), squeeze=False,
                             layout="constrained")
    for ax, panel in zip(axes[:, 0], panels):
        probs, queries, context = panel["probs"], panel["queries"], panel["context"]
        # A square-root scale: the patterns of wide heads are many small probabilities, not a few large ones.
        image = ax.imshow(probs, aspect="auto", interpolation="nearest", cmap=sequential_cmap(), norm=PowerNorm(0.5, vmin=0, vmax=np.nanmax(probs)),
                          extent=(context[0] - 0.5, context[-1] + 0.5, queries[-1] + 0.5, queries[0] - 0.5))
        ax.grid(False)
        ax.axvline(segment_start - 0.5, color=MEMORY_EDGE, lw=0.8, ls="--")
        ax.set_title(f"layer {panel['layer']}, head {panel['head']} (mean distance {panel['mean_distance']:.1f}); "
                     "dashed line: memory | current segment", fontsize=8)
        ax.set_ylabel("query position")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.colorbar(image, ax=ax, pad=0.01, fraction=0.03, label="attention (sqrt scale)")
    axes[-1, 0].set_xlabel("context position in the first stream (memory, then the current segment)")
    fig.suptitle(title, fontsize=9)
    return fig
