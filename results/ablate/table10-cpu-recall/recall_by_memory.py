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
from pathlib import Path

import numpy as np

from txlab.analysis.learned import copies_beyond
from txlab.config import load_config
from txlab.data import synthetic
from txlab.data.corpus import load_corpus
from txlab.runs.checkpoint import has_checkpoint
from txlab.runs.evaluate import EvalSettings, evaluate_run
from txlab.runs.plan import checkpoint_step

HERE = Path(__file__).resolve().parent
MEMORIES = (128, 256, 384, 512)
TRAIN_SEGMENT = 128
TARGETS = 20000


def by_role(run: Path, memory: int) -> tuple[dict | None, str]:
    """The run's by-role evaluation at this memory: its eval/ record, else scored now if its finished checkpoint is
    here, else (at the run's own validation memory) training's last validation, marked *."""
    for path in sorted((run / "eval").glob("*-roles.json")):
        record = json.loads(path.read_text())
        if (record["split"], record["tgt_len"], record["mem_len"], record["max_tokens"]) == ("valid", 64, memory, TARGETS):
            return record["by_role"], ""
    cfg = load_config(run / "config.yaml")
    if has_checkpoint(run) and checkpoint_step(run) >= cfg.train.max_steps:
        settings = EvalSettings(tgt_len=64, mem_len=memory, max_tokens=TARGETS, by_role=True)
        return evaluate_run(run, settings, progress=False).by_role, ""
    if memory == cfg.eval.mem_len:
        validations = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"valid_by_role"' in line]
        return validations[-1], "*"
    return None, ""


def stale_key_distances(run: Path) -> np.ndarray:
    """For each recall key among the first validation targets: how far back the key occurred before its own source
    (a source or recall of an earlier fact with the same key), the nearest place a key-matching model could be misled."""
    truth = load_corpus(load_config(run / "config.yaml").data, progress=False).truth["valid"]
    names = synthetic.RECALL_ROLE_NAMES
    positions = np.flatnonzero((truth.role == names.index("source_key")) | (truth.role == names.index("recall_key")))
    keys = truth.tokens[positions]
    order = np.lexsort((positions, keys))  # grouped by key, in text order within a key
    positions, keys = positions[order], keys[order]
    # a recall's own source is the occurrence of its key just before it; the one before that is the stale one
    has_stale = np.concatenate([[False, False], keys[2:] == keys[:-2]])
    stale = np.where(has_stale, positions - np.concatenate([[0, 0], positions[:-2]]), np.iinfo(np.int64).max)
    recalls = (truth.role[positions] == names.index("recall_key")) & (positions <= TARGETS)
    return stale[recalls]


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
