"""Train a member of a Table 8 profile with extra config overrides into a run directory of its own, then score
it by role: the pilots' way to try one change to a member's recipe while keeping the rest exactly as
`txlab recl --study studies/table8.yaml --profile PROFILE` would train it.

    TXLAB_HOME=. python results/pilots-recall-cpu/train_variant.py PROFILE MEMBER SEED RUN_DIR [key=value ...]

e.g. `... cpu-recall-long lstm 0 results/pilots-recall-cpu/v5-lstm/lstm-t256-5k-lr1e-3-s0 train.lr=1e-3`.
An interrupted call resumes from the run's checkpoint.
"""

from __future__ import annotations

import subprocess
import sys

from txlab.config import apply_overrides
from txlab.drivers.recl import groups as recl
from txlab.runs.train import train


def main(profile: str, member: str, seed: int, run_dir: str, sets: list[str]) -> None:
    groups = recl.resolve_groups([], "studies/table8.yaml", profile, None, {}, [f"train_seeds=[{seed}]"])
    (resolved,) = [m for g in groups for m in g.resolved[seed] if m.label == member]
    result = train(apply_overrides(resolved.config, sets), run_dir, resume=True, progress=True, echo=print)
    print("done", result.step, result.valid, flush=True)
    subprocess.run([sys.executable, "-m", "txlab", "--home", ".", "eval", run_dir, "--by-role", "--quiet"], check=True)


if __name__ == "__main__":
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    profile, member, seed, run_dir, *sets = sys.argv[1:]
    main(profile, member, int(seed), run_dir, sets)
