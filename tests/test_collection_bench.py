"""benchmarks/collection.py, the collection benchmark, in its quick form: every model, grid and variant runs, the
two methods agree, and the token-steps counted are what txlab.measure.collection predicts."""

import importlib.util
from dataclasses import replace
from pathlib import Path

from txlab.measure.collection import Collection

ROOT = Path(__file__).resolve().parents[1]


def collection_bench():
    spec = importlib.util.spec_from_file_location("collection_bench", ROOT / "benchmarks" / "collection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quick_benchmark_times_every_variant_and_counts_its_token_steps(tmp_path):
    out = tmp_path / "bench" / "collection.md"
    result = collection_bench().main(["--quick", "--threads", "1", "--out", str(out)])
    assert out.is_file() and out.with_suffix(".json").is_file() and "python benchmarks/collection.py --quick" in out.read_text()
    rows = result["rows"]
    assert {r["variant"] for r in rows} == {"main window", "main per (c, t)", "main strided", "placebo windows", "placebo per (c, t)"}
    assert all(r["seconds"] > 0 for r in rows)
    assert all(r["max_abs_diff"] < 1e-4 for r in rows if r["variant"] != "main strided")  # the exact methods agree
    assert result["ceiling_before"] > 0 and result["ceiling_after"] > 0
    for r in rows:
        c = Collection("valid", tuple(r["grid"]), 1, r["targets"], placebo=True)
        if r["variant"] == "main per (c, t)":
            assert r["token_steps"] == replace(c, method="naive").token_steps()
        if r["variant"] == "main strided":
            assert r["token_steps"] == replace(c, stride=0.25, placebo=False).token_steps() and r["floor_token_steps"] is None
        if r["variant"] == "main window":  # the plan counts what is read, and that is the floor
            assert r["token_steps"] == replace(c, method="window").token_steps() == r["floor_token_steps"]
        if r["variant"] == "placebo windows":
            assert r["token_steps"] == c.placebo_token_steps() == r["floor_token_steps"]
