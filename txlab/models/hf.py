"""Hugging Face causal language models behind txlab's one interface (txlab.models.interface.LanguageModel).

Two ways in:

- **A checkpoint** (``hf:PATH_OR_HUB_ID``): :func:`load_causal_lm` loads any
  ``transformers.AutoModelForCausalLM`` (GPT-2, Llama, Mistral, Mamba, RWKV, ...) and wraps it, so the
  loss collector, RECL, evaluation and generation take it like a txlab run.
- **An architecture trained by txlab** (model family ``hf``): :func:`build_hf` builds a small GPT-2
  (learned absolute positions) or Llama (rotary positions) from a :class:`~txlab.config.ModelConfig`,
  so ``txlab train`` trains it like any preset; :func:`export_hf` writes it as a Hugging Face folder.

What "context" means for such a model
-------------------------------------
A transformers model is read from a fresh start: positions count from 0 at the first token it is
given, as it was trained. Its state in txlab is therefore the *tokens* it remembers, not a cache:
``forward(tokens, state)`` reads ``[state ; tokens]`` in one fresh forward pass and returns the rows
of ``tokens``; the next state keeps the last ``context.mem_len`` tokens. With ``mem_len`` 0 (what the
loss collector uses) every chunk is read alone, so l(c, t) is exactly one forward over x_{t-c} ..
x_{t-1}, whatever the architecture: learned absolute positions, rotary, ALiBi, or a recurrent state
(Mamba, RWKV) all see exactly those c tokens, positions 0 .. c-1. Recomputing instead of carrying a KV
cache keeps this exact for every architecture (a cache shifted by one token would change every
position of an absolute model); the window method of txlab.measure.losses needs one forward per window anyway.

A model with learned absolute positions cannot read past its position table: ``max_context`` is the
table's length, and longer contexts score as that many tokens (as the vanilla Transformer's window).
Rotary, ALiBi and recurrent models have no such limit; reading past the length they were trained on
is extrapolation, which the RECL plan points out.

Output head. Only the rows that are scored go through the output layer (``log_prob``): the hidden
states are the base model's last (normalised) states and the head is the model's output embedding.
:func:`load_causal_lm` checks that this reproduces the model's own logits on a probe; an architecture
whose logits do something more (a soft cap, a scale) is wrapped in logits mode instead, where the
"hidden state" is the logits themselves: the same numbers, more memory.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import SafetensorError

from txlab.config import ModelConfig
from txlab.data.hf_folders import TOKENIZER_FILES, from_config, from_pretrained, hub_id, read_json, refuse_custom_code
from txlab.data.tokenizers import load_hf_tokenizer
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import write_json_atomic
from txlab.models.interface import LanguageModel, LMOutput, ModelCounts, State, check_target_shape
from txlab.precision import DTYPES, check_precision

PREFIX = "hf:"
"""A member or model spec starting with this names a Hugging Face checkpoint (folder or Hub id)."""

ARCHITECTURES = ("gpt2", "llama")
"""Architectures txlab builds and trains itself (model family ``hf``, ``model.hf_arch``)."""

LEARNED_ABSOLUTE = ("gpt2", "gpt_neo", "opt", "biogpt", "gpt_bigcode", "xglm", "imagegpt", "ctrl")
"""transformers model types whose position table bounds the context (their max_context)."""

INSTALL_HINT = "pip install 'txlab[hf]'"


def require_transformers():
    """The transformers module, or one clear error saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise TxlabError(f"Hugging Face models need the transformers package: {INSTALL_HINT}") from None
    # txlab reports its own progress; the library's loading bars and advice would interleave with it
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def is_hf_spec(spec: str) -> bool:
    return str(spec).startswith(PREFIX)


def hf_source(spec: str) -> str:
    """'hf:PATH_OR_ID' -> 'PATH_OR_ID' (refusing an empty one)."""
    source = str(spec)[len(PREFIX):].strip()
    if not source:
        raise TxlabError(f"{spec!r} names no model: write hf:PATH (a folder saved by save_pretrained) or hf:ORG/NAME (a Hub id)")
    return checked_source(source)


def checked_source(source: str) -> str:
    """``source`` if it can name a checkpoint: a folder with a config.json, or a Hub id (txlab.data.hf_folders.hub_id:
    a path or a bare name that is no folder is refused here, not after a failed download)."""
    path = Path(source).expanduser()
    if not path.is_dir():
        return hub_id(source, "folder")
    if not (path / "config.json").is_file():
        raise TxlabError(f"{source} has no config.json: is it a Hugging Face checkpoint (a folder written by save_pretrained)?")
    return source


class HFLanguageModel(LanguageModel):
    """A transformers causal LM with the LanguageModel interface.

    Shapes: tokens, targets [B, T]; state [B, k] token ids (k <= context.mem_len); hidden [B, T, d]
    (d = vocabulary size in logits mode); nll [B, T].
    """

    def __init__(self, causal_lm: torch.nn.Module, *, source: str = "", logits_mode: bool = False):
        super().__init__()
        self.causal_lm = causal_lm
        self.source = source
        """The checkpoint it was loaded from (folder or Hub id); empty for a model txlab built."""
        self.logits_mode = logits_mode
        config = causal_lm.config
        self.model_type = str(getattr(config, "model_type", ""))
        self.vocab_size = int(causal_lm.get_output_embeddings().weight.shape[0])
        positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        self.trained_positions: int | None = int(positions) if positions else None
        """The model's position table or trained length (None: the config names none)."""
        self.max_context = self.trained_positions if self.model_type in LEARNED_ABSOLUTE else None

    # -- the interface ---------------------------------------------------------------------------

    def init_state(self, batch_size: int) -> State:
        return torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)  # [B, 0]: nothing remembered yet

    @property
    def carries_state(self) -> bool:
        return self.context.mem_len > 0

    def forward(self, tokens: torch.Tensor, state: State, targets: torch.Tensor | None = None) -> LMOutput:
        check_target_shape(tokens, targets)
        self._check_ids(tokens)
        T = tokens.size(1)
        if self.max_context is not None and T > self.max_context:
            raise TxlabError(f"this model reads at most {self.max_context} tokens at once (its position table); got a chunk of {T}")
        window = torch.cat([state, tokens], dim=1) if state is not None and state.size(1) else tokens  # [B, k + T]
        if self.max_context is not None:
            window = window[:, -self.max_context:]  # the oldest remembered tokens fall off the position table
        hidden = self._hidden(window)[:, -T:]  # [B, T, d]
        next_state = window[:, max(0, window.size(1) - self.context.mem_len):]  # [B, min(k + T, mem_len)]
        nll = None
        if targets is not None:
            self._check_ids(targets)
            nll = -self.log_prob(hidden).gather(-1, targets[..., None])[..., 0]  # [B, T]
        return LMOutput(nll, hidden, next_state.detach())

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = hidden if self.logits_mode else self.causal_lm.get_output_embeddings()(hidden)  # [*, V]
        return F.log_softmax(logits.float(), dim=-1)

    def counts(self) -> ModelCounts:
        """The parameters and FLOPs of the loaded model, from its weights (a checkpoint has no txlab configuration):
        2 x every weight a token passes through (the embeddings' are lookups), attention over the keys where the model
        has heads, and the output layer. A weight of layer i (named ``... .i. ...``) is the layers' work, the others
        (a final norm) the token's; for family hf these are :func:`hf_counts` of its configuration."""
        config = self.causal_lm.config
        n_layer = int(config.num_hidden_layers)
        layer_weights = other_weights = 0
        for name, p in self.causal_lm.named_parameters():
            if any(part in name for part in ("embed", "wte", "wpe", "lm_head")):
                continue
            if re.search(r"\.\d+\.", name):
                layer_weights += p.numel()
            else:
                other_weights += p.numel()
        attend = 0
        if getattr(config, "num_attention_heads", None) and getattr(config, "hidden_size", None):
            attend = 2 * 2 * int(config.hidden_size)
        weight = self.causal_lm.get_output_embeddings().weight
        per_layer, uneven = divmod(2 * layer_weights, n_layer)
        return ModelCounts(parameters=self.num_parameters(), max_context=self.max_context, layers=n_layer, key_flops=0,
                           query_flops=2 * layer_weights / n_layer if uneven else per_layer, attend_flops=attend,
                           other_flops=2 * other_weights, output_flops=2 * weight.shape[0] * weight.shape[1])

    def layer_stack(self) -> torch.nn.ModuleList | None:
        """The base model's decoder layers: its stack of the layer class transformers names as never to be split
        across devices (``_no_split_modules``); None where the model names none."""
        layer_classes = set(getattr(self.causal_lm, "_no_split_modules", None) or ())
        for module in self.causal_lm.base_model.children():
            first = getattr(module[0], "_orig_mod", module[0]) if isinstance(module, torch.nn.ModuleList) and len(module) else None
            if type(first).__name__ in layer_classes:  # the layer class, or its compiled form while scored
                return module
        return None

    # -- inside ------------------------------------------------------------------------------------

    def _hidden(self, window: torch.Tensor) -> torch.Tensor:
        """[B, L, d]: the base model's last hidden states (or the logits, in logits mode) of one fresh read."""
        if self.logits_mode:
            return self.causal_lm(input_ids=window, use_cache=False).logits
        return self.causal_lm.base_model(input_ids=window, use_cache=False).last_hidden_state

    def _check_ids(self, ids: torch.Tensor) -> None:
        if not ids.numel():
            return
        if ids.device.type == "cuda":
            # a device-side assertion, not a host wait per forward: the host queues the next batch while the GPU reads
            # this one. A collection refuses ids outside the vocabulary on the host first (txlab.measure.losses), with
            # this error's words; here a stray id stops the process with CUDA's own error.
            torch._assert_async(((ids >= 0) & (ids < self.vocab_size)).all())
            return
        low, high = torch.stack(torch.aminmax(ids)).tolist()
        if high >= self.vocab_size or low < 0:
            raise TxlabError(f"token id {high if high >= self.vocab_size else low} is outside this model's vocabulary of "
                             f"{self.vocab_size}: the text was tokenized for another model")


# ------------------------------------------------------------------------------------------------
# Architectures txlab trains (model family "hf")


def hf_config(cfg: ModelConfig) -> Any:
    """The transformers config of a txlab ModelConfig with family 'hf': the same width, depth, heads and
    vocabulary; ``max_len`` (else ``tgt_len``) positions; tied input and output embeddings."""
    check_architecture(cfg)
    transformers = require_transformers()
    positions = cfg.max_len or cfg.tgt_len
    no_special = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if cfg.hf_arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=cfg.n_token, n_positions=positions, n_embd=cfg.d_model, n_layer=cfg.n_layer, n_head=cfg.n_head,
            n_inner=cfg.d_inner, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropatt,
            tie_word_embeddings=True, **no_special,
        )
    return transformers.LlamaConfig(
        vocab_size=cfg.n_token, max_position_embeddings=positions, hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head, head_dim=cfg.d_head, intermediate_size=cfg.d_inner,
        attention_dropout=cfg.dropatt, tie_word_embeddings=True, **no_special,
    )


def check_architecture(cfg: ModelConfig) -> None:
    """Refuse a family-hf configuration txlab cannot build as asked: an unknown architecture, a GPT-2 whose heads do not
    split d_model, a Llama asked for a dropout it does not have."""
    if cfg.hf_arch not in ARCHITECTURES:
        raise TxlabError(f"model.hf_arch must be one of {', '.join(ARCHITECTURES)} for model.family hf, got {cfg.hf_arch!r}")
    if cfg.hf_arch == "gpt2" and cfg.d_model != cfg.n_head * cfg.d_head:
        raise TxlabError(f"a GPT-2 has heads of d_model / n_head: model.d_head must be {cfg.d_model // cfg.n_head}, got {cfg.d_head}")
    if cfg.hf_arch == "llama" and cfg.dropout > 0:
        # transformers' Llama has no dropout but its attention's: a model.dropout would train as if it were 0
        raise TxlabError(f"a Llama has no dropout on its hidden states (transformers' LlamaConfig has attention_dropout only): "
                         f"model.dropout must be 0, got {cfg.dropout}; model.dropatt sets the attention dropout")


def hf_counts(cfg: ModelConfig) -> ModelCounts:
    """The parameters, window and FLOPs of the model :func:`build_hf` gives ``cfg``, without transformers or a model:
    :meth:`HFLanguageModel.counts`'s count (2 x every weight but the embeddings', attention over the keys, the tied
    output layer). Both architectures have a norm before each sub-layer and after the last;
    GPT-2's projections and norms have biases, Llama's norms are scales and its projections have none."""
    check_architecture(cfg)
    d, inner, positions = cfg.d_model, cfg.d_inner, cfg.max_len or cfg.tgt_len
    if cfg.hf_arch == "gpt2":
        per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * inner + inner) + (inner * d + d) + 2 * 2 * d
        final_norm, embeddings = 2 * d, cfg.n_token * d + positions * d
    else:
        per_layer = 4 * d * cfg.n_head * cfg.d_head + 3 * d * inner + 2 * d
        final_norm, embeddings = d, cfg.n_token * d
    return ModelCounts(
        parameters=embeddings + cfg.n_layer * per_layer + final_norm,
        max_context=positions if cfg.hf_arch in LEARNED_ABSOLUTE else None,
        layers=cfg.n_layer, key_flops=0, query_flops=2 * per_layer, attend_flops=2 * 2 * d, other_flops=2 * final_norm,
        output_flops=2 * cfg.n_token * d,
    )


def build_hf(cfg: ModelConfig) -> HFLanguageModel:
    """A freshly initialised transformers model of ``cfg.hf_arch`` (txlab's family 'hf')."""
    config = hf_config(cfg)
    causal_lm = from_config(require_transformers().AutoModelForCausalLM, config, trust_remote_code=False, attn_implementation="eager")
    return HFLanguageModel(causal_lm)


EXPORT_RECORD = "txlab_export.json"
"""What `txlab export` writes beside the weights: the run it came from and the vocabulary its ids are (``vocab_sha256``)."""


def export_hf(model: LanguageModel, out_dir: Path, record: dict[str, Any], tokenizer: Any = None) -> None:
    """Write a model of family 'hf' into the folder ``out_dir`` as a Hugging Face checkpoint (config.json,
    model.safetensors) that ``hf:OUT_DIR`` loads again, with ``tokenizer`` (a transformers tokenizer, or None) and
    ``record`` (:data:`EXPORT_RECORD`)."""
    if not isinstance(model, HFLanguageModel):
        raise TxlabError("only models of family hf (a GPT-2 or Llama trained by txlab) can be written as a Hugging Face folder")
    require_transformers()
    model.causal_lm.save_pretrained(out_dir, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    write_json_atomic(Path(out_dir) / EXPORT_RECORD, record)


def export_record(source: str) -> dict[str, Any]:
    """The :data:`EXPORT_RECORD` of a local checkpoint folder, or {} (a checkpoint txlab did not write)."""
    path = Path(source) / EXPORT_RECORD
    return read_json(path) if path.is_file() else {}


# ------------------------------------------------------------------------------------------------
# Checkpoints (hf:PATH_OR_HUB_ID)


def fingerprint(source: str) -> str:
    """16 hex digits naming a checkpoint's contents: its config and the size and ends of each weights
    file (a retrained model in the same folder gets another name, so its losses are collected anew)."""
    path = Path(source)
    if not path.is_dir():
        return hashlib.sha256(f"hub:{source}".encode()).hexdigest()[:16]
    digest = hashlib.sha256()
    for file in sorted(path.iterdir()):
        if file.suffix in (".json", ".safetensors", ".bin", ".model") and file.is_file():
            digest.update(file.name.encode())
            digest.update(str(file.stat().st_size).encode())
            with file.open("rb") as fh:
                digest.update(fh.read(1 << 20))
                fh.seek(max(0, file.stat().st_size - (1 << 20)))
                digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


def _probe_matches(wrapped: HFLanguageModel) -> bool:
    """Do base-model states through the output embedding give the model's own logits?"""
    probe = torch.arange(8, device=wrapped.device)[None] % wrapped.vocab_size  # [1, 8]
    with torch.inference_mode():
        own = wrapped.causal_lm(input_ids=probe, use_cache=False).logits.float()
        ours = wrapped.causal_lm.get_output_embeddings()(wrapped._hidden(probe)).float()
    return bool(torch.allclose(own, ours, rtol=1e-4, atol=1e-4 * max(1.0, own.abs().max().item())))


def load_causal_lm(spec: str, *, device: str = "cpu", precision: str = "fp32") -> HFLanguageModel:
    """``hf:PATH_OR_HUB_ID`` (or the bare path or id) as a LanguageModel, in evaluation mode.

    ``precision`` fp32 (default), bf16 or fp16 (txlab.precision): the weights are loaded in it, halving
    their memory, and scoring computes in it; the log-softmax of the scored rows is always taken in float32.
    """
    source = hf_source(spec) if is_hf_spec(spec) else checked_source(str(spec))
    check_device(device)
    check_precision(precision, device)
    transformers = require_transformers()
    try:
        causal_lm = from_pretrained(transformers.AutoModelForCausalLM, source, trust_remote_code=False, dtype=DTYPES[precision])
    except pickle.UnpicklingError:  # torch.load(weights_only=True) met a pickle that calls more than tensor builders
        raise TxlabError(f"the weights of {source} are a pickle that would run code to load, and txlab runs none from a checkpoint: "
                         "where the file is trusted, save the model again with save_pretrained (safetensors)") from None
    except (SafetensorError, RuntimeError) as err:
        if "size mismatch" in str(err) or "mismatched_sizes" in str(err):
            raise TxlabError(f"the weights of {source} do not fit its config.json (tensor shapes differ): "
                             "the folder mixes files of two models, or its config was edited") from None
        if isinstance(err, SafetensorError) or "PytorchStreamReader" in str(err):
            raise TxlabError(f"the weights of {source} are damaged ({first_line(err)}): copy them again") from None
        raise
    except (OSError, ValueError, KeyError) as err:
        raise TxlabError(f"cannot load {source} as a causal language model: {first_line(err)}") from None
    wrapped = HFLanguageModel(causal_lm.to(device), source=source).eval()  # the wrapper too: scoring restores the mode it finds
    wrapped.logits_mode = not _probe_matches(wrapped)
    return wrapped


def first_line(err: BaseException) -> str:
    """The first line of an error of transformers (the rest is advice for its own API), or its type's name."""
    return str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__


def load_tokenizer(source: str):
    """The transformers tokenizer saved with a checkpoint, or None when its folder holds no tokenizer file
    (:data:`~txlab.data.hf_folders.TOKENIZER_FILES`). A tokenizer that is there but does not load is an error
    naming its files, never None: the text would silently be read another way."""
    path = Path(source)
    if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
        return None
    return load_hf_tokenizer(source).tokenizer


def describe(model: HFLanguageModel) -> dict[str, Any]:
    """What a record of an HF member holds about it."""
    config = model.causal_lm.config
    return {"source": model.source, "model_type": model.model_type, "vocab_size": model.vocab_size,
            "trained_positions": model.trained_positions, "max_context": model.max_context, "logits_mode": model.logits_mode,
            "parameters": model.num_parameters(), "config_sha256": hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]}


def saved_config(source: str) -> dict[str, Any]:
    """A checkpoint's config (what plans read without loading weights): a local folder's config.json, or a
    Hub id's config, fetched (or read from the Hugging Face cache) here so that an unreachable or unknown
    id is refused before any model runs."""
    path = Path(source) / "config.json"
    if not path.is_file():
        if Path(source).is_dir():
            return {}
        transformers = require_transformers()
        try:
            return from_pretrained(transformers.AutoConfig, source, trust_remote_code=False).to_dict()
        except (OSError, ValueError, KeyError) as err:
            raise TxlabError(f"hf:{source} is no local folder, and its config could not be read from the Hub: {first_line(err)}") from None
    refuse_custom_code(source)  # what plans read first: a checkpoint asking for its own code stops here
    return read_json(path)


def trained_length(source: str) -> int | None:
    """The positions a checkpoint was built for (n_positions / max_position_embeddings), from its config alone."""
    config = saved_config(source)
    value = config.get("max_position_embeddings") or config.get("n_positions")
    return int(value) if value else None


def checkpoint_counts(source: str) -> ModelCounts | None:
    """The checkpoint's parameters and FLOPs (:meth:`HFLanguageModel.counts`), from its model on the meta device (shapes
    only, no weights read): what plans read. None when its config cannot be read or built."""
    if not saved_config(source):
        return None
    transformers = require_transformers()
    try:
        config = from_pretrained(transformers.AutoConfig, source, trust_remote_code=False)
        with torch.device("meta"):
            return HFLanguageModel(from_config(transformers.AutoModelForCausalLM, config, trust_remote_code=False)).counts()
    except (OSError, ValueError, KeyError):
        return None


def check_corpus(source: str, label: str, corpus: Any) -> None:
    """Refuse a corpus (txlab.data.corpus.Corpus) the checkpoint cannot read: text not encoded by the tokenizer
    the checkpoint brings, a vocabulary other than the one `txlab export` recorded (:data:`EXPORT_RECORD`), or ids
    beyond its outputs."""
    if load_tokenizer(source) is not None and corpus.tokenizer_id != load_hf_tokenizer(source).tokenizer_id:
        raise TxlabError(
            f"{label} brings its own tokenizer, and corpus {corpus.name} was not encoded by it: score it on text tokenized by "
            f"{source} (--text FILE, whose tokenizer then defaults to the checkpoint's)"
        )
    recorded = export_record(source).get("vocab_sha256")
    if recorded and corpus.vocab.sha256 != recorded:
        own = "its own text, read by the tokenizer it brings (--text FILE)" if load_tokenizer(source) is not None else "the run's corpus (--data NAME)"
        raise TxlabError(f"{label} reads the ids of vocabulary {recorded[:12]}... ({EXPORT_RECORD}), and corpus {corpus.name} is numbered by "
                         f"vocabulary {corpus.vocab.sha256[:12]}...: score it on {own}")
    vocab = saved_config(source).get("vocab_size")
    if vocab and corpus.n_token > int(vocab):
        raise TxlabError(f"{label} has outputs for {vocab} token ids, and corpus {corpus.name} numbers {corpus.n_token}: "
                         "it was trained on another vocabulary")


def check_tokenizer(source: str, tokenizer: Any, outputs: int) -> None:
    """Refuse a tokenizer that cannot be the checkpoint's own (a txlab.data.tokenizers.HfTokenizer): one with more symbols
    than the model has outputs, or, for a `txlab export`, another vocabulary than the one it recorded
    (:data:`EXPORT_RECORD`). Fewer symbols than outputs is common (output layers are padded), so it passes."""
    size = len(tokenizer.vocab)
    if outputs and size > outputs:
        raise TxlabError(f"the tokenizer in {source} has {size:,} symbols, and the model outputs {outputs:,}: it is another model's "
                         "tokenizer; put the checkpoint's own tokenizer files back")
    recorded = export_record(source).get("vocab_sha256")
    if recorded and tokenizer.vocab.sha256 != recorded:
        raise TxlabError(f"the tokenizer in {source} is not the one `txlab export` wrote: its vocabulary is {tokenizer.vocab.sha256[:12]}..., "
                         f"{EXPORT_RECORD} records {recorded[:12]}...; export the run again, or put its tokenizer files back")
