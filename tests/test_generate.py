"""Sampling with memory (txlab.measure.generate): top-k, seeds, the memory path, text in and out, the command."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from txlab.cli import app
from txlab.config import ModelConfig, update_dataclass
from txlab.data.corpus import load_corpus
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.measure.generate import ContextReader, Detokenizer, TextFormat, encode_prompt, generate, prompt_symbols, sample_tokens, sample_top_k
from txlab.models.build import build_model
from txlab.models.interface import Context
from txlab.runs.checkpoint import save_checkpoint
from txlab.runs.zoo import run_config

runner = CliRunner()


def tiny_model(**kw):
    base = dict(n_token=23, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=4, mem_len=4, dropout=0.0, d_embed=0)
    torch.manual_seed(0)
    return build_model(ModelConfig(**{**base, **kw})).eval()


# --- sampling -----------------------------------------------------------------------------------


def test_top_k_samples_only_the_k_most_likely_in_renormalised_proportions():
    log_probs = torch.log_softmax(torch.randn(30, generator=torch.Generator().manual_seed(0)), -1)
    draws = sample_top_k(log_probs.expand(20_000, 30), 3, 1.0, torch.Generator().manual_seed(1))
    top3 = log_probs.topk(3).indices
    assert set(draws.tolist()) == set(top3.tolist())
    freq = torch.bincount(draws, minlength=30)[top3].double() / len(draws)
    want = log_probs[top3].exp() / log_probs[top3].exp().sum()
    torch.testing.assert_close(freq, want.double(), atol=0.01, rtol=0)  # binomial sd < 0.0035; the seeds are fixed
    # Temperature 0.5 squares the probabilities before renormalising.
    draws = sample_top_k(log_probs.expand(20_000, 30), 3, 0.5, torch.Generator().manual_seed(2))
    freq = torch.bincount(draws, minlength=30)[top3].double() / len(draws)
    torch.testing.assert_close(freq, (want**2 / (want**2).sum()).double(), atol=0.01, rtol=0)
    # k = 1 is greedy; k beyond the vocabulary is the whole distribution.
    assert sample_top_k(log_probs, 1, 1.0, torch.Generator()).item() == log_probs.argmax().item()
    assert sample_top_k(log_probs[None], 1000, 1.0, torch.Generator()).shape == (1,)


def test_same_seed_same_tokens_other_seed_other_tokens():
    model = tiny_model()
    model.set_context(Context(mem_len=8))

    def run(seed):
        return list(sample_tokens(ContextReader(model, 4, 0), [1, 2, 3], 30, top_k=10, temperature=1.0, seed=seed))

    first = run(7)
    assert first == run(7) and first != run(8)
    assert len(first) == 30 and all(0 <= t < 23 for t in first)


@pytest.mark.parametrize("family", ["xl", "lstm", "qrnn"])
def test_reading_with_state_gives_the_distributions_of_one_pass_over_the_prefix(family):
    model = tiny_model(family=family, qrnn_window=2)
    model.set_context(Context(mem_len=32))  # >= the whole sequence: the memory loses nothing
    tokens = torch.randint(0, 23, (1, 13), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        one_pass = model.log_prob(model(tokens, model.init_state(1)).hidden)[0]  # [13, V]
    reader = ContextReader(model, chunk_len=4, window=0)
    got = [reader.read(tokens[0, :6].tolist())]  # a prompt longer than a chunk, then one token at a time
    got += [reader.read([t]) for t in tokens[0, 6:].tolist()]
    torch.testing.assert_close(torch.stack(got), one_pass[5:], rtol=1e-5, atol=1e-5)


def test_models_without_memory_re_read_their_window():
    model = tiny_model(family="vanilla", pos_enc="alrfou", max_len=5)
    assert not model.carries_state
    tokens = torch.randint(0, 23, (1, 9), generator=torch.Generator().manual_seed(4))
    reader = ContextReader(model, chunk_len=4, window=5)
    reader.read(tokens[0, :3].tolist())
    got = [reader.read([t]) for t in tokens[0, 3:].tolist()]
    with torch.no_grad():
        for i, step in enumerate(got):  # after token 3+i: the window is tokens [max(0, i-1) .. 3+i]
            window = tokens[:, max(0, 4 + i - 5) : 4 + i]
            want = model.log_prob(model(window, model.init_state(1)).hidden)[0, -1]
            torch.testing.assert_close(step, want)
    xl = tiny_model()
    xl.set_context(Context(mem_len=0))
    assert not xl.carries_state


# --- text in and out ----------------------------------------------------------------------------


def text_format(symbols, level="word", unk=None, byte_symbols=False):
    return TextFormat(Vocab(symbols, unk=unk), level, byte_symbols, "test")


def test_word_prompts_split_on_whitespace_and_lines_end_with_eos():
    words = text_format(["<eos>", "<unk>", "the", "cat", "sat"], unk="<unk>")
    assert prompt_symbols("the  cat\nsat", words) == ["the", "cat", "<eos>", "sat"]
    warnings = []
    assert encode_prompt("the dog sat dog", words, warnings.append) == [2, 1, 4, 1]
    assert "'dog'" in warnings[0] and "<unk>" in warnings[0]
    detok = Detokenizer(words)
    assert "".join(detok.piece(s) for s in ["the", "cat", "<eos>", "sat", "the"]) == "the cat\nsat the"
    with pytest.raises(TxlabError, match="the prompt is empty"):
        encode_prompt(" \t ", words, warnings.append)


def test_characters_concatenate_and_bytes_decode_as_utf8():
    chars = text_format(list("ab \n"), level="char")
    assert prompt_symbols("ab a\n", chars) == ["a", "b", " ", "a", "\n"]
    with pytest.raises(TxlabError, match=r"no unknown-word symbol: 'z'"):
        encode_prompt("abz", chars, print)
    raw = text_format([str(b) for b in range(256)], level="char", byte_symbols=True)
    assert prompt_symbols("é!", raw) == ["195", "169", "33"]
    detok = Detokenizer(raw)
    assert [detok.piece(s) for s in ["195", "169", "33"]] == ["", "é", "!"]  # a character appears once complete


# --- the command --------------------------------------------------------------------------------


def test_cli_streams_the_prompt_then_reproducible_samples(tmp_path, untrained_run):
    run = untrained_run(tmp_path / "xl")
    args = ["generate", str(run), "--prompt", "b001 b002 k0003", "--tokens", "12", "--top-k", "5", "--seed", "3"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    text = first.stdout.splitlines()[0]
    assert text.startswith("b001 b002 k0003 ") and len(text.split()) == 3 + 12
    assert "generated 12 tokens after a 3-token prompt" in first.stderr
    assert runner.invoke(app, args).stdout == first.stdout
    assert runner.invoke(app, [*args[:-1], "4"]).stdout != first.stdout
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("b001 b002 k0003\n", encoding="utf-8")
    from_file = runner.invoke(app, [*args[:2], "--prompt-file", str(prompt_file), *args[4:]])
    assert from_file.stdout == first.stdout  # synthetic has no <eos>: the line end is whitespace
    quiet = runner.invoke(app, [*args, "--quiet", "--json"])
    assert quiet.stderr == "" and quiet.stdout.splitlines()[0] == text
    assert len(json.loads(quiet.stdout.splitlines()[-1])["tokens"]) == 12


@pytest.mark.parametrize("preset", ["lstm", "transformer128m"])
def test_every_family_generates(tmp_path, preset, untrained_run):
    run = untrained_run(tmp_path / preset, preset=preset)
    pieces = []
    result = generate(run, prompt="b001 " * 40, n_tokens=5, seed=0, on_text=pieces.append)
    assert len(result["tokens"]) == 5 and "".join(pieces[1:]) == result["text"]
    assert result["carries_state"] == (preset == "lstm")


def test_cli_user_errors_exit_2_without_traceback(tmp_path, untrained_run):
    run = untrained_run(tmp_path / "xl")
    for args, message in [
        (["generate", str(run), "--prompt", ""], "the prompt is empty"),
        (["generate", str(run), "--prompt", "b001", "--tokens", "0"], "--tokens must be in [1, 1e+06], got 0"),
        (["generate", str(run), "--prompt", "b001", "--top-k", "0"], "--top-k must be >= 1, got 0"),
        (["generate", str(run)], "give the prompt as text (--prompt) or as a file (--prompt-file)"),
        (["generate", str(run), "--prompt-file", str(tmp_path / "none.txt")], "cannot read the prompt file"),
        (["generate", str(run), "--prompt", "hello"], "no unknown-word symbol: 'hello'"),
        (["generate", str(tmp_path / "nothing"), "--prompt", "b001"], "no run directory"),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_a_checkpoint_with_its_own_vocabulary_reads_and_writes_in_it(tmp_path):
    # An imported model numbers the corpus's symbols its own way: here in reverse.
    cfg = run_config("xl151m", "tiny", overrides=["data.synthetic_tokens=3000", "data.synthetic_eval_tokens=600"])
    symbols = load_corpus(cfg.data, progress=False).vocab.symbols[::-1]
    own = Vocab(symbols)
    cfg = update_dataclass(cfg, {"model": {"n_token": len(own)}})
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "imported", build_model(cfg.model), cfg, step=0, vocab_hash=own.sha256, vocab=own)
    pieces = []
    result = generate(tmp_path / "imported", prompt="b001 k0002", n_tokens=4, on_text=pieces.append)
    assert pieces[0] == "b001 k0002"
    assert result["text"].split() == [symbols[t] for t in result["tokens"]]
