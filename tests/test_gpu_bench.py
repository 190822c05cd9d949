"""benchmarks/gpu.py, the GPU benchmark, in its tiny form on the CPU: every section runs and writes its numbers."""

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import sample_file

ROOT = Path(__file__).resolve().parents[1]


def gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def text(tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "text.txt"
    path.write_text(sample_file("tinyshakespeare/input.txt").read_text(encoding="utf-8")[:60_000], encoding="utf-8")
    return path


@pytest.mark.slow  # the collection benchmark's quick form (tests/test_collection_bench.py) keeps a benchmark script in the default run
def test_the_tiny_benchmark_measures_every_section_but_speed(tmp_path, text):
    written = gpu_bench().main(["--tiny", "--text", str(text), "--out", str(tmp_path / "out"), "--only", "ceiling", "train", "recl", "recl-llama", "compile"])
    results = json.loads(written.read_text())
    assert results["device"] == "cpu" and results["tiny"] and written.name.endswith("-cpu-tiny.json")
    assert results["ceiling"]["fp32_tflops"] > 0 and results["ceiling"]["bf16_tflops"] > 0
    assert {p: row["tokens_per_s"] > 0 for p, row in results["train"]["steps"].items()} == {"fp32": True, "bf16": True}
    rows = results["recl"]["rows"]
    # placebo losses read every target once more per grid step: the hook must count them on top of the main table's
    assert 0 < rows["main"]["token_steps"] < rows["main_and_placebo"]["token_steps"]
    assert rows["placebo_over_main_seconds"] > 0
    strided = results["recl"]["strided"]  # a tiny strided collection, run for real: fewer token-steps than exact contexts
    assert strided["seconds"] > 0 and 0 < strided["token_steps"] < strided["exact_window_token_steps"] and strided["stride"] == 16
    assert strided["prefix_change"] <= strided["prefix_tolerance"] == 2 * 2**-7  # a bf16 read, its rounding allowed for
    assert results["recl"]["tokens"] > 10_000  # the whole text, not its 5% valid split (too short for the paper's shapes)
    big = results["recl-llama"]  # the large Llama's section, at a tiny shape: a main table read and counted
    assert big["rows"]["main"]["token_steps"] > 0 and big["targets"] == 16 and 0 < big["rows"]["main"]["of_bf16_ceiling"]
    for kind, r in results["compile"].items():  # inductor on the CPU, in bf16: both variants read, losses a bf16 rounding apart
        if kind != "seconds":
            assert {name: len(rows) for name, rows in r["rounds"].items()} == {"as written": 2, "compiled": 2}, kind
            assert r["losses_apart"]["max"] < 0.05 and r["graphs"] > 0, (kind, r["losses_apart"], r["graphs"])
    assert "failed" not in written.with_suffix(".md").read_text()


@pytest.mark.slow
def test_the_tiny_benchmark_runs_table9_through_the_cli(tmp_path, text):
    written = gpu_bench().main(["--tiny", "--text", str(text), "--out", str(tmp_path), "--only", "speed"])
    results = json.loads(written.read_text())
    assert "error" not in results["speed"], results["speed"]
    assert (tmp_path / "table9-gpu.csv").is_file()


def test_the_profile_section_times_each_variant_in_alternation(tmp_path, text):
    module = gpu_bench()
    written = module.main(["--tiny", "--text", str(text), "--out", str(tmp_path), "--only", "profile"])
    profile = json.loads(written.read_text())["profile"]
    assert "error" not in profile, profile
    for kind in ("gpt2", "llama"):
        r = profile[kind]
        assert set(r["rounds"]) == {"batch 2", "batch 4", "batch 4, a sync per forward"}
        assert all(len(rows) == 2 and all(row["token_steps"] > 0 for row in rows) for rows in r["rounds"].values())
        # every variant reads the same windows: the batch size changes how they are grouped, not what is read
        assert len({row["token_steps"] for rows in r["rounds"].values() for row in rows}) == 1
        assert r["attention"] == "sdpa" and r["profiled"]["host"] and r["profiled"]["seconds"] > 0
    assert "Profile, llama" in written.with_suffix(".md").read_text()
