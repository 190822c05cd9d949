"""Render a synthetic corpus as text of words, for RECL in words against a known truth.

The synthetic-small-short language with its longest copy moved to 16 tokens back (copies 8..15 tokens back) is
written one word per token, separated by single spaces, into ``OUT/{train,valid,test}.txt``, so word w of a split
is token w of the split and the ideal model's losses (its ground truth) are losses in words. A byte-level BPE of
1,000 symbols is trained on the train split into ``OUT/bpe`` (offline, with the tokenizers library), for a member
that reads the text by BPE. Then `txlab recl --study studies/recl-words.yaml` scores members that read it by words,
by that BPE and by characters, and ``--truth GROUP_DIR`` prints the ideal model's RECL in words on the group's
shared targets beside each member's.

    python studies/render_synthetic_words.py runs/words-synthetic
    txlab --home . recl --study studies/recl-words.yaml --profile cpu-synthetic
    python studies/render_synthetic_words.py runs/words-synthetic --truth results/recl/<group folder>
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from txlab.analysis import table8
from txlab.data import synthetic

VARIANT, HORIZON, SEED = "synthetic-small-short", 16, 0
SIZES = {"train": 600_000, "valid": 60_000, "test": 60_000}
"""Words per split: the train split is what each member trains on (about 3.6 MB of characters)."""


def render(out: Path) -> None:
    spec = synthetic.get_spec(VARIANT, HORIZON)
    words = spec.symbols()
    out.mkdir(parents=True, exist_ok=True)
    for split, n in SIZES.items():
        tokens = synthetic.generate(spec, n, SEED, split=split).tokens
        (out / f"{split}.txt").write_text(" ".join(words[t] for t in tokens.tolist()) + "\n", encoding="utf-8")
    train_bpe(out / "train.txt", out / "bpe")
    print(f"wrote {out}/train.txt, valid.txt, test.txt ({', '.join(f'{n:,}' for n in SIZES.values())} words) and {out}/bpe")


def train_bpe(text: Path, folder: Path) -> None:
    import tokenizers
    import transformers

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=1000, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train([str(text)], trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)


def truth(group_dir: Path, rs: list[float]) -> None:
    """The ideal model's RECL in words on the group's shared targets, beside the members' (recl.json)."""
    record = json.loads((group_dir / "recl.json").read_text())
    split = record["settings"]["split"]
    ideal = synthetic.generate(synthetic.get_spec(VARIANT, HORIZON), SIZES[split], SEED, split=split)
    targets = np.asarray(record["words"]["targets"])
    grid = tuple(record["grid"])
    losses = np.stack([ideal.oracle_loss(c)[targets] for c in grid])[None]  # [1, G, W]
    rows = table8.recl_rows(table8.GroupTable(losses, grid, ["ideal"]), rs=rs)
    print(f"ideal model on the {len(targets):,} shared words: " + ", ".join(f"r {row.r:g}: {row.label}" for row in rows))
    for row in record["rows"]:
        print(f"  {row['model']} r {row['r']:g}: {row['label']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder of the rendered splits and the BPE")
    parser.add_argument("--truth", type=Path, help="a group's folder of tables (recl.json): print the ideal RECL in words on its targets")
    args = parser.parse_args()
    if args.truth:
        truth(args.truth, [0.1, 0.5, 1.0])
    else:
        render(args.out)


if __name__ == "__main__":
    main()
