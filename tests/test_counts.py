"""The one count of a model (txlab.models.interface.ModelCounts): what plans count from its configuration alone
(txlab.models.build.count_model) is the built model's count (``model.counts()``), whose parameters are the model's
tensors, for every preset at every size and for the variants the ablations and presets use. Its FLOPs are held to
hand calculations (test_model, test_rnn, test_speed) and to torch's count of what a step executes (test_bench)."""

import dataclasses

import pytest
import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.build import build_model, count_model
from txlab.presets import PRESETS, get_preset, resolve_preset
from txlab.runs.zoo import known_vocab_size

SMALL = ModelConfig(n_token=97, n_layer=2, d_model=24, n_head=2, d_head=12, d_inner=40, tgt_len=8, mem_len=8)
VARIANTS = {
    "shaw": {"pos_enc": "shaw"}, "shaw-max-len": {"pos_enc": "shaw", "max_len": 5}, "vaswani": {"pos_enc": "vaswani"},
    "alrfou": {"pos_enc": "alrfou"}, "untied-biases": {"untie_r": True}, "no-recurrence": {"mem_len": 0},
    "vanilla": {"family": "vanilla", "pos_enc": "alrfou", "mem_len": 0}, "vanilla-vaswani": {"family": "vanilla", "pos_enc": "vaswani", "max_len": 12},
    "projected-embedding": {"d_embed": 16}, "untied-output": {"tie_weight": False},
    "adaptive": {"adaptive": True, "cutoffs": [20, 50], "div_val": 1, "d_embed": 16},
    "adaptive-div": {"adaptive": True, "cutoffs": [20, 50], "div_val": 2},
    "adaptive-full-width": {"adaptive": True, "cutoffs": [20, 50], "div_val": 2, "full_width_proj": True, "tie_projs": False},
    "adaptive-mixed-ties": {"adaptive": True, "cutoffs": [20, 50], "div_val": 1, "d_embed": 16, "tie_projs": [False, True, True],
                            "tie_weight": [True, False, True]},
    "lstm": {"family": "lstm", "n_layer": 3}, "lstm-adaptive": {"family": "lstm", "adaptive": True, "cutoffs": [30], "div_val": 2},
    "qrnn": {"family": "qrnn", "n_layer": 3, "qrnn_window": 3}, "qrnn-untied": {"family": "qrnn", "tie_weight": False},
}
PRESET_SIZES = [(name, size) for name in PRESETS for size in get_preset(name).sizes]


def _assert_counts_equal_the_model(cfg: ModelConfig) -> None:
    if cfg.family == "hf":
        pytest.importorskip("transformers")
    counts = count_model(cfg)
    with torch.device("meta"):
        model = build_model(cfg)
    assert counts == model.counts()  # for family hf, counted from the transformers model's weights
    assert counts.parameters == model.num_parameters()
    assert counts.max_context == model.max_context


@pytest.mark.parametrize("name, size", PRESET_SIZES, ids=[f"{name}-{size}" for name, size in PRESET_SIZES])
def test_the_counts_of_every_preset_are_the_built_models(name, size):
    cfg = resolve_preset(name, size)
    _assert_counts_equal_the_model(dataclasses.replace(cfg.model, n_token=cfg.model.n_token or known_vocab_size(cfg.data.corpus)))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_counts_of_every_variant_are_the_built_models(variant):
    _assert_counts_equal_the_model(dataclasses.replace(SMALL, **VARIANTS[variant]))


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_the_counts_of_a_hugging_face_architecture_are_the_built_models(arch):
    _assert_counts_equal_the_model(dataclasses.replace(SMALL, family="hf", hf_arch=arch, d_inner=36, max_len=20))


@pytest.mark.parametrize("changes, message", [
    ({"family": "vanilla", "pos_enc": "ours"}, "the vanilla Transformer uses absolute positions"),
    ({"adaptive": True, "cutoffs": [50, 20]}, "must be ascending"),
    ({"adaptive": True, "cutoffs": [20], "tie_weight": [True, False, True]}, "model.tie_weight lists 3 flags"),
    ({"adaptive": True, "cutoffs": [20, 50], "div_val": 64}, "no embedding dimensions"),
    ({"family": "hf", "hf_arch": "gpt2", "d_head": 5}, "a GPT-2 has heads of d_model / n_head"),
    ({"family": "hf", "hf_arch": "gpt3"}, "model.hf_arch must be one of"),
    ({"family": "hf", "hf_arch": "llama", "d_inner": 36, "dropout": 0.1}, "a Llama has no dropout on its hidden states"),
    ({"n_token": 0}, "model.n_token is not set"),
])
def test_what_cannot_be_built_cannot_be_counted_and_says_why_alike(changes, message):
    cfg = dataclasses.replace(SMALL, **changes)
    with pytest.raises(TxlabError, match=message) as counted:
        count_model(cfg)
    with pytest.raises(TxlabError) as built, torch.device("meta"):
        build_model(cfg)
    assert str(counted.value) == str(built.value)


def test_the_derived_counts_are_parts_and_multiples_of_the_forward_count():
    counts = count_model(SMALL)
    for keys in (1, 40):
        assert counts.reading_flops_per_token(keys) + counts.output_flops_per_token() == counts.flops_per_token(keys)
        assert counts.training_flops_per_token(keys) == 3 * counts.flops_per_token(keys)
    # the training path re-projects 16 memory rows per 8 tokens in both layers, and r_net over 25 distances per 2 x 8 tokens
    d, inner = SMALL.d_model, SMALL.n_head * SMALL.d_head
    assert counts.recomputed_flops_per_token(16, 8, 2) == 2 * (16 * 2 * d * 2 * inner / 8 + 2 * d * inner * 25 / 16)
    assert count_model(dataclasses.replace(SMALL, family="lstm")).recomputed_flops_per_token(16, 8, 2) == 0
