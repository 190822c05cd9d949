"""Own text as a corpus (issue 26): a file or a folder, read by txlab's char or word vocabulary or a
Hugging Face tokenizer trained here offline; the cache, the split, the names, the plan and the CLI."""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from txlab.config import DataConfig, RunConfig
from txlab.data import textdata, tokenizers
from txlab.data.corpus import Corpus, load_corpus
from txlab.data.registry import SPLITS
from txlab.data.textdata import text_data_config, text_token_counts
from txlab.data.tokenizers import NotBlockwise, load_hf_tokenizer
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.progress import Progress
from txlab.runs.plan import split_tokens, training_plan, vocab_size
from txlab.runs.zoo import run_config, run_name

from conftest import sample_file


def sample_text(lines: int = 400) -> str:
    """The first ``lines`` lines of Tiny Shakespeare."""
    return "".join(sample_file("tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:lines])


def load(data: DataConfig) -> Corpus:
    return load_corpus(data, progress=False)


def every_id(corpus: Corpus) -> np.ndarray:
    return np.concatenate([np.asarray(corpus.splits[s], dtype=np.int64) for s in SPLITS if s in corpus.splits])


def save_tokenizer(tokenizer, folder: Path) -> Path:
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(folder))
    return folder


def train_bpe(text: str, vocab_size: int, pre_tokenizer: str = "bytelevel"):
    """A tiny BPE tokenizer trained on ``text`` with the `tokenizers` library (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    if pre_tokenizer == "bytelevel":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    elif pre_tokenizer == "metaspace":  # SentencePiece's way: a space marks a word start, and the text's start gets one
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    else:  # none: merges may reach across line ends
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    tokenizer.train_from_iterator([text[i : i + 2000] for i in range(0, len(text), 2000)], trainer)
    return tokenizer


@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory) -> Path:
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    return save_tokenizer(train_bpe(sample_text(), 300), tmp_path_factory.mktemp("tokenizer") / "bpe")


@pytest.fixture()
def text_file(tmp_path) -> Path:
    path = tmp_path / "plays" / "verse.txt"
    path.parent.mkdir()
    path.write_text(sample_text(), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------
# txlab's vocabularies


def test_char_text_is_the_registry_tinyshakespeare_token_for_token(tmp_path, text_file):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(text_file.read_bytes())
    registry = load(DataConfig(corpus="tinyshakespeare", data_dir=str(tmp_path)))
    own = load(text_data_config(text_file, "char"))
    n, k = len(text_file.read_text()), len(text_file.read_text()) // 20
    assert {s: len(ids) for s, ids in own.splits.items()} == {"train": n - 2 * k, "valid": k, "test": k}
    assert own.vocab == registry.vocab and own.tokenizer_id == registry.tokenizer_id == f"char:{registry.vocab.sha256[:16]}"
    assert all(own.token_stream_hash(s) == registry.token_stream_hash(s) for s in SPLITS)
    assert own.level == "char" and own.to_text(own.splits["valid"]) == text_file.read_text()[n - 2 * k : n - k]


def test_word_text_has_eos_per_line_and_every_word_by_count(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("to be or not to be\n\nthat is the question\n" * 10)
    corpus = load(text_data_config(path, "word", text_split=[0.5, 0.25, 0.25]))
    assert corpus.vocab.symbols == ["<eos>", "to", "be", "or", "not", "that", "is", "the", "question"]
    assert corpus.level == "word" and corpus.tokenizer_id == f"word:{corpus.vocab.sha256[:16]}"
    ids = every_id(corpus)
    assert len(ids) == 10 * (6 + 1 + 1 + 4 + 1)  # words and an <eos> per line, the empty line's too
    assert {s: len(v) for s, v in corpus.splits.items()} == {"train": 66, "valid": 32, "test": 32}  # floor(130 / 4) each
    assert corpus.to_text(ids[:8]) == "to be or not to be <eos> <eos>"


# ---------------------------------------------------------------------------------------------------
# Hugging Face tokenizers


def test_hf_text_is_one_encoding_of_the_whole_text_without_special_tokens(text_file, bpe_folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bpe_folder))
    corpus = load(text_data_config(text_file, f"hf:{bpe_folder}"))
    text = text_file.read_text()
    expected = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert every_id(corpus).tolist() == expected
    assert len(corpus.vocab) == len(tokenizer) == 300 and corpus.vocab.symbols[7] == tokenizer.convert_ids_to_tokens(7)
    assert corpus.level == "subword" and corpus.tokenizer_id.startswith("hf:") and len(corpus.tokenizer_id) == 19
    n, k = len(expected), len(expected) // 20
    assert {s: len(v) for s, v in corpus.splits.items()} == {"train": n - 2 * k, "valid": k, "test": k}
    assert corpus.to_text(every_id(corpus)) == text


@pytest.mark.parametrize("pre_tokenizer", ["bytelevel", "metaspace"])
def test_hf_blocks_are_cut_exactly(text_file, tmp_path, pre_tokenizer):
    """Blocks of ~200 characters (dozens of cuts) give the ids of one encoding, for a byte-level BPE (GPT-2's
    kind) and a SentencePiece-style one (Metaspace: it splits words only at spaces, and marks the text's start)."""
    pytest.importorskip("transformers")
    text = text_file.read_text()
    tokenizer = load_hf_tokenizer(str(save_tokenizer(train_bpe(text, 300, pre_tokenizer), tmp_path / pre_tokenizer)))
    with Progress(disable=True) as bar:
        blocks = list(tokenizer.encode_file(text_file, bar, block_chars=200))
    assert len(blocks) > 20
    assert np.concatenate(blocks).tolist() == tokenizer.encode(text)


def test_a_tokenizer_that_merges_across_line_ends_encodes_the_file_at_once(text_file, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    text = text_file.read_text()
    folder = save_tokenizer(train_bpe(text, 400, pre_tokenizer="none"), tmp_path / "raw")
    tokenizer = load_hf_tokenizer(str(folder))
    assert any("\n" in s and len(s) > 1 for s in tokenizer.vocab.symbols)  # e.g. ':\n'
    with Progress(disable=True) as bar, pytest.raises(NotBlockwise):
        list(tokenizer.encode_file(text_file, bar, block_chars=200))
    monkeypatch.setattr(tokenizers, "HF_BLOCK_CHARS", 200)  # a file of many blocks
    corpus = load(text_data_config(text_file, f"hf:{folder}"))
    assert every_id(corpus).tolist() == tokenizer.encode(text)


def test_without_transformers_an_hf_tokenizer_names_the_extra(text_file, tmp_path, monkeypatch):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # what a missing package looks like to import
    with pytest.raises(TxlabError, match=r"pip install 'txlab\[hf\]'"):
        load(text_data_config(text_file, f"hf:{tmp_path / 'tok'}"))


# ---------------------------------------------------------------------------------------------------
# The cache


def test_the_cache_is_reused_and_rebuilt_when_the_text_or_tokenizer_changes(text_file, tmp_path, bpe_folder, monkeypatch):
    builds = []
    build = textdata._build_text_cache
    monkeypatch.setattr(textdata, "_build_text_cache", lambda *a, **k: builds.append(a[1].path) or build(*a, **k))
    data = text_data_config(text_file, f"hf:{bpe_folder}")
    first = load(data)
    second = load(data)
    assert len(builds) == 1 and second.cache_dir == first.cache_dir and isinstance(second.splits["train"], np.memmap)
    assert second.token_stream_hash("valid") == first.token_stream_hash("valid")

    text_file.write_text(text_file.read_text() + "A line added at the end.\n")
    changed = load(data)
    assert len(builds) == 2 and changed.cache_dir == first.cache_dir and len(every_id(changed)) > len(every_id(first))

    other = save_tokenizer(train_bpe(sample_text(), 280), tmp_path / "other")
    retokenized = load(text_data_config(text_file, f"hf:{other}"))
    assert len(builds) == 3 and retokenized.cache_dir != changed.cache_dir
    assert retokenized.tokenizer_id != changed.tokenizer_id and len(retokenized.vocab) == 280
    char = load(text_data_config(text_file, "char"))
    assert len(builds) == 4 and char.cache_dir != changed.cache_dir
    meta = json.loads((char.cache_dir / "meta.json").read_text())
    assert meta["sources"][0]["sha256"] == hashlib.sha256(text_file.read_bytes()).hexdigest() and meta["tokenizer_id"] == char.tokenizer_id


# ---------------------------------------------------------------------------------------------------
# Splits


def test_fractions_cut_the_token_stream_and_a_zero_leaves_a_split_out(tmp_path):
    path = tmp_path / "digits.txt"
    path.write_text("0123456789" * 100)  # 1,000 characters
    corpus = load(text_data_config(path, "char", text_split=[0.8, 0.15, 0.05]))
    assert {s: len(v) for s, v in corpus.splits.items()} == {"train": 800, "valid": 150, "test": 50}
    assert corpus.to_text(corpus.splits["valid"])[:3] == "012"
    test_only = load(text_data_config(path, "char", text_split=[0, 0, 1]))
    assert {s: len(v) for s, v in test_only.splits.items()} == {"test": 1000}
    with pytest.raises(TxlabError, match="has no train split .*data.text_split gives it 0"):
        test_only.split("train")
    for bad, message in (([0.8, 0.1], "three fractions"), ([0.8, 0.1, 0.2], "must sum to 1"), ([1.5, -0.25, -0.25], "three fractions")):
        with pytest.raises(TxlabError, match=message):
            text_data_config(path, "char", text_split=bad)


def test_a_folder_of_splits_is_read_per_split(tmp_path):
    for split in ("train", "valid", "test"):
        (tmp_path / f"wiki.{split}.tokens").write_text(f" = {split} = \n the {split} text \n")
    corpus = load(text_data_config(tmp_path, "word"))
    assert {s: len(v) for s, v in corpus.splits.items()} == {"train": 8, "valid": 8, "test": 8}
    assert corpus.to_text(corpus.splits["valid"]) == "= valid = <eos> the valid text <eos>"
    (tmp_path / "train.txt").write_text("plain train names win\n")
    assert load(text_data_config(tmp_path, "word")).to_text(load(text_data_config(tmp_path, "word")).splits["train"]) == "plain train names win <eos>"
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "validation.txt").write_text("only a validation split\n")
    corpus = load(text_data_config(partial, "char"))
    assert list(corpus.splits) == ["valid"]
    with pytest.raises(TxlabError, match="no train split .*no file train.txt"):
        corpus.split("train")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(TxlabError, match="holds no split file: name them train.txt, valid.txt and test.txt"):
        text_data_config(tmp_path / "nothing", "char")


def test_empty_and_whitespace_only_text_is_refused(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(TxlabError, match="empty.txt is empty: own text needs some text"):
        text_data_config(empty, "char")
    folder = tmp_path / "splits"
    folder.mkdir()
    (folder / "train.txt").write_text("  \n\n \t \n")
    (folder / "valid.txt").write_text("some text\n")
    for tokenizer in ("char", "word"):
        with pytest.raises(TxlabError, match="the train split of .* holds only whitespace"):
            load(text_data_config(folder, tokenizer))
    short = tmp_path / "short.txt"
    short.write_text("a few characters")
    with pytest.raises(TxlabError, match=r"the valid split of .* has no tokens \(data.text_split gives it 0.05 of 16 tokens\)"):
        load(text_data_config(short, "char"))


def test_bad_settings_are_one_clear_error(text_file, tmp_path):
    cases = [
        (lambda: text_data_config(text_file, "bpe"), "unknown tokenizer 'bpe'.* Valid: char, hf:PATH_OR_HUB_ID, word"),
        (lambda: text_data_config(text_file, "hf:"), "names no tokenizer"),
        (lambda: text_data_config(text_file, "hf:./no/such/folder"), "no tokenizer folder ./no/such/folder"),
        (lambda: text_data_config(text_file, f"hf:{text_file}"), "is a file; give the folder"),
        (lambda: text_data_config(tmp_path / "missing.txt", "char"), "no such text file or folder"),
        (lambda: load(DataConfig(corpus="text")), "corpus 'text' needs data.text"),
        (lambda: load(DataConfig(corpus="ptb", text=str(text_file))), "set data.corpus=text"),
        (lambda: load(DataConfig(corpus="text", text=str(text_file), tokenizer="words")), "Did you mean 'word'"),
    ]
    for make, message in cases:
        with pytest.raises(TxlabError, match=message):
            make()


def test_a_folder_without_a_tokenizer_is_one_clear_error(text_file, tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "notatokenizer").mkdir()
    (tmp_path / "notatokenizer" / "readme.txt").write_text("no tokenizer here")
    with pytest.raises(TxlabError, match="cannot load tokenizer hf:.*a local folder needs the tokenizer's files"):
        load(text_data_config(text_file, f"hf:{tmp_path / 'notatokenizer'}"))


# ---------------------------------------------------------------------------------------------------
# Names and plans


def test_run_names_tell_texts_and_tokenizers_apart(tmp_path, text_file, bpe_folder):
    twin = tmp_path / "elsewhere" / "verse.txt"  # the same stem, another text
    twin.parent.mkdir()
    twin.write_text(sample_text(200))
    names = {
        run_name(run_config("xl128m", "tiny", text=str(path), tokenizer=tokenizer))
        for path in (text_file, twin) for tokenizer in ("char", "word", f"hf:{bpe_folder}")
    }
    assert len(names) == 6 and not any("/" in name or ":" in name or "\\" in name for name in names)
    sha = hashlib.sha256(text_file.read_bytes()).hexdigest()[:8]
    assert f"xl128m-tiny-text-verse-{sha}-char" in names
    tag = load_hf_tokenizer(str(bpe_folder)).tokenizer_id[3:11]
    assert f"xl128m-tiny-text-verse-{sha}-hf-bpe-{tag}" in names
    split = run_config("xl128m", "tiny", overrides=["data.text_split=[0.8,0.1,0.1]"], text=str(text_file))
    assert run_name(split) == f"xl128m-tiny-text-verse-{sha}-char-split80-10-10"


def test_plans_estimate_the_tokens_before_encoding_and_know_them_after(text_file, bpe_folder):
    cfg = run_config("xl128m", "tiny", text=str(text_file), tokenizer=f"hf:{bpe_folder}")
    estimate = text_token_counts(cfg.data)
    assert estimate.estimated and "estimated from the file size" in estimate.how and vocab_size(cfg) == 300
    corpus = load(cfg.data)
    exact = {s: len(v) for s, v in corpus.splits.items()}
    assert abs(estimate.splits["train"] - exact["train"]) <= 0.01 * exact["train"]  # the sample is the whole file here
    assert split_tokens(cfg, "valid") == exact["valid"] and not text_token_counts(cfg.data).estimated
    plan = training_plan(cfg, Path("unused"), gflops=lambda device, threads, precision: 10.0).describe()
    assert f"{exact['train']:,} / {exact['valid']:,} / {exact['test']:,} tokens (train/valid/test), 300 symbols; encoded" in plan
    assert "estimated time: unknown" not in plan


def test_word_plans_estimate_the_vocabulary_by_heaps_law(tmp_path):
    rng = np.random.default_rng(1)
    zipf = np.minimum(rng.zipf(1.3, 700_000), 200_000)  # a word list larger than the sampled MiB
    path = tmp_path / "zipf.txt"
    path.write_text("\n".join(" ".join(f"w{n}" for n in zipf[i : i + 12]) for i in range(0, len(zipf), 12)) + "\n")
    cfg = RunConfig(preset="xl128m", size="tiny", data=text_data_config(path, "word"))
    estimate = text_token_counts(cfg.data)
    corpus = load(cfg.data)
    tokens = len(every_id(corpus))
    assert abs(sum(estimate.splits.values()) - tokens) <= 0.02 * tokens
    sample_only = len(set(path.read_bytes()[: 1 << 20].split()))
    assert sample_only < estimate.vocab_size and abs(estimate.vocab_size - len(corpus.vocab)) < abs(sample_only - len(corpus.vocab))


def test_registry_and_synthetic_corpora_name_their_tokenization(tmp_path):
    synthetic = load(DataConfig(corpus="synthetic-small", synthetic_tokens=2000, synthetic_eval_tokens=500))
    assert synthetic.tokenizer_id == f"word:{synthetic.vocab.sha256[:16]}"
    relabelled = synthetic.relabel(Vocab(list(reversed(synthetic.vocab.symbols))), ["valid"])
    assert relabelled.tokenizer_id == synthetic.tokenizer_id  # the same tokens, numbered otherwise


# ---------------------------------------------------------------------------------------------------
# The command line


def test_train_and_data_info_on_own_text(tmp_path, text_file, cli):
    info = cli.json("data", "info", "--text", text_file, "--tokenizer", "word", "--text-split", "0.8,0.1,0.1", "--json", "-q")
    corpus = load(text_data_config(text_file, "word", text_split=[0.8, 0.1, 0.1]))
    assert info["tokenizer_id"] == corpus.tokenizer_id and info["vocab_size"] == len(corpus.vocab)
    assert {s: v["tokens"] for s, v in info["splits"].items()} == {s: len(v) for s, v in corpus.splits.items()}
    assert info["cache_dir"] == str(corpus.cache_dir) and info["name"].startswith("text-verse-")
    cli.assert_refused(cli("data", "info", "ptb", "--text", text_file), "not both")
    cli.assert_refused(cli("data", "info"), "give a corpus name")
    cli.assert_refused(cli("data", "info", "--text", text_file, "--tokenizer", "sentencepiece"), "unknown tokenizer 'sentencepiece'")
    cli.assert_refused(cli("train", "xl128m", "--data", "ptb", "--text", text_file, "--dry-run"), "not both")

    args = ["train", "xl128m", "--size", "tiny", "--text", text_file, "--tokenizer", "char",
            "--set", "train.max_steps=3", "--set", "train.eval_interval=3", "--set", "train.eval_tokens=200"]
    plan = cli.ok(*args, "--dry-run").output
    assert "about " in plan and "estimated from the file size" in plan and "estimated time: unknown" not in plan
    result = cli.ok(*args, "--quiet")
    run = Path(result.output.strip().splitlines()[-1].split("run directory: ")[1].split(" (")[0])
    sha = hashlib.sha256(text_file.read_bytes()).hexdigest()[:8]
    assert run.name == f"xl128m-tiny-text-verse-{sha}-char-3steps" and "trained to step 3: valid loss" in result.output and "bpc" in result.output
    saved = (run / "config.yaml").read_text()
    assert "corpus: text" in saved and f"text: {text_file}" in saved and "tokenizer: char" in saved


def test_a_crlf_file_reads_the_same_in_words_as_for_the_character_tokenizer(tmp_path):
    """Line ends are read as written on every path: the characters a group in words scores are the character tokenizer's
    (a '\\r' kept in both), so the two cuts of one file agree for characters but for the word a cut falls in (the
    words' cut moves to the next word's start), as docs/recl.md says."""
    from txlab.data.textdata import split_text

    path = tmp_path / "crlf.txt"
    path.write_bytes("".join(f"line {i} has\tsome words\r\n" for i in range(400)).encode("utf-8"))
    data = text_data_config(path, "char")
    corpus = load_corpus(data, progress=False)
    for split in SPLITS:
        chars, words = corpus.to_text(np.asarray(corpus.split(split)).tolist()), split_text(data, split)
        start = chars.index(words[:40])  # the words' split begins at the first word that starts in the characters' split
        assert "\r" in words and start < len("line 123 has") and chars[start:] == words[: len(chars) - start]
