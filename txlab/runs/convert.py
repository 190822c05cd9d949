"""Importing checkpoints people already have into txlab run directories (``txlab import``).

Two sources hold the paper's Transformer-XL (relative attention, adaptive input and softmax):

- **Hugging Face** ``TransfoXLLMHeadModel``: a directory with ``config.json``, the weights
  (``model.safetensors`` or ``pytorch_model.bin``) and the tokenizer's vocabulary (``vocab.pkl``,
  or the older ``vocab.bin``). The hyper-parameters come from ``config.json``. A Hub id
  (``ORG/NAME``) that is not a local directory is downloaded into the Hugging Face cache first
  (those files only), with huggingface_hub, an optional dependency (``pip install 'txlab[hub]'``).
- **The authors' reference code** (kimiyoung/transformer-xl, ``pytorch/mem_transformer.py``): a
  state dict of ``MemTransformerLM``. It records no hyper-parameters, so they come from a preset,
  a YAML file or ``--set``, as for ``txlab train``.

Both use the same parameter names (Hugging Face puts the body under ``transformer.``)::

    word_emb.emb_layers.i.weight, word_emb.emb_projs.i      adaptive input: one table (div_val 1) or one per cluster
    layers.l.dec_attn.{qkv_net,o_net,r_net}.weight         -> blocks.l.attn.*   (qkv: q, k, v stacked, heads inside each)
    layers.l.dec_attn.layer_norm.*                          -> blocks.l.attn.layer_norm.*
    layers.l.pos_ff.CoreNet.{0,3}.*, pos_ff.layer_norm.*    -> blocks.l.ff.core.{0,3}.*, blocks.l.ff.layer_norm.*
    r_w_bias, r_r_bias [H, Dh] (shared) or                  -> u, v [1 or n_layer, H, Dh]
      layers.l.dec_attn.r_w_bias, r_r_bias (per layer)         (r_w_bias is the content bias u, r_r_bias the position bias v)
    crit.out_layers.i.{weight,bias}, crit.out_projs.i       adaptive softmax: one output layer (div_val 1) or one per cluster
    crit.cluster_weight, crit.cluster_bias                  the head's logits of the tail clusters
    pos_emb.inv_freq                                        not needed: txlab computes the same sinusoid

The attention itself needs no conversion: q, k, v, the relative shift, clamp_len and same_length
mean the same in all three codes. What differs, and is handled here:

- **Cluster order.** The reference reads tail cluster i's head logit at column -i, so it stores
  ``cluster_weight`` rows last cluster first; Hugging Face (like txlab) reads column cutoffs[0]+i-1.
  The reference rows are reversed on import.
- **Shared or per-layer u, v.** Read off the keys present (``untie_r`` is set to match). Hugging Face
  with ``untie_r=false`` also lists the shared pair under every layer; those copies are checked
  and dropped.
- **Tied weights appear twice** in a state dict (and Hugging Face safetensors files leave the tied
  copies out, to be restored from ``config.json``'s ``tie_word_embeddings`` and ``tie_projs``, as
  ``from_pretrained`` does). txlab ties each cluster's output weight and projection to the input's
  (per-cluster ``tie_weight``, ``tie_projs``) exactly where the imported values are equal, so the
  imported model has the source's parameters, parameter count and gradients, not only its
  function (the authors' WikiText-103 large model ties the tail projections but not the head's:
  ``tie_projs`` [false, true, true, true]).
- **Full-width projections.** With div_val > 1 both sources project every cluster, also one as
  wide as the model (the head of the published WikiText-103 model); the import sets
  ``full_width_proj`` so txlab keeps that projection too.
- **Initial memory.** Hugging Face starts a stream from mem_len zero vectors when no memory is
  passed; the reference code and txlab start from an empty memory. Losses of the first mem_len
  tokens of a stream therefore differ slightly from what Hugging Face's own loop reports.

Vocabularies (:func:`read_vocabulary`): the Hugging Face tokenizer's are pickles. They are read with
an unpickler that builds only plain data (lists, dicts, ``Counter``, ``OrderedDict``), stands inert
placeholders in for the tokenizer's own objects (regular expressions, Moses tools, added tokens)
without importing or calling anything, and refuses every other global. A plain-text vocabulary
(one symbol per line) or a txlab ``vocab.json`` works too.

The run directory gets ``config.yaml``, ``checkpoint/`` (with the vocabulary as
``checkpoint/vocab.json``) and ``import.json`` (where it came from), so ``txlab eval``, ``recl``
and ``speed`` use it like a trained run. If the corpus numbers its symbols differently, they
relabel it into the model's vocabulary (:func:`txlab.data.corpus.load_corpus_for_model`).
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import hashlib
import io
import json
import pickle
import re
import shlex
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from txlab import __version__
from txlab.config import DataConfig, ModelConfig, RunConfig, load_config, save_config, update_dataclass
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.fileio import read_back, staged_folder, write_json_atomic
from txlab.models.build import build_model
from txlab.models.softmax import cluster_bounds, cluster_dims
from txlab.runs.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from txlab.runs.zoo import run_config

UNK_SYMBOLS = ("<unk>", "<UNK>")
"""The unknown-word symbol of an imported vocabulary is the first of these it holds (if any)."""

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
HF_VOCABS = ("vocab.pkl", "vocab.bin", "vocab.txt")
"""Looked for in this order in a Hugging Face directory."""

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""A Hugging Face Hub repository id, ORG/NAME (e.g. transfo-xl/transfo-xl-wt103)."""

_MAX_LISTED = 12
"""Names listed per kind of problem in a mismatch error (then 'and N more')."""


# --------------------------------------------------------------------------------------------------
# Vocabularies


class _Inert:
    """Stands in for an object of a tokenizer class the vocabulary does not need.

    Unpickling builds it with its arguments and state and keeps none of them: nothing of the
    original class is imported or run.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


def _bounded_bytearray(source: Any = b"", *args: Any) -> bytearray:
    """bytearray as a pickle rebuilds one, from its bytes; ``bytearray(n)`` would allocate n bytes the
    file never held (a 100-byte pickle could ask for a petabyte)."""
    if isinstance(source, int):
        raise pickle.UnpicklingError(f"it asks for a bytearray of {source:,} bytes it does not hold")
    return bytearray(source, *args)


_CONSTRUCTORS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): _bounded_bytearray,
    ("_codecs", "encode"): codecs.encode,  # how protocol 2 writes bytes
}
"""Globals a vocabulary pickle may call: they only build data."""

_INERT_MODULES = ("re", "sacremoses", "transformers", "tokenizers")
"""Top-level modules of the objects a TransfoXLTokenizer pickles beside its symbols (compiled
patterns, Moses tools, added tokens): replaced by :class:`_Inert`."""


class _VocabUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only (see the module docstring)."""

    def __init__(self, file: io.BufferedIOBase, where: str):
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CONSTRUCTORS:
            return _CONSTRUCTORS[module, name]
        if module.split(".")[0] in _INERT_MODULES:
            return _Inert
        raise TxlabError(
            f"{self.where} is not a plain vocabulary pickle: it would call {module}.{name}. "
            "txlab refused it and ran nothing; only lists, dicts, Counter and OrderedDict are read"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise TxlabError(f"{self.where} holds tensors, not a vocabulary")


def _unpickle_all(data: bytes, where: str) -> list[Any]:
    """Every pickle in ``data`` in order (torch's legacy format writes several one after another)."""
    stream = io.BytesIO(data)
    objects = []
    try:
        while stream.tell() < len(data):
            objects.append(_VocabUnpickler(stream, where).load())
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise TxlabError(f"{where} is not a readable pickle: {err}") from None
    return objects


def _pickled_objects(path: Path) -> list[Any]:
    """The objects in a pickle file, a torch.save zip (its data.pkl) or a legacy torch.save file."""
    data = path.read_bytes()
    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if not members:
                raise TxlabError(f"{path} is a zip archive without the data.pkl of a torch.save file")
            data = archive.read(members[0])
    return _unpickle_all(data, str(path))


def _symbols_from_tokenizer(objects: list[Any], where: str) -> list[str]:
    """The id-ordered symbols of a pickled TransfoXLTokenizer state (``idx2sym``, else ``sym2idx``)."""
    state = next((o for o in objects if isinstance(o, Mapping) and ("idx2sym" in o or "sym2idx" in o)), None)
    if state is None:
        raise TxlabError(f"{where} holds no TransfoXL vocabulary (no 'idx2sym' or 'sym2idx')")
    sym2idx = state.get("sym2idx")
    if "idx2sym" in state:
        symbols = state["idx2sym"]
    elif isinstance(sym2idx, Mapping):
        symbols = sorted(sym2idx, key=sym2idx.__getitem__)
    else:
        raise TxlabError(f"{where}: 'sym2idx' is not a mapping")
    if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
        raise TxlabError(f"{where}: the vocabulary is not a list of strings")
    if isinstance(sym2idx, Mapping) and any(sym2idx.get(s) != i for i, s in enumerate(symbols)):
        raise TxlabError(f"{where}: 'idx2sym' and 'sym2idx' disagree about the ids")
    return symbols


def _symbols_from_text(path: Path) -> list[str]:
    """One symbol per line; like TransfoXLTokenizer's vocab_file, a line's first field is the symbol
    (so 'word count' lines work too)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise TxlabError(f"{path} is neither a pickle nor UTF-8 text") from None
    symbols = []
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            raise TxlabError(f"{path}:{number}: empty line (a plain-text vocabulary has one symbol per line)")
        symbols.append(fields[0])
    return symbols


def read_vocabulary(path: str | Path) -> Vocab:
    """A vocabulary from a Hugging Face tokenizer pickle, a plain-text file or a txlab vocabulary.

    Pickles (``vocab.pkl``, ``vocab.bin`` of torch.save) are read without running their code (see
    the module docstring). Ids are line numbers in a text file. The unknown-word symbol is the first
    of :data:`UNK_SYMBOLS` present.
    """
    path = Path(path)
    if not path.is_file():
        raise TxlabError(f"no vocabulary file {path}")
    with path.open("rb") as fh:
        head = fh.read(4)
    if path.suffix == ".json" or head.startswith(b"#txl"):
        return Vocab.load(path)
    is_pickle = head[:1] == b"\x80" or head == b"PK\x03\x04" or path.suffix in (".pkl", ".pickle", ".bin", ".pt")
    symbols = _symbols_from_tokenizer(_pickled_objects(path), str(path)) if is_pickle else _symbols_from_text(path)
    if not symbols:
        raise TxlabError(f"{path} holds an empty vocabulary")
    return Vocab(symbols, unk=next((s for s in UNK_SYMBOLS if s in symbols), None))


# --------------------------------------------------------------------------------------------------
# Weights


@dataclass(frozen=True)
class _Layout:
    """How one source format names and orders the parameters."""

    title: str
    body_prefix: str
    """Prefix of every parameter but the softmax's (``crit.``)."""
    reversed_clusters: bool
    """``cluster_weight``/``cluster_bias`` rows stored last tail cluster first."""

    def source_name(self, key: str) -> str:
        return key if key.startswith("crit.") else self.body_prefix + key


HF_LAYOUT = _Layout("Hugging Face", "transformer.", reversed_clusters=False)
REFERENCE_LAYOUT = _Layout("reference (kimiyoung/transformer-xl)", "", reversed_clusters=True)

_LAYER_KEYS = {
    "dec_attn.qkv_net.weight": "attn.qkv_net.weight",
    "dec_attn.o_net.weight": "attn.o_net.weight",
    "dec_attn.r_net.weight": "attn.r_net.weight",
    "dec_attn.layer_norm.weight": "attn.layer_norm.weight",
    "dec_attn.layer_norm.bias": "attn.layer_norm.bias",
    "pos_ff.CoreNet.0.weight": "ff.core.0.weight",
    "pos_ff.CoreNet.0.bias": "ff.core.0.bias",
    "pos_ff.CoreNet.3.weight": "ff.core.3.weight",
    "pos_ff.CoreNet.3.bias": "ff.core.3.bias",
    "pos_ff.layer_norm.weight": "ff.layer_norm.weight",
    "pos_ff.layer_norm.bias": "ff.layer_norm.bias",
}
"""Per-layer source names -> txlab names (same shapes)."""


def _layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    inner, d = cfg.n_head * cfg.d_head, cfg.d_model
    return {
        "dec_attn.qkv_net.weight": (3 * inner, d), "dec_attn.o_net.weight": (d, inner), "dec_attn.r_net.weight": (inner, d),
        "dec_attn.layer_norm.weight": (d,), "dec_attn.layer_norm.bias": (d,),
        "pos_ff.CoreNet.0.weight": (cfg.d_inner, d), "pos_ff.CoreNet.0.bias": (cfg.d_inner,),
        "pos_ff.CoreNet.3.weight": (d, cfg.d_inner), "pos_ff.CoreNet.3.bias": (d,),
        "pos_ff.layer_norm.weight": (d,), "pos_ff.layer_norm.bias": (d,),
    }


def _clusters(cfg: ModelConfig) -> tuple[list[int], list[int]]:
    """Cluster bounds and embedding sizes of ``cfg``'s adaptive input and softmax."""
    bounds = cluster_bounds(cfg.n_token, list(cfg.cutoffs) if cfg.adaptive else [])
    return bounds, cluster_dims(cfg.d_embed or cfg.d_model, len(bounds) - 1, cfg.div_val)


def _source_shapes(cfg: ModelConfig, untie_r: bool) -> dict[str, tuple[int, ...]]:
    """Every parameter a source state dict must hold for ``cfg`` (canonical names), with its shape."""
    bounds, dims = _clusters(cfg)
    d_embed, d = cfg.d_embed or cfg.d_model, cfg.d_model
    shapes: dict[str, tuple[int, ...]] = {}
    if cfg.div_val == 1:  # one table and one output layer over the whole vocabulary, sliced per cluster
        shapes["word_emb.emb_layers.0.weight"] = (cfg.n_token, d_embed)
        shapes["crit.out_layers.0.weight"] = (cfg.n_token, d_embed)
        shapes["crit.out_layers.0.bias"] = (cfg.n_token,)
        if d_embed != d:
            shapes["word_emb.emb_projs.0"] = (d, d_embed)
            shapes.update({f"crit.out_projs.{i}": (d, d_embed) for i in range(len(dims))})
    else:
        for i, (lo, hi, dim) in enumerate(zip(bounds, bounds[1:], dims)):
            shapes[f"word_emb.emb_layers.{i}.weight"] = (hi - lo, dim)
            shapes[f"word_emb.emb_projs.{i}"] = (d, dim)
            shapes[f"crit.out_layers.{i}.weight"] = (hi - lo, dim)
            shapes[f"crit.out_layers.{i}.bias"] = (hi - lo,)
            shapes[f"crit.out_projs.{i}"] = (d, dim)
    if len(bounds) > 2:
        shapes["crit.cluster_weight"] = (len(bounds) - 2, d_embed)
        shapes["crit.cluster_bias"] = (len(bounds) - 2,)
    bias_shape = (cfg.n_head, cfg.d_head)
    for layer in range(cfg.n_layer):
        shapes.update({f"layers.{layer}.{k}": s for k, s in _layer_shapes(cfg).items()})
        if untie_r:
            shapes.update({f"layers.{layer}.dec_attn.r_w_bias": bias_shape, f"layers.{layer}.dec_attn.r_r_bias": bias_shape})
    if not untie_r:
        shapes.update({"r_w_bias": bias_shape, "r_r_bias": bias_shape})
    return shapes


@dataclass(frozen=True)
class _HfTies:
    """What a Hugging Face config ties (``from_pretrained`` overwrites the output copies with these)."""

    weights: bool
    projs: tuple[bool, ...]


def _hf_tied_pairs(cfg: ModelConfig, ties: _HfTies) -> list[tuple[str, str]]:
    """(output parameter, input parameter it is tied to) pairs, canonical names."""
    _, dims = _clusters(cfg)
    pairs = []
    if ties.weights:
        n_layers = 1 if cfg.div_val == 1 else len(dims)
        pairs += [(f"crit.out_layers.{i}.weight", f"word_emb.emb_layers.{i}.weight") for i in range(n_layers)]
    d_embed = cfg.d_embed or cfg.d_model
    for i, tied in enumerate(ties.projs[: len(dims)]):
        if tied and cfg.div_val == 1 and d_embed != cfg.d_model:
            pairs.append((f"crit.out_projs.{i}", "word_emb.emb_projs.0"))
        elif tied and cfg.div_val != 1:
            pairs.append((f"crit.out_projs.{i}", f"word_emb.emb_projs.{i}"))
    return pairs


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def _check_keys(tensors: dict[str, torch.Tensor], foreign: list[str], shapes: dict[str, tuple[int, ...]],
                optional: set[str], cfg: ModelConfig, layout: _Layout, where: str) -> None:
    """One error listing every missing, unexpected and wrongly shaped parameter (source names)."""
    name = layout.source_name
    missing = [name(k) for k in shapes if k not in tensors]
    unexpected = foreign + [name(k) for k in tensors if k not in shapes and k not in optional]
    wrong = [f"{name(k)} {list(t.shape)} (expected {list(shapes[k])})" for k, t in tensors.items() if k in shapes and tuple(t.shape) != shapes[k]]
    if not (missing or unexpected or wrong):
        return
    problems = [f"{label}: {_listed(items)}" for label, items in
                (("missing", missing), ("unexpected", sorted(unexpected)), ("wrong shape", wrong)) if items]
    shape = (f"n_token={cfg.n_token} n_layer={cfg.n_layer} d_model={cfg.d_model} n_head={cfg.n_head} d_head={cfg.d_head} "
             f"d_inner={cfg.d_inner} d_embed={cfg.d_embed or cfg.d_model} cutoffs={list(cfg.cutoffs) if cfg.adaptive else []} div_val={cfg.div_val}")
    raise TxlabError(f"{where} does not match a {layout.title} Transformer-XL with {shape}:\n  " + "\n  ".join(problems))


def _ties(inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor | None]) -> bool | list[bool]:
    """Whether each cluster's output tensor equals its input's, as a config value: one bool when
    every cluster agrees, else one per cluster (clusters without the tensor have none: true)."""
    flags = [a is None or torch.equal(a, b) for a, b in zip(inputs, outputs)]
    return flags[0] if len(set(flags)) == 1 else flags


def _untied_note(what: str, ties: bool | list[bool]) -> list[str]:
    """The import note for ``ties`` (from :func:`_ties`) of ``what``, if anything is untied."""
    if ties is True:
        return []
    clusters = "every cluster" if ties is False else "cluster(s) " + ", ".join(str(i) for i, tied in enumerate(ties) if not tied)
    return [f"{what} untied from the input's in {clusters} (their values differ)"]


def _convert_state_dict(
    source: Mapping[str, torch.Tensor], cfg: ModelConfig, layout: _Layout, where: str, hf_ties: _HfTies | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor], list[str]]:
    """A source state dict as (txlab config, txlab state dict, notes on what was changed).

    ``cfg`` gives the shape; ``untie_r``, ``tie_weight``, ``tie_projs`` and ``full_width_proj`` are
    read off the weights and set in the returned config. ``hf_ties``: ties a Hugging Face config
    declares (their output copies are taken from the inputs, present or not). ``where`` names the
    source in errors.
    """
    if cfg.family != "xl" or cfg.pos_enc != "ours":
        raise TxlabError("imported checkpoints are Transformer-XL with the paper's attention: model.family must be 'xl' and model.pos_enc 'ours'")
    tensors = {}
    foreign = []
    for key, value in source.items():
        if key.startswith("crit."):
            tensors[key] = value
        elif key.startswith(layout.body_prefix):
            tensors[key.removeprefix(layout.body_prefix)] = value
        else:
            foreign.append(key)
    untie_r = "r_w_bias" not in tensors and "layers.0.dec_attn.r_w_bias" in tensors
    shapes = _source_shapes(cfg, untie_r)
    # Hugging Face lists the shared pair under every layer too
    aliases = set() if untie_r else {f"layers.{i}.dec_attn.{b}" for i in range(cfg.n_layer) for b in ("r_w_bias", "r_r_bias")}
    notes = []
    if hf_ties is not None:
        for out_key, in_key in _hf_tied_pairs(cfg, hf_ties):
            if in_key in tensors:
                tensors[out_key] = tensors[in_key]
    _check_keys(tensors, foreign, shapes, aliases | {"pos_emb.inv_freq"}, cfg, layout, where)
    for key in sorted(aliases & set(tensors)):
        shared = key.rsplit(".", 1)[-1]
        if not torch.equal(tensors[key], tensors[shared]):
            raise TxlabError(f"{where}: {layout.source_name(key)} differs from the shared {layout.source_name(shared)}")
    if any(t.dtype != torch.float32 for t in tensors.values() if t.is_floating_point()):
        notes.append("weights converted to float32")
    t = {k: v.float() for k, v in tensors.items()}

    bounds, dims = _clusters(cfg)
    n_tail = len(bounds) - 2
    cluster_weight, cluster_bias = t.get("crit.cluster_weight"), t.get("crit.cluster_bias")
    if n_tail and layout.reversed_clusters:
        cluster_weight, cluster_bias = cluster_weight.flip(0), cluster_bias.flip(0)
        notes.append("cluster_weight/cluster_bias rows reversed (the reference stores the last tail cluster first)")
    emb, emb_proj, out_weight, out_bias, out_proj = [], [], [], [], []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if cfg.div_val == 1:  # one table, one input projection: every cluster gets its slice and the projection
            emb.append(t["word_emb.emb_layers.0.weight"][lo:hi])
            emb_proj.append(t.get("word_emb.emb_projs.0"))
            out_weight.append(t["crit.out_layers.0.weight"][lo:hi])
            out_bias.append(t["crit.out_layers.0.bias"][lo:hi])
        else:
            emb.append(t[f"word_emb.emb_layers.{i}.weight"])
            emb_proj.append(t[f"word_emb.emb_projs.{i}"])
            out_weight.append(t[f"crit.out_layers.{i}.weight"])
            out_bias.append(t[f"crit.out_layers.{i}.bias"])
        out_proj.append(t.get(f"crit.out_projs.{i}"))
    # with div_val > 1 the sources project every cluster, also one as wide as the model
    full_width_proj = cfg.div_val > 1 and cfg.d_model in dims
    if full_width_proj:
        notes.append("full_width_proj set: the source projects a cluster that is already d_model wide")
    tie_weight, tie_projs = _ties(emb, out_weight), _ties(emb_proj, out_proj)
    notes += _untied_note("output weights", tie_weight) + _untied_note("output projections", tie_projs)
    out: dict[str, torch.Tensor] = {}
    for i in range(len(emb)):
        out[f"word_emb.emb_layers.{i}.weight"] = emb[i]
        out[f"crit.out_layers.{i}.weight"] = out_weight[i]
        out[f"crit.out_layers.{i}.bias"] = out_bias[i]
        if emb_proj[i] is not None:
            out[f"word_emb.emb_projs.{i}"] = emb_proj[i]
            out[f"crit.out_projs.{i}"] = out_proj[i]
    if n_tail:
        out["crit.cluster_weight"], out["crit.cluster_bias"] = cluster_weight, cluster_bias
    for layer in range(cfg.n_layer):
        out.update({f"blocks.{layer}.{ours}": t[f"layers.{layer}.{theirs}"] for theirs, ours in _LAYER_KEYS.items()})
    if untie_r:
        out["u"] = torch.stack([t[f"layers.{layer}.dec_attn.r_w_bias"] for layer in range(cfg.n_layer)])
        out["v"] = torch.stack([t[f"layers.{layer}.dec_attn.r_r_bias"] for layer in range(cfg.n_layer)])
    else:
        out["u"], out["v"] = t["r_w_bias"][None], t["r_r_bias"][None]
    ties = {"untie_r": untie_r, "tie_weight": tie_weight, "tie_projs": tie_projs, "full_width_proj": full_width_proj}
    return dataclasses.replace(cfg, **ties), out, notes


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from safetensors or from a torch.save file read with ``weights_only=True``."""
    if not path.is_file():
        raise TxlabError(f"no such file: {path}")
    if path.suffix == ".safetensors":
        try:
            return load_file(str(path))
        except (SafetensorError, OSError) as err:
            raise TxlabError(f"{path} is not a readable safetensors file: {err}") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise TxlabError(
            f"{path} is not a plain state dict, so it cannot be read without running its code "
            f"({str(err).splitlines()[0]}). The reference train.py saves the whole model (torch.save(model, ...)): "
            "where that code and file are trusted, save `torch.load(FILE, weights_only=False).state_dict()` with torch.save and import that"
        ) from None
    except Exception as err:  # torch raises several types for damaged or foreign files
        raise TxlabError(f"{path} is not a readable torch.save file: {err}") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise TxlabError(f"{path} does not hold a state dict (a mapping of parameter names to tensors)")
    return dict(state)


def _build(cfg: ModelConfig, tensors: dict[str, torch.Tensor], where: str) -> torch.nn.Module:
    """The txlab model of ``cfg`` holding ``tensors`` (tied parameters get their shared value)."""
    model = build_model(cfg)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    wrong = [f"{k} {list(tensors[k].shape)} (txlab expects {list(s)})" for k, s in expected.items() if k in tensors and tuple(tensors[k].shape) != s]
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if wrong or missing or unexpected:  # a config option the converter does not map
        raise TxlabError(f"{where}: the converted weights do not fit txlab's model: wrong shape {wrong}, missing {missing}, unexpected {unexpected}")
    model.load_state_dict(tensors)
    return model.eval()


# --------------------------------------------------------------------------------------------------
# Hugging Face configs

_HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 267735, "cutoffs": [20000, 40000, 200000], "d_model": 1024, "d_embed": 1024, "n_head": 16,
    "d_head": 64, "d_inner": 4096, "div_val": 4, "pre_lnorm": False, "n_layer": 18, "mem_len": 1600,
    "clamp_len": 1000, "same_length": True, "proj_share_all_but_first": True, "attn_type": 0,
    "sample_softmax": -1, "dropout": 0.1, "dropatt": 0.0, "layer_norm_epsilon": 1e-5,
}
"""TransfoXLConfig's defaults (its WikiText-103 large model), for config.json files that leave keys out."""


def _hf_config(path: Path) -> tuple[ModelConfig, _HfTies, bool]:
    """(model config, declared ties, same_length) from a Hugging Face TransfoXL config.json."""
    if not path.is_file():
        raise TxlabError(f"no {path.name} in {path.parent}: a Hugging Face model directory has config.json beside the weights")
    # a value of the wrong type (a string where a number belongs) names the file as damaged
    return read_back(path, _parse_hf_config, "fix it, or download the model again")


def _parse_hf_config(path: Path) -> tuple[ModelConfig, _HfTies, bool]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise TxlabError(f"{path} must hold a JSON object")
    if raw.get("model_type", "transfo-xl") != "transfo-xl":
        raise TxlabError(f"{path} describes a {raw['model_type']!r} model, not TransfoXL ('transfo-xl')")
    # Older files (the published transfo-xl-wt103) say n_token and tie_weight.
    c = {**_HF_DEFAULTS, "vocab_size": raw.get("n_token", _HF_DEFAULTS["vocab_size"]), **raw}
    if c["attn_type"] != 0:
        raise TxlabError(f"{path}: attn_type {c['attn_type']} is not the paper's relative attention (0), the only one TransfoXL implements")
    if c["sample_softmax"] > 0:
        raise TxlabError(f"{path}: sample_softmax {c['sample_softmax']} (a sampled softmax) is not supported; txlab uses the adaptive softmax")
    if abs(c["layer_norm_epsilon"] - 1e-5) > 1e-12:
        raise TxlabError(f"{path}: layer_norm_epsilon {c['layer_norm_epsilon']} is not supported (txlab's layer norms use 1e-5)")
    cutoffs = list(c["cutoffs"])
    tie_projs = c.get("tie_projs") or [False] + [bool(c["proj_share_all_but_first"])] * len(cutoffs)
    ties = _HfTies(bool(c.get("tie_word_embeddings", c.get("tie_weight", True))), tuple(bool(x) for x in tie_projs))
    model = update_dataclass(ModelConfig(), dict(  # checks every value's type and range
        family="xl", pos_enc="ours", n_token=c["vocab_size"], n_layer=c["n_layer"], d_model=c["d_model"],
        n_head=c["n_head"], d_head=c["d_head"], d_inner=c["d_inner"], d_embed=c["d_embed"],
        dropout=c["dropout"], dropatt=c["dropatt"], tgt_len=c.get("tgt_len", ModelConfig.tgt_len),
        mem_len=c["mem_len"], same_length=bool(c["same_length"]), clamp_len=max(0, c["clamp_len"]),
        pre_lnorm=bool(c["pre_lnorm"]), adaptive=bool(cutoffs), cutoffs=cutoffs, div_val=c["div_val"],
    ), prefix=f"{path.name}: model.")
    return model, ties, bool(c["same_length"])


# --------------------------------------------------------------------------------------------------
# Run directories


@dataclass
class ImportResult:
    """What ``txlab import`` made."""

    run_dir: Path
    params: int
    vocab_size: int
    notes: list[str]
    """What had to be changed on the way (reversed clusters, folded projections, untied outputs...)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _clear_out_dir(out_dir: Path, force: bool) -> None:
    """Make sure ``out_dir`` is empty: an earlier run's losses and evaluations there would be taken
    for the new model's. ``force`` deletes an earlier run directory (and only a run directory)."""
    if not out_dir.exists() or (out_dir.is_dir() and not any(out_dir.iterdir())):
        return
    if not (has_checkpoint(out_dir) or (out_dir / "config.yaml").is_file()):
        raise TxlabError(f"{out_dir} exists and is not an empty or run directory; choose another --out")
    if not force:
        raise TxlabError(f"{out_dir} already holds a run; choose another --out, or pass --force to delete it and everything in it")
    shutil.rmtree(out_dir)


IMPORTING = ".importing-"
"""Prefix of the folder an import writes beside --out before renaming it into place."""


def _write_run(out_dir: Path, model: torch.nn.Module, cfg: RunConfig, vocab: Vocab, record: dict[str, Any]) -> None:
    """checkpoint/ (with the vocabulary), config.yaml and import.json, written into a folder beside ``out_dir`` that is
    renamed into place once complete (:func:`~txlab.fileio.staged_folder`): a kill at any moment leaves no half run at
    ``out_dir`` (which the rerun would refuse as 'already holds a run' and eval could not read)."""
    with staged_folder(out_dir, IMPORTING) as staging:
        save_checkpoint(staging, model, cfg, step=0, vocab_hash=vocab.sha256, vocab=vocab)
        save_config(cfg, staging / "config.yaml")
        write_json_atomic(staging / "import.json", record)


def _finish(out_dir: Path, cfg: RunConfig, vocab: Vocab, weights: Path, layout: _Layout, record: dict[str, Any],
            force: bool, hf_ties: _HfTies | None = None) -> ImportResult:
    """Convert ``weights`` for ``cfg`` and write the run; nothing is written unless all of it converts."""
    if len(vocab) != cfg.model.n_token:
        raise TxlabError(f"the vocabulary has {len(vocab):,} symbols but the model {cfg.model.n_token:,} (model.n_token)")
    model_cfg, converted, notes = _convert_state_dict(_read_tensors(weights), cfg.model, layout, str(weights), hf_ties)
    cfg = dataclasses.replace(cfg, name=cfg.name or out_dir.name, model=model_cfg)
    model = _build(model_cfg, converted, str(weights))
    _clear_out_dir(out_dir, force)
    record = {**record, "weights": str(weights), "weights_sha256": _sha256(weights), "notes": notes, "txlab": __version__}
    _write_run(out_dir, model, cfg, vocab, record)
    return ImportResult(out_dir, model.num_parameters(), len(vocab), notes)


def hub_snapshot(repo_id: str) -> Path:
    """The local folder of a Hub repository's config, weights and vocabulary, downloaded into the
    Hugging Face cache unless already there. Without network or huggingface_hub, a one-line error
    says how to download it by hand."""
    by_hand = (f"download it where there is network (`pip install huggingface_hub`, then `hf download {repo_id} --local-dir DIR`), "
               f"copy DIR here and run `txlab import hf DIR`")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, HFValidationError
    except ImportError:
        raise TxlabError(f"{repo_id} is not a directory here; to fetch it from the Hugging Face Hub, pip install 'txlab[hub]', "
                         f"or {by_hand}") from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=["config.json", *HF_WEIGHTS, *HF_VOCABS]))
    except (HfHubHTTPError, HFValidationError, OSError) as err:  # offline, unknown or gated repository, no disk space
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TxlabError(f"{repo_id} is not a directory here and could not be fetched from the Hugging Face Hub ({reason}); {by_hand}") from None


def import_hf(
    directory: str | Path,
    out_dir: str | Path,
    *,
    corpus: str,
    vocab_file: str | Path | None = None,
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
    force: bool = False,
) -> ImportResult:
    """Convert a Hugging Face TransfoXLLMHeadModel directory, or a Hub id (ORG/NAME) that is not a
    local directory (:func:`hub_snapshot`), into the txlab run directory ``out_dir``.

    ``corpus``: the txlab corpus the model reads (config.json does not say). ``vocab_file``: default
    the first of :data:`HF_VOCABS` in ``directory``. ``config_file``/``overrides``: applied to the
    run configuration derived from config.json (e.g. evaluation lengths, the data directory).
    """
    source = str(directory)
    directory = Path(directory)
    if not directory.is_dir():
        if not HUB_ID.fullmatch(source):
            raise TxlabError(f"no Hugging Face model directory {directory} (nor a Hub id ORG/NAME)")
        directory = hub_snapshot(source)
        source = f"{source}@{directory.name}"  # the Hub commit the cache folder is named after
    model_cfg, ties, same_length = _hf_config(directory / "config.json")
    weights = next((directory / n for n in HF_WEIGHTS if (directory / n).is_file()), None)
    if weights is None:
        raise TxlabError(f"no weights in {directory} (looked for {', '.join(HF_WEIGHTS)}; sharded checkpoints are not supported)")
    if vocab_file is None:
        vocab_file = next((directory / n for n in HF_VOCABS if (directory / n).is_file()), None)
        if vocab_file is None:
            raise TxlabError(f"no vocabulary in {directory} (looked for {', '.join(HF_VOCABS)}); give one with --vocab")
    vocab = read_vocabulary(vocab_file)
    base = RunConfig(model=model_cfg, data=DataConfig(corpus=corpus))
    cfg = load_config(config_file, list(overrides), base=update_dataclass(base, {"eval": {"same_length": same_length}}))
    record = {"format": "huggingface", "source": source, "vocabulary": str(vocab_file)}
    return _finish(Path(out_dir), cfg, vocab, weights, HF_LAYOUT, record, force, ties)


def import_reference(
    state_dict: str | Path,
    out_dir: str | Path,
    *,
    vocab_file: str | Path,
    corpus: str,
    preset: str | None = None,
    size: str = "paper",
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
    force: bool = False,
) -> ImportResult:
    """Convert a state dict of the reference ``MemTransformerLM`` into the txlab run directory ``out_dir``.

    The hyper-parameters come from ``preset`` at ``size`` (e.g. xl151m for the authors' WikiText-103
    base model), then ``config_file``, then ``overrides``, as for ``txlab train``; ``model.n_token``
    is the vocabulary's size. ``corpus``: the txlab corpus the model reads.
    """
    vocab = read_vocabulary(vocab_file)
    cfg = run_config(preset, size, corpus, config_file, list(overrides))
    if cfg.model.n_token not in (0, len(vocab)):
        raise TxlabError(f"model.n_token is {cfg.model.n_token:,} but the vocabulary has {len(vocab):,} symbols")
    cfg = update_dataclass(cfg, {"model": {"n_token": len(vocab)}})
    record = {"format": "reference", "source": str(state_dict), "vocabulary": str(vocab_file), "preset": preset, "size": size if preset else None}
    return _finish(Path(out_dir), cfg, vocab, Path(state_dict), REFERENCE_LAYOUT, record, force)


EXPORTING = ".exporting-"
"""Prefix of the folder an export writes beside its destination before renaming it into place."""


@dataclass(frozen=True)
class ExportResult:
    """What ``txlab export`` wrote."""

    out_dir: Path
    files: list[Path]
    next_command: str
    """How txlab scores the export on what the run read: its corpus, or its own text with the tokenizer written beside it."""


def export_hf_run(run_dir: str | Path, out_dir: str | Path) -> ExportResult:
    """A txlab run of model family hf written as a Hugging Face checkpoint folder (``txlab export``), with the tokenizer
    the run trained with when it read own text (its Hugging Face tokenizer, or txlab's char or word vocabulary as one
    transformers loads: :meth:`~txlab.data.tokenizers.VocabularyTokenizer.as_hf`). A run of a registry corpus reads that
    corpus's ids and brings no tokenizer. ``txlab_export.json`` records the run and its vocabulary, which scoring checks
    (:func:`txlab.models.hf.check_corpus`). Written into a folder beside ``out_dir`` and renamed into place, as an import."""
    from txlab.data.registry import TEXT_CORPUS
    from txlab.data.textdata import trained_tokenizer
    from txlab.models.hf import export_hf

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise TxlabError(f"{out_dir} exists and is not an empty folder: choose a new folder for the Hugging Face checkpoint")
    ckpt = load_checkpoint(run_dir)
    data, own_text = ckpt.config.data, ckpt.config.data.corpus == TEXT_CORPUS
    tokenizer = trained_tokenizer(data, ckpt.meta["vocab_hash"], str(run_dir)).as_hf() if own_text else None
    record = {"run_dir": str(run_dir), "step": ckpt.meta["step"], "corpus": data.corpus, "text": data.text if own_text else None,
              "tokenizer": (data.tokenizer or "char") if own_text else None, "vocab_sha256": ckpt.meta["vocab_hash"],
              "preset": ckpt.config.preset, "size": ckpt.config.size}
    with staged_folder(out_dir, EXPORTING) as staging:
        export_hf(ckpt.model, staging, record, tokenizer)
    scored_on = f"--text {shlex.quote(data.text)}" if own_text else f"--data {data.corpus}"
    return ExportResult(out_dir, sorted(p for p in out_dir.iterdir() if p.is_file()), f"txlab eval {shlex.quote(f'hf:{out_dir}')} {scored_on}")
