"""The word path over random text (issue 62): hypothesis draws Unicode text, whitespace of every kind and a tokenizer
(txlab's characters and words, enwik8's bytes, a byte-level and a Metaspace BPE) and checks what txlab.measure.words promises:

- every kept word's span re-tokenises exactly: reading context + span again gives the kept tokens, and the tokens
  after the context lie inside the span and spell the whole word;
- coverage is the same whether a text's targets are read at once or in blocks, and a file read whole or in blocks
  is the same text;
- the words' span bytes sum to the text's bytes up to its last word;
- nothing raises but the documented refusals (TxlabError);
- a prefix at a word end the tokenizer names stable is encoded as the text is up to it, so cells cut from one encoding
  per starting word are the cells encoded one by one.

The default run tries a few examples of each (a few seconds); `pytest -m slow` tries many more."""

import functools
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import some_text
from txlab.data.formats import read_text, read_text_blocks, words
from txlab.data.registry import EOS
from txlab.api import as_text_tokenizer
from txlab.data.tokenizers import CharTokenizer, CorpusTokenizer, WordTokenizer, prefix_encoding
from txlab.data.vocab import Vocab
from txlab.data.words import check_spaced, cut_words
from txlab.errors import TxlabError
from txlab.measure.words import member_cells, placebo_cells

KINDS = ("char", "word", "byte", "bpe", "metaspace")
WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u2029\u202f\u3000"
"""Python's whitespace, the exotic kinds included: what str.split() and the words' regex split on."""
TEXT = st.lists(st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6), st.text(WHITESPACE, min_size=1, max_size=3),
                          st.sampled_from(["the", "of", "é", "日本", "🙂", "a-b", "x\u0301"])), min_size=1, max_size=40).map("".join)
"""Random text: runs of any characters but surrogates (not UTF-8), of whitespace, and of common and composed words."""
EXAMPLES = [pytest.param(25, id="few"), pytest.param(400, id="many", marks=pytest.mark.slow)]


def fuzz(*strategies):
    """The test of a property over examples drawn from ``strategies``: a few by default, many under ``-m slow``."""
    def test(prop):
        @pytest.mark.parametrize("examples", EXAMPLES)
        def run(examples):
            settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)(given(*strategies)(prop))()

        run.__name__, run.__doc__ = prop.__name__, prop.__doc__
        return run

    return test


@functools.cache
def _bpe():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(some_text(500).splitlines(), trainer)
    return tok


@functools.cache
def _metaspace():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(prepend_scheme="first")
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=["<unk>"])
    tok.train_from_iterator(some_text(500).splitlines(), trainer)
    return tok


def tokenizer(kind: str, text: str):
    """A member's tokenizer of ``kind``; txlab's own with the vocabulary of the text's first half (so some symbols lack an id)."""
    known = text[: len(text) // 2 + 1]
    if kind == "char":
        tok = CharTokenizer()
        tok.vocab = Vocab.from_counts(Counter(known))
    elif kind == "word":
        tok = WordTokenizer()
        tok.vocab = Vocab.from_counts(Counter(words(known, "eos")), specials=(EOS,))
    elif kind == "byte":
        tok = CorpusTokenizer("byte", Vocab([str(b) for b in range(256)]))
    elif kind == "bpe":
        tok = _bpe()
    else:
        tok = _metaspace()
    return tok


def targets_and_grid(n_words: int) -> tuple[np.ndarray, tuple[int, ...]]:
    grid = (1, 2) if n_words > 2 else (1,)
    return np.arange(grid[-1], min(n_words, grid[-1] + 12), dtype=np.int64), grid


@fuzz(TEXT, st.sampled_from(KINDS))
def test_every_kept_words_span_retokenises_exactly(text, kind):
    found = cut_words(text)
    targets, grid = targets_and_grid(len(found))
    if not len(targets):
        return
    tok = as_text_tokenizer(tokenizer(kind, text))
    _, cells, _ = member_cells(found, tok, targets, grid, None)
    for (j, i), cell in cells.items():
        w = int(targets[i])
        lo, context_end = found.context(w, grid[j])
        context, span = text[lo:context_end], text[slice(*found.span(w))]
        again = tok.offsets([context + span])[0]
        assert np.array_equal(again.ids, cell.ids)
        starts, ends = again.starts[cell.first :], again.ends[cell.first :]
        assert starts.min() >= len(context) and ends.max() <= len(context + span)
        spelled = np.zeros(len(context + span), dtype=bool)
        for s, e in zip(starts, ends):
            spelled[s:e] = True
        word_start = len(context) + int(found.starts[w]) - found.span(w)[0]
        assert spelled[word_start:].all()  # every character of the word is in a token of the span


@fuzz(TEXT, st.sampled_from(KINDS), st.integers(1, 5), st.integers(1, 7))
def test_coverage_is_the_same_read_at_once_or_in_blocks_and_a_file_the_same_text(text, kind, block, block_chars):
    found = cut_words(text)
    targets, grid = targets_and_grid(len(found))
    tok = as_text_tokenizer(tokenizer(kind, text))
    whole = member_cells(found, tok, targets, grid, None)[0]
    parts = [member_cells(found, tok, targets[k : k + block], grid, None)[0] for k in range(0, len(targets), block)]
    assert np.array_equal(whole, np.concatenate(parts, axis=1) if parts else whole)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "text.txt"
        path.write_bytes(text.encode("utf-8"))
        try:
            read = read_text(path)
        except TxlabError as err:  # the documented refusals: a NUL character, a lone byte-order mark
            assert "NUL character" in str(err) or "byte-order mark" in str(err)
            return
        assert read == text.removeprefix("\ufeff")
        assert "".join(read_text_blocks(path, block_chars)) == read == "".join(read_text_blocks(path, block_chars, lines=False))


@fuzz(TEXT, st.sampled_from(KINDS), st.integers(1, 4), st.integers(0, 30))
def test_the_words_bytes_sum_to_the_texts_and_nothing_raises_but_a_refusal(text, kind, step, offset):
    found = cut_words(text)
    end = int(found.ends[-1]) if len(found) else 0
    assert int(found.span_bytes(np.arange(len(found))).sum()) == len(text[:end].encode("utf-8"))
    assert all(text[s:e] and not text[s:e].isspace() for s, e in zip(found.starts.tolist(), found.ends.tolist()))
    grid = (1, 1 + step)
    targets = np.arange(grid[-1], len(found), dtype=np.int64)[:8]
    tok = as_text_tokenizer(tokenizer(kind, text))
    try:
        check_spaced(found)
        member_cells(found, tok, targets, grid, 3)
        placebo_cells(found, tok, targets, grid, offset, None)
    except TxlabError:
        pass


class Unstable:
    """A tokenizer that names no end stable: every cell is encoded on its own (the reference the cut cells must equal)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def offsets(self, texts):
        return self.tokenizer.offsets(texts)

    def stable_ends(self, texts):
        return [np.zeros(0, dtype=np.int64) for _ in texts]


def same_encoding(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("ids", "starts", "ends", "unknown"))


@fuzz(TEXT, st.sampled_from(KINDS))
def test_a_prefix_at_a_stable_end_is_encoded_as_the_text_is_up_to_it(text, kind):
    tok = as_text_tokenizer(tokenizer(kind, text))
    try:
        [whole], [ends] = tok.offsets([text]), tok.stable_ends([text])
    except TxlabError:
        return  # a vocabulary without an unknown symbol refuses the text
    assert set(ends.tolist()) <= {int(e) for e in cut_words(text).ends}  # word ends only
    for end in ends.tolist():
        assert same_encoding(prefix_encoding(whole, end), tok.offsets([text[:end]])[0]), (text[:end], kind)


@fuzz(TEXT, st.sampled_from(KINDS), st.integers(0, 30))
def test_cells_cut_from_one_encoding_per_starting_word_are_the_cells_encoded_one_by_one(text, kind, offset):
    found = cut_words(text)
    targets, grid = targets_and_grid(len(found))
    if not len(targets):
        return
    tok = as_text_tokenizer(tokenizer(kind, text))
    try:
        cut, alone = member_cells(found, tok, targets, grid, None), member_cells(found, Unstable(tok), targets, grid, None)
    except TxlabError:
        return
    assert np.array_equal(cut[0], alone[0]) and cut[1].keys() == alone[1].keys()
    assert all(np.array_equal(cut[1][k].ids, alone[1][k].ids) and cut[1][k].first == alone[1][k].first for k in cut[1])
    if len(grid) > 1:
        try:
            far_cut, far_alone = placebo_cells(found, tok, targets, grid, offset, None), placebo_cells(found, Unstable(tok), targets, grid, offset, None)
        except TxlabError:
            return  # a text too short for far spans
        assert np.array_equal(far_cut[0], far_alone[0])
        assert all(np.array_equal(far_cut[1][k].ids, far_alone[1][k].ids) and far_cut[1][k].first == far_alone[1][k].first for k in far_cut[1])


@functools.cache
def _pre_tokenizers():
    tokenizers = pytest.importorskip("tokenizers")
    pre = tokenizers.pre_tokenizers
    made = (pre.ByteLevel(add_prefix_space=False), pre.Metaspace(prepend_scheme="first"), pre.Whitespace(), pre.WhitespaceSplit(),
            pre.BertPreTokenizer(), pre.Sequence([pre.Digits(individual_digits=True), pre.ByteLevel(add_prefix_space=False)]),
            pre.Sequence([pre.Punctuation(), pre.Metaspace()]))
    return dict(zip(PRE_TOKENIZERS, made))


PRE_TOKENIZERS = ("bytelevel", "metaspace", "whitespace", "whitespace-split", "bert", "digits-then-bytes", "punctuation-then-metaspace")


@fuzz(TEXT, st.sampled_from(PRE_TOKENIZERS))
def test_every_end_named_stable_ends_a_pre_token_as_the_library_splits_the_text(text, kind):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok.pre_tokenizer = _pre_tokenizers()[kind]
    [ends] = as_text_tokenizer(tok).stable_ends([text])
    pieces = {end for _, (_, end) in tok.pre_tokenizer.pre_tokenize_str(text)}
    assert set(ends.tolist()) <= pieces | {len(text)}, (text, kind)
    if kind in ("bytelevel", "whitespace-split"):  # at least every word end before a space: the rule is not empty
        words = cut_words(text)
        assert {int(e) for e in words.ends if e < len(text) and text[e] == " "} <= set(ends.tolist())
