import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from txlab.cli import app
from txlab.drivers import ablate
from txlab.drivers.ablate import parse_shard, run_study, shard_runs
from txlab.drivers.ablate_study import load_study
from txlab.errors import TxlabError

runner = CliRunner()

TINY_PROFILE = """
profiles:
  cpu:
    size: tiny
    sets: [train.max_steps=4, train.eval_interval=4, train.eval_tokens=200, data.synthetic_tokens=20000, data.synthetic_eval_tokens=2000]
    eval_lens: [8, 48]
    eval_tokens: 400
    out: {out}
    figures: {figures}
"""


def write_study(tmp_path, body: str, profile: str = TINY_PROFILE) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(textwrap.dedent(body) + profile.format(out=tmp_path / "results", figures=tmp_path / "figures"))
    return str(path)


TABLE = """
name: demo
base: {preset: xl128m}
rows:
  - {remark: XL, recurrence: true, encoding: ours, loss: full}
  - {recurrence: false, encoding: shaw, loss: half}
  - {id: vanilla, preset: transformer128m, eval_lens: [8]}
seeds: [0, 1]
"""


def test_expansion_run_ids_and_configs_golden(tmp_path):
    study = load_study(write_study(tmp_path, TABLE))
    assert [r.run_id for r in study.runs] == [
        "recur-ours-full-s0", "recur-ours-full-s1", "norecur-shaw-half-s0", "norecur-shaw-half-s1", "vanilla-s0", "vanilla-s1",
    ]
    first, shaw, vanilla = study.runs[0], study.runs[2], study.runs[4]
    assert (first.config.model.mem_len, first.config.model.pos_enc, first.config.train.loss) == (16, "ours", "full")
    assert (shaw.config.model.mem_len, shaw.config.eval.mem_len, shaw.config.model.pos_enc, shaw.config.train.loss) == (0, 0, "shaw", "half")
    assert [r.config.train.seed for r in study.runs[:2]] == [0, 1]
    assert first.config.train.max_steps == 4 and first.config.name == "recur-ours-full-s0"
    # the training attention length (tgt + mem) is always scored; the fixed window caps the vanilla model's
    assert (first.init_len, first.eval_lens) == (32, (8, 32, 48))
    assert (shaw.init_len, shaw.eval_lens) == (16, (8, 16, 48))
    assert vanilla.config.model.family == "vanilla" and (vanilla.init_len, vanilla.eval_lens) == (128, (8, 128))
    assert first.directory == tmp_path / "results" / "demo-cpu" / "runs" / "recur-ours-full-s0"


def test_grid_axes_cross_every_row_with_readable_ids(tmp_path):
    body = """
    name: grid
    base: {preset: xl128m}
    rows:
      - {recurrence: true}
      - {id: short, set: {model.tgt_len: 8}}
    grid:
      loss: [full, half]
      train.lr: [0.001, 0.003]
    """
    study = load_study(write_study(tmp_path, body))
    ids = [r.run_id for r in study.runs]
    assert ids[:4] == ["recur-full-lr0.001-s0", "recur-full-lr0.003-s0", "recur-half-lr0.001-s0", "recur-half-lr0.003-s0"]
    assert len(ids) == 8 and ids[4] == "short-full-lr0.001-s0"
    assert study.runs[7].config.model.tgt_len == 8 and study.runs[7].config.train.lr == 0.003


def test_row_sets_change_one_row_of_one_profile(tmp_path):
    profile = TINY_PROFILE.replace("eval_lens: [8, 48]", 'eval_lens: [8]\n    row_sets: ["big:model.n_layer=3"]')
    study = load_study(write_study(tmp_path, "name: x\nbase: {preset: xl128m}\nrows:\n  - {id: big}\n  - {id: small}\n", profile))
    assert [r.config.model.n_layer for r in study.runs] == [3, 2]


def test_row_seeds_give_single_rows_of_one_profile_their_own_seeds(tmp_path):
    profile = TINY_PROFILE.replace("eval_lens: [8, 48]", 'eval_lens: [8]\n    row_seeds: ["vanilla:0", "norecur-shaw-half:1,3"]')
    study = load_study(write_study(tmp_path, TABLE, profile))
    assert [r.run_id for r in study.runs] == [
        "recur-ours-full-s0", "recur-ours-full-s1", "norecur-shaw-half-s1", "norecur-shaw-half-s3", "vanilla-s0",
    ]
    assert [r.config.train.seed for r in study.runs] == [0, 1, 1, 3, 0]
    for bad, message in (('["vanilla"]', "must look like"), ('["vanilla:0,0"]', "distinct"), ('["vanila:0"]', "Did you mean 'vanilla'"),
                         ('["vanilla:x"]', "must look like"), ('["vanilla:0", "vanilla:1"]', "listed twice")):
        broken = TINY_PROFILE.replace("eval_lens: [8, 48]", f"eval_lens: [8]\n    row_seeds: {bad}")
        with pytest.raises(TxlabError, match=message):
            load_study(write_study(tmp_path, TABLE, broken))


@pytest.mark.parametrize(
    "body, message",
    [
        ("name: x\nbase: {preset: xl128m, set: {model.mem_len: 0}}\nrows:\n  - {recurrence: true}\n",
         r"study.yaml:4: recurrence: true, but model.mem_len is 0"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {recurrence: false, set: {model.mem_len: 64}}\n",
         r"study.yaml:4: recurrence: false contradicts set model.mem_len=64"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {encoding: shaw, set: [model.pos_enc=ours]}\n",
         r"encoding: 'shaw' contradicts set model.pos_enc='ours'"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {recurence: true}\n", r"Did you mean 'recurrence'"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {set: {model.d_modle: 3}}\n", r"study.yaml:4: unknown config key 'model.d_modle'"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {encoding: relative}\n", r"must be one of"),
        ("name: x\nbase: {preset: xl182m}\n", r"xl128m"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {id: a}\n  - {id: a}\n", r"same id 'a'"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {preset: transformer128m}\n",
         r"fixed-window model \(128 tokens\) and cannot be evaluated at attention length \d+"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {fit: model.tgt_len}\n", r"fit needs the study's memory_budget"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {}\nmemory_budget: nosuchrow\n", r"memory_budget row"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - {eval_lens: [0, 4]}\n", r"lengths must be >= 1"),
        ("name: x\nbase: {preset: xl128m}\ncolums: []\n", r"unknown key 'colums'"),
        ("name: x\nbase: {preset: xl128m}\ncolumns: [remark, ppl]\n", r"column"),
        ("name: x\nbase: {preset: xl128m}\nrows: [{a: 1}\n", r"YAML error at .*study.yaml:\d+:\d+"),
        ("name: x\nbase: {preset: xl128m}\nrows:\n  - xl\n", r"study.yaml:4: row must be a mapping with keys among id, remark"),
        ("name: x\nbase: {preset: xl128m}\ncolumns: [{remark: R, ppl_best: P}]\n", r"a column given as a mapping names one column"),
        ("name: x\nbase: {preset: xl128m}\ngrid: {loss: []}\n", r"grid axis 'loss' has no values"),
    ],
)
def test_bad_studies_fail_before_any_run_with_a_clear_message(tmp_path, body, message):
    if "fixed-window" in message:  # evaluation lengths beyond the vanilla window of 128
        path = write_study(tmp_path, body, TINY_PROFILE.replace("[8, 48]", "[8, 500]"))
    else:
        path = write_study(tmp_path, body)
    with pytest.raises(TxlabError, match=message):
        load_study(path)
    assert not (tmp_path / "results").exists()


def test_unknown_profile_names_the_valid_ones(tmp_path):
    with pytest.raises(TxlabError, match="cpu"):
        load_study(write_study(tmp_path, TABLE), profile="gpu")


def test_shards_partition_the_runs_exactly_once(tmp_path):
    runs = load_study(write_study(tmp_path, TABLE)).runs
    for count in range(1, 8):
        parts = [shard_runs(runs, i, count) for i in range(1, count + 1)]
        ids = [r.run_id for part in parts for r in part]
        assert sorted(ids) == sorted(r.run_id for r in runs) and len(ids) == len(set(ids))
    assert [r.run_id for r in shard_runs(runs, 2, 4)] == ["recur-ours-full-s1", "vanilla-s1"]
    assert parse_shard("2/4") == (2, 4) and parse_shard(None) == (1, 1)
    for bad in ("0/4", "5/4", "2", "a/b"):
        with pytest.raises(TxlabError, match="--shard"):
            parse_shard(bad)


def test_seeds_keep_some_training_seeds_before_the_shards_split_them(tmp_path):
    path = write_study(tmp_path, TABLE)
    study = load_study(path)
    assert [r.run_id for r in ablate.runs_of_seeds(study, [1])] == ["recur-ours-full-s1", "norecur-shaw-half-s1", "vanilla-s1"]
    assert ablate.runs_of_seeds(study, None) == study.runs
    with pytest.raises(TxlabError, match="--seeds 7: the profile 'cpu' trains seeds 0,1"):
        ablate.runs_of_seeds(study, [0, 7])
    # on the command line: the plan lists this seed's runs, split by the shard after the seeds are kept
    result = runner.invoke(app, ["ablate", path, "--seeds", "1", "--shard", "2/2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "1 of 6 runs, shard 2/2" in result.output and "norecur-shaw-half-s1" in result.output
    assert "recur-ours-full-s1" not in result.output.replace("norecur-ours-full", "")
    bad = runner.invoke(app, ["ablate", path, "--seeds", "one", "--dry-run"])
    assert bad.exit_code != 0 and "--seeds takes comma-separated integers" in bad.output


def test_dry_run_lists_runs_and_starts_nothing(tmp_path):
    lines = []
    result = run_study(write_study(tmp_path, TABLE), dry_run=True, announce=lines.append, echo=lines.append)
    text = "\n".join(lines)
    assert "profile 'cpu'" in text and "estimated time" in text
    assert all(r in text for r in ("recur-ours-full-s0", "vanilla-s1")) and text.count(" new") == 6
    assert [cost.params > 0 for cost in result.costs] == [True] * 6
    assert not (tmp_path / "results").exists()


# figures laid out, not rendered: tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_tiny_study_end_to_end_then_resume_skips_every_finished_stage(tmp_path, monkeypatch, figure_files_only):
    path = write_study(tmp_path, TABLE)
    result = runner.invoke(app, ["ablate", path, "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "results" / "demo-cpu"
    rows = json.loads(result.output.strip().splitlines()[-1])["rows"]
    assert [r["row_id"] for r in rows] == ["recur-ours-full", "norecur-shaw-half", "vanilla"]
    assert all(r["seeds"] == 2 for r in rows)
    # the table's numbers are the mean of what the runs scored
    curves = pd.read_csv(out / "curves.csv")
    first = curves[curves["row_id"] == "recur-ours-full"]
    assert rows[0]["ppl_init"] == pytest.approx(first[first["attn_len"] == 32]["value"].mean())
    assert rows[0]["ppl_best"] == pytest.approx(first.groupby("attn_len")["value"].mean().min())
    record = json.loads((out / "runs" / "vanilla-s1" / "ablate" / "attn8-valid-n400.json").read_text())
    assert record["tgt_len"] == 8 and record["mem_len"] == 0 and record["tokens"] == 400
    record = json.loads((out / "runs" / "norecur-shaw-half-s0" / "ablate" / "attn48-valid-n400.json").read_text())
    assert record["mem_len"] == 48 and record["same_length"] is True
    for name in ("table.csv", "table.md", "table.tex", "curves.csv", "study.yaml"):
        assert (out / name).is_file()
    assert (tmp_path / "figures" / "demo-cpu" / "ppl-vs-attn-len.png").is_file()
    assert "| XL | ✓ | Ours | Full |" in (out / "table.md").read_text()

    # a rerun finds every stage done; a lost evaluation is the only thing redone
    (out / "runs" / "vanilla-s0" / "ablate" / "attn128-valid-n400.json").unlink()
    calls = []
    monkeypatch.setattr(ablate, "train", lambda *a, **k: pytest.fail("a finished run was trained again"))
    real_evaluate = ablate.evaluate_run
    monkeypatch.setattr(ablate, "evaluate_run", lambda run_dir, settings, **kw: calls.append((run_dir.name, settings.tgt_len)) or real_evaluate(run_dir, settings, **kw))
    again = run_study(path, progress=False, announce=lambda m: None, echo=lambda m: None)
    assert calls == [("vanilla-s0", 128)]
    assert [r.best.mean for r in again.table.rows] == pytest.approx([r["ppl_best"] for r in rows])

    # committed results keep records, not checkpoints: a complete run without its checkpoint is
    # still done, one with a length unscored trains again from scratch (its old scores are stale)
    import shutil

    for run_dir in (out / "runs").iterdir():
        shutil.rmtree(run_dir / "checkpoint")
    (out / "runs" / "vanilla-s1" / "ablate" / "attn8-valid-n400.json").unlink()
    lines = []
    run_study(path, dry_run=True, announce=lines.append, echo=lines.append)
    status = {line.split()[0]: line.split()[-1] for line in "\n".join(lines).splitlines() if line.endswith(("done", "new"))}
    assert status == {**{r: "done" for r in status if r != "vanilla-s1"}, "vanilla-s1": "new"} and len(status) == 6
    from txlab.runs.train import train as real_train

    trained = []
    monkeypatch.setattr(ablate, "train", lambda cfg, d, **kw: trained.append(cfg.name) or real_train(cfg, d, **kw))
    calls.clear()
    run_study(path, progress=False, announce=lambda m: None, echo=lambda m: None)
    assert trained == ["vanilla-s1"] and sorted(calls) == [("vanilla-s1", 8), ("vanilla-s1", 128)]


# figures laid out, not rendered: tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_interrupted_training_resumes_and_a_changed_study_is_refused(tmp_path, monkeypatch, figure_files_only):
    path = write_study(tmp_path, "name: one\nbase: {preset: xl128m}\nrows:\n  - {id: a}\n", TINY_PROFILE.replace("eval_interval=4", "eval_interval=2"))
    study = load_study(path)
    run = study.runs[0]
    # a run killed after its checkpoint at step 2 of 4 (the kill lands as step 4 is being reported)
    from txlab.runs.train import train

    def killed_at_step_4(message):
        if message.startswith("step 4"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(run.config, run.directory, progress=False, echo=killed_at_step_4)
    resumed = []
    real_train = ablate.train
    monkeypatch.setattr(ablate, "train", lambda cfg, d, **kw: resumed.append(cfg.train.max_steps) or real_train(cfg, d, **kw))
    lines = []
    run_study(path, progress=False, announce=lines.append, echo=lines.append)
    assert resumed == [4] and any("resumes at step 2" in line for line in lines)
    steps = [json.loads(line)["step"] for line in (run.directory / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 4

    changed = write_study(tmp_path, "name: one\nbase: {preset: xl128m}\nrows:\n  - {id: a, set: {model.d_inner: 48}}\n",
                          TINY_PROFILE.replace("eval_interval=4", "eval_interval=2"))
    with pytest.raises(TxlabError, match="another configuration"):
        run_study(changed, progress=False, announce=lambda m: None, echo=lambda m: None)


FIT_STUDY = """
name: {name}
base: {{preset: xl128m}}
rows:
  - {{id: recur, recurrence: true, set: {{model.mem_len: 64}}}}
  - {{id: norecur, recurrence: false, fit: model.tgt_len}}
memory_budget: recur
columns: [row, backprop_len, train_tokens, ppl_init]
"""
"""A recurrent budget row (16 tokens, 64 of memory) and a row without memory fitted to it."""


def fit_study(tmp_path, monkeypatch, name: str, profile: str = "") -> str:
    """FIT_STUDY under a stand-in memory model where attention dominates, bytes ~ tgt_len x (tgt_len + mem_len):
    the budget is 16 x (16 + 64) = 1280, and without memory t x t <= 1280 holds up to t = 35, in steps of 2: 34."""
    monkeypatch.setattr(ablate, "training_memory", lambda cfg, n_token, device: cfg.model.tgt_len * (cfg.model.tgt_len + cfg.model.mem_len))
    return write_study(tmp_path, FIT_STUDY.format(name=name), TINY_PROFILE.replace("eval_lens: [8, 48]", "eval_lens: [8]\n    fit_step: 2") + profile)


# figures laid out, not rendered: tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_fit_rows_get_the_longest_segment_within_the_budget_row(tmp_path, monkeypatch, figure_files_only):
    result = run_study(fit_study(tmp_path, monkeypatch, "budget"), progress=False, announce=lambda m: None, echo=lambda m: None)
    fit = json.loads((tmp_path / "results" / "budget-cpu" / "runs" / "norecur-s0" / "fit.json").read_text())
    assert fit["key"] == "model.tgt_len" and fit["bytes"] <= fit["budget_bytes"]
    assert (fit["value"], fit["bytes"], fit["budget_bytes"]) == (34, 34 * 34, 1280)
    saved = yaml.safe_load((tmp_path / "results" / "budget-cpu" / "runs" / "norecur-s0" / "config.yaml").read_text())
    assert saved["model"]["tgt_len"] == fit["value"]
    assert [r.backprop_len for r in result.table.rows] == [16, fit["value"]]
    # PPL init is at the fitted training length; the budget row shows the budget itself
    row = json.loads((tmp_path / "results" / "budget-cpu" / "runs" / "norecur-s0" / "ablate" / "row.json").read_text())
    assert row["init_len"] == 34 and row["eval_lens"] == [8, 34]
    assert [r.init_len for r in result.table.rows] == [80, 34]
    assert [r.train_memory * 2**20 for r in result.table.rows] == [1280, 34 * 34]


# figures laid out, not rendered: tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_fit_equal_tokens_gives_a_fitted_row_the_budget_rows_training_tokens_and_it_resumes_as_done(tmp_path, monkeypatch, figure_files_only):
    path = fit_study(tmp_path, monkeypatch, "tokens", "    fit_equal_tokens: true\n")
    Path(path).write_text(Path(path).read_text().replace("train.max_steps=4", "train.max_steps=6"))
    result = run_study(path, progress=False, announce=lambda m: None, echo=lambda m: None)
    saved = yaml.safe_load((tmp_path / "results" / "tokens-cpu" / "runs" / "norecur-s0" / "config.yaml").read_text())
    # the budget row reads 6 steps x 16 tokens a stream; the fitted 34-token segment reads as many in 6 x 16 / 34 = 2.8: 3 steps
    assert (saved["model"]["tgt_len"], saved["train"]["max_steps"]) == (34, 3)
    streams = saved["train"]["batch_size"]
    assert [r.train_tokens for r in result.table.rows] == [6 * 16 * streams, 3 * 34 * streams]
    assert f"| {6 * 16 * streams / 1e6:.2f}M |" in (tmp_path / "results" / "tokens-cpu" / "table.md").read_text()
    # accumulating gradients splits the streams of a step into micro-batches: it reads no more tokens
    budget_row, fitted_row = load_study(path).runs
    accumulated = ablate.update_dataclass(fitted_row.config, {"train": {"grad_accum": 2}, "model": {"tgt_len": 34}})
    assert ablate.equal_token_steps(budget_row.config, accumulated) == 3
    # the fitted run's fewer steps are its own: a second pass finds it done, not a run to resume
    assert ablate.run_status(load_study(path).runs[1], load_study(path).settings) == "done"


def test_fit_equal_tokens_needs_a_budget_row(tmp_path):
    body = "name: x\nbase: {preset: xl128m}\nrows:\n  - {fit: model.tgt_len}\nmemory_budget: 80\n"
    with pytest.raises(TxlabError, match="fit_equal_tokens, which needs memory_budget to name a row"):
        load_study(write_study(tmp_path, body, TINY_PROFILE + "    fit_equal_tokens: true\n"))


def test_set_that_changes_the_runs_gets_its_own_folders_and_the_plan_names_a_changed_run(tmp_path):
    path = write_study(tmp_path, "name: one\nbase: {preset: xl128m}\nrows:\n  - {id: a}\n")
    assert load_study(path).out_dir == tmp_path / "results" / "one-cpu"
    assert load_study(path, sets=["threads=2", "slurm.partition=gpu"]).out_dir == tmp_path / "results" / "one-cpu"  # where it runs only
    other = load_study(path, sets=["size=cpu"])
    assert other.out_dir == tmp_path / "results" / "one-cpu-size-cpu" and other.fig_dir == tmp_path / "figures" / "one-cpu-size-cpu"
    # a folder that holds another configuration is named in the dry run, not found after the others trained
    study = load_study(path)
    run = study.runs[0]
    run.directory.mkdir(parents=True)
    (run.directory / "config.yaml").write_text(yaml.safe_dump({**yaml.safe_load(yaml.safe_dump(ablate.to_dict(run.config))), "model": {
        **ablate.to_dict(run.config)["model"], "d_inner": 999}}))
    assert ablate.run_status(run, study.settings) == "another configuration in its folder: the run refuses it"


@pytest.mark.parametrize("study", ["table6", "table7", "table10"])
def test_every_ablation_study_has_a_tiny_profile_of_seconds(study):
    tiny = load_study(f"studies/{study}.yaml", "tiny")
    assert tiny.settings.size == "tiny" and all(run.config.train.max_steps == 20 for run in tiny.runs) and tiny.out_dir.name == f"{study}-tiny"


def test_a_list_setting_given_a_bare_value_shows_the_brackets():
    result = runner.invoke(app, ["ablate", "studies/table6.yaml", "--profile", "tiny", "--set", "seeds=0", "--dry-run"])
    assert result.exit_code == 2 and "expects a list, got 0: write it in brackets, e.g. --set seeds=[0]" in result.output
