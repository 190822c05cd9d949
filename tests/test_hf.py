"""Hugging Face causal LMs as txlab models: exact losses at context c, memory, checks, groups, the API.

Nothing is downloaded: tiny GPT-2 and Llama models are built from configs into temporary folders, and
a tokenizer is trained on the spot with the `tokenizers` library (conftest.py's hf_checkpoint).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="Hugging Face members need the [hf] extra")

import txlab  # noqa: E402
from txlab.drivers.recl.run import recl_groups  # noqa: E402
from txlab.errors import TxlabError  # noqa: E402
from txlab.measure.losses import collect_losses, sample_blocks  # noqa: E402
from txlab.models import hf  # noqa: E402
from txlab.models.interface import Context  # noqa: E402
from txlab.runs.evaluate import read_in_chunks  # noqa: E402

VOCAB = 41
GRID = (2, 5, 9, 16)  # 16 > the GPT-2's 12 positions below: its cap
BLOCK_STARTS, BLOCK_LEN = (16, 40), 6

def tokens_for(n: int = 70, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, n).astype(np.uint16)


@torch.no_grad()
def naive_loss(causal_lm, tokens: np.ndarray, t: int, c: int) -> float:
    """-ln P(x_t | x_{t-c} .. x_{t-1}) from the model's own forward over exactly those c tokens."""
    window = torch.as_tensor(tokens[t - c : t].astype(np.int64))[None]  # [1, c]
    logits = causal_lm(input_ids=window).logits[0, -1].double()
    return float(-torch.log_softmax(logits, -1)[int(tokens[t])])


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_collected_losses_equal_a_naive_forward_over_exactly_c_tokens(tmp_path, random_causal_lm, arch):
    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / arch, arch)}")
    tokens = tokens_for()
    table = collect_losses(model, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=4, context=Context(mem_len=0))
    targets = (np.asarray(BLOCK_STARTS)[:, None] + np.arange(BLOCK_LEN)).reshape(-1)
    cap = 12 if arch == "gpt2" else None  # learned absolute positions end at 12; rotary ones do not
    assert model.max_context == cap
    expected = np.array([[naive_loss(model.causal_lm, tokens, t, min(c, cap or c)) for t in targets] for c in GRID])
    np.testing.assert_allclose(table, expected, rtol=0, atol=2e-5)
    assert np.abs(expected[0] - expected[1]).max() > 0.1  # context matters, so the comparison can fail


def test_memory_reads_the_last_tokens_from_a_fresh_start(tmp_path, random_causal_lm):
    """With mem_len M, a chunk's token at offset i sees the M remembered tokens and the i before it, positions from 0."""
    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / 'llama', 'llama')}")
    model.set_context(Context(mem_len=5))
    tokens = tokens_for(30)
    x = torch.as_tensor(tokens.astype(np.int64))[None]
    with torch.no_grad():
        nll = torch.cat([out.nll for _, out in read_in_chunks(model, x[:, :-1], 4, targets=x[:, 1:])], dim=1)[0]
    for t in range(1, 30):
        seen = min(t, 5 + (t - 1) % 4 + 1)  # memory plus the chunk up to x_{t-1}
        assert nll[t - 1].item() == pytest.approx(naive_loss(model.causal_lm, tokens, t, seen), abs=2e-5)


def test_the_output_head_matches_the_models_logits_or_logits_mode_is_used(tmp_path, random_causal_lm):
    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / 'g', 'gpt2')}")
    assert not model.logits_mode
    x = torch.as_tensor(tokens_for(10).astype(np.int64))[None]
    with torch.no_grad():
        own = torch.log_softmax(model.causal_lm(input_ids=x).logits, -1)
        ours = model.log_prob(model(x, model.init_state(1)).hidden)
        model.logits_mode = True  # the fallback for heads that do more than a linear map
        fallback = model.log_prob(model(x, model.init_state(1)).hidden)
    torch.testing.assert_close(ours, own, rtol=0, atol=1e-5)
    torch.testing.assert_close(fallback, own, rtol=0, atol=1e-5)


def test_out_of_range_ids_and_bad_specs_are_refused(tmp_path, random_causal_lm):
    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / 'g', 'gpt2')}")
    tokens = tokens_for()
    tokens[50] = VOCAB + 3
    with pytest.raises(TxlabError, match="outside the model's vocabulary of 41"):
        collect_losses(model, tokens, GRID, BLOCK_STARTS, BLOCK_LEN, tgt_len=4, context=Context(mem_len=0))
    with pytest.raises(TxlabError, match="names no model"):
        hf.load_causal_lm("hf:")
    with pytest.raises(TxlabError, match="no config.json"):
        hf.load_causal_lm(f"hf:{tmp_path}")
    with pytest.raises(TxlabError, match="no folder"):
        hf.load_causal_lm("hf:./not/there")
    with pytest.raises(TxlabError, match="unknown precision 'int8'.*Valid: bf16, fp16, fp32"):
        hf.load_causal_lm(f"hf:{tmp_path / 'g'}", precision="int8")


def test_an_adaptive_softmax_refuses_ids_it_would_have_scored_zero():
    from txlab.config import ModelConfig
    from txlab.models.build import build_model

    model = build_model(ModelConfig(n_token=30, n_layer=1, d_model=8, n_head=2, d_head=4, d_inner=8, adaptive=True, cutoffs=[10, 20],
                                    tgt_len=4, mem_len=0))
    x = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(TxlabError, match="outside this model's vocabulary of 30"):
        model(x, model.init_state(1), torch.full((1, 4), 31))


def test_family_hf_trains_exports_and_loads_back_with_the_same_losses(tmp_path, cli):
    home = tmp_path / "home"
    cli.ok("--home", str(home), "train", "llama", "--size", "tiny", "--set", "train.max_steps=3", "-q")
    run = home / "results" / "models" / "llama-tiny-synthetic-small-3steps"  # a trial run: 3 of the recipe's 20 steps
    cli.ok("export", str(run), str(tmp_path / "exported"))
    assert json.loads((tmp_path / "exported" / "txlab_export.json").read_text())["step"] == 3
    cli.refused("export", str(run), str(tmp_path / "exported"), "not an empty folder")
    tokens = txlab.run_tokens(run, "valid")[:300]
    ours, theirs = txlab.load_model(run), txlab.load_model(f"hf:{tmp_path / 'exported'}")
    a = txlab.context_losses(ours, tokens, [4, 8, 16], n_blocks=2, block_len=20)
    b = txlab.context_losses(theirs, tokens, [4, 8, 16], n_blocks=2, block_len=20)
    np.testing.assert_allclose(a.losses, b.losses, rtol=0, atol=1e-5)


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_a_group_mixes_a_txlab_run_and_hugging_face_members(tmp_path, cli, figure_files_only):
    """txlab's XL beside exported GPT-2 and Llama members, on the synthetic corpus with its ideal model."""
    home = tmp_path / "home"
    for preset in ("xl151m", "gpt2"):
        cli.ok("--home", str(home), "train", preset, "--size", "tiny", "--set", "train.max_steps=2", "-q",  # where the group finds them
               "--run-dir", str(home / "results" / "models" / f"{preset}-tiny-synthetic-small"))
    cli.ok("export", str(home / "results" / "models" / "gpt2-tiny-synthetic-small"), str(tmp_path / "gpt2"))
    members = ["xl151m", f"hf:{tmp_path / 'gpt2'}"]
    opts = {"size": "tiny", "models_root": str(home / "results" / "models")}
    plans = []
    [result] = recl_groups(members, options=opts, sets=["n_boot=0", "blocks=2", "block_len=40", "allow_unequal=true"], out_dir=tmp_path / "t", fig_dir=tmp_path / "f",
                           announce=plans.append, echo=lambda m: None, progress=False)
    assert "gpt2: Hugging Face checkpoint" in "\n".join(plans)
    assert "placebo off" in "\n".join(plans) and "ideal model" in "\n".join(plans)  # synthetic: the truth instead
    assert [row.model for row in result.rows if row.r == 0.1] == ["xl151m", "gpt2", "oracle (ground truth)"]
    record = json.loads((Path(result.run_dirs[1]) / "member.json").read_text())
    assert record["model_type"] == "gpt2" and record["max_context"] == 32


def test_groups_that_cannot_share_a_token_stream_are_refused_before_any_model_runs(tmp_path, random_causal_lm, hf_checkpoint):
    folder = hf_checkpoint(tmp_path / "ckpt")
    opts = {"size": "tiny", "models_root": str(tmp_path / "models")}
    with pytest.raises(TxlabError, match="needs a corpus"):
        recl_groups([f"hf:{folder}"], options=opts, announce=lambda m: None, dry_run=True)
    # its own tokenizer, and a corpus numbered by txlab's vocabulary: refused in the dry run already
    with pytest.raises(TxlabError, match="brings its own tokenizer"):
        recl_groups([f"hf:{folder}"], options={**opts, "data": "synthetic"}, sets=["grid=4,8"], announce=lambda m: None, dry_run=True)
    small = random_causal_lm(tmp_path / "small", "gpt2", vocab=50)
    with pytest.raises(TxlabError, match="outputs for 50 token ids"):
        recl_groups([f"hf:{small}"], options={**opts, "data": "synthetic"}, sets=["grid=4,8"], announce=lambda m: None, dry_run=True)


def test_the_five_line_api_on_own_text_reads_exact_losses(tmp_path, hf_checkpoint):
    folder = hf_checkpoint(tmp_path / "ckpt", text_file=tmp_path / "my.txt")
    model = txlab.load_model(f"hf:{folder}")
    tokens = txlab.encode_text(tmp_path / "my.txt", model, split=None)  # every token of the file
    assert tokens.max() < model.model.vocab_size and len(tokens) > 1000
    table = txlab.context_losses(model, tokens, [4, 8, 16], n_blocks=3, block_len=30, placebo=True)
    t, c = int(table.targets[7]), 8
    assert table.losses[1, 7] == pytest.approx(naive_loss(model.model.causal_lm, tokens, t, c), abs=2e-5)
    assert table.placebo.shape == (2, 90)
    rows = txlab.group_recl([table], ["mine"], rs=[0.1])
    assert rows[0].model == "mine" and rows[0].placebo_aware is not None and "placebo_label" in rows[0].record()
    assert np.array_equal(sample_blocks(len(tokens), 3, 30, 16), table.targets[::30])  # an array of starts is accepted
    assert txlab.perplexity(model, tokens, max_tokens=200)["tokens"] == 200


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_one_command_gives_table_8_for_a_checkpoint_folder_and_a_text_file(tmp_path, hf_checkpoint, cli, figure_files_only):
    """`txlab recl --group hf:CKPT --text FILE`: the checkpoint's own tokenizer reads the text, placebo on."""
    folder = hf_checkpoint(tmp_path / "ckpt", text_file=tmp_path / "my.txt")
    (tmp_path / "my.txt").write_text((tmp_path / "my.txt").read_text() * 4)
    home = tmp_path / "home"
    plan = cli.ok("--home", home, "recl", "--group", f"hf:{folder}", "--text", tmp_path / "my.txt", "--set", "blocks=2", "--dry-run").output
    assert f"tokenizer hf:{folder}" in plan and "placebo on" in plan and "estimated time" in plan
    assert "room for only 3 blocks" in cli.refused("--home", home, "recl", "--group", f"hf:{folder}", "--text", tmp_path / "my.txt", "--dry-run")
    doc = cli.json("--home", home, "recl", "--group", f"hf:{folder}", "--text", tmp_path / "my.txt", "--set", "grid=8,16,32",
                   "--set", "blocks=2", "--set", "block_len=50", "--set", "n_boot=0", "-q", "--json")
    [group] = doc["groups"]
    assert group["group"].startswith("ckpt-text-my") and set(group["recl"]["ckpt"]["0.1"]) >= {"label", "placebo_label", "below_placebo"}
    assert any(f.endswith("placebo.csv") for f in group["files"]) and any(f.endswith("figure3.png") for f in group["files"])
    out = cli.refused("--home", home, "recl", "--group", f"hf:{folder}", "--text", tmp_path / "my.txt", "--tokenizer", "char", "--dry-run")
    assert "brings its own tokenizer" in out


def test_eval_and_generate_take_a_hugging_face_checkpoint(tmp_path, hf_checkpoint, cli):
    folder = hf_checkpoint(tmp_path / "ckpt", text_file=tmp_path / "my.txt")
    home = tmp_path / "home"
    record = cli.json("--home", home, "eval", f"hf:{folder}", "--text", tmp_path / "my.txt", "--tgt-len", 32, "--mem-len", 16,
                      "--max-tokens", 100, "-q", "--json")
    assert record["tokens"] == 100 and record["mem_len"] == 16 and record["ppl"] > 1
    from txlab.data.textdata import split_text, text_data_config

    model = txlab.load_model(f"hf:{folder}")  # the valid split's characters, cut at word starts, read by its tokenizer
    valid = np.asarray(model.tokenizer.encode(split_text(text_data_config(tmp_path / "my.txt"), "valid")))[:101]
    direct = txlab.perplexity(model, valid, segment=32, memory=16)
    assert record["loss"] == pytest.approx(direct["loss"], abs=1e-5)
    by_text = txlab.perplexity(model, text=tmp_path / "my.txt", segment=32, memory=16, max_tokens=100)
    assert by_text["loss"] == direct["loss"] and (by_text["words"], by_text["bytes"]) == (record["words"], record["bytes"])
    assert by_text["per_word"] == pytest.approx(record["per_word"], rel=1e-5)
    cli.refused("eval", f"hf:{folder}", "--text", tmp_path / "my.txt", "--attn-len", 8)
    cli.refused("eval", f"hf:{folder}")
    text = cli.ok("generate", f"hf:{folder}", "--prompt", "the king of", "--tokens", 5, "-q", "--json").output
    doc = cli.last_json(text)
    assert len(doc["tokens"]) == 5 and doc["text"] in text


def test_a_reduced_precision_asked_for_is_used_and_recorded(tmp_path, random_causal_lm):
    from txlab.measure.collection import Collection
    from txlab.measure.losses import collect_model_losses
    from txlab.runs.scored import ScoredModel

    model = hf.load_causal_lm(f"hf:{random_causal_lm(tmp_path / 'g', 'gpt2')}", precision="bf16")
    assert next(model.parameters()).dtype == torch.bfloat16
    tokens = tokens_for(200)
    collection = Collection("valid", (4, 8), 2, 20)

    def scored(model, precision):
        return ScoredModel(model, "g", 16, Context(mem_len=0), precision, home=tmp_path / "m")

    with pytest.raises(TxlabError, match="float32 or better"):
        collect_model_losses(scored(model, "fp32"), tokens, "h", collection, progress=False)
    table = collect_model_losses(scored(model, "bf16"), tokens, "h", collection, progress=False)
    exact = hf.load_causal_lm(f"hf:{tmp_path / 'g'}")
    reference = collect_losses(exact, tokens, (4, 8), table.meta["block_starts"], 20, tgt_len=16, context=Context(mem_len=0))
    assert table.meta["precision"] == "bf16" and 0 < np.abs(table.losses - reference).max() < 0.5
    with pytest.raises(TxlabError, match="other settings .*precision: stored 'bf16', now 'fp32'"):  # never finished in another precision
        collect_model_losses(scored(exact, "fp32"), tokens, "h", collection, progress=False)
    from txlab.measure.losses import scoring

    with scoring(model, Context(mem_len=0), "bf16"):  # weights already in bf16: computed natively, not autocast
        assert not torch.is_autocast_enabled("cpu")
    with scoring(exact, Context(mem_len=0), "bf16"):  # fp32 weights scored in bf16: autocast
        assert torch.is_autocast_enabled("cpu")


def test_a_dry_run_refuses_runs_that_read_other_tokens_of_one_corpus(tmp_path, untrained_run):
    """Same corpus name, another seed: the real run would find another token stream, so the plan refuses it already."""
    a = untrained_run(tmp_path / "a")
    b = untrained_run(tmp_path / "b", sets=["data.synthetic_seed=1"])
    with pytest.raises(TxlabError, match="mixes corpora .*data.synthetic_seed"):
        recl_groups([str(a), str(b)], options={"size": "tiny"}, sets=["grid=4,8"], announce=lambda m: None, dry_run=True)


def test_a_device_torch_cannot_use_is_one_line_for_hugging_face_models_and_groups(tmp_path, random_causal_lm):
    folder = random_causal_lm(tmp_path / "g", "gpt2")
    with pytest.raises(TxlabError, match="unknown device 'tpu'"):
        txlab.load_model(f"hf:{folder}", device="tpu")
    with pytest.raises(TxlabError, match="device cuda"):
        recl_groups([f"hf:{folder}"], options={"size": "tiny", "data": "synthetic", "device": "cuda"}, announce=lambda m: None, dry_run=True)


def test_without_transformers_a_hugging_face_model_asks_for_the_extra(tmp_path, monkeypatch, random_causal_lm):
    folder = random_causal_lm(tmp_path / "g", "gpt2")
    monkeypatch.setitem(sys.modules, "transformers", None)  # what `import transformers` meets where it is not installed
    with pytest.raises(TxlabError, match=r"pip install 'txlab\[hf\]'"):
        txlab.load_model(f"hf:{folder}")


def test_speed_and_attention_refuse_a_hugging_face_checkpoint_saying_what_they_take(tmp_path, cli, random_causal_lm):
    """Not 'holds no checkpoint' or 'no run directory', which read like a wrong path (issue 50)."""
    ck = f"hf:{random_causal_lm(tmp_path / 'ck', 'gpt2')}"
    for args, said in ((["speed", "--run", ck, "--dry-run", "--out-dir", tmp_path / "o", "--fig-dir", tmp_path / "f"],
                        "is a Hugging Face checkpoint; txlab speed times Transformer-XL against the vanilla Transformer: the preset's shape "
                        "(--size), or a txlab run of family xl or vanilla (--run RUN_DIR)"),
                       (["attention", ck, "--out-dir", tmp_path / "a"], "is a Hugging Face checkpoint: attention analysis needs a Transformer-XL run")):
        result = cli(*args)
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert result.exit_code == 2 and len(errors) == 1 and said in errors[0] and "Traceback" not in result.output, result.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "a").exists()


def test_contexts_past_a_members_trained_positions_are_marked_as_extrapolation(tmp_path, random_causal_lm, figure_files_only):
    """A rotary Llama trained on 12 positions reads 16 tokens as it is (no table caps it): recl.json and Table 8's note
    name that context as extrapolation, not context use (the plan names it too: tests/test_plan.py)."""
    folder = random_causal_lm(tmp_path / "llama", "llama", vocab=800, positions=12)
    opts = {"size": "tiny", "data": "synthetic-small", "models_root": str(tmp_path / "models")}
    [result] = recl_groups([f"hf:{folder}"], options=opts, sets=["grid=4,8,16", "blocks=2", "block_len=20", "n_boot=0"], out_dir=tmp_path / "t",
                           fig_dir=tmp_path / "f", announce=lambda m: None, echo=lambda m: None, progress=False)
    record = json.loads(result.files[0].read_text())
    assert record["extrapolation"] == {"llama": {"trained_positions": 12, "contexts": [16]}}
    assert "Extrapolation: some contexts lie past the positions a member was trained on (llama past 12 tokens: c = 16 tokens)" in result.markdown
