"""Figures 3 and 4 drawn again from a group's committed tables (txlab recl --redraw): nothing scores,
titles are in words and true to the members, character corpora read in bits per character, placebo gains get
their panel, each RECL its interval (the placebo-aware one first), each perplexity its band, and a model one
colour in every figure of a study."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from txlab.analysis import recl_figures
from txlab.analysis.figures import FigureFiles, ModelLegend, model_name
from txlab.cli import app
from txlab.drivers.recl import report as recl_driver
from txlab.drivers.recl import run as recl_run

runner = CliRunner()
RESULTS = Path(__file__).resolve().parents[1] / "results" / "recl"


def _kept_figures(monkeypatch) -> list:
    """Every figure recl_figures draws from now on, kept open instead of written."""
    figures = []
    monkeypatch.setattr(recl_figures, "save_figure_with_points", lambda fig, out, points: figures.append(fig) or
                        FigureFiles([Path(out)], Path(out).with_suffix(".csv")))
    return figures


def test_redraw_draws_both_figures_from_the_tables_and_scores_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(recl_run, "score_group", lambda *a, **k: pytest.fail("--redraw scored something"))
    group = "table8-xl-rnn-cpu-synthetic-small-short"
    result = runner.invoke(app, ["recl", "--redraw", str(RESULTS / group), "--fig-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (tmp_path / group).iterdir()} >= {"figure3.png", "figure3.pdf", "figure4.png", "figure4.pdf"}
    missing = runner.invoke(app, ["recl", "--redraw", str(tmp_path), "--fig-dir", str(tmp_path)])
    assert missing.exit_code == 2 and "no recl.json" in missing.output


def test_figure3_shows_the_placebo_panel_only_when_placebo_gains_were_written(tmp_path, monkeypatch):
    figures = _kept_figures(monkeypatch)
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"
    recl_figures.figure3(group / "figure3.csv", tmp_path / "with.png", intervals=group / "table8.csv", placebo=group / "placebo.csv")
    recl_figures.figure3(group / "figure3.csv", tmp_path / "without.png", intervals=group / "table8.csv", placebo=tmp_path / "none.csv")
    recl_figures.figure3(group / "figure3.csv", tmp_path / "bare.png", intervals=tmp_path / "none.csv", placebo=tmp_path / "none.csv")
    drawn = [len(fig.axes) for fig in figures]
    plt.close("all")
    assert drawn == [3, 2, 1]  # the gains, the RECL intervals under them, the placebo panel beside


def _recl_marks(ax) -> list[tuple[list, str, str]]:
    """(x values, marker, face colour) of every line of Figure 3's RECL panel, top row first."""
    return [(list(line.get_xdata()), line.get_marker(), str(line.get_markerfacecolor())) for line in ax.lines]


def test_figure3_draws_an_interval_that_leaves_its_reading_outside(tmp_path, monkeypatch):
    # a percentile bootstrap of a reading on a grid can miss the reading itself: xl151m's 240 with [40, 200]
    figures = _kept_figures(monkeypatch)
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"
    table = pd.read_csv(group / "table8.csv")
    table.loc[(table["model"] == "xl151m") & np.isclose(table["r"], 0.1), ["recl", "censored", "ci_low", "ci_high"]] = [240, False, 40, 200]
    table.to_csv(tmp_path / "table8.csv", index=False)
    recl_figures.figure3(group / "figure3.csv", tmp_path / "figure3.png", intervals=tmp_path / "table8.csv")
    marks = [(x, marker) for x, marker, _ in _recl_marks(figures[0].axes[1])]
    plt.close("all")
    assert ([40, 200], "|") in marks and ([240], ModelLegend().styles(["xl151m"])["xl151m"]["marker"]) in marks  # xl151m's marker


def test_figure3_gives_every_recl_its_interval_the_placebo_aware_one_first(tmp_path, monkeypatch):
    figures = _kept_figures(monkeypatch)
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"  # xl151m at r = 0.1: >= 240 [240, >= 240] †, placebo-aware 200 [160, 200]
    recl_figures.figure3(group / "figure3.csv", tmp_path / "figure3.png", intervals=group / "table8.csv", placebo=group / "placebo.csv")
    panel = figures[0].axes[1]
    rows = [tick.get_text() for tick in panel.get_yticklabels()]
    marks = _recl_marks(panel)
    plt.close("all")
    assert rows == [f"{name}: {estimate}" for name in ("Transformer-XL (xl151m)", "QRNN", "LSTM")
                    for estimate in ("placebo-aware", "paper's" + " \u2020" * (name != "QRNN"))]
    # xl151m: its placebo-aware interval and filled reading, then the paper's, dashed and open, with its censored high end
    marker = ModelLegend().styles(["xl151m"])["xl151m"]["marker"]
    assert marks[:2] == [([160.0, 200.0], "|", marks[0][2]), ([200.0], marker, marks[0][2])]
    assert ([240.0, 240.0], "|") == tuple(marks[2][:2]) and marks[4][:3] == ([240.0], marker, "white")


# figures laid out, not rendered: test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_a_character_corpus_is_drawn_in_bits_per_character_and_titled_in_words(tmp_path, figure_files_only):
    group = "table8-xl-rnn-cpu-tinyshakespeare"
    shutil.copytree(RESULTS / group, tmp_path / group)
    recl_driver.redraw_groups([tmp_path / group], tmp_path / "figures")
    points = pd.read_csv(tmp_path / "figures" / group / "figure4.csv")
    assert np.allclose(points["bpc"], np.log2(points["ppl"]))
    record = {"group": group, "members": ["xl151m", "qrnn", "lstm"], "settings": {"data": "tinyshakespeare", "size": "cpu"}}
    assert recl_driver.is_char_level(record) and recl_driver.corpus_in_words(record) == "Tiny Shakespeare"
    synthetic = {"group": "families-cpu-synthetic-small-short", "settings": {"data": ""}}
    assert not recl_driver.is_char_level(synthetic)
    assert recl_driver.corpus_in_words(synthetic).startswith("the synthetic corpus (small language")


def test_figure4_draws_each_perplexity_with_its_bootstrap_band(tmp_path, monkeypatch):
    figures = _kept_figures(monkeypatch)
    group = RESULTS / "table8-xl-rnn-cpu-synthetic-small-short"
    points = pd.read_csv(group / "figure4.csv")
    bounds = points.assign(ppl_low=points["ppl"] * 0.9, ppl_high=points["ppl"] * 1.1, ci=0.95).drop(columns="ppl")
    bounds.to_csv(tmp_path / recl_figures.FIGURE4_INTERVALS, index=False)
    drawn = recl_figures.figure4(group / "figure4.csv", tmp_path / "with.png", intervals=tmp_path / recl_figures.FIGURE4_INTERVALS)
    recl_figures.figure4(group / "figure4.csv", tmp_path / "without.png", intervals=tmp_path / "none.csv")
    bands = [len(fig.axes[0].collections) for fig in figures]
    plt.close("all")
    assert bands == [points["model"].nunique(), 0]  # one band per curve, the ideal model's included
    assert Path(drawn[-1]).name == "with.csv"


def test_a_model_keeps_its_colour_in_every_figure_of_a_study(tmp_path, monkeypatch):
    # two groups of one study: the second lacks xl151m, so by its own order qrnn would take xl151m's colour
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(RESULTS / "table8-xl-rnn-cpu-synthetic-small-short", first)
    shutil.copytree(first, second)
    for name in ("figure3.csv", "figure4.csv", "table8.csv", "placebo.csv"):
        frame = pd.read_csv(second / name)
        frame[frame["model"] != "xl151m"].to_csv(second / name, index=False)
    record = json.loads((second / "recl.json").read_text())
    record.update(members=["qrnn", "lstm"], rows=[row for row in record["rows"] if row["model"] != "xl151m"])
    (second / "recl.json").write_text(json.dumps(record))
    figures = _kept_figures(monkeypatch)
    recl_driver.redraw_groups([first, second], tmp_path / "figures")
    colours = [{line.get_label(): line.get_color() for line in fig.axes[0].lines} for fig in figures]
    plt.close("all")
    qrnn = model_name("qrnn")
    assert colours[0][qrnn] == colours[2][qrnn] != colours[0][model_name("xl151m")]  # figure 3 of each group
    assert colours[1][qrnn] == colours[3][qrnn]  # and figure 4
    legend = ModelLegend(order=("a", "b", "c"))
    assert legend.styles(["c"])["c"] == legend.styles(["b", "c"])["c"] != legend.styles(["a"])["a"]


def test_titles_name_the_text_and_say_a_size_only_for_preset_members():
    presets = {"group": "g", "members": ["xl151m", "qrnn"], "corpus": "tinyshakespeare", "settings": {"size": "cpu", "data": ""},
               "rows": [{"model": "xl151m"}, {"model": "qrnn"}]}
    assert recl_driver.group_in_words(presets) == "Transformer-XL and QRNN (cpu size) on Tiny Shakespeare"
    own = {"group": "mine", "members": ["hf:ckpt/gpt2-A", "runs/xl-run"], "settings": {"size": "cpu", "text": "notes.txt",
                                                                                      "labels": ["gpt2-A=lstm-like GPT-2"]},
           "rows": [{"model": "lstm-like GPT-2"}, {"model": "xl-run"}]}
    # a display name as the user gave it (not read as the lstm preset's), no size for a checkpoint or a run directory
    assert recl_driver.group_in_words(own) == "lstm-like GPT-2 and xl-run on own text notes.txt"
    assert recl_driver.figure_legend(own).names(["lstm-like GPT-2"]) == {"lstm-like GPT-2": "lstm-like GPT-2"} != model_name("lstm-like GPT-2")


def test_legend_names_say_the_architecture_not_only_the_preset_slug():
    assert model_name("qrnn") == "QRNN"
    assert model_name("xl128m-shaw") == "Transformer-XL, Shaw et al. encoding (xl128m-shaw)"
    assert model_name("gpt2-cpu-synthetic-small-short") == "GPT-2 (gpt2)"
    assert model_name("my-run") == "my-run"
    # runs of one preset read alike by architecture: each then keeps its label
    assert ModelLegend().names(["lstm-s0", "lstm-s1", "qrnn-s0"]) == {"lstm-s0": "LSTM (lstm-s0)", "lstm-s1": "LSTM (lstm-s1)", "qrnn-s0": "QRNN"}
