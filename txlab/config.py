"""Run configuration: one dataclass per concern, YAML files and dotted overrides.

A run is described by a :class:`RunConfig` holding a :class:`ModelConfig`, :class:`DataConfig`,
:class:`TrainConfig` and :class:`EvalConfig`. Every field is a :func:`setting`: it carries
its documentation in ``metadata["doc"]``, so that errors and ``--show-settings`` can explain it.

Resolution order: dataclass defaults < preset < YAML file < ``--set a.b=value`` overrides.
Unknown keys are errors naming the key and the nearest valid ones; values are type-checked, and every
numeric field declares its valid :class:`Range` next to its doc (``metadata["range"]``), which every
value given to it must satisfy (:func:`check_fields` checks a whole dataclass built in Python).

The study commands' settings (txlab.drivers) are dataclasses of the same kind, read through the same
path: :func:`txlab.study.read_study` applies a study file's profile, :func:`override_settings` the
command line's options and ``--set`` overrides.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from txlab.devices import check_device_name
from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import MAX_YAML_BYTES, dump_yaml, load_yaml, read_text_file, write_text_atomic
from txlab.workspace import home

FAMILIES = ("xl", "vanilla", "lstm", "qrnn", "hf")
RECURRENT_FAMILIES = ("lstm", "qrnn")
"""The families whose state carries over between segments with no window (:attr:`ModelConfig.training_span`)."""
POS_ENCODINGS = ("ours", "shaw", "vaswani", "alrfou")
ATTN_KERNELS = ("auto", "unfused", "sdpa")
PRECISIONS = ("fp32", "bf16", "fp16")
"""How a model computes (txlab.precision): float32, or mixed precision under autocast in bfloat16 or float16."""

COMPILE_MODES = ("auto", "on", "off")
"""Whether a scored model's layers run compiled (txlab.models.compiled): on a CUDA GPU, always, or never."""


MAX_INT = 2**63 - 1
"""The largest integer a setting can hold: torch and numpy take 64-bit integers."""


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts: ``low <= value`` (``<`` when ``low_open``), likewise
    ``high``, always finite; ``special`` values mean something else (e.g. -1: 'as in training')."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple[float, ...] = ()

    def contains(self, value: float) -> bool:
        if value in self.special:
            return True
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """'>= 1', 'in [0, 1)', 'finite', with the special values: '>= 0, or -1'."""
        if self.low is not None and self.high is not None:
            text = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = "a finite number"
        return text + "".join(f", or {v:g}" for v in self.special)

    def check(self, value: Any, key: str) -> None:
        """Raise a TxlabError naming ``key`` unless ``value`` (a number, or a list of numbers) lies in the range."""
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (int, float)) and not isinstance(item, bool) and not self.contains(item):
                raise TxlabError(f"{key} must be {self.describe()}, got {item!r}")
            if isinstance(item, int) and abs(item) > MAX_INT:  # what torch and numpy can hold
                raise TxlabError(f"{key} must be at most {MAX_INT:,} (a 64-bit integer), got {item:,}")


POSITIVE = Range(1)
"""A count or length of at least 1."""
NON_NEGATIVE = Range(0)
"""0 or more (0 usually meaning 'off' or 'the default', as the field's doc says)."""
POSITIVE_REAL = Range(0, low_open=True)
"""A real number above 0."""
PROBABILITY = Range(0, 1, high_open=True)
"""A dropout probability: 0 (off) up to, but not including, 1."""
FINITE = Range()
"""Any finite number (no NaN or infinity)."""
SEED = Range(0, MAX_INT)
"""What torch and numpy accept as a seed."""


def setting(default: Any, doc: str, choices: tuple[str, ...] | None = None, valid: Range | None = None, overrides: bool = False) -> Any:
    """A dataclass field with its documentation (and allowed values or range) attached: every field of
    a run config and of a study's settings is one. ``default`` may be a list, or a dataclass type whose
    instance holds a section of settings. ``overrides`` marks a list of ``<key>=<value>`` overrides, which
    a study profile that extends another merges by key (txlab.study)."""
    meta = {"doc": doc, "choices": choices, "range": valid, "overrides": overrides}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    if isinstance(default, type) and dataclasses.is_dataclass(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelConfig:
    """The language model: family, shape, positional encoding, softmax."""

    family: str = setting("xl", "Model family: Transformer-XL, vanilla Transformer (Al-Rfou et al.), LSTM, QRNN, or hf (a Hugging Face "
                          "architecture named by hf_arch, built with the transformers package).", FAMILIES)
    hf_arch: str = setting("", "Family hf only: 'gpt2' (learned absolute positions, max_len of them) or 'llama' (rotary positions).")
    n_token: int = setting(0, "Vocabulary size; 0 means 'take it from the corpus'.", valid=NON_NEGATIVE)
    n_layer: int = setting(4, "Number of layers (Transformer blocks or recurrent layers).", valid=POSITIVE)
    d_model: int = setting(128, "Transformer hidden size; for RNNs the embedding size.", valid=POSITIVE)
    n_head: int = setting(4, "Attention heads.", valid=POSITIVE)
    d_head: int = setting(32, "Size of each attention head.", valid=POSITIVE)
    d_inner: int = setting(512, "Transformer feed-forward inner size; for RNNs the hidden size of each recurrent layer.", valid=POSITIVE)
    d_embed: int = setting(0, "Embedding size before the projection to d_model; 0 means d_model.", valid=NON_NEGATIVE)
    dropout: float = setting(0.0, "Dropout on embeddings, residual branches and outputs (a Hugging Face Llama has none: 0 there, its dropatt only).", valid=PROBABILITY)
    dropatt: float = setting(0.0, "Dropout on attention probabilities.", valid=PROBABILITY)
    dropout_hidden: float = setting(
        0.0,
        "RNN only: dropout between recurrent layers. RNN dropouts are variational (one mask per sequence, "
        "as in AWD-LSTM); `dropout` applies the same way to the embeddings and the last layer's output.",
        valid=PROBABILITY,
    )
    pos_enc: str = setting(
        "ours",
        "Positional encoding: 'ours' (the paper's four-term relative scheme), 'shaw' (learned relative, "
        "terms a and b), 'vaswani' (absolute sinusoid at the input), 'alrfou' (learned absolute at every layer).",
        POS_ENCODINGS,
    )
    tgt_len: int = setting(128, "Training segment length (tokens predicted per step and stream).", valid=POSITIVE)
    mem_len: int = setting(128, "Training memory length per layer; 0 turns recurrence off.", valid=NON_NEGATIVE)
    same_length: bool = setting(False, "Every query attends to the same number of keys (the paper uses it at evaluation).")
    clamp_len: int = setting(0, "Relative distances beyond this share one embedding; 0 means no clamping.", valid=NON_NEGATIVE)
    max_len: int = setting(
        0,
        "Rows of the learned position tables: positions for 'alrfou', distances for 'shaw' (longer ones share the last row), "
        "and the vanilla Transformer's window (its longest chunk); 0 means tgt_len + mem_len (vanilla: tgt_len).",
        valid=NON_NEGATIVE,
    )
    untie_r: bool = setting(False, "Per-layer global biases u and v instead of ones shared by all layers.")
    pre_lnorm: bool = setting(False, "Layer norm before each sub-layer instead of after (the paper uses post-LN).")
    adaptive: bool = setting(False, "Adaptive input and adaptive softmax instead of a plain embedding and softmax.")
    cutoffs: list[int] = setting([], "Adaptive softmax cluster boundaries, ascending, each below n_token.", valid=POSITIVE)
    div_val: int = setting(1, "Each adaptive cluster's embedding is div_val times smaller than the previous one.", valid=POSITIVE)
    full_width_proj: bool = setting(
        False,
        "Adaptive input and softmax: also project the clusters whose embedding is already d_model wide (the head "
        "when div_val > 1), as the authors' code does; same functions, one more d_model x d_model matrix per side.",
    )
    tie_weight: bool | list[bool] = setting(
        True, "Share the output softmax weights with the input embedding: true/false for every cluster, or one per cluster."
    )
    tie_projs: bool | list[bool] = setting(
        True,
        "Share the adaptive projections between input and output: true/false for every cluster, or one per cluster "
        "(the authors' WikiText-103 models: [false, true, true, true]).",
    )
    qrnn_window: int = setting(2, "QRNN only: convolution window of the first layer (later layers use 1).", valid=POSITIVE)
    rnn_embed_init: float = setting(
        0.1,
        "RNN only: embedding and softmax weights start uniform on +-rnn_embed_init. 0.1 is AWD-LSTM's (SGD at lr 30); "
        "with Adam at the cpu recipe's lr 3e-3, inputs that small leave the gates deaf to them and an LSTM learns no "
        "latch (docs/models.md), so the cpu presets start at 1.7 (about unit variance).",
        valid=POSITIVE_REAL,
    )
    rnn_keep_bias: float = setting(
        0.0,
        "RNN only: added at initialisation to the bias of the gate that keeps the cell's content (the LSTM's forget "
        "gate; the QRNN's gate on the previous cell), so cells start out remembering longer (Jozefowicz et al. 2015 "
        "use 1 for the LSTM). 0 leaves torch's initialisation as it is.",
        valid=FINITE,
    )
    attn_kernel: str = setting(
        "auto",
        "Transformers only: the attention kernel, which changes speed, not results: 'unfused' (explicit products and softmax), "
        "'sdpa' (PyTorch's fused scaled_dot_product_attention, relative position scores as its additive mask), or 'auto' "
        "(per case the one measured fastest on CPU: sdpa for absolute positions, unfused for relative ones; docs/performance.md).",
        ATTN_KERNELS,
    )
    compile: bool = setting(
        False,
        "Transformers only: torch.compile every layer, in training and evaluation (a compile per new chunk shape, tens of seconds "
        "on CPU; docs/performance.md has what it bought).",
    )

    @property
    def training_span(self) -> int | None:
        """Tokens the model attends as one stretch in training: its segment plus its memory; None for a recurrent
        model (LSTM, QRNN), whose state carries over from segment to segment without a bound."""
        return None if self.family in RECURRENT_FAMILIES else self.tgt_len + self.mem_len


COMPUTE_SETTINGS = ("attn_kernel", "compile")
"""ModelConfig fields that choose how a model computes, not what: a checkpoint loads under any of their
values, and a run may change them when it resumes."""


@dataclass
class DataConfig:
    """Where tokens come from."""

    corpus: str = setting("synthetic", "Corpus name (see `txlab data list`), or 'text' for own text (data.text, data.tokenizer).")
    data_dir: str = setting("", "Directory holding one folder per corpus; empty means $TXLAB_DATA_DIR or the user cache directory.")
    corpus_dir: str = setting("", "Folder of this corpus's files, overriding <data_dir>/<corpus> (e.g. a sample with only some splits).")
    cache_dir: str = setting(
        "", "Where encoded corpora are cached; empty means $TXLAB_CACHE_DIR, else <data_dir>/.encoded if writable, else the user cache."
    )
    text: str = setting(
        "",
        "Own text (data.corpus: text): a UTF-8 text file, whose tokens data.text_split cuts into train/valid/test, or a folder of "
        "split files (train.txt, valid.txt, test.txt; also validation.txt, val.txt, *.tokens, wiki.*.tokens, ptb.*.txt).",
    )
    tokenizer: str = setting(
        "",
        "Own text only: 'char' (txlab's character vocabulary), 'word' (words split on whitespace, <eos> after every line, as WikiText) "
        "or 'hf:PATH_OR_HUB_ID' (a Hugging Face tokenizer: a local folder, or a Hub id when online; no special tokens added); empty means char.",
    )
    text_split: list[float] = setting(
        [0.9, 0.05, 0.05],
        "Own text given as one file: the train, valid and test fractions of its tokens, in that order, summing to 1 (a 0 leaves that split out).",
        valid=Range(0, 1),
    )
    synthetic_tokens: int = setting(2_000_000, "Synthetic corpora only: number of training tokens generated.", valid=POSITIVE)
    synthetic_eval_tokens: int = setting(200_000, "Synthetic corpora only: number of tokens in each of valid and test.", valid=POSITIVE)
    synthetic_seed: int = setting(0, "Synthetic corpora only: sampling seed (the language itself is fixed; each split has its own stream).", valid=SEED)
    synthetic_max_context: int = setting(0, "Synthetic corpora only: move the longest dependency to this many tokens; 0 keeps the variant's.", valid=NON_NEGATIVE)
    enwik8_drop_newlines: bool = setting(
        False, "enwik8/text8: drop newline bytes after the 90/5/5 split, as the reference preprocessing does (204 symbols); default keeps them."
    )


@dataclass
class TrainConfig:
    """The optimisation protocol."""

    batch_size: int = setting(8, "Number of contiguous streams trained in parallel.", valid=POSITIVE)
    max_steps: int = setting(1000, "Optimizer steps.", valid=POSITIVE)
    optimizer: str = setting("adam", "Optimizer.", ("adam", "adamw"))
    lr: float = setting(2.5e-4, "Peak learning rate.", valid=POSITIVE_REAL)
    weight_decay: float = setting(0.0, "Weight decay (decoupled for adamw).", valid=NON_NEGATIVE)
    scheduler: str = setting(
        "cosine", "Learning-rate schedule after warm-up: 'wsd' holds lr, then decays linearly to lr_min over the last decay_fraction of the steps.",
        ("cosine", "constant", "inv_sqrt", "wsd"),
    )
    warmup_steps: int = setting(0, "Linear warm-up steps.", valid=NON_NEGATIVE)
    lr_min: float = setting(0.0, "Final learning rate of the cosine and wsd schedules.", valid=NON_NEGATIVE)
    decay_fraction: float = setting(0.2, "Share of max_steps over which the wsd schedule decays linearly to lr_min.", valid=PROBABILITY)
    clamp_from_step: int = setting(
        0, "Step from which model.clamp_len applies in training; before it relative distances are not clamped. A recall first forms "
        "where positions tell distances apart, then clamping makes it independent of distance beyond clamp_len (docs/models.md, "
        "'Clamping from a step'); validations before the step score unclamped when eval.clamp_len is -1.", valid=NON_NEGATIVE)
    max_restarts: int = setting(
        0, "The restart rule: at most this many times, a run whose validation restart_metric at step restart_at_step is above "
        "restart_above starts again from its first step with the next seed (train.seed + 1000 x attempt); 0: no rule. Every "
        "abandoned attempt is kept in <run>/restarts.jsonl and <run>/restarts/ (docs/training.md, 'Restart rule').", valid=NON_NEGATIVE)
    restart_at_step: int = setting(0, "The step whose validation the restart rule reads: a multiple of eval_interval below max_steps.",
                                   valid=NON_NEGATIVE)
    restart_metric: str = setting("loss", "The validation metric the restart rule reads: loss, ppl or bpc, or on the synthetic corpora "
                                          "a role's loss (role_<role>, e.g. role_recalled_value).")
    restart_above: float = setting(0.0, "The restart rule's threshold: an attempt whose restart_metric is above it starts again.", valid=FINITE)
    clip: float = setting(0.25, "Gradient-norm clipping threshold; 0 disables.", valid=NON_NEGATIVE)
    grad_accum: int = setting(1, "Micro-batches accumulated per optimizer step.", valid=POSITIVE)
    loss: str = setting("full", "Cross entropy on every position ('full') or the most recent half of each segment ('half').", ("full", "half"))
    eval_interval: int = setting(200, "Steps between validation evaluations.", valid=POSITIVE)
    eval_tokens: int = setting(0, "Validation tokens scored at each periodic evaluation; 0 means the whole split.", valid=NON_NEGATIVE)
    log_interval: int = setting(20, "Steps between metric lines.", valid=POSITIVE)
    seed: int = setting(0, "Seed for parameters, dropout and data order.", valid=SEED)
    device: str = setting("cpu", "Torch device ('cpu', 'cuda', 'cuda:1', ...).")
    precision: str = setting(
        "fp32",
        "Training steps in fp32, or in mixed precision: bf16 or fp16 autocast (fp16 with dynamic loss scaling), weights and "
        "optimizer in fp32, the log-softmax and losses in fp32; on a CUDA GPU with TF32, bf16 and fp16 also use it for fp32 matmuls.",
        PRECISIONS,
    )
    threads: int = setting(0, "CPU threads for torch; 0 leaves torch's default.", valid=NON_NEGATIVE)
    tensorboard: bool = setting(False, "Also log metrics for TensorBoard under <run>/tensorboard (needs `pip install tensorboard`).")
    wandb: bool = setting(False, "Also log metrics and the resolved config to Weights & Biases (needs `pip install 'txlab[wandb]'`): "
                                 "project $WANDB_PROJECT, else txlab; one W&B run per run directory, continued on resume; "
                                 "$WANDB_MODE=offline keeps it on this machine.")


@dataclass
class EvalConfig:
    """Evaluation settings; a length of -1 means 'the model's training value'."""

    split: str = setting("valid", "Split to score.", ("train", "valid", "test"))
    batch_size: int = setting(8, "Number of contiguous evaluation streams.", valid=POSITIVE)
    tgt_len: int = setting(-1, "Evaluation segment length; -1 means the model's tgt_len.", valid=Range(1, special=(-1,)))
    mem_len: int = setting(-1, "Evaluation memory length; -1 means the model's mem_len.", valid=Range(0, special=(-1,)))
    clamp_len: int = setting(-1, "Evaluation clamp_len; -1 means the model's clamp_len.", valid=Range(0, special=(-1,)))
    same_length: bool = setting(True, "Every query attends to the same number of keys.")
    streams: str = setting(
        "exact",
        "How the split is cut into batch_size streams: 'exact' scores every target once (the remainder and the targets at "
        "stream boundaries included); 'reference' as the authors' eval.py (len // batch_size tokens a stream, the rest "
        "dropped, each stream's first token not scored).",
        ("exact", "reference"),
    )
    precision: str = setting(
        "fp32",
        "Evaluation (the periodic validation, txlab eval, loss tables for RECL) in fp32, or under bf16 or fp16 autocast; the "
        "log-softmax and the losses stay fp32, but reduced-precision noise in a loss can read as context gain in RECL.",
        PRECISIONS,
    )


@dataclass
class RunConfig:
    """Everything that defines a run; saved as config.yaml in its directory."""

    name: str = setting("", "Run name; empty means derived from preset, size and corpus.")
    preset: str = setting("", "The named preset this run started from, if any.")
    size: str = setting("", "The preset size ('paper', 'cpu', ...), if any.")
    model: ModelConfig = setting(ModelConfig, "Model.")
    data: DataConfig = setting(DataConfig, "Data.")
    train: TrainConfig = setting(TrainConfig, "Training.")
    eval: EvalConfig = setting(EvalConfig, "Evaluation.")

    @property
    def tokens_per_step(self) -> int:
        """Training tokens one optimizer step reads: streams x segment (train.grad_accum splits the streams, it adds none)."""
        return self.train.batch_size * self.model.tgt_len


def field_doc(cls: type, name: str) -> str:
    """The documentation string of one config field."""
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}[name]


def _type_name(typ: Any) -> str:
    """How an error message names a config type."""
    if typing.get_origin(typ) is list:
        return f"a list of {_type_name(typing.get_args(typ)[0])}"
    if typing.get_origin(typ) in (typing.Union, types.UnionType):  # an unset-able setting names what it takes when set
        return " or ".join(_type_name(arg) for arg in typing.get_args(typ) if arg is not type(None))
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(typ, repr(typ))


def _coerce(value: Any, typ: Any, key: str, choices: tuple[str, ...] | None) -> Any:
    """Check (and where lossless, convert) ``value`` against the annotation ``typ``."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(typ)):  # None only where the annotation allows it
            return None
        if len(args) == 1:
            return _coerce(value, args[0], key, choices)
        for arg in args:  # the first alternative the value fits
            try:
                return _coerce(value, arg, key, choices)
            except TxlabError:
                pass
        raise TxlabError(f"config key {key!r} expects {' or '.join(map(_type_name, args))}, got {value!r}")
    if origin is list:
        (item,) = typing.get_args(typ)
        if not isinstance(value, (list, tuple)):
            shown = "true" if value is True else "false" if value is False else value
            raise TxlabError(f"config key {key!r} expects a list, got {value!r}: write it in brackets, e.g. --set {key}=[{shown}] "
                             f"(several: [{shown}, ...])")
        return [_coerce(v, item, f"{key}[{i}]", None) for i, v in enumerate(value)]
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise TxlabError(f"config key {key!r} expects true or false, got {value!r}")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TxlabError(f"config key {key!r} expects an integer, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads '1e-3' (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise TxlabError(f"config key {key!r} expects a number, got {value!r}")
    if typ is str:
        if not isinstance(value, str):
            raise TxlabError(f"config key {key!r} expects a string, got {value!r}")
        if choices and value not in choices:
            raise TxlabError(f"config key {key!r} must be one of {', '.join(choices)}; got {value!r}")
        return value
    raise TypeError(f"unsupported config type {typ!r} for {key}")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The field types of a settings dataclass (``typing.get_type_hints``), evaluated once per class: its annotations
    are strings, and evaluating them again was most of the time of resolving a run's config."""
    return typing.get_type_hints(cls)


def update_dataclass(obj: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """A copy of dataclass ``obj`` with ``values`` (possibly nested dicts) applied, strictly."""
    if not isinstance(values, dict):
        raise TxlabError(f"config section {prefix.rstrip('.') or '<root>'!r} must be a mapping, got {values!r}")
    hints = field_types(type(obj))
    fields = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if name not in fields:
            raise did_you_mean(name, fields, "config key", shown=key)
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            changes[name] = update_dataclass(current, value, prefix=f"{key}.")
        elif isinstance(value, dict):
            raise TxlabError(f"config key {key!r} is a value, not a section (it has no keys {', '.join(map(repr, value))})")
        else:
            changes[name] = _coerce(value, hints[name], key, fields[name].metadata.get("choices"))
            _check_range(fields[name], changes[name], key)
    return dataclasses.replace(obj, **changes)


def _check_range(f: dataclasses.Field, value: Any, key: str) -> None:
    if f.name == "device" and isinstance(value, str):  # every device setting (a run's train.device, each study's device) names a torch device
        check_device_name(value, key)  # the name only: whether this machine has the device is checked where a model is placed
    valid = f.metadata.get("range")
    if valid is not None:
        valid.check(value, key)
    elif isinstance(value, float) and not math.isfinite(value):  # no field means NaN or infinity
        raise TxlabError(f"{key} must be a finite number, got {value!r}")


def check_fields(obj: Any, prefix: str = "") -> Any:
    """Check every field of dataclass ``obj`` (nested ones too) against its declared range and choices;
    for settings built with ``dataclasses.replace`` (e.g. command-line values over a study profile)."""
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check_fields(value, f"{key}.")
            continue
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            raise did_you_mean(str(value), choices, key)
        _check_range(f, value, key)
    return obj


def parse_seeds(spec: str | None, option: str = "--train-seeds") -> list[int] | None:
    """A seeds option's value, '0,1,2' -> [0, 1, 2]; None when it is not given (their range is checked with the
    other settings)."""
    if spec is None:
        return None
    try:
        return [int(x) for x in spec.split(",")]
    except ValueError:
        raise TxlabError(f"{option} takes comma-separated integers, e.g. {option} 0,1,2; got {spec!r}") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``'model.d_model=256'`` into its key path and a YAML-parsed value."""
    if "=" not in text:
        raise TxlabError(f"override {text!r} must look like section.key=value (e.g. model.d_model=256)")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise TxlabError(f"override {text!r} has no key")
    shown = text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"  # a value of 100,000 digits is not echoed
    try:
        value = load_yaml(raw, f"the value of override {shown!r}") if raw.strip() else ""
    except yaml.YAMLError as err:
        raise TxlabError(f"cannot parse the value of override {shown!r}: {err}") from None
    return key.split("."), value


def _is_text_setting(cfg: Any, path: list[str]) -> bool:
    """Whether ``path`` names a string field of the dataclass ``cfg`` (nested sections included; one that may be unset too)."""
    for i, part in enumerate(path):
        if not dataclasses.is_dataclass(cfg) or part not in {f.name for f in dataclasses.fields(cfg)}:
            return False
        if i < len(path) - 1:
            cfg = getattr(cfg, part)
    hint = field_types(type(cfg))[path[-1]]
    return hint is str or set(typing.get_args(hint)) == {str, type(None)}


def apply_overrides(cfg: Any, overrides: list[str]) -> Any:
    """Apply ``--set a.b=value`` overrides to a config dataclass, with type checking."""
    for text in overrides:
        path, value = parse_override(text)
        if _is_text_setting(cfg, path) and not isinstance(value, str):  # YAML reads a grid 4:32:4 as the number 16324
            value = text.split("=", 1)[1].strip()
        nested: Any = value
        for part in reversed(path):
            nested = {part: nested}
        cfg = update_dataclass(cfg, nested)
    return cfg


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Load a YAML mapping, reporting syntax errors with file and line; a file that is no regular file,
    too large, or expands through aliases beyond bounds (txlab.fileio.load_yaml) is refused."""
    path = Path(path)
    if not path.exists():
        raise TxlabError(f"no such file: {path}")
    try:
        data = load_yaml(read_text_file(path, MAX_YAML_BYTES, "the YAML file"), str(path))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err)
        raise TxlabError(f"YAML error at {where}: {problem}") from None
    except UnicodeDecodeError:
        raise TxlabError(f"{path} is not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TxlabError(f"{path} must hold a YAML mapping at the top level")
    return data


def override_settings(settings: Any, options: dict[str, Any] | None = None, sets: Sequence[str] = ()) -> Any:
    """Command-line values over a study's settings: its options (setting name -> value, None meaning
    'not given'), then ``--set key=value`` overrides. Both take the strict path of run configs (types,
    choices, declared ranges, unknown keys with the nearest names), so ``--threads 0`` and
    ``--set threads=0`` are refused alike."""
    given = {name: value for name, value in (options or {}).items() if value is not None}
    try:
        return apply_overrides(update_dataclass(settings, given), sets)
    except TxlabError as err:
        raise TxlabError(f"command line: {err}") from None


def describe_settings(settings: Any, prefix: str = "") -> str:
    """One line per setting of a dataclass (nested sections as ``section.key``): key, default, what it
    accepts and its documentation, as ``--show-settings`` prints them."""
    hints = field_types(type(settings))
    lines = []
    for f in dataclasses.fields(settings):
        value, key = getattr(settings, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            lines.append(describe_settings(value, f"{key}."))
            continue
        accepts = _type_name(hints[f.name])
        if f.metadata.get("choices"):
            accepts = " | ".join(f.metadata["choices"])
        elif f.metadata.get("range") is not None:
            accepts += f", {f.metadata['range'].describe()}"
        shown = "unset" if value is None else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"{key} = {shown}  ({accepts})\n"
                     f"    {f.metadata.get('doc', '')}")
    return "\n".join(lines)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, base: RunConfig | None = None) -> RunConfig:
    """Resolve a run configuration: ``base`` (or defaults), then a YAML file (its paths read by :func:`from_record`), then overrides."""
    cfg = base if base is not None else RunConfig()
    if path is not None:
        cfg = from_record(update_dataclass(cfg, read_yaml(path)), Path(path).parent)
    return apply_overrides(cfg, overrides or [])


def as_recorded(cfg: RunConfig, folder: Path) -> RunConfig:
    """``cfg`` as a record in ``folder`` (a run's config.yaml) holds it: own text (data.text) inside the home named
    relative to ``folder``, so that the record still names it when the home moves (the repository cloned at another
    path, with ``txlab --home .``); a text outside the home keeps its absolute path, as it does not move with it."""
    text = Path(cfg.data.text).expanduser()
    if not (text.is_absolute() and text.is_relative_to(home().resolve())):
        return cfg
    return update_dataclass(cfg, {"data": {"text": os.path.relpath(text, Path(folder).resolve())}})


def from_record(cfg: RunConfig, folder: Path) -> RunConfig:
    """``cfg`` read from a record in ``folder``, its paths absolute again (:func:`as_recorded`)."""
    text = Path(cfg.data.text).expanduser()
    if not cfg.data.text or text.is_absolute():
        return cfg
    return update_dataclass(cfg, {"data": {"text": str((Path(folder) / text).resolve())}})


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (what is saved as YAML or JSON)."""
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Any) -> str:
    """The config as YAML (:func:`txlab.fileio.dump_yaml`: every run and plan writes one)."""
    return dump_yaml(to_dict(cfg))


def save_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config as YAML, atomically, its paths as a record holds them (:func:`as_recorded`)."""
    return write_text_atomic(Path(path), to_yaml(as_recorded(cfg, Path(path).parent)))
