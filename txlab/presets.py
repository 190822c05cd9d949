"""The paper's named models, at the paper's size and at sizes that train on a laptop CPU.

Each preset is a base set of config overrides plus one set per size:

- ``paper``: the paper's configuration (Dai et al. 2019, Appendix/Table settings of the authors'
  scripts), for GPUs. Its default corpus is the paper's (WikiText-103, enwik8, text8, One Billion
  Word or Penn Treebank).
- ``cpu``: the same family and variant with smaller dimensions, default corpus the built-in
  synthetic one, trainable on 2 CPU cores in minutes.
- ``tiny``: a debug size for tests and smoke runs (seconds).

``resolve_preset(name, size)`` returns the :class:`~txlab.config.RunConfig`; the vocabulary size
(``model.n_token``) is left at 0 and taken from the corpus when the model is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from txlab.config import RunConfig, update_dataclass
from txlab.errors import did_you_mean

SIZES = ("paper", "cpu", "tiny")

# Vocabulary sizes of the paper corpora, so paper-size parameter counts need no data on disk.
# lm1b: the standard vocabulary, the reference's 1b_word_vocab.txt (its size is what makes the authors'
# One Billion Word models 357,812,082 and 841,295,982 parameters). text8: 26 letters and the space.
# ptb: Mikolov's vocabulary, 9,999 words (<unk> among them) and <eos>.
PAPER_VOCAB = {"wikitext-103": 267_735, "enwik8": 204, "text8": 27, "lm1b": 793_471, "ptb": 10_000}

# Tokens in the splits of the paper corpora, for cost estimates without data on disk (ptb: words and an
# <eos> per line; lm1b's are not known here, and its plans leave the split sizes out).
PAPER_SPLIT_TOKENS = {
    "wikitext-103": {"train": 103_227_021, "valid": 217_646, "test": 245_569},
    "enwik8": {"train": 90_000_000, "valid": 5_000_000, "test": 5_000_000},
    "text8": {"train": 90_000_000, "valid": 5_000_000, "test": 5_000_000},
    "ptb": {"train": 929_589, "valid": 73_760, "test": 82_430},
}

# --- building blocks shared by several presets -------------------------------------------------

_WT103_ADAPTIVE = {"adaptive": True, "cutoffs": [20_000, 40_000, 200_000], "div_val": 1}

# train.py's adaptive input and softmax for One Billion Word: its own cutoffs, every cluster projected
# (also the head, 1024 or 1280 wide: div_val 4), and no projection shared between input and output.
_LM1B_ADAPTIVE = {"adaptive": True, "cutoffs": [60_000, 100_000, 640_000], "div_val": 4, "full_width_proj": True, "tie_projs": False}

_XL_TRAIN = {"optimizer": "adam", "lr": 2.5e-4, "scheduler": "cosine", "clip": 0.25}

# The authors' train.py logs every 200 steps and validates every 4000; their eval.py reads 10 streams.
_REFERENCE_INTERVALS = {"log_interval": 200, "eval_interval": 4000}
_REFERENCE_EVAL_STREAMS = 10

# cpu scale: 4 layers of width 128; train on 128-token segments with 128 memory, evaluate on
# 64-token segments with a longer memory (as the paper evaluates with mem 640 after training on 150).
# The recipe is tuned with learning curves per token role (docs/cpu-evidence.md): on the small
# synthetic language (784 symbols) a post-LN model stays on the bigram plateau for 2000 steps,
# while pre-LN at lr 3e-3 learns the hinted values by step 500 and starts copying by step 1250.
# Dropout is off: ~2M training tokens are seen about once, so there is nothing to overfit yet.
# Batch 8 gives twice the updates per token of batch 16, which is what a 10-minute budget lacks.
# The corpus's copies reach 200 tokens back, inside the training span (256): with copies up to 500
# back (synthetic-small) no cpu model learned to copy in 2,000 steps.
_XL_CPU = {
    "model": {"n_layer": 4, "d_model": 128, "n_head": 4, "d_head": 32, "d_inner": 512, "dropout": 0.0, "pre_lnorm": True,
              "tgt_len": 128, "mem_len": 128, "adaptive": False, "cutoffs": []},
    "data": {"corpus": "synthetic-small-short"},
    "train": {"batch_size": 8, "max_steps": 2000, "lr": 3e-3, "warmup_steps": 100, "eval_interval": 250, "eval_tokens": 20_000},
    "eval": {"tgt_len": 64, "mem_len": 512, "clamp_len": 512, "same_length": True},
}

_XL_TINY = {
    "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64, "dropout": 0.0,
              "tgt_len": 16, "mem_len": 16, "adaptive": False, "cutoffs": []},
    "data": {"corpus": "synthetic-small", "synthetic_tokens": 50_000},
    "train": {"batch_size": 4, "max_steps": 20, "lr": 3e-3, "eval_interval": 10, "eval_tokens": 2000},
    "eval": {"tgt_len": 16, "mem_len": 32, "clamp_len": 0, "same_length": True},
}


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge override dicts, later layers winning."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merge(out[key], value)
            else:
                out[key] = value
    return out


@dataclass(frozen=True)
class Preset:
    name: str
    summary: str
    base: dict[str, Any]
    """Overrides common to every size (family, encoding, recurrence)."""
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-size overrides applied after ``base``."""

    def overrides(self, size: str) -> dict[str, Any]:
        if size not in self.sizes:
            raise did_you_mean(size, self.sizes, f"size for preset {self.name!r}")
        return _merge(self.base, self.sizes[size])


def _xl_variant(name: str, summary: str, paper: dict[str, Any], variant: dict[str, Any] | None = None) -> Preset:
    """A Transformer-XL preset: the paper shape plus the shared cpu and tiny shapes, with ``variant`` on top."""
    variant = variant or {}
    return Preset(
        name,
        summary,
        base={"model": {"family": "xl"}},
        sizes={
            "paper": _merge(paper, variant),
            "cpu": _merge(_XL_CPU, variant),
            "tiny": _merge(_XL_TINY, variant),
        },
    )


_XL151M_PAPER = {
    "model": {"n_layer": 16, "d_model": 410, "n_head": 10, "d_head": 41, "d_inner": 2100, "dropout": 0.1,
              "dropatt": 0.0, "tgt_len": 150, "mem_len": 150, **_WT103_ADAPTIVE},
    "data": {"corpus": "wikitext-103"},
    "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 60, "max_steps": 200_000, "warmup_steps": 0},
    "eval": {"tgt_len": 64, "mem_len": 640, "clamp_len": 400, "same_length": True, "batch_size": _REFERENCE_EVAL_STREAMS},
}

# The paper's Table 6/8 ablations use a "128M" Transformer-XL without giving its shape. We keep the
# 151M model's width and heads and use 7 layers instead of 16, which lands at 128.0M parameters with
# the WikiText-103 vocabulary; segments of 128 with memory 128 (the vanilla baseline's window is 128,
# which is where the paper's RECL of 128 for it comes from).
_XL128M_PAPER = _merge(
    _XL151M_PAPER,
    {"model": {"n_layer": 7, "tgt_len": 128, "mem_len": 128}, "eval": {"tgt_len": 128, "mem_len": 640}},
)

# The character-level models of run_enwik8_*.sh; run_text8_*.sh train the same ones on text8, except
# that run_text8_large.sh gives no warm-up (train.py's default, 0) where run_enwik8_large.sh warms up
# for 4000 steps.
_ENWIK8_12L_PAPER = {
    "model": {"n_layer": 12, "d_model": 512, "n_head": 8, "d_head": 64, "d_inner": 2048,
              "dropout": 0.1, "dropatt": 0.0, "tgt_len": 512, "mem_len": 512},
    "data": {"corpus": "enwik8"},
    "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 22, "max_steps": 400_000, "warmup_steps": 0},
    "eval": {"tgt_len": 80, "mem_len": 2100, "clamp_len": 820, "same_length": True, "batch_size": _REFERENCE_EVAL_STREAMS},
}
_ENWIK8_24L_PAPER = {
    "model": {"n_layer": 24, "d_model": 1024, "n_head": 8, "d_head": 128, "d_inner": 3072,
              "dropout": 0.15, "dropatt": 0.15, "tgt_len": 768, "mem_len": 768},
    "data": {"corpus": "enwik8"},
    "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 64, "max_steps": 400_000, "warmup_steps": 4000},
    "eval": {"tgt_len": 128, "mem_len": 3800, "clamp_len": 1000, "same_length": True, "batch_size": _REFERENCE_EVAL_STREAMS},
}
_TEXT8_12L_PAPER = _merge(_ENWIK8_12L_PAPER, {"data": {"corpus": "text8"}})
_TEXT8_24L_PAPER = _merge(_ENWIK8_24L_PAPER, {"data": {"corpus": "text8"}, "train": {"warmup_steps": 0}})

# run_lm1b_*.sh: 32-token segments with 32 of memory (sentences are shuffled, so there is little
# beyond them to find), evaluated with 128 of memory and no clamping on 64 (base) or 8 (large) streams.
_LM1B_BASE_PAPER = {
    "model": {"n_layer": 18, "d_model": 1024, "n_head": 8, "d_head": 128, "d_inner": 4096,
              "dropout": 0.0, "dropatt": 0.0, "tgt_len": 32, "mem_len": 32, **_LM1B_ADAPTIVE},
    "data": {"corpus": "lm1b"},
    "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 224, "max_steps": 500_000, "warmup_steps": 20_000},
    "eval": {"tgt_len": 32, "mem_len": 128, "clamp_len": 0, "same_length": True, "batch_size": 64},
}
_LM1B_LARGE_PAPER = _merge(_LM1B_BASE_PAPER, {
    "model": {"n_layer": 24, "d_model": 1280, "n_head": 16, "d_head": 80, "d_inner": 8192, "dropout": 0.05, "dropatt": 0.05},
    "train": {"batch_size": 512, "max_steps": 1_200_000, "warmup_steps": 30_000},
    "eval": {"batch_size": 8},
})

# Penn Treebank: the paper gives only the size of its model (24M, Table 5) and says it was trained
# with variational dropout and weight averaging, as AWD-LSTM; the authors' code has no PTB script.
# As for xl128m, the 151M model's layer (width 410, 10 heads of 41, inner 2100) is kept and the depth
# chosen for the size: 8 layers give 24.6M parameters with PTB's 10,000 words (7 give 22.1M). Segments
# of 70 with 70 of memory, batch 20 and output dropout 0.4 are AWD-LSTM's PTB settings; 100,000 steps
# are about 150 passes over the 930k training tokens. Evaluation keeps four times the training memory,
# as the large WikiText-103 model (1600 for 384). docs/presets.md lists what txlab does not do.
_PTB_PAPER = {
    "model": {"n_layer": 8, "d_model": 410, "n_head": 10, "d_head": 41, "d_inner": 2100,
              "dropout": 0.4, "dropatt": 0.0, "tgt_len": 70, "mem_len": 70, "adaptive": False, "cutoffs": []},
    "data": {"corpus": "ptb"},
    "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 20, "max_steps": 100_000, "warmup_steps": 0},
    "eval": {"tgt_len": 70, "mem_len": 280, "clamp_len": 0, "same_length": True, "batch_size": _REFERENCE_EVAL_STREAMS},
}

# The recurrent baselines share the XL cpu/tiny training protocol; at cpu size their recurrent widths
# are chosen so that each has about the parameters of the XL cpu model on the small synthetic
# language (0.96M), as the paper compares models of equal budget.
# They start from embeddings of about unit variance (rnn_embed_init 1.7), not AWD-LSTM's +-0.1: under
# Adam at lr 3e-3 inputs that small leave the gates deaf to them (docs/models.md, "Initial embeddings").
_RNN_CPU = _merge(_XL_CPU, {"model": {"mem_len": 0, "dropout_hidden": 0.0, "pre_lnorm": False, "rnn_embed_init": 1.7},
                            "eval": {"mem_len": 0}})
_RNN_TINY = _merge(_XL_TINY, {"model": {"mem_len": 0}, "eval": {"mem_len": 0}})

_QRNN_PAPER = {
    "model": {"n_layer": 4, "d_model": 400, "d_inner": 2500, "qrnn_window": 2, "dropout": 0.1, "dropout_hidden": 0.1,
              "tgt_len": 140, "mem_len": 0, "adaptive": True, "cutoffs": [2800, 20_000, 76_000], "div_val": 1},
    "data": {"corpus": "wikitext-103"},
    "train": {"optimizer": "adam", "lr": 1e-3, "scheduler": "cosine", "clip": 0.25, "batch_size": 60, "max_steps": 172_000},
    "eval": {"tgt_len": 140, "mem_len": 0},
}


# The paper does not give its LSTM's size. We keep the QRNN's embedding, softmax and training setup and
# choose the recurrent shape so the total is the xl151m budget (see README, "Models").
_LSTM_PAPER_SHAPE = {"n_layer": 4, "d_model": 400, "d_inner": 1390}


def _rnn(name: str, summary: str, family: str, paper: dict[str, Any], cpu_width: dict[str, Any], tiny_width: dict[str, Any], cpu_steps: int) -> Preset:
    """An RNN preset; ``cpu_steps`` fills the cpu profile's ~10-minute training budget (the RNNs run
    more steps than the XL model in the same time: an LSTM step costs about a third of an XL step)."""
    cpu = _merge(_RNN_CPU, {"model": cpu_width, "train": {"max_steps": cpu_steps}})
    return Preset(
        name,
        summary,
        base={"model": {"family": family}},
        sizes={"paper": paper, "cpu": cpu, "tiny": _merge(_RNN_TINY, {"model": tiny_width})},
    )


# Hugging Face architectures at the XL cpu budget, trained by txlab (model family hf): the question the
# paper could not ask is how far back absolute, rotary and XL-relative models of equal size look. Without
# memory, a segment of 256 tokens gives them the XL's training span (128 + 128 memory); batch 4 keeps the
# XL's tokens and updates per step (4 x 256 = 8 x 128). Pre-norm (as both architectures are) at the XL
# cpu recipe's learning rate. The Llama's gated feed-forward has three matrices: inner size 344 matches
# the two of width 512 elsewhere (3 x 344 ~ 2 x 512), so all three models have ~1M parameters.
_HF_CPU = _merge(_XL_CPU, {
    "model": {"family": "hf", "mem_len": 0, "tgt_len": 256, "max_len": 256, "pre_lnorm": True},
    "train": {"batch_size": 4},
    "eval": {"tgt_len": 256, "mem_len": 0, "clamp_len": 0, "same_length": False},
})
_HF_TINY = _merge(_XL_TINY, {"model": {"family": "hf", "mem_len": 0, "tgt_len": 32, "max_len": 32},
                             "eval": {"tgt_len": 32, "mem_len": 0, "same_length": False}})


def _hf(name: str, summary: str, arch: dict[str, Any]) -> Preset:
    """A Hugging Face architecture txlab trains at cpu and tiny size (no paper size: the paper has none)."""
    return Preset(name, summary, base={"model": {"family": "hf", **arch}},
                  sizes={"cpu": _merge(_HF_CPU, {"model": arch}), "tiny": _merge(_HF_TINY, {"model": arch})})


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        _xl_variant("xl151m", "Transformer-XL, WikiText-103 base (151M): Table 8 group 1", _XL151M_PAPER),
        _xl_variant(
            "xl-wt103-large",
            "Transformer-XL, WikiText-103 large (18 layers, d1024, adaptive div_val 4)",
            {
                "model": {"n_layer": 18, "d_model": 1024, "n_head": 16, "d_head": 64, "d_inner": 4096,
                          "dropout": 0.2, "dropatt": 0.2, "tgt_len": 384, "mem_len": 384,
                          **_WT103_ADAPTIVE, "div_val": 4,
                          # as run_wt103_large.sh: the head keeps a 1024x1024 projection on each side, untied
                          "full_width_proj": True, "tie_projs": [False, True, True, True]},
                "data": {"corpus": "wikitext-103"},
                "train": {**_XL_TRAIN, **_REFERENCE_INTERVALS, "batch_size": 128, "max_steps": 4_000_000, "warmup_steps": 16_000},
                "eval": {"tgt_len": 128, "mem_len": 1600, "clamp_len": 1000, "same_length": True, "batch_size": _REFERENCE_EVAL_STREAMS},
            },
        ),
        _xl_variant("xl-enwik8-12l", "Transformer-XL, enwik8 12 layers (41M), the speed table's model", _ENWIK8_12L_PAPER),
        _xl_variant("xl-enwik8-24l", "Transformer-XL, enwik8 24 layers (277M)", _ENWIK8_24L_PAPER),
        _xl_variant("xl-text8-12l", "Transformer-XL, text8 12 layers (41M): the enwik8 model on 27 characters", _TEXT8_12L_PAPER),
        _xl_variant("xl-text8-24l", "Transformer-XL, text8 24 layers (277M): Table 3", _TEXT8_24L_PAPER),
        _xl_variant("xl-lm1b-base", "Transformer-XL, One Billion Word base (18 layers, d1024, 358M)", _LM1B_BASE_PAPER),
        _xl_variant("xl-lm1b-large", "Transformer-XL, One Billion Word large (24 layers, d1280, 841M): Table 4", _LM1B_LARGE_PAPER),
        _xl_variant("xl-ptb", "Transformer-XL, Penn Treebank (24.6M): Table 5's size; shape and training are txlab's", _PTB_PAPER),
        _xl_variant("xl128m", "Transformer-XL 128M: the Table 6/8 ablation model", _XL128M_PAPER),
        _xl_variant(
            "xl128m-shaw", "xl128m with Shaw et al. relative encodings (Table 8 group 2)", _XL128M_PAPER,
            {"model": {"pos_enc": "shaw"}},
        ),
        _xl_variant(
            "xl128m-norecur", "xl128m without recurrence (Table 8 group 2)", _XL128M_PAPER,
            {"model": {"mem_len": 0}, "eval": {"mem_len": 0}},
        ),
        # The vanilla Transformer of Al-Rfou et al. at the 128M budget: learned absolute positions at
        # every layer, no memory, a fixed window of 128 tokens (its RECL is capped there).
        _xl_variant(
            "transformer128m", "Vanilla Transformer (Al-Rfou et al.), 128M, window 128 (Table 8 group 2)", _XL128M_PAPER,
            {"model": {"family": "vanilla", "pos_enc": "alrfou", "mem_len": 0, "max_len": 128, "tgt_len": 128},
             "eval": {"tgt_len": 128, "mem_len": 0}},
        ),
        _rnn("qrnn", "QRNN (Merity et al. 2018), 4 layers, 151M class: Table 8 group 1", "qrnn", _QRNN_PAPER,
             {"n_layer": 4, "d_inner": 288}, {"n_layer": 2, "d_inner": 48}, cpu_steps=3000),
        _rnn("lstm", "LSTM, parameter-matched to xl151m: Table 8 group 1", "lstm", _merge(_QRNN_PAPER, {"model": _LSTM_PAPER_SHAPE}),
             {"n_layer": 3, "d_inner": 216}, {"n_layer": 2, "d_inner": 48}, cpu_steps=6000),
        _hf("gpt2", "GPT-2 architecture (learned absolute positions, Hugging Face transformers) at the XL cpu budget", {"hf_arch": "gpt2"}),
        _hf("llama", "Llama architecture (rotary positions, Hugging Face transformers) at the XL cpu budget",
            {"hf_arch": "llama", "d_inner": 344}),
    ]
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise did_you_mean(name, PRESETS, "preset")
    return PRESETS[name]


def resolve_preset(name: str, size: str = "cpu") -> RunConfig:
    """The full run configuration of preset ``name`` at ``size``."""
    preset = get_preset(name)
    cfg = update_dataclass(RunConfig(), preset.overrides(size))
    return update_dataclass(cfg, {"preset": name, "size": size})
