"""txlab speed: the two evaluation procedures against their definitions, FLOP counts, the CLI (no wall-time assertions)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from txlab.api import load_model, run_tokens
from txlab.cli import app
from txlab.config import ModelConfig, RunConfig
from txlab.drivers.speed import load_study
from txlab.errors import TxlabError
from txlab.measure.rounds import Calls, time_rounds
from txlab.measure.speed import (SPREAD_COLUMNS, MethodSpeed, SpeedRow, SpeedSettings, speed_table, strided_calls, strided_nll, vanilla_calls,
                                 vanilla_nll, xl_calls, xl_context, xl_fill, xl_segment)
from txlab.models.attention import RelativeSinusoidPositions, attention_mask, relative_distances, sinusoid
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.models.transformer import RecomputedMemory
from txlab.presets import resolve_preset
from txlab.runs.checkpoint import load_checkpoint, save_checkpoint
from txlab.runs.evaluate import evaluation_context

runner = CliRunner()
SHAPE = ModelConfig(family="xl", n_token=10, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, tgt_len=4, mem_len=4)
FAST = ["--size", "tiny", "--threads", "1", "--set", "budget_s=0", "--set", "repeats=2", "--set", "warmup=1"]


@pytest.fixture(autouse=True)
def _no_matmul_ceiling(monkeypatch):
    """The machine's matmul ceiling takes seconds to measure on a busy CPU; the tests do not need it."""
    monkeypatch.setattr("txlab.measure.speed._matmul_peak", lambda device, threads: 100.0)


def speed_row(attn_len: int, others_cpu: float | None) -> SpeedRow:
    """A row of made-up numbers at ``attn_len``, timed while other processes took ``others_cpu`` of the CPU."""
    method = MethodSpeed(tokens_per_s=10.0, flops_per_token=1e6, nll=1.0, ppl=None, predictions=4, p50_ms=1.0, p99_ms=2.0, peak_mb=None, state_mb=0.0)
    return SpeedRow(attn_len, method, method, method, method, paper_slowdown=None, xl_eval_cache=True, xl_avoided_flops_per_token=0.0,
                    xl_repeated_flops_per_token=0.0, vanilla_positions=4, xl_tokens=4, vanilla_round_ms=(100.0,), xl_round_ms=(0.1,), batch_size=1, tgt_len=4, stride=4, attn_kernel="auto",
                    seconds=1.0, load_avg_1m=0.0, others_cpu=others_cpu)


def xl_model(**changes) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(replace(SHAPE, **changes)).eval()


def vanilla_model(window: int) -> torch.nn.Module:
    torch.manual_seed(1)
    return build_model(replace(SHAPE, family="vanilla", pos_enc="alrfou", mem_len=0, max_len=window, tgt_len=window)).eval()


def stream(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, SHAPE.n_token, (batch, length), generator=torch.Generator().manual_seed(seed))


def timed(calls: Calls, warmup: int, rounds: int):
    """One method's :class:`~txlab.measure.rounds.Timed` calls, in rounds with nothing else."""
    return time_rounds({"only": calls}, warmup, rounds, torch.device("cpu"))["only"]


def no_sync() -> None:
    pass


@torch.inference_mode()
def test_vanilla_predicts_each_position_from_exactly_attn_len_previous_tokens():
    attn_len, tokens = 6, stream(2, 30)
    model = vanilla_model(attn_len)
    rows, ends = torch.tensor([0, 1, 1, 0]), torch.tensor([6, 29, 17, 20])
    nll = vanilla_nll(model, tokens, rows, ends, attn_len)
    for i, (b, t) in enumerate(zip(rows.tolist(), ends.tolist())):
        window = tokens[b, t - attn_len : t][None]  # x_{t-L} .. x_{t-1}
        targets = tokens[b, t - attn_len + 1 : t + 1][None]  # the last one is x_t
        expected = model(window, model.init_state(1), targets).nll[0, -1]
        torch.testing.assert_close(nll[i], expected)


@torch.inference_mode()
def test_xl_fill_in_one_chunk_equals_streaming_segment_by_segment():
    attn_len, tgt_len, tokens = 9, 3, stream(2, 9 + 4 * 3 + 1)  # 21 predictions: whole segments either way
    model = xl_model()
    model.set_context(xl_context(model, attn_len))
    fill_nll, state = xl_fill(model, tokens, attn_len)
    fast = [fill_nll]
    for start in range(attn_len, tokens.size(1) - 1, tgt_len):
        nll, state = xl_segment(model, tokens, state, start, tgt_len)
        fast.append(nll)
    slow, state = [], model.init_state(2)
    for start in range(0, tokens.size(1) - 1, tgt_len):
        nll, state = xl_segment(model, tokens, state, start, tgt_len)
        slow.append(nll)
    torch.testing.assert_close(torch.cat(fast, 1), torch.cat(slow, 1), rtol=1e-5, atol=1e-5)


@torch.inference_mode()
def test_xl_attends_exactly_attn_len_keys():
    attn_len, tgt_len = 5, 3
    model = xl_model(n_layer=1)  # one layer: its keys are the whole dependency (more layers reach further back)
    with torch.no_grad():
        for p in model.parameters():  # weights far from the tiny initial ones, so every attended key matters visibly
            p.normal_(0, 0.5)
    model.set_context(xl_context(model, attn_len))
    assert model.context == Context(mem_len=attn_len, same_length=True, clamp_len=0)
    # with a full memory, every query of a segment sees exactly attn_len keys (itself and attn_len - 1 before it)
    allowed = attention_mask(tgt_len, attn_len, attn_len, torch.float32) == 0
    assert allowed.sum(1).tolist() == [attn_len] * tgt_len

    def loss_at(tokens: torch.Tensor, t: int) -> torch.Tensor:
        """NLL of x_t from the timed segments' stream: fill, then segments."""
        nll, state = xl_fill(model, tokens, attn_len)
        losses = [nll]
        for start in range(attn_len, tokens.size(1) - 1, tgt_len):
            nll, state = xl_segment(model, tokens, state, start, tgt_len)
            losses.append(nll)
        return torch.cat(losses, 1)[0, t - 1]

    tokens, t = stream(1, 5 + 3 * 3 + 1), 12
    base = loss_at(tokens, t)
    older = tokens.clone()
    older[0, : t - attn_len] = (older[0, : t - attn_len] + 1) % SHAPE.n_token  # everything before x_{t-L}
    assert torch.equal(loss_at(older, t), base)
    oldest_seen = tokens.clone()
    oldest_seen[0, t - attn_len] = (oldest_seen[0, t - attn_len] + 1) % SHAPE.n_token  # x_{t-L}, the oldest key
    assert (loss_at(oldest_seen, t) - base).abs() > 1e-3


@torch.inference_mode()
def test_both_paths_score_the_same_stream_with_finite_losses():
    attn_len, tgt_len, tokens = 6, 4, stream(2, 6 + 3 * 4 + 1)
    xl = timed(xl_calls(xl_model(), tokens, attn_len, tgt_len, no_sync), warmup=1, rounds=2)
    assert len(xl.seconds) == 2 and xl.nll.shape == (2, 2 * tgt_len) and torch.isfinite(xl.nll).all()
    assert xl.tokens_per_s == pytest.approx(2 * tgt_len / statistics.median(xl.seconds))
    vanilla = timed(vanilla_calls(vanilla_model(attn_len), tokens, attn_len, n_windows=2, budget_s=0, rounds=2, sync=no_sync,
                                  generator=torch.Generator().manual_seed(0)), warmup=1, rounds=2)
    assert [len(r) for r in vanilla.rounds] == [2, 2]  # 3 calls at least, the same number in every round
    assert vanilla.nll.shape == (4 * 2,) and torch.isfinite(vanilla.nll).all()


def test_the_methods_warm_up_one_after_another_then_alternate_round_by_round():
    calls = []

    def method(name: str, per_round: int = 1) -> Calls:
        return Calls(lambda: calls.append(name) or torch.zeros(1, 2), 2, 1, per_round)

    methods = {"vanilla": method("vanilla", 2), "strided": method("strided"), "rolling": method("rolling", 3), "xl": method("xl")}
    times = time_rounds(methods, warmup=1, rounds=2, device=torch.device("cpu"))
    one_round = ["vanilla"] * 2 + ["strided"] + ["rolling"] * 3 + ["xl"]
    assert calls == one_round * 3  # the warm-up round (untimed, one method after another), then two timed rounds in alternation
    assert {name: [len(r) for r in t.rounds] for name, t in times.items()} == {"vanilla": [2, 2], "strided": [1, 1], "rolling": [3, 3], "xl": [1, 1]}
    assert times["rolling"].nll.shape == (1, 2 * 3 * 2)  # the timed calls' NLL only: 2 rounds of 3 calls of 2 predictions


@pytest.mark.parametrize("family,pos_enc", [("vanilla", "alrfou"), ("xl", "ours")])
@torch.inference_mode()
def test_strided_recompute_scores_the_last_stride_predictions_of_each_full_window(family, pos_enc):
    attn_len, stride, tokens = 7, 3, stream(2, 7 + 4 * 3 + 1)
    model = vanilla_model(attn_len) if family == "vanilla" else xl_model(pos_enc=pos_enc)
    strided = timed(strided_calls(model, tokens, attn_len, stride, no_sync), warmup=1, rounds=3)
    assert strided.predictions == stride and strided.nll.shape == (2, 3 * stride)
    # The naive loop: every window read whole from nothing, all its positions scored, the last `stride` kept.
    # The timed windows are the 2nd to 4th (one warm-up), ending where the XL segments after the memory end.
    expected = []
    for end in (attn_len + 2 * stride, attn_len + 3 * stride, attn_len + 4 * stride):
        window, targets = tokens[:, end - attn_len : end], tokens[:, end - attn_len + 1 : end + 1]
        expected.append(model(window, model.init_state(2), targets).nll[:, -stride:])
    torch.testing.assert_close(strided.nll, torch.cat(expected, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(strided_nll(model, tokens, 10, attn_len, 1)[:, 0], vanilla_nll(model, tokens, torch.tensor([0, 1]),
                                                                                            torch.tensor([10, 10]), attn_len))


@torch.inference_mode()
def test_the_rolling_cache_equals_a_naive_loop_of_one_token_windows_and_is_not_recompute():
    """Each new token attends, at every layer, to the states of the last attn_len tokens, each computed when its token was new."""
    attn_len, n_tokens = 5, 14
    model = xl_model(n_layer=3)
    with torch.no_grad():
        for p in model.parameters():  # weights far from the tiny initial ones, so every state matters visibly
            p.normal_(0, 0.3)
    tokens = stream(1, n_tokens + 1, seed=3)
    rolling = timed(xl_calls(model, tokens, attn_len, 1, no_sync), warmup=0, rounds=n_tokens - attn_len)
    assert rolling.predictions == 1 and rolling.state_bytes > 0

    d = SHAPE.d_model
    inputs = [[] for _ in model.blocks]  # per layer, its input row of every token so far
    naive = []
    for t in range(n_tokens):
        h = model.word_emb(tokens[:, t : t + 1])  # [1, 1, d]
        for layer, block in enumerate(model.blocks):
            window = torch.cat([*inputs[layer][-(attn_len - 1) :], h], dim=1)  # the last attn_len - 1 rows and the new one
            inputs[layer].append(h)
            n_keys = window.size(1)
            r = sinusoid(relative_distances(n_keys, 0).float(), d)
            positions = RelativeSinusoidPositions(model.u[0], model.v[0], block.attn.position_keys(r))
            h = block(h, RecomputedMemory(window[:, :-1]), torch.zeros(1, n_keys), positions)  # [1, 1, d]: every key visible
        naive.append(model.crit.nll(h[:, 0], tokens[:, t + 1]))
    torch.testing.assert_close(rolling.nll[0], torch.stack(naive)[attn_len:, 0], rtol=1e-5, atol=1e-5)

    # Not recompute: reading each token's window of attn_len from nothing gives other losses (lower layers differ).
    recompute = torch.stack([strided_nll(model, tokens, end, attn_len, 1)[0, 0] for end in range(attn_len + 1, n_tokens + 1)])
    assert (recompute - rolling.nll[0]).abs().max() > 1e-3


def test_flop_counts_match_a_hand_calculation():
    # d 8, 2 heads of 4 (inner 8), d_inner 16, vocabulary 10, 2 layers, attention length 6
    kv = 2 * 8 * 2 * 8  # key and value projections of one token
    io = 2 * 8 * 10  # output layer (no input projection: d_embed = d_model)

    def query(n_keys: int, score_terms: int) -> int:
        return 2 * 8 * 8 * 2 + score_terms * 2 * 8 * n_keys + 2 * 8 * n_keys + 2 * 2 * 8 * 16  # q,o + scores + p.v + FF

    assert xl_model().counts().flops_per_token(6) == 2 * (kv + query(6, 2)) + io == 2784  # (a)+(c) and (b)+(d) score terms
    # the window: keys and values of 6 rows in both layers, 6 queries in layer 1 and only the last in layer 2
    assert vanilla_model(6).counts().window_flops(6) == 2 * 6 * kv + (6 + 1) * query(6, 1) + io == 9952


def test_speed_table_rows_and_files(tmp_path):
    settings = SpeedSettings(size="tiny", threads=1, budget_s=0, repeats=2, batch_size=2, tgt_len=8, stride=4)
    result = speed_table([8, 20], settings, out_dir=tmp_path, name="t9")
    for row in result.rows:
        assert row.slowdown == pytest.approx(row.xl.tokens_per_s / row.vanilla.tokens_per_s)
        for method in (row.vanilla, row.strided, row.rolling, row.xl):
            assert method.gflops == pytest.approx(method.tokens_per_s * method.flops_per_token / 1e9)
            assert 0 < method.p50_ms <= method.p99_ms and method.ppl is None  # random weights
            assert method.peak_mb is None or method.peak_mb >= 0
        assert row.xl_tokens == 2 * 8 * 2 and row.vanilla_positions == 2 * 4 and row.tgt_len == 8 and row.stride == 4  # 2 vanilla calls a round
        assert row.xl.predictions == row.rolling.predictions == 2 * 2 * 8 and row.strided.predictions == 2 * 2 * 4
        assert row.vanilla.state_mb == row.strided.state_mb == 0 < row.rolling.state_mb <= row.xl.state_mb
    # the strided rows' FLOPs: one window of L with its last s rows in the top layer, shared by its s predictions
    tiny = resolve_preset("xl-enwik8-12l", "tiny").model
    vanilla = build_model(replace(tiny, n_token=204, family="vanilla", pos_enc="alrfou", mem_len=0, max_len=20, tgt_len=20))
    assert result.rows[1].strided.flops_per_token == vanilla.counts().window_flops(20, 4) / 4 < result.rows[1].vanilla.flops_per_token
    written = pd.read_csv(tmp_path / "t9.csv")
    assert len(written) == 2
    # the CSV keeps the columns of the committed tables (the same keys in the same order) and adds the rounds' spread,
    # each row's record then the context
    committed = Path(__file__).resolve().parents[1] / "results" / "speed" / "table9-cpu-baselines-1thread.csv"
    assert [c for c in written.columns if c not in SPREAD_COLUMNS] == list(pd.read_csv(committed, nrows=0).columns)
    for r, row in zip(written.itertuples(), result.rows):  # the spread of the per-round slowdowns and per-token times
        assert r.rounds == len(row.vanilla_round_ms) == len(row.xl_round_ms) == 2
        for what in ("slowdown", "vanilla_ms_per_token", "xl_ms_per_token"):
            low, middle, high = (getattr(r, f"{what}_{end}") for end in ("min", "median", "max"))
            assert 0 < low <= middle <= high
        slowdowns = [v / x for v, x in zip(row.vanilla_round_ms, row.xl_round_ms)]  # each round's own
        assert (r.slowdown_min, r.slowdown_median, r.slowdown_max) == pytest.approx((min(slowdowns), statistics.median(slowdowns), max(slowdowns)))
        assert r.vanilla_ms_per_token_min / r.xl_ms_per_token_max <= r.slowdown_min and r.slowdown_max <= r.vanilla_ms_per_token_max / r.xl_ms_per_token_min
    record = result.rows[1].as_record()
    assert list(record) == list(written.columns[: len(record)])
    assert record["strided_gflops"] == written["strided_gflops"][1] == result.rows[1].strided.gflops
    assert record["slowdown"] == written["slowdown"][1] and record["flop_ratio"] == result.rows[1].flop_ratio
    markdown = (tmp_path / "t9.md").read_text()
    assert result.command in markdown and result.machine.device_name in markdown and torch.__version__ in markdown
    assert "| 20 | strided recompute (s = 4) |" in markdown and "every method timed again at batch 1" in markdown


def test_a_run_is_timed_on_its_own_text_with_perplexities_where_its_weights_run(tmp_path, untrained_run):
    settings = dict(threads=1, budget_s=0, repeats=2, warmup=0)
    xl = speed_table([12], SpeedSettings(run=str(untrained_run(tmp_path / "xl")), **settings), out_dir=tmp_path, name="xl").rows[0]
    for method in (xl.vanilla, xl.strided, xl.rolling, xl.xl):  # an XL run's weights in every row: the recompute rows read windows with them
        assert method.ppl == pytest.approx(math.exp(method.nll))
    # the XL row scores the run's own evaluation text: the same losses as reading it with the model directly
    model = load_model(tmp_path / "xl").model
    text = torch.as_tensor(run_tokens(tmp_path / "xl", "valid").astype("int64"))[None]
    losses = []
    with torch.inference_mode():
        model.set_context(xl_context(model, 12))
        _, state = xl_fill(model, text, 12)
        for start in (12, 12 + xl.tgt_len):
            nll, state = xl_segment(model, text, state, start, xl.tgt_len)
            losses.append(nll)
    assert xl.xl.nll == pytest.approx(torch.cat(losses, 1).mean().item(), abs=1e-5)
    vanilla = speed_table([12], SpeedSettings(run=str(untrained_run(tmp_path / "van", "transformer128m")), tgt_len=4, **settings),
                          out_dir=tmp_path, name="van").rows[0]
    assert vanilla.vanilla.ppl == pytest.approx(math.exp(vanilla.vanilla.nll)) and vanilla.strided.ppl is not None
    assert vanilla.xl.ppl is None and vanilla.rolling.ppl is None  # a random relative model of the run's shape


def test_the_training_path_scores_the_same_and_counts_what_the_cache_avoids(tmp_path):
    """eval_cache=false times XL re-projecting its memory every segment (the authors' way): same losses, same useful FLOPs."""
    settings = SpeedSettings(size="tiny", threads=1, budget_s=0, repeats=2, batch_size=2, tgt_len=8)
    cached = speed_table([16], settings, out_dir=tmp_path, name="cached")
    plain = speed_table([16], replace(settings, eval_cache=False), out_dir=tmp_path, name="plain")
    (a,), (b,) = cached.rows, plain.rows
    assert a.xl.nll == pytest.approx(b.xl.nll, abs=1e-5) and a.xl.flops_per_token == b.xl.flops_per_token
    model = xl_model()
    assert a.xl_avoided_flops_per_token == b.xl_repeated_flops_per_token > 0
    assert a.xl_repeated_flops_per_token == b.xl_avoided_flops_per_token == 0 and (a.xl_eval_cache, b.xl_eval_cache) == (True, False)
    assert "--set eval_cache=false" in plain.command and "eval_cache" not in cached.command
    assert "training path" in (tmp_path / "plain.md").read_text() and "cached evaluation state" in (tmp_path / "cached.md").read_text()
    assert model.counts().recomputed_flops_per_token(16, 8, 2) > 0


# figures laid out, not rendered: test_speed_redraw_draws_the_figure_again_from_a_written_table_and_times_nothing renders them
def test_cli_end_to_end_json_and_figure(tmp_path, figure_files_only):
    result = runner.invoke(app, ["speed", "--attn-len", "16", "--attn-len", "24", *FAST, "--out-dir", str(tmp_path / "r"),
                                 "--fig-dir", str(tmp_path / "f"), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("profile: defaults")
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert [r["attn_len"] for r in doc["rows"]] == [16, 24]
    for row in doc["rows"]:
        assert {"attn_len", "vanilla_tokens_per_s", "xl_tokens_per_s", "slowdown", "vanilla_gflops", "xl_gflops"} <= set(row)
        assert row["slowdown"] == pytest.approx(row["xl_tokens_per_s"] / row["vanilla_tokens_per_s"])
    assert doc["machine"]["torch"] == torch.__version__ and doc["machine"]["threads"] == 1
    for path in ("r/table9-tiny-1thread.csv", "r/table9-tiny-1thread.md", "f/table9-tiny-1thread.png", "f/table9-tiny-1thread.pdf"):
        assert (tmp_path / path).is_file(), path
    points = pd.read_csv(tmp_path / "f/table9-tiny-1thread.csv")  # the figure's numbers keep the rounds' spread the JSON gives
    assert [{c: row[c] for c in SPREAD_COLUMNS} for row in doc["rows"]] == points[list(SPREAD_COLUMNS)].to_dict("records")
    assert doc["rows"][0]["rounds"] == 2 and "| 16 |" in (tmp_path / "r/table9-tiny-1thread.md").read_text()
    again = runner.invoke(app, ["speed", "--attn-len", "16", "--attn-len", "24", *FAST, "--out-dir", str(tmp_path / "r"),
                                "--fig-dir", str(tmp_path / "f"), "--dry-run"])
    assert again.exit_code == 0, again.output  # the same command may replace its own table
    other = runner.invoke(app, ["speed", "--attn-len", "16", *FAST, "--out-dir", str(tmp_path / "r"), "--fig-dir", str(tmp_path / "f"), "--dry-run"])
    assert other.exit_code == 2 and "holds a table made by `" in other.output and "speed --attn-len 16 --attn-len 24 --size tiny" in other.output
    assert "--name table9-tiny-1thread-2" in other.output


def test_a_table_is_named_by_what_the_command_line_changed_from_the_study():
    from txlab.drivers.speed import resolve_study

    assert resolve_study(None, "cpu", [], {}).name == "table9"
    assert resolve_study(None, "cpu", [800], {"size": "tiny", "threads": 1}).name == "table9-tiny-1thread"
    assert resolve_study(None, "cpu", [], {"run": "runs/results/models/xl128m-cpu-attention/"}).name == "table9-run-xl128m-cpu-attention"
    assert resolve_study("studies/table9.yaml", "cpu", [], {"size": "cpu", "threads": 2}).name == "table9-cpu"  # the profile's own values
    assert resolve_study("studies/table9.yaml", "cpu", [], {}, ["batch_size=4", "eval_cache=false"]).name == "table9-cpu-batch4-nocache"
    assert resolve_study("studies/table9.yaml", "cpu", [], {}, ["stride=8", "attn_kernel=sdpa"]).name == "table9-cpu-stride8-sdpa"


# figures laid out, not rendered: test_speed_redraw_draws_the_figure_again_from_a_written_table_and_times_nothing renders them
def test_contended_timings_are_flagged_in_the_output_the_markdown_and_the_figure(tmp_path, figure_files_only):
    from txlab.measure.speed import contention_warning
    from txlab.timing import CONTENDED_SHARE

    idle = [speed_row(800, 0.02), speed_row(1800, None)]
    assert contention_warning(idle) == "" and CONTENDED_SHARE == 0.10
    busy = [speed_row(800, 0.02), speed_row(3800, 0.76)]
    assert contention_warning(busy) == ("other processes took up to 76% of the CPU while timing (attention length 3800; over 10% "
                                        "distorts the numbers): rerun on an idle machine")
    table = Path(__file__).resolve().parents[1] / "results" / "speed" / "table9-paper-cpu-issue15.csv"
    result = runner.invoke(app, ["speed", "--redraw", str(table), "--fig-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    import txlab.analysis.table9

    texts = []
    original = txlab.analysis.table9.save_figure_with_points
    txlab.analysis.table9.save_figure_with_points = lambda fig, *a, **k: texts.extend(t.get_text() for t in fig.texts) or original(fig, *a, **k)
    try:
        txlab.analysis.table9.table9_figure(table, tmp_path / "again.png")
    finally:
        txlab.analysis.table9.save_figure_with_points = original
    assert any(t.startswith("Warning: other processes took up to 72% of the CPU") for t in texts)


# figures laid out, not rendered: test_speed_redraw_draws_the_figure_again_from_a_written_table_and_times_nothing renders them
def test_cli_runs_a_study_profile(tmp_path, figure_files_only):
    study = tmp_path / "s.yaml"
    study.write_text("name: t9\nattn_lens: [12]\nprofiles:\n  quick: {size: tiny, threads: 1, budget_s: 0, repeats: 1}\n")
    result = runner.invoke(app, ["speed", "--study", str(study), "--profile", "quick", "--out-dir", str(tmp_path), "--fig-dir",
                                 str(tmp_path), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith(f"profile: quick ({study})")
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert doc["profile"] == "quick" and doc["settings"]["size"] == "tiny" and [r["attn_len"] for r in doc["rows"]] == [12]
    assert (tmp_path / "t9-quick.csv").is_file()


def test_repository_study_has_the_paper_lengths_and_both_profiles():
    for profile, size in (("paper", "paper"), ("cpu", "cpu")):
        study = load_study("studies/table9.yaml", profile)
        assert study.attn_lens == [800, 1800, 2800, 3800] and study.settings.size == size and study.name == f"table9-{profile}"
    assert load_study("studies/table9.yaml", "paper").settings.device == "cuda"


def test_a_trained_xl_run_is_timed_with_its_weights(tmp_path, untrained_run):
    run_dir = untrained_run(tmp_path / "run")
    result = speed_table([6], SpeedSettings(run=str(run_dir), threads=1, budget_s=0, repeats=1), out_dir=tmp_path)
    ckpt = load_checkpoint(run_dir)
    assert result.size == "run" and result.params == ckpt.model.num_parameters()
    assert result.rows[0].tgt_len == evaluation_context(ckpt.config.model, ckpt.config.eval)[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attn-len", "0"], "attention length must be >= 1"),
        (["--size", "huge"], "config key 'size' must be one of paper, cpu, tiny; got 'huge'"),
        (["--study", "studies/table9.yaml", "--profile", "cpuu"], "Did you mean 'cpu'"),
    ],
)
def test_user_errors_exit_2(tmp_path, args, message):
    result = runner.invoke(app, ["speed", *args, "--out-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_a_user_error(tmp_path):
    result = runner.invoke(app, ["speed", "--device", "cuda", *FAST, "--out-dir", str(tmp_path)])
    assert result.exit_code == 2 and "error: --device cuda: " in result.output  # txlab.devices: a CPU-only build, or no GPU seen
    assert "is a CPU-only build, without CUDA" in result.output or "sees no GPU here" in result.output


def test_a_recurrent_run_is_refused(tmp_path):
    cfg = RunConfig(model=ModelConfig(family="qrnn", n_token=10, n_layer=1, d_model=8, d_inner=8))
    save_checkpoint(tmp_path / "qrnn", build_model(cfg.model), cfg, step=0, vocab_hash="0" * 64)
    with pytest.raises(TxlabError, match="holds a qrnn model"):
        speed_table([8], SpeedSettings(run=str(tmp_path / "qrnn")), out_dir=tmp_path)


def test_a_trained_vanilla_run_is_timed_up_to_its_window(tmp_path, untrained_run):
    run_dir = untrained_run(tmp_path / "vanilla", "transformer128m", sets=["model.max_len=8"])
    settings = SpeedSettings(run=str(run_dir), threads=1, budget_s=0, repeats=1, tgt_len=4)
    assert speed_table([8], settings, out_dir=tmp_path).rows[0].vanilla_positions == 3
    with pytest.raises(TxlabError, match="reads at most 8 tokens"):
        speed_table([12], settings, out_dir=tmp_path)


def test_speed_redraw_draws_the_figure_again_from_a_written_table_and_times_nothing(tmp_path, monkeypatch):
    import txlab.measure.speed

    monkeypatch.setattr(txlab.measure.speed, "speed_table", lambda *a, **k: pytest.fail("--redraw timed something"))
    table = Path(__file__).resolve().parents[1] / "results" / "speed" / "table9-cpu.csv"
    result = runner.invoke(app, ["speed", "--redraw", str(table), "--fig-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table9-cpu.csv", "table9-cpu.pdf", "table9-cpu.png"]
    points = pd.read_csv(tmp_path / "table9-cpu.csv")
    assert list(points["slowdown"]) == list(pd.read_csv(table).sort_values("attn_len")["slowdown"])
    missing = runner.invoke(app, ["speed", "--redraw", str(tmp_path / "none.csv"), "--fig-dir", str(tmp_path)])
    assert missing.exit_code == 2 and "no speed table" in missing.output


def test_the_docs_spread_of_the_rounds_is_the_committed_tables():
    """docs/speed.md quotes the first table with rounds: each number is its CSV's."""
    import csv
    import re

    root = Path(__file__).resolve().parents[1]
    rows = {int(r["attn_len"]): r for r in csv.DictReader((root / "results" / "speed" / "table9-cpu-rounds.csv").open())}
    text = " ".join((root / "docs" / "speed.md").read_text(encoding="utf-8").split())
    lo, hi, median, lo_800, hi_800 = re.search(r"at L = 3800 the ten rounds' slowdowns ran from ([\d,]+)x to ([\d,]+)x \(median ([\d,]+)x\), "
                                                r"and at L = 800 from ([\d,]+)x to ([\d,]+)x", text).groups()
    quoted = [int(x.replace(",", "")) for x in (lo, hi, median, lo_800, hi_800)]
    expected = [rows[3800]["slowdown_min"], rows[3800]["slowdown_max"], rows[3800]["slowdown_median"], rows[800]["slowdown_min"], rows[800]["slowdown_max"]]
    assert quoted == [round(float(x)) for x in expected] and all(int(r["rounds"]) == 10 for r in rows.values())
