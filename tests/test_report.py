import json
import subprocess
import sys

import pandas as pd
import pytest

from txlab.errors import TxlabError
from txlab.report import learning_curves, run_label


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
    assert [p.suffix for p in out["figures"]] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in out["figures"])
    points = pd.read_csv(out["table"])
    assert list(points["loss"]) == [5.0, 4.0, 3.5, 5.5, 4.5]
    assert list(points["tokens_seen"]) == [1000, 2000, 3000, 1000, 2000]
    assert set(points["label"]) == {"xl (cpu) on synthetic", "qrnn (cpu) on synthetic"}
    assert run_label(tmp_path / "missing") == "missing"


def test_learning_curves_refuse_non_runs(tmp_path):
    with pytest.raises(TxlabError, match="no metrics.jsonl"):
        learning_curves([tmp_path], tmp_path / "x.png")


def test_report_does_not_import_torch():
    code = "import sys, txlab.report; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
