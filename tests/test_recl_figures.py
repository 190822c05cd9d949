"""Figures 3 and 4 drawn again from a group's committed tables (txlab recl --redraw): nothing scores,
titles are in words, character corpora read in bits per character, placebo gains get their panel."""

from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from txlab.analysis import recl_figures
from txlab.analysis.figures import FigureFiles, model_name
from txlab.cli import app
from txlab.drivers.recl import report as recl_driver
from txlab.drivers.recl import run as recl_run

runner = CliRunner()
RESULTS = Path(__file__).resolve().parents[1] / "results" / "recl"


def test_redraw_draws_both_figures_from_the_tables_and_scores_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(recl_run, "score_group", lambda *a, **k: pytest.fail("--redraw scored something"))
    group = "table8-xl-rnn-cpu-synthetic-small-short"
    result = runner.invoke(app, ["recl", "--redraw", str(RESULTS / group), "--fig-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / group).iterdir()} >= {"figure3.png", "figure3.pdf", "figure4.png", "figure4.pdf"}
    missing = runner.invoke(app, ["recl", "--redraw", str(tmp_path), "--fig-dir", str(tmp_path)])
    assert missing.exit_code == 2 and "no recl.json" in missing.output


def test_figure3_shows_the_placebo_panel_only_when_placebo_gains_were_written(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(recl_figures, "save_figure_with_points", lambda fig, out, points: drawn.append(len(fig.axes)) or
                        FigureFiles([Path(out)], Path(out).with_suffix(".csv")))
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"
    recl_figures.figure3(group / "figure3.csv", tmp_path / "with.png", intervals=group / "table8.csv", placebo=group / "placebo.csv")
    recl_figures.figure3(group / "figure3.csv", tmp_path / "without.png", intervals=group / "table8.csv", placebo=tmp_path / "none.csv")
    plt.close("all")
    assert drawn == [2, 1]


def test_figure3_draws_an_interval_that_leaves_its_reading_outside(tmp_path, monkeypatch):
    # a percentile bootstrap of a reading on a grid can miss the reading itself: xl151m's 240 with [40, 200]
    figures = []
    monkeypatch.setattr(recl_figures, "save_figure_with_points", lambda fig, out, points: figures.append(fig) or
                        FigureFiles([Path(out)], Path(out).with_suffix(".csv")))
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"
    table = pd.read_csv(group / "table8.csv")
    table.loc[(table["model"] == "xl151m") & np.isclose(table["r"], 0.1), ["recl", "censored", "ci_low", "ci_high"]] = [240, False, 40, 200]
    table.to_csv(tmp_path / "table8.csv", index=False)
    recl_figures.figure3(group / "figure3.csv", tmp_path / "figure3.png", intervals=tmp_path / "table8.csv")
    lines = [(list(line.get_xdata()), line.get_marker()) for line in figures[0].axes[0].lines]
    plt.close("all")
    assert ([40, 200], "|") in lines and ([240], "D") in lines


# figures laid out, not rendered: test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_a_character_corpus_is_drawn_in_bits_per_character_and_titled_in_words(tmp_path, figure_files_only):
    group = "table8-xl-rnn-cpu-tinyshakespeare"
    shutil.copytree(RESULTS / group, tmp_path / group)
    recl_driver.redraw_group(tmp_path / group, tmp_path / "figures")
    points = pd.read_csv(tmp_path / "figures" / group / "figure4.csv")
    assert np.allclose(points["bpc"], np.log2(points["ppl"]))
    record = {"group": group, "members": ["xl151m", "qrnn", "lstm"], "settings": {"data": "tinyshakespeare", "size": "cpu"}}
    assert recl_driver.is_char_level(record) and recl_driver.corpus_in_words(record) == "Tiny Shakespeare"
    synthetic = {"group": "families-cpu-synthetic-small-short", "settings": {"data": ""}}
    assert not recl_driver.is_char_level(synthetic)
    assert recl_driver.corpus_in_words(synthetic).startswith("the synthetic corpus (small language")


def test_legend_names_say_the_architecture_not_only_the_preset_slug():
    assert model_name("qrnn") == "QRNN"
    assert model_name("xl128m-shaw") == "Transformer-XL, Shaw et al. encoding (xl128m-shaw)"
    assert model_name("gpt2-cpu-synthetic-small-short") == "GPT-2 (gpt2)"
    assert model_name("my-run") == "my-run"
