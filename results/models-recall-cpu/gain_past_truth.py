"""Where an XL run of Table 8's cpu-recall-long group gains from context beyond the ground truth's 200 tokens:
the loss at context 200 minus the loss at 240, per token role, summed and averaged over the RECL targets,
beside the largest context a role's targets need. Reads the loss tables `txlab recl` collected into each
run's losses/ folder (not committed: run the recl command of README.md first).

    python results/models-recall-cpu/gain_past_truth.py xl151m-cpu-recall-small-seed{0,1,2} > results/models-recall-cpu/gain-past-truth.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

from txlab.config import load_config
from txlab.data.corpus import load_corpus
from txlab.measure.losses import find_losses, load_losses

HERE = Path(__file__).resolve().parent
SHORT, LONG = 200, 240


def main(runs: list[str]) -> None:
    for run in runs:
        run_dir = HERE / run
        truth = load_corpus(load_config(run_dir / "config.yaml").data, progress=False).truth["valid"]
        table = load_losses(find_losses(run_dir))
        positions = table.targets
        gain = table.losses[table.grid.index(SHORT)] - table.losses[table.grid.index(LONG)]
        print(f"{run}: loss at context {SHORT} minus at {LONG}, {len(gain):,} targets: mean {gain.mean():.4f}, sum {gain.sum():.1f} nats")
        for role, name in enumerate(truth.spec.role_names):
            chosen = truth.role[positions] == role
            if chosen.any():
                print(f"  {name:<16} {chosen.sum():5d} targets  sum {gain[chosen].sum():7.2f}  mean {gain[chosen].mean():7.4f}  "
                      f"largest needed context {truth.needed_context[positions][chosen].max()}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
