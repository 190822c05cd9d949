"""Loss of one token role (recalled values unless --role says another) of a cpu-recall-long run at each context
length of Table 8's grid, by the needed context n of each token (a recalled value: the distance to its source;
a latch emission: to its latch's register): what `txlab recl` measured, split by how far back each token's
context lies. Reads the loss tables `txlab recl` collected into each run's losses/ folder (not committed: run
the recl commands of README.md first).

    python results/models-recall-cpu/loss_by_distance.py \\
        {xl128m,xl128m-shaw,xl128m-norecur,transformer128m}-cpu-recall-small-seed{0,1,2} > results/models-recall-cpu/loss-by-distance.txt
    python results/models-recall-cpu/loss_by_distance.py --role latch_emission \\
        {xl151m,qrnn,lstm-2x320}-cpu-recall-small-seed{0,1,2} > results/models-recall-cpu/latch-by-distance.txt
"""

from __future__ import annotations

import argparse
from pathlib import Path

from txlab.config import load_config
from txlab.data.corpus import load_corpus
from txlab.measure.losses import find_losses, load_losses

HERE = Path(__file__).resolve().parent
BANDS = ((1, 20), (21, 60), (61, 120), (121, 160), (161, 180), (181, 200))
"""Needed-context bands of the chosen tokens (inclusive)."""


def main(runs: list[str], role: str = "recalled_value") -> None:
    for run in runs:
        run_dir = HERE / run
        truth = load_corpus(load_config(run_dir / "config.yaml").data, progress=False).truth["valid"]
        table = load_losses(find_losses(run_dir))
        chosen_role = truth.role[table.targets] == truth.spec.role_names.index(role)
        need, losses = truth.needed_context[table.targets][chosen_role], table.losses[:, chosen_role]  # [tokens], [grid, tokens]
        print(f"{run}: {role.replace('_', ' ')} loss (nats) with c tokens of context, by needed context n")
        print(f"  {'n':<9} {'count':>5}  " + "  ".join(f"{c:>5d}" for c in table.grid))
        for lo, hi in BANDS:
            chosen = (need >= lo) & (need <= hi)
            if chosen.any():
                print(f"  {lo:>3}..{hi:<4} {chosen.sum():5d}  " + "  ".join(f"{v:5.2f}" for v in losses[:, chosen].mean(axis=1)))
        # beside them the mean over every target, all roles: what RECL's r = 1 reads
        print(f"  {'all':<9} {table.losses.shape[1]:5d}  " + "  ".join(f"{v:5.2f}" for v in table.losses.mean(axis=1)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", default="recalled_value", help="the token role to split (default: recalled_value)")
    parser.add_argument("runs", nargs="+", help="run directories under results/models-recall-cpu/")
    args = parser.parse_args()
    main(args.runs, args.role)
