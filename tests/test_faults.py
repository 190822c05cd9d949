"""Hostile inputs and faults through the real CLI (issue 20's table), at tiny sizes: each ends in one
`error: ...` line and exit 2 with nothing half-written, or (a torn metrics line) resumes with a warning."""

import errno
import itertools
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from txlab.cli import app
from txlab.config import update_dataclass
from txlab.errors import TxlabError
from txlab.fileio import DamagedFile, hold_directory, read_jsonl, write_text_atomic
from txlab.runs.checkpoint import load_checkpoint, read_meta

runner = CliRunner()

SMALL = ["--set", "data.synthetic_tokens=5000", "--set", "data.synthetic_eval_tokens=600", "--set", "train.eval_interval=2"]


def train_args(run_dir: Path, steps: int = 2, *extra: str) -> list[str]:
    return ["train", "xl151m", "--size", "tiny", "--run-dir", str(run_dir), "--quiet", *SMALL, "--set", f"train.max_steps={steps}", *extra]


def fails_cleanly(args: list[str], *fragments: str) -> str:
    """Run the CLI; it must end with exit 2 and one `error:` line holding every fragment."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_members) -> Path:
    """xl151m trained as :func:`train_args` trains it (the suite's shared tiny recipe); tests that change it take :func:`run_copy`."""
    return tiny_members(tmp_path_factory.mktemp("faults"), "xl151m") / "xl151m-tiny-synthetic-small"


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, message",
    [
        ("train.eval_interval=0", "train.eval_interval must be >= 1, got 0"),
        ("train.log_interval=0", "train.log_interval must be >= 1, got 0"),
        ("model.n_head=0", "model.n_head must be >= 1, got 0"),
        ("model.dropout=2.0", "model.dropout must be in [0, 1), got 2.0"),
        ("train.lr=.nan", "train.lr must be > 0, got nan"),
        ("train.max_steps=0", "train.max_steps must be >= 1, got 0"),
        ("eval.batch_size=0", "eval.batch_size must be >= 1, got 0"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(tmp_path, setting, message):
    fails_cleanly(train_args(tmp_path / "run", 2, "--set", setting), message)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--mem-len", "-7"], "eval.mem_len must be >= 0, or -1, got -7"),
        (["--attn-len", "-1"], "--attn-len must be >= 0, got -1"),
        (["--batch-size", "0"], "eval.batch_size must be >= 1, got 0"),
        (["--batch-size", "1000000"], "eval.batch_size 1,000,000 is more streams than the 599 targets"),
    ],
)
def test_eval_options_out_of_range_or_beyond_memory(trained, options, message):
    fails_cleanly(["eval", str(trained), "--split", "test", "--quiet", *options], message)


def test_an_evaluation_beyond_memory_is_refused_with_the_estimate(trained, monkeypatch):
    from txlab.runs import capacity

    monkeypatch.setattr(capacity, "machine_memory", lambda device: 2**20)  # a machine of 1 MiB
    line = fails_cleanly(["eval", str(trained), "--split", "test", "--quiet", "--batch-size", "64"], "this evaluation", "needs at least")
    assert "more than the 0.0 GiB this machine's cpu has" in line
    assert not (trained / "eval").exists()


def test_the_memory_bound_is_below_the_measured_footprint():
    from txlab.presets import resolve_preset
    from txlab.runs.capacity import step_bytes
    from txlab.runs.footprint import training_memory

    for preset in ("xl151m", "transformer128m", "lstm", "qrnn"):
        cfg = update_dataclass(resolve_preset(preset, "tiny"), {"model": {"n_token": 300}})
        bound = step_bytes(cfg.model, cfg.train.batch_size, cfg.model.tgt_len, cfg.model.mem_len, training=True)
        assert 0.4 * training_memory(cfg, 300) < bound <= training_memory(cfg, 300), preset


def test_speed_refuses_an_attention_length_beyond_memory_before_timing(tmp_path):
    fails_cleanly(["speed", "--size", "tiny", "--attn-len", "10000000", "--out-dir", str(tmp_path / "o"), "--fig-dir", str(tmp_path / "f")],
                  "attention length 10,000,000", "GiB")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("options, message", [(["--set", "batch_size=0"], "batch_size must be >= 1, got 0"), (["--set", "n_boot=-1"], "n_boot must be >= 0, got -1")])
def test_recl_settings_are_refused_before_any_work(trained, tmp_path, options, message):
    fails_cleanly(["recl", "--group", str(trained), "--set", "train_missing=false", "--out-dir", str(tmp_path / "o"), "--quiet", *options], message)
    assert not (tmp_path / "o").exists()


def test_recl_refuses_a_collection_beyond_memory_before_collecting(run_copy, tmp_path, monkeypatch):
    from txlab.runs import capacity

    monkeypatch.setattr(capacity, "machine_memory", lambda device: 2**20)
    fails_cleanly(["recl", "--group", str(run_copy), "--set", "train_missing=false", "--set", "grid=4,8", "--set", "blocks=2", "--set", "block_len=20", "--set", "batch_size=512",
                   "--quiet", "--out-dir", str(tmp_path / "o")], "collecting the losses of", "needs at least")
    assert not (run_copy / "losses").exists()


def test_generate_refuses_a_temperature_that_underflows(trained):
    fails_cleanly(["generate", str(trained), "--prompt", "a", "--temperature", "1e-30"], "--temperature must be in [0.01, 100], got 1e-30")


# --- damaged files ----------------------------------------------------------------------------------


def test_meta_json_holding_a_number_names_itself_damaged(run_copy):
    (run_copy / "checkpoint" / "meta.json").write_text("42\n")
    fails_cleanly(["eval", str(run_copy), "--quiet"], "meta.json is damaged (the top level is int, not dict)", "rerun `txlab train`")


def test_meta_json_with_a_damaged_config_names_itself(run_copy):
    meta = json.loads((run_copy / "checkpoint" / "meta.json").read_text())
    meta["config"]["model"]["n_head"] = "four"
    (run_copy / "checkpoint" / "meta.json").write_text(json.dumps(meta))
    fails_cleanly(["eval", str(run_copy), "--quiet"], "meta.json is damaged", "model.n_head")


def test_a_truncated_training_state_names_itself_on_resume(run_copy):
    state = run_copy / "checkpoint" / "train_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    fails_cleanly(train_args(run_copy, 4), "train_state.pt is damaged")


def test_a_torn_last_metrics_line_is_dropped_on_resume_with_a_warning(run_copy):
    metrics = run_copy / "metrics.jsonl"
    with metrics.open("a") as fh:
        fh.write('{"step": 3, "split": "tra')
    result = runner.invoke(app, [arg for arg in train_args(run_copy, 4) if arg != "--quiet"])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "dropped its last line" in result.output
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "valid"] == [2, 4]


def test_a_bad_metrics_line_before_the_end_is_damage(run_copy):
    metrics = run_copy / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], "{torn", *lines[1:]]) + "\n")
    fails_cleanly(train_args(run_copy, 4), "metrics.jsonl is damaged (line 2:")


def test_jsonl_reader_keeps_complete_lines_and_reports_the_torn_one(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    warnings = []
    assert read_jsonl(path, "rebuild it", warnings.append) == [{"step": 1}, {"step": 2}]
    assert len(warnings) == 1
    with pytest.raises(DamagedFile, match=r"log.jsonl is damaged \(line 3: .*\); rebuild it"):
        read_jsonl(path, "rebuild it")


@pytest.fixture(scope="module")
def collected(trained, tmp_path_factory) -> Path:
    from txlab.measure.collection import Collection
    from txlab.measure.losses import collect_run_losses

    run = tmp_path_factory.mktemp("losses") / "run"
    shutil.copytree(trained, run)
    table = collect_run_losses(run, Collection("valid", (4, 8, 12), 2, 20), batch_size=4, progress=False)
    return table.path


@pytest.mark.parametrize("damage", ["meta truncated", "meta a list", "block truncated", "block of another shape"])
def test_damaged_loss_caches_name_themselves(collected, tmp_path, damage):
    from txlab.measure.losses import load_losses

    directory = tmp_path / "losses"
    shutil.copytree(collected, directory)
    if damage == "meta truncated":
        path = directory / "meta.json"
        path.write_text(path.read_text()[:40])
    elif damage == "meta a list":
        path = directory / "meta.json"
        path.write_text("[1, 2]")
    else:
        path = directory / "block-00001.npy"
        if damage == "block truncated":
            path.write_bytes(path.read_bytes()[:30])
        else:
            np.save(path, np.zeros((2, 20), np.float32))
    with pytest.raises(TxlabError, match=rf"{path.name} is damaged \(.+\); delete it and rerun `txlab recl`"):
        load_losses(directory)


def test_a_damaged_corpus_cache_names_itself(tmp_path):
    from txlab.config import DataConfig
    from txlab.data.corpus import load_corpus

    corpus_dir = tmp_path / "data" / "tinyshakespeare"
    corpus_dir.mkdir(parents=True)
    (corpus_dir / "input.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 300)
    cfg = DataConfig(corpus="tinyshakespeare", data_dir=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"))
    corpus = load_corpus(cfg, progress=False)
    train_ids = corpus.cache_dir / "train.npy"
    del corpus
    train_ids.write_bytes(train_ids.read_bytes()[:60])
    with pytest.raises(TxlabError, match=r"train.npy is damaged \(.+\); delete .* and rerun to encode the corpus again"):
        load_corpus(cfg, progress=False)


@pytest.mark.parametrize("damage", ["row.json a list", "row.json without eval_lens", "config.yaml without model", "record truncated"])
def test_damaged_study_outputs_name_themselves(tmp_path, damage):
    from txlab.analysis.ablation import ablation_curves, ablation_eval_name

    run = tmp_path / "runs" / "r-s0"
    (run / "ablate").mkdir(parents=True)
    row = {"row_id": "r", "remark": "", "seed": 0, "init_len": 16, "eval_lens": [16], "split": "valid", "eval_tokens": 0}
    record = run / "ablate" / ablation_eval_name(16, "valid", 0)
    record.write_text(json.dumps({"loss": 1.0, "ppl": 2.718, "tokens": 10}))
    (run / "config.yaml").write_text("model: {mem_len: 0, pos_enc: ours, family: xl, tgt_len: 16}\ntrain: {loss: full}\n")
    (run / "ablate" / "row.json").write_text(json.dumps(row))
    assert len(ablation_curves(tmp_path, ["r-s0"])[1]) == 1
    damaged = {"row.json a list": run / "ablate" / "row.json", "row.json without eval_lens": run / "ablate" / "row.json",
               "config.yaml without model": run / "config.yaml", "record truncated": record}[damage]
    damaged.write_text({"row.json a list": "[1]", "row.json without eval_lens": json.dumps({**row, "eval_lens": None}),
                        "config.yaml without model": "train: {loss: full}\n", "record truncated": '{"loss": 1.0, "pp'}[damage])
    with pytest.raises(DamagedFile, match=rf"{damaged.name} is damaged \(.+\); delete it and rerun `txlab ablate`"):
        ablation_curves(tmp_path, ["r-s0"])


def test_import_hf_config_with_wrong_value_types(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "transfo-xl", "n_layer": "two", "sample_softmax": -1}')
    fails_cleanly(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run"), "--data", "synthetic"], "model.n_layer", "integer")
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "transfo-xl", "sample_softmax": "no"}')
    fails_cleanly(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run"), "--data", "synthetic"], "config.json is damaged")
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_pickle_asking_for_unbounded_memory_is_refused(tmp_path):
    from txlab.runs.convert import read_vocabulary

    class Huge:
        def __reduce__(self):
            return bytearray, (10**15,)

    path = tmp_path / "vocab.pkl"
    path.write_bytes(pickle.dumps({"idx2sym": ["a"], "x": Huge()}, protocol=4))
    assert path.stat().st_size < 200
    with pytest.raises(TxlabError, match="asks for a bytearray of 1,000,000,000,000,000 bytes"):
        read_vocabulary(path)


# --- one process per run directory; evaluation records -----------------------------------------------


def test_a_second_training_of_a_held_run_directory_is_refused_naming_the_holder(run_copy):
    with hold_directory(run_copy, "txlab train"):
        fails_cleanly(train_args(run_copy, 4), f"is in use by pid {os.getpid()}", "txlab train")
    assert read_meta(run_copy)["step"] == 2


@pytest.mark.parametrize("extra", [[], ["--set", "train.lr=0.5"], ["--restart"]])
def test_a_held_run_directory_is_refused_for_its_holder_before_anything_else(run_copy, extra):
    # a training before its first checkpoint (records, no checkpoint), asked for again with the same or
    # another configuration, or --restart: the holder is what to know, not "pass --restart" or a plan
    shutil.rmtree(run_copy / "checkpoint")
    with hold_directory(run_copy, "txlab train"):
        result = runner.invoke(app, train_args(run_copy, 4, *extra))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {run_copy} is in use by pid {os.getpid()}") and "--restart" not in result.output
    assert result.output.count("\n") == 1, result.output
    assert (run_copy / "metrics.jsonl").stat().st_size  # the holder's records are untouched


def test_the_lock_of_a_killed_process_is_taken_over(run_copy):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from txlab.fileio import hold_directory\n"
                               f"with hold_directory({str(run_copy)!r}, 'txlab train'):\n    print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    fails_cleanly(train_args(run_copy, 4), f"pid {holder.pid}")
    holder.kill()
    holder.wait()
    result = runner.invoke(app, train_args(run_copy, 4))
    assert result.exit_code == 0, result.output
    assert read_meta(run_copy)["step"] == 4


def test_training_removes_the_copies_killed_saves_left(run_copy):
    stale = run_copy / ".checkpoint.k3x9"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half a copy")
    shutil.copytree(run_copy / "checkpoint", run_copy / ".checkpoint.old")
    shutil.rmtree(run_copy / "checkpoint")  # a kill between the two renames of a save: only the old copy is whole
    result = runner.invoke(app, train_args(run_copy, 2))
    assert result.exit_code == 0, result.output
    assert not stale.exists() and read_meta(run_copy)["step"] == 2


def test_evaluations_with_other_batch_sizes_keep_their_own_records(run_copy):
    records = []
    for batch in ("2", "3"):
        result = runner.invoke(app, ["eval", str(run_copy), "--split", "test", "--batch-size", batch, "--json", "--quiet"])
        assert result.exit_code == 0, result.output
        records.append(json.loads(result.output.strip().splitlines()[-1]))
    names = sorted(p.name for p in (run_copy / "eval").iterdir())
    assert names == ["test-tgt16-mem32-clamp0-same-b2.json", "test-tgt16-mem32-clamp0-same-b3.json"]
    assert [r["batch_size"] for r in records] == [2, 3] and records[0]["loss"] != records[1]["loss"]


def test_a_group_naming_one_run_twice_through_a_symlink_is_refused(trained, tmp_path):
    (tmp_path / "link").symlink_to(trained)
    fails_cleanly(["recl", "--group", str(trained), str(tmp_path / "link"), "--set", "train_missing=false", "--out-dir", str(tmp_path / "o"), "--quiet"],
                  "names one run twice")
    assert not (tmp_path / "o").exists()


def test_a_group_mixing_corpora_is_refused_before_any_model_trains(trained, tmp_path):
    fails_cleanly(["recl", "--group", str(trained), "lstm", "--size", "tiny", "--data", "synthetic-short",
                   "--models-root", str(tmp_path / "models"), "--out-dir", str(tmp_path / "o"), "--quiet"],
                  "mixes corpora")
    assert not (tmp_path / "models").exists()


# --- disks that refuse writes ---------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC])
def test_a_disk_refusing_writes_ends_in_one_line_and_keeps_the_checkpoint(run_copy, monkeypatch, code):
    import safetensors.torch

    from txlab.runs import checkpoint

    def refuse(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")  # what a full disk leaves before the error
        raise safetensors.SafetensorError(f"Error while serializing: IoError(Os {{ code: {code}, kind: Other, message: \"x\" }})")

    monkeypatch.setattr(checkpoint, "save_file", refuse)
    line = fails_cleanly(train_args(run_copy, 4), f"(errno {code}, {errno.errorcode[code]})", "model.safetensors")
    assert os.strerror(code) in line
    assert sorted(p.name for p in run_copy.iterdir() if p.name.startswith(".checkpoint")) == []
    assert load_checkpoint(run_copy).meta["step"] == 2


def test_a_read_only_destination_ends_in_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    from txlab import fileio

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "run" / "config.yaml"))

    monkeypatch.setattr(fileio.tempfile, "mkstemp", read_only)
    fails_cleanly(train_args(tmp_path / "run"), "config.yaml: Read-only file system (errno 30, EROFS)")
    assert not (tmp_path / "run").exists()


def test_an_atomic_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    write_text_atomic(path, "old\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_recl_on_a_full_disk_ends_in_one_line_and_leaves_no_folders(run_copy, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    fails_cleanly(["recl", "--group", str(run_copy), "--set", "train_missing=false", "--set", "grid=4,8", "--set", "blocks=2", "--set", "block_len=20", "--quiet",
                   "--out-dir", str(tmp_path / "o"), "--fig-dir", str(tmp_path / "f")], "meta.json: No space left on device (errno 28, ENOSPC)")
    assert not (run_copy / "losses").exists() and not (tmp_path / "o").exists()


def test_a_failed_write_into_new_folders_leaves_no_empty_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "out" / "group" / "table.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == []


def test_other_os_errors_stay_bugs_with_a_traceback():
    from txlab.errors import io_error_message

    assert io_error_message(OSError(errno.ECONNRESET, "reset")) is None
    assert io_error_message(OSError(errno.ENOSPC, "No space left on device", "/x/y")) == "/x/y: No space left on device (errno 28, ENOSPC)"



# --- round 3 (issue 32): devices -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["eval", "attention", "generate", "roles"])
@pytest.mark.parametrize("device, message", [
    ("tpu", "--device: unknown device 'tpu' (did you mean 'cpu'?); txlab runs models on cpu, cuda, cuda:N (an NVIDIA GPU) or mps (Apple silicon)"),
    ("cuda:x", "--device: unknown device 'cuda:x'"),
])
def test_a_device_torch_does_not_know_is_one_line_in_every_command(trained, command, device, message):
    extra = ["--prompt", "b001"] if command == "generate" else []
    fails_cleanly([command, str(trained), "--device", device, *extra], message)


needs_cpu_build = pytest.mark.skipif(__import__("torch").version.cuda is not None, reason="a CPU-only build of torch refuses cuda")


@needs_cpu_build
@pytest.mark.parametrize("args", [
    ["eval", "RUN"], ["attention", "RUN"], ["generate", "RUN", "--prompt", "b001"], ["roles", "RUN"],
    ["recl", "--group", "RUN", "--set", "train_missing=false", "--dry-run"], ["speed", "--size", "tiny", "--attn-len", "8", "--dry-run"],
    ["train", "xl151m", "--size", "tiny", "--dry-run"],
])
def test_cuda_on_a_cpu_build_is_one_line_in_every_command(trained, tmp_path, args):
    args = [str(trained) if a == "RUN" else a for a in args]
    fails_cleanly([*args, "--device", "cuda"], "--device cuda: this torch (", "is a CPU-only build, without CUDA; install torch's CUDA build")
    assert not (Path(os.environ["TXLAB_HOME"])).exists()


@needs_cpu_build
def test_train_device_from_set_or_config_is_checked_before_the_plan(tmp_path):
    fails_cleanly(train_args(tmp_path / "run", 2, "--set", "train.device=cuda"), "train.device cuda: this torch (", "CPU-only build")
    fails_cleanly(train_args(tmp_path / "run", 2, "--set", "train.device=tpu"), "train.device: unknown device 'tpu'")
    (tmp_path / "c.yaml").write_text("train: {device: gpu}\n")
    fails_cleanly(train_args(tmp_path / "run", 2, "--config", str(tmp_path / "c.yaml")), "train.device: unknown device 'gpu'")
    assert not (tmp_path / "run").exists()


def test_study_device_settings_are_checked_where_they_are_given(tmp_path):
    fails_cleanly(["speed", "--size", "tiny", "--attn-len", "8", "--set", "device=tpu", "--dry-run"], "command line: device: unknown device 'tpu'")
    fails_cleanly(["ablate", "studies/table6.yaml", "--set", "device=xla", "--dry-run"], "command line: device: unknown device 'xla'")


def test_the_device_check_names_missing_gpus_and_indices(monkeypatch):
    import torch

    from txlab.devices import check_device

    assert check_device("cpu") == torch.device("cpu") and check_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TxlabError, match=r"--device cuda: torch .* \(CUDA 12.8\) sees no GPU here .*CUDA_VISIBLE_DEVICES"):
        check_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(TxlabError, match=r"--device cuda:2: this machine has 2 GPUs \(cuda:0 to cuda:1\)"):
        check_device("cuda:2")


# --- round 3: paths that escape the home -----------------------------------------------------------


def home_dir() -> Path:
    return Path(os.environ["TXLAB_HOME"])


@pytest.mark.parametrize("args, message", [
    (["recl", "--group", "RUN", "--name", "../../x", "--set", "train_missing=false", "--dry-run"], "--name '../../x' is not a name"),
    (["speed", "--size", "tiny", "--attn-len", "8", "--name", "../../x", "--dry-run"], "--name '../../x' is not a name"),
    (["train", "xl151m", "--size", "tiny", "--set", "name=../../../../x", "--dry-run"], "the run name (name) '../../../../x' is not a name"),
    (["train", "xl151m", "--size", "tiny", "--set", "name=.checkpoint", "--dry-run"], "the run name (name) '.checkpoint' is not a name"),
])
def test_names_that_would_leave_the_home_are_refused(trained, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    fails_cleanly([str(trained) if a == "RUN" else a for a in args], message, "a path goes to the path options")
    assert list(tmp_path.iterdir()) == [] and not home_dir().exists()


def test_a_study_name_or_relative_output_leaving_the_home_is_refused(tmp_path):
    from txlab.workspace import resolve

    (tmp_path / "s.yaml").write_text("name: ../../x\nprofiles:\n  cpu: {size: tiny}\n")
    fails_cleanly(["speed", "--study", str(tmp_path / "s.yaml"), "--dry-run"], "s.yaml: name '../../x' is not a name")
    with pytest.raises(TxlabError, match=r"\.\./x leaves the home .* \('\.\.'\); give an absolute path to write outside it"):
        resolve("results/../../x")
    assert resolve(tmp_path / "abs") == tmp_path / "abs"


def test_a_run_directory_that_is_a_device_or_file_is_refused(tmp_path):
    fails_cleanly(train_args(Path("/dev/null")), "/dev/null is not a directory (a file or a device); choose a folder for the run")
    (tmp_path / "file").write_text("x")
    fails_cleanly(train_args(tmp_path / "file"), "is not a directory")
    assert (tmp_path / "file").read_text() == "x"


# --- round 3: resource bombs -------------------------------------------------------------------------

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def test_a_billion_laughs_config_is_refused_fast(tmp_path):
    import time

    (tmp_path / "laughs.yaml").write_text(BILLION_LAUGHS)
    started = time.perf_counter()
    fails_cleanly(train_args(tmp_path / "run", 2, "--config", str(tmp_path / "laughs.yaml")),
                  "laughs.yaml expands to more than 200,000 values through its aliases")
    assert time.perf_counter() - started < 5 and not (tmp_path / "run").exists()


def test_a_billion_laughs_study_is_refused_fast(tmp_path):
    study = "name: laughs\nbase: {preset: xl151m}\nrows: []\nprofiles: {cpu: {size: tiny}}\n"
    (tmp_path / "laughs.yaml").write_text(study + BILLION_LAUGHS.replace("a: &a", "x: &a", 1))
    fails_cleanly(["ablate", str(tmp_path / "laughs.yaml"), "--dry-run"], "laughs.yaml expands to more than 200,000 values")


def test_special_and_oversized_yaml_files_are_refused(tmp_path):
    fails_cleanly(train_args(tmp_path / "run", 2, "--config", "/dev/zero"), "the YAML file /dev/zero is not a regular file (a device, pipe or folder)")
    (tmp_path / "big.yaml").write_bytes(b"#" * (4 * 2**20 + 1))
    fails_cleanly(train_args(tmp_path / "run", 2, "--config", str(tmp_path / "big.yaml")), "holds 4,194,305 bytes, more than the 4,194,304 txlab reads from one")
    assert not (tmp_path / "run").exists()


def test_an_integer_of_100000_digits_in_set_is_one_short_line(tmp_path):
    line = fails_cleanly(train_args(tmp_path / "run", 2, "--set", "model.d_model=" + "9" * 100_000),
                         "the value of override 'model.d_model=999", "(100,014 characters)", "settings are 64-bit integers")
    assert len(line) < 400 and "set_int_max_str_digits" not in line


def test_a_loss_block_whose_header_claims_a_huge_shape_is_damage_before_allocating(tmp_path):
    import numpy.lib.format as npy

    from txlab.fileio import load_npy

    path = tmp_path / "block-00000.npy"
    with path.open("wb") as fh:
        npy.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 10**6)})
        fh.write(np.zeros(6, dtype=np.float32).tobytes())
    with pytest.raises(DamagedFile, match=r"claims shape \(1000000000000, 1000000\) of float32 \(4,000,000,000,000,000,000 bytes\), but the file holds 24 bytes"):
        load_npy(path, "delete it", ndim=2)
    np.save(path, np.ones((2, 3), dtype=np.float32))
    assert load_npy(path, "delete it", ndim=2).sum() == 6


def test_a_meta_json_describing_a_model_beyond_memory_is_refused_before_building_it(run_copy):
    meta = json.loads((run_copy / "checkpoint" / "meta.json").read_text())
    meta["config"]["model"]["d_model"] = 10**8
    (run_copy / "checkpoint" / "meta.json").write_text(json.dumps(meta))
    fails_cleanly(["eval", str(run_copy), "--quiet"], "meta.json is damaged (its config describes a model of at least", "GiB, more than this machine's")


# --- round 3: forged or mismatched files --------------------------------------------------------------


def test_a_weights_file_whose_dtype_was_forged_is_refused(run_copy):
    path = run_copy / "checkpoint" / "model.safetensors"
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    forged = data[8 : 8 + size].replace(b'"F32"', b'"I32"', 1)  # the same 4 bytes a value: the file still parses
    name = next(k for k, v in json.loads(forged).items() if k != "__metadata__" and v["dtype"] == "I32")
    path.write_bytes(data[:8] + forged + data[8 + size :])
    fails_cleanly(["eval", str(run_copy), "--quiet"], "model.safetensors is damaged (", f"{name} is int32", "the model's float32")


def test_a_training_state_of_another_model_is_refused_on_resume(run_copy, tmp_path):
    other = tmp_path / "other"
    result = runner.invoke(app, train_args(other, 2, "--set", "model.n_layer=1"))
    assert result.exit_code == 0, result.output
    shutil.copy(other / "checkpoint" / "train_state.pt", run_copy / "checkpoint" / "train_state.pt")
    fails_cleanly(train_args(run_copy, 4), "train_state.pt is damaged (its optimizer holds", "it belongs to another run")


# --- round 3: half-written state ----------------------------------------------------------------------


def test_a_refused_training_leaves_no_run_directory_nor_new_parents(tmp_path):
    (tmp_path / "text").mkdir()
    for split, text in {"train": "a", "valid": "a b", "test": "a b"}.items():
        (tmp_path / "text" / f"{split}.txt").write_text(text)
    fails_cleanly(train_args(tmp_path / "new" / "a" / "run", 2, "--text", str(tmp_path / "text"), "--tokenizer", "word"), "cannot cut")
    assert not (tmp_path / "new").exists()


def test_an_unknown_corpus_leaves_no_folder_in_the_home(tmp_path):
    fails_cleanly(["train", "xl151m", "--size", "tiny", "--data", "nosuch", "--quiet"], "unknown corpus 'nosuch'")
    assert not home_dir().exists()


def test_a_full_disk_on_the_second_checkpoint_is_one_line_and_the_rerun_resumes(run_copy, monkeypatch):
    import safetensors

    from txlab.runs import checkpoint

    real = checkpoint.save_file

    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")  # as safetensors 0.7 words it

    monkeypatch.setattr(checkpoint, "save_file", full)
    fails_cleanly(train_args(run_copy, 4), "model.safetensors: No space left on device (errno 28, ENOSPC)")
    monkeypatch.setattr(checkpoint, "save_file", real)
    assert load_checkpoint(run_copy).meta["step"] == 2
    result = runner.invoke(app, train_args(run_copy, 4))
    assert result.exit_code == 0 and load_checkpoint(run_copy).meta["step"] == 4, result.output


def test_a_full_disk_while_torch_saves_the_training_state_is_one_line(tmp_path, monkeypatch):
    from txlab.runs import checkpoint

    def full(self, data):
        self.error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise self.error

    monkeypatch.setattr(checkpoint._WriteErrorKeeper, "write", full)
    fails_cleanly(train_args(tmp_path / "run"), "train_state.pt: No space left on device (errno 28, ENOSPC)")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no records without a checkpoint: the rerun starts afresh
    monkeypatch.undo()
    result = runner.invoke(app, train_args(tmp_path / "run"))
    assert result.exit_code == 0, result.output


# slow: a child interpreter that imports torch and is killed; the default run keeps one real kill,
# tests/test_train.py::test_sigkill_then_resume_equals_uninterrupted[fp32]
@pytest.mark.slow
def test_an_import_killed_before_its_config_leaves_no_run_and_the_rerun_completes(tmp_path):
    """kill -9 between the checkpoint and config.yaml (a real kill, in a child process): nothing at --out that
    the rerun would refuse as 'already holds a run'; the rerun removes the leftover and imports."""
    script = f"""
import os, sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
import torch
from test_convert import perturbed_model, reference_state_dict, write_vocab, write_model_yaml
import txlab.runs.convert as convert
model = perturbed_model()
torch.save(reference_state_dict(model), {str(tmp_path / 'state.pt')!r})
write_vocab(Path({str(tmp_path / 'vocab.txt')!r}), 50)
write_model_yaml(Path({str(tmp_path / 'model.yaml')!r}), model.cfg)
convert.save_config = lambda *args, **kwargs: os.kill(os.getpid(), 9)
convert.import_reference({str(tmp_path / 'state.pt')!r}, {str(tmp_path / 'run')!r}, vocab_file={str(tmp_path / 'vocab.txt')!r},
                         corpus="synthetic", config_file={str(tmp_path / 'model.yaml')!r})
"""
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "run").exists() and [p.name.split(".")[1] for p in tmp_path.glob(".importing-*")] == ["importing-run"]
    from txlab.runs.convert import import_reference

    result = import_reference(tmp_path / "state.pt", tmp_path / "run", vocab_file=tmp_path / "vocab.txt", corpus="synthetic",
                              config_file=tmp_path / "model.yaml")
    assert sorted(p.name for p in result.run_dir.iterdir()) == ["checkpoint", "config.yaml", "import.json"]
    assert list(tmp_path.glob(".importing-*")) == [] and load_checkpoint(result.run_dir).meta["step"] == 0


def test_special_and_oversized_prompt_files_are_refused(trained, tmp_path):
    fails_cleanly(["generate", str(trained), "--prompt-file", "/dev/zero"], "the prompt file /dev/zero is not a regular file")
    (tmp_path / "big.txt").write_bytes(b"b001 " * (16 * 2**20 // 5 + 1))
    fails_cleanly(["generate", str(trained), "--prompt-file", str(tmp_path / "big.txt")], "more than the 16,777,216 txlab reads from one")


def test_generation_is_bounded_and_ctrl_c_stops_it_cleanly(trained, monkeypatch):
    from txlab.measure import generate

    fails_cleanly(["generate", str(trained), "--prompt", "b001", "--tokens", "1000000000"], "--tokens must be in [1, 1e+06], got 1000000000")
    real = generate.sample_tokens

    def interrupted(*args, **kwargs):
        yield from itertools.islice(real(*args, **kwargs), 3)
        raise KeyboardInterrupt

    monkeypatch.setattr(generate, "sample_tokens", interrupted)
    result = runner.invoke(app, ["generate", str(trained), "--prompt", "b001", "--tokens", "1000000", "--json"])
    assert result.exit_code == 130 and "Traceback" not in result.output, result.output
    assert "generated 3 tokens after a 1-token prompt (top-k 40, temperature 1, seed 0) before Ctrl-C stopped it" in result.output
    assert json.loads(result.output.strip().splitlines()[-1])["interrupted"] is True


def test_corpus_options_a_run_cannot_use_are_refused(trained, tmp_path):
    fails_cleanly(["eval", str(trained), "--corpus-dir", str(tmp_path), "--quiet"],
                  f"--corpus-dir {tmp_path}: corpus synthetic-small is generated, not read from a folder; leave --corpus-dir out")
    fails_cleanly(train_args(tmp_path / "run", 2, "--corpus-dir", str(tmp_path)), "corpus synthetic-small is generated")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("corpus, files", [
    ("wikitext-2", {"wiki.train.tokens": " \n" * 2000, "wiki.valid.tokens": " a b c d e f g h \n" * 20, "wiki.test.tokens": " a b c \n" * 20}),
    ("tinyshakespeare", {"input.txt": " \n\t" * 20000}),
])
def test_a_built_in_corpus_whose_split_is_whitespace_only_is_refused(tmp_path, corpus, files):
    (tmp_path / "c").mkdir()
    for name, text in files.items():
        (tmp_path / "c" / name).write_text(text)
    fails_cleanly(train_args(tmp_path / "run", 2, "--data", corpus, "--corpus-dir", str(tmp_path / "c")),
                  f"split of {corpus} in {tmp_path / 'c'} holds only whitespace and line ends: give it some text")
    assert not (tmp_path / "run").exists()


def test_an_attention_length_of_10_to_the_12_is_refused_before_its_position_table(run_copy, tmp_path):
    fails_cleanly(["eval", str(run_copy), "--attn-len", "1000000000000", "--quiet"],
                  "1,000,000,000,016 keys need a relative-position table of at least", "GiB, more than the")
    assert not (run_copy / "eval").exists()
    study = "name: huge\nbase: {preset: xl151m}\nrows:\n  - {recurrence: true, encoding: ours, loss: full}\n" \
            "profiles:\n  tiny: {size: tiny, eval_lens: [1000000000000], seeds: [0], out: " + str(tmp_path / "o") + ", figures: " + str(tmp_path / "f") + \
            ", sets: [train.max_steps=2, data.synthetic_tokens=5000, data.synthetic_eval_tokens=600, train.eval_interval=2]}\n"
    (tmp_path / "study.yaml").write_text(study)
    fails_cleanly(["ablate", str(tmp_path / "study.yaml"), "--profile", "tiny", "--quiet"], "keys need a relative-position table")


# --- --redraw over damaged folders (issue 62) -------------------------------------------------------

GROUP = Path(__file__).resolve().parents[1] / "results" / "recl" / "families-cpu-tinyshakespeare"


def _damage_figure3(folder: Path) -> None:
    lines = (folder / "figure3.csv").read_text().splitlines()
    cells = lines[1].split(",")
    cells[-1] = "nan"
    lines[1] = ",".join(cells)
    lines[2] = ",".join([*lines[2].split(",")[:-1], "a gain"])
    (folder / "figure3.csv").write_text("\n".join(lines) + "\n")


REDRAW_DAMAGE = {
    "a truncated recl.json": (lambda folder: (folder / "recl.json").write_text((folder / "recl.json").read_text()[:300]),
                              "recl.json is damaged ("),
    "a NaN and a text cell in figure3.csv": (_damage_figure3, "figure3.csv is damaged (column 'gain', line 2: nan is not a number)"),
    "no figure4.csv": (lambda folder: (folder / "figure4.csv").unlink(), "no Figure 4 points at"),
}


@pytest.mark.parametrize("damage", REDRAW_DAMAGE)
def test_redraw_checks_every_folder_before_drawing_and_refuses_a_damaged_one_naming_its_file(tmp_path, damage):
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(GROUP, good)
    shutil.copytree(GROUP, bad)
    harm, named = REDRAW_DAMAGE[damage]
    harm(bad)
    line = fails_cleanly(["recl", "--redraw", str(good), "--redraw", str(bad), "--fig-dir", str(tmp_path / "figures")])
    assert f"{bad}/" in line and named in line
    assert not (tmp_path / "figures").exists()  # the good folder's figures neither


def test_redraw_refuses_a_group_over_seeds_whose_rows_lack_a_key(tmp_path):
    group = next((Path(__file__).resolve().parents[1] / "results" / "recl").glob("*/table8-seeds.json")).parent
    bad = shutil.copytree(group, tmp_path / "bad")
    record = json.loads((bad / "table8-seeds.json").read_text())
    del record["rows"][0]["recl"]
    (bad / "table8-seeds.json").write_text(json.dumps(record))
    line = fails_cleanly(["recl", "--redraw", str(bad), "--fig-dir", str(tmp_path / "figures")])
    assert "table8-seeds.json is damaged (a row of it: KeyError 'recl')" in line and not (tmp_path / "figures").exists()


def test_speed_redraw_refuses_a_damaged_table_naming_it(tmp_path):
    table = tmp_path / "table9-cpu.csv"
    rows = (Path(__file__).resolve().parents[1] / "results" / "speed" / "table9-cpu.csv").read_text().splitlines()
    header = rows[0].split(",")
    cells = rows[1].split(",")
    cells[header.index("slowdown")] = "fast"
    table.write_text("\n".join([rows[0], ",".join(cells), *rows[2:]]) + "\n")
    fails_cleanly(["speed", "--redraw", str(table), "--fig-dir", str(tmp_path / "figures")],
                  f"{table} is damaged (column 'slowdown', line 2: 'fast' is not a number)")
    table.write_text(rows[0][:40])  # cut short in its header
    fails_cleanly(["speed", "--redraw", str(table), "--fig-dir", str(tmp_path / "figures")], f"{table} is damaged (no column")
    assert not (tmp_path / "figures").exists()
