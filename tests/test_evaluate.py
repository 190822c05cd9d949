"""txlab.runs.evaluate: the shared chunked-reading loop, and the paper's protocol built on it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from txlab.api import run_tokens
from txlab.config import EvalConfig, ModelConfig, update_dataclass
from txlab.errors import TxlabError
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.presets import resolve_preset
from txlab.runs.checkpoint import load_checkpoint
from txlab.runs.evaluate import EvalSettings, evaluate, evaluate_run, evaluation_context, read_in_chunks

N_TOKEN = 37
LONG_MEMORY = Context(mem_len=64)  # longer than every stream below: the memory loses nothing
FAMILIES = {  # models whose chunked reading, with enough memory, is exactly one pass
    "xl": dict(pos_enc="ours"),
    "xl-shaw": dict(pos_enc="shaw", max_len=64),
    "lstm": dict(family="lstm", d_inner=12),
    "qrnn": dict(family="qrnn", d_inner=12, qrnn_window=2),
}


def tiny_model(**overrides):
    """A tiny random model whose predictions depend strongly on context (N(0, 0.5) parameters: the
    usual initialisation leaves context effects near 1e-4 nats, too close to the tolerance)."""
    fields = dict(n_token=N_TOKEN, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=4, mem_len=4, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**fields, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    model.set_context(LONG_MEMORY)
    return model


def random_tokens(rows: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, N_TOKEN, (rows, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("chunk_len", [None, 1, 3, 5])
def test_reading_in_chunks_with_enough_memory_equals_one_pass(family, chunk_len):
    model = tiny_model(**FAMILIES[family])
    tokens, targets = random_tokens(3, 13, seed=1), random_tokens(3, 13, seed=2)
    with torch.no_grad():
        one_pass = model(tokens, model.init_state(3), targets)
        chunks = list(read_in_chunks(model, tokens, chunk_len, targets=targets))
    assert [start for start, _ in chunks] == list(range(0, 13, chunk_len or 13))
    torch.testing.assert_close(torch.cat([out.nll for _, out in chunks], 1), one_pass.nll, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat([out.hidden for _, out in chunks], 1), one_pass.hidden, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_second_read_goes_on_from_the_state_the_first_left(family):
    model = tiny_model(**FAMILIES[family])
    tokens = random_tokens(2, 11, seed=3)
    with torch.no_grad():
        one_pass = model(tokens, model.init_state(2)).hidden  # [2, 11, d]
        first = list(read_in_chunks(model, tokens[:, :5], 2))
        rest = list(read_in_chunks(model, tokens[:, 5:], 4, state=first[-1][1].state))
    assert all(out.nll is None for _, out in first + rest)  # no targets, nothing scored
    torch.testing.assert_close(torch.cat([out.hidden for _, out in first + rest], 1), one_pass, rtol=1e-5, atol=1e-5)


def test_a_fresh_state_forgets_what_was_read_before():
    model = tiny_model()
    tokens = random_tokens(1, 8, seed=4)
    with torch.no_grad():
        after_context = next(read_in_chunks(model, tokens[:, 4:], None, state=model(tokens[:, :4], model.init_state(1)).state))[1]
        fresh = next(read_in_chunks(model, tokens[:, 4:], None))[1]
        alone = model(tokens[:, 4:], model.init_state(1)).hidden
    torch.testing.assert_close(fresh.hidden, alone)
    assert (fresh.hidden - after_context.hidden).abs().max() > 1e-3  # the context mattered: the check has teeth


def test_evaluate_scores_every_token_once_and_is_independent_of_segmenting():
    cfg = resolve_preset("lstm", "tiny")
    cfg = update_dataclass(cfg, {"model": {"n_token": 50}})
    torch.manual_seed(0)
    model = build_model(cfg.model)
    tokens = np.random.default_rng(0).integers(0, 50, size=101)
    context = Context(0)
    whole = evaluate(model, tokens, tgt_len=100, context=context, batch_size=1)
    pieces = evaluate(model, tokens, tgt_len=7, context=context, batch_size=1)
    assert whole.tokens == pieces.tokens == 100
    assert whole.loss == pytest.approx(pieces.loss, abs=1e-5) and whole.nll is None  # per-token losses only when asked for
    # several streams: still every target once
    assert evaluate(model, tokens, tgt_len=7, context=context, batch_size=3).tokens == 100
    # the loss equals the mean of hand-computed per-token losses from one fresh-state pass
    with torch.no_grad():
        out = model(torch.as_tensor(tokens[None, :-1]), model.init_state(1), torch.as_tensor(tokens[None, 1:]))
    assert whole.loss == pytest.approx(out.nll.mean().item(), abs=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_segment_boundaries_do_not_change_the_per_token_losses_of_a_transformer_xl(batch_size):
    model = tiny_model()
    tokens = np.random.default_rng(5).integers(0, N_TOKEN, size=61)  # 60 targets: 3 streams of 20
    by_length = {t: evaluate(model, tokens, tgt_len=t, context=LONG_MEMORY, batch_size=batch_size, token_losses=True) for t in (3, 7, 60)}
    whole = by_length[60]
    for result in by_length.values():
        assert result.tokens == 60
        np.testing.assert_allclose(result.nll, whole.nll, rtol=0, atol=1e-5)  # NaN (the first token) in the same place
    with torch.no_grad():  # one pass over each stream from a fresh state gives the same losses
        per_stream = (len(tokens) - 1) // batch_size
        for b in range(batch_size):
            stream = torch.as_tensor(tokens[b * per_stream : (b + 1) * per_stream + 1])[None]  # [1, per_stream + 1]
            want = model(stream[:, :-1], model.init_state(1), stream[:, 1:]).nll[0].double().numpy()
            got = whole.nll[b * per_stream + 1 : (b + 1) * per_stream + 1]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert np.isnan(whole.nll[0])
    short = Context(mem_len=2)  # the memory now loses context, and how much depends on the segments
    losses = [evaluate(model, tokens, tgt_len=t, context=short, batch_size=batch_size, token_losses=True).nll for t in (3, 7)]
    assert np.nanmax(np.abs(losses[0] - losses[1])) > 1e-2  # the check has teeth


RECORD_KEYS = ["loss", "ppl", "tokens", "split", "step", "family", "tgt_len", "mem_len", "clamp_len", "same_length", "batch_size",
               "streams", "precision", "tf32", "max_tokens", "token_stream_sha256", "per_word", "per_byte", "words", "bytes"]
"""The keys of a RUN/eval/ record, in the order committed records hold them (word-level corpora: ppl; records written
before perplexity per word and per byte existed end at token_stream_sha256, before their denominators at per_byte)."""


def test_evaluate_run_records_its_result_and_scores_as_evaluate_does(tmp_path, untrained_run):
    run = untrained_run(tmp_path / "run")
    result = evaluate_run(run, EvalSettings(split="test", attn_len=12, batch_size=2, max_tokens=100), progress=False)
    # the attention length is a memory of that many tokens with every query attending as many keys
    assert (result.split, result.mem_len, result.same_length, result.batch_size, result.max_tokens, result.tokens) == ("test", 12, True, 2, 100, 100)
    assert result.path == run / "eval" / f"test-tgt{result.tgt_len}-mem12-clamp0-same-b2-n100.json"
    assert list(result.as_record()) == RECORD_KEYS and result.bpc is None and result.by_role is None
    assert json.loads(result.path.read_text()) == result.as_record()
    assert result.metric == ("ppl", result.ppl) and result.ppl == pytest.approx(math.exp(result.loss), rel=1e-12)
    ckpt = load_checkpoint(run)
    model_tgt_len, _ = evaluation_context(ckpt.config.model, ckpt.config.eval)
    tokens = run_tokens(run, "test")
    direct = evaluate(ckpt.model, tokens, model_tgt_len, Context(12, True, 0), 2, max_tokens=100)
    assert result.tgt_len == model_tgt_len and result.loss == direct.loss and result.tf32 == direct.tf32
    # by role: one more key, and the summary covers the targets scored
    roles = evaluate_run(run, EvalSettings(max_tokens=100, by_role=True), progress=False)
    assert list(roles.as_record()) == [*RECORD_KEYS, "by_role"] and roles.path.name.endswith("-n100-roles.json")
    assert sum(group["tokens"] for group in roles.by_role["roles"].values()) == 100


def test_evaluate_run_refuses_settings_that_contradict_each_other(tmp_path, untrained_run):
    run = untrained_run(tmp_path / "run")
    with pytest.raises(TxlabError, match="give either --attn-len or --mem-len"):
        evaluate_run(run, EvalSettings(attn_len=8, mem_len=4), progress=False)
    with pytest.raises(TxlabError, match="eval.streams"):
        evaluate_run(run, EvalSettings(streams="sometimes"), progress=False)
    assert not (run / "eval").exists()


@pytest.mark.parametrize("eval_clamp, resolved", [(-1, 12), (8, 8), (12, 12)])
def test_a_clamp_trained_model_is_scored_with_its_clamp_or_a_shorter_one(eval_clamp, resolved):
    model = ModelConfig(clamp_len=12, tgt_len=16, mem_len=16)
    assert evaluation_context(model, EvalConfig(clamp_len=eval_clamp))[1].clamp_len == resolved


@pytest.mark.parametrize("eval_clamp, said", [(512, "clamp at 512"), (0, "clamp none")])
def test_scoring_a_clamp_trained_model_past_its_clamp_is_refused_with_the_settings_that_work(eval_clamp, said):
    # a preset's eval.clamp_len (512 for xl128m) left under a model trained with model.clamp_len=12 is the trap
    with pytest.raises(TxlabError, match=f"clamped at 12 .*{said}.*eval.clamp_len=-1 \\(as trained\\) or a value from 1 to 12"):
        evaluation_context(ModelConfig(clamp_len=12, tgt_len=16, mem_len=16), EvalConfig(clamp_len=eval_clamp))
    # an unclamped model takes any evaluation clamp, as the paper's evaluation does
    assert evaluation_context(ModelConfig(clamp_len=0, tgt_len=16), EvalConfig(clamp_len=eval_clamp))[1].clamp_len == eval_clamp


def test_perplexity_per_word_and_per_byte_count_the_text_the_targets_spell():
    """A character corpus counts the UTF-8 bytes of its targets (é is two); a word corpus joins words by spaces and reads
    its <eos> as a line end, which is whitespace: no word, one byte."""
    from txlab.config import DataConfig
    from txlab.data.corpus import Corpus
    from txlab.data.vocab import Vocab
    from txlab.runs.evaluate import eval_stream, text_units

    chars = Vocab(["x", "a", "é", " ", "b"])
    corpus = Corpus("own", "char", chars, {"valid": np.array([0, 1, 2, 3, 4])}, "test")
    assert eval_stream(corpus, DataConfig(), "valid").spell(4) == "aé b"
    units = text_units(2.0, "aé b")  # 2 words, 5 bytes, 2 nats
    assert units == {"per_word": pytest.approx(math.exp(2 / 2)), "per_byte": pytest.approx(math.exp(2 / 5)), "words": 2, "bytes": 5}
    words = Vocab(["the", "<eos>", "cat"])
    corpus = Corpus("wikitext-2", "word", words, {"valid": np.array([0, 2, 1, 0, 2])}, "test")
    assert eval_stream(corpus, DataConfig(corpus="wikitext-2"), "valid").spell(3) == "cat\nthe"
    units = text_units(3.0, "cat\nthe")  # 2 words, 7 bytes
    assert units == {"per_word": pytest.approx(math.exp(3 / 2)), "per_byte": pytest.approx(math.exp(3 / 7)), "words": 2, "bytes": 7}
