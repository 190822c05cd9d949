"""Attention capture (txlab.models.transformer.capture_attention) and the Appendix D analysis (txlab.measure.attention)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from txlab.cli import app
from txlab.config import ModelConfig, load_config, save_config
from txlab.errors import TxlabError
from txlab.measure.attention import _read_sample, attention_analysis, by_distance, model_in_words, redraw_attention
from txlab.models.interface import Context
from txlab.models.attention import (
    AbsoluteAttention,
    LearnedRelativeAttention,
    LearnedRelativePositions,
    RelativeSinusoidAttention,
    RelativeSinusoidPositions,
    attention_mask,
    relative_distances,
    sinusoid,
)
from txlab.models.transformer import Block, RecomputedMemory, build_transformer, capture_attention
from txlab.runs.checkpoint import load_checkpoint

runner = CliRunner()


@pytest.fixture
def unrendered(monkeypatch):
    """Skip drawing the figures (about a second each on a loaded 2-core machine); list the ones asked for."""
    asked = []

    def save_figure(fig, path):
        plt.close(fig)
        asked.append(path.name)
        return [path]

    monkeypatch.setattr("txlab.measure.attention.save_figure", save_figure)
    return asked


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(n_token=37, n_layer=2, d_model=6, n_head=2, d_head=3, d_inner=12, tgt_len=4, mem_len=4, dropout=0.0)
    return ModelConfig(**{**base, **kw})


ATTENTION_SETS = ("data.synthetic_eval_tokens=3000",)  # a valid split long enough for a few hundred queries


def zero_queries(model) -> None:
    """Every score term becomes 0: attention is uniform over the keys a query may see."""
    with torch.no_grad():
        for block in model.blocks:
            inner = block.attn.n_head * block.attn.d_head
            block.attn.qkv_net.weight[:inner] = 0
        model.u.zero_()
        model.v.zero_()


def _record_one(attn, window, n_query, mask, positions):
    attn.records = []
    n_mem = window.size(1) - n_query
    out = Block(attn, nn.Identity())(window[:, n_mem:], RecomputedMemory(window[:, :n_mem]), mask, positions)  # the attention sub-layer alone
    (record,) = attn.records
    attn.records = None
    return out, record


def _projections(attn, window, n_query):
    batch, n_keys, _ = window.shape
    H, Dh = attn.n_head, attn.d_head
    w_q, w_k, w_v = attn.qkv_net.weight.split(H * Dh)
    q = (window[:, -n_query:] @ w_q.T).view(batch, n_query, H, Dh)
    k = (window @ w_k.T).view(batch, n_keys, H, Dh)
    v = (window @ w_v.T).view(batch, n_keys, H, Dh)
    return q, k, v


# --- the capture path ---------------------------------------------------------------------------


def test_recorded_probabilities_sum_to_one_and_are_the_ones_the_layer_used():
    torch.manual_seed(1)
    attn = RelativeSinusoidAttention(tiny_cfg()).double().eval()
    n_query, n_mem = 3, 4
    n_keys = n_query + n_mem
    window = torch.randn(2, n_keys, 6, dtype=torch.float64)
    mask = attention_mask(n_query, n_mem, 0, torch.float64)
    r = sinusoid(relative_distances(n_keys, 0).double(), 6)
    u, v = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    out, record = _record_one(attn, window, n_query, mask, RelativeSinusoidPositions(u, v, attn.position_keys(r)))

    assert record.probs.shape == (2, 2, n_query, n_keys)
    torch.testing.assert_close(record.probs.sum(-1), torch.ones(2, 2, n_query, dtype=torch.float64))
    assert (record.probs[..., ~torch.isfinite(mask)] == 0).all()  # future keys get nothing
    # The layer's output rebuilt from the recorded probabilities: they are the ones it used.
    _, _, values = _projections(attn, window, n_query)
    mixed = torch.einsum("bhtk,bkhd->bthd", record.probs, values).reshape(2, n_query, 6)
    rebuilt = attn.layer_norm(window[:, -n_query:] + attn.o_net(mixed))
    torch.testing.assert_close(rebuilt, out, rtol=1e-10, atol=1e-10)


def test_four_terms_match_their_definitions_and_add_up_to_the_score():
    torch.manual_seed(2)
    attn = RelativeSinusoidAttention(tiny_cfg()).double().eval()
    n_query, n_mem, clamp_len = 3, 4, 5
    n_keys = n_query + n_mem
    window = torch.randn(2, n_keys, 6, dtype=torch.float64)
    mask = attention_mask(n_query, n_mem, 0, torch.float64)
    r = sinusoid(relative_distances(n_keys, clamp_len).double(), 6)
    u, v = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    _, record = _record_one(attn, window, n_query, mask, RelativeSinusoidPositions(u, v, attn.position_keys(r)))

    visible = torch.isfinite(mask).expand_as(record.scores)
    total = sum(record.terms[t] for t in "abcd") + mask
    torch.testing.assert_close(total[visible], record.scores[visible], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(record.scores.softmax(-1), record.probs)

    q, k, _ = _projections(attn, window, n_query)
    w_r = attn.r_net.weight.view(2, 3, 6)  # [H, Dh, d]
    scale = 1 / math.sqrt(3)
    for b, h, i in np.ndindex(2, 2, n_query):
        for j in range(n_mem + i + 1):
            distance = min(n_mem + i - j, clamp_len)
            r_ij = w_r[h] @ sinusoid(torch.tensor([float(distance)], dtype=torch.float64), 6)[0]  # W_{k,R} R_{i-j}
            want = {"a": q[b, i, h] @ k[b, j, h], "b": q[b, i, h] @ r_ij, "c": u[h] @ k[b, j, h], "d": v[h] @ r_ij}
            for term, value in want.items():
                assert record.terms[term][b, h, i, j].item() == pytest.approx(scale * value.item(), abs=1e-12), (term, b, h, i, j)


def test_shaw_has_terms_a_and_b_that_add_up_to_the_score():
    torch.manual_seed(3)
    n_dist = 3
    attn = LearnedRelativeAttention(tiny_cfg(), n_dist).double().eval()
    assert attn.terms == ("a", "b")
    n_query, n_mem = 3, 3
    window = torch.randn(2, n_query + n_mem, 6, dtype=torch.float64)
    mask = attention_mask(n_query, n_mem, 0, torch.float64)
    _, record = _record_one(attn, window, n_query, mask, LearnedRelativePositions(attn.position_keys(relative_distances(n_query + n_mem, 0))))
    visible = torch.isfinite(mask).expand_as(record.scores)
    torch.testing.assert_close((record.terms["a"] + record.terms["b"] + mask)[visible], record.scores[visible])
    q, _, _ = _projections(attn, window, n_query)
    # Query 2 (window position 5) against key 0: distance 5, beyond the table, shares row n_dist-1.
    want = q[1, 2, 0] @ attn.rel_emb[n_dist - 1, 0] / math.sqrt(3)
    assert record.terms["b"][1, 0, 2, 0].item() == pytest.approx(want.item(), abs=1e-12)


def _attention_of(scheme: str):
    """One attention layer of ``scheme`` (float64, random weights) and its positional inputs for a window of 7 keys."""
    torch.manual_seed(4)
    n_keys, cfg = 7, tiny_cfg()
    if scheme == "ours":
        attn = RelativeSinusoidAttention(cfg).double().eval()
        u, v = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
        return attn, RelativeSinusoidPositions(u, v, attn.position_keys(sinusoid(relative_distances(n_keys, 0).double(), 6)))
    if scheme == "shaw":
        attn = LearnedRelativeAttention(cfg, 4).double().eval()
        return attn, LearnedRelativePositions(attn.position_keys(relative_distances(n_keys, 0)))
    return AbsoluteAttention(cfg).double().eval(), None


@pytest.mark.parametrize("kernel", ["unfused", "sdpa"])
@pytest.mark.parametrize("scheme", ["ours", "shaw", "absolute"])
def test_records_observe_the_one_score_of_training_and_of_inference(scheme, kernel):
    """Training (gradients on) and inference run different kernels on the score of score_terms; the records of both
    are the same, and the probabilities of each rebuild the output that path computed."""
    attn, positions = _attention_of(scheme)
    attn.attn_kernel = kernel
    n_query, n_mem = 3, 4
    window = torch.randn(2, n_query + n_mem, 6, dtype=torch.float64)
    mask = attention_mask(n_query, n_mem, 2, torch.float64)  # same_length: some memory keys masked too
    runs = {}
    for gradients in (True, False):
        with torch.set_grad_enabled(gradients):
            out, record = _record_one(attn, window, n_query, mask, positions)
        runs[gradients] = out.detach(), record
        _, _, values = _projections(attn, window, n_query)
        mixed = torch.einsum("bhtk,bkhd->bthd", record.probs, values).reshape(2, n_query, 6)
        torch.testing.assert_close(attn.layer_norm(window[:, -n_query:] + attn.o_net(mixed)), out, rtol=1e-10, atol=1e-10)
    (trained, in_training), (inferred, in_inference) = runs[True], runs[False]
    torch.testing.assert_close(inferred, trained, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(in_inference.probs, in_training.probs, rtol=1e-12, atol=1e-12)
    visible = torch.isfinite(mask).expand_as(in_training.scores)
    torch.testing.assert_close(in_inference.scores[visible], in_training.scores[visible], rtol=1e-12, atol=1e-12)
    assert set(in_training.terms) == set(in_inference.terms) == set(attn.terms)
    for term in attn.terms:
        torch.testing.assert_close(in_inference.terms[term], in_training.terms[term], rtol=1e-12, atol=1e-12)
    if attn.terms:
        total = sum(in_training.terms.values()) + mask
        torch.testing.assert_close(total[visible], in_training.scores[visible], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pos_enc", ["ours", "shaw", "vaswani", "alrfou"])
def test_capture_leaves_the_losses_unchanged_and_records_every_layer(pos_enc):
    torch.manual_seed(0)
    model = build_transformer(tiny_cfg(pos_enc=pos_enc, d_model=16, n_head=2, d_head=8, max_len=16)).eval()
    model.set_context(Context(mem_len=6, same_length=True))
    tokens = torch.randint(0, 37, (2, 10))
    with torch.no_grad():
        first = model(tokens[:, :5], model.init_state(2), tokens[:, 1:6])
        plain = model(tokens[:, 5:9], first.state, tokens[:, 6:10]).nll
        with capture_attention(model) as records:
            captured = model(tokens[:, 5:9], first.state, tokens[:, 6:10]).nll
        after = model(tokens[:, 5:9], first.state, tokens[:, 6:10]).nll
    assert torch.equal(plain, captured) and torch.equal(plain, after)
    assert [len(layer) for layer in records] == [1, 1]
    record = records[1][0]
    assert record.probs.shape == (2, 2, 4, 9)  # 5 memory rows + 4 queries
    torch.testing.assert_close(record.probs.sum(-1), torch.ones(2, 2, 4))
    assert set(record.terms) == set(model.blocks[0].attn.terms)
    assert all(block.attn.records is None for block in model.blocks)


def test_by_distance_sums_each_query_by_its_distance_to_the_key():
    # One head, two queries at window positions 1 and 2 of a 3-key window.
    probs = torch.tensor([[[[0.25, 0.75, 0.0], [0.5, 0.3, 0.2]]]])  # [B=1, H=1, T=2, K=3]
    got = by_distance(probs)
    # distance 0: 0.75 (q1->k1) + 0.2 (q2->k2); distance 1: 0.25 + 0.3; distance 2: 0.5
    torch.testing.assert_close(got, torch.tensor([[0.95, 0.55, 0.5]], dtype=torch.float64))


# --- the analysis and its command ---------------------------------------------------------------


def test_uniform_attention_gives_one_over_the_window_at_every_distance(tmp_path, unrendered, untrained_run):
    run = untrained_run(tmp_path / "uniform", sets=ATTENTION_SETS, prepare=zero_queries)
    result = attention_analysis(run, n_targets=200, out_dir=tmp_path / "fig", progress=False)
    target = tmp_path / "fig" / "uniform"
    assert result["mem_len"] == 32 and result["same_length"] and result["queries"] >= 200
    fig5 = pd.read_csv(target / "figure5.csv")
    probs = fig5.filter(regex=r"^d\d+$").to_numpy()
    # same_length: every query sees exactly mem_len keys, all equally (every score term is 0).
    assert probs.shape == (2 * 2, 32)
    np.testing.assert_allclose(probs, 1 / 32, rtol=1e-6)
    np.testing.assert_allclose(fig5["mean_distance"], 15.5, rtol=1e-6)
    fig7 = pd.read_csv(target / "figure7.csv")
    assert sorted(set(fig7["term"])) == ["a", "b", "d"]
    np.testing.assert_allclose(fig7.filter(regex=r"^d\d+$").to_numpy(), 1 / 32, rtol=1e-6)


def test_analysis_of_a_random_model_writes_normalised_tables_and_figures_its_tables_draw_again(tmp_path, untrained_run, cli, request):
    # one analysis for both checks: drawing its figures takes seconds
    run = untrained_run(tmp_path / "xl", sets=ATTENTION_SETS)
    save_config(load_checkpoint(run).config, run / "config.yaml")  # as training writes it: the titles read it
    result = attention_analysis(run, n_targets=100, heads=2, sample_rows=5, out_dir=tmp_path / "fig", progress=False)
    target = tmp_path / "fig" / "xl"
    for name in ("figure5", "figure6", "figure7"):
        assert (target / f"{name}.png").stat().st_size > 0 and (target / f"{name}.pdf").stat().st_size > 0
    # Figure 7's three term panels sit two to a row, not in one strip many times wider than high
    width, height = plt.imread(target / "figure7.png").shape[1::-1]
    assert width < 3 * height
    fig5 = pd.read_csv(target / "figure5.csv")
    np.testing.assert_allclose(fig5.filter(regex=r"^d\d+$").sum(axis=1), 1, rtol=1e-6)
    spans = {(h["layer"], h["head"]): h["mean_distance"] for h in result["heads"]}
    assert [tuple(w.values())[:2] for w in result["widest"]] == sorted(spans, key=spans.get, reverse=True)[:2]
    fig6 = pd.read_csv(target / "figure6.csv")
    assert len(fig6) == 2 * 5
    np.testing.assert_allclose(fig6.filter(regex=r"^d\d+$").sum(axis=1), 1, rtol=1e-5)
    context = pd.read_csv(target / "figure6_context.csv", keep_default_na=False)
    assert set(fig6["query_position"]) <= set(context["position"])
    assert json.loads((target / "attention.json").read_text())["queries"] == result["queries"]

    # drawn again from the tables alone, the figures are the analysis figures, byte for byte: compared as PNG,
    # so the redraw renders no PDF (a quarter of this test's time); the analysis above wrote and checked them
    request.getfixturevalue("png_only")
    shutil.copytree(target, tmp_path / "copy" / "xl", ignore=shutil.ignore_patterns("*.png", "*.pdf"))
    again = redraw_attention(run, out_dir=tmp_path / "copy")
    assert [Path(f).name for f in again["files"]] == [f"figure{n}.{ext}" for n in (5, 6, 7) for ext in ("png", "pdf")]
    for name in ("figure5.png", "figure6.png", "figure7.png"):
        assert (tmp_path / "copy" / "xl" / name).read_bytes() == (target / name).read_bytes(), name
    (tmp_path / "copy" / "xl" / "attention.json").unlink()
    assert "no attention.json in" in cli.refused("attention", run, "--from-csv", "--out-dir", tmp_path / "copy")
    (run / "config.yaml").unlink()
    assert "has no config.yaml" in cli.refused("attention", run, "--from-csv", "--out-dir", tmp_path / "fig")


def test_figure6_read_back_from_its_tables_puts_each_probability_at_its_key(tmp_path, unrendered, untrained_run):
    run = untrained_run(tmp_path / "uniform", sets=ATTENTION_SETS, prepare=zero_queries)
    result = attention_analysis(run, n_targets=200, heads=2, sample_rows=5, out_dir=tmp_path / "fig", progress=False)
    panels = _read_sample(tmp_path / "fig" / "uniform", result)
    first, last = result["sample_queries"]
    assert [(p["layer"], p["head"]) for p in panels] == [(w["layer"], w["head"]) for w in result["widest"]]
    for panel in panels:
        assert panel["queries"].tolist() == list(range(first, last + 1))
        seen = ~np.isnan(panel["probs"])
        for row, query in enumerate(panel["queries"]):  # same_length: query q sees the 32 keys q-31..q, all alike
            assert panel["context"][seen[row]].tolist() == list(range(query - 31, query + 1))
        np.testing.assert_allclose(panel["probs"][seen], 1 / 32, rtol=1e-5)


def test_the_committed_figures_are_drawn_from_their_committed_tables(tmp_path, unrendered):
    # results/models/README.md records the command; the committed run keeps no checkpoint
    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "figures" / "attention" / "xl128m-cpu-attention", tmp_path / "xl128m-cpu-attention")
    again = redraw_attention(root / "results" / "models" / "xl128m-cpu-attention", out_dir=tmp_path)
    assert unrendered == ["figure5.png", "figure6.png", "figure7.png"] and again["queries"] == 195_584
    # titled with the size the run has (957,968 parameters), not its preset's 128M
    assert model_in_words(load_config(root / "results" / "models" / "xl128m-cpu-attention" / "config.yaml")) == (
        "Transformer-XL (xl128m), 0.96M parameters, cpu size\non the synthetic corpus (small language, copies up to 200 tokens back)")


def test_terms_a_scheme_lacks_are_noted_or_refused(tmp_path, unrendered, untrained_run):
    shaw = untrained_run(tmp_path / "shaw", sets=[*ATTENTION_SETS, "model.pos_enc=shaw"])
    result = attention_analysis(shaw, n_targets=50, out_dir=tmp_path / "fig", progress=False)
    assert result["terms"] == ["a", "b"] and "no term (d)" in result["notes"][0]
    with pytest.raises(TxlabError, match=r"no term \(d\) global position bias"):
        attention_analysis(shaw, terms=["d"], out_dir=tmp_path / "fig", progress=False)
    absolute = untrained_run(tmp_path / "vaswani", sets=[*ATTENTION_SETS, "model.pos_enc=vaswani"])
    result = attention_analysis(absolute, n_targets=50, out_dir=tmp_path / "fig", progress=False)
    assert result["terms"] == [] and "no Figure 7" in result["notes"][0]
    assert unrendered[-2:] == ["figure5.png", "figure6.png"]  # and no figure7


def test_cli_attention_json_and_user_errors(tmp_path, unrendered, untrained_run):
    run = untrained_run(tmp_path / "xl", sets=ATTENTION_SETS)
    result = runner.invoke(app, ["attention", str(run), "--tokens", "50", "--terms", "a,c", "--out-dir", str(tmp_path / "fig"), "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert doc["terms"] == ["a", "c"] and len(doc["heads"]) == 4 and "mean attended distance" in result.output
    lstm = untrained_run(tmp_path / "lstm", preset="lstm", sets=ATTENTION_SETS)
    for args, message in [
        (["attention", str(lstm)], "is an LSTM: attention analysis needs a Transformer-XL"),
        (["attention", str(tmp_path / "nothing")], "no run directory"),
        (["attention", str(run), "--terms", "e"], "unknown score term 'e'"),
    ]:
        result = runner.invoke(app, [*args, "--out-dir", str(tmp_path / "fig")])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
