"""The throughput benchmark's arithmetic, its FLOP counts and its table (no assertions on wall time).

bench's timer is replaced by one that reports every step as taking ``STEP_SECONDS``, so tokens/s and
GFLOP/s have exact expected values; the workloads' steps are then run under torch's FLOP counter to
check the analytic counts against what the step executes.
"""

from __future__ import annotations

import pytest
from torch.utils.flop_counter import FlopCounterMode

from txlab.errors import TxlabError
from txlab.measure import bench
from txlab.measure.bench import BenchRow, bench_model, bench_table_markdown

MICRO = {"micro": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "n_token": 50}}
BATCH, SEG = 2, 8
STEP_SECONDS = 0.125
FLOP_FACTOR = 1.25
"""The analytic FLOPs stay within this factor of what torch counts (as in test_plan): they count the
same matmuls; the rest is the attention's masked columns."""
ALL_MODES = ("train", "eval_mem16", "eval_mem16_uncached", "vanilla_win8", "generate_mem16", "generate_mem16_uncached")


@pytest.fixture
def timed(monkeypatch):
    """bench's timer stubbed: each step 'takes' STEP_SECONDS; the (steps, warmup, repeats) it got are kept."""
    calls = []

    def fixed_seconds(steps, warmup, repeats):
        calls.append((steps, warmup, repeats))
        return [STEP_SECONDS] * len(steps)

    monkeypatch.setattr(bench, "interleaved_median_seconds", fixed_seconds)
    return calls


def test_tokens_per_second_is_the_work_of_one_call_over_its_median_time(timed):
    rows = bench_model(MICRO, modes=ALL_MODES, batch_size=BATCH, seg_len=SEG, threads=1, repeats=3, warmup=0)
    assert [(r.config, r.mode) for r in rows] == [("micro", mode) for mode in ALL_MODES]
    # train and eval predict batch x seg tokens a call; a vanilla call one token per window; generation 16 tokens of one stream
    tokens_per_call = {"train": BATCH * SEG, "eval_mem16": BATCH * SEG, "eval_mem16_uncached": BATCH * SEG,
                       "vanilla_win8": BATCH, "generate_mem16": 16, "generate_mem16_uncached": 16}
    for row in rows:
        assert row.tokens_per_s == tokens_per_call[row.mode] / STEP_SECONDS
        assert row.gflops == pytest.approx(row.tokens_per_s * row.flops_per_token / 1e9, rel=1e-12)
        assert row.reference_tokens_per_s is None and row.speedup is None  # only the tiny and small shapes have one
    assert [r.batch_size for r in rows] == [BATCH] * 4 + [1, 1]
    # warm-up: at least what fills the state (one training step; 16 / 8 evaluation chunks for a memory of 16)
    assert [(warmup, repeats) for _, warmup, repeats in timed] == [(1, 3), (2, 3), (2, 3), (0, 3), (0, 3), (0, 3)]


def test_flop_counts_agree_with_torchs_count_of_each_step(timed):
    rows = bench_model(MICRO, modes=ALL_MODES, batch_size=BATCH, seg_len=SEG, threads=1, repeats=1, warmup=0)
    counted = {}
    for row, (steps, warmup, _) in zip(rows, timed):
        for _ in range(warmup):  # the state the timed calls start from (a full memory)
            steps[0]()
        with FlopCounterMode(display=False) as counter:
            steps[0]()
        counted[row.mode] = counter.get_total_flops() / (row.tokens_per_s * STEP_SECONDS)
    by_mode = {r.mode: r for r in rows}
    for mode in ("train", "eval_mem16", "vanilla_win8", "generate_mem16"):  # the training path also repeats work: below
        assert counted[mode] / FLOP_FACTOR <= by_mode[mode].flops_per_token <= counted[mode] * FLOP_FACTOR, mode
    # the cached state skips exactly the work it claims to avoid: the training path executes that much more
    for cached in ("eval_mem16", "generate_mem16"):
        assert counted[cached + "_uncached"] - counted[cached] == by_mode[cached].avoided_flops_per_token > 0
        assert by_mode[cached + "_uncached"].avoided_flops_per_token == 0


def test_the_training_path_evaluation_counts_what_it_repeats(timed):
    rows = bench_model(MICRO, modes=("eval_mem16", "eval_mem16_uncached"), batch_size=BATCH, seg_len=SEG, threads=1, repeats=1, warmup=0)
    cached, uncached = rows
    assert cached.flops_per_token == uncached.flops_per_token  # the same useful work
    # One layer re-projecting 16 memory rows (2 * 16 * 2 * 16 FLOPs each) per 8 tokens, and r_net over 25 distances per 16 tokens.
    assert cached.avoided_flops_per_token == 16 * 2 * 16 * 2 * 16 / 8 + 2 * 16 * 16 * 25 / 16
    assert uncached.avoided_flops_per_token == 0 and "training path" in uncached.context


def test_bench_model_rejects_unknown_names():
    with pytest.raises(TxlabError, match="bench shape"):
        bench_model(("huge",))
    with pytest.raises(TxlabError, match="bench mode"):
        bench_model(MICRO, modes=("fast",))


_ROW = dict(config="tiny", family="xl", context="seg 128 mem 128", batch_size=8, threads=2, params=1000, flops_per_token=2e6,
            reference_params=None, peak_rss_mb=512.4, load_avg_1m=0.5, others_cpu=0.031)
TABLE_ROWS = [
    BenchRow(**_ROW, mode="train", tokens_per_s=5000.0, avoided_flops_per_token=0.0, reference_tokens_per_s=5182.0, reference_source="recorded"),
    BenchRow(**{**_ROW, "others_cpu": None, "peak_rss_mb": 600.0}, mode="eval_mem128", tokens_per_s=20000.0, avoided_flops_per_token=1e6,
             reference_tokens_per_s=10000.0, reference_source="side by side"),
]


def test_a_rows_record_derives_its_rates_and_keeps_the_keys_of_the_json():
    record = TABLE_ROWS[0].as_record()
    assert list(record) == ["config", "family", "mode", "context", "batch_size", "threads", "params", "tokens_per_s", "gflops",
                            "flops_per_token", "avoided_flops_per_token", "reference_tokens_per_s", "reference_source", "reference_params",
                            "speedup", "peak_rss_mb", "load_avg_1m", "others_cpu"]
    assert record["gflops"] == 5000.0 * 2e6 / 1e9 == 10.0 and record["speedup"] == 5000 / 5182
    assert TABLE_ROWS[1].speedup == 2.0 and TABLE_ROWS[1].gflops == 40.0


def test_table_golden_text():
    assert bench_table_markdown(TABLE_ROWS, peak_gflops=80.0) == (
        "| config | mode | context | tokens/s | reference tokens/s | speedup | GFLOP/s | of ceiling | avoided | peak RSS MB | load | others' CPU |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| tiny | train | seg 128 mem 128 | 5,000.0 | 5,182.0 (recorded) | 0.96x | 10.0 | 12% | - | 512 | 0.50 | 3% |\n"
        "| tiny | eval_mem128 | seg 128 mem 128 | 20,000.0 | 10,000.0 | 2.00x | 40.0 | 50% | 0.50x | 600 | 0.50 | - |"
    )
    # without the measured ceiling there is no "of ceiling" column
    assert bench_table_markdown(TABLE_ROWS[:1]).splitlines()[2] == (
        "| tiny | train | seg 128 mem 128 | 5,000.0 | 5,182.0 (recorded) | 0.96x | 10.0 | - | 512 | 0.50 | 3% |")
