"""Compiled scoring (txlab.models.compiled): which models compile where, the same losses compiled or not, the layers
as loaded after, and a table finished as it began."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_causal_lm_model

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.measure.collection import Collection
from txlab.measure.losses import collect_losses, collect_model_losses, scoring
from txlab.models import compiled
from txlab.models.build import build_model
from txlab.models.compiled import compiles
from txlab.models.hf import HFLanguageModel
from txlab.models.interface import Context
from txlab.runs.scored import ScoredModel

GRID = (2, 4, 8)


def tokens(n: int = 120) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 41, n)


@pytest.fixture
def eager_backend(monkeypatch):
    """torch.compile's graph capture without code generation: the same operations, fast enough for the default run."""
    monkeypatch.setattr(compiled, "BACKEND", "eager")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_hugging_face_model_compiles_on_a_gpu_or_when_asked_and_txlab_models_never(arch):
    model = HFLanguageModel(random_causal_lm_model(arch))
    stack = model.layer_stack()
    assert stack is model.causal_lm.base_model.layers if arch == "llama" else stack is model.causal_lm.base_model.h
    assert (compiles(model, "auto"), compiles(model, "on"), compiles(model, "off")) == (False, True, False)  # auto: CUDA only
    xl = build_model(ModelConfig(n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=16, n_token=11, tgt_len=4, mem_len=4))
    assert xl.layer_stack() is None and not compiles(xl, "on")
    with pytest.raises(TxlabError, match="unknown compile setting 'of'. Did you mean 'off'"):
        compiles(model, "of")


def test_compiled_layers_read_the_same_losses_and_are_put_back(eager_backend):  # the Llama's in the slow test below
    model = HFLanguageModel(random_causal_lm_model("gpt2"))
    loaded = list(model.layer_stack())
    kwargs = {"tgt_len": 8, "context": Context(mem_len=0), "batch_size": 4}
    eager = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="off", **kwargs)
    with scoring(model, Context(mem_len=0), compile="on") as on:
        assert on and all(isinstance(layer, torch._dynamo.eval_frame.OptimizedModule) for layer in model.layer_stack())
    assert list(model.layer_stack()) == loaded  # as loaded again after scoring
    first = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="on", **kwargs)
    again = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="on", placebo=True, **kwargs)  # the compiled layers kept
    assert np.array_equal(first, eager) and again.shape == (len(GRID) - 1, 32)
    assert list(model.layer_stack()) == loaded


def test_a_table_records_whether_it_was_compiled_and_is_finished_as_it_began(tmp_path, eager_backend):
    model = HFLanguageModel(random_causal_lm_model("gpt2"))
    model.set_context(Context(mem_len=0))
    member = ScoredModel(model, "g", None, Context(mem_len=0), compile="on", home=tmp_path)
    collection = Collection("valid", GRID, 2, 16)
    table = collect_model_losses(member, tokens(), "h", collection, progress=False)
    assert table.meta["compiled"] is True
    (block := next(tmp_path.glob("losses/*/block-00001.npy"))).unlink()  # interrupted: one block to go
    off = ScoredModel(model, "g", None, Context(mem_len=0), compile="off", home=tmp_path)
    with pytest.raises(TxlabError, match="compiled: stored True, now False.*or set compile=on to finish it as it began"):
        collect_model_losses(off, tokens(), "h", collection, progress=False)
    finished = collect_model_losses(member, tokens(), "h", collection, progress=False)
    assert block.is_file() and np.array_equal(finished.losses, table.losses)


@pytest.mark.slow  # inductor generates and builds C++ for the CPU: tens of seconds
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_inductor_compiled_layers_read_the_losses_within_float_rounding(arch):
    model = HFLanguageModel(random_causal_lm_model(arch))
    kwargs = {"tgt_len": 8, "context": Context(mem_len=0), "batch_size": 4}
    eager = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="off", **kwargs)
    fused = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="on", **kwargs)
    assert np.abs(fused - eager).max() < 1e-4


def test_auto_scores_as_written_with_a_warning_where_torch_cannot_compile_and_on_says_why(monkeypatch):
    def refuses(graph, example_inputs):
        raise RuntimeError("this backend compiles nothing")

    monkeypatch.setattr(compiled, "BACKEND", refuses)
    monkeypatch.setattr(compiled, "compiles", lambda model, mode: mode != "off")  # as on a GPU
    model = HFLanguageModel(random_causal_lm_model("gpt2"))
    loaded = list(model.layer_stack())
    kwargs = {"tgt_len": 8, "context": Context(mem_len=0), "batch_size": 4}
    eager = collect_losses(model, tokens(), GRID, [20, 60], 16, compile="off", **kwargs)
    with pytest.warns(RuntimeWarning, match="could not compile GPT2Block .*this backend compiles nothing.*scoring the layers as written"):
        with scoring(model, Context(mem_len=0), compile="auto") as on:
            assert not on and list(model.layer_stack()) == loaded
    with pytest.warns(RuntimeWarning, match="could not compile"):
        assert np.array_equal(collect_losses(model, tokens(), GRID, [20, 60], 16, compile="auto", **kwargs), eager)
    with pytest.raises(Exception, match="this backend compiles nothing"):
        collect_losses(model, tokens(), GRID, [20, 60], 16, compile="on", **kwargs)
    assert list(model.layer_stack()) == loaded
