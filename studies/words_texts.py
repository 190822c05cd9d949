"""The texts of the RECL-in-words studies (studies/recl-words.yaml), made offline, and the truth of the synthetic one.

``synthetic OUT [--min-distance D]``: the synthetic-small-short language with its longest copy moved to 16 tokens back
(copies D..15 tokens back, D = 8 as the variant has it), written one word per token, separated by single spaces, into
``OUT/{train,valid,test}.txt``, so word w of a split is token w of the split and the ideal model's losses (its ground
truth) are losses in words; and a byte-level BPE of 1,000 symbols trained on its train split into ``OUT/bpe``. With
``--min-distance 5`` (the shortest a fact of 4 values allows) copies sit at every distance up to the horizon, so no
step of a grid from 4 words up to it leaves the ideal model without gain: its RECL is the horizon at every r
(``truth-grid``).

``wikitext OUT --source DIR``: the WikiText-2 sample (its test.txt as the train split, its valid.txt as valid), and
BPEs trained on the train split: a byte-level one of 2,000 symbols (GPT-2's kind) into ``OUT/bpe-bytes`` and a
SentencePiece-style (Metaspace) one of 1,500 into ``OUT/bpe-metaspace`` (Llama's kind), and one of each kind of 8,000
symbols into ``OUT/bpe-bytes-8k`` and ``OUT/bpe-metaspace-8k`` (profile cpu-wikitext-seeds).

``truth GROUP_DIR [--min-distance D]``: the ideal model's RECL in words on a synthetic group's shared targets (its
recl.json), beside each member's.

``truth-grid --grid G [--min-distance D]``: the ideal model's RECL in words at r 0.1, 0.5 and 1, and its step gains, on
the blocks a profile of 8 x 250 words draws on the valid split: where a grid puts the truth, before any model trains.

``rule GROUP_DIR --low L --high H [--min-distance D]``: a synthetic group over training seeds read against its truth
by the rule its profile fixed before the runs (each seed's placebo-aware reading in [L, H]; a seed whose perplexity per
word at 16 words is above twice the ideal's is not read), written to GROUP_DIR/rule.csv.

``read GROUP_DIR``: a WikiText group over training seeds read by its profile's rule (each seed's members that beat the
unigram of the training words at the longest context are read), every reading with its interval, written to
GROUP_DIR/read.csv.

``unigram GROUP_DIR --text DIR``: the baseline a member of the WikiText group must beat for its RECL to be read: a
unigram model of words counted on DIR/train.txt (txlab.analysis.per_unit.unigram_perplexity, which `txlab recl` now
applies itself and records in recl.json's ``unigram``), its perplexity per word on the group's shared targets, beside
each member's at the grid's longest context: for the groups recorded before `txlab recl` did.

    python studies/words_texts.py synthetic runs/words-synthetic
    txlab --home . recl --study studies/recl-words.yaml --profile cpu-synthetic
    python studies/words_texts.py truth results/recl/recl-words-tokenizers-cpu-synthetic-text-words-synthetic
    python studies/words_texts.py wikitext runs/words-wikitext
    txlab --home . recl --study studies/recl-words.yaml --profile cpu-wikitext architectures
    python studies/words_texts.py unigram results/recl/recl-words-architectures-cpu-wikitext-text-words-wikitext --text runs/words-wikitext
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from txlab.analysis import recl, table8
from txlab.analysis.per_unit import UNIGRAM_FIT, unigram_perplexity
from txlab.data import synthetic
from txlab.measure.collection import parse_grid
from txlab.measure.losses import sample_blocks

VARIANT, HORIZON, SEED = "synthetic-small-short", 16, 0
MIN_DISTANCE = 8
"""The shortest copy distance of the variant: copies 8..15 back (the first texts). 5 puts copies at every distance."""
SIZES = {"train": 600_000, "valid": 60_000, "test": 60_000}
"""Words per split: the train split is what each member trains on (3,117,000 characters)."""


def synthetic_spec(min_distance: int = MIN_DISTANCE) -> synthetic.SyntheticSpec:
    """The rendered text's language: the variant with its horizon at :data:`HORIZON`, copies ``min_distance`` and more back."""
    return dataclasses.replace(synthetic.get_spec(VARIANT, HORIZON), min_distance=min_distance)


def synthetic_text(out: Path, min_distance: int = MIN_DISTANCE) -> None:
    spec = synthetic_spec(min_distance)
    words = spec.symbols()
    out.mkdir(parents=True, exist_ok=True)
    for split, n in SIZES.items():
        tokens = synthetic.generate(spec, n, SEED, split=split).tokens
        (out / f"{split}.txt").write_text(" ".join(words[t] for t in tokens.tolist()) + "\n", encoding="utf-8")
    train_bpe(out / "train.txt", out / "bpe", 1000, byte_level=True)
    print(f"wrote {out}/train.txt, valid.txt, test.txt ({', '.join(f'{n:,}' for n in SIZES.values())} words) and {out}/bpe")


def wikitext_text(out: Path, source: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for split, name in (("train", "test.txt"), ("valid", "valid.txt")):
        (out / f"{split}.txt").write_bytes((source / name).read_bytes())
    train_bpe(out / "train.txt", out / "bpe-bytes", 2000, byte_level=True)
    train_bpe(out / "train.txt", out / "bpe-metaspace", 1500, byte_level=False)
    train_bpe(out / "train.txt", out / "bpe-bytes-8k", 8000, byte_level=True)
    train_bpe(out / "train.txt", out / "bpe-metaspace-8k", 8000, byte_level=False)
    print(f"wrote {out}/train.txt (from {source}/test.txt), valid.txt, bpe-bytes, bpe-metaspace, bpe-bytes-8k and bpe-metaspace-8k")


def train_bpe(text: Path, folder: Path, vocab_size: int, byte_level: bool) -> None:
    """A BPE trained on ``text``, saved as a Hugging Face tokenizer folder: byte-level (GPT-2's pre-tokenizer and
    decoder) or Metaspace (SentencePiece's, a '▁' for each space, as Llama's tokenizer writes it)."""
    import tokenizers
    import transformers

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None if byte_level else "<unk>"))
    if byte_level:
        tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tokenizers.decoders.ByteLevel()
        alphabet, special = tokenizers.pre_tokenizers.ByteLevel.alphabet(), []
    else:
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(prepend_scheme="first")
        tok.decoder = tokenizers.decoders.Metaspace(prepend_scheme="first")
        alphabet, special = [], ["<unk>"]
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, initial_alphabet=alphabet, special_tokens=special)
    tok.train([str(text)], trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=special[0] if special else None).save_pretrained(folder)


def ideal_readings(grid: tuple[int, ...], targets: np.ndarray, rs: list[float], min_distance: int = MIN_DISTANCE,
                   split: str = "valid") -> tuple[list[table8.Table8Row], np.ndarray]:
    """The ideal model's Table 8 rows on ``targets`` (word indices of the split), and its losses [G, T]."""
    ideal = synthetic.generate(synthetic_spec(min_distance), SIZES[split], SEED, split=split)
    losses = np.stack([ideal.oracle_loss(c)[targets] for c in grid])  # [G, T]
    return table8.recl_rows(table8.GroupTable(losses[None], grid, ["ideal"]), rs=rs), losses


def truth_grid(grid: tuple[int, ...], rs: list[float], min_distance: int) -> None:
    """Where ``grid`` puts the truth: the ideal model's RECL and step gains on the blocks a profile of 8 x 250 words
    draws (txlab.measure.losses.sample_blocks, seed 0), before any model trains."""
    starts = sample_blocks(SIZES["valid"], 8, 250, grid[-1], 0, unit="word")
    rows, losses = ideal_readings(grid, (starts[:, None] + np.arange(250)).reshape(-1), rs, min_distance)
    table = recl.prepare_table(losses[None], grid, ["ideal"])
    for row in rows:
        gains = ", ".join(f"{g:.2f}" for g in recl.step_gains(table, row.r)[0])
        print(f"r {row.r:g}: ideal RECL {row.cell()}; step gains {gains}")


def truth(group_dir: Path, rs: list[float], min_distance: int = MIN_DISTANCE) -> None:
    """The ideal model's RECL in words on the group's shared targets, beside the members' (recl.json)."""
    record = json.loads((group_dir / "recl.json").read_text())
    split = record["settings"]["split"]
    targets = np.asarray(record["words"]["targets"])
    rows, _ = ideal_readings(tuple(record["grid"]), targets, rs, min_distance, split)
    print(f"ideal model on the {len(targets):,} shared words: " + ", ".join(f"r {row.r:g}: {row.cell()}" for row in rows))
    for row in record["rows"]:
        placebo = f", placebo-aware {row['placebo_label']}" if "placebo_label" in row else ""
        print(f"  {row['model']} r {row['r']:g}: {row['label']}{placebo}")


def rule_rows(group_dir: Path, low: int, high: int, min_distance: int = MIN_DISTANCE, at: int = HORIZON) -> list[dict]:
    """The rule of a synthetic group over training seeds (its ``seed-<s>/recl.json``), fixed before its runs: at each r a
    member's placebo-aware reading is within one grid step of the truth when it lies in [``low``, ``high``]; the claim
    holds for the member at r when every seed's reading does. A seed whose perplexity per word at ``at`` words is above
    twice the ideal model's on the same shared words has not learned to copy, and is not read against the truth."""
    rows = []
    for seed_dir in sorted(group_dir.glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        record = json.loads((seed_dir / "recl.json").read_text())
        grid, targets = tuple(record["grid"]), np.asarray(record["words"]["targets"])
        ideal_rows, losses = ideal_readings(grid, targets, record["settings"]["rs"], min_distance, record["settings"]["split"])
        truths = {row.r: row.paper.recl for row in ideal_rows}
        ideal_ppl = float(np.exp(losses[grid.index(at)].mean()))
        for row in record["rows"]:
            if row.get("ground_truth"):
                continue
            ppl = record["words"]["members"][row["model"]]["word_perplexity"][grid.index(at)]
            reading = int(row["placebo_recl"])
            rows.append({"seed": int(seed_dir.name.split("-")[1]), "model": row["model"], "r": row["r"], "truth": truths[row["r"]],
                         "paper": row["label"], "placebo_aware": reading, "placebo_ci": f"[{row['placebo_ci_low']}, {row['placebo_ci_high']}]",
                         "ppl_at_horizon": round(ppl, 3), "ideal_ppl_at_horizon": round(ideal_ppl, 3), "copies": ppl <= 2 * ideal_ppl,
                         "within": low <= reading <= high})
    return rows


def rule(group_dir: Path, low: int, high: int, min_distance: int) -> None:
    """:func:`rule_rows` of a group, each member's outcome at each r, written beside its tables as rule.csv."""
    import pandas as pd

    table = pd.DataFrame(rule_rows(group_dir, low, high, min_distance))
    table.to_csv(group_dir / "rule.csv", index=False)
    print(table.to_string(index=False))
    for (model, r), part in table.groupby(["model", "r"], sort=False):
        read = part[part["copies"]]
        outcome = ("not read: no seed copies" if read.empty else "holds" if read["within"].all() and len(read) == len(part)
                   else "fails" if not read["within"].all() else f"holds on the {len(read)} seeds that copy; {len(part) - len(read)} not read")
        print(f"{model} r {r:g}: placebo-aware {' '.join(map(str, part['placebo_aware']))} over seeds {' '.join(map(str, part['seed']))} "
              f"(truth {part['truth'].iloc[0]}): {outcome}")
    print(f"wrote {group_dir / 'rule.csv'}")


def read_rows(group_dir: Path) -> list[dict]:
    """The WikiText rule over training seeds (cpu-wikitext-seeds), fixed before its runs: at each seed a member's RECL is
    read only where its perplexity per word at the grid's longest context beats the unigram's of the training words on
    the same shared targets (``seed-<s>/recl.json``'s ``unigram``, as `txlab recl` records it); every reading is listed
    with its 95% interval and the verdict of its seed."""
    rows = []
    for seed_dir in sorted(group_dir.glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        record = json.loads((seed_dir / "recl.json").read_text())
        unigram = record["unigram"]
        for row in record["rows"]:
            member = unigram["members"][row["model"]]
            rows.append({"seed": int(seed_dir.name.split("-")[1]), "model": row["model"], "r": row["r"], "targets": record["n_targets"],
                         "ppl_at_longest": round(member["perplexity"], 1), "unigram_ppl": round(unigram["perplexity"], 1),
                         "beats_unigram": bool(member["beats_unigram"]), "paper": row["label"], "paper_ci": f"[{row['ci_low']}, {row['ci_high']}]",
                         "placebo_aware": row["placebo_label"], "placebo_ci": f"[{row['placebo_ci_low']}, {row['placebo_ci_high']}]"})
    return rows


def read(group_dir: Path) -> None:
    """:func:`read_rows` of a group, and which members are read on the text (every seed beats the unigram), written
    beside its tables as read.csv."""
    import pandas as pd

    table = pd.DataFrame(read_rows(group_dir))
    table.to_csv(group_dir / "read.csv", index=False)
    print(table.to_string(index=False))
    for model, part in table.groupby("model", sort=False):
        seeds = part.drop_duplicates("seed")
        missed = seeds[~seeds["beats_unigram"]]
        verdict = "read (every seed beats the unigram)" if missed.empty else (
            "not read: " + ", ".join(f"seed {s} {p:,.1f} against {u:,.1f}" for s, p, u in zip(missed.seed, missed.ppl_at_longest, missed.unigram_ppl)))
        print(f"{model}: {verdict}")
    print(f"wrote {group_dir / 'read.csv'}")


def unigram(group_dir: Path, text: Path) -> None:
    """The unigram's perplexity per word on the group's shared targets, beside each member's at the longest context
    (recl.json's ``words``)."""
    record = json.loads((group_dir / "recl.json").read_text())
    split, grid = record["settings"]["split"], record["grid"]
    targets = np.asarray(record["words"]["targets"])
    ppl = unigram_perplexity((text / "train.txt").read_text(encoding="utf-8").split(), (text / f"{split}.txt").read_text(encoding="utf-8").split(),
                             targets)
    print(f"unigram of the training words ({UNIGRAM_FIT}): perplexity per word {ppl:.1f} on the {len(targets):,} shared targets")
    for name, member in record["words"]["members"].items():
        print(f"  {name}: perplexity per word at c = {grid[-1]}: {member['word_perplexity'][-1]:.1f}, "
              f"per byte {member['byte_perplexity'][-1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    text = commands.add_parser("synthetic", help="the synthetic text rendered as words, and its BPE")
    text.add_argument("out", type=Path)
    text.add_argument("--min-distance", type=int, default=MIN_DISTANCE)
    wiki = commands.add_parser("wikitext", help="the WikiText-2 sample as splits, and two BPEs")
    wiki.add_argument("out", type=Path)
    wiki.add_argument("--source", type=Path, default=Path("studies/data/wikitext-2-sample"))
    ideal = commands.add_parser("truth", help="the ideal RECL in words on a synthetic group's targets")
    ideal.add_argument("group_dir", type=Path)
    ideal.add_argument("--min-distance", type=int, default=MIN_DISTANCE)
    where = commands.add_parser("truth-grid", help="the ideal RECL on a grid, before any run")
    where.add_argument("--grid", required=True, help="start:stop:step or a comma-separated list, as txlab recl takes it")
    where.add_argument("--min-distance", type=int, default=MIN_DISTANCE)
    held = commands.add_parser("rule", help="the declared rule over a synthetic group's training seeds (seed-<s>/ folders)")
    held.add_argument("group_dir", type=Path)
    held.add_argument("--low", type=int, required=True)
    held.add_argument("--high", type=int, required=True)
    held.add_argument("--min-distance", type=int, default=MIN_DISTANCE)
    readable = commands.add_parser("read", help="the WikiText rule over a group's training seeds: who beats the unigram, and their readings")
    readable.add_argument("group_dir", type=Path)
    uni = commands.add_parser("unigram", help="a unigram's perplexity per word on a group's targets, beside the members'")
    uni.add_argument("group_dir", type=Path)
    uni.add_argument("--text", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "synthetic":
        synthetic_text(args.out, args.min_distance)
    elif args.command == "wikitext":
        wikitext_text(args.out, args.source)
    elif args.command == "unigram":
        unigram(args.group_dir, args.text)
    elif args.command == "read":
        read(args.group_dir)
    elif args.command == "rule":
        rule(args.group_dir, args.low, args.high, args.min_distance)
    elif args.command == "truth-grid":
        truth_grid(parse_grid(args.grid), [0.1, 0.5, 1.0], args.min_distance)
    else:
        truth(args.group_dir, [0.1, 0.5, 1.0], args.min_distance)


if __name__ == "__main__":
    main()
