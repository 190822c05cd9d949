"""What each cpu run on recall-small learned, from its by-role evaluation on the whole validation split
(RUN/eval/valid-*-roles.json, written by `txlab eval RUN --by-role`), and whether each target of the
recall family holds for it.

    python results/recall-cpu/summarize.py results/models/<preset>-cpu-recall-small-seed<s> ... > results/recall-cpu/learned.md

One line per run: latch emissions (all, and at gaps of 19 or more, past the RECL grid's first value), recalled
values (all, near D 12..27, and beyond the 128-token training segment: the buckets from D 137 on), then
a line per model with the mean and the range over its seeds. The ideal model's losses close the table. The
last column counts the attempts a restart rule (train.max_restarts) abandoned: a run's numbers are its last
attempt's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from txlab.analysis.learned import STALL_MARGIN, RoleLosses, copies_beyond, read_restarts
from txlab.config import load_config

BEYOND_SEGMENT = 137
"""The first copy-distance bucket that starts past the training segment (128)."""


def latch_beyond(by_role: dict, gap: int) -> RoleLosses:
    buckets = [b for b in by_role["latch_distance"] if b["lo"] >= gap and b["tokens"]]
    tokens = sum(b["tokens"] for b in buckets)
    mean = lambda key: sum(b[key] * b["tokens"] for b in buckets) / tokens  # noqa: E731
    return RoleLosses(tokens, mean("model"), mean("ideal_with"), mean("ideal_without"))


def run_row(run_dir: Path) -> dict:
    records = sorted((run_dir / "eval").glob("valid-*-roles.json"))
    if not records:
        raise SystemExit(f"{run_dir}: no by-role evaluation; run `txlab eval {run_dir} --by-role` first")
    record = json.loads(records[-1].read_text())
    by_role, cfg = record["by_role"], load_config(run_dir / "config.yaml")  # checkpoints are not committed
    latch, recalled = (RoleLosses.from_record(by_role["roles"][r]) for r in ("latch_emission", "recalled_value"))
    near = RoleLosses.from_record(by_role["copy_distance"][0])
    learned = latch.model < latch.ideal_without - STALL_MARGIN or recalled.model < recalled.ideal_without - STALL_MARGIN
    model = cfg.name.split(f"-{cfg.size}-")[0] if cfg.name else cfg.preset  # a run named for its recipe keeps the name's head: lstm-2x320
    return {"model": model, "seed": cfg.train.seed, "steps": record["step"], "memory": record["mem_len"], "clamp": record["clamp_len"],
            "latch": latch, "latch_far": latch_beyond(by_role, 19), "recalled": recalled, "near": near,
            "beyond": copies_beyond(by_role, BEYOND_SEGMENT), "stalled": not learned, "restarts": len(read_restarts(run_dir))}


COLUMNS = (("latch", "latch emissions"), ("latch_far", "latch, gaps 19..200"), ("recalled", "recalled values"),
           ("near", "recalled, D 12..27"), ("beyond", f"recalled, D {BEYOND_SEGMENT}..199"))


def main(run_dirs: list[str]) -> None:
    rows = [run_row(Path(d)) for d in run_dirs]
    print("| model | seed | steps | eval memory, clamp | " + " | ".join(title for _, title in COLUMNS) + " | stalled | restarts |")
    print("|---|---|---|---|" + "---|" * len(COLUMNS) + "---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['seed']} | {r['steps']:,} | {r['memory']}, {r['clamp']} | "
              + " | ".join(f"{r[key].model:.2f}" for key, _ in COLUMNS) + f" | {'yes' if r['stalled'] else 'no'} | {r['restarts']} |")
    print()
    print("| model | seeds | " + " | ".join(f"{title}: mean [min, max]" for _, title in COLUMNS) + " | stalled | restarts |")
    print("|---|---|" + "---|" * len(COLUMNS) + "---|---|")
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        cells = []
        for key, _ in COLUMNS:
            values = np.array([r[key].model for r in mine])
            cells.append(f"{values.mean():.2f} [{values.min():.2f}, {values.max():.2f}]")
        print(f"| {model} | {len(mine)} | " + " | ".join(cells) + f" | {sum(r['stalled'] for r in mine)} of {len(mine)} | {sum(r['restarts'] for r in mine)} in {len(mine)} seed{'s' * (len(mine) > 1)} |")
    ideal = rows[0]
    print("| ideal model, with / without the context | | " + " | ".join(f"{ideal[k].ideal_with:.2f} / {ideal[k].ideal_without:.2f}" for k, _ in COLUMNS) + " | | |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
