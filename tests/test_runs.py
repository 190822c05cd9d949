"""`txlab runs`: every run directory under a folder, from its records, with or without its checkpoint."""

import json

from typer.testing import CliRunner

from txlab.cli import app
from txlab.runs.zoo import list_runs

runner = CliRunner()


def fake_run(directory, preset, corpus, records, max_steps=100):
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(f"preset: {preset}\nsize: cpu\nmodel:\n  family: xl\ndata:\n  corpus: {corpus}\ntrain:\n  max_steps: {max_steps}\n")
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_runs_are_found_at_any_depth_from_their_records(tmp_path):
    fake_run(tmp_path / "models" / "a", "xl151m", "synthetic-small-short",
             [{"step": 50, "split": "train", "loss": 3.0}, {"step": 50, "split": "valid", "ppl": 20.0}, {"step": 100, "split": "train", "loss": 2.5},
              {"step": 100, "split": "valid", "ppl": 12.5}])
    fake_run(tmp_path / "ablate" / "t" / "runs" / "b-s0", "xl128m", "enwik8",
             [{"step": 30, "split": "train", "loss": 1.0}, {"step": 30, "split": "valid", "bpc": 1.25}])
    with open(tmp_path / "ablate" / "t" / "runs" / "b-s0" / "metrics.jsonl", "a") as log:
        log.write('{"step": 40, "spl')  # what a kill leaves: the torn line is skipped
    (tmp_path / "models" / "not-a-run").mkdir()
    (tmp_path / "models" / "not-a-run" / "config.yaml").write_text("preset: x\n")  # no metrics.jsonl: not a run

    rows = list_runs([tmp_path])
    assert [(r["preset"], r["corpus"], r["step"], r["max_steps"], r["valid_ppl"], r["valid_bpc"], r["checkpoint"]) for r in rows] == [
        ("xl128m", "enwik8", 30, 100, None, 1.25, False), ("xl151m", "synthetic-small-short", 100, 100, 12.5, None, False),
    ]
    result = runner.invoke(app, ["runs", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line.split() for line in result.output.splitlines()[1:3]}
    assert lines["xl151m"][4:8] == ["100/100", "ppl", "12.50", "no"] and lines["xl151m"][-1] == str(tmp_path / "models" / "a")
    assert lines["xl128m"][4:8] == ["30/100", "bpc", "1.250", "no"]
    assert len(json.loads(result.output.strip().splitlines()[-1])["runs"]) == 2


def test_runs_of_a_missing_folder_is_a_user_error(tmp_path):
    result = runner.invoke(app, ["runs", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "no folder" in result.output
