"""Why an XL of cpu-recall-long needs more context than the ground truth says: does a recall need the tokens
*before* its source, and if so, their content or only their presence?

For recalled values of the validation text, whose needed context n (the distance to the source value) is
known, scores each with a fresh state reading exactly c = n + k tokens (k = 0, 1, 2, 4, ...), as `txlab recl`
reads a context (chunks of the evaluation segment, the run's memory settings), and once more with c = n + 48
where the 48 - 1 tokens before the source marker are replaced by a stretch of validation text from elsewhere
(the source marker, the source and everything after it kept). If the foreign stretch restores the recall as
well as the real one, the recall needs *some* tokens in front of its source, not what they say: an edge
effect of reading a fresh window, which the ideal model's ground truth does not have.

    python results/models-recall-cpu/edge_probe.py xl151m-cpu-recall-small-seed{0,1,2} > results/models-recall-cpu/edge-probe.txt

Reads each run's checkpoint (not committed: train the runs first, README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from txlab.api import load_model
from txlab.data.synthetic import FACT_KEY, RECALLED_VALUE, generate, get_spec
from txlab.measure.losses import scoring
from txlab.measure.reading import chunk_length, read_fresh, target_nll
from txlab.runs.checkpoint import saved_config
from txlab.runs.evaluate import evaluation_context

HERE = Path(__file__).resolve().parent
EXTRA = (0, 1, 2, 4, 8, 16, 24, 32, 48)
"""Tokens read beyond the needed context n."""
PREFIX = 48
"""Length of the stretch in front of the source whose content the foreign condition replaces (source marker kept)."""
BANDS = ((13, 60), (61, 129), (130, 200))
"""Needed-context bands of the recalled values scored (n = D + 1: near, inside the segment, beyond it)."""
PER_BAND = 120
N_TOKENS = 60_000
PREVIOUS_KEYS = 4
"""How many source keys before the source the last columns read back to."""
FIRST_TARGET = 260 + PREFIX
"""Recalled values before this position are skipped: every window the probe reads then lies inside the text."""


def losses_at(model, windows: list[np.ndarray], targets: np.ndarray, chunk_len: int | None) -> np.ndarray:
    """Loss of each target after reading its window from a fresh state; windows of one length go in one batch."""
    out = np.empty(len(windows), dtype=np.float64)
    by_length: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        by_length.setdefault(len(w), []).append(i)
    for rows in by_length.values():
        for lo in range(0, len(rows), 64):
            batch = rows[lo : lo + 64]
            hidden = read_fresh(model, np.stack([windows[i] for i in batch]), chunk_len)  # [B, L, d]
            out[batch] = target_nll(model, hidden[:, -1], targets[batch])
    return out


def probe(run: str) -> None:
    run_dir = HERE / run
    cfg = saved_config(run_dir)
    spec = get_spec(cfg.data.corpus, cfg.data.synthetic_max_context)
    text = generate(spec, N_TOKENS, seed=cfg.data.synthetic_seed, split="valid")
    tokens = text.tokens.astype(np.int64)
    model = load_model(run_dir)
    tgt_len, context = evaluation_context(cfg.model, cfg.eval)
    sample, elsewhere_at, new_key = (np.random.default_rng(seed) for seed in (0, 1, 2))
    # the text with every source key moved to another key (as results/pilots-recall-cpu/keyprobe.py does)
    key_base = spec.vocab_size - spec.n_values - spec.n_keys
    key_positions = np.flatnonzero(text.role == FACT_KEY)
    moved_tokens = tokens.copy()
    moved_tokens[key_positions] = key_base + (tokens[key_positions] - key_base + new_key.integers(1, spec.n_keys, size=len(key_positions))) % spec.n_keys
    recalled = np.flatnonzero(text.role == RECALLED_VALUE)
    recalled = recalled[recalled > FIRST_TARGET]
    need = text.needed_context[recalled]
    print(f"{run}: recalled values scored after reading a fresh window (nats; ideal 0, no source ln {spec.n_values} = "
          f"{np.log(spec.n_values):.2f}); eval segment {tgt_len}, memory {context.mem_len}, clamp {context.clamp_len}")
    header = "  ".join(f"n+{k:<3d}" for k in EXTRA)
    later = "  ".join(f"key-{j}" for j in range(1, PREVIOUS_KEYS + 1))
    print(f"  {'needed n':<11} {'count':>5}  {header}  frgn   moved  {later}")
    with scoring(model, context):
        chunk_len = chunk_length(model, tgt_len)
        for lo, hi in BANDS:
            chosen = recalled[(need >= lo) & (need <= hi)]
            chosen = np.sort(sample.choice(chosen, size=min(PER_BAND, len(chosen)), replace=False))
            n = text.needed_context[chosen]
            targets = tokens[chosen]
            row = []
            for k in EXTRA:
                windows = [tokens[t - c : t] for t, c in zip(chosen, n + k)]
                row.append(losses_at(model, windows, targets, chunk_len).mean())
            # the 47 tokens before the source marker (at t - n - 1) come from a random place at least 1,000 tokens away
            foreign = []
            for t, c in zip(chosen, n):
                start = t - c - PREFIX
                elsewhere = int(elsewhere_at.integers(PREFIX, len(tokens) - PREFIX))
                while abs(elsewhere - start) < 1000:
                    elsewhere = int(elsewhere_at.integers(PREFIX, len(tokens) - PREFIX))
                window = tokens[start:t].copy()
                window[: PREFIX - 1] = tokens[elsewhere : elsewhere + PREFIX - 1]
                foreign.append(window)
            row.append(losses_at(model, foreign, targets, chunk_len).mean())
            # the same 47 tokens, real, but with each source key among them moved to another key (the cycle broken)
            moved = [np.concatenate([moved_tokens[t - c - PREFIX : t - c - 1], tokens[t - c - 1 : t]]) for t, c in zip(chosen, n)]
            row.append(losses_at(model, moved, targets, chunk_len).mean())
            # read back to the j-th source key before the source (j = 1 .. 4), that key included
            index = np.searchsorted(key_positions, chosen - n)[:, None] - np.arange(1, PREVIOUS_KEYS + 1)  # [targets, j]
            assert (index >= 0).all(), "a window reaches back before the text's first source key: raise FIRST_TARGET"
            before = key_positions[index]
            for j in range(PREVIOUS_KEYS):
                row.append(losses_at(model, [tokens[k:t] for t, k in zip(chosen, before[:, j])], targets, chunk_len).mean())
            cells = "  ".join(f"{v:5.2f}" for v in row)
            print(f"  {lo:>3}..{hi:<6} {len(chosen):5d}  {cells}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    torch.set_num_threads(1)
    for run in sys.argv[1:]:
        probe(run)
