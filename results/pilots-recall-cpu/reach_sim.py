"""Can RECL on a recall-family corpus tell an RNN that holds its latches 200 tokens from one that holds them 60?

No training: every model here is an ideal model of the corpus's ground truth (txlab.data.synthetic), scored
at each context length of Table 8's cpu grid (20..240) on the validation split, and RECL is txlab's own
(txlab.analysis.recl, the paper's definition, threshold 0.02):

    ideal   the ideal model: each token resolved once its needed context is in view
    hold60, hold120, hold200
            an RNN that learned everything but the recalls (recall keys and recalled values stay at their
            loss without context at every length) and holds a latch only while its register lies at
            most 60, 120 or 200 tokens back

A corpus measures RNN reach when the three RNN rows read 60, 120 and 200 (the truth; the ideal reads the
horizon). Printed per corpus: the share of latch emissions among all tokens, of those whose register
lies more than 60 tokens back, and of recalled values; then RECL of ideal / hold60 / hold120 / hold200
at r = 0.1, 0.5 and 1, on the 2,000 targets Table 8's cpu profiles score (8 blocks of 250) and on 20,000,
for three draws of the text and its targets.

    python results/pilots-recall-cpu/reach_sim.py > results/pilots-recall-cpu/reach-sim.txt   # about 5 minutes
"""

from __future__ import annotations

import dataclasses

import numpy as np

from txlab.analysis.recl import recl
from txlab.data import synthetic
from txlab.measure.losses import sample_blocks

GRID = list(range(20, 241, 20))
"""Table 8's cpu grid (table8.yaml, the cpu-recall profiles)."""
REACHES = (60, 120, 200)
SEEDS = (0, 1, 2)
"""Draws of the validation text (generator seed) and of the target blocks (the same seed)."""
RECALL_ROLES = (synthetic.RECALL_KEY, synthetic.RECALLED_VALUE)
VARIANTS = {
    "recall-small": {},
    "4 latches": {"n_latches": 4},
    "4 latches, recall_fraction 0.06": {"n_latches": 4, "recall_fraction": 0.06},
    "4 latches, half near gaps, recall_fraction 0.06": {"n_latches": 4, "latch_near_fraction": 0.5, "recall_fraction": 0.06},
    "6 latches, recall_fraction 0.06 (recall-small-latches)": {"n_latches": 6, "recall_fraction": 0.06},
    "4 latches, quarter near gaps, recall_fraction 0.04": {"n_latches": 4, "latch_near_fraction": 0.25, "recall_fraction": 0.04},
}
"""Corpora: recall-small with these fields changed (RecallSpec's docstrings say what each does)."""


def group_losses(text: synthetic.SyntheticText, targets: np.ndarray) -> np.ndarray:
    """[M, G, T]: the ideal model, then an RNN of each reach in REACHES."""
    recall = np.isin(text.role, RECALL_ROLES)
    unresolved = [None, *(recall | ((text.role == synthetic.LATCH_EMISSION) & (text.needed_context > reach)) for reach in REACHES)]
    return np.stack([np.stack([text.oracle_loss(c, lost)[targets] for c in GRID]) for lost in unresolved])


def main() -> None:
    base = synthetic.get_spec("recall-small")
    names = ["ideal", *(f"hold{reach}" for reach in REACHES)]
    print(f"RECL of {' / '.join(names)} at r = 0.1, 0.5, 1 (grid {GRID[0]}..{GRID[-1]}; truth: the horizon, "
          f"then {', '.join(map(str, REACHES))})")
    for label, changes in VARIANTS.items():
        for seed in SEEDS:
            text = synthetic.generate(dataclasses.replace(base, **changes), 200_000, seed=seed, split="valid")
            if seed == SEEDS[0]:
                latch = text.role == synthetic.LATCH_EMISSION
                print(f"\n{label}: latch emissions {latch.mean():.3f} of tokens, {(latch & (text.needed_context > 60)).mean():.4f} "
                      f"with the register more than 60 back; recalled values {(text.role == synthetic.RECALLED_VALUE).mean():.3f}")
            for blocks, block_len in ((8, 250), (80, 250)):
                starts = sample_blocks(len(text), blocks, block_len, min_start=GRID[-1], seed=seed)
                targets = (starts[:, None] + np.arange(block_len)).ravel()
                losses = group_losses(text, targets)
                readings = "  ".join(f"r = {r}: " + " / ".join(str(x.recl) for x in recl(losses, GRID, names, r)) for r in (0.1, 0.5, 1.0))
                print(f"  seed {seed}  {blocks * block_len:>6} targets  {readings}")


if __name__ == "__main__":
    main()
