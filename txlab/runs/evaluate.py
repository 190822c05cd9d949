"""Evaluation: how a trained model is read and scored, for every command that reads one.

This module owns
- :func:`read_in_chunks`, the one loop that feeds a model a token stream chunk by chunk, each chunk
  starting from the state the one before left (Transformer-XL's memory, an RNN's state). Evaluation,
  the loss tables of txlab.measure.losses, generation and the attention analysis all read through it;
- the evaluation settings (:func:`evaluation_context`: segment length and memory, "-1 = as in
  training") and :func:`using_context` to apply them for a while;
- the paper's protocol: :func:`evaluate` scores every target of a split exactly once (a
  :class:`StreamScore`), and :func:`evaluate_run` does so for a trained run with the
  :class:`EvalSettings` asked for and records the :class:`EvalResult` in its directory
  (:func:`evaluate_checkpoint` likewise for a Hugging Face checkpoint);
- :func:`segment_loss`, the training objective on a segment's losses, and :func:`metric_summary`
  (perplexity or bits per character), so that code which measures or reports a model needs
  nothing from the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from txlab.analysis.per_unit import unit_perplexity
from txlab.config import NON_NEGATIVE, DataConfig, EvalConfig, ModelConfig, setting, update_dataclass
from txlab.data.batching import eval_segments
from txlab.data.cache import ids_sha256
from txlab.data.corpus import Corpus, check_corpus_dir_applies, load_corpus, load_corpus_for_model, spelled_text
from txlab.data.registry import CORPORA, TEXT_CORPUS
from txlab.data.diagnostics import role_summary
from txlab.data.textdata import split_text, trained_tokenizer
from txlab.data.tokenizers import TextTokenizer, stream_encoding
from txlab.data.words import cut_words
from txlab.devices import check_device
from txlab.errors import TxlabError
from txlab.fileio import write_json_atomic
from txlab.models import hf
from txlab.models.interface import Context, LanguageModel, LMOutput, State
from txlab.precision import check_precision, scoring_precision
from txlab.progress import Progress
from txlab.runs.capacity import check_fits, check_position_table
from txlab.runs.checkpoint import load_checkpoint


def read_in_chunks(
    model: LanguageModel, tokens: torch.Tensor, chunk_len: int | None, state: State | None = None, targets: torch.Tensor | None = None,
) -> Iterator[tuple[int, LMOutput]]:
    """Feed ``tokens`` [B, n] to ``model`` ``chunk_len`` columns at a time (None: all n as one chunk), each
    chunk from the state the previous one left, the first from ``state`` (default: a fresh state).

    Yields (first column, output) per chunk; the last chunk may be shorter. ``targets`` [B, n], when
    given, are scored with their chunk (``out.nll``). The state of the last output holds everything
    read: pass it back to go on reading. Chunks move to the model's device one at a time.
    """
    state = model.init_state(tokens.size(0)) if state is None else state
    step = chunk_len or tokens.size(1)
    for start in range(0, tokens.size(1), step):
        columns = slice(start, start + step)
        chunk_targets = None if targets is None else targets[:, columns].to(model.device)
        out = model(tokens[:, columns].to(model.device), state, chunk_targets)
        state = out.state
        yield start, out


def evaluation_context(model_cfg: ModelConfig, eval_cfg: EvalConfig) -> tuple[int, Context]:
    """Segment length and memory settings for evaluation (-1 means 'as in training')."""
    pick = lambda value, default: default if value < 0 else value  # noqa: E731
    tgt_len = pick(eval_cfg.tgt_len, model_cfg.tgt_len)
    context = Context(
        pick(eval_cfg.mem_len, model_cfg.mem_len), eval_cfg.same_length, pick(eval_cfg.clamp_len, model_cfg.clamp_len)
    )
    if tgt_len < 1:
        raise TxlabError(f"evaluation segment length must be >= 1, got {tgt_len}")
    trained_clamp = model_cfg.clamp_len
    if trained_clamp > 0 and not 0 < context.clamp_len <= trained_clamp:
        # every distance past the training clamp shared one position in training: scored unclamped or clamped
        # further out, such distances get positions the model never saw, and its loss measures that, not the model
        raise TxlabError(
            f"the model was trained with relative distances clamped at {trained_clamp} (model.clamp_len), and evaluation "
            f"would clamp {'none' if context.clamp_len == 0 else f'at {context.clamp_len}'} (eval.clamp_len {eval_cfg.clamp_len}): "
            f"distances past {trained_clamp} would read positions it never trained on. Set eval.clamp_len=-1 (as trained) "
            f"or a value from 1 to {trained_clamp}"
        )
    return tgt_len, context


@contextmanager
def using_context(model: LanguageModel, context: Context):
    """Temporarily switch the model's memory settings (e.g. to evaluate during training)."""
    previous = model.context
    model.set_context(context)
    try:
        yield
    finally:
        model.set_context(previous)


@dataclass(frozen=True)
class StreamScore:
    """What :func:`evaluate` measured on a token stream."""

    loss: float
    """Token-weighted mean NLL, nats per token."""
    tokens: int
    """Targets scored."""
    tf32: bool
    """Whether TF32 matmuls were on (txlab.precision)."""
    last_target: int
    """Every target scored lies in 1..last_target (equal to ``tokens`` unless reference streams skip some)."""
    nll: np.ndarray | None = None
    """With ``token_losses``: float64 [len(tokens)] nats in text order, NaN for the first token and any token past
    ``max_tokens`` (what txlab.data.diagnostics reads); else None."""


@torch.no_grad()
def evaluate(
    model: LanguageModel,
    tokens: np.ndarray,
    tgt_len: int,
    context: Context,
    batch_size: int,
    max_tokens: int = 0,
    *,
    progress: bool = False,
    token_losses: bool = False,
    reference_streams: bool = False,
    precision: str = "fp32",
) -> StreamScore:
    """Token-weighted mean NLL over ``tokens`` (the first ``max_tokens`` + 1 if > 0), every target
    scored exactly once: the paper's protocol. ``reference_streams``: only the targets the authors'
    eval.py scores (see :func:`txlab.data.batching.eval_segments`). ``precision``: the forward passes in
    fp32 or under bf16 or fp16 autocast (txlab.precision); the losses are summed in float64 either way.
    ``token_losses``: the result carries every token's loss too (``nll``)."""
    if tgt_len <= 0:
        raise TxlabError(f"segment length must be positive, got {tgt_len}")
    per_token = np.full(len(tokens), np.nan) if token_losses else None
    if max_tokens > 0:
        tokens = tokens[: max_tokens + 1]
    # The evaluation streams whole (one segment longer than any stream), read below in segments of tgt_len.
    streams = next(eval_segments(tokens, batch_size, len(tokens), reference_streams))  # [B, n] each
    last_target = int(streams.target_index[streams.mask].max())
    n_segments = -(-streams.inputs.shape[1] // tgt_len)
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=model.device)
    count = 0
    try:
        with using_context(model, context), scoring_precision(precision, model.device, next(model.parameters()).dtype) as tf32:
            chunks = read_in_chunks(model, torch.as_tensor(streams.inputs), tgt_len, targets=torch.as_tensor(streams.targets))
            for start, out in Progress(chunks, total=n_segments, desc="eval", unit="seg", disable=not progress, leave=False):
                columns = slice(start, start + tgt_len)
                real = streams.mask[:, columns]  # [B, T] bool: padding is not scored
                nll = out.nll.double()[torch.as_tensor(real, device=model.device)]  # [targets in this segment]
                total += nll.sum()
                count += int(real.sum())
                if per_token is not None:
                    per_token[streams.target_index[:, columns][real]] = nll.cpu().numpy()
    finally:
        model.train(was_training)
    return StreamScore(total.item() / count, count, tf32, last_target, per_token)


def segment_loss(nll: torch.Tensor, loss: str) -> torch.Tensor:
    """Mean training loss of a segment's per-token NLL [B, T]: all positions, or the most recent half."""
    if loss == "half":
        return nll[:, nll.shape[1] // 2 :].mean()
    return nll.mean()


def metric_summary(loss: float, level: str) -> dict[str, float]:
    """Loss plus the paper's headline metric: perplexity for words, bits per character for characters."""
    return {"loss": loss, "bpc": loss / math.log(2)} if level == "char" else {"loss": loss, "ppl": math.exp(min(loss, 700.0))}


@dataclass(frozen=True)
class EvalStream:
    """A split as `txlab eval` scores it: its token ids, and the text its targets spell (what perplexity per word and per
    byte count)."""

    ids: np.ndarray
    """int [n]: the tokens, the first read as context only."""
    spell: Callable[[int], str]
    """``last`` -> the text targets 1..last spell: from the end of the first token to the end of token ``last``."""
    sha256: str
    """:func:`txlab.data.cache.ids_sha256` of ``ids``."""


def eval_stream(corpus: Corpus, data: DataConfig, split: str, tokenizer: TextTokenizer | None = None) -> EvalStream:
    """What `txlab eval` scores of ``split``. Own text (``tokenizer`` reads it) is scored on the characters of the split
    cut at word starts (txlab.data.textdata.split_text), the same characters whatever the tokenizer, encoded as one
    stream (txlab.data.tokenizers.stream_encoding). A folder's split is its file, whose tokens are the cache's; one file's
    cut in characters may differ by a few words from the cut in tokens that training and the token corpus use, which
    stay as they are. A corpus of tokens is scored on its split's tokens, its text spelled back from them."""
    if data.corpus == TEXT_CORPUS:
        if tokenizer is None:
            raise TxlabError("own text is scored with the tokenizer that reads it")
        return text_stream(tokenizer, split_text(data, split))
    ids = corpus.split(split)
    spell = (lambda last: spelled_text(corpus, ids[1 : last + 1])) if corpus.name in CORPORA else (lambda last: corpus.to_text(ids[1 : last + 1]))
    return EvalStream(ids, spell, corpus.token_stream_hash(split))


def text_stream(tokenizer: TextTokenizer, text: str) -> EvalStream:
    """``text`` read by ``tokenizer`` as one stream (txlab.data.tokenizers.stream_encoding), its targets spelling the
    characters from the end of the first token on."""
    enc = stream_encoding(tokenizer, text)
    if enc is None:  # a tokenizer without offsets: the decoded targets stand for the characters
        ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
        return EvalStream(ids, lambda last: tokenizer.decode(ids[1 : last + 1].tolist()), ids_sha256(ids))
    ends = enc.ends
    return EvalStream(enc.ids, lambda last: text[int(ends[0]) : int(ends[last])], ids_sha256(enc.ids))


def text_units(nats: float, text: str) -> dict[str, Any]:
    """Perplexity per word and per byte of ``nats`` scored on ``text`` (txlab.analysis.per_unit), with the denominators:
    its words (runs of non-whitespace: a line end is whitespace, not a word) and its UTF-8 bytes."""
    words, n_bytes = len(cut_words(text)), len(text.encode("utf-8"))
    return {"per_word": unit_perplexity(nats, words), "per_byte": unit_perplexity(nats, n_bytes), "words": words, "bytes": n_bytes}


def scored_units(score: StreamScore, stream: EvalStream) -> dict[str, Any]:
    """:func:`text_units` of what :func:`evaluate` scored on ``stream``: the nats of its targets over the text they spell
    (with reference streams, the text of targets 1..last_target, which holds a few targets left unscored)."""
    return text_units(score.loss * score.tokens, stream.spell(score.last_target))


def _refuse_memory_settings(family: str, given: dict[str, Any]) -> None:
    """Memory settings mean something to Transformer-XL only: refuse them for other families rather
    than report a number as if they had applied (a memory of 0, no memory, is what they all have)."""
    if family == "xl":
        return
    named = [option for option, value in given.items() if value is not None]
    if named:
        what = "a vanilla Transformer reads fixed windows without memory" if family == "vanilla" else f"an {family.upper()} carries its state without attention"
        raise TxlabError(f"{', '.join(named)} set{'s' if len(named) == 1 else ''} Transformer-XL's memory, and {what}: "
                         "leave out the option (--tgt-len sets how much it reads at once)")


@dataclass(frozen=True)
class EvalSettings:
    """How :func:`evaluate_run` scores a run (`txlab eval`'s options). None keeps the run's own evaluation
    setting (its config's ``eval`` section); the values are checked as that section's are."""

    split: str = setting("valid", "Split to score: train, valid or test.")
    tgt_len: int | None = setting(None, "Evaluation segment length (eval.tgt_len).")
    mem_len: int | None = setting(None, "Transformer-XL's evaluation memory (eval.mem_len).")
    clamp_len: int | None = setting(None, "Relative distances above it read as it (eval.clamp_len).")
    same_length: bool | None = setting(None, "Every query attends to the same number of keys (eval.same_length).")
    attn_len: int | None = setting(None, "The paper's attention length: a memory of that many tokens with same_length on, so every "
                                   "query attends exactly that many keys (instead of mem_len and same_length).")
    batch_size: int | None = setting(None, "Evaluation streams (eval.batch_size); each starts without context, so it changes the number.")
    streams: str | None = setting(None, "'exact' (every target once) or 'reference' (the authors' eval.py's targets), eval.streams.")
    precision: str | None = setting(None, "fp32, or bf16 or fp16 autocast (eval.precision).")
    max_tokens: int = setting(0, "Score only the split's first max_tokens targets; 0: all of them.")
    by_role: bool = setting(False, "Synthetic corpora only: also the loss per token role and per copy distance, beside the ideal "
                            "model's (txlab.data.diagnostics.role_summary).")
    corpus_dir: str = setting("", "Read the corpus from this folder instead of the run's data.corpus_dir (a corpus moved since "
                              "training; its vocabulary must still be the run's).")


@dataclass(frozen=True, kw_only=True)
class SplitScore:
    """What every scored split reports: the loss and the paper's headline metric for the corpus's level."""

    loss: float
    """Token-weighted mean NLL, nats per token."""
    ppl: float | None = None
    """Perplexity, on word- and subword-level corpora (None on character-level ones)."""
    bpc: float | None = None
    """Bits per character, on character-level corpora (None otherwise)."""
    tokens: int
    """Targets scored."""
    split: str
    """The split scored."""
    per_word: float | None = None
    """Perplexity per word, exp(nats / words), of the text the scored targets spell (:func:`scored_units`): one scale for
    models with any tokenizers."""
    per_byte: float | None = None
    """Perplexity per UTF-8 byte of the same text, exp(nats / bytes)."""
    words: int | None = None
    """The words of that text (runs of non-whitespace; a line end is whitespace, never a word): per_word's denominator."""
    bytes: int | None = None
    """The UTF-8 bytes of that text: per_byte's denominator."""

    @property
    def metric(self) -> tuple[str, float]:
        """The paper's headline metric: ('bpc', value) on characters, else ('ppl', value)."""
        return ("bpc", self.bpc) if self.bpc is not None else ("ppl", self.ppl)


@dataclass(frozen=True, kw_only=True)
class EvalResult(SplitScore):
    """A trained run scored with the paper's protocol (:func:`evaluate_run`), and where it was recorded."""

    step: int
    """The training step of the checkpoint scored."""
    family: str
    """The model family (xl, vanilla, lstm, qrnn, hf)."""
    tgt_len: int
    """Segment length read at once."""
    mem_len: int
    """Memory carried between segments (Transformer-XL; 0 for the others)."""
    clamp_len: int
    """Relative distances above it read as it (0: no clamp)."""
    same_length: bool
    """Whether every query attended to the same number of keys."""
    batch_size: int
    """Streams the split was cut into."""
    streams: str
    """How it was cut: 'exact' or 'reference' (EvalConfig.streams)."""
    precision: str
    """fp32, bf16 or fp16 (autocast)."""
    tf32: bool
    """Whether TF32 matmuls were on."""
    max_tokens: int
    """The targets scored were the split's first max_tokens (0: the whole split)."""
    token_stream_sha256: str
    """The hash of the split's token stream, so that records of different text are never compared."""
    by_role: dict[str, Any] | None = None
    """With ``EvalSettings.by_role``: the loss by token role and copy distance (txlab.data.diagnostics.role_summary)."""
    path: Path
    """The JSON record written (:meth:`as_record`)."""

    def as_record(self) -> dict[str, Any]:
        """The JSON record in ``RUN/eval/`` (everything but its own path), in the order its keys have always had."""
        name, value = self.metric
        record = {"loss": self.loss, name: value, "tokens": self.tokens, "split": self.split, "step": self.step, "family": self.family,
                  "tgt_len": self.tgt_len, "mem_len": self.mem_len, "clamp_len": self.clamp_len, "same_length": self.same_length,
                  "batch_size": self.batch_size, "streams": self.streams, "precision": self.precision, "tf32": self.tf32,
                  "max_tokens": self.max_tokens, "token_stream_sha256": self.token_stream_sha256, "per_word": self.per_word, "per_byte": self.per_byte,
                  "words": self.words, "bytes": self.bytes}
        if self.by_role is not None:
            record["by_role"] = self.by_role
        return record


def evaluate_run(
    run_dir: Path, settings: EvalSettings | None = None, *, device: str = "cpu", progress: bool = True, record_path: Path | None = None,
) -> EvalResult:
    """Score a trained run on a split with the paper's protocol and record it in the run directory.

    ``settings`` (:class:`EvalSettings`) say what differs from the run's own evaluation settings; default:
    none does, on the valid split. The record goes to ``record_path``, by default
    ``run_dir/eval/<split>-tgt<T>-mem<M>-clamp<C>[-same]-b<B>[-reference][-bf16|-fp16][-n<N>][-roles].json``:
    every setting that changes the number is in the name (the batch size too: streams cut the split into
    pieces that each start without context), so records of other settings never overwrite each other.
    """
    check_device(device)
    settings = settings or EvalSettings()
    split, max_tokens, mem_len, same_length = settings.split, settings.max_tokens, settings.mem_len, settings.same_length
    ckpt = load_checkpoint(run_dir, map_location=device)
    cfg = ckpt.config
    _refuse_memory_settings(cfg.model.family, {"--mem-len": mem_len or None, "--attn-len": settings.attn_len, "--same-length": same_length,
                                               "--clamp-len": settings.clamp_len})
    check_corpus_dir_applies(cfg.data.corpus, settings.corpus_dir)
    data_cfg = update_dataclass(cfg.data, {"corpus_dir": settings.corpus_dir}) if settings.corpus_dir else cfg.data
    corpus = load_corpus_for_model(data_cfg, ckpt.meta["vocab_hash"], ckpt.vocab, split, str(run_dir), progress=progress)
    if settings.attn_len is not None:
        NON_NEGATIVE.check(settings.attn_len, "--attn-len")
        if mem_len is not None and mem_len != settings.attn_len:
            raise TxlabError("give either --attn-len or --mem-len, not both")
        mem_len, same_length = settings.attn_len, True
    changes = {k: v for k, v in {"tgt_len": settings.tgt_len, "mem_len": mem_len, "clamp_len": settings.clamp_len,
                                 "same_length": same_length, "batch_size": settings.batch_size, "streams": settings.streams, "split": split,
                                 "precision": settings.precision}.items()
               if v is not None}
    eval_cfg = update_dataclass(cfg.eval, changes, prefix="eval.")
    check_precision(eval_cfg.precision, device, cfg.model.family, "eval.precision")
    seg_len, context = evaluation_context(cfg.model, eval_cfg)
    if ckpt.model.max_context is not None and seg_len > ckpt.model.max_context:
        raise TxlabError(f"this model reads at most {ckpt.model.max_context} tokens at once; --tgt-len {seg_len} is too long")
    own_text = trained_tokenizer(data_cfg, ckpt.meta["vocab_hash"], str(run_dir)) if data_cfg.corpus == TEXT_CORPUS else None
    stream = eval_stream(corpus, data_cfg, split, own_text)
    n_targets = len(stream.ids) - 1
    n_targets = min(max_tokens, n_targets) if max_tokens > 0 else n_targets
    if eval_cfg.batch_size > n_targets:
        raise TxlabError(f"eval.batch_size {eval_cfg.batch_size:,} is more streams than the {n_targets:,} targets scored: "
                         "every stream needs at least one target (and without context it scores them blind)")
    stream_len = -(-n_targets // eval_cfg.batch_size)  # no segment or memory holds more than its stream
    check_fits(cfg.model, eval_cfg.batch_size, min(seg_len, stream_len), min(context.mem_len, stream_len), training=False, device=device,
               what="this evaluation (--batch-size, --tgt-len, --mem-len/--attn-len)", precision=eval_cfg.precision)
    check_position_table(cfg.model, seg_len + context.mem_len, device=device, what="this evaluation (--mem-len/--attn-len)")
    if settings.by_role and corpus.truth is None:
        raise TxlabError(f"--by-role needs a synthetic corpus (it knows each token's role); {corpus.name} is not one")
    score = evaluate(ckpt.model, stream.ids, seg_len, context, eval_cfg.batch_size, max_tokens, progress=progress,
                     token_losses=settings.by_role, reference_streams=eval_cfg.streams == "reference", precision=eval_cfg.precision)
    if record_path is None:
        name = f"{split}-tgt{seg_len}-mem{context.mem_len}-clamp{context.clamp_len}{'-same' if context.same_length else ''}-b{eval_cfg.batch_size}"
        if eval_cfg.streams == "reference":  # scores other targets: not the same number
            name += "-reference"
        if eval_cfg.precision != "fp32":
            name += f"-{eval_cfg.precision}"
        record_path = Path(run_dir) / "eval" / f"{name}{f'-n{max_tokens}' if max_tokens > 0 else ''}{'-roles' if settings.by_role else ''}.json"
    result = EvalResult(
        **metric_summary(score.loss, corpus.level), **scored_units(score, stream), tokens=score.tokens, split=split, step=ckpt.meta["step"], family=cfg.model.family,
        tgt_len=seg_len, mem_len=context.mem_len, clamp_len=context.clamp_len, same_length=context.same_length,
        batch_size=eval_cfg.batch_size, streams=eval_cfg.streams, precision=eval_cfg.precision, tf32=score.tf32, max_tokens=max_tokens,
        token_stream_sha256=stream.sha256, by_role=role_summary(score.nll, corpus.truth[split]) if settings.by_role else None, path=Path(record_path),
    )
    write_json_atomic(record_path, result.as_record())
    return result


@dataclass(frozen=True, kw_only=True)
class CheckpointEvalResult(SplitScore):
    """A Hugging Face checkpoint scored on a corpus (:func:`evaluate_checkpoint`), and where it was recorded."""

    model: str
    """The checkpoint as given (``hf:PATH_OR_HUB_ID``)."""
    tgt_len: int
    """Segment length read at once."""
    mem_len: int
    """Tokens of context each segment started from (0: disjoint windows)."""
    batch_size: int
    """Streams the split was cut into."""
    max_tokens: int
    """The targets scored were the split's first max_tokens (0: the whole split)."""
    precision: str
    """The weights' and the computation's precision."""
    tf32: bool
    """Whether TF32 matmuls were on."""
    corpus: str
    """The corpus's name."""
    tokenizer_id: str
    """The tokenizer that made the token stream."""
    token_stream_sha256: str
    """The hash of the split's token stream."""
    path: Path
    """The JSON record written (:meth:`as_record`)."""

    def as_record(self) -> dict[str, Any]:
        """The JSON record under ``<home>/results/eval/`` (everything but its own path)."""
        name, value = self.metric
        return {"loss": self.loss, name: value, "tokens": self.tokens, "split": self.split, "model": self.model, "family": "hf",
                "tgt_len": self.tgt_len, "mem_len": self.mem_len, "batch_size": self.batch_size, "max_tokens": self.max_tokens,
                "precision": self.precision, "tf32": self.tf32, "corpus": self.corpus, "tokenizer_id": self.tokenizer_id,
                "token_stream_sha256": self.token_stream_sha256, "per_word": self.per_word, "per_byte": self.per_byte, "words": self.words,
                "bytes": self.bytes}


def evaluate_checkpoint(
    spec: str,
    data: DataConfig,
    *,
    split: str = "valid",
    tgt_len: int | None = None,
    mem_len: int = 0,
    batch_size: int = 1,
    max_tokens: int = 0,
    device: str = "cpu",
    precision: str = "fp32",
    progress: bool = True,
    record_path: Path | None = None,
) -> CheckpointEvalResult:
    """Score a Hugging Face checkpoint (``hf:PATH_OR_HUB_ID``) on a corpus, every target once.

    The split is read in segments of ``tgt_len`` tokens (default: the model's position table or trained
    length, else 512), each from a fresh start after the ``mem_len`` tokens before it (default 0: disjoint
    windows, as lm-evaluation-harness scores; ``mem_len`` > 0 gives every target at least that much
    context, the strided protocol). ``precision``: the weights' and the computation's (txlab.models.hf.load_causal_lm).
    The record goes to ``<home>/results/eval/<name>-<fingerprint>/``.
    """
    from txlab.workspace import resolve

    check_device(device)
    model = hf.load_causal_lm(spec, device=device, precision=precision)
    source = hf.hf_source(spec)
    corpus = load_corpus(data, progress=progress)
    hf.check_corpus(source, Path(source.rstrip("/")).name, corpus)
    own_text = trained_tokenizer(data, corpus.vocab.sha256, spec) if data.corpus == TEXT_CORPUS else None
    stream = eval_stream(corpus, data, split, own_text)
    seg_len = tgt_len or model.max_context or model.trained_positions or 512
    NON_NEGATIVE.check(mem_len, "--mem-len")
    if model.max_context is not None and seg_len + mem_len > model.max_context:
        raise TxlabError(f"this model reads at most {model.max_context} tokens at once (its position table): "
                         f"--tgt-len {seg_len} with --mem-len {mem_len} is too long")
    context = Context(mem_len=mem_len)
    score = evaluate(model, stream.ids, seg_len, context, batch_size, max_tokens, progress=progress, precision=precision)
    if record_path is None:
        folder = resolve("results/eval") / f"{Path(source.rstrip('/')).name}-{hf.fingerprint(source)}"
        record_path = folder / (f"{corpus.name}-{split}-tgt{seg_len}-mem{mem_len}-b{batch_size}{'' if precision == 'fp32' else f'-{precision}'}"
                                f"{f'-n{max_tokens}' if max_tokens > 0 else ''}.json")
    result = CheckpointEvalResult(
        **metric_summary(score.loss, corpus.level), **scored_units(score, stream), tokens=score.tokens, split=split, model=spec, tgt_len=seg_len, mem_len=mem_len,
        batch_size=batch_size, max_tokens=max_tokens, precision=precision, tf32=score.tf32, corpus=corpus.name,
        tokenizer_id=corpus.tokenizer_id, token_stream_sha256=stream.sha256, path=Path(record_path),
    )
    write_json_atomic(record_path, result.as_record())
    return result
