"""Recalled-value loss of a cpu-recall-long run at each context length of Table 8's grid, by the needed context n
of the recall (the distance to its source value): what `txlab recl` measured, split by how far back each
recall's source lies. Reads the loss tables `txlab recl` collected into each run's losses/ folder (not
committed: run the recl commands of README.md first).

    python results/models-recall-cpu/loss_by_distance.py xl128m-cpu-recall-small-seed2 xl128m-norecur-cpu-recall-small-seed2 \\
        transformer128m-cpu-recall-small-seed2 > results/models-recall-cpu/loss-by-distance.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from txlab.config import load_config
from txlab.data.corpora import load_corpus

HERE = Path(__file__).resolve().parent
BANDS = ((1, 20), (21, 60), (61, 120), (121, 160), (161, 180), (181, 200))
"""Needed-context bands of the recalled values (inclusive)."""


def main(runs: list[str]) -> None:
    for run in runs:
        run_dir = HERE / run
        truth = load_corpus(load_config(run_dir / "config.yaml").data, progress=False).truth["valid"]
        (folder,) = (run_dir / "losses").glob("valid-*")
        meta = json.loads((folder / "meta.json").read_text())
        losses = np.concatenate([np.load(folder / f"block-{i:05d}.npy") for i in range(len(meta["block_starts"]))], axis=1)  # [grid, targets]
        positions = np.concatenate([np.arange(start, start + meta["block_len"]) for start in meta["block_starts"]])
        recalled = truth.role[positions] == truth.spec.role_names.index("recalled_value")
        need, table = truth.needed_context[positions][recalled], losses[:, recalled]
        print(f"{run}: recalled-value loss (nats) with c tokens of context, by needed context n")
        print(f"  {'n':<9} {'count':>5}  " + "  ".join(f"{c:>5d}" for c in meta["grid"]))
        for lo, hi in BANDS:
            chosen = (need >= lo) & (need <= hi)
            if chosen.any():
                print(f"  {lo:>3}..{hi:<4} {chosen.sum():5d}  " + "  ".join(f"{v:5.2f}" for v in table[:, chosen].mean(axis=1)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
