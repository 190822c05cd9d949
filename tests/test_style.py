"""One look for every figure: the shared theme applies while a figure is drawn and saved and is undone
after it; seed bands are t-intervals written beside the figure."""

import json
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import seaborn as sns

from txlab.analysis import ablation, curves, recl_figures, roles, table9
from txlab.analysis.figures import FigureFiles, mean_intervals
from txlab.analysis.run_logs import seed_group_labels
from txlab.measure import attention
from txlab.style import PALETTE, themed


def test_a_themed_figure_function_draws_with_the_palette_and_leaves_the_settings_as_they_were():
    before = plt.rcParams["axes.prop_cycle"]
    seen = {}

    @themed
    def draw():
        seen["colors"] = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        seen["grid"] = plt.rcParams["axes.grid"]

    draw()
    assert [tuple(c) for c in seen["colors"]] == [tuple(c) for c in sns.color_palette(PALETTE)] and seen["grid"]
    assert plt.rcParams["axes.prop_cycle"] == before


def test_every_figure_function_runs_under_the_theme():
    drawing = [curves.learning_curves, table9.table9_figure, recl_figures.figure3, recl_figures.figure4, recl_figures.seed_spread_figure,
               ablation.ablation_figure, roles.role_figure, roles.role_curves, attention.draw_attention_figures]
    assert [f.__qualname__ for f in drawing if getattr(f, "__wrapped__", None) is None] == []


def test_seed_intervals_are_t_intervals_of_the_mean():
    curves = pd.DataFrame({"row_id": ["a"] * 4, "attn_len": [8, 8, 8, 16], "seed": [0, 1, 2, 0], "value": [1.0, 2.0, 3.0, 5.0]})
    table = ablation.seed_intervals(curves).set_index("attn_len")
    half = 4.302652729911275 / math.sqrt(3)  # t(0.975, 2 degrees of freedom) * sd 1 / sqrt(3)
    assert table.loc[8, ["seeds", "mean"]].tolist() == [3, 2.0]
    assert table.loc[8, "ci_low"] == pytest.approx(2 - half) and table.loc[8, "ci_high"] == pytest.approx(2 + half)
    assert table.loc[16, "seeds"] == 1 and math.isnan(table.loc[16, "ci_low"])  # one seed: no interval


def test_the_ablation_figure_writes_its_plotted_points_beside_it(tmp_path):
    curves = pd.DataFrame({"row_id": ["a", "a", "b", "b"], "attn_len": [8, 16, 8, 16], "seed": [0, 0, 0, 0],
                           "value": [3.0, 2.5, 4.0, 3.5], "metric": ["ppl"] * 4})
    runs = pd.DataFrame({"row_id": ["a", "b"], "remark": ["XL", ""], "init_len": [16, 8]})
    written = ablation.ablation_figure(curves, runs, tmp_path / "ppl-vs-attn-len")
    assert [p.name for p in written] == ["ppl-vs-attn-len.png", "ppl-vs-attn-len.pdf", "ppl-vs-attn-len.csv"]
    points = pd.read_csv(written[-1])
    assert points[["row_id", "attn_len", "mean"]].values.tolist() == [["a", 8, 3.0], ["a", 16, 2.5], ["b", 8, 4.0], ["b", 16, 3.5]]


def test_learning_curves_of_seeds_of_one_configuration_share_a_line_with_an_interval(tmp_path):
    def run(name, seed, lr, losses):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.yaml").write_text(f"name: {name}\npreset: xl\nsize: cpu\ndata: {{corpus: synthetic}}\ntrain: {{seed: {seed}, lr: {lr}}}\n")
        records = [{"step": 10 * i, "split": "valid", "loss": loss, "tokens_seen": 100 * i, "elapsed_s": 5.0 * i}
                   for i, loss in enumerate(losses, start=1)]
        (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return directory

    runs = [run("a-s0", 0, 0.1, [3.0, 2.0]), run("a-s1", 1, 0.1, [4.0, 3.0]), run("a-s2", 2, 0.1, [5.0, 4.0]), run("b", 0, 0.2, [6.0, 5.0])]
    labels = seed_group_labels(runs)
    assert labels[:3] == ["xl (cpu) on synthetic [a-s0], 3 seeds"] * 3 and labels[3] == "xl (cpu) on synthetic [b]"
    written = curves.learning_curves(runs, tmp_path / "curves.png")
    assert pd.read_csv(written.table)["label"].tolist() == [labels[0]] * 6 + [labels[3]] * 2
    table = mean_intervals(pd.read_csv(written.table), ["label", "step"], "loss").set_index(["label", "step"])
    assert table.loc[(labels[0], 10), "mean"] == 4.0 and table.loc[(labels[0], 10), "ci_high"] == pytest.approx(4 + 4.302652729911275 / math.sqrt(3))


def test_ablation_labels_say_the_real_size_and_drop_a_remark_that_repeats_the_row():
    runs = pd.DataFrame({"row_id": ["recur-ours-full", "ours"], "remark": ["Transformer-XL (128M)", "Ours"], "params": [957968, 957968]})
    assert ablation.ablation_label(runs, "recur-ours-full") == "recur-ours-full: Transformer-XL (0.96M)"
    assert ablation.ablation_label(runs, "ours") == "ours (0.96M)"


def test_an_ablation_figure_with_one_row_far_above_the_rest_zooms_on_the_comparison_it_is_about(tmp_path, monkeypatch):
    # Table 6 on the recall family: Shaw 5.06 and ours 5.20 beside an absolute-position row at 120
    drawn = []
    monkeypatch.setattr(ablation, "save_figure_with_points", lambda fig, out, points: drawn.append(fig) or FigureFiles([out], out))
    means = {"ours": (6.0, 5.20), "shaw": (5.9, 5.06), "absolute": (60.0, 120.0)}
    curves = pd.DataFrame([{"row_id": row, "attn_len": length, "seed": seed, "value": value + 0.05 * (seed - 1), "metric": "ppl"}
                           for row, values in means.items() for length, value in zip((128, 256), values) for seed in range(3)])
    runs = pd.DataFrame({"row_id": list(means), "remark": [""] * 3, "init_len": [256, 256, 128]})
    ablation.ablation_figure(curves, runs, tmp_path / "zoomed")
    ablation.ablation_figure(curves[curves["row_id"] != "absolute"], runs, tmp_path / "plain")
    zoomed, plain = drawn
    low, high = zoomed.axes[1].get_ylim()
    assert zoomed.axes[0].get_yscale() == "log" and len(plain.axes) == 1 and plain.axes[0].get_yscale() == "linear"
    assert low < 5.06 and 5.20 < high and (5.20 - 5.06) / (high - low) > 0.05  # the difference fills more than 5% of the zoom
    plt.close("all")
