"""Losses in words beside losses in tokens, on the same member: time per target, timed in alternation.

    python benchmarks/words.py [--quick] [--repeats 5] [--out results/bench/words-vs-tokens-cpu.md]

One random Hugging Face Llama (4 layers of 128, transformers, built from a config) reads the WikiText-2 sample's valid
split (studies/data) through a byte-level BPE of 1,000 symbols trained on its test split. Tokens: one collection of
4 blocks of 64 targets at contexts 16:128:16 tokens (txlab.measure.losses.collect_losses, the window method). Words:
the same member in words (txlab.measure.words.group_word_losses, kept in memory) on 4 blocks of 64 words at the
contexts in words that read about as many tokens (the token grid over its tokens per word, rounded). Neither reads
placebo losses. The two run in rounds, one call of each per round (txlab.timing.interleaved_median_seconds), so load
slows them alike; time per target is the median call over the targets it scored (in words, the shared words kept).
The words' tokenizing is timed apart (every call to the tokenizer's offsets and stable ends), to say what share of their time it is.
The matmul ceiling is measured in the same run. ``--quick``: tiny shapes in seconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def bpe(train_text: str, vocab: int):
    """A byte-level BPE trained on ``train_text`` (GPT-2's pre-tokenizer), as txlab reads text with it."""
    import tokenizers
    import transformers

    from txlab.data.tokenizers import HfTokenizer

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text.splitlines(), trainer)
    return HfTokenizer("benchmark-bpe", transformers.PreTrainedTokenizerFast(tokenizer_object=tok))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes, for tests")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="where to write the Markdown (and .json beside it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import transformers

    from txlab.data.words import cut_words
    from txlab.measure.collection import Collection
    from txlab.measure.losses import collect_losses, sample_blocks
    from txlab.measure.words import group_word_losses
    from txlab.models.hf import HFLanguageModel
    from txlab.models.interface import Context
    from txlab.runs.scored import ScoredModel
    from txlab.timing import cpu_model, interleaved_median_seconds, matmul_peak_gflops

    data = ROOT / "studies" / "data" / "wikitext-2-sample"
    valid = (data / "valid.txt").read_text(encoding="utf-8")[: 60_000 if args.quick else None]
    tokenizer = bpe((data / "test.txt").read_text(encoding="utf-8")[: 200_000 if args.quick else None], 300 if args.quick else 1000)
    hidden, layers, blocks, block_len = (32, 1, 2, 16) if args.quick else (128, 4, 4, 64)
    token_grid = (4, 8, 16) if args.quick else tuple(range(16, 129, 16))
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer.vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 32,
                                      intermediate_size=4 * hidden, max_position_embeddings=4096)
    model = HFLanguageModel(transformers.AutoModelForCausalLM.from_config(config)).eval()
    model.set_context(Context(mem_len=0))
    tokens = np.asarray(tokenizer.encode(valid), dtype=np.int64)
    words = cut_words(valid)
    per_word = len(tokens) / len(words)
    word_grid = tuple(sorted({max(1, round(c / per_word)) for c in token_grid}))
    starts = sample_blocks(len(tokens), blocks, block_len, token_grid[-1], 0)
    timed = TimedTokenizer(tokenizer)
    member = ScoredModel(model, "llama", None, Context(mem_len=0), tokenizer=timed)
    collection = Collection("valid", word_grid, blocks, block_len, method="window", unit="word")
    scored = {}

    def in_tokens():
        table = collect_losses(model, tokens, token_grid, starts, block_len, tgt_len=token_grid[-1], context=Context(mem_len=0), method="window")
        scored["tokens"] = table.shape[1]

    def in_words():
        group = group_word_losses([member], words, collection)
        scored["words"] = len(group.targets)

    ceiling_before = matmul_peak_gflops(args.threads)
    timed.seconds = 0.0
    seconds = interleaved_median_seconds([in_tokens, in_words], warmup=1, repeats=args.repeats)
    tokenize_share = timed.seconds / (args.repeats + 1) / seconds[1]  # the mean call's tokenizing over the median call
    result = {
        "date": datetime.date.today().isoformat(), "command": "python benchmarks/words.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpu": cpu_model(), "threads": args.threads, "torch": torch.__version__, "repeats": args.repeats,
        "matmul_gflops": [ceiling_before, matmul_peak_gflops(args.threads)], "model": f"hf-llama-{layers}x{hidden} (random)",
        "tokenizer": f"byte-level BPE of {len(tokenizer.vocab):,}", "tokens_per_word": per_word,
        "tokens": {"grid": list(token_grid), "targets": scored["tokens"], "seconds": seconds[0], "ms_per_target": 1e3 * seconds[0] / scored["tokens"]},
        "words": {"grid": list(word_grid), "targets": scored["words"], "seconds": seconds[1], "ms_per_target": 1e3 * seconds[1] / scored["words"],
                  "tokenizing_share": tokenize_share},
    }
    result["words_over_tokens_per_target"] = result["words"]["ms_per_target"] / result["tokens"]["ms_per_target"]
    result["words_over_tokens_per_target_token"] = result["words_over_tokens_per_target"] / per_word
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


class TimedTokenizer:
    """A txlab tokenizer whose offsets and stable ends (all the word path asks of it) are timed: ``seconds`` adds up their calls."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.seconds = tokenizer, 0.0
        self.kind, self.vocab, self.tokenizer_id = tokenizer.kind, tokenizer.vocab, tokenizer.tokenizer_id

    def offsets(self, texts):
        return self._timed(self.tokenizer.offsets, texts)

    def stable_ends(self, texts):
        return self._timed(self.tokenizer.stable_ends, texts)

    def _timed(self, method, texts):
        began = time.perf_counter()
        try:
            return method(texts)
        finally:
            self.seconds += time.perf_counter() - began


def markdown(r: dict) -> str:
    t, w = r["tokens"], r["words"]
    return "\n".join([
        "# Losses in words beside losses in tokens, on one member",
        "",
        f"Produced by `{r['command']}` on {r['date']} ({r['cpu']}, {r['threads']} threads, torch {r['torch']}); matmul ceiling "
        f"{r['matmul_gflops'][0]:.0f} and {r['matmul_gflops'][1]:.0f} GFLOP/s before and after. {r['model']}, {r['tokenizer']}, "
        f"{r['tokens_per_word']:.2f} tokens per word; median of {r['repeats']} interleaved rounds.",
        "",
        "| unit | grid | targets | seconds | ms per target |",
        "|---|---|---:|---:|---:|",
        f"| tokens | {t['grid'][0]}..{t['grid'][-1]} tokens | {t['targets']:,} | {t['seconds']:.3f} | {t['ms_per_target']:.3f} |",
        f"| words | {w['grid'][0]}..{w['grid'][-1]} words | {w['targets']:,} | {w['seconds']:.3f} | {w['ms_per_target']:.3f} |",
        "",
        f"- A word target costs {r['words_over_tokens_per_target']:.2f}x a token target; per token it spells, "
        f"{r['words_over_tokens_per_target_token']:.2f}x.",
        f"- Tokenizing (one encoding per starting word, and the cells that cannot be cut from it) is {w['tokenizing_share']:.0%} of the words' time.",
    ])


if __name__ == "__main__":
    main()
