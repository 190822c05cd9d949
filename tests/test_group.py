"""`txlab recl` end to end on tiny models, its refusals, and the Table 8 writer."""

import json

import pytest
from typer.testing import CliRunner

from txlab.cli import app
from txlab.errors import TxlabError
from txlab.group import parse_grid
from txlab.report import table8_markdown

runner = CliRunner()

TINY_TRAINING = ["--set", "train.max_steps=2", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
                 "--set", "data.synthetic_eval_tokens=600"]
TINY_COLLECTION = ["--size", "tiny", "--grid", "2:8:2", "--blocks", "3", "--block-len", "20", "--boot", "10"]


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return tmp_path_factory.mktemp("recl")


def test_recl_trains_what_is_missing_then_reports_every_model_and_r(zoo):
    args = ["recl", "--group", "xl151m", "qrnn", "lstm", "--r", "0.1", "--r", "0.5,1", *TINY_COLLECTION, *TINY_TRAINING,
            "--models-root", str(zoo / "models"), "--out-dir", str(zoo / "results"), "--fig-dir", str(zoo / "figures"), "--placebo", "--json", "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("profile: command line | group xl151m+qrnn+lstm-tiny")
    doc = last_json(result.output)
    (group,) = doc["groups"]
    assert group["n_targets"] == 60 and group["grid"] == [2, 4, 6, 8]
    for model in ("xl151m", "qrnn", "lstm"):
        for r in ("0.1", "0.5", "1.0"):
            cell = group["recl"][model][r]
            assert {"recl", "ci_low", "ci_high", "censored", "label"} <= set(cell)
            assert cell["recl"] in (2, 4, 6, 8) and cell["ci_low"] <= cell["recl"] <= cell["ci_high"]
    assert "oracle (ground truth)" in group["recl"]  # synthetic corpus: the ideal model's RECL beside the models'
    name = "xl151m+qrnn+lstm-tiny"
    for path in ("table8.csv", "table8.md", "figure3.csv", "figure4.csv", "placebo.csv", "recl.json"):
        assert (zoo / "results" / name / path).is_file(), path
    for path in ("figure3.png", "figure3.pdf", "figure4.png", "figure4.pdf"):
        assert (zoo / "figures" / name / path).is_file(), path
    assert "| xl151m |" in (zoo / "results" / name / "table8.md").read_text()

    # Everything is found now: --no-train is satisfied and the losses are read back, not collected again.
    again = runner.invoke(app, [*args[:-2], "--no-train", "--json", "--quiet"])
    assert again.exit_code == 0, again.output
    assert last_json(again.output)["groups"][0]["recl"] == group["recl"]


def test_run_directories_that_read_different_token_streams_are_refused(zoo):
    runs = []
    for corpus in ("synthetic", "synthetic-short"):
        run = zoo / f"lstm-{corpus}"
        trained = runner.invoke(app, ["train", "lstm", "--size", "tiny", "--data", corpus, "--run-dir", str(run), "--quiet", *TINY_TRAINING])
        assert trained.exit_code == 0, trained.output
        runs.append(str(run))
    result = runner.invoke(app, ["recl", "--group", *runs, *TINY_COLLECTION, "--quiet"])
    assert result.exit_code == 2, result.output
    assert "token stream" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group", "xl15m", "qrnn"], "Did you mean 'xl151m'"),
        (["--group", "./no/such/run", "qrnn"], "no run directory ./no/such/run"),
        (["--group", "xl151m", "qrnn", "--no-train"], "not trained"),
        (["--group", "xl151m", "qrnn", "--r", "0.1", "0.5"], "give each r its own option"),
        (["--group", "xl151m", "--r", "1.5"], "r must lie in (0, 1]"),
        (["--group", "xl151m", "--grid", "100:50:10"], "at least two strictly ascending"),
        (["--study", "studies/table8.yaml", "--profile", "gpu"], "profile"),
        (["--study", "studies/table8.yaml", "xl-rnm"], "Did you mean 'xl-rnn'"),
    ],
)
def test_user_errors_exit_2_without_traceback(tmp_path, args, message):
    result = runner.invoke(app, ["recl", *args, "--size", "tiny", "--models-root", str(tmp_path), "--quiet"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_grid_specs():
    assert parse_grid("100:1000:100") == tuple(range(100, 1001, 100))
    assert parse_grid("16,32,64") == (16, 32, 64)
    with pytest.raises(TxlabError):
        parse_grid("a:b")


def test_table8_markdown_golden():
    rows = [
        {"model": "xl", "r": 0.1, "recl": 900, "censored": False, "label": "900", "ci_low": 800, "ci_high": 1000, "ci": 0.95, "censored_fraction": 0.01},
        {"model": "lstm", "r": 0.1, "recl": 400, "censored": False, "label": "400", "ci_low": 300, "ci_high": 500, "ci": 0.95, "censored_fraction": 0.0},
        {"model": "xl", "r": 0.5, "recl": 1000, "censored": True, "label": ">= 1000", "ci_low": 900, "ci_high": 1000, "ci": 0.95, "censored_fraction": 0.6},
        {"model": "lstm", "r": 0.5, "recl": 300, "censored": False, "label": "300", "ci_low": 300, "ci_high": 300, "ci": 0.95, "censored_fraction": 0.0},
        {"model": "oracle (ground truth)", "r": 0.1, "recl": 200, "censored": False, "label": "200"},
    ]
    assert table8_markdown(rows) == (
        "| model | r = 0.1 | r = 0.5 |\n"
        "|---|---|---|\n"
        "| xl | 900 [800, 1000] | >= 1000 [900, >= 1000] |\n"
        "| lstm | 400 [300, 500] | 300 [300, 300] |\n"
        "| oracle (ground truth) | 200 | - |\n"
    )
