"""Loss collection: the window method against the literal definition, storage, resume, groups; placebo losses by
windows, exact against one window per (c, t); the method chosen by cost; tables begun by an earlier version resume
with the methods they were begun with."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from copying_toy import CopyingToy, assert_hand_computed, copying_nll, kinds_of, outcomes

from txlab.analysis.recl import DEFAULT_GRID, recl
from txlab.config import DataConfig, ModelConfig, RunConfig
from txlab.data.corpus import load_corpus
from txlab.errors import TxlabError
from txlab.measure import losses as losses_mod
from txlab.measure.collection import Collection, placebo_groups
from txlab.measure.losses import (choose_method, collect_group_losses, collect_losses, collect_run_losses, load_group_losses, load_losses,
                                  naive_placebo_losses, placebo_block_losses, sample_blocks, scoring)
from txlab.measure.reading import PREFIX_TOLERANCE, context_lengths, is_prefix_causal, prefix_change
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.precision import scoring_precision
from txlab.runs.checkpoint import save_checkpoint

N_TOKEN = 37
GRID = (2, 4, 6, 8)
BLOCK_STARTS, BLOCK_LEN = (8, 30), 5  # two blocks: targets 8..12 and 30..34
TGT_LEN = 3  # chunks of 3 cut every context of 4..8 tokens differently




def tiny_model(**overrides):
    """A tiny random model whose predictions depend strongly on context (N(0, 0.5) parameters;
    the usual N(0, 0.02) initialisation leaves context effects near 1e-4 nats, too close to the tolerance)."""
    fields = dict(n_token=N_TOKEN, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=TGT_LEN, mem_len=4, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**fields, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def token_stream(n: int = 60, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, N_TOKEN, n).astype(np.uint16)  # the corpus dtype


def targets_of(block_starts, block_len) -> np.ndarray:
    return (np.asarray(block_starts)[:, None] + np.arange(block_len)).reshape(-1)


@torch.no_grad()
def reference_losses(model, tokens, grid, targets, segment) -> np.ndarray:
    """The definition, literally: for each (c, t) read x_{t-n} .. x_{t-1}, n = min(c, max_context),
    from a fresh state in chunks of ``segment(n)`` tokens starting at x_{t-n}, and take the nll the
    model's forward gives for x_t."""
    out = np.empty((len(grid), len(targets)))
    for j, c in enumerate(grid):
        n = min(c, model.max_context or c)
        for i, t in enumerate(targets):
            x = torch.as_tensor(tokens[t - n : t + 1].astype(np.int64))[None]  # [1, n+1]: context and target
            state, step = model.init_state(1), segment(n)
            for a in range(0, n, step):
                b = min(a + step, n)
                out_ = model(x[:, a:b], state, x[:, a + 1 : b + 1])
                state = out_.state
            out[j, i] = out_.nll[0, -1].item()
    return out


CASES = {
    # name: (model overrides, evaluation context, the definition's segment length for n context tokens)
    "xl-memory": (dict(), Context(mem_len=4, same_length=True, clamp_len=3), lambda n: TGT_LEN),
    "xl-memory-full-length": (dict(pos_enc="shaw"), Context(mem_len=4, same_length=False), lambda n: TGT_LEN),
    "xl-no-recurrence": (dict(), Context(mem_len=0), lambda n: n),
    "vanilla-capped": (dict(family="vanilla", pos_enc="alrfou", max_len=5, tgt_len=5), Context(mem_len=0), lambda n: n),
    "lstm": (dict(family="lstm", n_layer=2, d_inner=12), Context(mem_len=0), lambda n: 1),
    "qrnn": (dict(family="qrnn", n_layer=2, d_inner=12, qrnn_window=2), Context(mem_len=0), lambda n: 1),
    # Absolute positions counted from the chunk's end: not prefix-causal, so collected per (c, t).
    "xl-absolute-memory": (dict(pos_enc="vaswani"), Context(mem_len=4), lambda n: TGT_LEN),
}


@pytest.mark.parametrize("case", list(CASES))
def test_collected_losses_equal_the_literal_definition(case):
    overrides, context, segment = CASES[case]
    model = tiny_model(**overrides)
    tokens = token_stream()
    got = collect_losses(model, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=context, batch_size=3)
    model.set_context(context)
    want = reference_losses(model, tokens, GRID, targets_of(BLOCK_STARTS, BLOCK_LEN), segment)
    assert got.dtype == np.float32 and got.shape == (len(GRID), 2 * BLOCK_LEN)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.ptp(want, axis=0).min() > 1e-3  # context length matters for every target: the check has teeth


def test_a_sparse_grid_whose_middle_windows_serve_no_target_equals_the_definition():
    # Windows starting between t0 - 40 + 3 and t0 - 2 reach the block with neither 2 nor 40 tokens:
    # whole batches of them score nothing.
    model, context = tiny_model(), Context(mem_len=4, same_length=True)
    tokens, grid, blocks = token_stream(), (2, 40), (45,)
    model.set_context(context)
    want = reference_losses(model, tokens, grid, targets_of(blocks, BLOCK_LEN), lambda n: TGT_LEN)
    for method in ("window", "auto"):  # auto reads this sparse grid one window per (c, t), the cheaper way
        got = collect_losses(model, tokens, grid, blocks, BLOCK_LEN, tgt_len=TGT_LEN, context=context, batch_size=3, method=method)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_chunk_length_matters_only_without_same_length():
    tokens = token_stream()

    def collect(context, tgt_len):
        return collect_losses(tiny_model(), tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=tgt_len, context=context)

    same = Context(mem_len=4, same_length=True)
    np.testing.assert_allclose(collect(same, 4), collect(same, TGT_LEN), atol=1e-5)  # every query sees its last 4 keys
    full = Context(mem_len=4, same_length=False)
    assert np.abs(collect(full, 4) - collect(full, TGT_LEN)).max() > 1e-3  # keys seen depend on the chunk grid


def test_a_capped_model_stores_its_cap_loss_beyond_the_cap():
    model = tiny_model(**CASES["vanilla-capped"][0])
    assert context_lengths(GRID, model.max_context)[0].tolist() == [2, 4, 5]
    got = collect_losses(model, token_stream(), GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=5, context=Context(0))
    np.testing.assert_array_equal(got[2], got[3])  # l(6, t) = l(8, t) = l(5, t), computed once


def test_prefix_causality_probe():
    tokens = token_stream()
    for case in ("xl-memory", "vanilla-capped", "lstm", "qrnn"):
        overrides, context, _ = CASES[case]
        model = tiny_model(**overrides)
        model.set_context(context)
        assert is_prefix_causal(model, tokens, 8, TGT_LEN if context.mem_len else None), case
    absolute = tiny_model(pos_enc="vaswani")
    assert not is_prefix_causal(absolute, tokens, 8, TGT_LEN)


@pytest.mark.parametrize("move, causal_in", [(0.0, {"fp32", "bf16"}), (0.01, {"bf16"}), (0.1, set())])
def test_the_probe_allows_the_rounding_of_the_precision_it_reads_in(move, causal_in):
    """Windows of different lengths may round differently (other matmul kernels): bf16 moves a hidden state by a few
    of its rounding units (2^-7), which must not count as the future leaking in; a larger move must."""
    model = tiny_model()  # relative positions: prefix-causal
    # every state moves by ``move`` of its norm when the window's length is odd: full and cut reads differ by that
    model.register_forward_hook(lambda _m, _a, out: out._replace(hidden=out.hidden * (1 + move * (out.hidden.size(1) % 2))))
    found = set()
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), scoring_precision(precision, "cpu"):
            change, tolerance = prefix_change(model, token_stream(), 8, None)
        assert change == pytest.approx(move, rel=0.05, abs=1e-6)
        assert tolerance == (PREFIX_TOLERANCE if precision == "fp32" else 2 * 2**-7)
        if change <= tolerance:
            found.add(precision)
    assert found == causal_in


def test_absolute_positions_move_the_states_beyond_bf16_rounding():
    model = tiny_model(pos_enc="vaswani")
    with torch.no_grad(), scoring_precision("bf16", "cpu"):
        assert not is_prefix_causal(model, token_stream(), 8, TGT_LEN)  # chunks of 3
        change, tolerance = prefix_change(model, token_stream(), 8, None)
    assert change > 4 * tolerance  # a window of 8


def test_forcing_the_window_method_on_an_absolute_xl_is_not_exact():
    overrides, context, segment = CASES["xl-absolute-memory"]
    model = tiny_model(**overrides)
    tokens = token_stream()
    forced = collect_losses(model, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=context, method="window")
    model.set_context(context)
    want = reference_losses(model, tokens, GRID, targets_of(BLOCK_STARTS, BLOCK_LEN), segment)
    assert np.abs(forced - want).max() > 1e-3  # why 'auto' probes the model first


def test_placebo_replaces_the_extra_context_with_a_distant_span():
    model = tiny_model()
    context = Context(mem_len=4, same_length=True, clamp_len=3)
    tokens = token_stream()
    n, offsets = len(tokens), (40, 47)  # each block its own far spans
    got = collect_losses(model, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=context, batch_size=4, placebo=True, offsets=offsets)
    assert got.shape == (len(GRID) - 1, 2 * BLOCK_LEN)
    model.set_context(context)
    for j, (c, c2) in enumerate(zip(GRID, GRID[1:])):
        for i, t in enumerate(targets_of(BLOCK_STARTS, BLOCK_LEN)):
            far = (t - c2 + offsets[i // BLOCK_LEN]) % (n - (c2 - c))
            spliced = np.concatenate([tokens[far : far + c2 - c], tokens[t - c : t + 1]])  # [c2 + 1]: context, target
            want = reference_losses(model, spliced, (c2,), [c2], lambda n: TGT_LEN)[0, 0]
            assert got[j, i] == pytest.approx(want, abs=1e-5)
    # A model that sees only its last 5 tokens cannot tell the placebo from the truth beyond c = 5.
    vanilla = tiny_model(**CASES["vanilla-capped"][0])
    placebo = collect_losses(vanilla, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=5, context=Context(0), placebo=True, offsets=offsets)
    true = collect_losses(vanilla, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=5, context=Context(0))
    np.testing.assert_allclose(placebo[2], true[3], atol=1e-6)



COPY_VOCAB, COPY_GRID, COPY_STARTS, COPY_BLOCK, COPY_OFFSETS = 16, (2, 4, 6, 10), (60, 150), 16, (70, 101)


def copy_stream(n: int = 240) -> np.ndarray:
    """Random tokens with a 3-token motif every 8 tokens: within 10 tokens of context the motif repeats (the copying toy
    predicts it right), and a far span holds the current token or not, followed by the motif's next token or another."""
    tokens = np.random.default_rng(1).integers(0, COPY_VOCAB, n)
    for k in range(0, n - 3, 8):
        tokens[k : k + 3] = (3, 7, 11)
    return tokens.astype(np.uint16)


def copy_placebo_by_hand(tokens: np.ndarray, offsets) -> tuple[np.ndarray, np.ndarray]:
    """(losses [G-1, T], whether the far span holds the current token [G-1, T]) of the copying toy's placebo, from the
    definition: the c' - c tokens from (t - c' + offset) mod (n - (c' - c)), offset that of t's block, then the true
    x_{t-c} .. x_{t-1}, then x_t, scored by the hand computation."""
    n, targets = len(tokens), targets_of(COPY_STARTS, COPY_BLOCK)
    out = np.empty((len(COPY_GRID) - 1, len(targets)))
    holds = np.zeros(out.shape, dtype=bool)
    for j, (c, c2) in enumerate(zip(COPY_GRID, COPY_GRID[1:])):
        for i, t in enumerate(targets.tolist()):
            far = (t - c2 + offsets[i // COPY_BLOCK]) % (n - (c2 - c))
            distant = tokens[far : far + c2 - c]
            out[j, i] = copying_nll(np.concatenate([distant, tokens[t - c : t + 1]]), COPY_VOCAB)[-1]
            holds[j, i] = tokens[t - 1] in distant
    return out, holds


@pytest.mark.parametrize("method", ["naive", "window"])
def test_placebo_of_a_copying_model_is_its_hand_computation_after_each_blocks_far_span(method):
    """A model that reads far context (tests/copying_toy.py): its placebo losses, and its true ones, are the loss worked
    out by hand at 1e-5 nats; the far spans are each block's own, and one token off they would miss by whole nats."""
    tokens, model = copy_stream(), CopyingToy(COPY_VOCAB)
    read = dict(tgt_len=3, context=Context(mem_len=3), method=method, batch_size=8)  # chunks of 3, the state carried
    placebo = collect_losses(model, tokens, COPY_GRID, COPY_STARTS, COPY_BLOCK, placebo=True, offsets=COPY_OFFSETS, **read)
    want, holds = copy_placebo_by_hand(tokens, COPY_OFFSETS)
    assert holds.any() and not holds.all()  # some far spans hold the current token, some do not
    assert kinds_of(want, COPY_VOCAB) == set(outcomes(COPY_VOCAB))  # no earlier occurrence, copied right, copied wrong
    assert_hand_computed(placebo, want, copy_placebo_by_hand(tokens, [o + 1 for o in COPY_OFFSETS])[0])
    true = collect_losses(model, tokens, COPY_GRID, COPY_STARTS, COPY_BLOCK, **read)
    targets = targets_of(COPY_STARTS, COPY_BLOCK)
    by_hand = np.array([[copying_nll(tokens[t - c : t + 1], COPY_VOCAB)[-1] for t in targets.tolist()] for c in COPY_GRID])  # [G, T]
    assert kinds_of(by_hand, COPY_VOCAB) == set(outcomes(COPY_VOCAB))
    one_off = np.array([[copying_nll(tokens[t - c - 1 : t + 1], COPY_VOCAB)[-1] for t in targets.tolist()] for c in COPY_GRID])  # c + 1
    assert_hand_computed(true, by_hand, one_off)


def test_low_precision_and_bad_targets_are_refused():
    tokens = token_stream()
    with pytest.raises(TxlabError, match="float32 or better"):
        collect_losses(tiny_model().half(), tokens, GRID, [8], 2, tgt_len=TGT_LEN, context=Context(4))
    with pytest.raises(TxlabError, match="must lie in"):
        collect_losses(tiny_model(), tokens, GRID, [7], 2, tgt_len=TGT_LEN, context=Context(4))  # 7 - 8 < 0
    with pytest.raises(TxlabError, match="overlap"):
        collect_losses(tiny_model(), tokens, GRID, [8, 10], 5, tgt_len=TGT_LEN, context=Context(4))


def test_the_default_grid_is_the_papers():
    from txlab.drivers.recl.settings import PAPER_COLLECTION
    from txlab.measure.collection import parse_grid

    assert parse_grid(PAPER_COLLECTION["grid"]) == DEFAULT_GRID == (100, 200, 300, 400, 500, 600, 700, 800, 900, 1000)


def test_sample_blocks_is_deterministic_contiguous_and_in_range():
    starts = sample_blocks(10_000, 6, 100, min_start=1000, seed=1)
    assert starts.tolist() == sample_blocks(10_000, 6, 100, min_start=1000, seed=1).tolist()
    assert starts.tolist() != sample_blocks(10_000, 6, 100, min_start=1000, seed=2).tolist()
    assert starts.min() >= 1000 and starts.max() + 100 <= 10_000
    assert (np.diff(starts) >= 100).all() and ((starts - 1000) % 100 == 0).all()
    with pytest.raises(TxlabError, match="room for only 90 blocks"):
        sample_blocks(10_000, 91, 100, min_start=1000)


def test_a_refusal_to_draw_blocks_speaks_the_callers_unit():
    with pytest.raises(TxlabError, match="holds 179 tokens: room for only 0 blocks of 16 target tokens after the first 240 tokens"):
        sample_blocks(179, 2, 16, min_start=240)
    with pytest.raises(TxlabError, match="holds 179 words: room for only 0 blocks of 16 target words after the first 240 words"):
        sample_blocks(179, 2, 16, min_start=240, unit="word")


# --- run directories ---------------------------------------------------------------------------


def make_run(run_dir, family="lstm", seed=0):
    """An untrained run directory: a checkpoint of a tiny model on a small synthetic corpus."""
    data = DataConfig(corpus="synthetic-local", synthetic_tokens=600, synthetic_eval_tokens=600, synthetic_seed=seed)
    corpus = load_corpus(data, progress=False)
    model_cfg = ModelConfig(family=family, n_token=corpus.n_token, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=12,
                            tgt_len=TGT_LEN, mem_len=4, dropout=0.0)
    cfg = RunConfig(model=model_cfg, data=data)
    torch.manual_seed(0)
    save_checkpoint(run_dir, build_model(model_cfg), cfg, step=0, vocab_hash=corpus.vocab.sha256)
    return run_dir


@pytest.fixture
def scored_rows(monkeypatch):
    """Counts the (c, t) cells whose loss is computed (every scored row goes through reading.scored_nll)."""
    from txlab.measure import reading

    calls = {"rows": 0}
    original = reading.scored_nll

    def counting(model, hidden, targets):
        calls["rows"] += len(targets)
        return original(model, hidden, targets)

    monkeypatch.setattr(reading, "scored_nll", counting)
    return calls


COLLECTION = Collection("valid", GRID, blocks=3, block_len=4, seed=0)


def test_run_losses_are_computed_once_and_resume_block_by_block(tmp_path, scored_rows):
    run = make_run(tmp_path / "lstm")
    table = collect_run_losses(run, COLLECTION, progress=False)
    assert scored_rows["rows"] == len(GRID) * 3 * 4  # every (c, t) exactly once
    assert table.losses.shape == (len(GRID), 12) and table.targets.shape == (12,)
    assert np.array_equal(np.diff(table.targets.reshape(3, 4), axis=1), np.ones((3, 3)))  # contiguous blocks
    assert table.path.parent == run / "losses" and table.path.name.startswith("valid-")
    assert np.array_equal(load_losses(table.path).losses, table.losses)  # what was returned from memory is what was written
    meta = json.loads((table.path / "meta.json").read_text())
    assert meta["grid"] == list(GRID) and meta["method"] == "window" and meta["model_step"] == 0
    assert meta["token_stream_sha256"] == load_corpus(DataConfig(corpus="synthetic-local", synthetic_tokens=600,
                                                                 synthetic_eval_tokens=600), progress=False).token_stream_hash("valid")

    scored_rows["rows"] = 0
    assert np.array_equal(collect_run_losses(run, COLLECTION, progress=False).losses, table.losses)
    assert scored_rows["rows"] == 0  # nothing recomputed

    (table.path / "block-00001.npy").unlink()
    assert np.array_equal(collect_run_losses(run, COLLECTION, progress=False).losses, table.losses)
    assert scored_rows["rows"] == len(GRID) * 4  # only the missing block


def test_an_interrupted_collection_leaves_whole_blocks_and_resumes(tmp_path, monkeypatch):
    run = make_run(tmp_path / "lstm")
    original, calls = losses_mod.block_losses, {"n": 0}

    def dies_on_the_second_block(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(losses_mod, "block_losses", dies_on_the_second_block)
    with pytest.raises(KeyboardInterrupt):
        collect_run_losses(run, COLLECTION, progress=False)
    (directory,) = (run / "losses").iterdir()
    assert sorted(p.name for p in directory.iterdir()) == ["block-00000.npy", "meta.json"]  # no partial files
    with pytest.raises(TxlabError, match="incomplete"):
        load_group_losses([run])
    table = collect_run_losses(run, COLLECTION, progress=False)
    assert calls["n"] == 4  # blocks 1 and 2 only, on the rerun
    assert np.isfinite(table.losses).all()


def test_a_group_loads_for_recl_and_keeps_placebo(tmp_path):
    runs = [make_run(tmp_path / "xl", "xl"), make_run(tmp_path / "lstm", "lstm")]
    group = collect_group_losses(runs, replace(COLLECTION, placebo=True), progress=False)
    assert group.models == ["xl", "lstm"] and group.losses.shape == (2, len(GRID), 12)
    assert group.placebo.shape == (2, len(GRID) - 1, 12)
    assert group.caps == {"xl": None, "lstm": None}
    results = recl(group.losses, group.grid, group.models, r=1.0, caps=group.caps)
    assert [res.model for res in results] == ["xl", "lstm"]
    again = load_group_losses(runs)
    assert np.array_equal(again.losses, group.losses)


def test_a_group_that_saw_different_token_streams_is_refused(tmp_path, scored_rows):
    same = make_run(tmp_path / "a")
    other = make_run(tmp_path / "b", seed=1)  # another synthetic sample: another valid stream
    collect_run_losses(same, COLLECTION, progress=False)
    collect_run_losses(other, COLLECTION, progress=False)
    with pytest.raises(TxlabError, match=r"b was scored on another token stream"):
        load_group_losses([same, other])
    scored_rows["rows"] = 0
    with pytest.raises(TxlabError, match=r"b reads another valid token stream"):
        collect_group_losses([same, other], replace(COLLECTION, seed=5), progress=False)
    assert scored_rows["rows"] == 0  # refused before running any model


def test_changed_settings_are_not_mixed_into_a_collection(tmp_path):
    run = make_run(tmp_path / "lstm")
    table = collect_run_losses(run, COLLECTION, progress=False)
    meta = json.loads((table.path / "meta.json").read_text())
    meta["model_step"] = 7
    (table.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TxlabError, match="model_step"):
        collect_run_losses(run, COLLECTION, progress=False)


# --- placebo by windows, the method by cost ----------------------------------------------------------------

UNIFORM, TWO_STEPS = (2, 4, 6, 8, 10), (2, 4, 6, 12, 18)
STARTS, BLOCK_LEN = (20, 60), 12  # enough targets that the window method is the cheaper one for every group


def placebo_both_ways(model, context, tgt_len, grid, monkeypatch):
    """(by windows, one window per (c, t), calls of the window path) on two blocks of a 130-token stream."""
    tokens = token_stream(130)
    calls = []
    window = losses_mod.window_placebo_losses
    monkeypatch.setattr(losses_mod, "window_placebo_losses", lambda *a, **k: calls.append(a[3]) or window(*a, **k))
    chunk_len = losses_mod.chunk_length(model, tgt_len)
    steps = list(zip(grid, grid[1:]))
    with scoring(model, context):
        fast = [placebo_block_losses(model, tokens, grid, s, s + BLOCK_LEN, chunk_len, 5, "window", len(tokens) // 2) for s in STARTS]
        slow = [naive_placebo_losses(model, tokens, steps, s, s + BLOCK_LEN, chunk_len, 5, len(tokens) // 2) for s in STARTS]
    return np.concatenate(fast, axis=1), np.concatenate(slow, axis=1), calls


@pytest.mark.parametrize("grid", [UNIFORM, TWO_STEPS], ids=["uniform", "two-steps"])
@pytest.mark.parametrize("case", ["xl-memory", "xl-memory-full-length", "xl-no-recurrence", "lstm", "vanilla-capped"])
def test_placebo_by_windows_equals_one_window_per_c_t(case, grid, monkeypatch):
    overrides, context, _ = CASES[case]
    model = tiny_model(**overrides)
    fast, slow, calls = placebo_both_ways(model, context, overrides.get("tgt_len", TGT_LEN), grid, monkeypatch)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5)
    assert np.abs(np.diff(slow, axis=0)).max() > 1e-2  # the steps' contexts differ: the comparison can fail
    groups, alone = placebo_groups(grid, model.max_context)
    assert sorted(calls) == sorted(list(groups) * len(STARTS))  # every group of one step size was read by windows, in each block
    assert bool(alone) == (case == "vanilla-capped")  # steps past the cap are read one window per (c, t)


@pytest.mark.parametrize("grid", [UNIFORM, TWO_STEPS], ids=["uniform", "two-steps"])
def test_placebo_by_windows_is_exact_for_a_hugging_face_gpt2(tmp_path, random_causal_lm, grid, monkeypatch):
    from txlab.models import hf

    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / 'gpt2', 'gpt2', vocab=N_TOKEN, positions=32)}")
    fast, slow, calls = placebo_both_ways(model, Context(mem_len=0), 4, grid, monkeypatch)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=2e-5)
    assert np.abs(np.diff(slow, axis=0)).max() > 1e-2
    assert sorted(calls) == sorted(list(placebo_groups(grid)[0]) * len(STARTS))


def test_a_model_that_is_not_prefix_causal_reads_its_placebo_one_window_per_c_t(monkeypatch):
    overrides, context, _ = CASES["xl-absolute-memory"]
    monkeypatch.setattr(losses_mod, "window_placebo_losses", None)  # would fail if called
    tokens = token_stream(130)
    got = collect_losses(tiny_model(**overrides), tokens, UNIFORM, STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=context, placebo=True)
    assert got.shape == (len(UNIFORM) - 1, 2 * BLOCK_LEN)


@pytest.mark.parametrize("collection", [Collection("valid", (20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 220, 240), 8, 250, placebo=True),
                                        Collection("valid", tuple(range(100, 1001, 100)), 100, 500, placebo=True),
                                        Collection("valid", (8, 16, 24, 32), 2, 50, placebo=True)],
                         ids=["cpu", "paper", "tiny"])
def test_placebo_costs_at_most_the_main_table_on_a_uniform_grid(collection):
    assert collection.placebo_token_steps() <= collection.token_steps()
    naive = collection.n_targets * sum(collection.grid[1:])
    assert collection.placebo_token_steps() < naive  # what one window per (c, t) cost


def test_the_placebo_token_steps_are_what_the_model_reads(monkeypatch):
    model, context = tiny_model(), Context(mem_len=4, same_length=True)
    fed = {"n": 0}
    model.register_forward_pre_hook(lambda module, inputs: fed.update(n=fed["n"] + inputs[0].numel()))
    tokens = token_stream(130)
    read = {}
    for placebo in (False, True):
        fed["n"] = 0
        collect_losses(model, tokens, UNIFORM, STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=context, placebo=placebo, batch_size=1)
        read[placebo] = fed["n"] - TGT_LEN * 2 + 1  # less the prefix-causality probe (a chunk and the chunk but its last token)
    c = Collection("valid", UNIFORM, len(STARTS), BLOCK_LEN, placebo=True)
    assert (read[True], read[False]) == (c.placebo_token_steps(), c.token_steps())  # one window at a time: counted exactly
    assert read[True] <= read[False]


def test_auto_picks_the_method_that_reads_fewer_token_steps(monkeypatch):
    # Each window is read to its own longest needed context, so the window method never reads more than one window per
    # (c, t): as much where every gap of the grid is at least the block (each window then serves one target), less elsewhere.
    sparse, dense = Collection("valid", (64, 1024, 4096), 4, 50), Collection("valid", tuple(range(64, 1025, 64)), 4, 500)
    assert sparse.main_method() == dense.main_method() == "window"
    assert sparse.token_steps() == replace(sparse, method="naive").token_steps() == 4 * 50 * (64 + 1024 + 4096)
    assert dense.token_steps() == 4 * (500 * 1024 + 64 * sum(range(64, 1024, 64))) < replace(dense, method="naive").token_steps()
    tokens, lengths = token_stream(), np.array([2, 40])
    probed = []
    probe = losses_mod.is_prefix_causal
    monkeypatch.setattr(losses_mod, "is_prefix_causal", lambda *a, **k: probed.append(1) or probe(*a, **k))
    assert choose_method(tiny_model(), tokens[: lengths[-1]], lengths, TGT_LEN, "auto", block_len=3) == "window" and probed  # a tie: the window method
    assert choose_method(tiny_model(), tokens[: GRID[-1]], np.array(GRID), TGT_LEN, "auto", block_len=5) == "window"
    assert choose_method(tiny_model(pos_enc="vaswani"), tokens[: GRID[-1]], np.array(GRID), TGT_LEN, "auto", block_len=5) == "naive"  # not prefix-causal
    assert choose_method(tiny_model(), tokens[: lengths[-1]], lengths, TGT_LEN, "window", block_len=3) == "window"  # asked


def test_a_table_begun_before_placebo_windows_resumes_as_it_began(tmp_path, monkeypatch):
    run = make_run(tmp_path / "lstm")
    collection = replace(COLLECTION, placebo=True)
    table = collect_run_losses(run, collection, progress=False)
    assert table.meta["method"] == "window" and table.meta["placebo_method"] == "window"
    meta = json.loads((table.path / "meta.json").read_text())
    del meta["placebo_method"]  # as every table written before placebo windows
    meta["method"] = "naive"  # and as one begun when auto chose otherwise
    (table.path / "meta.json").write_text(json.dumps(meta))
    (table.path / "placebo-00001.npy").unlink()
    (table.path / "block-00002.npy").unlink()
    used = []
    for name in ("window_placebo_losses", "naive_placebo_losses", "window_block_losses", "naive_block_losses"):
        real = getattr(losses_mod, name)
        monkeypatch.setattr(losses_mod, name, lambda *a, _real=real, _name=name, **k: used.append(_name) or _real(*a, **k))
    again = collect_run_losses(run, collection, progress=False)
    assert sorted(set(used)) == ["naive_block_losses", "naive_placebo_losses"]  # the methods the table began with
    np.testing.assert_allclose(again.losses, table.losses, atol=1e-5)
    np.testing.assert_allclose(again.placebo, table.placebo, atol=1e-5)
    assert "placebo_method" not in json.loads((table.path / "meta.json").read_text())  # meta.json is left as it was
    with pytest.raises(Exception, match="method"):
        collect_run_losses(run, replace(collection, method="window"), progress=False)  # a method asked must match


def test_placebo_groups_split_steps_by_size_and_cap():
    assert placebo_groups(TWO_STEPS) == ({2: (2, 4), 6: (6, 12)}, ())
    assert placebo_groups(TWO_STEPS, max_context=6) == ({2: (2, 4)}, (2, 3))


def test_the_plan_says_which_method_and_what_the_other_would_read():
    from txlab.drivers.recl.plan import method_words

    sparse, dense = Collection("valid", (64, 1024, 4096), 4, 50), Collection("valid", tuple(range(64, 1025, 64)), 4, 500)
    assert method_words(sparse) == ("by the window method (auto: one window per (c, t) would read 1.0M, and reads any member that is "
                                    "not prefix-causal)")  # as much: every gap of the grid is at least the block
    assert method_words(dense).startswith("by the window method (auto: one window per (c, t) would read 17.4M")
    assert method_words(replace(sparse, method="window")) == "by the window method (as asked)"


def exact_at_own_contexts(model, tokens, grid, block_starts, block_len, runs, segment, placebo_offset=None):
    """The definition at each strided target's own context: target t_first + i of a run (runs[j] targets from each
    block's start) after grid[j] + i tokens; with ``placebo_offset``, the exact placebo (one window per (c, t)) of the
    step grid[j] + i -> grid[j+1] + i instead."""
    targets = targets_of(block_starts, block_len)
    offsets = [np.tile(np.arange(block_len) % r, len(block_starts)) for r in runs]  # [T] each target's i, per c
    if placebo_offset is None:
        own = sorted({c + i for c, off in zip(grid, offsets) for i in off})
        ref = reference_losses(model, tokens, own, targets, segment)  # [len(own), T]
        return np.stack([ref[[own.index(c + i) for i in off], np.arange(len(targets))] for c, off in zip(grid, offsets)])
    rows = []
    for c, c2, off in zip(grid, grid[1:], offsets):
        row = np.empty(len(targets), dtype=np.float32)
        for k, start in enumerate(block_starts):
            for i in range(block_len):
                t = start + i
                row[k * block_len + i] = naive_placebo_losses(model, tokens, [(c + off[i], c2 + off[i])], t, t + 1, TGT_LEN if model.context.mem_len else None,
                                                              1, placebo_offset)[0, 0]
        rows.append(row)
    return np.stack(rows)


@pytest.mark.parametrize(("case", "stride"), [("xl-memory", 3), ("xl-no-recurrence", 0.5)])
def test_a_strided_loss_is_the_exact_loss_at_its_own_context(case, stride):
    """Runs of s targets, each read once from c tokens before its first: target t_first + i is scored after exactly
    c + i tokens (with Transformer-XL's memory, chunked from the run's start as the definition chunks it), and its
    placebo is the exact placebo of the step c + i -> c' + i."""
    overrides, context, segment = CASES[case]
    model, tokens, grid = tiny_model(**overrides), token_stream(), (2, 4, 8)
    blocks, block_len = (12,), 7  # runs of 3: 3 + 3 + 1 targets, the last run shorter; 8 + 3 tokens before the first
    kwargs = dict(tgt_len=TGT_LEN, context=context, batch_size=2, stride=stride)
    got = collect_losses(model, tokens, grid, blocks, block_len, **kwargs)
    placebo = collect_losses(model, tokens, grid, blocks, block_len, placebo=True, offsets=[20], **kwargs)
    runs = [Collection("valid", grid, 1, block_len, stride=stride).stride_at(c) for c in grid]
    assert runs == ([3, 3, 3] if stride == 3 else [1, 2, 4])
    model.set_context(context)
    with torch.no_grad():
        np.testing.assert_allclose(got, exact_at_own_contexts(model, tokens, grid, blocks, block_len, runs, segment), rtol=0, atol=1e-5)
        np.testing.assert_allclose(placebo, exact_at_own_contexts(model, tokens, grid, blocks, block_len, runs, segment, placebo_offset=20),
                                   rtol=0, atol=1e-5)
    exact = collect_losses(model, tokens, grid, blocks, block_len, tgt_len=TGT_LEN, context=context)
    assert np.abs(got - exact)[:, 1::3].max() > 1e-3  # a later target of a run reads more than c tokens: the check has teeth


def test_strides_that_make_no_sense_are_refused():
    for bad in (0, -4, 1.5, -0.25, True):
        with pytest.raises(TxlabError, match="a stride is a whole number of tokens"):
            Collection("valid", GRID, 2, 5, stride=bad)
    with pytest.raises(TxlabError, match="not defined in words"):
        Collection("valid", GRID, 2, 5, unit="word", stride=4)
    with pytest.raises(TxlabError, match="its own method"):
        Collection("valid", GRID, 2, 5, method="window", stride=4)
    assert Collection("valid", (100, 200), 2, 5, stride=0.25).stride_at(200) == 50 and Collection("valid", GRID, 2, 5, stride=0.01).stride_at(2) == 1
    tokens = token_stream()
    absolute = tiny_model(pos_enc="vaswani")  # positions counted from a chunk's end: not prefix-causal
    with pytest.raises(TxlabError, match="only a prefix-causal model"):
        collect_losses(absolute, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=TGT_LEN, context=Context(mem_len=4), stride=2)
    capped, vanilla = tiny_model(family="vanilla", pos_enc="alrfou", max_len=8, tgt_len=8), Context(mem_len=0)
    # the main table stays within the cap (runs shrink near it): at c = 8 every target is read alone, exactly
    got = collect_losses(capped, tokens, (2, 8), BLOCK_STARTS, BLOCK_LEN, tgt_len=8, context=vanilla, stride=3)
    exact = collect_losses(capped, tokens, (2, 8), BLOCK_STARTS, BLOCK_LEN, tgt_len=8, context=vanilla)
    np.testing.assert_allclose(got[1], exact[1], rtol=0, atol=1e-5)
    with pytest.raises(TxlabError, match="placebo=false"):  # a placebo window of 8 + 3 - 1 tokens would pass the cap of 8
        collect_losses(capped, tokens, (2, 8), BLOCK_STARTS, BLOCK_LEN, tgt_len=8, context=vanilla, stride=3, placebo=True)


def test_scored_cells_bring_back_every_batch_once_into_its_own_cells():
    from txlab.measure.reading import ScoredCells, target_nll, to_device

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=11, tgt_len=4, mem_len=0)).eval()
    hidden = torch.randn(2, 3, 8)  # [B, L, d]
    scored = ScoredCells((2, 3))
    with torch.inference_mode():
        scored.add(model, hidden, np.array([0, 1, 1]), np.array([2, 0, 1]), (np.array([0, 0, 1]), np.array([0, 2, 1])), np.array([3, 4, 5]))
        with pytest.raises(AssertionError, match="scored twice"):
            scored.add(model, hidden, np.array([0]), np.array([0]), (np.array([0]), np.array([2])), np.array([6]))
        with pytest.raises(AssertionError, match="never scored"):
            scored.table()
        scored.add(model, hidden, np.array([0, 0, 1]), np.array([0, 1, 2]), (np.array([0, 1, 1]), np.array([1, 0, 2])), np.array([7, 8, 9]))
        table = scored.table()
        # each cell holds the loss of its own row and target, as target_nll scores that row alone
        rows = {(0, 0): (0, 2, 3), (0, 2): (1, 0, 4), (1, 1): (1, 1, 5), (0, 1): (0, 0, 7), (1, 0): (0, 1, 8), (1, 2): (1, 2, 9)}
        for (c, t), (b, position, target) in rows.items():
            assert table[c, t] == pytest.approx(target_nll(model, hidden[b, position][None], np.array([target]))[0], rel=1e-6)
    source = np.arange(6).reshape(2, 3)
    copied = to_device(source[:, ::2], "cpu")  # a strided view is copied, not shared
    source[:] = -1
    assert copied.tolist() == [[0, 2], [3, 5]] and copied.dtype == torch.int64
