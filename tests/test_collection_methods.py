"""How a loss collection is computed: placebo losses by the window method, exact against one window per (c, t);
the method chosen by cost; tables begun by an earlier version resume with the methods they were begun with."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from txlab.measure import losses as losses_mod
from txlab.measure.collection import Collection, placebo_groups
from txlab.measure.losses import choose_method, collect_losses, collect_run_losses, naive_placebo_losses, placebo_block_losses, scoring
from txlab.models.interface import Context

from test_losses import CASES, COLLECTION, GRID, N_TOKEN, TGT_LEN, make_run, tiny_model, token_stream

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
        fast = [placebo_block_losses(model, tokens, grid, s, s + BLOCK_LEN, chunk_len, 5, "window") for s in STARTS]
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
    sparse, dense = Collection("valid", (64, 1024, 4096), 4, 50), Collection("valid", tuple(range(64, 1025, 64)), 4, 500)
    assert sparse.main_method() == "naive" and dense.main_method() == "window"
    assert sparse.token_steps() == 4 * 50 * (64 + 1024 + 4096)
    assert replace(sparse, method="window").token_steps() == 4 * (50 * 4096 + 4032 * 4159 // 2)  # a method asked is counted as asked
    tokens, lengths = token_stream(), np.array([2, 40])
    probed = []
    probe = losses_mod.is_prefix_causal
    monkeypatch.setattr(losses_mod, "is_prefix_causal", lambda *a, **k: probed.append(1) or probe(*a, **k))
    assert choose_method(tiny_model(), tokens, lengths, TGT_LEN, "auto", block_len=3) == "naive" and not probed  # sparse: no probe needed
    assert choose_method(tiny_model(), tokens, np.array(GRID), TGT_LEN, "auto", block_len=5) == "window" and probed
    assert choose_method(tiny_model(pos_enc="vaswani"), tokens, np.array(GRID), TGT_LEN, "auto", block_len=5) == "naive"  # not prefix-causal
    assert choose_method(tiny_model(), tokens, lengths, TGT_LEN, "window", block_len=3) == "window"  # asked


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
    assert method_words(sparse) == "one window per (c, t) (auto: the window method would read 34.4M)"
    assert method_words(dense).startswith("by the window method (auto: one window per (c, t) would read 17.4M")
    assert method_words(replace(sparse, method="window")) == "by the window method (as asked)"
