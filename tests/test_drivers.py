"""The three study commands (recl, speed, ablate) read their settings one way: a study profile through
txlab.study.read_study, then the command line's options and --set through txlab.config.override_settings,
so an option and its --set spelling give the same settings and a bad value gets the same strict error."""

from __future__ import annotations

import pytest

from txlab import devices, study
from txlab.drivers import ablate_study, speed
from txlab.drivers.recl import groups as recl
from txlab.drivers.recl import run as recl_run
from txlab.drivers.recl import settings as recl_settings
from txlab.errors import TxlabError
from txlab.runs.plan import Plan

STUDIES = {"recl": "studies/table8.yaml", "speed": "studies/table9.yaml", "ablate": "studies/table6.yaml"}


@pytest.fixture
def planned(monkeypatch):
    """The settings `txlab recl` and `txlab speed --dry-run` would run with, caught where each plans (no machine measured)."""
    caught = {}

    def plan_groups(groups, given, gflops=None, sources=()):
        caught["recl"] = [group.settings for group in groups]
        return Plan()

    def speed_plan(study, gflops=None):
        caught["speed"] = study.settings
        return Plan()

    monkeypatch.setattr(recl_run, "plan_groups", plan_groups)
    monkeypatch.setattr(speed, "speed_plan", speed_plan)
    # the settings are compared, not this machine's devices: --device cuda must pass the check on a CPU build too
    monkeypatch.setattr(devices, "check_device", lambda name, source="--device": None)
    return caught


@pytest.mark.parametrize("option, setting", [(["--r", "0.1,0.5"], "rs=[0.1, 0.5]"), (["--size", "tiny"], "size=tiny"), (["--device", "cuda"], "device=cuda"),
                                             (["--models-root", "zoo"], "models_root=zoo"), (["--launcher", "slurm"], "launcher=slurm"),
                                             (["--train-seeds", "0,1,2"], "train_seeds=[0,1,2]")])
def test_a_recl_option_and_its_set_give_the_same_settings(option, setting, planned, cli):
    group = ["recl", "--group", "xl151m", "qrnn", "--dry-run", "--quiet"]
    cli.ok(*group, *option)
    by_option = planned["recl"]
    cli.ok(*group, "--set", setting)
    assert planned["recl"] == by_option and by_option != [recl.resolve_groups(["xl151m", "qrnn"], None, "cpu", None)[0].settings]


@pytest.mark.parametrize("option, setting", [(["--size", "cpu"], "size=cpu"), (["--threads", "1"], "threads=1"), (["--device", "cuda"], "device=cuda")])
def test_a_speed_option_and_its_set_give_the_same_settings(option, setting, planned, cli):
    cli.ok("speed", "--dry-run", *option)
    by_option = planned["speed"]
    cli.ok("speed", "--dry-run", "--set", setting)
    assert planned["speed"] == by_option != speed.SpeedSettings()


def test_the_command_line_overrides_a_study_profile_the_same_way_for_every_command(planned, cli):
    cli.ok("recl", "--study", STUDIES["recl"], "--profile", "cpu", "xl-rnn", "--dry-run", "--set", "blocks=3", "--set", "slurm.gpus=1")
    (settings,) = planned["recl"]
    assert (settings.blocks, settings.slurm.gpus, settings.block_len) == (3, 1, 250)  # block_len stays the profile's
    cli.ok("speed", "--study", STUDIES["speed"], "--profile", "cpu", "--dry-run", "--set", "repeats=3")
    assert (planned["speed"].repeats, planned["speed"].batch_size) == (3, 1)  # batch_size stays the profile's
    ablation = ablate_study.load_study(STUDIES["ablate"], "cpu", ["eval_tokens=400", "slurm.cpus=4"])
    assert (ablation.settings.eval_tokens, ablation.settings.slurm.cpus, ablation.settings.size) == (400, 4, "cpu")


RECL = ["recl", "--group", "xl151m", "--size", "tiny", "--dry-run"]
SPEED = ["speed", "--dry-run"]
ABLATE = ["ablate", STUDIES["ablate"], "--dry-run"]


@pytest.mark.parametrize(
    "args, message",
    [
        ([*RECL, "--set", "blocks=many"], "config key 'blocks' expects an integer, got 'many'"),
        ([*RECL, "--set", "blocks=0"], "blocks must be >= 1, got 0"),
        ([*RECL, "--r", "1.5"], "rs must be in (0, 1], got 1.5"),
        ([*RECL, "--set", "blcks=3"], "unknown config key 'blcks'. Did you mean 'blocks'"),
        ([*RECL, "--launcher", "slurn"], "config key 'launcher' must be one of local, slurm; got 'slurn'"),
        ([*SPEED, "--set", "repeats=few"], "config key 'repeats' expects an integer, got 'few'"),
        ([*SPEED, "--threads", "0"], "threads must be >= 1, got 0"),
        ([*SPEED, "--set", "threads=0"], "threads must be >= 1, got 0"),
        ([*SPEED, "--set", "budget=5"], "unknown config key 'budget'. Did you mean 'budget_s'"),
        ([*ABLATE, "--set", "eval_tokens=all"], "config key 'eval_tokens' expects an integer, got 'all'"),
        ([*ABLATE, "--set", "eval_tokens=-1"], "eval_tokens must be >= 0, got -1"),
        ([*ABLATE, "--set", "eval_tokns=400"], "unknown config key 'eval_tokns'. Did you mean 'eval_tokens'"),
        ([*ABLATE, "--set", "slurm.gpu=1"], "unknown config key 'slurm.gpu'. Did you mean 'gpus'"),
    ],
)
def test_a_bad_command_line_value_gets_the_strict_error(args, message, planned, cli):
    assert cli.assert_refused(cli(*args), message).startswith("error: command line: ")
    assert not planned  # refused before planning


def test_one_profile_reader_serves_every_study_command(tmp_path, cli):
    assert ablate_study.read_study is recl_settings.read_study is speed.read_study is study.read_study
    for command, path in STUDIES.items():
        args = [path] if command == "ablate" else ["--study", path]
        cli.assert_refused(cli(command, *args, "--profile", "cpuu", "--dry-run"), f"unknown profile in {path} 'cpuu'. Did you mean 'cpu'")
    bad = {"recl": "name: s\ngroups: {g: [qrnn]}\nprofiles: {cpu: {n_boot: -1}}\n",
           "speed": "name: s\nprofiles: {cpu: {repeats: 0}}\n",
           "ablate": "name: s\nbase: {preset: xl128m}\nprofiles: {cpu: {eval_tokens: -5}}\n"}
    for command, text in bad.items():
        path = tmp_path / f"{command}.yaml"
        path.write_text(text)
        args = [path] if command == "ablate" else ["--study", path]
        cli.assert_refused(cli(command, *args, "--profile", "cpu", "--dry-run"), "profiles.cpu.", "must be")


@pytest.mark.parametrize("command, keys", [("recl", ["grid =", "placebo =", "slurm.partition ="]), ("speed", ["budget_s =", "eval_cache ="]),
                                           ("ablate", ["eval_lens =", "slurm.time_min ="])])
def test_show_settings_lists_every_key_that_set_takes(command, keys, cli):
    shown = cli.ok(command, "--show-settings").output
    assert all(key in shown for key in keys)
    assert "--show-settings" in " ".join(cli(command, "--help", env={"COLUMNS": "200"}).output.split())


def test_a_recl_group_scored_on_other_losses_gets_its_own_folder_and_the_same_command_finds_it_again():
    def names(members, study=None, sets=()):
        return [g.name for g in recl.resolve_groups(members, study, "cpu", None, {}, list(sets))]

    assert names(["xl151m", "qrnn"]) == ["xl151m+qrnn-cpu"] == names(["xl151m", "qrnn"], sets=["train.threads=1"])
    assert names(["xl151m", "qrnn"], sets=["grid=20:480:20", "blocks=16"]) == ["xl151m+qrnn-cpu-grid-20-480-20-blocks-16"]
    usual = "table8-xl-rnn-cpu-synthetic-small-short"
    assert names(["xl-rnn"], "studies/table8.yaml") == [usual]
    assert names(["xl-rnn"], "studies/table8.yaml", ["blocks=16"]) == [f"{usual}-blocks-16"]
    assert names(["xl-rnn"], "studies/table8.yaml", ["split=test", "seed=1"]) == [f"{usual}-split-test-seed-1"]
    # a group over training seeds keeps its seeds' folders and its spread apart from the single runs' tables
    assert names(["xl-rnn"], "studies/table8.yaml", ["train_seeds=[0,1,2]"]) == [f"{usual}-train_seeds-0-1-2"]
    assert names(["xl151m", "qrnn"], sets=["train_seeds=[3]"]) == ["xl151m+qrnn-cpu-train_seeds-3"]


def test_the_recl_and_speed_studies_have_tiny_profiles():
    from txlab.drivers.speed import load_study as load_speed_study

    (xl_rnn, xl_ablations) = recl.resolve_groups([], "studies/table8.yaml", "tiny", None)
    assert xl_rnn.settings.size == "tiny" and xl_rnn.settings.blocks * xl_rnn.settings.block_len == 100 and xl_rnn.name == "table8-xl-rnn-tiny-synthetic"
    assert load_speed_study("studies/table9.yaml", "tiny").settings.size == "tiny"


def test_member_sets_reach_only_the_preset_they_name_and_a_typo_is_refused():
    (group,) = recl.resolve_groups(["xl151m", "qrnn"], None, "cpu", None, {}, ["member_sets=[xl151m:model.clamp_len=12, xl151m:train.max_steps=30]",
                                                                               "train.max_steps=20"])
    xl, qrnn = next(iter(group.resolved.values()))
    assert (xl.config.model.clamp_len, xl.config.train.max_steps) == (12, 30)  # after sets
    assert (qrnn.config.model.clamp_len, qrnn.config.train.max_steps) == (0, 20)
    # a preset the group lacks is left alone (one profile serves both groups); a name that is no preset is refused
    (group,) = recl.resolve_groups(["qrnn"], None, "cpu", None, {}, ["member_sets=[xl128m-norecur:model.clamp_len=12]"])
    assert next(iter(group.resolved.values()))[0].config.model.clamp_len == 0
    with pytest.raises(TxlabError, match="xl15m"):
        recl.resolve_groups(["xl151m"], None, "cpu", None, {}, ["member_sets=[xl15m:model.clamp_len=12]"])
    with pytest.raises(TxlabError, match="must look like <preset>:<key>=<value>"):
        recl.resolve_groups(["xl151m"], None, "cpu", None, {}, ["member_sets=[xl151m:model.clamp_len]"])


def test_a_preset_members_run_of_another_recipe_is_refused_not_scored_under_this_ones_name(tmp_path):
    from txlab.config import save_config

    sets = ["member_sets=[qrnn:model.rnn_embed_init=0.1]", f"models_root={tmp_path}"]
    (group,) = recl.resolve_groups(["qrnn"], None, "cpu", None, {}, sets)
    (planned,) = next(iter(group.resolved.values()))
    run = planned.run_dir
    run.mkdir(parents=True)
    save_config(planned.config, run / "config.yaml")
    recl.resolve_groups(["qrnn"], None, "cpu", None, {}, sets)  # the recipe it was trained with: used
    recl.resolve_groups(["qrnn"], None, "cpu", None, {}, [*sets, "train.max_steps=300"])  # its length is check_training's
    with pytest.raises(TxlabError) as refused:  # the preset's default since (1.7), or any other change of recipe
        recl.resolve_groups(["qrnn"], None, "cpu", None, {}, [f"models_root={tmp_path}"])
    assert f"{run} holds a qrnn run of another configuration (model.rnn_embed_init: 0.1 there, 1.7 now)" in str(refused.value)
    assert "name the run directory itself as a member" in str(refused.value)
