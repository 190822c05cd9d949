"""Does a model's recall read the key? Score recalled values twice: on the validation text, and on the same
text with every source key replaced by another key (the recall keys left as they are).

A recall that finds its source by the key loses it when the source key changes: its loss on recalled values
rises. A recall that copies from whatever source lies at a familiar distance does not notice. Both texts are
scored with the run's own evaluation settings (segment, memory, clamp_len), or with --mem/--segment.

    python results/pilots-recall-cpu/keyprobe.py RUN_DIR [RUN_DIR ...] [--tokens 60000] [--mem M --segment T]

prints one table per run and writes RUN_DIR/eval/keyprobe-mem<M>-tgt<T>.json. Runs on the recall family only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from txlab.api import load_model
from txlab.data.synthetic import FACT_KEY, RECALLED_VALUE, RecallSpec, generate, get_spec
from txlab.models.interface import Context
from txlab.runs.checkpoint import saved_config
from txlab.runs.evaluate import evaluate

BANDS = ((12, 24), (25, 48), (49, 127), (128, 199))
"""Recall distances D (source marker to recall marker): the near band of recall-small, then out to the far end."""


def corrupt_source_keys(tokens: np.ndarray, role: np.ndarray, spec: RecallSpec, seed: int = 1) -> np.ndarray:
    """The tokens with each source key moved to another key, uniformly among the other n_keys - 1."""
    key_base = spec.vocab_size - spec.n_values - spec.n_keys
    out = tokens.astype(np.int64).copy()
    at = np.flatnonzero(role == FACT_KEY)
    shift = 1 + np.random.default_rng(seed).integers(spec.n_keys - 1, size=len(at))
    out[at] = key_base + (out[at] - key_base + shift) % spec.n_keys
    return out


def probe(run_dir: Path, n_tokens: int, mem: int | None, segment: int | None) -> dict:
    cfg = saved_config(run_dir)
    spec = get_spec(cfg.data.corpus, cfg.data.synthetic_max_context)
    if not isinstance(spec, RecallSpec):
        raise SystemExit(f"{run_dir}: corpus {cfg.data.corpus} is not of the recall family")
    model = load_model(run_dir)
    model.eval()
    clamp = cfg.eval.clamp_len if cfg.eval.clamp_len >= 0 else cfg.model.clamp_len
    mem = cfg.eval.mem_len if mem is None else mem
    segment = cfg.eval.tgt_len if segment is None else segment
    text = generate(spec, n_tokens, seed=cfg.data.synthetic_seed, split="valid")
    context = Context(mem, cfg.eval.same_length, clamp)

    def losses(tokens: np.ndarray) -> np.ndarray:
        return evaluate(model, tokens, segment, context, 1, token_losses=True).nll

    kept, moved = losses(text.tokens.astype(np.int64)), losses(corrupt_source_keys(text.tokens, text.role, spec))
    recalled = np.flatnonzero(text.role == RECALLED_VALUE)
    distance = text.needed_context[recalled] - 1
    rows = []
    for lo, hi in BANDS:
        at = recalled[(distance >= lo) & (distance <= hi)]
        mean = lambda nll: float(np.mean(nll[at])) if len(at) else None  # noqa: E731  (a corpus without this band)
        rows.append({"lo": lo, "hi": hi, "tokens": int(len(at)), "source_keys_kept": mean(kept), "source_keys_moved": mean(moved)})
    return {"run": run_dir.name, "corpus": spec.name, "mem_len": mem, "tgt_len": segment, "clamp_len": clamp, "tokens": n_tokens,
            "without_source": float(np.log(spec.n_values)), "bands": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--tokens", type=int, default=60_000, help="validation tokens scored (default 60,000)")
    parser.add_argument("--mem", type=int, default=None, help="memory length (default: the run's eval.mem_len)")
    parser.add_argument("--segment", type=int, default=None, help="segment length (default: the run's eval.tgt_len)")
    args = parser.parse_args()
    for run_dir in args.runs:
        result = probe(run_dir, args.tokens, args.mem, args.segment)
        out = run_dir / "eval" / f"keyprobe-mem{result['mem_len']}-tgt{result['tgt_len']}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{run_dir} (mem {result['mem_len']}, segment {result['tgt_len']}, clamp {result['clamp_len']}; "
              f"{result['without_source']:.2f} nats without the source)")
        print("  D          tokens  source keys kept  source keys moved")
        for row in result["bands"]:
            kept, moved = (f"{row[k]:.2f}" if row[k] is not None else "-" for k in ("source_keys_kept", "source_keys_moved"))
            print(f"  {row['lo']:3d}..{row['hi']:<3d}   {row['tokens']:6d}  {kept:>16}  {moved:>17}")


if __name__ == "__main__":
    main()
