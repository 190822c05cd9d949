"""The two homes: a user's commands write under the workspace home (runs/, $TXLAB_HOME or --home),
never into the committed results/ and figures/ of the current directory; a run directory holding
another run is never trained over."""

TINY = ["--size", "tiny", "--set", "train.max_steps=4", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
        "--set", "data.synthetic_eval_tokens=600"]


# figures laid out, not rendered (where they land is the subject): tests/test_attention.py, tests/test_curves.py and
# tests/test_speed.py render them
def test_default_outputs_land_under_runs_and_nothing_under_the_evidence_folders(tmp_path, monkeypatch, cli, figure_files_only):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TXLAB_HOME")
    cli.ok("train", "xl151m", *TINY, "--quiet")
    run = tmp_path / "runs" / "results" / "models" / "xl151m-tiny-synthetic-small-4steps"  # a trial run: 4 of the recipe's 20 steps
    assert (run / "checkpoint" / "model.safetensors").is_file() and (run / "metrics.jsonl").is_file()
    written = cli.ok("curves", run.relative_to(tmp_path), "--json")
    assert cli.last_json(written.output)["table"] == f"runs/figures/train/{run.name}.csv"  # named by the runs it draws
    cli.ok("attention", run.relative_to(tmp_path), "--tokens", "50", "--quiet")
    assert (tmp_path / "runs" / "figures" / "attention" / run.name / "figure5.png").is_file()
    recorded = (tmp_path / "runs" / "figures" / "attention" / run.name / "attention.json").read_text()
    assert f'"command": "txlab attention {run.relative_to(tmp_path)} ' in recorded
    cli.ok("speed", "--size", "tiny", "--attn-len", "8", "--set", "budget_s=0", "--set", "repeats=1", "--set", "warmup=0", "--threads", "1", "--quiet")
    stem = "table9-tiny-1thread"  # named by what the command line changed
    assert (tmp_path / "runs" / "results" / "speed" / f"{stem}.csv").is_file() and (tmp_path / "runs" / "figures" / "speed" / f"{stem}.png").is_file()
    assert "Produced by `txlab speed --attn-len 8 --size tiny" in (tmp_path / "runs" / "results" / "speed" / f"{stem}.md").read_text()
    # the user's own runs are what `txlab models` and `txlab runs` report
    models = {(r["name"], r["size"]): r for r in cli.last_json(cli.ok("models", "--size", "tiny", "--json").output)["models"]}
    assert not models["xl151m", "tiny"]["trained"] and not models["qrnn", "tiny"]["trained"]  # the trial is not the recipe's run
    assert [r["run_dir"] for r in cli.last_json(cli.ok("runs", "--json").output)["runs"]] == [str(run.relative_to(tmp_path))]
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_home_option_beats_the_environment_which_beats_runs(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)

    def models_root(*home_option):
        rows = cli.last_json(cli.ok(*home_option, "models", "--size", "tiny", "--json").output)["models"]
        return rows[0]["run_dir"].removesuffix("/xl151m-tiny-synthetic-small")

    monkeypatch.delenv("TXLAB_HOME")
    assert models_root() == "runs/results/models"
    monkeypatch.setenv("TXLAB_HOME", str(tmp_path / "env-home"))
    assert models_root() == f"{tmp_path}/env-home/results/models"
    assert models_root("--home", "flag-home") == "flag-home/results/models"
    # --home . is the repository's layout: its committed models root
    assert models_root("--home", ".") == "results/models"
    assert "--home" in cli("--help").output

    # what a table records of its command names the home it was written to, unless the default
    from txlab.measure.speed import SpeedSettings, command_line

    monkeypatch.setenv("TXLAB_HOME", ".")
    assert command_line([8], SpeedSettings(), "table9") == "txlab --home . speed --attn-len 8"
    monkeypatch.setenv("TXLAB_HOME", "runs")
    assert command_line([8], SpeedSettings(), "table9") == "txlab speed --attn-len 8"


def test_study_paths_resolve_under_the_home_and_command_line_paths_as_given(tmp_path, monkeypatch):
    from txlab.drivers.ablate_study import load_study
    from txlab.drivers.recl.groups import resolve_groups

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TXLAB_HOME", "elsewhere")
    study = tmp_path / "study.yaml"
    study.write_text("name: demo\nbase: {preset: xl128m}\nrows:\n  - {id: a}\nprofiles:\n  cpu: {size: tiny}\n")
    loaded = load_study(study, "cpu")
    assert (loaded.out_dir.as_posix(), loaded.fig_dir.as_posix()) == ("elsewhere/results/ablate/demo-cpu", "elsewhere/figures/ablate/demo-cpu")
    assert load_study(study, "cpu", ["out=mine"]).out_dir.as_posix() == "mine/demo-cpu"
    assert resolve_groups(["lstm"], None, "cpu", None)[0].settings.models_root == "elsewhere/results/models"
    assert resolve_groups(["lstm"], None, "cpu", None, {"models_root": "given"})[0].settings.models_root == "given"


def test_a_run_directory_holding_another_run_is_never_trained_over(tmp_path, cli):
    run = tmp_path / "run"
    cli.ok("train", "xl151m", *TINY, "--run-dir", run, "--quiet")
    before = (run / "metrics.jsonl").read_text()
    message = cli.refused("train", "xl151m", *TINY, "--set", "train.lr=0.01", "--set", "model.dropout=0.2", "--run-dir", run, "--quiet")
    assert "another configuration (model.dropout: 0.0 there, 0.2 now; train.lr: 0.003 there, 0.01 now)" in message
    assert "--run-dir" in message and "--restart" in message
    assert (run / "metrics.jsonl").read_text() == before
    # a run's records without its checkpoint (as results are committed) are not replaced either
    for path in (run / "checkpoint").iterdir():
        path.unlink()
    (run / "checkpoint").rmdir()
    message = cli.refused("train", "xl151m", *TINY, "--run-dir", run, "--quiet")
    assert "holds a run's records (metrics.jsonl) but no checkpoint" in message and "--restart" in message
    assert (run / "metrics.jsonl").read_text() == before
    # asked for, it is replaced; a longer run of the same configuration resumes (with the schedule's warning)
    cli.ok("train", "xl151m", *TINY, "--set", "train.lr=0.01", "--run-dir", run, "--restart", "--quiet")
    assert "lr: 0.01" in (run / "config.yaml").read_text()
    longer = cli.ok("train", "xl151m", *TINY, "--set", "train.lr=0.01", "--set", "train.max_steps=6", "--run-dir", run)
    assert "resuming" in longer.stderr and "trained to step 6" in longer.output


def test_recorded_commands_name_the_home_they_wrote_to_unless_it_is_the_default(monkeypatch):
    from txlab.workspace import command_prefix

    monkeypatch.setenv("TXLAB_HOME", ".")
    assert command_prefix() == "txlab --home ."
    monkeypatch.setenv("TXLAB_HOME", "elsewhere/home")
    assert command_prefix() == "txlab --home elsewhere/home"
    monkeypatch.delenv("TXLAB_HOME")
    assert command_prefix() == "txlab"
