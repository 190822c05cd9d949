"""The texts of the RECL-in-words studies (studies/recl-words.yaml), made offline, and the truth of the synthetic one.

``synthetic OUT``: the synthetic-small-short language with its longest copy moved to 16 tokens back (copies 8..15
tokens back), written one word per token, separated by single spaces, into ``OUT/{train,valid,test}.txt``, so word w
of a split is token w of the split and the ideal model's losses (its ground truth) are losses in words; and a
byte-level BPE of 1,000 symbols trained on its train split into ``OUT/bpe``.

``wikitext OUT --source DIR``: the WikiText-2 sample (its test.txt as the train split, its valid.txt as valid), and
two BPEs trained on the train split: a byte-level one of 2,000 symbols (GPT-2's kind) into ``OUT/bpe-bytes`` and a
SentencePiece-style (Metaspace) one of 1,500 into ``OUT/bpe-metaspace`` (Llama's kind).

``truth GROUP_DIR``: the ideal model's RECL in words on a synthetic group's shared targets (its recl.json), beside
each member's.

``unigram GROUP_DIR --text DIR``: the baseline a member of the WikiText group must beat for its RECL to be read: a
unigram model of words counted on DIR/train.txt (add-one over the words of train and the scored split), its perplexity
per word on the group's shared targets, beside each member's at the grid's longest context. The unigram predicts the
word alone; a member also predicts the whitespace before it (a space or a line end), so the comparison slightly favours
the unigram.

    python studies/words_texts.py synthetic runs/words-synthetic
    txlab --home . recl --study studies/recl-words.yaml --profile cpu-synthetic
    python studies/words_texts.py truth results/recl/recl-words-tokenizers-cpu-synthetic-text-words-synthetic
    python studies/words_texts.py wikitext runs/words-wikitext
    txlab --home . recl --study studies/recl-words.yaml --profile cpu-wikitext architectures
    python studies/words_texts.py unigram results/recl/recl-words-architectures-cpu-wikitext-text-words-wikitext --text runs/words-wikitext
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from txlab.analysis import table8
from txlab.data import synthetic
from txlab.measure.words import cut_words

VARIANT, HORIZON, SEED = "synthetic-small-short", 16, 0
SIZES = {"train": 600_000, "valid": 60_000, "test": 60_000}
"""Words per split: the train split is what each member trains on (3,117,000 characters)."""


def synthetic_text(out: Path) -> None:
    spec = synthetic.get_spec(VARIANT, HORIZON)
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
    print(f"wrote {out}/train.txt (from {source}/test.txt), valid.txt, bpe-bytes and bpe-metaspace")


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


def ideal_table(record: dict) -> table8.GroupTable:
    """The ideal model's losses in words on a synthetic group's shared targets (its recl.json), at each c of its grid."""
    split = record["settings"]["split"]
    ideal = synthetic.generate(synthetic.get_spec(VARIANT, HORIZON), SIZES[split], SEED, split=split)
    targets = np.asarray(record["words"]["targets"])
    grid = tuple(record["grid"])
    return table8.GroupTable(np.stack([ideal.oracle_loss(c)[targets] for c in grid])[None], grid, ["ideal"])  # [1, G, W]


def truth(group_dir: Path, rs: list[float]) -> None:
    """The ideal model's RECL in words on the group's shared targets, beside the members' (recl.json)."""
    record = json.loads((group_dir / "recl.json").read_text())
    targets = record["words"]["targets"]
    rows = table8.recl_rows(ideal_table(record), rs=rs)
    print(f"ideal model on the {len(targets):,} shared words: " + ", ".join(f"r {row.r:g}: {row.cell()}" for row in rows))
    for row in record["rows"]:
        placebo = f", placebo-aware {row['placebo_label']}" if "placebo_label" in row else ""
        print(f"  {row['model']} r {row['r']:g}: {row['label']}{placebo}")


def unigram_perplexity(targets: np.ndarray, train_text: str, scored_text: str) -> float:
    """Perplexity per word of a unigram of ``train_text``'s words (add-one over the words of both texts) on ``targets``,
    word indices of ``scored_text`` (txlab.measure.words.cut_words), as recl.json's ``words`` holds them."""
    train = train_text.split()
    scored = cut_words(scored_text)
    words = [scored.text[int(a) : int(b)] for a, b in zip(scored.starts, scored.ends)]
    counts: dict[str, int] = {}
    for word in train:
        counts[word] = counts.get(word, 0) + 1
    vocab = len(set(counts) | set(words))
    nll = [-np.log((counts.get(words[t], 0) + 1) / (len(train) + vocab)) for t in np.asarray(targets).tolist()]
    return float(np.exp(np.mean(nll)))


def unigram(group_dir: Path, text: Path) -> None:
    """The unigram's perplexity per word on the group's shared targets, beside each member's at the longest context
    (recl.json's ``words``)."""
    record = json.loads((group_dir / "recl.json").read_text())
    split, grid = record["settings"]["split"], record["grid"]
    targets = np.asarray(record["words"]["targets"])
    ppl = unigram_perplexity(targets, (text / "train.txt").read_text(encoding="utf-8"), (text / f"{split}.txt").read_text(encoding="utf-8"))
    print(f"unigram of the training words: perplexity per word {ppl:.1f} on the {len(targets):,} shared targets")
    for name, member in record["words"]["members"].items():
        print(f"  {name}: perplexity per word at c = {grid[-1]}: {member['word_perplexity'][-1]:.1f}, "
              f"per byte {member['byte_perplexity'][-1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("synthetic", help="the synthetic text rendered as words, and its BPE").add_argument("out", type=Path)
    wiki = commands.add_parser("wikitext", help="the WikiText-2 sample as splits, and two BPEs")
    wiki.add_argument("out", type=Path)
    wiki.add_argument("--source", type=Path, default=Path("studies/data/wikitext-2-sample"))
    commands.add_parser("truth", help="the ideal RECL in words on a synthetic group's targets").add_argument("group_dir", type=Path)
    uni = commands.add_parser("unigram", help="a unigram's perplexity per word on a group's targets, beside the members'")
    uni.add_argument("group_dir", type=Path)
    uni.add_argument("--text", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "synthetic":
        synthetic_text(args.out)
    elif args.command == "wikitext":
        wikitext_text(args.out, args.source)
    elif args.command == "unigram":
        unigram(args.group_dir, args.text)
    else:
        truth(args.group_dir, [0.1, 0.5, 1.0])


if __name__ == "__main__":
    main()
