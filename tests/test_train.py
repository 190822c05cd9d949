import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from txlab.analysis.learned import read_restarts
from txlab.config import TrainConfig, apply_overrides, update_dataclass
from txlab.errors import TxlabError
from txlab.presets import resolve_preset
from txlab.runs.checkpoint import load_checkpoint
from txlab.runs.evaluate import segment_loss
from txlab.runs.train import learning_rate, train

REPO = Path(__file__).resolve().parents[1]


def tiny(preset="xl151m", *overrides):
    cfg = resolve_preset(preset, "tiny")
    return apply_overrides(cfg, ["data.synthetic_tokens=20000", "data.synthetic_eval_tokens=3000", *overrides])


def test_learning_rate_table():
    cfg = TrainConfig(lr=1.0, lr_min=0.0, warmup_steps=4, max_steps=12, scheduler="cosine")
    table = [learning_rate(s, cfg) for s in range(12)]
    # warm-up reaches the peak at the 4th step, then a half cosine reaches lr_min at the last step
    expected = [0.25, 0.5, 0.75, 1.0] + [0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(1, 9)]
    np.testing.assert_allclose(table, expected)
    assert table[-1] == pytest.approx(0.0)
    inv = update_dataclass(cfg, {"scheduler": "inv_sqrt"})
    np.testing.assert_allclose([learning_rate(s, inv) for s in (3, 15)], [1.0, 0.5])
    const = update_dataclass(cfg, {"scheduler": "constant", "warmup_steps": 0})
    assert {learning_rate(s, const) for s in range(12)} == {1.0}
    # wsd: warm-up to step 4, lr held to step 8 (80% of 10 steps), then linear down to lr_min at the last
    wsd = TrainConfig(lr=1.0, lr_min=0.1, warmup_steps=2, max_steps=10, scheduler="wsd", decay_fraction=0.2)
    np.testing.assert_allclose([learning_rate(s, wsd) for s in range(10)], [0.5, 1, 1, 1, 1, 1, 1, 1, 0.55, 0.1])


def test_half_loss_is_the_mean_over_the_most_recent_half():
    nll = torch.arange(12.0).reshape(2, 6)
    assert segment_loss(nll, "full") == nll.mean()
    assert segment_loss(nll, "half") == nll[:, 3:].mean()
    # its gradient reaches only the recent half
    nll.requires_grad_(True)
    segment_loss(nll, "half").backward()
    assert (nll.grad[:, :3] == 0).all() and (nll.grad[:, 3:] > 0).all()


def test_loss_falls_on_synthetic_corpus(tmp_path):
    cfg = tiny("xl151m", "train.max_steps=60", "train.lr=3e-3", "train.eval_interval=60", "train.log_interval=10", "train.batch_size=8")
    result = train(cfg, tmp_path / "run", progress=False, echo=lambda _: None)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in lines if r["split"] == "train"]
    # the small language (784 symbols): from ln 784 = 6.66 nats to about its unigram entropy (5.8) in 60 steps
    assert train_losses[-1] < train_losses[0] - 0.5
    assert result.valid["loss"] < math.log(784) - 0.5
    # on a synthetic corpus every evaluation also splits the loss by role (txlab.data.diagnostics)
    by_role = [r for r in lines if r["split"] == "valid_by_role"]
    assert [r["step"] for r in by_role] == [60] and len(by_role[0]["copy_distance"]) == 12
    roles = by_role[0]["roles"]
    assert sum(g["tokens"] for g in roles.values()) == result.valid["tokens"]
    assert result.valid["role_copy_value"] == roles["copy_value"]["model"]
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_grad_accum_matches_one_big_batch(tmp_path):
    one = train(tiny("qrnn", "train.max_steps=3", "train.grad_accum=1"), tmp_path / "a", progress=False, echo=lambda _: None)
    two = train(tiny("qrnn", "train.max_steps=3", "train.grad_accum=2"), tmp_path / "b", progress=False, echo=lambda _: None)
    a, b = (load_checkpoint(r.run_dir).model.state_dict() for r in (one, two))
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def _final_state(run_dir):
    return load_checkpoint(run_dir).model.state_dict()


# 40 steps: a checkpoint every 10, so a kill between two of them leaves steps to resume and evaluations after it
RESUME_ARGS = [
    "data.synthetic_tokens=20000", "data.synthetic_eval_tokens=500", "model.dropout=0.1",
    "train.max_steps=40", "train.eval_interval=10", "train.log_interval=5", "train.eval_tokens=200", "train.threads=1",
]


# `txlab train` in a child process that signals itself right after it logs the training record of a
# chosen step: the signal lands at a known step, however fast the machine (no polling, no sleeping).
_SIGNAL_AFTER_LOGGED_STEP = """
import json, os, sys
import txlab.runs.plan
import txlab.runs.train
from txlab.cli import main

txlab.runs.plan.matmul_peak_gflops = lambda *args, **kwargs: 50.0  # the plan's ceiling: a second of probes the kill does not need

step_to_signal, nth = map(int, (sys.argv[1] + ":1").split(":")[:2])  # STEP or STEP:N, its N-th logging (a restart logs it again)
signal_number = int(sys.argv[2])
real_append_line = txlab.runs.train.append_line
logged = []


def append_then_signal(path, line):
    real_append_line(path, line)
    record = json.loads(line)
    if record["split"] == "train" and record["step"] == step_to_signal:
        logged.append(step_to_signal)
        if len(logged) == nth:
            os.kill(os.getpid(), signal_number)


txlab.runs.train.append_line = append_then_signal
sys.argv = ["txlab", *sys.argv[3:]]
main()
"""


def _train_signalled_after_step(run_dir, step: int | str, sig: signal.Signals, overrides=RESUME_ARGS) -> subprocess.CompletedProcess:
    sets = [part for arg in overrides for part in ("--set", arg)]
    args = ["train", "xl151m", "--size", "tiny", "--run-dir", str(run_dir), "--quiet", *sets]
    return subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_LOGGED_STEP, str(step), str(int(sig)), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


# the default run kills fp32 training; the bf16 repeat (the same path, 2x slower on a CPU) is marked slow
@pytest.mark.parametrize("precision", ["fp32", pytest.param("bf16", marks=pytest.mark.slow)])
def test_sigkill_then_resume_equals_uninterrupted(tmp_path, precision):
    overrides = [*RESUME_ARGS, f"train.precision={precision}"]
    straight = train(apply_overrides(resolve_preset("xl151m", "tiny"), overrides), tmp_path / "straight",
                     progress=False, echo=lambda _: None)
    # killed after logging step 25, past the checkpoint of step 20: the log runs ahead of the checkpoint
    killed = _train_signalled_after_step(tmp_path / "killed", 25, signal.SIGKILL, overrides)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert json.loads((tmp_path / "killed" / "checkpoint" / "meta.json").read_text())["step"] == 20
    resumed = train(apply_overrides(resolve_preset("xl151m", "tiny"), overrides), tmp_path / "killed",
                    progress=False, echo=lambda _: None)
    assert resumed.resumed_from == 20 and resumed.step == straight.step == 40
    a, b = _final_state(straight.run_dir), _final_state(resumed.run_dir)
    for key in a:  # bit for bit, in bf16 as in fp32: the same operations on the same values
        assert torch.equal(a[key], b[key]), key
    # the metric log of the resumed run reads as if it had never stopped
    strip = lambda path: [{k: v for k, v in json.loads(line).items() if k not in ("elapsed_s", "tokens_per_s")}  # noqa: E731
                          for line in path.read_text().splitlines()]
    assert strip(straight.metrics_file) == strip(resumed.metrics_file)


def test_sigterm_saves_a_checkpoint_at_the_next_step_and_exits_with_its_code(tmp_path, monkeypatch, cli):
    # In this process, without a child interpreter: the trainer's handler takes the signal (were it missing,
    # SIGTERM would end the test process and the test fail). The slow test below sends SIGTERM and SIGINT to a child.
    import txlab.runs.train

    real_append_line = txlab.runs.train.append_line

    def append_then_signal(path, line):
        real_append_line(path, line)
        record = json.loads(line)
        if record["split"] == "train" and record["step"] == 15:  # between the checkpoints of steps 10 and 20
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(txlab.runs.train, "append_line", append_then_signal)
    done = cli("train", "xl151m", "--size", "tiny", "--run-dir", tmp_path / "run", "--quiet", *[p for arg in RESUME_ARGS for p in ("--set", arg)])
    assert done.exit_code == 128 + signal.SIGTERM, done.output
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("interrupted: stopped by SIGTERM at step 15") and "checkpoint saved" in said
    meta = json.loads((tmp_path / "run" / "checkpoint" / "meta.json").read_text())
    last_logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert meta["step"] == last_logged == 15


@pytest.mark.slow  # a child interpreter per signal; the test above takes SIGTERM in this process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_save_a_checkpoint_and_exit_with_the_signals_code(tmp_path, sig):
    # the signal arrives at step 15, between the checkpoints of steps 10 and 20: the trainer saves one for step 15
    done = _train_signalled_after_step(tmp_path / "run", 15, sig)
    assert done.returncode == 128 + sig, done.stderr[-3000:]  # 143 and 130, the shell's codes: not a user error's 2
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("interrupted: stopped by") and "checkpoint saved" in said and "Traceback" not in done.stderr
    meta = json.loads((tmp_path / "run" / "checkpoint" / "meta.json").read_text())
    last_logged = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert meta["step"] == last_logged == 15


def test_corrupt_checkpoint_and_other_vocabulary_are_refused(tmp_path):
    run = train(tiny("xl151m", "train.max_steps=2"), tmp_path / "run", progress=False, echo=lambda _: None).run_dir
    cfg = load_checkpoint(run).config
    with pytest.raises(TxlabError, match="vocabulary"):
        load_checkpoint(run, expect_vocab_hash="0" * 64)
    with pytest.raises(TxlabError, match=r"another model:\n  model.d_model: checkpoint has 32, this run has 64"):
        load_checkpoint(run, expect_model=update_dataclass(cfg, {"model": {"d_model": 64}}))
    weights = run / "checkpoint" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(TxlabError, match=r"model.safetensors is damaged \(.*\); delete .* and rerun `txlab train`"):
        load_checkpoint(run)
    shutil.rmtree(run / "checkpoint")
    with pytest.raises(TxlabError, match="no checkpoint"):
        load_checkpoint(run)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    cfg = tiny("xl151m", "train.max_steps=4", "train.eval_interval=2", "train.log_interval=1")
    train(cfg, tmp_path / "run", progress=False, echo=lambda _: None)
    good = json.loads((tmp_path / "run" / "checkpoint" / "meta.json").read_text())["step"]
    # a good run that diverges after its checkpoint: here by resuming it with a learning rate that
    # blows it up, which train refuses as another configuration unless that check is taken away
    monkeypatch.setattr("txlab.runs.train.check_run_dir", lambda cfg, run_dir: None)
    bad = apply_overrides(cfg, ["train.max_steps=8", "train.lr=1e30", "train.clip=0"])
    with pytest.raises(TxlabError, match="last good checkpoint"):
        train(bad, tmp_path / "run", progress=False, echo=lambda _: None)
    assert json.loads((tmp_path / "run" / "checkpoint" / "meta.json").read_text())["step"] >= good
    state = load_checkpoint(tmp_path / "run").model.state_dict()
    assert all(torch.isfinite(v).all() for v in state.values())


def _free_port() -> int:
    """A TCP port no process listens on now (the OS picks it), so parallel test runs do not collide."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow  # two processes under torch.distributed.run: tens of seconds of interpreter start-up and rendezvous
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs processes")
def test_two_gloo_processes_equal_one_process(tmp_path):
    args = ["data.synthetic_tokens=20000", "data.synthetic_eval_tokens=500", "train.max_steps=3", "train.batch_size=4",
            "train.eval_tokens=100", "model.dropout=0.0"]
    single = train(apply_overrides(resolve_preset("xl151m", "tiny"), args), tmp_path / "one", progress=False, echo=lambda _: None)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
           "-m", "txlab", "train", "xl151m", "--size", "tiny", "--run-dir", str(tmp_path / "two"), "--quiet"]
    for a in args:
        cmd += ["--set", a]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = _final_state(single.run_dir), _final_state(tmp_path / "two")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_tensorboard_logging_when_installed(tmp_path):
    pytest.importorskip("tensorboard")
    train(tiny("xl151m", "train.max_steps=2", "train.log_interval=1", "train.tensorboard=true"), tmp_path / "run",
          progress=False, echo=lambda _: None)
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


class _RecordingWandb(types.ModuleType):
    """A stand-in for the wandb package that records what training asks of it (tests never need wandb)."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.calls: list[tuple] = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))
        return self

    def log(self, data, step=None):
        self.calls.append(("log", dict(data), step))

    def finish(self):
        self.calls.append(("finish",))


def test_wandb_logging_records_every_metric_at_its_step_and_resumes_the_same_run(tmp_path, monkeypatch):
    fake = _RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    run = tmp_path / "run"
    train(tiny("xl151m", "train.max_steps=2", "train.log_interval=1", "train.eval_interval=2", "train.wandb=true"), run,
          progress=False, echo=lambda _: None)
    (_, init), *logs, finish = fake.calls
    assert finish == ("finish",)
    assert init["project"] == "txlab" and init["name"] == "run" and init["resume"] == "allow" and init["config"]["train"]["wandb"] is True
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # one log per metrics.jsonl record, its numbers under split/key at the record's step
    assert [(step, data) for _, data, step in logs] == [
        (r["step"], {f"{r['split']}/{k}": v for k, v in r.items() if k not in ("step", "split") and isinstance(v, (int, float))}) for r in records]
    assert {"train/loss", "valid/loss"} <= set().union(*(data for _, data, _ in logs))
    # resumed (W&B switched on or off freely): the same W&B run id
    train(tiny("xl151m", "train.max_steps=3", "train.log_interval=1", "train.eval_interval=2", "train.wandb=true"), run,
          progress=False, echo=lambda _: None)
    assert [c[1]["id"] for c in fake.calls if c[0] == "init"] == [init["id"]] * 2


@pytest.mark.parametrize("logger, package, message", [("wandb", "wandb", r"Weights & Biases: pip install 'txlab\[wandb\]'"),
                                                      ("tensorboard", "tensorboard", "TensorBoard: pip install tensorboard")])
def test_a_logger_missing_is_one_error_naming_the_extra_and_leaves_no_run(tmp_path, monkeypatch, logger, package, message):
    monkeypatch.setitem(sys.modules, package, None)  # importing it raises ImportError, as when it is not installed
    with pytest.raises(TxlabError, match=rf"train.{logger}=true needs {message}"):
        train(tiny("xl151m", "train.max_steps=2", f"train.{logger}=true"), tmp_path / "run", progress=False, echo=lambda _: None)
    assert not (tmp_path / "run").exists()  # no .lock, no config.yaml: refused before anything was written


def test_checkpoint_saves_weights_that_are_views_of_one_buffer(tmp_path):
    # cuDNN keeps an LSTM's weights as views of one flat buffer; safetensors refuses shared storage
    from txlab.models.build import build_model
    from txlab.runs.checkpoint import save_checkpoint

    cfg = update_dataclass(resolve_preset("lstm", "tiny"), {"model": {"n_token": 50}})
    model = build_model(cfg.model)
    layer = model.stack.layers[0]
    flat = torch.randn(layer.weight_ih_l0.numel() + layer.weight_hh_l0.numel())
    layer.weight_ih_l0.data = flat[: layer.weight_ih_l0.numel()].view_as(layer.weight_ih_l0)
    layer.weight_hh_l0.data = flat[layer.weight_ih_l0.numel() :].view_as(layer.weight_hh_l0)
    save_checkpoint(tmp_path, model, cfg, step=1, vocab_hash="h")
    loaded = load_checkpoint(tmp_path).model.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded[key], value, rtol=0, atol=0)
    # tied weights are stored once and still tied after loading
    reloaded = load_checkpoint(tmp_path).model
    assert reloaded.softmax.out_layers[0].weight is reloaded.embedding.emb_layers[0].weight


def test_a_tied_weight_saved_under_another_name_of_its_tie_still_loads(tmp_path):
    # checkpoints written before a module moved carry the tied embedding under its softmax name
    from safetensors.torch import load_file, save_file

    from txlab.models.build import build_model
    from txlab.runs.checkpoint import save_checkpoint

    cfg = update_dataclass(resolve_preset("xl128m", "tiny"), {"model": {"n_token": 50}})
    torch.manual_seed(0)
    model = build_model(cfg.model)
    save_checkpoint(tmp_path, model, cfg, step=1, vocab_hash="h")
    weights = tmp_path / "checkpoint" / "model.safetensors"
    tensors = load_file(str(weights))
    (embedding_name,) = [k for k in tensors if k.startswith("word_emb.") and k.endswith("0.weight")]
    tied = model.state_dict()[embedding_name].data_ptr()
    (softmax_name,) = [k for k, v in model.state_dict().items() if k != embedding_name and v.data_ptr() == tied]
    tensors[softmax_name] = tensors.pop(embedding_name)
    save_file(tensors, str(weights))
    loaded = load_checkpoint(tmp_path).model
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


def test_checkpoints_from_before_per_cluster_ties_load_or_say_why(tmp_path):
    """A checkpoint whose config predates full_width_proj loads (also where its model is expected); one whose
    div_val-1 input projections were kept per cluster loads if they are equal and is refused if they drifted."""
    from safetensors.torch import load_file, save_file

    from txlab.models.build import build_model
    from txlab.runs.checkpoint import save_checkpoint

    cfg = update_dataclass(resolve_preset("xl128m", "tiny"),
                           {"model": {"n_token": 50, "adaptive": True, "cutoffs": [10, 30], "div_val": 1, "d_embed": 24}})
    torch.manual_seed(0)
    model = build_model(cfg.model)
    save_checkpoint(tmp_path, model, cfg, step=1, vocab_hash="h")
    meta_path = tmp_path / "checkpoint" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["model"]["full_width_proj"]
    meta_path.write_text(json.dumps(meta))
    assert load_checkpoint(tmp_path, expect_model=cfg).model.num_parameters() == model.num_parameters()

    weights = tmp_path / "checkpoint" / "model.safetensors"
    tensors = load_file(str(weights))
    assert "word_emb.emb_projs.1" not in tensors  # saved once
    tensors["word_emb.emb_projs.1"] = tensors["word_emb.emb_projs.0"].clone()  # as older versions wrote it, not yet drifted
    save_file(tensors, str(weights))
    loaded = load_checkpoint(tmp_path).model
    torch.testing.assert_close(loaded.word_emb.emb_projs[2], model.word_emb.emb_projs[0], rtol=0, atol=0)
    tensors["word_emb.emb_projs.1"] += 0.1  # drifted apart in training
    save_file(tensors, str(weights))
    with pytest.raises(TxlabError, match="different values for word_emb.emb_projs.0 and word_emb.emb_projs.1"):
        load_checkpoint(tmp_path)


def test_raising_max_steps_on_a_finished_run_warns_that_the_schedule_stretches(tmp_path):
    from txlab.runs.train import train
    from txlab.runs.zoo import run_config

    cfg = run_config("xl151m", "tiny", overrides=["train.max_steps=2", "train.eval_interval=2", "data.synthetic_tokens=5000",
                                                  "data.synthetic_eval_tokens=600"])
    train(cfg, tmp_path / "run", progress=False, echo=lambda m: None)
    said = []
    longer = run_config("xl151m", "tiny", overrides=["train.max_steps=4", "train.eval_interval=2", "data.synthetic_tokens=5000",
                                                     "data.synthetic_eval_tokens=600"])
    train(longer, tmp_path / "run", progress=False, echo=said.append)
    assert any(m.startswith("warning: train.max_steps changed from 2 to 4: the cosine learning-rate schedule stretches") for m in said)
    said.clear()
    train(longer, tmp_path / "run", progress=False, echo=said.append)  # the same length again: nothing to warn about
    assert not any(m.startswith("warning") for m in said)


def test_a_run_resumes_with_another_attention_kernel(tmp_path):
    train(tiny("xl151m", "train.max_steps=2", "model.attn_kernel=unfused"), tmp_path / "run", progress=False)
    train(tiny("xl151m", "train.max_steps=3", "model.attn_kernel=sdpa"), tmp_path / "run", progress=False)
    assert load_checkpoint(tmp_path / "run").meta["step"] == 3
    assert "attn_kernel: sdpa" in (tmp_path / "run" / "config.yaml").read_text()
    with pytest.raises(TxlabError, match="another configuration"):
        train(tiny("xl151m", "train.max_steps=4", "model.d_inner=48"), tmp_path / "run", progress=False)


def test_clamping_applies_from_clamp_from_step_and_resumes_there(tmp_path):
    """Steps before train.clamp_from_step train as with no clamping at all; later ones clamp; a run stopped
    before the switch and resumed past it equals one that ran straight through."""
    def params(run):
        return {k: v.clone() for k, v in load_checkpoint(tmp_path / run).model.state_dict().items()}

    base = ("train.scheduler=constant", "train.eval_interval=2", "model.clamp_len=2", "eval.clamp_len=-1")
    train(tiny("xl151m", *base, "train.max_steps=2", "train.clamp_from_step=2"), tmp_path / "switch-at-2", progress=False)
    train(tiny("xl151m", *base, "train.max_steps=2", "model.clamp_len=0"), tmp_path / "never", progress=False)
    for key, value in params("switch-at-2").items():
        torch.testing.assert_close(value, params("never")[key], rtol=0, atol=0)

    train(tiny("xl151m", *base, "train.max_steps=4", "train.clamp_from_step=2"), tmp_path / "switch-at-2", progress=False)  # resumed
    train(tiny("xl151m", *base, "train.max_steps=4", "train.clamp_from_step=2"), tmp_path / "straight", progress=False)
    train(tiny("xl151m", *base, "train.max_steps=4", "model.clamp_len=0"), tmp_path / "never", progress=False)
    train(tiny("xl151m", *base, "train.max_steps=4"), tmp_path / "always", progress=False)
    resumed, straight = params("switch-at-2"), params("straight")
    for key, value in resumed.items():
        torch.testing.assert_close(value, straight[key], rtol=0, atol=0)
    differs = lambda other: any(not torch.equal(value, other[key]) for key, value in straight.items())  # noqa: E731
    assert differs(params("never")) and differs(params("always"))


RULE_ARGS = [*RESUME_ARGS, "train.max_steps=20", "train.restart_at_step=10", "train.restart_metric=loss"]


def _without_timing(path):
    return [{k: v for k, v in json.loads(line).items() if k not in ("elapsed_s", "tokens_per_s")} for line in path.read_text().splitlines()]


def _assert_same_parameters(run_a, run_b):
    a, b = _final_state(run_a), _final_state(run_b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_restart_rule_that_fires_trains_the_next_seed_from_step_0_and_keeps_every_abandoned_attempt(tmp_path):
    """Threshold -1 on the loss fires at every attempt it may: two restarts, then attempt 2 (seed 2000)
    trains to the end exactly as a plain run of seed 2000; each abandoned attempt's records are those of
    a plain run of its seed up to the rule's step."""
    preset = resolve_preset("xl151m", "tiny")
    ruled = train(apply_overrides(preset, [*RULE_ARGS, "train.max_restarts=2", "train.restart_above=-1"]), tmp_path / "ruled",
                  progress=False, echo=lambda _: None)
    plain = {seed: train(apply_overrides(preset, [*RULE_ARGS[:-2], f"train.seed={seed}"]), tmp_path / f"seed{seed}", progress=False,
                         echo=lambda _: None) for seed in (0, 1000, 2000)}
    assert ruled.attempt == 2 and ruled.step == 20
    _assert_same_parameters(ruled.run_dir, plain[2000].run_dir)
    assert _without_timing(ruled.metrics_file) == _without_timing(plain[2000].metrics_file)
    restarts = read_restarts(ruled.run_dir)
    assert [(r["attempt"], r["seed"], r["step"], r["metric"], r["above"]) for r in restarts] == [(0, 0, 10, "loss", -1), (1, 1000, 10, "loss", -1)]
    for record, seed in zip(restarts, (0, 1000)):
        kept = _without_timing(ruled.run_dir / "restarts" / f"attempt-{record['attempt']}-metrics.jsonl")
        assert kept == [line for line in _without_timing(plain[seed].metrics_file) if line["step"] <= 10]
        assert record["value"] == next(line["loss"] for line in kept if line["split"] == "valid" and line["step"] == 10)


def test_a_restart_rule_that_does_not_fire_leaves_the_run_as_without_it(tmp_path):
    preset = resolve_preset("xl151m", "tiny")
    ruled = train(apply_overrides(preset, [*RULE_ARGS, "train.max_restarts=2", "train.restart_above=1e9"]), tmp_path / "ruled",
                  progress=False, echo=lambda _: None)
    plain = train(apply_overrides(preset, RULE_ARGS[:-2]), tmp_path / "plain", progress=False, echo=lambda _: None)
    assert ruled.attempt == 0 and read_restarts(ruled.run_dir) == [] and not (ruled.run_dir / "restarts").exists()
    _assert_same_parameters(ruled.run_dir, plain.run_dir)
    assert _without_timing(ruled.metrics_file) == _without_timing(plain.metrics_file)


# slow, both kill points: a child interpreter each (8 s of the default run); the default run keeps one kill/resume,
# test_sigkill_then_resume_equals_uninterrupted[fp32], and the restart rule in-process (the two tests above).
# STEP:N is the N-th logging of STEP: step 5 is logged by attempts 0 and 1, step 15 (past the rule's step 10) by attempt 1 only
@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["5:2", "15:1"], ids=["before-the-next-attempts-first-checkpoint", "after-it"])
def test_sigkill_around_a_restart_then_resume_equals_uninterrupted(tmp_path, kill_at):
    """Killed at step 5 of attempt 1 the only checkpoint is attempt 0's at the rule's step: the resumed run
    decides again and starts attempt 1 afresh; killed at its step 15 it resumes attempt 1 from step 10."""
    overrides = [*RULE_ARGS, "train.max_restarts=1", "train.restart_above=-1"]
    straight = train(apply_overrides(resolve_preset("xl151m", "tiny"), overrides), tmp_path / "straight", progress=False, echo=lambda _: None)
    killed = _train_signalled_after_step(tmp_path / "killed", kill_at, signal.SIGKILL, overrides)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = train(apply_overrides(resolve_preset("xl151m", "tiny"), overrides), tmp_path / "killed", progress=False, echo=lambda _: None)
    assert resumed.attempt == straight.attempt == 1 and resumed.resumed_from == (0 if kill_at == "5:2" else 10)
    _assert_same_parameters(straight.run_dir, resumed.run_dir)
    assert _without_timing(resumed.metrics_file) == _without_timing(straight.metrics_file)
    assert _without_timing(resumed.run_dir / "restarts" / "attempt-0-metrics.jsonl") == _without_timing(straight.run_dir / "restarts" / "attempt-0-metrics.jsonl")
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in records]  # noqa: E731
    assert strip(read_restarts(resumed.run_dir)) == strip(read_restarts(straight.run_dir))


@pytest.mark.parametrize("sets, says", [
    (["train.restart_at_step=20"], "train.max_restarts is 0"),
    (["train.max_restarts=1", "train.restart_at_step=15"], "a multiple of train.eval_interval=10"),
    (["train.max_restarts=1", "train.restart_at_step=40"], "below train.max_steps=40"),
    (["train.max_restarts=1", "train.restart_at_step=20", "train.restart_metric=role_recalled_value"], "it reports loss, ppl, role_"),
])
def test_a_restart_rule_that_could_not_fire_as_written_is_refused_before_training(tmp_path, sets, says):
    with pytest.raises(TxlabError, match=re.escape(says)):
        train(apply_overrides(resolve_preset("xl151m", "tiny"), [*RESUME_ARGS[:3], "train.max_steps=40", "train.eval_interval=10", *sets]),
              tmp_path / "run", progress=False, echo=lambda _: None)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_an_optimizer_state_from_the_unfused_adam_resumes_as_it_was_saved():
    # Checkpoints written before make_optimizer fused Adam hold the unfused optimizer's state, and its settings: loaded,
    # they resume with the unfused update, so such a run continues exactly as it would have; a fused one stays fused.
    import io

    from txlab.config import TrainConfig
    from txlab.runs.train import make_optimizer

    def through_a_file(state):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        return torch.load(buffer)

    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(7, 5)), torch.nn.Parameter(torch.randn(5))]
    unfused = torch.optim.Adam(weights, lr=1e-2)
    for _ in range(3):
        for w in weights:
            w.grad = torch.randn_like(w)
        unfused.step()
    saved, grads = through_a_file(unfused.state_dict()), [torch.randn_like(w) for w in weights]
    copies = [torch.nn.Parameter(w.detach().clone()) for w in weights]
    resumed = make_optimizer(copies, TrainConfig(lr=1e-2), torch.device("cpu"))
    assert resumed.param_groups[0]["fused"]
    resumed.load_state_dict(saved)
    assert not resumed.param_groups[0]["fused"]
    for w, c, g in zip(weights, copies, grads):
        w.grad, c.grad = g.clone(), g.clone()
    unfused.step()
    resumed.step()
    assert all(torch.equal(c, w) for w, c in zip(weights, copies))
    fused = make_optimizer(copies, TrainConfig(lr=1e-2), torch.device("cpu"))
    fused.load_state_dict(through_a_file(make_optimizer(copies, TrainConfig(lr=1e-2), torch.device("cpu")).state_dict()))
    assert fused.param_groups[0]["fused"]
