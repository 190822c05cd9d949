"""Learning curves from run directories' metrics logs (txlab.analysis.curves), and run labels."""

import json
import math

import pandas as pd
import pytest

from txlab.analysis.curves import learning_curves
from txlab.analysis.run_logs import run_label
from txlab.errors import TxlabError


def fake_run(root, name, losses, corpus="synthetic"):
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(f"preset: {name}\nsize: cpu\ndata:\n  corpus: {corpus}\n")
    lines = []
    for i, loss in enumerate(losses, start=1):
        lines.append({"step": 10 * i, "split": "train", "loss": loss + 0.1, "tokens": 1000 * i, "elapsed_s": 6.0 * i})
        lines.append({"step": 10 * i, "split": "valid", "loss": loss, "ppl": 2.0, "tokens": 50, "tokens_seen": 1000 * i, "elapsed_s": 6.0 * i})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_learning_curves_write_figure_and_the_plotted_points(tmp_path):
    runs = [fake_run(tmp_path, "xl", [5.0, 4.0, 3.5]), fake_run(tmp_path, "qrnn", [5.5, 4.5])]
    out = learning_curves(runs, tmp_path / "fig" / "curves.png", title="demo")
    assert [p.suffix for p in out.figures] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in out.figures)
    points = pd.read_csv(out.table)
    valid, train = points[points["split"] == "valid"], points[points["split"] == "train"]
    assert list(valid["loss"]) == [5.0, 4.0, 3.5, 5.5, 4.5]
    assert list(valid["tokens_seen"]) == [1000, 2000, 3000, 1000, 2000]
    assert list(train["loss"]) == pytest.approx([5.1, 4.1, 3.6, 5.6, 4.6]) and list(train["tokens_seen"]) == [1000, 2000, 3000, 1000, 2000]
    assert set(points["label"]) == {"xl (cpu) on synthetic", "qrnn (cpu) on synthetic"}
    assert run_label(tmp_path / "missing") == "missing"


# figures laid out, not rendered: test_learning_curves_write_figure_and_the_plotted_points renders them
def test_learning_curves_read_bits_per_character_on_character_corpora(tmp_path, figure_files_only):
    runs = []
    for name, bpcs in (("a", [2.0, 1.5]), ("b", [2.2, 1.6])):
        run = fake_run(tmp_path, name, [1.4, 1.0], corpus="enwik8")
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        valid = [r for r in records if r["split"] == "valid"]
        for record, bpc in zip(valid, bpcs):
            record.pop("ppl")
            record["bpc"] = bpc
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(run)
    points = pd.read_csv(learning_curves(runs, tmp_path / "bpc.png").table)
    assert list(points.loc[points["split"] == "valid", "loss"]) == [2.0, 1.5, 2.2, 1.6]
    assert list(points.loc[points["split"] == "train", "loss"]) == pytest.approx([1.5 / math.log(2), 1.1 / math.log(2)] * 2)
    # a word-level run among them: every curve stays in nats
    mixed = pd.read_csv(learning_curves([*runs, fake_run(tmp_path, "w", [5.0])], tmp_path / "mixed.png").table)
    assert list(mixed.loc[mixed["split"] == "valid", "loss"]) == [1.4, 1.0, 1.4, 1.0, 5.0]


# figures laid out, not rendered: test_learning_curves_write_figure_and_the_plotted_points renders them
def test_learning_curves_draw_a_run_without_validation_from_its_training_loss(tmp_path, figure_files_only):
    early = fake_run(tmp_path, "early", [5.0])
    records = [json.loads(line) for line in (early / "metrics.jsonl").read_text().splitlines()]
    (early / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["split"] == "train"))
    points = pd.read_csv(learning_curves([fake_run(tmp_path, "xl", [5.0, 4.0]), early], tmp_path / "c.png").table)
    assert list(points.loc[points["run"] == "early", "split"]) == ["train"]
    (early / "metrics.jsonl").write_text("")
    with pytest.raises(TxlabError, match="no training or validation records yet"):
        learning_curves([early], tmp_path / "x.png")


def test_learning_curves_refuse_non_runs(tmp_path):
    with pytest.raises(TxlabError, match="no metrics.jsonl"):
        learning_curves([tmp_path], tmp_path / "x.png")
