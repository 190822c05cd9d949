"""`txlab roles`: scoring runs by token role, and drawing the figure again from the records scoring left."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from txlab.config import save_config
from txlab.drivers.roles import redraw_roles, score_roles
from txlab.errors import TxlabError
from txlab.runs.checkpoint import load_checkpoint, read_meta

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ("data.corpus=synthetic-small-short", "data.synthetic_tokens=3000", "data.synthetic_eval_tokens=2000")


@pytest.fixture
def scored_runs(tmp_path, untrained_run):
    """An XL and an LSTM run (their config.yaml written, as training does) scored live on 1,200 targets."""
    runs = []
    for preset in ("xl151m", "lstm"):
        run = untrained_run(tmp_path / preset, preset=preset, sets=CORPUS)
        save_config(load_checkpoint(run).config, run / "config.yaml")
        runs.append(run)
    live = score_roles(runs, tmp_path / "live" / "roles.png", max_tokens=1200, progress=False)
    return runs, live


def test_the_figure_from_records_is_the_figure_scoring_drew(tmp_path, scored_runs, request):
    runs, live = scored_runs  # scoring rendered the figure as PNG and PDF
    request.getfixturevalue("png_only")  # the redraw's PNG is compared byte for byte; its PDF is not the subject
    again = redraw_roles(runs, tmp_path / "again" / "roles.png", max_tokens=1200)
    assert again["table"].read_text() == live["table"].read_text()
    assert [p.read_bytes() for p in again["figures"] if p.suffix == ".png"] == [p.read_bytes() for p in live["figures"] if p.suffix == ".png"]
    # the numbers are the records', labelled with each model's real size
    xl, lstm = live["runs"]
    assert xl["label"] == f"Transformer-XL (xl151m), {read_meta(runs[0])['params'] / 1e3:.1f}k parameters"
    assert lstm["label"] == f"LSTM, {read_meta(runs[1])['params'] / 1e3:.1f}k parameters"
    # (as JSON: a copy bucket no copy of the first 1,200 targets falls in holds NaN, which equals nothing)
    assert json.dumps([run["by_role"] for run in again["runs"]]) == json.dumps([xl["by_role"], lstm["by_role"]])
    assert (xl["mem_len"], lstm["mem_len"], xl["tokens"]) == (32, 0, 1200)  # each at its own evaluation settings


# figures laid out, not rendered: test_the_figure_from_records_is_the_figure_scoring_drew renders them
def test_a_record_named_as_older_versions_named_it_is_read_too(tmp_path, figure_files_only, scored_runs):
    # older records left the batch size out of their name (the committed runs' valid-tgt64-...-same-n50000-roles.json)
    runs, live = scored_runs
    for run in runs:
        (record,) = (run / "eval").glob("*-roles.json")
        record.rename(record.with_name(record.name.replace("-b8-", "-")))
    again = redraw_roles(runs, tmp_path / "again" / "roles.png", max_tokens=1200)
    assert again["table"].read_text() == live["table"].read_text()


# figures laid out, not rendered: test_the_figure_from_records_is_the_figure_scoring_drew renders them
def test_records_of_other_targets_or_settings_are_not_drawn(tmp_path, figure_files_only, scored_runs, cli):
    runs, _ = scored_runs
    out = tmp_path / "again" / "roles.png"
    with pytest.raises(TxlabError, match=r"no per-role record of the whole valid split .* score it with `txlab roles`"):
        redraw_roles(runs, out)
    with pytest.raises(TxlabError, match="no per-role record of its first 1,200 test targets"):
        redraw_roles(runs, out, split="test", max_tokens=1200)
    (record,) = (runs[0] / "eval").glob("*-roles.json")
    scored_otherwise = json.loads(record.read_text()) | {"mem_len": 64}  # a record of another memory length
    record.write_text(json.dumps(scored_otherwise))
    with pytest.raises(TxlabError, match=r"1,200 valid targets at its evaluation settings \(segment 16, memory 32, batch 8\)"):
        redraw_roles(runs, out, max_tokens=1200)
    (lstm_record,) = (runs[1] / "eval").glob("*-roles.json")
    shutil.copy(lstm_record, lstm_record.with_name("valid-scored-again-n1200-roles.json"))
    output = cli.refused("roles", runs[1], "--max-tokens", 1200, "--from-records", "--out", out)
    assert "2 per-role records" in output and "delete all but the one to draw" in output


# figures laid out, not rendered: test_the_figure_from_records_is_the_figure_scoring_drew renders them
def test_the_title_says_the_models_their_size_the_corpus_and_the_targets(figure_files_only, scored_runs):
    _, live = scored_runs
    assert live["title"] == ("What each model learned, by token role: Transformer-XL and LSTM (tiny size)\n"
                             "on the synthetic corpus (small language, copies up to 200 tokens back), the first 1,200 validation targets")


def test_the_committed_figures_are_drawn_from_the_committed_records(tmp_path, monkeypatch):
    # results/models/README.md records the commands; drawing is left out (the CSV holds every plotted number)
    monkeypatch.setattr("txlab.analysis.figures.save_figure", lambda fig, path: [])
    models = ROOT / "results" / "models"
    for name, presets in [("table8-xl-rnn-cpu-synthetic-small-short", ("xl151m", "qrnn", "lstm")),
                          ("table8-xl-ablations-cpu-synthetic-small-short", ("xl128m", "xl128m-shaw", "xl128m-norecur", "transformer128m"))]:
        runs = [models / f"{preset}-cpu-synthetic-small-short" for preset in presets]
        drawn = redraw_roles(runs, tmp_path / f"{name}.png", max_tokens=50_000)
        assert drawn["table"].read_text() == (ROOT / "figures" / "roles" / f"{name}.csv").read_text(), name
