"""Corpora: vocabulary order, each reader on its real format, the cache, batching and evaluation order."""

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from txlab.config import DataConfig
from txlab.data import formats, synthetic
from txlab.data.batching import batchify, eval_segments, iter_segments, varlen_length
from txlab.data.corpus import Corpus, generated_split, load_corpus
from txlab.data.registry import EOS
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError

from conftest import sample_file


def load(name: str, directory: Path | None = None, **options) -> Corpus:
    return load_corpus(DataConfig(corpus=name, corpus_dir=str(directory or ""), **options), progress=False)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# ---------------------------------------------------------------------------------------------------
# Vocabulary


def test_vocab_specials_then_frequency_then_first_occurrence():
    counts = Counter("the cat saw the dog and a cat the end".split())
    vocab = Vocab.from_counts(counts, specials=(EOS,))
    assert vocab.symbols == [EOS, "the", "cat", "saw", "dog", "and", "a", "end"]
    assert vocab.encode(["cat", "end", EOS]).tolist() == [2, 7, 0]
    assert vocab.decode([1, 3]) == ["the", "saw"]
    assert Vocab.from_counts(counts, min_freq=2).symbols == ["the", "cat"]


def test_vocab_unknown_symbols_and_duplicates():
    vocab = Vocab.from_counts(Counter("a <unk> b a".split()), specials=(EOS,), unk="<unk>")
    assert vocab.symbols == [EOS, "a", "<unk>", "b"] and vocab.unk_id == 2
    assert vocab.encode(["b", "never-seen"]).tolist() == [3, 2]
    with pytest.raises(TxlabError, match="'zz' is not in the vocabulary"):
        Vocab(["a", "b"]).encode(["a", "zz"])
    with pytest.raises(TxlabError, match="more than once"):
        Vocab(["a", "b", "a"])


def test_vocab_hash_is_sha256_of_the_symbol_list():
    vocab = Vocab(["<eos>", "b", "a"])
    expected = hashlib.sha256(json.dumps(["<eos>", "b", "a"], separators=(",", ":")).encode()).hexdigest()
    assert vocab.sha256 == expected
    assert Vocab(["<eos>", "a", "b"]).sha256 != expected


def test_vocab_save_load_json_and_text(tmp_path):
    words = Vocab([EOS, "the", "<unk>", "naïve"], unk="<unk>")
    chars = Vocab(["\n", " ", "a", "\u2028"])
    assert Vocab.load(words.save(tmp_path / "w.txt")) == words
    assert Vocab.load(words.save(tmp_path / "w.json")) == words
    assert Vocab.load(chars.save(tmp_path / "c.json")) == chars
    with pytest.raises(TxlabError, match="save the vocabulary as .json"):
        chars.save(tmp_path / "c.txt")
    tampered = json.loads((tmp_path / "w.json").read_text())
    tampered["symbols"][1], tampered["symbols"][3] = tampered["symbols"][3], tampered["symbols"][1]
    write(tmp_path / "bad.json", json.dumps(tampered))
    with pytest.raises(TxlabError, match="corrupt"):
        Vocab.load(tmp_path / "bad.json")


# ---------------------------------------------------------------------------------------------------
# Readers, each on a small file in its real format

WIKI = {
    "train": " = Valkyria = \n\n The <unk> sat . \n The cat sat \n",
    "valid": " The dog sat . \n",
    "test": "cat",  # no final newline: still gets its <eos>
}


def test_wikitext103_reader_vocab_from_train(tmp_path):
    for split, text in WIKI.items():
        write(tmp_path / f"wiki.{split}.tokens", text)
    corpus = load("wikitext-103", tmp_path)
    assert corpus.vocab.symbols == [EOS, "=", "The", "sat", "Valkyria", "<unk>", ".", "cat"]
    assert corpus.split("train").tolist() == [1, 4, 1, 0, 0, 2, 5, 3, 6, 0, 2, 7, 3, 0]
    assert corpus.split("valid").tolist() == [2, 5, 3, 6, 0]  # 'dog' is not in train: <unk>
    assert corpus.split("test").tolist() == [7, 0]
    assert corpus.to_text(corpus.split("train")[:5]) == "= Valkyria = <eos> <eos>"
    assert corpus.split("train").dtype == np.uint8 and corpus.level == "word"


def test_wikitext2_reader_counts_all_splits_as_the_reference(tmp_path):
    for split, text in WIKI.items():
        write(tmp_path / f"{split}.txt", text)  # the reference's renamed files
    corpus = load("wikitext-2", tmp_path)
    assert corpus.vocab.symbols == [EOS, "The", "sat", "=", ".", "cat", "Valkyria", "<unk>", "dog"]
    assert corpus.to_text(corpus.split("valid")) == "The dog sat . <eos>"


def test_ptb_reader_keeps_case_and_handles_crlf(tmp_path):
    write(tmp_path / "ptb.train.txt", " the N stock fell \r\n a <unk> rose \r\n")
    write(tmp_path / "ptb.valid.txt", " the stock rose \n")
    write(tmp_path / "ptb.test.txt", " N fell \n")
    corpus = load("ptb", tmp_path)
    assert corpus.to_text(corpus.split("train")) == "the N stock fell <eos> a <unk> rose <eos>"
    assert corpus.vocab.symbols[:5] == [EOS, "the", "N", "stock", "fell"]


ENWIK = (b"<page>\n  <title>Caf\xc3\xa9</title>\n  <text>AAA bbb</text>\n</page>\n" * 5)[:200]


def _enwik_bytes(corpus: Corpus, split: str) -> bytes:
    return bytes(int(s) for s in corpus.vocab.decode(corpus.split(split)))


@pytest.mark.parametrize("archived", [False, True])
def test_enwik8_reader_bytes_90_5_5(tmp_path, archived):
    if archived:
        with zipfile.ZipFile(tmp_path / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("enwik8", ENWIK)
    else:
        write(tmp_path / "enwik8", ENWIK)
    corpus = load("enwik8", tmp_path)
    assert [len(corpus.split(s)) for s in ("train", "valid", "test")] == [180, 10, 10]
    assert _enwik_bytes(corpus, "train") + _enwik_bytes(corpus, "valid") + _enwik_bytes(corpus, "test") == ENWIK
    counts = Counter(ENWIK)
    assert len(corpus.vocab) == len(counts) and corpus.vocab.symbols[0] == str(counts.most_common(1)[0][0])
    assert corpus.to_text(corpus.split("train")[:14]) == "<page>\n  <titl"
    assert "Café" in corpus.to_text(corpus.split("train")[:40])


def test_enwik8_drop_newlines_option(tmp_path):
    write(tmp_path / "enwik8", ENWIK)
    kept, dropped = load("enwik8", tmp_path), load("enwik8", tmp_path, enwik8_drop_newlines=True)
    assert _enwik_bytes(dropped, "train") == ENWIK[:180].replace(b"\n", b"")
    assert "10" in kept.vocab and "10" not in dropped.vocab
    assert kept.cache_dir != dropped.cache_dir


def test_text8_reader_characters(tmp_path):
    text = " anarchism originated as a term of abuse first used against early working class radicals" * 3
    write(tmp_path / "text8", text)
    corpus = load("text8", tmp_path)
    n, k = len(text), len(text) // 20
    assert [len(corpus.split(s)) for s in ("train", "valid", "test")] == [n - 2 * k, k, k]
    assert corpus.vocab.symbols[0] == " " and corpus.level == "char"
    assert corpus.to_text(np.concatenate([corpus.split(s) for s in ("train", "valid", "test")])) == text


def _lm1b_tree(root: Path) -> Path:
    write(root / "training-monolingual.tokenized.shuffled" / "news.en-00002-of-00100", "b b b\nc a\n")
    write(root / "training-monolingual.tokenized.shuffled" / "news.en-00001-of-00100", "a a b\n")
    write(root / "heldout-monolingual.tokenized.shuffled" / "news.en.heldout-00000-of-00050", "a z\n")
    return root


def _reference_sentence_stream(sentences: list[list[str]]) -> list[str]:
    """What the reference's sentence streams read: each sentence as <S> words <S>, the next one taking
    over when one token (the closing <S>, already a target) is left, so that it opens the next."""
    stream: list[str] = []
    for words in sentences:
        stream = stream[:-1] + ["<S>", *words, "<S>"]
    return stream


def test_lm1b_reader_sentence_markers_min_count_and_heldout(tmp_path):
    corpus = load("lm1b", _lm1b_tree(tmp_path))
    assert corpus.vocab.symbols == ["<S>", "<UNK>", "b", "a"]  # c (seen once) is below the min count 3
    train = [["a", "a", "b"], ["b", "b", "b"], ["<UNK>", "a"]]  # shard 00001, then 00002 (c unknown)
    assert corpus.to_text(corpus.split("train")) == " ".join(_reference_sentence_stream(train)) == "<S> a a b <S> b b b <S> <UNK> a <S>"
    assert corpus.split("valid").tolist() == corpus.split("test").tolist() == [0, 3, 1, 0]
    assert json.loads((corpus.cache_dir / "meta.json").read_text())["options"] == {"sentence_marker": "<S>"}  # part of the cache key


def test_lm1b_reference_vocab_file_wins(tmp_path):
    _lm1b_tree(tmp_path)
    write(tmp_path / "1b_word_vocab.txt", "c 9\n<S> 8\na 8\n<UNK> 0\n")
    corpus = load("lm1b", tmp_path)
    assert corpus.vocab.symbols == ["c", "<S>", "a", "<UNK>"]
    assert corpus.split("valid").tolist() == [1, 2, 3, 1]  # <S> a z <S>, z unknown


def test_tinyshakespeare_reader_unicode_characters(tmp_path):
    text = "Héllo, wörld!\n" * 3 + "Ænd\n"  # 46 characters
    write(tmp_path / "input.txt", text)
    corpus = load("tinyshakespeare", tmp_path)
    assert [len(corpus.split(s)) for s in ("train", "valid", "test")] == [42, 2, 2]
    assert corpus.to_text(corpus.split("train")) == text[:42]
    assert "é" in corpus.vocab and "Æ" in corpus.vocab


def test_real_tinyshakespeare_sample():
    corpus = load("tinyshakespeare", sample_file("tinyshakespeare/input.txt").parent)
    assert len(corpus.vocab) == 65
    assert [len(corpus.split(s)) for s in ("train", "valid", "test")] == [1_003_856, 55_769, 55_769]
    assert corpus.vocab.symbols[:5] == [" ", "e", "t", "o", "a"]
    assert corpus.to_text(corpus.split("train")[:13]) == "First Citizen"
    train = corpus.split("train")
    assert corpus.token_stream_hash("train") == hashlib.sha256(train.astype("<i4").tobytes()).hexdigest()


def test_real_wikitext2_sample_with_only_valid_and_test():
    corpus = load("wikitext-2", sample_file("wikitext-2-sample/valid.txt").parent)
    assert len(corpus.split("valid")) == 217_646 and len(corpus.split("test")) == 245_569  # the published counts
    assert len(corpus.vocab) == 18_328 and corpus.vocab.symbols[:3] == [EOS, "<unk>", "the"]
    assert corpus.to_text(corpus.split("valid")[:6]) == "<eos> = Homarus gammarus = <eos>"
    with pytest.raises(TxlabError, match=r"no train split .* \(looked for wiki.train.tokens or train.txt"):
        corpus.split("train")


def test_synthetic_corpus_from_config():
    corpus = load_corpus(DataConfig(corpus="synthetic-short", synthetic_tokens=30_000, synthetic_eval_tokens=5_000, synthetic_seed=4))
    assert {s: len(a) for s, a in corpus.splits.items()} == {"train": 30_000, "valid": 5_000, "test": 5_000}
    assert len(corpus.vocab) == corpus.n_token == 5312 and corpus.truth["valid"].needed_context.max() <= 200
    again = load_corpus(DataConfig(corpus="synthetic-short", synthetic_tokens=30_000, synthetic_eval_tokens=5_000, synthetic_seed=4))
    assert corpus.token_stream_hash("valid") == again.token_stream_hash("valid")
    assert corpus.token_stream_hash("valid") != corpus.token_stream_hash("test")


def test_a_synthetic_corpus_is_generated_once_per_process_and_never_served_for_other_settings(monkeypatch):
    generated = []
    real = synthetic.generate
    monkeypatch.setattr(synthetic, "generate", lambda spec, n, seed, split: generated.append((spec, n, seed, split)) or real(spec, n, seed, split))
    generated_split.cache_clear()
    base = DataConfig(corpus="synthetic-short", synthetic_tokens=3_000, synthetic_eval_tokens=1_000, synthetic_seed=4)
    first = load_corpus(base)
    again = load_corpus(base)
    assert len(generated) == 3 and again.split("valid") is first.split("valid")
    with pytest.raises(ValueError, match="read-only"):
        again.split("valid")[0] = 0  # what the next command is given cannot be changed by this one
    # every setting that changes the text is its own corpus, generated afresh and equal to a fresh generation
    for change in ({"synthetic_seed": 5}, {"synthetic_eval_tokens": 1_200}, {"synthetic_max_context": 100}, {"corpus": "synthetic"}):
        cfg = dataclasses.replace(base, **change)
        other = load_corpus(cfg)
        fresh = real(synthetic.get_spec(cfg.corpus, cfg.synthetic_max_context), cfg.synthetic_eval_tokens, cfg.synthetic_seed, "valid")
        np.testing.assert_array_equal(other.split("valid"), fresh.tokens)
        assert other.token_stream_hash("valid") != first.token_stream_hash("valid"), change
    # the train split of 3,000 tokens is the same text when only the evaluation splits change size: kept, not generated again
    assert len(generated) == 3 + 3 + 2 + 3 + 3 and generated.count((synthetic.get_spec("synthetic-short"), 3_000, 4, "train")) == 1
    generated_split.cache_clear()


# ---------------------------------------------------------------------------------------------------
# The cache


def _shakespeare_dir(tmp_path: Path, text: str = "To be, or not to be: that is the question.\n" * 20) -> Path:
    write(tmp_path / "ts" / "input.txt", text)
    return tmp_path / "ts"


def test_second_load_is_a_memory_mapped_cache_hit(tmp_path, monkeypatch):
    directory = _shakespeare_dir(tmp_path)
    first = load("tinyshakespeare", directory)
    monkeypatch.setattr(formats, "_build_cache", lambda *a, **k: pytest.fail("cache was rebuilt"))
    second = load("tinyshakespeare", directory)
    assert isinstance(second.split("train"), np.memmap)
    np.testing.assert_array_equal(first.split("train"), second.split("train"))
    assert second.token_stream_hash("valid") == first.token_stream_hash("valid")
    meta = json.loads((second.cache_dir / "meta.json").read_text())
    assert meta["sources"][0]["sha256"] == hashlib.sha256((directory / "input.txt").read_bytes()).hexdigest()


def test_cache_rebuilt_when_the_source_changes_but_not_when_only_touched(tmp_path, monkeypatch):
    directory = _shakespeare_dir(tmp_path)
    path = directory / "input.txt"
    before = load("tinyshakespeare", directory)
    os.utime(path, ns=(1, 10**18))  # touched: same content, new mtime -> full hash agrees, no rebuild
    real_build = formats._build_cache
    monkeypatch.setattr(formats, "_build_cache", lambda *a, **k: pytest.fail("cache was rebuilt"))
    load("tinyshakespeare", directory)
    assert json.loads((before.cache_dir / "meta.json").read_text())["sources"][0]["mtime_ns"] == 10**18
    write(path, path.read_text().replace("question", "QUESTION"))  # same size, new content
    monkeypatch.setattr(formats, "_build_cache", real_build)
    after = load("tinyshakespeare", directory)
    assert "Q" in after.vocab and "Q" not in before.vocab
    assert after.cache_dir == before.cache_dir


def test_cache_entry_with_a_missing_array_is_rebuilt(tmp_path):
    directory = _shakespeare_dir(tmp_path)
    first = load("tinyshakespeare", directory)
    (first.cache_dir / "valid.npy").unlink()
    np.testing.assert_array_equal(load("tinyshakespeare", directory).split("valid"), first.split("valid"))


def test_interrupted_encoding_leaves_nothing_behind(tmp_path, monkeypatch):
    directory = _shakespeare_dir(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(formats, "_encode_into", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load("tinyshakespeare", directory)
    assert not Path(os.environ["TXLAB_CACHE_DIR"]).exists()  # not even the cache folders the build created


# ---------------------------------------------------------------------------------------------------
# Bad input


def test_unknown_corpus_suggests_names():
    with pytest.raises(TxlabError, match="unknown corpus 'wikitex-103'. Did you mean 'wikitext-103'"):
        load("wikitex-103")


def test_missing_directory_says_where_and_how_to_fetch():
    with pytest.raises(TxlabError) as err:
        load("wikitext-103")
    message = str(err.value)
    assert str(Path(os.environ["TXLAB_DATA_DIR"]) / "wikitext-103") in message
    assert "txlab data get wikitext-103" in message


def test_directory_without_any_expected_file(tmp_path):
    (tmp_path / "readme.md").write_text("nothing here")
    with pytest.raises(TxlabError, match=r"looked for ptb.train.txt or train.txt or .*txlab data get ptb"):
        load("ptb", tmp_path)


def test_empty_and_non_utf8_files(tmp_path):
    write(tmp_path / "empty" / "input.txt", "")
    with pytest.raises(TxlabError, match="input.txt is empty"):
        load("tinyshakespeare", tmp_path / "empty")
    write(tmp_path / "latin1" / "wiki.train.tokens", "caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(TxlabError, match="wiki.train.tokens is not UTF-8 text"):
        load("wikitext-103", tmp_path / "latin1")
    cache = Path(os.environ["TXLAB_CACHE_DIR"])
    assert not any(p.name == "meta.json" for p in cache.rglob("*"))


def test_corrupt_zip(tmp_path):
    write(tmp_path / "enwik8.zip", b"PK\x03\x04 this is not really a zip archive")
    with pytest.raises(TxlabError, match="not a readable zip archive"):
        load("enwik8", tmp_path)


# ---------------------------------------------------------------------------------------------------
# Batching as the paper does it


def test_batchify_golden():
    np.testing.assert_array_equal(batchify(np.arange(11), 3), [[0, 1, 2], [3, 4, 5], [6, 7, 8]])
    for tokens, batch in ((5, 3), (10, 0)):
        with pytest.raises(TxlabError, match="cannot cut"):
            batchify(np.arange(tokens), batch)


def test_iter_segments_golden_and_resumable():
    streams = batchify(np.arange(26), 2)  # [[0..12], [13..25]]
    segments = list(iter_segments(streams, tgt_len=5))
    assert [(s.position, s.next_position) for s in segments] == [(0, 5), (5, 10), (10, 12)]
    np.testing.assert_array_equal(segments[0].inputs, [[0, 1, 2, 3, 4], [13, 14, 15, 16, 17]])
    np.testing.assert_array_equal(segments[0].targets, [[1, 2, 3, 4, 5], [14, 15, 16, 17, 18]])
    np.testing.assert_array_equal(segments[2].inputs, [[10, 11], [23, 24]])
    np.testing.assert_array_equal(segments[2].targets, [[11, 12], [24, 25]])
    assert segments[0].inputs.dtype == np.int64
    resumed = list(iter_segments(streams, tgt_len=5, start=segments[0].next_position))
    assert all(np.array_equal(a.inputs, b.inputs) for a, b in zip(resumed, segments[1:]))


def test_varlen_segments_follow_the_reference_and_resume_identically():
    streams = batchify(np.arange(40_000), 2)
    segments = list(iter_segments(streams, tgt_len=70, varlen=True, seed=7))
    lengths = np.array([s.inputs.shape[1] for s in segments[:-1]])
    assert lengths.min() >= 5 and lengths.max() <= 70 + 15
    assert 0.02 < np.mean(lengths < 50) < 0.09  # the 5% half-length draws
    assert abs(np.median(lengths) - 70) <= 1
    covered = np.concatenate([s.targets[0] for s in segments])
    np.testing.assert_array_equal(covered, np.arange(1, 20_000))  # every target once, in order
    middle = segments[40]
    resumed = list(iter_segments(streams, tgt_len=70, varlen=True, seed=7, start=middle.position))
    assert [s.position for s in resumed] == [s.position for s in segments[40:]]
    assert varlen_length(70, 123, seed=7) == varlen_length(70, 123, seed=7)


def test_eval_segments_golden():
    segs = list(eval_segments(np.arange(100, 111), batch_size=3, tgt_len=2))  # 10 targets, 4 per stream
    np.testing.assert_array_equal(segs[0].inputs, [[100, 101], [104, 105], [108, 109]])
    np.testing.assert_array_equal(segs[1].inputs, [[102, 103], [106, 107], [0, 0]])
    np.testing.assert_array_equal(segs[1].targets, [[103, 104], [107, 108], [0, 0]])
    np.testing.assert_array_equal(segs[1].mask, [[True, True], [True, True], [False, False]])
    np.testing.assert_array_equal(segs[0].target_index, [[1, 2], [5, 6], [9, 10]])


@pytest.mark.parametrize("n, batch, tgt", [(2, 1, 1), (11, 3, 2), (100, 7, 9), (1000, 16, 64), (37, 50, 4), (513, 8, 512)])
def test_eval_segments_score_every_token_exactly_once(n, batch, tgt):
    tokens = np.random.default_rng(n).integers(0, 1000, n)
    scored = []
    for seg in eval_segments(tokens, batch, tgt):
        idx = seg.target_index[seg.mask]
        np.testing.assert_array_equal(seg.targets[seg.mask], tokens[idx])
        np.testing.assert_array_equal(seg.inputs[seg.mask], tokens[idx - 1])
        assert (seg.target_index[~seg.mask] == -1).all()
        scored.append(idx)
    scored = np.concatenate(scored)
    assert len(scored) == n - 1
    np.testing.assert_array_equal(np.sort(scored), np.arange(1, n))


def test_eval_streams_are_contiguous_across_segments():
    segs = list(eval_segments(np.arange(1000), batch_size=4, tgt_len=30))
    index = np.concatenate([s.target_index for s in segs], axis=1)
    for row in index:
        real = row[row >= 0]
        assert (np.diff(real) == 1).all()


def test_json_roundtrip_of_vocab_dict_is_stable():
    vocab = Vocab([EOS, "x"], unk=None)
    buf = io.StringIO()
    json.dump(vocab.to_dict(), buf)
    assert Vocab.from_dict(json.loads(buf.getvalue())) == vocab


def test_reference_streams_score_what_the_authors_eval_scores():
    # 11 tokens in 3 streams of 3 (the reference's batchify drops tokens 109 and 110); a stream's first token is only read
    segs = list(eval_segments(np.arange(100, 111), batch_size=3, tgt_len=2, reference_streams=True))
    assert len(segs) == 1
    np.testing.assert_array_equal(segs[0].inputs, [[100, 101], [103, 104], [106, 107]])
    np.testing.assert_array_equal(segs[0].targets, [[101, 102], [104, 105], [107, 108]])
    assert segs[0].mask.all()
    # with one stream both protocols score every target
    exact, reference = (list(eval_segments(np.arange(50), 1, 8, r)) for r in (False, True))
    for a, b in zip(exact, reference, strict=True):
        np.testing.assert_array_equal(a.target_index, b.target_index)
    with pytest.raises(TxlabError, match="streams of at least 2 tokens"):
        list(eval_segments(np.arange(5), batch_size=4, tgt_len=2, reference_streams=True))
