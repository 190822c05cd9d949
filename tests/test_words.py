"""Losses in words (txlab.measure.words): l(c, w) equals a hand computation for every tokenizer kind built offline, the
window method equals the naive one, coverage leaves out words a tokenizer writes across their span's edges, and a
group's table holds only the words every member covers."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_causal_lm_model, sample_file
from copying_toy import STRENGTH, CopyingToy, assert_hand_computed, copying_nll

from txlab.data.formats import words as txlab_words
from txlab.analysis.per_unit import byte_perplexity, word_perplexity
from txlab.api import as_text_tokenizer
from txlab.data.tokenizers import CharTokenizer, CorpusTokenizer, WordTokenizer
from txlab.data.vocab import Vocab
from txlab.data.words import check_spaced, cut_words
from txlab.errors import TxlabError
from txlab.measure import words as W
from txlab.measure.collection import Collection
from txlab.measure.reading import placebo_offsets
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.runs.evaluate import read_in_chunks
from txlab.runs.scored import ScoredModel, run_tokenizer
from txlab.runs.zoo import run_config

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

TEXT = ""
"""The first 40,000 characters of the WikiText-2 sample's valid.txt, read by :func:`_text` before the module's first test."""
GRID = (1, 3, 6)


@pytest.fixture(autouse=True, scope="module")
def _text():
    # read when the tests run, not at import: a clone without the sample skips them instead of collecting none
    global TEXT
    TEXT = sample_file("wikitext-2-sample/valid.txt").read_text(encoding="utf-8")[:40_000]


def member(name: str, model, tok, tgt_len: int | None = None) -> ScoredModel:
    """A model as a group in words scores it (in memory), reading text with ``tok``."""
    return ScoredModel(model, name, tgt_len, model.context, tokenizer=as_text_tokenizer(tok))


def group(members, text, grid, n_blocks, block_len, method="auto", placebo=False, offsets=None) -> W.WordGroup:
    """Every member collected, then grouped on the words all cover (txlab.measure.words.group_word_losses)."""
    return W.group_word_losses(members, text, Collection("valid", grid, n_blocks, block_len, placebo=placebo, method=method, unit="word"),
                               offsets=offsets)


def encode(tok, texts):
    return as_text_tokenizer(tok).offsets(texts)


# --------------------------------------------------------------------------------------------------
# Tokenizers trained on the spot, models with random weights


def byte_level_bpe():
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT.splitlines(), trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def metaspace_bpe():
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(TEXT.splitlines(), trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"], show_progress=False))
    return tok


def wordpiece():
    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(TEXT.splitlines(), trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]"], show_progress=False))
    return tok


def unigram():
    tok = tokenizers.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(TEXT.splitlines(), trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>"], unk_token="<unk>",
                                                                       show_progress=False))
    return tok


def hf_model(vocab: int, arch: str = "gpt2", positions: int = 512):
    """A tiny random GPT-2 or Llama behind txlab's interface, read from a fresh start."""
    from txlab.models.hf import HFLanguageModel

    model = HFLanguageModel(random_causal_lm_model(arch, vocab, positions, attn_implementation="eager")).eval()
    model.set_context(Context(mem_len=0))
    return model


def txlab_tokenizer(kind: str):
    tok = CharTokenizer() if kind == "char" else WordTokenizer()
    if kind == "char":
        tok.vocab = Vocab(sorted(set(TEXT)))
    else:
        tok.vocab = Vocab(["<eos>", *sorted(set(TEXT.split()))])
    return tok


def txlab_model(n_token: int, **model):
    """A tiny Transformer-XL that carries memory (segments of 16, memory 32): the chunked path."""
    cfg = run_config("xl151m", "tiny")
    torch.manual_seed(0)
    model = build_model(dataclasses.replace(cfg.model, n_token=n_token, **model)).eval()
    model.set_context(Context(mem_len=32, same_length=True))
    return model


# --------------------------------------------------------------------------------------------------
# Hand computations: tokenize exactly the context text and the span, one forward, sum


def hand_hf(model, tok, context: str, span: str) -> float:
    ids = tok.encode(context + span, add_special_tokens=False).ids
    own = tok.encode(context, add_special_tokens=False).ids
    assert ids == own + tok.encode(span, add_special_tokens=False).ids, "a covered span is written by its own tokens"
    with torch.no_grad():
        logits = model.causal_lm(input_ids=torch.tensor([ids[:-1]])).logits[0].double()  # [n - 1, V]
    logp = torch.log_softmax(logits, dim=-1)
    return float(-sum(logp[k - 1, ids[k]] for k in range(len(own), len(ids))))


def hand_txlab(model, tok, context: str, span: str, tgt_len: int) -> float:
    """``tok``: a txlab tokenizer (char; word, whose vocabulary's unknown symbol stands for a word it lacks), or the
    encoding function itself."""
    def by_kind(text: str) -> list[int]:
        if tok.kind == "char":
            return [tok.vocab.index[ch] for ch in text]
        return tok.vocab.encode(txlab_words(text, "eos")[:-1]).tolist()  # words() ends every text with <eos>: not written here

    encode = tok if callable(tok) else by_kind
    ids, n_span = encode(context + span), len(encode(span))
    x = torch.tensor([ids])  # [1, n]
    with torch.no_grad():
        nll = torch.cat([out.nll for _, out in read_in_chunks(model, x[:, :-1], tgt_len, targets=x[:, 1:])], dim=1)[0]
    return float(nll[-n_span:].double().sum())


def cells_of(table: W.WordGroup):
    words = cut_words(TEXT)
    for j, c in enumerate(table.grid):
        for i, w in enumerate(table.targets.tolist()):
            lo, hi = words.context(w, c)
            yield j, i, TEXT[lo:hi], TEXT[slice(*words.span(w))]


# --------------------------------------------------------------------------------------------------
# Words


def test_words_are_runs_of_non_whitespace_and_spans_take_the_whitespace_before():
    text = " The cat\n\n  sat.\u00a0On"
    words = cut_words(text)
    assert [text[a:b] for a, b in zip(words.starts, words.ends)] == text.split() == ["The", "cat", "sat.", "On"]
    assert [text[slice(*words.span(w))] for w in range(4)] == [" The", " cat", "\n\n  sat.", "\u00a0On"]
    assert text[slice(*words.context(2, 2))] == "The cat"  # from the first word's first character to the last word's end
    assert text[slice(*words.context(3, 1))] == "sat."
    assert words.span_bytes(np.array([2, 3])).tolist() == [8, 4]  # NBSP is two bytes in UTF-8
    with pytest.raises(TxlabError, match="no context of 3 words"):
        words.context(2, 3)


def test_a_text_without_spaces_is_refused_and_says_what_to_do():
    with pytest.raises(TxlabError, match="too few spaces.*segment it"):
        check_spaced(cut_words("这是一个没有空格的句子，整段文字只是一个词。" * 3))
    check_spaced(cut_words(TEXT))


def test_a_tokenizer_is_taken_as_tokenizers_transformers_or_txlab_give_it(tmp_path):
    from txlab.data.tokenizers import load_hf_tokenizer

    tok = metaspace_bpe()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(tmp_path / "tok")
    texts = ["The cat  sat.\nOn \u2603 it", " and"]
    expected = encode(tok, texts)
    for other in (fast, load_hf_tokenizer(str(tmp_path / "tok"))):
        for a, b in zip(encode(other, texts), expected):
            assert all(np.array_equal(x, y) for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b)))
    assert expected[0].unknown.sum() == 2  # the line end and the snowman are <unk> for this BPE


def test_word_and_byte_perplexity_by_hand():
    losses = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 3.0]])  # [2, 3]
    assert word_perplexity(losses) == pytest.approx([math.exp(2.0), math.exp(1.0)])
    assert byte_perplexity(losses, np.array([2, 2, 2])) == pytest.approx([math.exp(1.0), math.exp(0.5)])


# --------------------------------------------------------------------------------------------------
# l(c, w) equals the hand computation, by both methods, for every tokenizer kind


@pytest.mark.parametrize("make, arch", [(byte_level_bpe, "gpt2"), (metaspace_bpe, "llama"), (wordpiece, "gpt2"), (unigram, "llama")],
                         ids=["byte-level-bpe", "metaspace-bpe", "wordpiece", "unigram"])
def test_hugging_face_tokenizers_give_the_hand_computed_loss(make, arch):
    tok = make()
    model = hf_model(tok.get_vocab_size(), arch)
    tables = {method: group([member("m", model, tok)], TEXT, GRID, n_blocks=2, block_len=12, method=method)
              for method in ("naive", "window")}
    naive, window = tables["naive"], tables["window"]
    assert window.methods == ("window",) and naive.methods == ("naive",)
    assert np.array_equal(naive.targets, window.targets) and naive.covered == window.covered
    np.testing.assert_allclose(window.losses, naive.losses, rtol=1e-5, atol=1e-5)
    assert naive.covered["m"] >= 0.5 * naive.drawn  # most words of English text are written from a space
    for j, i, context, span in list(cells_of(naive))[::3]:
        assert naive.losses[0, j, i] == pytest.approx(hand_hf(model, tok, context, span), rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("kind", ["char", "word"])
def test_txlab_tokenizers_give_the_hand_computed_loss_with_memory_and_segments(kind):
    tok = txlab_tokenizer(kind)
    model = txlab_model(len(tok.vocab))
    scored = member("m", model, tok, tgt_len=16)
    naive = group([scored], TEXT, GRID, n_blocks=2, block_len=8, method="naive")
    window = group([scored], TEXT, GRID, n_blocks=2, block_len=8, method="auto")
    assert window.methods == ("window",)  # relative positions: prefix-causal
    assert naive.shared == naive.drawn  # a vocabulary counted from the text covers every word
    np.testing.assert_allclose(window.losses, naive.losses, rtol=1e-5, atol=1e-5)
    for j, i, context, span in cells_of(naive):
        assert naive.losses[0, j, i] == pytest.approx(hand_txlab(model, tok, context, span, 16), rel=1e-4, abs=1e-4)


def placebo_cells_of(table: W.WordGroup, offsets):
    """(j, i, far text + near context, span) of each placebo cell, built from the definition: the c nearest words with
    the whitespace before them, after the c' - c words that start ``offsets[k]`` words after the window's start w - c',
    k the target's block."""
    words = cut_words(TEXT)
    n = len(words)
    for j, (c, c2) in enumerate(zip(table.grid, table.grid[1:])):
        extra = c2 - c
        for i, w in enumerate(table.targets.tolist()):
            f = (w - c2 + offsets[np.searchsorted(table.block_starts, w, side="right") - 1]) % (n - extra)
            far = TEXT[words.starts[f] : words.ends[f + extra - 1]]
            yield j, i, far + TEXT[words.ends[w - c - 1] : words.ends[w - 1]], TEXT[slice(*words.span(w))]


PLACEBO_ABS = 2e-5
"""How far a placebo cell (float32, up to ~50 nats) may be from its hand computation in float64: both read the same tokens,
and the batched and single forwards differ by about 2e-6 here; a tolerance relative to the loss (1e-4 of 18 nats) let an
error of 2e-4 nats through."""


def reads_far_span(table: W.WordGroup, offsets, hand) -> bool:
    """Whether the model's placebo cells depend on which far span they read: with the far span one word off, some cell
    moves by 50 times the tolerance, so a cell built from the wrong far words could not pass as the right one."""
    off_by_one = [offset + 1 for offset in offsets]
    return max(abs(float(table.placebo[0, j, i]) - hand(context, span)) for j, i, context, span in list(placebo_cells_of(table, off_by_one))[::8]) > 50 * PLACEBO_ABS


def test_placebo_cells_are_the_word_after_a_far_span_and_its_own_near_words():
    tok = byte_level_bpe()
    model = hf_model(tok.get_vocab_size())
    with_placebo = group([member("m", model, tok)], TEXT, GRID, n_blocks=2, block_len=12, placebo=True, offsets=[3000, 2200])
    assert with_placebo.placebo.shape == (1, len(GRID) - 1, len(with_placebo.targets))
    for j, i, context, span in placebo_cells_of(with_placebo, [3000, 2200]):
        assert float(with_placebo.placebo[0, j, i]) == pytest.approx(hand_hf(model, tok, context, span), rel=0, abs=PLACEBO_ABS)
    assert reads_far_span(with_placebo, [3000, 2200], lambda context, span: hand_hf(model, tok, context, span))
    alone = group([member("m", model, tok)], TEXT, GRID, n_blocks=2, block_len=12)
    assert alone.placebo is None and with_placebo.shared <= alone.shared  # a word is kept only where its placebo cells are exact too
    at = {w: i for i, w in enumerate(alone.targets.tolist())}
    common = [(i, at[w]) for i, w in enumerate(with_placebo.targets.tolist()) if w in at]
    assert common  # the true losses of a word are the same with or without its placebo
    np.testing.assert_allclose(with_placebo.losses[:, :, [i for i, _ in common]], alone.losses[:, :, [k for _, k in common]], rtol=1e-5, atol=1e-5)


def test_placebo_cells_of_a_txlab_model_with_memory_are_the_hand_computed_ones():
    tok = txlab_tokenizer("char")
    model = txlab_model(len(tok.vocab))
    offsets = [len(cut_words(TEXT)) // 2]  # a far span this random model tells from the next word's (the default is pinned below)
    table = group([member("m", model, tok, tgt_len=16)], TEXT, GRID, n_blocks=1, block_len=6, placebo=True, offsets=offsets)
    for j, i, context, span in placebo_cells_of(table, offsets):
        assert float(table.placebo[0, j, i]) == pytest.approx(hand_txlab(model, tok, context, span, 16), rel=0, abs=PLACEBO_ABS)
    assert reads_far_span(table, offsets, lambda context, span: hand_txlab(model, tok, context, span, 16))



def copy_ids(tok, text: str) -> list[int]:
    """The ids a txlab char or word tokenizer writes ``text`` with (as :func:`hand_txlab` reads them)."""
    if tok.kind == "char":
        return [tok.vocab.index[ch] for ch in text]
    return tok.vocab.encode(txlab_words(text, "eos")[:-1]).tolist()


def copy_by_hand(tok, strength: float, cells, shape) -> np.ndarray:
    """float64 ``shape``: each cell's loss of its span after its context, from the copying toy's hand computation on the
    ids of context + span (tests/copying_toy.py)."""
    out = np.full(shape, np.nan)
    for j, i, context, span in cells:
        ids, n_span = copy_ids(tok, context + span), len(copy_ids(tok, span))
        out[j, i] = copying_nll(ids, len(tok.vocab), strength)[-n_span:].sum()
    return out


@pytest.mark.parametrize("kind", ["char", "word"])
def test_placebo_cells_of_a_copying_model_are_its_hand_computation_after_each_blocks_far_span(kind):
    """A model that reads far context (tests/copying_toy.py), read in chunks with its state carried: every placebo cell
    is the loss worked out by hand on the far words of its block's own offset, its own near words and its word, at 1e-5
    nats; with the far span one word off, some cell would miss by far more. Its true cells are the hand computation too."""
    tok = txlab_tokenizer(kind)
    strength = STRENGTH if kind == "char" else 10.0  # a copied word must stand out of ~2,500 words (logit 5: by 0.06 nats)
    model = CopyingToy(len(tok.vocab), strength)
    model.set_context(Context(mem_len=4))  # so the member reads in chunks of 4 tokens, carrying its state
    offsets = [3000, 2200]
    table = group([member("m", model, tok, tgt_len=4)], TEXT, GRID, n_blocks=2, block_len=16, placebo=True, offsets=offsets)
    assert table.shared == table.drawn  # a vocabulary counted from the text covers every word
    shape = table.placebo[0].shape
    assert_hand_computed(table.placebo[0], copy_by_hand(tok, strength, placebo_cells_of(table, offsets), shape),
                         copy_by_hand(tok, strength, placebo_cells_of(table, [offset + 1 for offset in offsets]), shape))
    words = cut_words(TEXT)
    one_more = [(j, i, TEXT[slice(*words.context(w, c + 1))], span) for j, i, _, span in cells_of(table)
                for c, w in [(table.grid[j], int(table.targets[i]))]]  # the true cells read one word too far back
    assert_hand_computed(table.losses[0], copy_by_hand(tok, strength, cells_of(table), table.losses[0].shape),
                         copy_by_hand(tok, strength, one_more, table.losses[0].shape))


def test_a_model_that_is_not_prefix_causal_is_read_one_forward_per_cell():
    tok = txlab_tokenizer("char")
    model = txlab_model(len(tok.vocab), pos_enc="vaswani")  # absolute positions, counted back from each chunk's end
    table = group([member("m", model, tok, tgt_len=16)], TEXT, GRID, n_blocks=1, block_len=6)
    assert table.methods == ("naive",)
    for j, i, context, span in cells_of(table):
        assert table.losses[0, j, i] == pytest.approx(hand_txlab(model, tok, context, span, 16), rel=1e-4, abs=1e-4)


def test_a_line_end_is_part_of_the_next_words_span_and_the_word_tokenizer_writes_it_as_eos():
    tok = txlab_tokenizer("word")
    [enc] = encode(tok, ["the of\n\nand zzz-not-a-word"])
    assert [tok.vocab.symbols[i] if i >= 0 else None for i in enc.ids] == ["the", "of", "<eos>", "<eos>", "and", None]
    assert enc.starts.tolist() == [0, 4, 6, 7, 8, 12] and enc.unknown.tolist() == [False] * 5 + [True]
    words = cut_words("the of\n\nand")
    covered, cells, _ = W.member_cells(words, as_text_tokenizer(tok), np.array([2]), (2,), None)
    assert covered.all() and cells[0, 0].first == 2 and len(cells[0, 0].ids) == 5  # the span '\n\nand' is <eos> <eos> and


# --------------------------------------------------------------------------------------------------
# Coverage


def merging_tokenizer():
    """A BPE with no pre-tokenizer that writes 'a ' as one token: a word after 'a' starts inside it."""
    vocab = {"a": 0, "b": 1, "c": 2, " ": 3, "a ": 4}
    return tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[("a", " ")]))


def test_coverage_leaves_out_a_word_whose_span_a_token_crosses():
    text = "b c a b c c a c b"  # words 0..8
    words = cut_words(text)
    covered, cells, _ = W.member_cells(words, as_text_tokenizer(merging_tokenizer()), np.arange(1, 9), (1,), None)
    # 'a' (words 2, 6) is written with the space after it, so its span's end is inside a token; the word after it
    # (3, 7) starts inside that token. Everything else is exact.
    assert covered[0].tolist() == [True, False, False, True, True, False, False, True]
    assert cells[0, 0].ids.tolist() == [1, 3, 2] and cells[0, 0].first == 1  # 'b', ' ', 'c': the span ' c' is ' ', 'c'


@pytest.mark.parametrize("make, local", [(byte_level_bpe, True), (metaspace_bpe, True), (unigram, True),
                                         (wordpiece, False), (merging_tokenizer, False)], ids=lambda x: getattr(x, "__name__", str(x)))
def test_a_pipeline_names_stable_word_ends_only_where_its_structure_guarantees_them(make, local):
    # a normalizer (WordPiece's BertNormalizer) or no pre-tokenizer at all (merging): no end is named, each cell encodes alone
    tok = as_text_tokenizer(make())
    text = "the cat sat\non the  mat"
    [ends] = tok.stable_ends([text])
    # word ends 3, 7, 11, 14, 18, 23; a Metaspace pre-token runs on over a line end ('▁sat\non'), so 11 is not one of its
    expected = [] if not local else [3, 7, 14, 18, 23] if make in (metaspace_bpe, unigram) else [3, 7, 11, 14, 18, 23]
    assert ends.tolist() == expected
    with_strip = make()
    with_strip.add_tokens([tokenizers.AddedToken("cat", rstrip=True)])  # it would take the space after it
    assert as_text_tokenizer(with_strip).stable_ends([text])[0].tolist() == []


class Counting:
    """A tokenizer that counts the texts it encodes."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.texts = tokenizer, 0

    def offsets(self, texts):
        self.texts += len(texts)
        return self.tokenizer.offsets(texts)

    def stable_ends(self, texts):
        return self.tokenizer.stable_ends(texts)


@pytest.mark.parametrize("make", [byte_level_bpe, lambda: txlab_tokenizer("char")], ids=["bpe", "char"])
def test_a_block_encodes_one_text_per_window_where_every_end_is_stable(make):
    words = cut_words(" ".join(TEXT.split()[:200]))  # single spaces: every word end a pre-token's
    targets, grid = np.arange(40, 80), (1, 2, 4, 8)
    tok = Counting(as_text_tokenizer(make()))
    covered, cells, windows = W.member_cells(words, tok, targets, grid, None)
    assert tok.texts == len(windows) == len({int(w) - c for w in targets for c in grid})  # not two per (c, w) cell
    assert covered.all() and len(cells) == len(grid) * len(targets)
    tok.texts = 0  # a placebo cell's far span depends on its step's length and first near word alone: one text for each
    covered, cells, windows = W.placebo_cells(words, tok, targets, grid, 100, None)
    assert tok.texts == len(windows) == len({(c2 - c, int(w) - c) for w in targets for c, c2 in zip(grid, grid[1:])})
    assert covered.all() and {cell.window for cell in cells.values()} == set(windows)


def test_a_group_scores_only_the_words_every_member_covers():
    text = " ".join(["b c a b c c a c b"] * 30)
    bpe = byte_level_bpe()
    members = [member("bpe", hf_model(bpe.get_vocab_size()), bpe),
               member("merging", hf_model(5, "llama"), merging_tokenizer())]
    table = group(members, text, (1, 2), n_blocks=2, block_len=18, method="naive")
    words = cut_words(text)
    kinds = [text[words.starts[w]:words.ends[w]] for w in table.targets]
    previous = [text[words.starts[w - 1]:words.ends[w - 1]] for w in table.targets]
    assert "a" not in kinds and "a" not in previous  # left out for every member
    assert table.covered["bpe"] == table.drawn and table.covered["merging"] < table.drawn
    assert table.shared == table.covered["merging"] and table.losses.shape == (2, 2, len(table.targets))
    assert len(table.targets) == 2 * table.block_len
    alone = group(members[:1], text, (1, 2), n_blocks=2, block_len=18, method="naive")
    keep = np.isin(alone.targets, table.targets)
    np.testing.assert_allclose(alone.losses[0][:, keep], table.losses[0], rtol=1e-6)  # the bpe member's losses do not change


def test_an_unknown_token_in_the_span_is_not_covered_but_one_in_the_context_is_read():
    tok = metaspace_bpe()
    text = "the cat sat on \u2603the mat and \u2603 sat again"
    words = cut_words(text)
    covered, _, _ = W.member_cells(words, as_text_tokenizer(tok), np.array([4, 5, 7, 8]), (1, 3), None)
    assert not covered[:, 0].any() and not covered[:, 2].any()  # '\u2603the', '\u2603': an <unk> in the span
    assert covered[:, 1].all()  # 'mat' after '\u2603the': the context holds <unk>, as the member reads it
    assert covered[:, 3].all()


def test_a_word_longer_than_the_window_is_not_covered_and_a_long_context_is_cut_to_the_window():
    tok = txlab_tokenizer("char")
    model = hf_model(len(tok.vocab), positions=12)  # a learned position table of 12: the member's window
    text = "ab cd " * 20 + "abcdabcdabcdabcd " + "ab cd " * 20
    words = cut_words(text)
    long_word = text.split().index("abcdabcdabcdabcd")
    covered, _, _ = W.member_cells(words, as_text_tokenizer(tok), np.array([long_word, long_word + 1]), (1, 4), model.max_context)
    assert not covered[:, 0].any() and covered[:, 1].all()
    table = group([member("m", model, tok)], text, (1, 4), n_blocks=1, block_len=10, method="window")
    assert table.truncated[0].tolist() == [0, 10]  # 4 words and a span: 14 characters, 13 inputs > 12
    naive = group([member("m", model, tok)], text, (1, 4), n_blocks=1, block_len=10, method="naive")
    np.testing.assert_allclose(table.losses, naive.losses, rtol=1e-5)
    w = int(table.targets[0])
    lo, hi = words.context(w, 4)
    ids = [tok.vocab.index[ch] for ch in text[lo : words.span(w)[1]]][-13:]  # the window: the nearest 12 inputs and the target
    with torch.no_grad():
        logp = torch.log_softmax(model.causal_lm(input_ids=torch.tensor([ids[:-1]])).logits[0].double(), dim=-1)
    n_span = words.span(w)[1] - hi
    expected = -sum(float(logp[k - 1, ids[k]]) for k in range(len(ids) - n_span, len(ids)))
    assert table.losses[0, 1, 0] == pytest.approx(expected, rel=1e-4)


def test_bad_groups_are_refused():
    tok = txlab_tokenizer("char")
    scored = member("m", hf_model(len(tok.vocab)), tok)
    with pytest.raises(TxlabError, match="names must differ"):
        group([scored, scored], TEXT, GRID, n_blocks=1, block_len=4)
    with pytest.raises(TxlabError, match="ascending"):
        group([scored], TEXT, (3, 1), n_blocks=1, block_len=4)
    with pytest.raises(TxlabError, match="fast"):
        as_text_tokenizer(object()).offsets
    with pytest.raises(TxlabError, match="outside the model's vocabulary"):
        group([member("small", hf_model(5), tok)], TEXT, GRID, n_blocks=1, block_len=4)


# --------------------------------------------------------------------------------------------------
# The API


def test_the_api_scores_a_run_on_own_text_beside_a_checkpoint_and_group_recl_takes_the_tables(tmp_path, untrained_run, hf_checkpoint):
    import txlab

    text_file = tmp_path / "text.txt"
    hf_checkpoint(tmp_path / "ckpt", text_file=text_file)
    run = untrained_run(tmp_path / "run", sets=["data.corpus=text", f"data.text={text_file}", "data.tokenizer=word"])
    models = [txlab.load_model(run), txlab.load_model(f"hf:{tmp_path / 'ckpt'}")]
    tables, table = txlab.word_context_losses(models, text_file, grid=[1, 2, 4], n_blocks=2, block_len=10)
    assert table.members == ("run", "ckpt") and table.covered == {"run": 20, "ckpt": 20} and table.methods == ("window", "window")
    for losses, table_losses in zip(tables, table.losses):
        assert losses.grid == (1, 2, 4) and np.array_equal(losses.targets, table.targets) and losses.block_len == 10
        np.testing.assert_array_equal(losses.losses, table_losses)
    rows = txlab.group_recl(tables, table.members, rs=[1.0], n_boot=20)
    assert [row.model for row in rows] == ["run", "ckpt"]
    assert np.all(np.isfinite(table.byte_perplexity())) and table.word_perplexity().shape == (2, 3)
    by_hand = group([dataclasses.replace(models[0], home=None)], text_file.read_text(), (1, 2, 4), n_blocks=2, block_len=10, method="naive")
    np.testing.assert_allclose(by_hand.losses[0], table.losses[0], rtol=1e-5, atol=1e-5)


def test_a_run_on_a_synthetic_corpus_brings_no_text_tokenizer(tmp_path, untrained_run):
    run = untrained_run(tmp_path / "run")
    with pytest.raises(TxlabError, match="symbols, not text.*--text FILE"):
        run_tokenizer(run)


# --------------------------------------------------------------------------------------------------
# Runs on the registry's corpora: their vocabulary reads text by the corpus's unit


def test_a_word_corpus_vocabulary_reads_a_word_it_lacks_as_unk_in_the_context_and_gives_the_hand_computed_loss():
    half = TEXT[: len(TEXT) // 2]
    vocab = Vocab(["<eos>", "<unk>", *sorted(set(half.split()) - {"<unk>"})], unk="<unk>")  # WikiText's layout; later words lack ids
    tok = CorpusTokenizer("word", vocab)
    model = txlab_model(len(vocab))
    table = group([member("m", model, tok, tgt_len=16)], TEXT, GRID, n_blocks=2, block_len=12)
    assert table.methods == ("window",) and table.covered["m"] < table.drawn  # the words the vocabulary lacks are left out

    def corpus_ids(text: str) -> list[int]:  # the corpus's rule: whitespace-split words, <eos> at a line end, <unk> for the rest
        return vocab.encode(txlab_words(text, "eos")[:-1]).tolist()

    unknown_contexts = 0
    for j, i, context, span in cells_of(table):
        assert vocab.unk_id not in corpus_ids(span)  # a target is a word the vocabulary holds (not <unk>, not a word it lacks)
        unknown_contexts += vocab.unk_id in corpus_ids(context)
        assert table.losses[0, j, i] == pytest.approx(hand_txlab(model, corpus_ids, context, span, 16), rel=1e-4, abs=1e-4)
    assert unknown_contexts > 0  # some contexts are read with <unk> in them, as the member reads them


def test_a_byte_vocabulary_reads_every_utf8_byte_and_gives_the_hand_computed_loss():
    text = TEXT[:12_000].replace("e", "\u00e9").replace(" the ", " \u6771\u4eac ")  # two- and three-byte characters in most words
    data = text.encode("utf-8")
    vocab = Vocab([str(b) for b in sorted(set(data))])  # enwik8's symbols: decimal byte values
    tok = CorpusTokenizer("byte", vocab)
    [enc] = encode(tok, ["caf\u00e9 \u6771"])
    assert enc.starts.tolist() == [0, 1, 2, 3, 3, 4, 5, 5, 5] and enc.ends.tolist() == [1, 2, 3, 4, 4, 5, 6, 6, 6]  # a character's bytes share its span
    model = hf_model(len(vocab))
    table = group([member("m", model, tok)], text, GRID, n_blocks=2, block_len=10)
    assert table.shared == table.drawn  # a boundary between characters is one between bytes: every word is exact
    words = cut_words(text)

    def byte_ids(piece: str) -> list[int]:
        return [vocab.index[str(b)] for b in piece.encode("utf-8")]

    multibyte = 0
    for j, i, context, span in ((j, i, text[slice(*words.context(w, c))], text[slice(*words.span(w))])
                                for j, c in enumerate(table.grid) for i, w in enumerate(table.targets.tolist())):
        multibyte += len(span.encode("utf-8")) > len(span)
        ids = byte_ids(context + span)
        with torch.no_grad():
            logp = torch.log_softmax(model.causal_lm(input_ids=torch.tensor([ids[:-1]])).logits[0].double(), dim=-1)
        n_span = len(byte_ids(span))
        expected = -sum(float(logp[k - 1, ids[k]]) for k in range(len(ids) - n_span, len(ids)))
        assert table.losses[0, j, i] == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert multibyte > 0
    np.testing.assert_array_equal(table.span_bytes, [len(text[slice(*words.span(w))].encode("utf-8")) for w in table.targets])


def lm1b_folder(folder: Path) -> None:
    folder.mkdir()
    lines = TEXT[:20_000].splitlines()
    (folder / "news.en-00001-of-00100").write_text("\n".join(line for line in lines[::2] if line.strip()) + "\n")
    (folder / "news.en.heldout-00000-of-00050").write_text("\n".join(line for line in lines[1::2] if line.strip()) + "\n")


def enwik8_file(folder: Path) -> None:
    folder.mkdir()
    (folder / "enwik8").write_bytes("caf\u00e9 \u6771\u4eac x\n".encode("utf-8") * 200)  # 15 bytes a line: the 90/5/5 cuts fall between lines


REGISTRY_FOLDERS = {
    "wikitext-2": lambda d: (d.mkdir(), (d / "train.txt").write_text(TEXT[:20_000]), (d / "valid.txt").write_text(TEXT[20_000:])),
    "tinyshakespeare": lambda d: (d.mkdir(), (d / "input.txt").write_text(sample_file("tinyshakespeare/input.txt").read_text()[:30_000])),
    "enwik8": enwik8_file,
    "lm1b": lm1b_folder,
}


@pytest.mark.parametrize("corpus, kind", [("wikitext-2", "word"), ("tinyshakespeare", "char"), ("enwik8", "byte"), ("lm1b", "word")])
def test_a_registry_run_reads_its_corpus_recovered_text_as_the_corpus_tokens_it(tmp_path, untrained_run, corpus, kind):
    from txlab.data.corpus import load_corpus, split_text_of
    from txlab.runs.checkpoint import saved_config

    REGISTRY_FOLDERS[corpus](tmp_path / corpus)
    run = untrained_run(tmp_path / "run", sets=[f"data.corpus={corpus}", f"data.corpus_dir={tmp_path / corpus}"])
    tok = run_tokenizer(run)
    data = saved_config(run).data
    assert tok.kind == kind and tok.vocab == load_corpus(data, progress=False).vocab
    text = split_text_of(data, "valid")
    [encoding] = encode(tok, [text])
    tokens = np.asarray(load_corpus(data, progress=False).split("valid"))
    if corpus == "lm1b":
        assert tok.line_end == "<S>" and tokens[0] == tok.vocab.index["<S>"]
        tokens = tokens[1:]  # the split's opening <S>: no line end in the text
    np.testing.assert_array_equal(encoding.ids, tokens)  # the member reads the recovered text as the tokens it was scored on
    assert encoding.unknown.sum() == (tokens == tok.vocab.unk_id).sum() if tok.vocab.unk else not encoding.unknown.any()
    if corpus == "enwik8":
        assert "\u6771\u4eac" in text and len(text.encode("utf-8")) == len(tokens)


# --------------------------------------------------------------------------------------------------
# Pinned: what an audit's mutants of the word path changed without failing a test


def test_each_block_reads_its_far_spans_at_its_own_offset_drawn_by_the_seed():
    tok = txlab_tokenizer("char")
    model = txlab_model(len(tok.vocab))  # reads its far span: it lies within its memory
    n = len(cut_words(TEXT))

    def placebo(**how):
        return group([member("m", model, tok, tgt_len=16)], TEXT, GRID, n_blocks=2, block_len=6, placebo=True, **how)

    default, drawn = placebo(), placebo_offsets(n, 2, 0, GRID)
    assert np.array_equal(default.placebo, placebo(offsets=drawn).placebo) and drawn[0] != drawn[1]
    moved = placebo(offsets=[drawn[0], drawn[0]]).placebo.astype(np.float64)  # block 1 at block 0's offset: only block 1 moves
    first = np.searchsorted(default.targets, default.block_starts[1])  # [W]: where block 1's shared words begin
    assert np.array_equal(moved[..., :first], default.placebo[..., :first])
    assert np.abs(moved[..., first:] - default.placebo[..., first:]).max() > 1e-3  # the model tells the two far spans apart


def test_a_tokenizer_that_adds_a_bos_token_scores_the_same_words():
    """The member's own special tokens are never added to what it reads (the text's tokens only)."""
    plain = metaspace_bpe()
    with_bos = metaspace_bpe()
    with_bos.add_special_tokens(["<s>"])
    with_bos.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", with_bos.token_to_id("<s>"))])
    assert with_bos.encode("the cat").ids[0] == with_bos.token_to_id("<s>")  # as the tokenizer writes a text by default
    model = hf_model(with_bos.get_vocab_size(), "llama")
    tables = [group([member("m", model, tok)], TEXT, GRID, n_blocks=1, block_len=10) for tok in (plain, with_bos)]
    np.testing.assert_array_equal(tables[0].losses, tables[1].losses)


def kept_table(name: str, losses: np.ndarray, placebo: np.ndarray | None = None) -> W.WordLosses:
    """A member's table in words made by hand: ``losses`` [G, N] with NaN where it does not cover a word."""
    grid, n = (1, 2), losses.shape[1]
    return W.WordLosses(name, grid, np.arange(10, 10 + n), n // 2, losses.astype(np.float32), np.zeros(losses.shape, dtype=bool), "naive",
                        None, {}, None, None if placebo is None else placebo.astype(np.float32))


def test_a_group_keeps_the_first_words_every_member_covers_in_each_block_and_needs_their_placebo_cells():
    text = cut_words(" ".join(f"w{i}" for i in range(40)))
    collection = Collection("valid", (1, 2), 2, 4, placebo=True, unit="word")  # 2 blocks of 4 drawn words: words 10..17
    a = np.array([[1, np.nan, 3, 4, 5, 6, 7, 8]] * 2, dtype=float)
    b = np.array([[1, 2, 3, 4, 5, 6, 7, 8]] * 2, dtype=float)
    placebo_a, placebo_b = np.ones((1, 8)), np.ones((1, 8))
    placebo_b[0, 4] = np.nan  # b cannot read the placebo of the second block's first word
    grouped = W.word_group([kept_table("a", a, placebo_a), kept_table("b", b, placebo_b)], text, collection)
    # block 1 shares words 10, 12, 13; block 2 shares 15, 16, 17: three each, the first three
    assert grouped.targets.tolist() == [10, 12, 13, 15, 16, 17] and grouped.block_len == 3
    assert grouped.covered == {"a": 7, "b": 7} and grouped.shared == 6
    np.testing.assert_array_equal(grouped.losses[1, 0], [1, 3, 4, 6, 7, 8])
    fewer = W.word_group([kept_table("a", a, placebo_a), kept_table("b", b, np.where(np.arange(8) == 6, np.nan, placebo_b))], text, collection)
    assert fewer.targets.tolist() == [10, 12, 15, 17] and fewer.block_len == 2  # the second block keeps 2 (15, 17): so does the first


def test_a_word_whose_span_is_exactly_the_window_is_covered_and_one_token_longer_is_not():
    tok = txlab_tokenizer("char")
    window = hf_model(len(tok.vocab), positions=12).max_context  # the span's first token is predicted from the context's last
    text = "ab cd " * 20 + "x" * (window - 1) + " ab cd " + "y" * window + " ab cd " * 10
    words = cut_words(text)
    fits, longer = text.split().index("x" * (window - 1)), text.split().index("y" * window)  # spans of 12 and 13 characters
    covered, _, _ = W.member_cells(words, as_text_tokenizer(tok), np.array([fits, longer]), (1, 2), window)
    assert covered[:, 0].all() and not covered[:, 1].any()
