"""RECL over training seeds: the spread of hand-given readings (censored ones included), the rows and
the table built from each seed's rows, and `txlab recl --train-seeds` end to end on tiny models."""

import hashlib
import json
import math

import pandas as pd
import pytest
import yaml

from txlab.analysis import recl, recl_figures
from txlab.analysis.table8 import ReclEstimate, Table8Row, seed_rows, seed_spread_markdown
from txlab.errors import TxlabError
from txlab.fileio import write_json_atomic
from txlab.runs.checkpoint import read_meta

from conftest import TINY_TRAINING

TINY_COLLECTION = ["--size", "tiny", "--set", "grid=2:8:2", "--set", "blocks=3", "--set", "block_len=20", "--set", "n_boot=10",
                   "--set", "placebo=true"]


# --------------------------------------------------------------------------------------------------
# The spread of readings, by hand


def test_the_spread_of_uncensored_readings_is_their_plain_statistics():
    spread = recl.seed_spread([2, 4, 6], [False, False, False])
    assert (spread.n, spread.min, spread.max, spread.mean, spread.sd, spread.n_censored) == (3, 2, 6, 4.0, 2.0, 0)
    assert not (spread.min_censored or spread.max_censored or spread.mean_censored)
    assert (spread.min_label, spread.max_label, spread.mean_label, spread.sd_label) == ("2", "6", "4.0", "2.0")


def test_the_spread_counts_every_reading_repeated_ones_included():
    # two seeds read 120 and one 180: the mean is 140, not 150 (the mean of the distinct readings)
    spread = recl.seed_spread([120, 120, 180], [False, False, False])
    assert (spread.n, spread.min, spread.max, spread.mean, spread.mean_label) == (3, 120, 180, 140.0, "140.0")
    assert spread.sd == pytest.approx(math.sqrt(1200))  # deviations -20, -20, 40 over n - 1 = 2


def test_a_censored_reading_makes_the_max_and_the_mean_lower_bounds():
    # seed 1 ran off the grid at 8: its RECL is at least 8, so the largest is at least 8 and the mean at least 6
    spread = recl.seed_spread([4, 8, 6], [False, True, False])
    assert (spread.min, spread.min_censored) == (4, False)
    assert (spread.max, spread.max_censored) == (8, True)
    assert (spread.mean, spread.mean_censored) == (6.0, True)
    assert (spread.sd, spread.n_censored) == (2.0, 1)
    assert (spread.min_label, spread.max_label, spread.mean_label) == ("4", ">= 8", ">= 6.0")


def test_the_min_is_a_bound_only_when_every_reading_at_it_is_censored():
    assert recl.seed_spread([8, 8], [True, True]).record() == {
        "min": 8, "min_censored": True, "min_label": ">= 8", "max": 8, "max_censored": True, "max_label": ">= 8",
        "mean": 8.0, "mean_censored": True, "mean_label": ">= 8.0", "sd": 0.0, "sd_label": "0.0", "n_censored": 2}
    # a capped model's walk can stop uncensored where another seed's is censored: the uncensored one pins the min
    assert recl.seed_spread([6, 6, 8], [True, False, False]).min_censored is False
    assert recl.seed_spread([6, 6, 8], [True, True, False]).min_censored is True


def test_one_seed_has_no_sd_and_bad_input_is_refused():
    spread = recl.seed_spread([5], [False])
    assert spread.sd is None and spread.sd_label == "-" and spread.mean == 5.0
    with pytest.raises(TxlabError, match="one censoring flag per reading"):
        recl.seed_spread([2, 4], [False])
    with pytest.raises(TxlabError, match="at least one reading"):
        recl.seed_spread([], [])


def _row(model, r, value, censored, placebo_value=None, placebo_censored=False, ground_truth=False):
    placebo = None if placebo_value is None else ReclEstimate(placebo_value, placebo_censored)
    return Table8Row(model, r, ReclEstimate(value, censored), placebo, ground_truth)


def test_seed_rows_give_each_seed_reading_beside_their_spread():
    by_seed = {
        0: [_row("xl", 0.1, 8, True, 6), _row("rnn", 0.1, 2, False, 2), _row("oracle (ground truth)", 0.1, 6, False, ground_truth=True)],
        3: [_row("xl", 0.1, 6, False, 6), _row("rnn", 0.1, 4, False, 2), _row("oracle (ground truth)", 0.1, 6, False, ground_truth=True)],
    }
    rows = seed_rows(by_seed, same_every_seed=["rnn", "oracle (ground truth)"])
    assert [(r.model, r.estimate) for r in rows] == [("xl", "paper"), ("xl", "placebo-aware"), ("rnn", "paper"),
                                                     ("rnn", "placebo-aware"), ("oracle (ground truth)", "paper")]
    xl, xl_placebo, rnn, _, oracle = rows
    assert xl.seeds == (0, 3) and xl.recl == (8, 6) and xl.censored == (True, False)
    assert xl.labels == [">= 8 †", "6"] and xl.below_placebo == (True, False)
    assert (xl.spread.min_label, xl.spread.max_label, xl.spread.mean_label, xl.spread.sd) == ("6", ">= 8", ">= 7.0", pytest.approx(math.sqrt(2)))
    assert xl_placebo.recl == (6, 6) and xl_placebo.labels == ["6", "6"] and xl_placebo.below_placebo is None
    assert (xl_placebo.spread.mean, xl_placebo.spread.sd, xl_placebo.same_every_seed) == (6.0, 0.0, False)
    assert rnn.recl == (2, 4) and rnn.same_every_seed and rnn.labels == ["2", "4 †"]
    assert oracle.ground_truth and oracle.recl == (6, 6)
    # the JSON rows: every reading in lists, the dagger's flags only for the paper's RECL, the spread's cells after them
    assert xl.record() == {"model": "xl", "r": 0.1, "estimate": "paper", "same_every_seed": False, "seeds": [0, 3], "recl": [8, 6],
                           "censored": [True, False], "labels": [">= 8 †", "6"], "below_placebo": [True, False], **xl.spread.record()}
    assert "below_placebo" not in xl_placebo.record() and oracle.record()["ground_truth"] is True
    # the CSV: one column per seed and quantity, the spread without its sd label
    assert xl.csv_record() == {"model": "xl", "r": 0.1, "estimate": "paper", "same_every_seed": False,
                               "seed_0": ">= 8 †", "recl_seed_0": 8, "censored_seed_0": True, "below_placebo_seed_0": True,
                               "seed_3": "6", "recl_seed_3": 6, "censored_seed_3": False, "below_placebo_seed_3": False,
                               **{k: v for k, v in xl.spread.record().items() if k != "sd_label"}}
    with pytest.raises(TxlabError, match="seed 3's group reads other models or r"):
        seed_rows({0: by_seed[0], 3: by_seed[3][:2]})


def test_seed_spread_markdown_golden():
    rows = seed_rows({0: [_row("xl", 0.1, 8, True, 6), _row("run", 0.1, 2, False, 2)],
                           1: [_row("xl", 0.1, 4, False, 4), _row("run", 0.1, 2, False, 2)]}, same_every_seed=["run"])
    assert seed_spread_markdown(rows) == (
        "| model | r | RECL | seed 0 | seed 1 | min | max | mean | sd |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| xl | 0.1 | paper | >= 8 † | 4 | 4 | >= 8 | >= 6.0 | 2.8 * |\n"
        "| xl | 0.1 | placebo-aware | 6 | 4 | 4 | 6 | 5.0 | 1.4 |\n"
        "| run | 0.1 | paper | 2 | 2 | 2 | 2 | 2.0 | 0.0 |\n"
        "| run | 0.1 | placebo-aware | 2 | 2 | 2 | 2 | 2.0 | 0.0 |\n"
        "\n'>= c': the walk ran off the grid, so that RECL is at least c, and a min, max or mean marked '>=' is a lower bound for the "
        "same reason. * the sd of readings some of which are such bounds: the true spread may be larger or smaller.\n"
        "\n† a step this RECL rests on did not beat its placebo gain (extra context from far away) by the threshold; the placebo-aware "
        "RECL stops at the first such step.\n"
        "\nrun: the same model for every seed (used as it is); its RECL changes from seed to seed only because RECL is relative to the "
        "group's other members, which are trained once per seed.\n"
    )


def test_the_seed_spread_figure_plots_every_seeds_reading(tmp_path):
    # the figure rendered for real (the end-to-end test below only lays it out): PNG, PDF and the points it plots
    rows = seed_rows({0: [_row("xl", 0.1, 8, True, 6), _row("run", 0.1, 2, False, 2)],
                      1: [_row("xl", 0.1, 4, False, 4), _row("run", 0.1, 2, False, 2)]}, same_every_seed=["run"])
    files = recl_figures.seed_spread_figure(rows, tmp_path / "table8-seeds.png", "RECL over two seeds")
    assert [f.name for f in files] == ["table8-seeds.png", "table8-seeds.pdf", "table8-seeds.csv"]
    assert all(f.stat().st_size > 1000 for f in files[:2])
    points = pd.read_csv(files[2])
    assert [tuple(p) for p in points[["model", "estimate", "seed", "recl", "censored"]].itertuples(index=False)] == [
        ("xl", "paper", 0, 8, True), ("xl", "paper", 1, 4, False), ("xl", "placebo-aware", 0, 6, False), ("xl", "placebo-aware", 1, 4, False),
        ("run", "paper", 0, 2, False), ("run", "paper", 1, 2, False), ("run", "placebo-aware", 0, 2, False), ("run", "placebo-aware", 1, 2, False)]


# --------------------------------------------------------------------------------------------------
# `txlab recl --train-seeds`, end to end


# figures laid out, not rendered: test_the_seed_spread_figure_plots_every_seeds_reading and tests/test_recl_figures.py render them
def test_a_group_over_two_training_seeds_trains_a_run_per_seed_and_summarises_each_seed_recl(tmp_path, cli, tiny_members, figure_files_only):
    models, results, figures = tmp_path / "models", tmp_path / "results", tmp_path / "figures"
    # a run directory member: the same model for both seeds
    lstm_run = (tiny_members(tmp_path / "shared", "lstm") / "lstm-tiny-synthetic-small").rename(tmp_path / "lstm-run")
    args = ["recl", "--group", "xl151m", str(lstm_run), "--r", "0.1,1", *TINY_COLLECTION, *TINY_TRAINING, "--train-seeds", "0,1",
            "--models-root", models, "--out-dir", results, "--fig-dir", figures]
    plan = cli.ok(*args, "--dry-run").output
    assert "training seed 0: 1 preset run (1 to train), 1 member the same for every seed" in plan
    assert "training seed 1: 1 preset run (1 to train)" in plan
    assert f"lstm-run: run directory {lstm_run}, used as it is for every seed" in plan
    assert "lstm-run collected with an earlier seed's group" in plan  # its losses are counted once

    doc = cli.json(*args, "--json", "--quiet")
    # one run per seed, its seed in its config, and the two seeds train different weights
    runs = [models / f"xl151m-tiny-synthetic-small-seed{s}" for s in (0, 1)]
    for seed, run in enumerate(runs):
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["seed"] == seed
        assert read_meta(run)["config"]["train"]["seed"] == seed and read_meta(run)["step"] == 2
    weights = [hashlib.sha256((run / "checkpoint" / "model.safetensors").read_bytes()).hexdigest() for run in runs]
    assert weights[0] != weights[1]
    assert not (models / "xl151m-tiny-synthetic-small").exists()

    name = "xl151m+lstm-run-tiny-grid-2-8-2-blocks-3-block_len-20-train_seeds-0-1"
    table_dir = results / name
    per_seed = {}
    for seed in (0, 1):
        for file in ("table8.csv", "table8.md", "figure3.csv", "figure4.csv", "placebo.csv", "recl.json"):
            assert (table_dir / f"seed-{seed}" / file).is_file(), (seed, file)
        assert (figures / name / f"seed-{seed}" / "figure3.png").is_file()
        per_seed[seed] = json.loads((table_dir / f"seed-{seed}" / "recl.json").read_text())
        assert per_seed[seed]["train_seed"] == seed and per_seed[seed]["group"] == name
        assert per_seed[seed]["run_dirs"] == [str(runs[seed]), str(lstm_run)]

    # the summary's readings are the seeds' recl.json values, in the JSON, the CSV and the --json document
    summary = json.loads((table_dir / "table8-seeds.json").read_text())
    assert summary["train_seeds"] == [0, 1] and summary["run_dirs"]["1"] == [str(runs[1]), str(lstm_run)]
    csv = pd.read_csv(table_dir / "table8-seeds.csv")
    (group,) = doc["groups"]
    assert group["train_seeds"] == [0, 1] and set(group["seeds"]) == {"0", "1"}
    models_and_rs = {(row["model"], row["r"]) for row in per_seed[0]["rows"]}
    assert {(row["model"], row["r"]) for row in summary["rows"]} == models_and_rs == {(m, r) for m in ("xl151m", "lstm-run", "oracle (ground truth)")
                                                                                      for r in (0.1, 1.0)}
    for row in summary["rows"]:
        prefix = "placebo_" if row["estimate"] == "placebo-aware" else ""
        readings = [next(x for x in per_seed[s]["rows"] if (x["model"], x["r"]) == (row["model"], row["r"])) for s in (0, 1)]
        assert row["recl"] == [x[prefix + "recl"] for x in readings]
        assert row["censored"] == [x[prefix + "censored"] for x in readings]
        expected = recl.seed_spread(row["recl"], row["censored"]).record()
        assert {k: row[k] for k in expected} == expected
        line = csv[(csv["model"] == row["model"]) & (csv["r"] == row["r"]) & (csv["estimate"] == row["estimate"])]
        assert [int(line[f"recl_seed_{s}"].iloc[0]) for s in (0, 1)] == row["recl"] and float(line["mean"].iloc[0]) == row["mean"]
        assert row["same_every_seed"] == (row["model"] != "xl151m")
        assert group["spread"][row["model"]][str(row["r"])][row["estimate"]]["recl"] == row["recl"]
        assert group["seeds"]["1"]["recl"][row["model"]][str(row["r"])][prefix + "recl"] == row["recl"][1]
    markdown = (table_dir / "table8-seeds.md").read_text()
    assert "| seed 0 | seed 1 |" in markdown and "lstm-run: the same model for every seed" in markdown
    assert (figures / name / "table8-seeds.png").is_file()

    # found again: nothing trains; a seed's folder redraws into its own figure folder
    again = cli.ok(*args, "--dry-run").output
    assert "training seed 1: 1 preset run (0 to train)" in again
    redrawn = cli.ok("recl", "--redraw", table_dir / "seed-1", "--fig-dir", tmp_path / "redrawn").output
    assert str(tmp_path / "redrawn" / name / "seed-1" / "figure3.png") in redrawn

    # a seed's directory that holds a run of another seed is refused, not scored as that seed
    meta_path = runs[1] / "checkpoint" / "meta.json"
    meta = read_meta(runs[1])
    meta["config"]["train"]["seed"] = 5
    write_json_atomic(meta_path, meta)
    message = cli.refused(*args, "--quiet")
    assert f"{runs[1]} holds a run of train.seed 5" in message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "xl151m", "--train-seeds", "0,one"], "--train-seeds takes comma-separated integers"),
        (["--group", "xl151m", "--train-seeds", "1,1"], "train_seeds must be distinct"),
        (["--group", "xl151m", "--train-seeds", "0,-1"], "train_seeds must be in [0, "),
        (["--group", "xl151m", "--train-seeds", "0,1", "--set", "train.seed=3"], "not also as --set train.seed"),
    ],
)
def test_bad_training_seeds_are_refused_before_anything_runs(tmp_path, args, message, cli):
    refused = cli.refused("recl", *args, "--size", "tiny", "--models-root", tmp_path, "--dry-run", "--quiet")
    assert message in refused


def test_training_seeds_need_a_preset_member(tmp_path, untrained_run, cli):
    run = untrained_run(tmp_path / "run")
    assert "has none: its run directories and Hugging Face members are the same model for every seed" in cli.refused(
        "recl", "--group", run, "--size", "tiny", "--train-seeds", "0,1", "--set", "grid=2:8:2", "--dry-run", "--quiet")


# slow: a second --train-seeds group end to end (2 s); the default run keeps the Slurm launcher's jobs in
# tests/test_group.py::test_recl_with_the_slurm_launcher_trains_then_collects_each_member_as_a_job and the seeds above.
# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
@pytest.mark.slow
def test_with_the_slurm_launcher_every_seed_trains_in_one_batch_of_jobs(tmp_path, monkeypatch, cli, figure_files_only):
    # the jobs' work runs in-process in place of submitit, as in tests/test_group.py
    batches = []

    def run_in_process(tasks, settings, folder, name, echo):
        for task in tasks:
            task.function(*task.args)
        batches.append((name, [task.name for task in tasks], [task.progress() for task in tasks]))
        return []

    monkeypatch.setattr("txlab.drivers.recl.run.run_jobs", run_in_process)  # training
    monkeypatch.setattr("txlab.drivers.recl.sources.run_jobs", run_in_process)  # collection
    cli.ok("recl", "--group", "xl151m", *TINY_COLLECTION, *TINY_TRAINING, "--set", "placebo=false", "--train-seeds", "0,1", "--launcher", "slurm",
           "--models-root", tmp_path / "models", "--out-dir", tmp_path / "results", "--fig-dir", tmp_path / "figures", "--quiet")
    assert batches == [("txlab-train", ["xl151m", "xl151m"], ["checkpoint at step 2/2"] * 2),
                       ("txlab-losses", ["xl151m"], ["3 loss blocks written"]), ("txlab-losses", ["xl151m"], ["3 loss blocks written"])]
    assert [read_meta(tmp_path / "models" / f"xl151m-tiny-synthetic-small-seed{s}")["config"]["train"]["seed"] for s in (0, 1)] == [0, 1]
