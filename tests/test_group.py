"""`txlab recl` end to end on tiny models, and its refusals."""

import json
import math
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from txlab.analysis.table8 import Bootstrap, GroupTable, UnigramCheck, recl_rows, table8_markdown
from txlab.drivers.recl.run import score_group
from txlab.drivers.recl.settings import ReclSettings
from txlab.measure.collection import parse_grid
from txlab.errors import TxlabError
from txlab.measure.losses import GroupLosses, find_losses, load_losses

from conftest import TINY_TRAINING, sample_file

TINY_COLLECTION = ["--size", "tiny", "--set", "grid=2:8:2", "--set", "blocks=3", "--set", "block_len=20", "--set", "n_boot=10"]


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_recl_trains_what_is_missing_then_reports_every_model_and_r(tmp_path, cli, figure_files_only):
    args = ["recl", "--group", "xl151m", "qrnn", "lstm", "--r", "0.1", "--r", "0.5,1", *TINY_COLLECTION, *TINY_TRAINING,
            "--models-root", str(tmp_path / "models"), "--out-dir", str(tmp_path / "results"), "--fig-dir", str(tmp_path / "figures"), "--set", "placebo=true", "--json", "--quiet"]
    result = cli(*args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("profile: command line | group xl151m+qrnn+lstm-tiny")
    doc = cli.last_json(result.output)
    (group,) = doc["groups"]
    assert group["n_targets"] == 60 and group["grid"] == [2, 4, 6, 8]
    for model in ("xl151m", "qrnn", "lstm"):
        for r in ("0.1", "0.5", "1.0"):
            cell = group["recl"][model][r]
            assert {"recl", "ci_low", "ci_high", "censored", "label"} <= set(cell)
            assert cell["recl"] in (2, 4, 6, 8) and cell["ci_low"] <= cell["recl"] <= cell["ci_high"]
    assert "oracle (ground truth)" in group["recl"]  # synthetic corpus: the ideal model's RECL beside the models'
    name = "xl151m+qrnn+lstm-tiny-grid-2-8-2-blocks-3-block_len-20"  # named by what differs from the size's usual collection
    for path in ("table8.csv", "table8.md", "figure3.csv", "figure4.csv", "placebo.csv", "recl.json"):
        assert (tmp_path / "results" / name / path).is_file(), path
    for path in ("figure3.png", "figure3.pdf", "figure4.png", "figure4.pdf"):
        assert (tmp_path / "figures" / name / path).is_file(), path
    # two training steps learn less than a unigram of the training split: every member is marked as not read, in the
    # table (§ and a note, also in what the command prints), recl.json, its rows and the --json summary
    markdown = (tmp_path / "results" / name / "table8.md").read_text()
    assert "| xl151m § |" in markdown and "| oracle (ground truth) |" in markdown and "§ does not beat it" in markdown
    assert "RECL is relative to the group" in markdown and "§ does not beat it" in result.output
    assert all(group["recl"][m]["0.1"]["beats_unigram"] is False for m in ("xl151m", "qrnn", "lstm"))
    # Figure 4 draws the ideal model beside the members: exp of its mean loss on the same targets,
    # which more context never makes worse
    figure4 = pd.read_csv(tmp_path / "results" / name / "figure4.csv")
    ideal = figure4[figure4["model"] == "oracle (ground truth)"]
    assert list(ideal["c"]) == [2, 4, 6, 8] and (ideal["ppl"].diff().dropna() <= 1e-9).all()
    assert set(figure4["model"]) == {"xl151m", "qrnn", "lstm", "oracle (ground truth)"}

    # recl.json holds what txlab.analysis.recl gives on the loss tables stored in the runs, placebo-aware RECL included.
    record = json.loads((tmp_path / "results" / name / "recl.json").read_text())
    tables = [load_losses(find_losses(run_dir)) for run_dir in record["run_dirs"]]
    models = ["xl151m", "qrnn", "lstm"]
    table = GroupTable(np.stack([t.losses for t in tables]), (2, 4, 6, 8), models, {m: t.max_context for m, t in zip(models, tables)},
                       np.stack([t.placebo for t in tables]))
    unigram = UnigramCheck.from_record(record["unigram"])
    assert unigram.unit == "token" and unigram.c == 8 and unigram.not_read == models and record["size"] == "tiny"
    np.testing.assert_allclose(list(unigram.members.values()), figure4.set_index(["model", "c"]).loc[[(m, 8) for m in models], "ppl"])
    expected = unigram.mark(recl_rows(table, rs=(0.1, 0.5, 1.0), bootstrap=Bootstrap(block_size=20, n_boot=10, seed=0)))
    assert [row for row in record["rows"] if row["model"] in models] == [row.record() for row in expected]
    assert all("placebo_recl" in group["recl"][m]["0.1"] for m in models)

    # Everything is found now: --no-train is satisfied and the losses are read back, not collected again.
    again = cli(*args[:-2], "--set", "train_missing=false", "--json", "--quiet")
    assert again.exit_code == 0, again.output
    assert cli.last_json(again.output)["groups"][0]["recl"] == group["recl"]


def test_run_directories_that_read_different_token_streams_are_refused(tmp_path, cli, tiny_members):
    synthetic = tiny_members(tmp_path, "lstm") / "lstm-tiny-synthetic-small"
    short = tmp_path / "lstm-synthetic-short"
    cli.ok("train", "lstm", "--size", "tiny", "--data", "synthetic-short", "--run-dir", short, "--quiet", *TINY_TRAINING)
    result = cli("recl", "--group", synthetic, short, *TINY_COLLECTION, "--quiet")
    assert result.exit_code == 2, result.output
    assert "token stream" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "xl15m", "qrnn"], "Did you mean 'xl151m'"),
        (["--group", "./no/such/run", "qrnn"], "no run directory ./no/such/run"),
        (["--group", "xl151m", "qrnn", "--set", "train_missing=false"], "not trained"),
        (["--group", "xl151m", "qrnn", "--r", "0.1", "0.5"], "give each r its own option"),
        (["--group", "xl151m", "--r", "1.5"], "rs must be in (0, 1], got 1.5"),
        (["--group", "xl151m", "--set", "grid=100:50:10"], "at least two strictly ascending"),
        (["--study", "studies/table8.yaml", "--profile", "gpu"], "profile"),
        (["--study", "studies/table8.yaml", "xl-rnm"], "Did you mean 'xl-rnn'"),
    ],
)
def test_user_errors_exit_2_without_traceback(tmp_path, args, message, cli):
    result = cli("recl", *args, "--size", "tiny", "--models-root", str(tmp_path), "--quiet")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_grid_specs():
    assert parse_grid("100:1000:100") == tuple(range(100, 1001, 100))
    assert parse_grid("16,32,64") == (16, 32, 64)
    with pytest.raises(TxlabError):
        parse_grid("a:b")


def hand_built_group() -> GroupLosses:
    """Two blocks of two targets, each block the same. Target 0 of a block is hard: model a drops 1 nat
    at every step of the grid (1, 2, 3, 4), b never gains. Target 1 is easy (1 nat for both, always).
    a's placebo gains nothing at 1 -> 2 but the whole real gain at 2 -> 3."""
    a = [[3, 1], [2, 1], [1, 1], [0, 1]]
    b = [[3, 1]] * 4
    a_placebo = [[3, 1], [1, 1], [1, 1]]
    b_placebo = [[3, 1]] * 3
    losses = np.tile(np.array([a, b], dtype=np.float32), (1, 1, 2))  # [M, G, T]
    placebo = np.tile(np.array([a_placebo, b_placebo], dtype=np.float32), (1, 1, 2))
    return GroupLosses(["run-a", "run-b"], losses, (1, 2, 3, 4), np.arange(10, 14), 2, "0" * 64, {"run-a": None, "run-b": None},
                       [Path("run-a"), Path("run-b")], placebo)


def test_a_hand_built_group_scores_to_hand_computed_numbers():
    settings = ReclSettings(rs=[0.5], n_boot=10)
    scores = score_group(hand_built_group(), ["a", "b"], settings)
    # r = 0.5: T(1) and T(2) are the two hard targets, where a gains 1 nat a step: 1 - exp(-1). At c = 3
    # every target ties at 1 nat and T(3) is targets 0 and 1 (lower positions first): 1 - exp(-1/2).
    # b gains nothing. a's walk runs off the grid; beside its placebo its step 2 -> 3 gains nothing, so
    # its placebo-aware RECL is 2.
    def readings(row):
        paper, placebo = row.paper, row.placebo_aware
        return (row.model, row.r, paper.recl, paper.censored, paper.interval.low, paper.interval.high, paper.interval.censored_fraction,
                placebo.recl, placebo.censored, placebo.interval.low, placebo.interval.high, row.below_placebo)

    assert [readings(row) for row in scores.rows] == [
        ("a", 0.5, 4, True, 4, 4, 1.0, 2, False, 2, 2, True),
        ("b", 0.5, 1, False, 1, 1, 0.0, 1, False, 1, 1, False),
    ]
    gain, placebo_gain = scores.placebo_gains[0.5]
    g = 1 - math.exp(-1)
    np.testing.assert_allclose(gain, [[g, g, 1 - math.exp(-0.5)], [0, 0, 0]], rtol=1e-12)
    np.testing.assert_allclose(placebo_gain, [[0, g, 0], [0, 0, 0]], rtol=1e-12)
    # Figure 3 at r = 0.1: T(c) is target 0 alone (a tie with target 2, broken by position): exp(3 - j) - exp(2 - j).
    np.testing.assert_allclose(scores.figure3_gains, [[math.exp(3) - math.exp(2), math.exp(2) - math.exp(1), math.exp(1) - 1], [0, 0, 0]], rtol=1e-6)
    # Figure 4: exp of the mean loss over the four targets.
    np.testing.assert_allclose(scores.perplexity, np.exp([[2, 1.5, 1, 0.5], [2, 2, 2, 2]]), rtol=1e-6)
    assert table8_markdown(scores.rows) == (
        "| model | r = 0.5 | r = 0.5, placebo-aware |\n"
        "|---|---|---|\n"
        "| a | >= 4 [4, >= 4] † | 2 [2, 2] |\n"
        "| b | 1 [1, 1] | 1 [1, 1] |\n"
        "\n"
        "† a step this RECL rests on did not beat its placebo gain (extra context from far away) by the threshold; "
        "the placebo-aware RECL stops at the first such step.\n"
    )


def test_a_hand_built_group_without_placebo_has_no_placebo_columns():
    group = hand_built_group()
    group.placebo = None
    scores = score_group(group, ["a", "b"], ReclSettings(rs=[0.5], n_boot=0))
    assert [(row.model, row.paper.label) for row in scores.rows] == [("a", ">= 4"), ("b", "1")]
    assert scores.rows[0].placebo_aware is None and "placebo_recl" not in scores.rows[0].record() and scores.placebo_gains == {}
    assert table8_markdown(scores.rows) == "| model | r = 0.5 |\n|---|---|\n| a | >= 4 |\n| b | 1 |\n"


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_members_trained_to_other_steps_than_their_recipe_are_refused_or_scored_with_a_warning(tmp_path, cli, tiny_members, figure_files_only):
    # both members trained for 2 steps; a recipe of 4 steps finds them short
    tiny_members(tmp_path / "models", "xl151m", "qrnn")
    four = [a.replace("train.max_steps=2", "train.max_steps=4") for a in TINY_TRAINING]
    args = ["recl", "--group", "xl151m", "qrnn", *TINY_COLLECTION, *four, "--models-root", str(tmp_path / "models"),
            "--out-dir", str(tmp_path / "unequal"), "--fig-dir", str(tmp_path / "unequal-figures"), "--quiet"]
    refused = cli(*args)
    assert refused.exit_code == 2 and "unequally trained group" in refused.output
    assert "xl151m" in refused.output and "stopped at step 2 where its recipe trains 4" in refused.output
    assert not (tmp_path / "unequal").exists()
    allowed = cli(*args[:-1], "--set", "allow_unequal=true")
    assert allowed.exit_code == 0, allowed.output
    assert "warning: unequally trained group (allow_unequal)" in allowed.output
    assert "xl151m: trained 2 steps of the recipe's 4" in allowed.output


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_a_member_interrupted_under_its_recipe_trains_on_before_it_is_scored(tmp_path, cli, tiny_members, figure_files_only):
    from txlab.fileio import write_json_atomic
    from txlab.runs.checkpoint import read_meta

    models = tiny_members(tmp_path / "models", "xl151m")
    run = models / "xl151m-tiny-synthetic-small"
    meta_path = next(run.glob("checkpoint/meta.json"))
    meta = read_meta(run)
    meta["config"]["train"]["max_steps"] = 4  # as if a 4-step training had been killed after its step-2 checkpoint
    write_json_atomic(meta_path, meta)
    (run / "restarts.jsonl").write_text('{"attempt": 0, "seed": 0}\n')  # as if its restart rule had fired once: recl says so
    four = [a.replace("train.max_steps=2", "train.max_steps=4") for a in TINY_TRAINING]
    result = cli("recl", "--group", "xl151m", *TINY_COLLECTION, *four, "--models-root", str(models),
                                 "--out-dir", str(tmp_path / "results"), "--fig-dir", str(tmp_path / "figures"))
    assert result.exit_code == 0, result.output
    assert read_meta(run)["step"] == 4 and "xl151m: trained 4 steps of the recipe's 4" in result.output
    assert "its last of 2 attempts (restart rule: restarts.jsonl)" in result.output


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_recl_with_the_slurm_launcher_trains_then_collects_each_member_as_a_job(tmp_path, monkeypatch, cli, figure_files_only):
    # the jobs' work run in-process in place of submitit: quick, and the same code of txlab.drivers.recl
    # (tests/test_launch.py runs this through real local submitit jobs, marked slow, and ablate's jobs by default)
    submitted = []

    def run_in_process(tasks, settings, folder, name, echo):
        for task in tasks:
            task.function(*task.args)
            submitted.append((name, task.name, task.progress(), Path(folder)))
        return []

    monkeypatch.setattr("txlab.drivers.recl.run.run_jobs", run_in_process)  # training
    monkeypatch.setattr("txlab.drivers.recl.sources.run_jobs", run_in_process)  # collection
    cli.ok("recl", "--group", "xl151m", "qrnn", *TINY_COLLECTION, *TINY_TRAINING, "--launcher", "slurm", "--models-root", tmp_path / "models",
           "--out-dir", tmp_path / "results", "--fig-dir", tmp_path / "figures", "--quiet")
    jobs = tmp_path / "models" / "jobs"
    assert submitted == [("txlab-train", "xl151m", "checkpoint at step 2/2", jobs), ("txlab-train", "qrnn", "checkpoint at step 2/2", jobs),
                         ("txlab-losses", "xl151m", "3 loss blocks written", jobs), ("txlab-losses", "qrnn", "3 loss blocks written", jobs)]
    assert (tmp_path / "results" / "xl151m+qrnn-tiny-grid-2-8-2-blocks-3-block_len-20" / "table8.md").is_file()


def test_a_failed_job_stops_recl_naming_every_failure_and_its_log(tmp_path, monkeypatch, cli):
    from txlab.runs.launch import Failure

    def every_job_fails(tasks, settings, folder, name, echo):
        return [Failure(task.name, "7", str(Path(folder) / f"{task.name}.err"), "out of memory") for task in tasks]

    monkeypatch.setattr("txlab.drivers.recl.run.run_jobs", every_job_fails)
    message = cli.refused("recl", "--group", "xl151m", "qrnn", *TINY_COLLECTION, *TINY_TRAINING, "--launcher", "slurm",
                          "--models-root", tmp_path / "models", "--quiet")
    jobs = tmp_path / "models" / "jobs"
    assert (f"training failed: xl151m (job 7): out of memory, log {jobs / 'xl151m.err'}; qrnn (job 7): out of memory, "
            f"log {jobs / 'qrnn.err'}. Rerun the same command to resume") in message


def test_the_commands_a_group_suggests_train_the_runs_it_then_finds(tmp_path, cli):
    """With train_missing off, the group names a `txlab train` command per missing member; run as printed, they train
    exactly the runs the group reads (own text, tokenizer, a member's sets and its training seed included)."""
    text = tmp_path / "text.txt"
    text.write_text(sample_file("tinyshakespeare/input.txt").read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    group = ["recl", "--group", "xl151m", "--text", text, "--tokenizer", "word", "--train-seeds", "1", "--size", "tiny",
             "--models-root", tmp_path / "models", "--set", "train.max_steps=2", "--set", "train.eval_interval=2", "--set", "blocks=2",
             "--set", "block_len=20", "--quiet"]
    refused = cli(*group, "--set", "train_missing=false")
    assert refused.exit_code == 2 and "not trained" in refused.output, refused.output
    (commands,) = re.findall(r"Train them with: (.*)", " ".join(refused.output.split()))
    for command in commands.split("; "):
        argv = shlex.split(command)
        assert argv[:2] == ["txlab", "train"] and "--text" in argv and "train.seed=1" in argv
        cli.ok(*argv[1:], "--quiet")
    plan = cli.ok(*group, "--set", "train_missing=false", "--dry-run")
    assert "training seed 1: 1 preset run (0 to train)" in plan.output, plan.output
