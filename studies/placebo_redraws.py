"""How much the placebo-aware RECL moves with where the far spans are read, under two rules, on a trained group.

A group's placebo reads each target's far span ``offset`` units on (txlab.measure.reading.far_starts). Two rules:

- ``one``: one offset for every block of the table (the rule before 2026-11-29, there half the split); a redraw draws
  that one offset anew;
- ``per-block``: each block its own offset (txlab.measure.reading.placebo_offsets, today's rule); a redraw draws them
  all anew.

Both draw in the same range (placebo_offsets' [n/4, 3n/4), cleared for the grid), by redraw seeds 0..K-1; the target
blocks and the main losses stay the group's. For each rule and redraw the group is scored as `txlab recl` scores it
(txlab.drivers.recl.run.score_group: the same r, bootstrap and seed), and the script reports, per member and r, the
placebo-aware readings over the redraws, whether they moved, and how often one redraw's reading lies inside another's
95% interval (the interval is meant to carry this variation: under ``one`` it resamples targets only).

Members are collected in memory (their kept tables are neither read nor touched); each redraw is appended to
OUT/redraws.csv as it finishes, so a rerun goes on where one stopped. Words or tokens, as the group is:

    python studies/placebo_redraws.py --group RUN_DIR RUN_DIR ... --text runs/words-synthetic-every --tokenizer char \
        --set grid=8:160:8 --out results/recl/placebo-redraws-...
    TXLAB_HOME=. python studies/placebo_redraws.py --study studies/recl-words.yaml --profile cpu-synthetic-every \
        --group tokenizers --train-seed 0 --set batch_size=128 --out results/recl/placebo-redraws-words-synthetic-every-seed0

(A study's runs are found under the workspace home, as `txlab --home .` finds them: TXLAB_HOME=. here.)
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from txlab.drivers.recl.groups import resolve_groups
from txlab.drivers.recl.run import score_group
from txlab.drivers.recl.sources import WordSource, group_source, load_member
from txlab.measure.losses import GroupLosses, collect_losses, sample_blocks
from txlab.measure.reading import placebo_offsets
from txlab.measure.words import collect_word_losses, word_group

RULES = ("one", "per-block")


def offsets_of(rule: str, n: int, blocks: int, redraw: int, grid) -> np.ndarray:
    """[blocks] far-span offsets of one redraw: ``one`` repeats a single drawn offset, ``per-block`` draws each."""
    if rule == "one":
        return np.repeat(placebo_offsets(n, 1, redraw, grid), blocks)
    return placebo_offsets(n, blocks, redraw, grid)


def word_losses(models, source: WordSource, offsets: np.ndarray, batch_size: int) -> tuple[GroupLosses, np.ndarray]:
    """The group in words with the far spans at ``offsets``: (losses as `txlab recl` scores them, each target's bytes)."""
    tables = [collect_word_losses(m, source.words, source.collection, offsets=offsets, batch_size=batch_size) for m in models]
    words = word_group(tables, source.words, source.collection)
    return GroupLosses(list(words.members), words.losses, words.grid, words.targets, words.block_len, source.sha256,
                       dict.fromkeys(words.members), [], words.placebo), words.span_bytes


MAIN: dict[str, np.ndarray] = {}
"""A member's main table in tokens, computed once: only the placebo moves between redraws."""


def token_losses(models, source, offsets: np.ndarray, batch_size: int) -> tuple[GroupLosses, None]:
    """The group in tokens with the far spans at ``offsets`` (every member reads the group's one token stream)."""
    c = source.collection
    tokens = source.corpus.split(c.split)
    starts = sample_blocks(len(tokens), c.blocks, c.block_len, c.grid[-1], c.seed)
    main, placebo = [], []
    for m in models:
        kwargs = dict(tgt_len=m.tgt_len or c.grid[-1], context=m.context, precision=m.precision, batch_size=batch_size)
        if m.name not in MAIN:
            MAIN[m.name] = collect_losses(m.model, tokens, c.grid, starts, c.block_len, **kwargs)
        main.append(MAIN[m.name])
        placebo.append(collect_losses(m.model, tokens, c.grid, starts, c.block_len, placebo=True, offsets=offsets, **kwargs))
    targets = (starts[:, None] + np.arange(c.block_len)).reshape(-1)
    names = [m.name for m in models]
    return GroupLosses(names, np.stack(main), c.grid, targets, c.block_len, source.sha256,
                       {m.name: m.model.max_context for m in models}, [], np.stack(placebo)), None


def redraw_rows(args: argparse.Namespace) -> tuple[pd.DataFrame, dict]:
    """Every (redraw, rule) not yet in ``args.out``/redraws.csv, scored and appended as it finishes (a rerun resumes)."""
    options = None if args.study else {"text": args.text, "tokenizer": args.tokenizer}
    (group,) = resolve_groups(args.group, args.study, args.profile, args.name, options, args.set)
    seed = args.train_seed if group.settings.train_seeds else None
    members = group.resolved[seed]
    source = group_source(group, progress=False)
    models = [dataclasses.replace(load_member(m, group.settings), home=None) for m in members]  # in memory: kept tables untouched
    c, labels = group.collection, [m.label for m in members]
    n = len(source.words) if isinstance(source, WordSource) else len(source.corpus.split(c.split))
    done_file = args.out / "redraws.csv"
    rows = pd.read_csv(done_file).to_dict("records") if done_file.is_file() else []
    done = {(row["rule"], row["redraw"]) for row in rows}
    args.out.mkdir(parents=True, exist_ok=True)
    for redraw, rule in itertools.product(range(args.redraws), RULES):  # both rules of a redraw, then the next
        if (rule, redraw) in done:
            continue
        offsets = offsets_of(rule, n, c.blocks, redraw, c.grid)
        began = time.time()
        losses, _ = (word_losses if isinstance(source, WordSource) else token_losses)(models, source, offsets, group.settings.batch_size)
        scored = score_group(losses, labels, group.settings)
        for row in scored.rows:
            p = row.placebo_aware
            rows.append({"rule": rule, "redraw": redraw, "offsets": " ".join(map(str, offsets.tolist())), "model": row.model, "r": row.r,
                         "recl": row.paper.recl, "placebo_recl": p.recl, "placebo_low": p.interval.low, "placebo_high": p.interval.high,
                         "placebo_censored": p.censored, "n_targets": len(losses.targets)})
        pd.DataFrame(rows).to_csv(done_file, index=False)
        print(f"{rule} redraw {redraw}: offsets {offsets.tolist()} scored in {time.time() - began:.0f} s", flush=True)
    about = {"command": " ".join(sys.argv), "group": group.name, "train_seed": seed, "unit": c.unit, "grid": list(c.grid),
             "blocks": c.blocks, "block_len": c.block_len, "n": n, "rs": list(group.settings.rs), "n_boot": group.settings.n_boot,
             "members": [str(m.run_dir) for m in members], "redraws": args.redraws,
             "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
    return pd.DataFrame(rows), about


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per rule, member and r: the placebo-aware readings over the redraws, whether they moved, their range, and the
    share of ordered pairs of redraws (i != j) whose reading j lies in redraw i's interval."""
    out = []
    for (rule, model, r), part in table.groupby(["rule", "model", "r"], sort=False):
        readings = part["placebo_recl"].to_numpy()
        lows, highs = part["placebo_low"].to_numpy(), part["placebo_high"].to_numpy()
        pairs = [(i, j) for i in range(len(part)) for j in range(len(part)) if i != j]
        inside = sum(lows[i] <= readings[j] <= highs[i] for i, j in pairs)
        out.append({"rule": rule, "model": model, "r": r, "readings": " ".join(str(int(x)) for x in readings), "moved": len(set(readings)) > 1,
                    "spread": int(readings.max() - readings.min()), "mean_width": float((highs - lows).mean()),
                    "covered_pairs": f"{inside}/{len(pairs)}"})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", help="a RECL study YAML; without it, --group names run directories, read on --text")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--group", nargs="*", default=[], help="the study's group to read (its name), or run directories")
    parser.add_argument("--text", help="without --study: the text every member is scored on")
    parser.add_argument("--tokenizer", help="without --study: how --text becomes tokens (char, word or hf:PATH)")
    parser.add_argument("--name", help="without --study: the group's name")
    parser.add_argument("--train-seed", type=int, default=0, help="which training seed's members, for a group with seeds")
    parser.add_argument("--redraws", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], help="a setting as `txlab recl --set` takes it, e.g. batch_size=128")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table, about = redraw_rows(args)
    brief = summary(table.sort_values(["rule", "redraw"], kind="stable"))
    brief.to_csv(args.out / "summary.csv", index=False)
    (args.out / "about.json").write_text(json.dumps(about, indent=1) + "\n")
    print(brief.to_string(index=False))
    print(f"wrote {args.out}/redraws.csv, summary.csv and about.json")


if __name__ == "__main__":
    main()
