"""`txlab export` writes the tokenizer a run trained with, scoring checks the vocabulary it recorded, and the export is
staged and renamed like an import (issue 50)."""

import json
import math
import random
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import some_text
from txlab.config import update_dataclass
from txlab.data.corpus import load_corpus
import txlab
from txlab.data.textdata import split_text, text_data_config, trained_tokenizer
from txlab.data.tokenizers import CharTokenizer, HfTokenizer, WordTokenizer, load_hf_tokenizer
from txlab.errors import TxlabError
from txlab.models.build import build_model
from txlab.progress import Progress
from txlab.runs.checkpoint import load_checkpoint, save_checkpoint
from txlab.runs.zoo import run_config

pytest.importorskip("transformers")


def own_text_run(folder: Path, text: Path, tokenizer: str) -> Path:
    """A tiny GPT-2 run on own text read by ``tokenizer``, its weights from seed 0 (a checkpoint is all export reads)."""
    cfg = run_config("gpt2", "tiny", text=str(text), tokenizer=tokenizer)
    corpus = load_corpus(cfg.data, progress=False)
    cfg = update_dataclass(cfg, {"model": {"n_token": corpus.n_token}})
    torch.manual_seed(0)
    save_checkpoint(folder, build_model(cfg.model), cfg, step=0, vocab_hash=corpus.vocab.sha256)
    return folder


def scored(output: str) -> str:
    """'loss L ... over N tokens' of an eval's output line."""
    line = next(line for line in output.splitlines() if line.startswith("valid: loss"))
    return line.split(",")[0] + " " + line.split(" over ")[1].split(" tokens")[0]


@pytest.mark.parametrize("tokenizer", ["char", "word", "hf"])
def test_an_export_scores_its_own_text_as_the_run_did(tmp_path, cli, hf_checkpoint, tokenizer):
    """Issue 62: one model scored through every path (the run, its export, the API on either; the checkpoint whose
    tokenizer the hf run read) gives the same loss, perplexity per word and per byte, over the words and bytes of the
    characters its targets spell: the valid split cut at word starts, from the end of its first token (context only);
    a line end is whitespace, not a word."""
    text = tmp_path / "my.txt"
    text.write_text(some_text(1500))
    checkpoint = hf_checkpoint(tmp_path / "bpe")
    spec = f"hf:{checkpoint}" if tokenizer == "hf" else tokenizer
    run = own_text_run(tmp_path / "run", text, spec)
    out = cli.ok("export", run, tmp_path / "out").output
    assert {"tokenizer.json", "tokenizer_config.json", "txlab_export.json"} <= {p.name for p in (tmp_path / "out").iterdir()}
    assert json.loads((tmp_path / "out" / "txlab_export.json").read_text())["tokenizer"] == spec
    hint = shlex.split(out.strip().splitlines()[-1].removeprefix("next: "))
    assert hint[:3] == ["txlab", "eval", f"hf:{tmp_path / 'out'}"]
    exported = cli.ok(*hint[1:], "--max-tokens", 60).output  # the hint, as printed, scores the run's own text
    assert scored(exported) == scored(cli.ok("eval", run, "--batch-size", 1, "--max-tokens", 60).output)
    # the whole split, by hand: the characters after the first token
    split = split_text(text_data_config(text), "valid")
    first = {"char": 1, "word": len(split.split()[0]), "hf": int(load_hf_tokenizer(str(checkpoint)).offsets([split])[0].ends[0])}[tokenizer]
    spelled = split[first:]
    records = [cli.last_json(cli.ok("eval", run, "--batch-size", 1, "--json").output),
               cli.last_json(cli.ok(*hint[1:], "--json").output)]
    api = [txlab.perplexity(txlab.load_model(model), text=text) for model in (run, f"hf:{tmp_path / 'out'}")]
    for got in [*records, *api]:
        assert (got["words"], got["bytes"]) == (len(spelled.split()), len(spelled.encode("utf-8")))
        assert got["per_word"] == pytest.approx(math.exp(got["loss"] * got["tokens"] / got["words"]), rel=1e-9)
        assert got["per_byte"] == pytest.approx(math.exp(got["loss"] * got["tokens"] / got["bytes"]), rel=1e-9)
        for key in ("loss", "per_word", "per_byte"):
            assert got[key] == pytest.approx(records[0][key], rel=1e-5)
        assert got["tokens"] == records[0]["tokens"]
    if tokenizer == "word":  # the bug: a line end is a token, never a word
        assert records[1]["per_word"] > records[1]["ppl"] * 1.5
    if tokenizer == "hf":  # the checkpoint itself: other weights, the same characters and tokens
        other = cli.last_json(cli.ok("eval", f"hf:{checkpoint}", "--text", text, "--json").output)
        assert (other["tokens"], other["words"], other["bytes"]) == (records[0]["tokens"], records[0]["words"], records[0]["bytes"])
    # scoring the first 20 targets counts the text those 20 spell; tokens alone give no perplexity per word
    part = txlab.perplexity(txlab.load_model(run), text=text, max_tokens=20)
    ends = trained_tokenizer(load_checkpoint(run).config.data, load_checkpoint(run).meta["vocab_hash"], "run").offsets([split])[0].ends
    assert part["words"] == len(split[first : ends[20]].split()) and "per_word" not in txlab.perplexity(txlab.load_model(run), np.arange(5) % 3)


def tricky_text(seed: int) -> str:
    """Words and every kind of whitespace Python and Rust disagree on or that a line rule meets: CR LF, U+001C..U+001F,
    U+0085, U+2028, no-break spaces, runs; the last line with or without its line end."""
    rng = random.Random(seed)
    spaces = [" ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "  ", "\n\n"]
    text = "".join(rng.choice(["the", "é", "😀x", "<eos>", "king", "of", "\u200b"]) + rng.choice(spaces) for _ in range(900))
    return text.rstrip("\n") if seed % 2 else text


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", [CharTokenizer, WordTokenizer])
def test_txlabs_vocabularies_as_hugging_face_tokenizers_give_txlabs_ids(tmp_path, kind, seed):
    """Whole and in blocks (the cache encodes files in blocks, with context cut at whitespace)."""
    path = tmp_path / "t.txt"
    path.write_bytes(tricky_text(seed).encode())
    ours = kind()
    ours.count([path])
    expected = np.concatenate(list(ours.encode_file(path, Progress(disable=True))))
    theirs = HfTokenizer("exported", ours.as_hf())
    assert theirs.vocab == ours.vocab
    assert np.array_equal(theirs.encode(path.read_bytes().decode()), expected)
    assert np.array_equal(np.concatenate(list(theirs.encode_file(path, Progress(disable=True), block_chars=300))), expected)
    with pytest.raises(TxlabError, match="it holds 'Z'"):
        theirs.encode("the Z king", "other text")


def test_scoring_checks_the_vocabulary_the_export_recorded(tmp_path, cli):
    text = tmp_path / "my.txt"
    text.write_text(some_text(1500))
    run = own_text_run(tmp_path / "run", text, "char")
    cli.ok("export", run, tmp_path / "out")
    other = tmp_path / "other.txt"
    other.write_text(some_text(1500).upper())
    cli.assert_refused(cli("eval", f"hf:{tmp_path / 'out'}", "--text", other, "-q"), "cannot encode", "which the vocabulary lacks")
    for name in ("tokenizer.json", "tokenizer_config.json"):  # without its tokenizer, the text is read by characters anew
        (tmp_path / "out" / name).unlink()
    text.write_text(some_text(1500, seed=1) + "Q\n")  # counted again, its vocabulary is another
    cli.assert_refused(cli("eval", f"hf:{tmp_path / 'out'}", "--text", text, "-q"), "reads the ids of vocabulary", "txlab_export.json")


def test_an_export_is_staged_and_a_rerun_after_a_kill_completes(tmp_path, cli, monkeypatch):
    text = tmp_path / "my.txt"
    text.write_text(some_text(1500))
    run = own_text_run(tmp_path / "run", text, "word")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stopped after the weights, before the tokenizer and the record

    monkeypatch.setattr("txlab.fileio.shutil.rmtree", lambda *a, **k: None)  # as after kill -9: no cleanup
    monkeypatch.setattr("txlab.models.hf.write_json_atomic", killed)
    assert cli("export", run, tmp_path / "out").exit_code == 130
    assert not (tmp_path / "out").exists() and len(list(tmp_path.glob(".exporting-out.*"))) == 1
    monkeypatch.undo()
    cli.ok("export", run, tmp_path / "out")  # not refused as 'not an empty folder'
    assert list(tmp_path.glob(".exporting-out.*")) == [] and (tmp_path / "out" / "txlab_export.json").is_file()


def test_a_swapped_tokenizer_is_refused_in_words_as_in_tokens(tmp_path, cli, random_causal_lm):
    """An export whose tokenizer files were replaced by another vocabulary's, and a checkpoint whose tokenizer has more
    symbols than the model has outputs, are refused when loaded: by the API and by a group in words (#62)."""
    import txlab

    text = tmp_path / "my.txt"
    text.write_text(some_text(1500))
    cli.ok("export", own_text_run(tmp_path / "run", text, "char"), tmp_path / "out")
    other = CharTokenizer()
    (tmp_path / "other.txt").write_text(some_text(1500).upper())
    other.count([tmp_path / "other.txt"])
    other.as_hf().save_pretrained(tmp_path / "out")  # another vocabulary's tokenizer.json in the export
    with pytest.raises(TxlabError, match="not the one `txlab export` wrote"):
        txlab.load_model(f"hf:{tmp_path / 'out'}")
    out = cli.refused("--home", tmp_path / "home", "recl", f"hf:{tmp_path / 'out'}", tmp_path / "run", "--text", text, "--unit", "word",
                      "--set", "grid=1,2", "--set", "blocks=1", "--set", "block_len=5")
    assert "not the one `txlab export` wrote" in out
    small = random_causal_lm(tmp_path / "small", "gpt2", vocab=8)  # 8 outputs, and a tokenizer of the export's vocabulary (more symbols)
    own = CharTokenizer()
    own.count([text])
    own.as_hf().save_pretrained(small)
    with pytest.raises(TxlabError, match=f"has {len(own.vocab)} symbols, and the model outputs 8"):
        txlab.load_model(f"hf:{small}")
