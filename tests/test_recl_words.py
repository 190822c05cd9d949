"""`txlab recl --unit word`: members with different tokenizers (a Hugging Face byte-level BPE, txlab runs on words
and on characters) scored on the words of one text, each with its own tokenizer, through the real command."""

import dataclasses
import json
import re
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from txlab.analysis import recl
from txlab.analysis.per_unit import unigram_perplexity
from txlab.config import DataConfig
from txlab.data.corpus import split_text_of
from txlab.data.textdata import split_text
from txlab.measure import words as W
from txlab.measure.collection import Collection
from txlab.measure.reading import placebo_offsets
from txlab.runs.scored import load_model

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
    out = cli.ok("--home", tmp_path, "recl", *members, "--text", text, "--unit", "word", *GRID, "--name", "mixed", "--export-losses",
                 "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures").output
    assert "unit word" in out and "words every member scores exactly" in out
    record = json.loads((tmp_path / "tables" / "mixed" / "recl.json").read_text())
    words = record["words"]
    assert record["settings"]["placebo"] is True and "placebo_label" in record["rows"][0]  # on by default, in words too
    n_words = len(split_text(DataConfig(corpus="text", text=str(text)), "valid").split())
    assert record["placebo_offsets"] == placebo_offsets(n_words, 2, record["settings"]["seed"], record["grid"]).tolist()  # per block, in words
    assert record["settings"]["unit"] == "word" and set(words["members"]) == {"bpe", "word-run", "char-run"}
    assert words["drawn"] == 20 and words["kept"] == record["n_targets"] == 2 * words["kept_per_block"]
    assert all(m["covered"] <= 20 for m in words["members"].values()) and words["shared"] <= min(m["covered"] for m in words["members"].values())
    assert "Context lengths and targets are words" in (tmp_path / "tables" / "mixed" / "table8.md").read_text()
    assert (tmp_path / "figures" / "mixed" / "figure3.png").is_file()

    # every loss by hand (test_words.py's hand computations, not the collection): each member tokenizes exactly the
    # context's text and the span, reads them from a fresh start as it is evaluated, and sums its losses over the span
    from test_words import hand_hf, hand_txlab
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from txlab.runs.checkpoint import load_checkpoint
    from txlab.runs.evaluate import evaluation_context

    valid = split_text(DataConfig(corpus="text", text=str(text)), "valid")
    bounds = [m.span() for m in re.finditer(r"\S+", valid)]  # the words: runs of non-whitespace
    bpe = dataclasses.make_dataclass("Bpe", ["causal_lm"])(AutoModelForCausalLM.from_pretrained(members[0][3:]).eval())
    readers = {"bpe": partial(hand_hf, bpe, Tokenizer.from_file(str(Path(members[0][3:]) / "tokenizer.json")))}
    for name, run in zip(("word-run", "char-run"), members[1:]):
        ckpt = load_checkpoint(run)
        tgt_len, context = evaluation_context(ckpt.config.model, ckpt.config.eval)
        ckpt.model.eval().set_context(context)
        readers[name] = partial(hand_txlab, ckpt.model, load_model(run).reading_text().tokenizer, tgt_len=tgt_len)
    losses = pd.read_csv(tmp_path / "tables" / "mixed" / "losses.csv", keep_default_na=False, na_values=[""])
    assert set(losses["unit"]) == {"word"} and len(losses) == 3 * 3 * record["n_targets"]
    for row in losses.iloc[::4].itertuples():
        w, c = row.target, row.c
        context, span = valid[bounds[w - c][0] : bounds[w - 1][1]], valid[bounds[w - 1][1] : bounds[w][1]]
        assert row.target_text == valid[slice(*bounds[w])]
        assert row.loss == pytest.approx(readers[row.member](context, span), abs=1e-4)
    for name, own in losses.groupby("member"):  # perplexity per word: exp of the mean loss of the shared targets at each c
        np.testing.assert_allclose(np.exp(own.groupby("c")["loss"].mean()), words["members"][name]["word_perplexity"], rtol=1e-6)
    assert np.all(np.isfinite([member["byte_perplexity"] for member in words["members"].values()]))

    # Figure 4 in words: perplexity per word and, beside it, per byte, not bits per character (the group reads --text)
    fig4 = pd.read_csv(tmp_path / "tables" / "mixed" / "figure4.csv")
    for name in words["members"]:
        own = fig4[fig4["model"] == name].sort_values("c")
        np.testing.assert_allclose(own["ppl"], words["members"][name]["word_perplexity"], rtol=1e-6)
        np.testing.assert_allclose(own["ppl_byte"], words["members"][name]["byte_perplexity"], rtol=1e-6)
    drawn = pd.read_csv(tmp_path / "figures" / "mixed" / "figure4.csv")
    assert "bpb" in drawn and "bpc" not in drawn and drawn["bpb_low"].notna().all()
    # the per-byte band: the same blocks resampled (n_boot 20, seed 0), each resample's nats over its spans' bytes
    bands = pd.read_csv(tmp_path / "tables" / "mixed" / "figure4-intervals.csv").set_index(["model", "c"])
    names, targets = list(words["members"]), np.asarray(words["targets"])
    table = losses.set_index(["member", "c", "target"])["loss"].sort_index()
    cube = np.stack([[table.loc[name, c].loc[targets].to_numpy() for c in record["grid"]] for name in names])  # [M, G, W] from losses.csv
    span_bytes = np.array([len(valid[bounds[w - 1][1] : bounds[w][1]].encode("utf-8")) for w in targets])
    expected = recl.bootstrap_perplexity(cube, record["grid"], names, words["kept_per_block"], 20, 0, units=span_bytes)
    np.testing.assert_allclose(bands.loc[names, ["ppl_byte_low", "ppl_byte_high"]].to_numpy(), expected.reshape(-1, 2), rtol=1e-5)
    # the unigram baseline of the text's training split, per word on the shared targets, in recl.json
    unigram = record["unigram"]
    train = split_text(DataConfig(corpus="text", text=str(text)), "train").split()
    assert unigram["unit"] == "word" and unigram["perplexity"] == pytest.approx(unigram_perplexity(train, valid.split(), targets))
    assert {m: v["perplexity"] for m, v in unigram["members"].items()} == pytest.approx({m: words["members"][m]["word_perplexity"][-1] for m in names})


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
    models = [dataclasses.replace(load_model(m, name=name), home=None) for m, name in zip(members, ("wt2-run", "bpe"))]
    table = W.group_word_losses(models, valid, Collection("valid", (1, 2, 4), 2, 10, unit="word"))
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


# --------------------------------------------------------------------------------------------------
# Each member's table in words is kept: a rerun reads nothing, a new member alone is read, a kill loses one block


def word_forwards(monkeypatch) -> dict[int, int]:
    """Windows read by the collection in words, per model read (by id, in the order first read): every window of
    txlab.measure.words goes through its read_fresh (the method's probe, txlab.measure.reading's, is not counted).
    Each model counted is kept alive: members are loaded one at a time, and a freed member's id may be reused."""
    counts: dict[int, int] = {}
    kept = []
    real = W.read_fresh

    def counted(model, windows, chunk_len):
        if id(model) not in counts:
            kept.append(model)
        counts[id(model)] = counts.get(id(model), 0) + len(windows)
        return real(model, windows, chunk_len)

    monkeypatch.setattr(W, "read_fresh", counted)
    return counts


def word_tables(home: Path) -> dict[Path, tuple[int, bytes]]:
    """Every file of every member's tables in words under ``home``: when it was written, and what it holds."""
    return {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in sorted(home.rglob("losses/words-*/*"))}


def test_a_word_group_keeps_each_members_table_so_a_rerun_reads_nothing_and_a_new_member_alone_is_read(
        tmp_path, cli, three_tokenizers, untrained_run, monkeypatch, figure_files_only):
    # figures in words are rendered by test_a_group_of_three_tokenizers_is_scored_in_words_with_its_coverage
    text, members = three_tokenizers
    args = ("--text", text, "--unit", "word", *GRID, "--name", "kept", "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures", "-q")
    first = word_forwards(monkeypatch)
    cli.ok("--home", tmp_path, "recl", *members, *args)
    assert len(first) == 3 and all(n > 0 for n in first.values())
    written = word_tables(tmp_path)
    assert len({f.parent for f in written}) == 3  # one table per member, in its own run folder
    assert {f.name for f in written} >= {"meta.json", "block-00000.npy", "cut-00001.npy", "placebo-00001.npy"}
    record = (tmp_path / "tables" / "kept" / "recl.json").read_bytes()

    again = word_forwards(monkeypatch)
    cli.ok("--home", tmp_path, "recl", *members, *args)
    assert again == {} and word_tables(tmp_path) == written  # nothing read, nothing written again
    assert (tmp_path / "tables" / "kept" / "recl.json").read_bytes() == record

    # a fourth member: the plan says what is kept, and only the new member is read
    fourth = untrained_run(tmp_path / "char-run-2", sets=["data.corpus=text", f"data.text={text}", "data.tokenizer=char"],
                           prepare=lambda model: [p.data.mul_(1.5) for p in model.parameters()])
    plan = cli.ok("--home", tmp_path, "recl", *members, fourth, *args[:-1], "--dry-run").output
    assert "3 of 4 members' tables already collected" in plan and "estimated time" in plan and "unknown" not in plan
    assert "tokens per word" in plan
    added = word_forwards(monkeypatch)
    cli.ok("--home", tmp_path, "recl", *members, fourth, *args)
    char_run = list(first.values())[2]  # the other character-level run: the same cells, so the same windows
    assert list(added.values()) == [char_run]
    now = word_tables(tmp_path)
    assert {f: now[f] for f in written} == written  # the first members' tables untouched
    assert {f.parent for f in set(now) - set(written)} == {next((fourth / "losses").glob("words-*"))}
    regrouped = json.loads((tmp_path / "tables" / "kept" / "recl.json").read_text())["words"]
    assert set(regrouped["members"]) == {"bpe", "word-run", "char-run", "char-run-2"}
    assert regrouped["members"]["char-run"]["tokenizer"] == regrouped["members"]["char-run-2"]["tokenizer"]
    assert regrouped["members"]["bpe"]["tokenizer"]["kind"] == "hf"


def test_a_word_collection_killed_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path, cli, three_tokenizers, monkeypatch, figure_files_only):
    """A real SIGKILL (a forked child kills itself as its third block lands), then the same command again."""
    import multiprocessing
    import os
    import shutil
    import signal

    text, members = three_tokenizers
    members = [members[0], members[2]]  # a byte-level BPE and characters
    out = tmp_path / "tables"
    args = ("--home", tmp_path, "recl", *members, "--text", text, "--unit", "word", *GRID, "--set", "export_losses=true", "--name", "k",
            "--out-dir", out, "--fig-dir", tmp_path / "figures", "-q")
    cli.ok(*args)
    finals = ("recl.json", "table8.csv", "losses.csv", "placebo.csv")
    uninterrupted = {name: (out / "k" / name).read_bytes() for name in finals}
    for folder in tmp_path.rglob("losses/words-*"):
        shutil.rmtree(folder)
    shutil.rmtree(out)

    saved = []
    real_save = W.save_npy

    def save_then_die(path, array):
        real_save(path, array)
        saved.append(path)
        if len(saved) == 3:
            os.kill(os.getpid(), signal.SIGKILL)

    def child():
        monkeypatch.setattr(W, "save_npy", save_then_die)
        cli(*args)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(120)
    assert process.exitcode == -signal.SIGKILL
    kept = word_tables(tmp_path)
    assert 0 < sum(f.name.startswith("block-") for f in kept) < 4 and not out.exists()  # finished blocks kept, no result yet
    cli.ok(*args)
    assert {name: (out / "k" / name).read_bytes() for name in finals} == uninterrupted
    now = word_tables(tmp_path)
    finished = [f for f in kept if f.suffix == ".npy" and (f.parent / f"block-{f.stem.split('-')[1]}.npy") in kept]
    assert finished and {f: now[f] for f in finished} == {f: kept[f] for f in finished}  # a finished block is never computed again


def test_the_declared_synthetic_words_text_puts_the_truth_at_its_horizon_at_every_r():
    """studies/recl-words.yaml's cpu-synthetic-every, declared before its runs: copies at every distance 5..15, so on its
    grid the ideal model reads the horizon, 16, at every r, every step below 16 gaining; cpu-synthetic's text (copies
    8..15) reads 6 at r 0.1, its step 6 -> 8 gaining nothing: the walk's artefact the new text removes."""
    import importlib.util

    from txlab.analysis import recl
    from txlab.drivers.recl.settings import load_study
    from txlab.measure.losses import sample_blocks

    spec = importlib.util.spec_from_file_location("words_texts", Path(__file__).parents[1] / "studies" / "words_texts.py")
    texts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(texts)
    study = load_study(Path(__file__).parents[1] / "studies" / "recl-words.yaml", "cpu-synthetic-every").settings
    grid = Collection("valid", tuple(range(4, 33, 2)), study.blocks, study.block_len).grid
    assert study.grid == "4:32:2" and study.train_seeds == [0, 1, 2] and "train.max_steps=6000" in study.sets
    starts = sample_blocks(texts.SIZES["valid"], study.blocks, study.block_len, grid[-1], study.seed, unit="word")
    targets = (starts[:, None] + np.arange(study.block_len)).reshape(-1)
    for min_distance, expected in ((5, ["16", "16", "16"]), (8, ["6", "16", "16"])):
        rows, losses = texts.ideal_readings(grid, targets, [0.1, 0.5, 1.0], min_distance)
        assert [row.cell() for row in rows] == expected
    gains = recl.step_gains(recl.prepare_table(texts.ideal_readings(grid, targets, [1.0], 5)[1][None], grid, ["ideal"]), 1.0)[0]
    assert np.all(gains[: grid.index(16)] > 0.05) and np.all(gains[grid.index(16) :] == 0)


def test_with_the_slurm_launcher_each_member_in_words_is_collected_as_a_job(tmp_path, cli, three_tokenizers, monkeypatch, figure_files_only):
    """Jobs run in-process in place of submitit (tests/test_launch.py runs real local jobs): each member's table in words
    is a job of its own, and the group then reads the tables kept, reading no window itself."""
    text, members = three_tokenizers
    submitted, after_jobs = [], {}
    windows = word_forwards(monkeypatch)

    def run_in_process(tasks, settings, folder, name, echo):
        for task in tasks:
            task.function(*task.args)
            submitted.append((name, task.name, task.progress()))
        after_jobs.update(windows)
        return []

    monkeypatch.setattr("txlab.drivers.recl.sources.run_jobs", run_in_process)
    cli.ok("--home", tmp_path, "recl", *members, "--text", text, "--unit", "word", *GRID, "--launcher", "slurm", "--name", "jobs",
           "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures", "-q")
    assert [(name, label) for name, label, _ in submitted] == [("txlab-word-losses", m) for m in ("bpe", "word-run", "char-run")]
    assert all(note.endswith("loss blocks written") and not note.startswith("0 ") for _, _, note in submitted)
    assert len(after_jobs) == 3 and windows == after_jobs  # the group read nothing after the jobs
    assert json.loads((tmp_path / "tables" / "jobs" / "recl.json").read_text())["words"]["kept"] > 0
