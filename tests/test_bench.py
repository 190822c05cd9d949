"""The throughput benchmark runs end to end (a smoke test: no assertions on wall time)."""

from __future__ import annotations

import pytest

from txlab.bench import bench_model, format_table
from txlab.errors import TxlabError

MICRO = {"micro": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "n_token": 50}}


def test_bench_model_reports_every_mode():
    rows = bench_model(MICRO, modes=("train", "eval_mem16", "vanilla_win8"), batch_size=2, seg_len=8,
                       threads=1, repeats=1, warmup=0)
    assert [(r["config"], r["mode"]) for r in rows] == [("micro", "train"), ("micro", "eval_mem16"), ("micro", "vanilla_win8")]
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["gflops"] > 0 and row["peak_rss_mb"] > 0
        assert row["reference_tokens_per_s"] is None  # only the tiny and small shapes have one
    table = format_table(rows)
    assert table.count("\n") == 4 and "eval_mem16" in table


def test_the_training_path_evaluation_is_the_cached_one_before_and_counts_what_it_repeats():
    rows = bench_model(MICRO, modes=("eval_mem16", "eval_mem16_uncached"), batch_size=2, seg_len=8, threads=1, repeats=1, warmup=0)
    cached, uncached = rows
    assert cached["flops_per_token"] == uncached["flops_per_token"]  # the same useful work
    # One layer re-projecting 16 memory rows (2 * 16 * 2 * 16 FLOPs each) per 8 tokens, and r_net over 25 distances per 16 tokens.
    assert cached["avoided_flops_per_token"] == 16 * 2 * 16 * 2 * 16 / 8 + 2 * 16 * 16 * 25 / 16
    assert uncached["avoided_flops_per_token"] == 0 and "training path" in uncached["context"]
    table = format_table(rows, peak_gflops=100.0)
    assert "of ceiling" in table and table.splitlines()[2].count("|") == table.splitlines()[0].count("|")


def test_bench_model_rejects_unknown_names():
    with pytest.raises(TxlabError, match="bench shape"):
        bench_model(("huge",))
    with pytest.raises(TxlabError, match="bench mode"):
        bench_model(MICRO, modes=("fast",))


def test_generation_rows_time_one_token_a_step_on_both_paths():
    rows = bench_model(MICRO, modes=("generate_mem16", "generate_mem16_uncached"), batch_size=4, seg_len=8, threads=1, repeats=1, warmup=0)
    for row in rows:
        assert row["tokens_per_s"] > 0 and row["batch_size"] == 1 and row["flops_per_token"] > 0
    assert rows[0]["avoided_flops_per_token"] > 0 == rows[1]["avoided_flops_per_token"]
