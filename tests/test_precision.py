"""Mixed precision (txlab.precision): bf16 and fp16 autocast in training and evaluation, the fp32 losses
under it, the loss scaler in checkpoints, and the refusals of what a machine cannot run.

(fp32, the default, is covered by every other test: its results are unchanged bit for bit, and
tests/test_train.py resumes a killed bf16 run to the same parameters as an uninterrupted one.)
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from txlab import precision as precision_mod
from txlab.config import ModelConfig, apply_overrides, load_config
from txlab.data.corpus import load_corpus
from txlab.errors import TxlabError
from txlab.measure.collection import Collection
from txlab.measure.losses import collect_losses, collect_model_losses, sample_blocks
from txlab.runs.scored import ScoredModel
from txlab.models.rnn import build_rnn
from txlab.models.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax, linear_nll
from txlab.precision import autocast, check_precision, loss_scaler, scoring_precision
from txlab.presets import resolve_preset
from txlab.runs.checkpoint import load_checkpoint, save_checkpoint
from txlab.runs.evaluate import EvalSettings, evaluate, evaluate_run, evaluation_context
from txlab.runs.train import train
from txlab.runs.zoo import run_config, train_run_dir

SMALL_CORPUS = ["data.synthetic_tokens=20000", "data.synthetic_eval_tokens=3000", "train.threads=1"]


def tiny_config(*overrides):
    return apply_overrides(resolve_preset("xl151m", "tiny"), [*SMALL_CORPUS, *overrides])


def quiet_train(cfg, run_dir):
    return train(cfg, run_dir, progress=False, echo=lambda _: None)


def test_the_log_softmax_stays_fp32_under_autocast():
    torch.manual_seed(0)
    hidden, weight, bias = torch.randn(50, 16), torch.randn(300, 16), torch.randn(300)
    target = torch.randint(0, 300, (50,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        nll = linear_nll(hidden, weight, bias, target)
        logits = F.linear(hidden, weight, bias)  # what autocast computes the logits as: bf16
    assert logits.dtype == torch.bfloat16 and nll.dtype == torch.float32
    # the log-sum-exp of those bf16 logits taken in fp32, not in bf16 (which keeps 8 significant bits)
    exact = -F.log_softmax(logits.float(), -1).gather(1, target[:, None]).squeeze(1)
    assert torch.equal(nll, exact)
    in_bf16 = -F.log_softmax(logits, -1).gather(1, target[:, None]).squeeze(1)
    assert not torch.equal(nll, in_bf16.float())
    # the adaptive softmax and input (a projected tail cluster comes out of autocast in bf16)
    embed = AdaptiveEmbedding(300, 16, 16, [100, 200], div_val=2)
    crit = AdaptiveLogSoftmax(300, 16, 16, [100, 200], div_val=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        vectors = embed(target)
        assert crit.nll(vectors, target).dtype == torch.float32 and crit.log_prob(vectors).dtype == torch.float32
    torch.testing.assert_close(vectors, embed(target), rtol=0.02, atol=0.02)


def test_weights_already_in_the_precision_are_scored_without_autocast():
    """A Hugging Face model loaded in bf16 computes natively: on CUDA autocast would run its layer norms and powers in
    fp32 with casts around them. Weights in fp32 (txlab's own models) are autocast as before."""
    with scoring_precision("bf16", "cpu", torch.bfloat16):
        assert not torch.is_autocast_enabled("cpu")
        assert (torch.ones(2, 2, dtype=torch.bfloat16) @ torch.ones(2, 2, dtype=torch.bfloat16)).dtype == torch.bfloat16
    with scoring_precision("bf16", "cpu", torch.float32):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with scoring_precision("bf16", "cpu"):  # the default: fp32 weights
        assert torch.is_autocast_enabled("cpu")
    with scoring_precision("fp32", "cpu", torch.float32):
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")


def test_bf16_evaluation_is_within_bf16_rounding_of_fp32(tmp_path):
    """bf16 rounds the inputs of every matmul to 8 significant bits (a relative error up to 2^-9, 0.2%).
    Through two layers and the output layer the logits move by about that share of their spread (a few
    nats), so a token's loss moves by ~0.01 nats (measured: at most 0.008). Allowed: 0.05 per token, and
    0.005 on the mean over the split's 3,000 tokens, whose rounding errors mostly cancel (measured: 1e-4).
    fp16 keeps 11 bits: 8 times less."""
    run = quiet_train(tiny_config("train.max_steps=60", "train.lr=3e-3", "train.batch_size=8", "train.eval_interval=60"), tmp_path / "run").run_dir
    ckpt = load_checkpoint(run)
    tokens = load_corpus(ckpt.config.data, progress=False).split("valid")
    tgt_len, context = evaluation_context(ckpt.config.model, ckpt.config.eval)
    scored = {p: evaluate(ckpt.model, tokens, tgt_len, context, 8, token_losses=True, precision=p) for p in ("fp32", "bf16", "fp16")}
    assert scored["fp32"].loss < np.log(784) - 0.5  # a model that learned something: its losses are not all ln(V), V = 784
    for name, per_token, mean in (("bf16", 0.05, 0.005), ("fp16", 0.05 / 8, 0.005 / 8)):
        moved = np.abs(scored[name].nll - scored["fp32"].nll)[1:]  # the first token is never scored
        assert 0 < moved.max() < per_token, name  # not 0: the precision was used
        assert abs(scored[name].loss - scored["fp32"].loss) < mean, name
    # txlab eval records the precision, in the record and its name (fp32 keeps the name it always had)
    record = evaluate_run(run, EvalSettings(precision="bf16"), progress=False)
    assert record.precision == "bf16" and record.tf32 is False and record.path.name.endswith("-b8-bf16.json")
    assert record.loss == pytest.approx(scored["bf16"].loss, abs=1e-12)
    assert evaluate_run(run, progress=False).path.name.endswith("-b8.json")
    # loss tables for RECL: within the same rounding, and recorded in meta.json
    grid, starts = (8, 16, 32), sample_blocks(len(tokens), 2, 50, 32, seed=0)
    kwargs = dict(tgt_len=tgt_len, context=context)
    reduced = collect_losses(ckpt.model, tokens, grid, starts, 50, precision="bf16", **kwargs)
    assert 0 < np.abs(reduced - collect_losses(ckpt.model, tokens, grid, starts, 50, **kwargs)).max() < 0.05
    member = ScoredModel(ckpt.model, "bf16", tgt_len, context, "bf16", home=tmp_path / "home")
    table = collect_model_losses(member, tokens, "stream", Collection("valid", grid, 2, 50), progress=False)
    assert table.meta["precision"] == "bf16"


@pytest.mark.slow  # resume equals uninterrupted stays in the default run (test_train's kill in fp32); the fp16 loss scale's resume is a repeat of it
def test_a_run_records_its_precision_and_fp16_resumes_with_its_loss_scale(tmp_path):
    sets = ["train.precision=fp16", "train.scheduler=constant", "train.eval_interval=10", "train.log_interval=10", "train.eval_tokens=200"]
    straight = quiet_train(tiny_config(*sets, "train.max_steps=30"), tmp_path / "straight")
    quiet_train(tiny_config(*sets, "train.max_steps=20"), tmp_path / "resumed")
    at_20 = load_checkpoint(tmp_path / "resumed", with_train_state=True).train_state["loss_scaler"]
    assert at_20 != loss_scaler("fp16", "cpu").state_dict()  # 20 steps on: not what a fresh scaler would restart from
    resumed = quiet_train(tiny_config(*sets, "train.max_steps=30"), tmp_path / "resumed")
    assert resumed.resumed_from == 20
    final = [load_checkpoint(r.run_dir, with_train_state=True) for r in (straight, resumed)]
    assert final[0].train_state["loss_scaler"] == final[1].train_state["loss_scaler"]
    for key, value in final[0].model.state_dict().items():
        assert torch.equal(value, final[1].model.state_dict()[key]), key
    # the resolved config beside the run shows the precision; each training record what ran
    assert load_config(tmp_path / "resumed" / "config.yaml").train.precision == "fp16"
    assert "precision: fp16" in (tmp_path / "resumed" / "config.yaml").read_text()
    records = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in trained] == [10, 20, 30]
    assert all(r["precision"] == "fp16" and r["tf32"] is False and r["loss_scale"] > 0 for r in trained)
    # an fp16 checkpoint without its scaler's state cannot resume exactly: refused
    state = load_checkpoint(tmp_path / "resumed", with_train_state=True)
    del state.train_state["loss_scaler"]
    save_checkpoint(tmp_path / "resumed", state.model, state.config, step=30, vocab_hash=state.meta["vocab_hash"],
                    metrics=state.meta["metrics"], train_state=state.train_state)
    with pytest.raises(TxlabError, match="no loss-scaler state for fp16"):
        quiet_train(tiny_config(*sets, "train.max_steps=40"), tmp_path / "resumed")


def test_a_mixed_precision_run_gets_its_own_default_directory():
    names = {p: train_run_dir(run_config("xl151m", "cpu", overrides=[f"train.precision={p}", *extra]), Path("models")).name
             for p, extra in (("fp32", []), ("bf16", []), ("fp16", ["train.max_steps=300"]))}
    assert names == {"fp32": "xl151m-cpu-synthetic-small-short", "bf16": "xl151m-cpu-synthetic-small-short-bf16",
                     "fp16": "xl151m-cpu-synthetic-small-short-300steps-fp16"}


def test_the_loss_scalers_state_round_trips_through_a_checkpoint(tmp_path, untrained_run):
    """The scaler's state path itself, whether or not this torch autocasts fp16 on the CPU."""
    scaler = loss_scaler("fp16", "cpu")
    scaler.load_state_dict({"scale": 512.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 17})
    ckpt = load_checkpoint(untrained_run(tmp_path / "run"))
    state = {"optimizer": torch.optim.Adam(ckpt.model.parameters()).state_dict(), "step": 0, "position": 0, "epoch": 0, "elapsed_s": 0.0,
             "tokens_seen": 0, "rng_torch": [torch.get_rng_state()], "recurrent": [[]], "loss_scaler": scaler.state_dict()}
    save_checkpoint(tmp_path / "run", ckpt.model, ckpt.config, step=0, vocab_hash=ckpt.meta["vocab_hash"], train_state=state)
    restored = loss_scaler("fp16", "cpu")
    restored.load_state_dict(load_checkpoint(tmp_path / "run", with_train_state=True).train_state["loss_scaler"])
    assert restored.get_scale() == 512.0 and restored.state_dict() == scaler.state_dict()
    assert loss_scaler("bf16", "cpu").state_dict() == {}  # bf16 and fp32 scale nothing


def test_what_the_machine_cannot_run_is_one_error_line(cli, monkeypatch):
    for bad in (["train.precision=fp8"], ["eval.precision=half"]):
        assert "must be one of fp32, bf16, fp16" in cli.refused("train", "xl151m", "--size", "tiny", "--dry-run", "--set", bad[0])
    monkeypatch.setattr(precision_mod, "_autocast_runs", lambda device_type, dtype: dtype != torch.float16)  # a torch without CPU fp16 autocast
    result = cli("train", "xl151m", "--size", "tiny", "--set", "train.precision=fp16")
    said = cli.assert_refused(result, "train.precision fp16", "float16 autocast on this cpu", "use fp32 or bf16")
    assert len(said.strip().splitlines()) == 1
    with pytest.raises(TxlabError, match="eval.precision fp16"):
        check_precision("fp16", "cpu", source="eval.precision")
    check_precision("bf16", "cpu")  # bf16 still runs


def test_the_fp16_lstm_check_tells_what_this_cpu_runs():
    model = build_rnn(ModelConfig(family="lstm", n_token=20, n_layer=1, d_model=8, d_inner=8))
    tokens = torch.randint(0, 20, (2, 5))
    try:
        with autocast("fp16", "cpu"):
            model(tokens, model.init_state(2), tokens)
        runs = True
    except RuntimeError:  # oneDNN without a float16 LSTM (no AVX512-FP16 or AMX-FP16)
        runs = False
    assert precision_mod._cpu_fp16_lstm_runs() is runs
    if not runs:
        with pytest.raises(TxlabError, match="LSTM kernel .* no float16 version; use fp32 or bf16"):
            check_precision("fp16", "cpu", "lstm", "train.precision")
