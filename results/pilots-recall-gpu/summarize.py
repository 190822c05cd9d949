"""The GPU recipe pilot on recall-small: one line per recipe over its seeds, from each run's by-role evaluation.

    python results/pilots-recall-gpu/summarize.py > results/pilots-recall-gpu/learned.md

A run's directory is <recipe>-s<seed>; its columns are read as results/recall-cpu/summarize.py reads a cpu run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "recall-cpu"))
from summarize import run_row  # noqa: E402

LATCH_TARGET = 0.3
"""Latch emissions within this many nats of the ideal model's loss with the context (the issue's RNN target)."""
RECALL_TARGET = 1.0
"""Recalled values below this many nats beyond the training segment (the XL target)."""


def main() -> None:
    recipes: dict[str, list[dict]] = {}
    for run in sorted((HERE / "runs").iterdir(), key=lambda p: (re.sub(r"-s\d+$", "", p.name), int(p.name.rsplit("-s", 1)[1]))):
        recipes.setdefault(re.sub(r"-s\d+$", "", run.name), []).append(run_row(run))
    print("| recipe | model | steps | seeds | latch emissions per seed | latch within 0.3 of ideal | recalled, D 137..199 per seed | below 1 nat | stalled |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rows in recipes.items():
        latch = [r["latch"] for r in rows]
        beyond = [r["beyond"].model for r in rows]
        print(f"| {name} | {rows[0]['model']} | {rows[0]['steps']:,} | {len(rows)} | " + ", ".join(f"{x.model:.2f}" for x in latch)
              + f" | {sum(x.model <= x.ideal_with + LATCH_TARGET for x in latch)} of {len(rows)} | " + ", ".join(f"{b:.2f}" for b in beyond)
              + f" | {sum(b < RECALL_TARGET for b in beyond)} of {len(rows)} | {sum(r['stalled'] for r in rows)} of {len(rows)} |")


if __name__ == "__main__":
    main()
