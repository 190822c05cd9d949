"""A kill at any moment of a checkpoint save leaves a complete checkpoint behind.

Each case forks a child that saves step 2 over a run directory holding step 1 and dies with
``os._exit`` (no cleanup runs, as with SIGKILL) just before its k-th file-system operation; the
parent then loads whatever is there. k walks over every operation of a save, and the same again
starting from the state a kill between the two renames leaves (the previous checkpoint only under
its `.old` name).
"""

import os
import shutil
from pathlib import Path

import pytest
import torch

import txlab.runs.checkpoint as checkpoint
from txlab.config import apply_overrides
from txlab.models.build import build_model
from txlab.presets import resolve_preset
from txlab.runs.checkpoint import load_checkpoint, read_meta, save_checkpoint

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills are simulated in a forked child")

VOCAB_HASH = "0" * 64


@pytest.fixture(scope="module")
def model_and_config():
    cfg = apply_overrides(resolve_preset("lstm", "tiny"), ["model.n_token=17"])
    torch.manual_seed(0)
    return build_model(cfg.model), cfg


def save(run_dir: Path, model_and_config, step: int) -> None:
    model, cfg = model_and_config
    save_checkpoint(run_dir, model, cfg, step=step, vocab_hash=VOCAB_HASH, train_state={"step": torch.tensor(step)})


class Operations:
    """Counts the file-system operations of a save; with ``kill_at`` set, the process dies before that one."""

    def __init__(self, monkeypatch, kill_at: int | None = None):
        self.count = 0
        self.kill_at = kill_at
        for owner, name in [(checkpoint, "save_file"), (checkpoint.torch, "save"), (checkpoint, "write_json_atomic"),
                            (checkpoint.shutil, "rmtree"), (Path, "rename")]:
            monkeypatch.setattr(owner, name, self._counted(getattr(owner, name)))

    def _counted(self, operation):
        def run(*args, **kwargs):
            if self.count == self.kill_at:
                os._exit(9)
            self.count += 1
            return operation(*args, **kwargs)
        return run


def save_killed_before_operation(run_dir: Path, model_and_config, k: int) -> None:
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery may run here, whatever happens
        try:
            mp = pytest.MonkeyPatch()
            Operations(mp, kill_at=k)
            save(run_dir, model_and_config, 2)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) in (0, 9)


def operations_of_one_save(tmp_path, monkeypatch, model_and_config) -> int:
    save(tmp_path / "count", model_and_config, 1)
    with monkeypatch.context() as mp:
        ops = Operations(mp)
        save(tmp_path / "count", model_and_config, 2)
    return ops.count


@pytest.mark.parametrize("start", ["checkpoint", "only the .old copy"])
def test_a_kill_at_any_operation_of_a_save_keeps_a_loadable_checkpoint(tmp_path, monkeypatch, model_and_config, start):
    n_ops = operations_of_one_save(tmp_path, monkeypatch, model_and_config)
    assert n_ops >= 5
    for k in range(n_ops + 1):
        run = tmp_path / f"kill-{k}"
        save(run, model_and_config, 1)
        if start == "only the .old copy":
            (run / "checkpoint").rename(run / ".checkpoint.old")
        save_killed_before_operation(run, model_and_config, k)
        assert read_meta(run)["step"] in (1, 2), f"killed before operation {k}"
        load_checkpoint(run)  # weights and metadata agree
        # the next save, uninterrupted, cleans up what the kill left
        save(run, model_and_config, 3)
        assert read_meta(run)["step"] == 3
        assert sorted(p.name for p in run.iterdir()) == ["checkpoint"], f"killed before operation {k}"
        shutil.rmtree(run)
