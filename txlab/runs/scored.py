"""A model ready to score, as one value: what every reader of context (losses in tokens and in words, perplexity, RECL
groups) is given, built once by :func:`load_model` from a txlab run, a checkpoint folder or ``hf:PATH_OR_HUB_ID``.

Nothing is hung on the ``nn.Module``: how the model reads context (its evaluation segment and memory, its precision),
the tokenizer it reads text with, what names it (``identity``, which keys its loss tables on disk, so a table is never
finished by another model) and where its tables are kept travel together in a :class:`ScoredModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from txlab.data.corpus import load_corpus
from txlab.data.registry import CORPORA, TEXT_CORPUS
from txlab.data.textdata import trained_tokenizer
from txlab.data.tokenizers import CorpusTokenizer, TextTokenizer, load_hf_tokenizer
from txlab.errors import TxlabError
from txlab.models import hf
from txlab.models.compiled import check_compile
from txlab.models.interface import Context, LanguageModel
from txlab.precision import check_precision
from txlab.runs.checkpoint import has_checkpoint, load_checkpoint, read_meta, saved_config, saved_vocab
from txlab.runs.evaluate import evaluation_context


@dataclass(frozen=True)
class ScoredModel:
    """A model as it is scored: the module, how it reads context, how it reads text, and what names it."""

    model: LanguageModel
    name: str
    """How tables and figures name it (a group's label; a run's or checkpoint's folder name)."""
    tgt_len: int | None
    """Evaluation segment length for a model that carries memory between chunks; None: a context is one segment."""
    context: Context
    """The memory settings it scores with (a run's evaluation settings; a checkpoint reads from a fresh start)."""
    precision: str = "fp32"
    """fp32, or bf16 or fp16 autocast (txlab.precision)."""
    compile: str = "auto"
    """Whether its layers run compiled while it is scored: auto (on a CUDA GPU), on or off (txlab.models.compiled)."""
    tokenizer: TextTokenizer | None = None
    """How it reads text, with character offsets (None: it reads only the ids it is given)."""
    identity: dict[str, Any] = field(default_factory=dict)
    """What names the model in its tables' records, checked on resume: a run's ``model_step``, a checkpoint's ``model``
    fingerprint."""
    home: Path | None = None
    """Where its loss tables are kept (``home/losses/``): a run directory, a group's folder for a checkpoint; None:
    collected in memory only."""
    run_dir: Path | None = None
    """The txlab run it was loaded from, whose tokenizer :meth:`reading_text` loads (a registry corpus's may need the
    corpus: loaded only when text is read)."""

    @property
    def max_context(self) -> int | None:
        return self.model.max_context

    @property
    def chunk_len(self) -> int | None:
        """The chunk it reads a context in: its segment where it carries memory, else the whole context at once."""
        return self.tgt_len if self.context.mem_len > 0 else None

    def reading_text(self) -> ScoredModel:
        """This model with the tokenizer it reads text with: its own, or its run's (:func:`run_tokenizer`); refused, with
        the reason, where it has none."""
        if self.tokenizer is not None:
            return self
        if self.run_dir is not None:
            return replace(self, tokenizer=run_tokenizer(self.run_dir))
        raise TxlabError(f"{self.name} brings no tokenizer: give it one (txlab.word_context_losses(..., tokenizers=[...])), or load it "
                         "with txlab.load_model from a run, or from a checkpoint folder that holds its tokenizer")

    def tokenizer_record(self) -> dict[str, Any] | None:
        """What a record says of its tokenizer: kind, vocabulary size and tokenizer_id (a hash of the tokenization:
        the vocabulary, and for a Hugging Face tokenizer its whole pipeline); None without one."""
        t = self.tokenizer
        if t is None:
            return None
        return {"kind": t.kind, "vocab_size": len(t.vocab), "tokenizer_id": t.tokenizer_id}


def as_scored(model: ScoredModel | LanguageModel, name: str = "model") -> ScoredModel:
    """``model`` as a :class:`ScoredModel`: one already is; a bare LanguageModel (built by hand) reads with its own
    memory settings, one segment per context, in fp32, and brings no tokenizer."""
    if isinstance(model, ScoredModel):
        return model
    if not isinstance(model, LanguageModel):
        raise TxlabError(f"expected a model from txlab.load_model (or a txlab LanguageModel), got a {type(model).__name__}")
    return ScoredModel(model, name, None, model.context)


def load_model(spec: str | Path, *, device: str = "cpu", precision: str | None = None, name: str | None = None,
               home: str | Path | None = None, compile: str = "auto") -> ScoredModel:
    """A model ready to score: ``hf:PATH_OR_HUB_ID`` (any transformers causal LM) or a txlab run directory.

    A run reads context with its evaluation segment and memory settings, in its ``eval.precision`` unless
    ``precision`` is given, and text with the tokenizer it trained with (:func:`run_tokenizer`, loaded when text is read);
    its tables are kept in the run directory. A Hugging Face model reads every context from a fresh start
    (``Context(mem_len=0)``), its weights loaded in ``precision`` (default fp32), with the tokenizer its folder brings
    (checked to be its own: :func:`txlab.models.hf.check_tokenizer`); its tables are kept in ``home`` when given.
    ``name``: how tables name it (default the folder's name). ``compile``: whether a Hugging Face model's layers run
    compiled while it is scored (txlab.models.compiled: ``auto``, the default, compiles on a CUDA GPU)."""
    check_compile(compile)
    if hf.is_hf_spec(str(spec)):
        model = hf.load_causal_lm(str(spec), device=device, precision=precision or "fp32")
        model.set_context(Context(mem_len=0))
        tokenizer = None
        if hf.load_tokenizer(model.source) is not None:
            tokenizer = load_hf_tokenizer(model.source)
            hf.check_tokenizer(model.source, tokenizer, model.vocab_size)
        return ScoredModel(model, name or Path(model.source).name, None, Context(mem_len=0), precision or "fp32", compile, tokenizer,
                           {"model": hf.fingerprint(model.source)}, None if home is None else Path(home))
    run_dir = Path(spec)
    if not has_checkpoint(run_dir):
        raise TxlabError(f"{spec} is neither hf:PATH_OR_HUB_ID nor a run directory with a checkpoint")
    ckpt = load_checkpoint(run_dir, map_location=device)
    tgt_len, context = evaluation_context(ckpt.config.model, ckpt.config.eval)
    model = ckpt.model.eval()
    model.set_context(context)
    chosen = precision or ckpt.config.eval.precision
    check_precision(chosen, device, ckpt.config.model.family)
    return ScoredModel(model, name or run_dir.name, tgt_len, context, chosen, compile, None, {"model_step": ckpt.meta["step"]},
                       Path(home) if home is not None else run_dir, run_dir)


def run_tokenizer(run_dir: Path) -> TextTokenizer:
    """The tokenizer a txlab run reads text with: for a run trained on own text its ``data.tokenizer`` (char or word
    with the run's vocabulary, or its hf: tokenizer); for a run trained on a registry corpus a :class:`CorpusTokenizer`
    of the corpus's unit (words, characters, or enwik8's bytes) with the run's vocabulary: the one its checkpoint
    carries, else its corpus's, read from the local files or their cache (nothing is downloaded). A synthetic corpus's
    tokens are symbols, not text: refused."""
    cfg, meta = saved_config(run_dir).data, read_meta(run_dir)
    if cfg.corpus == TEXT_CORPUS:
        return trained_tokenizer(cfg, meta["vocab_hash"], str(run_dir))
    if cfg.corpus not in CORPORA:
        raise TxlabError(f"{run_dir} was trained on the synthetic corpus {cfg.corpus!r}, whose tokens are symbols, not text: in words every "
                         "txlab member reads text, so score this run in tokens, or train it on text (--text FILE, e.g. the corpus "
                         "rendered as words by studies/words_texts.py synthetic)")
    spec = CORPORA[cfg.corpus]
    vocab = saved_vocab(run_dir)
    if vocab is None:
        try:
            vocab = load_corpus(cfg, progress=False).vocab
        except TxlabError as err:
            raise TxlabError(f"{run_dir} reads text with the vocabulary of {cfg.corpus}, which is not here: {err}") from None
    if vocab.sha256 != meta["vocab_hash"]:
        raise TxlabError(f"{run_dir} was trained on another vocabulary than corpus {cfg.corpus} has now")
    if spec.level == "word":
        return CorpusTokenizer("word", vocab, spec.line_end)
    return CorpusTokenizer("byte" if spec.byte_symbols else "char", vocab)
