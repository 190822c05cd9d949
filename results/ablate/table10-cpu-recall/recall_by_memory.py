"""How the recurrent rows of Table 10's cpu-recall profile recall as their evaluation memory grows, and whether
an older occurrence of a recalled key can be in view at that memory.

Training's validation (what learned.md and the restart rule read) keeps the preset's 512 tokens of memory; the
recall numbers of docs/cpu-evidence.md are measured at 256. This table puts the two side by side per run, with
128 and 384 where the run's checkpoint is here to score them (checkpoints are not committed: only runs trained
in this checkout get those columns). Each cell is the recalled-value loss in nats over all recalls / over those
whose source lies at or beyond the 128-token training segment, from `txlab eval RUN --by-role --tgt-len 64
--mem-len M --max-tokens 20000` (each run's eval/ record; missing ones are scored when the checkpoint is here).
At 512, a run without that record reads training's last validation, the same protocol (marked *).

    TXLAB_HOME=. python results/ablate/table10-cpu-recall/recall_by_memory.py > results/ablate/table10-cpu-recall/recall-by-memory.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from txlab.analysis.learned import copies_beyond
from txlab.config import load_config
from txlab.data import synthetic
from txlab.data.corpora import load_corpus
from txlab.runs.checkpoint import has_checkpoint
from txlab.runs.plan import checkpoint_step

HERE = Path(__file__).resolve().parent
MEMORIES = (128, 256, 384, 512)
TRAIN_SEGMENT = 128
TARGETS = 20000


def record_path(run: Path, memory: int) -> Path:
    return run / "eval" / f"valid-tgt64-mem{memory}-clamp12-same-b8-n{TARGETS}-roles.json"


def by_role(run: Path, memory: int) -> tuple[dict | None, str]:
    """The run's by-role record at this memory (scored now if its finished checkpoint is here), and a mark for its source."""
    path = record_path(run, memory)
    finished = has_checkpoint(run) and checkpoint_step(run) >= load_config(run / "config.yaml").train.max_steps
    if not path.exists() and finished:
        subprocess.run([sys.executable, "-m", "txlab", "eval", str(run), "--by-role", "--tgt-len", "64", "--mem-len", str(memory),
                        "--max-tokens", str(TARGETS), "--quiet"], check=True, stdout=subprocess.DEVNULL)
    if path.exists():
        return json.loads(path.read_text())["by_role"], ""
    if memory == load_config(run / "config.yaml").eval.mem_len:
        validations = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"valid_by_role"' in line]
        return validations[-1], "*"
    return None, ""


def stale_key_distances(run: Path) -> np.ndarray:
    """For each recall key among the first validation targets: how far back the key occurred before its own source
    (a source or recall of an earlier fact with the same key), the nearest place a key-matching model could be misled."""
    truth = load_corpus(load_config(run / "config.yaml").data, progress=False).truth["valid"]
    names = synthetic.RECALL_ROLE_NAMES
    is_key = (truth.role == names.index("source_key")) | (truth.role == names.index("recall_key"))
    key_positions = np.flatnonzero(is_key)
    distances = []
    for position in np.flatnonzero(truth.role[: TARGETS + 1] == names.index("recall_key")):
        earlier = key_positions[(key_positions < position) & (truth.tokens[key_positions] == truth.tokens[position])]
        distances.append(position - earlier[-2] if len(earlier) >= 2 else np.iinfo(np.int64).max)  # earlier[-1]: its own source
    return np.array(distances)


def main() -> None:
    runs = sorted(p.parent for p in (HERE / "runs").glob("recur-*/config.yaml"))
    stale = stale_key_distances(runs[0])
    print(f"Recall keys in the first {TARGETS:,} validation targets: {len(stale):,}; the nearest earlier occurrence of a key "
          f"before its own source lies {stale.min():,} tokens back at the least.")
    print("Share of recalls with such an occurrence in view (a query with same_length memory M sees M tokens back): "
          + ", ".join(f"M = {m}: {np.mean(stale <= m):.4f}" for m in MEMORIES))
    print()
    print(f"Recalled-value loss, nats: all recalls / recalls from at or beyond the {TRAIN_SEGMENT}-token training segment")
    print(f"{'run':<22}" + "".join(f"{f'memory {m}':>18}" for m in MEMORIES))
    for run in runs:
        cells = []
        for memory in MEMORIES:
            record, mark = by_role(run, memory)
            if record is None:
                cells.append("-")
            else:
                overall = record["roles"]["recalled_value"]["model"]
                cells.append(f"{overall:.2f} / {copies_beyond(record, TRAIN_SEGMENT).model:.2f}{mark}")
        print(f"{run.name:<22}" + "".join(f"{c:>18}" for c in cells))
    print("\n* training's last validation (segment 64, memory 512, the first 20,000 targets): the same protocol as the eval record")


if __name__ == "__main__":
    main()
