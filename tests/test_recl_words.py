"""`txlab recl --unit word`: members with different tokenizers (a Hugging Face byte-level BPE, txlab runs on words
and on characters) scored on the words of one text, each with its own tokenizer, through the real command."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from txlab.config import DataConfig
from txlab.data.corpus import split_text_of
from txlab.data.textdata import split_text
from txlab.data.tokenizers import load_hf_tokenizer
from txlab.measure import words as W
from txlab.runs.evaluate import load_model

from conftest import sample_file

GRID = ("--set", "grid=1,2,4", "--set", "blocks=2", "--set", "block_len=10", "--set", "n_boot=20")


@pytest.fixture
def three_tokenizers(tmp_path, untrained_run, hf_checkpoint):
    """(text file, [hf:checkpoint, run on words, run on characters]), all untrained or random: the numbers need
    only be the ones the word table gives."""
    text = tmp_path / "text.txt"
    hf_checkpoint(tmp_path / "bpe", text_file=text)
    runs = [untrained_run(tmp_path / f"{kind}-run", sets=["data.corpus=text", f"data.text={text}", f"data.tokenizer={kind}"])
            for kind in ("word", "char")]
    return text, [f"hf:{tmp_path / 'bpe'}", *runs]


# figures drawn, not rendered (figure_files_only): test_recl_figures.py's redraw test renders Figures 3 and 4
def test_a_group_of_three_tokenizers_is_scored_in_words_with_its_coverage(tmp_path, cli, three_tokenizers, figure_files_only):
    text, members = three_tokenizers
    out = cli.ok("--home", tmp_path, "recl", *members, "--text", text, "--unit", "word", *GRID, "--name", "mixed",
                 "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures").output
    assert "unit word" in out and "words every member scores exactly" in out
    record = json.loads((tmp_path / "tables" / "mixed" / "recl.json").read_text())
    words = record["words"]
    assert record["settings"]["placebo"] is True and "placebo_label" in record["rows"][0]  # on by default, in words too
    assert record["settings"]["unit"] == "word" and set(words["members"]) == {"bpe", "word-run", "char-run"}
    assert words["drawn"] == 20 and words["kept"] == record["n_targets"] == 2 * words["kept_per_block"]
    assert all(m["covered"] <= 20 for m in words["members"].values()) and words["shared"] <= min(m["covered"] for m in words["members"].values())
    assert "Context lengths and targets are words" in (tmp_path / "tables" / "mixed" / "table8.md").read_text()
    assert (tmp_path / "figures" / "mixed" / "figure3.png").is_file()

    # the table is group_word_losses on the valid split's text, member by member
    valid = split_text(DataConfig(corpus="text", text=str(text)), "valid")
    models = [load_model(m) for m in members]
    tokenizers = [load_hf_tokenizer(members[0].removeprefix("hf:")), W.run_tokenizer(members[1]), W.run_tokenizer(members[2])]
    table = W.group_word_losses([W.WordMember(name, model, tok, getattr(model, "eval_tgt_len", None), model.context)
                                 for name, model, tok in zip(("bpe", "word-run", "char-run"), models, tokenizers)],
                                valid, (1, 2, 4), 2, 10, placebo=True)
    ppl = np.array([words["members"][name]["word_perplexity"] for name in table.members])
    np.testing.assert_allclose(ppl, table.word_perplexity(), rtol=1e-6)
    assert np.all(np.isfinite([words["members"][name]["byte_perplexity"] for name in table.members]))
    assert [words["members"][name]["covered"] for name in table.members] == list(table.covered.values())

    # Figure 4 in words: perplexity per word and, beside it, per byte, not bits per character (the group reads --text)
    fig4 = pd.read_csv(tmp_path / "tables" / "mixed" / "figure4.csv")
    for name in table.members:
        own = fig4[fig4["model"] == name].sort_values("c")
        np.testing.assert_allclose(own["ppl"], words["members"][name]["word_perplexity"], rtol=1e-6)
        np.testing.assert_allclose(own["ppl_byte"], words["members"][name]["byte_perplexity"], rtol=1e-6)
    drawn = pd.read_csv(tmp_path / "figures" / "mixed" / "figure4.csv")
    assert "bpb" in drawn and "bpc" not in drawn


def test_mixed_tokenizers_in_tokens_are_refused_with_the_fix(tmp_path, cli, three_tokenizers):
    text, members = three_tokenizers
    out = cli.refused("--home", tmp_path, "recl", *members[1:], "--text", text, *GRID)
    assert "--unit word" in out
    out = cli.refused("--home", tmp_path, "recl", members[0], members[1], "--text", text, *GRID)
    assert "--unit word" in out


def test_words_need_a_grid(tmp_path, cli, three_tokenizers):
    text, members = three_tokenizers
    assert "give the grid" in cli.refused("--home", tmp_path, "recl", *members, "--text", text, "--unit", "word")


def test_the_words_study_reads_as_a_group_in_words_whose_presets_each_read_by_their_own_tokenizer():
    from pathlib import Path

    from txlab.drivers.recl.settings import load_study

    study = load_study(Path(__file__).parent.parent / "studies" / "recl-words.yaml", "cpu-synthetic")
    s = study.settings
    assert s.unit == "word" and s.grid == "4:32:2" and s.placebo is None and not s.tokenizer
    assert sorted(item.split("=", 1)[1] for item in s.member_sets) == ["char", "hf:runs/words-synthetic/bpe", "word"]


@pytest.fixture
def wikitext_run(tmp_path, untrained_run):
    """A run on a small WikiText-2 folder (train and valid cut from the shipped sample), untrained."""
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    (folder / "train.txt").write_text(sample_file("wikitext-2-sample/test.txt").read_text(encoding="utf-8")[:30_000])
    (folder / "valid.txt").write_text(sample_file("wikitext-2-sample/valid.txt").read_text(encoding="utf-8")[:30_000])
    return untrained_run(tmp_path / "wt2-run", sets=["data.corpus=wikitext-2", f"data.corpus_dir={folder}"])


def test_a_run_on_a_registry_corpus_is_scored_in_words_on_its_recovered_text_beside_a_checkpoint(tmp_path, cli, wikitext_run, hf_checkpoint,
                                                                                                  figure_files_only):
    # figures in words are rendered by test_a_group_of_three_tokenizers_is_scored_in_words_with_its_coverage
    members = [wikitext_run, f"hf:{hf_checkpoint(tmp_path / 'bpe')}"]
    out = cli.ok("--home", tmp_path, "recl", *members, "--unit", "word", *GRID, "--set", "placebo=false", "--name", "wt2",
                 "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures").output
    assert "words every member scores exactly" in out and "corpus the text its runs trained on | unit word" in out
    words = json.loads((tmp_path / "tables" / "wt2" / "recl.json").read_text())["words"]

    # the table is group_word_losses on the valid split's text recovered from WikiText's tokens, the run reading it by its vocabulary
    from txlab.runs.checkpoint import saved_config

    valid = split_text_of(saved_config(wikitext_run).data, "valid")
    assert valid.startswith("\n= Homarus gammarus =\n\nHomarus gammarus , known as")
    tokenizers = [W.run_tokenizer(wikitext_run), load_hf_tokenizer(members[1].removeprefix("hf:"))]
    models = [load_model(m) for m in members]
    table = W.group_word_losses([W.WordMember(name, model, tok, getattr(model, "eval_tgt_len", None), model.context)
                                 for name, model, tok in zip(("wt2-run", "bpe"), models, tokenizers)], valid, (1, 2, 4), 2, 10)
    assert [words["members"][name]["covered"] for name in table.members] == list(table.covered.values())
    np.testing.assert_allclose([words["members"][name]["word_perplexity"] for name in table.members], table.word_perplexity(), rtol=1e-6)


def test_runs_that_read_no_text_or_two_texts_are_refused_in_words_with_the_way_out(tmp_path, cli, untrained_run, wikitext_run):
    synthetic = untrained_run(tmp_path / "synthetic-run")
    assert "--text FILE" in cli.refused("--home", tmp_path, "recl", synthetic, "--unit", "word", *GRID)
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    own = untrained_run(tmp_path / "own-run", sets=["data.corpus=text", f"data.text={text}", "data.tokenizer=char"])
    out = cli.refused("--home", tmp_path, "recl", own, wikitext_run, "--unit", "word", *GRID)
    assert "trained on 2 texts" in out and "wikitext-2" in out and "--text" in out
