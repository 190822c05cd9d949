"""What a group is scored on, as a type: its corpus in tokens (:class:`TokenSource`) or a text in words
(:class:`WordSource`). Each loads once, checks before any model runs, collects one member into a table kept under its
run folder (resumable, reused by any group that needs it) and groups the members' tables; the driver
(txlab.drivers.recl.run) asks none of them which unit it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from txlab.config import DataConfig
from txlab.data.corpus import Corpus, load_corpus, split_text_of
from txlab.data.registry import EOS, TEXT_CORPUS
from txlab.data.tokenizers import load_hf_tokenizer, parse_tokenizer, text_tokenizer
from txlab.data.vocab import Vocab
from txlab.data.words import Words, check_spaced, cut_words
from txlab.drivers.recl.groups import Group, Member, group_data, word_text
from txlab.drivers.recl.settings import ReclSettings
from txlab.errors import TxlabError
from txlab.fileio import write_json_atomic
from txlab.measure.collection import Collection
from txlab.measure.losses import GroupLosses, LossTable, collect_model_losses, collect_run_losses, group_losses, sample_blocks
from txlab.measure.words import WordGroup, WordLosses, collect_word_losses, drawn_blocks, word_group
from txlab.models import hf
from txlab.runs.checkpoint import has_checkpoint
from txlab.runs.launch import Task, check_jobs, run_jobs
from txlab.runs.scored import ScoredModel, load_model, run_tokenizer


def load_member(member: Member, settings: ReclSettings) -> ScoredModel:
    """A member ready to score (txlab.runs.scored.load_model), named by its label, its tables kept in its run folder:
    a txlab run in its evaluation settings and precision, a Hugging Face checkpoint in the group's precision, its record
    (member.json) written beside its tables."""
    if not member.source:
        return load_model(member.run_dir, device=settings.device, name=member.label, compile=settings.compile)
    scored = load_model(f"hf:{member.source}", device=settings.device, precision=settings.precision, name=member.label, home=member.run_dir,
                        compile=settings.compile)
    write_json_atomic(member.run_dir / "member.json", {"kind": "hf", **hf.describe(scored.model), "precision": settings.precision})
    return scored


@dataclass(frozen=True)
class TokenSource:
    """A group's corpus, whose split every member reads in the same token ids."""

    corpus: Corpus
    collection: Collection

    unit = "token"

    @property
    def sha256(self) -> str:
        return self.corpus.token_stream_hash(self.collection.split)

    @property
    def name(self) -> str:
        return self.corpus.name

    @property
    def char_level(self) -> bool:
        return self.corpus.level == "char"

    @property
    def training_corpus(self) -> Corpus | None:
        """What the group's preset members train on (read once for all of them)."""
        return self.corpus

    def record_fields(self) -> dict[str, Any]:
        """What names the token stream in a group's records."""
        return {"token_stream_sha256": self.sha256}

    def describe(self) -> str:
        c = self.collection
        strided = f", strided: {c.stride_words()}, each context in [c, c + s)" if c.stride is not None else ""
        return (f"{c.token_steps() / 1e6:.1f}M token-steps each ({c.blocks} blocks x {c.block_len} targets, contexts {c.grid[0]}..{c.grid[-1]}"
                f"{strided})")

    def collect(self, member: Member, settings: ReclSettings, progress: bool) -> LossTable:
        """One member's table (resumable): a txlab run through its own record, a Hugging Face checkpoint read from a
        fresh start for every window (its context is exactly the c tokens)."""
        c = self.collection
        if not member.source:
            return collect_run_losses(member.run_dir, c, batch_size=settings.batch_size, device=settings.device, progress=progress,
                                      corpus=self.corpus)
        return collect_model_losses(load_member(member, settings), self.corpus.split(c.split), self.sha256, c, batch_size=settings.batch_size,
                                    progress=progress)

    def collect_as_jobs(self, members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None], jobs: Path) -> None:
        """Every txlab run's collection as a scheduler job of its own, waited for (the group then loads the tables); a
        failed one stops the group with its log."""
        submitted = time.time()
        tasks = [Task(m.label, collect_job, (str(m.run_dir), self.collection, settings.batch_size, settings.device),
                      partial(blocks_written, m, submitted)) for m in members if not m.source]
        check_jobs(run_jobs(tasks, settings.slurm, jobs, "txlab-losses", echo), "loss collection")

    def group(self, tables: Sequence[LossTable], members: Sequence[Member]) -> tuple[GroupLosses, WordGroup | None]:
        return group_losses(tables, [m.run_dir for m in members]), None

    def target_texts(self, targets: np.ndarray) -> list[str]:
        return [self.corpus.to_text([i]) for i in self.corpus.split(self.collection.split)[targets]]

    def tokens_per_word(self, member: Member) -> float:
        """A context of c counts tokens already: one per unit."""
        return 1.0

    def unigram_units(self) -> tuple[np.ndarray, np.ndarray]:
        """(the training split's token ids, the scored split's): what the unigram baseline is fitted on and scored on
        (txlab.analysis.per_unit.unigram_perplexity)."""
        return self.corpus.split("train"), self.corpus.split(self.collection.split)

    def oracle(self, targets: np.ndarray) -> np.ndarray | None:
        """[G, T] losses of the ideal model (it sees exactly c tokens) on the group's targets, on a synthetic corpus;
        None otherwise."""
        if self.corpus.truth is None:
            return None
        truth = self.corpus.truth[self.collection.split]
        return np.stack([truth.oracle_loss(c)[targets] for c in self.collection.grid])


def collect_job(run_dir: str, collection: Collection, batch_size: int, device: str) -> str:
    """Collect one member's losses as a scheduler job (blocks already written are skipped); returns their folder."""
    return str(collect_run_losses(Path(run_dir), collection, batch_size=batch_size, device=device, progress=True).path)


def word_collect_job(member: Member, settings: ReclSettings, text: str, collection: Collection) -> str:
    """Collect one member's table in words as a scheduler job (blocks already kept are skipped); returns its folder."""
    return str(collect_word_losses(load_member(member, settings), cut_words(text), collection, batch_size=settings.batch_size, progress=True).path)


def blocks_written(member: Member, since: float) -> str:
    """What a member's collection job left, for its line in the jobs' summary: the loss blocks written since ``since``."""
    blocks = [f for f in (member.run_dir / "losses").glob("*/*.npy") if f.stat().st_mtime >= since]
    return f"{len(blocks)} loss blocks written"


@dataclass(frozen=True)
class WordSource:
    """A text in words, which every member reads with its own tokenizer."""

    words: Words
    collection: Collection
    data: DataConfig
    """The corpus the text is a split of (txlab.drivers.recl.groups.word_text): the unigram baseline reads its training split."""

    unit = "word"
    name = ""
    """Records name a text in words by its sha256 (and the group's name), not by a corpus."""
    training_corpus = None
    """Preset members train on their own recipes' data (a text in words is only read)."""
    char_level = False
    """In words the unit is the word, whatever each member's tokenizer."""

    @property
    def sha256(self) -> str:
        return self.words.sha256

    def record_fields(self) -> dict[str, Any]:
        """What names the text in a group's records."""
        return {"unit": "word", "text_sha256": self.sha256}

    def describe(self) -> str:
        c = self.collection
        return f"in words ({c.blocks} blocks x {c.block_len} words, contexts {c.grid[0]}..{c.grid[-1]} words)"

    def collect(self, member: Member, settings: ReclSettings, progress: bool) -> WordLosses:
        """One member's table in words (resumable, kept in its run folder): every word drawn it scores exactly."""
        return collect_word_losses(load_member(member, settings), self.words, self.collection, batch_size=settings.batch_size,
                                   progress=progress)

    def collect_as_jobs(self, members: Sequence[Member], settings: ReclSettings, echo: Callable[[str], None], jobs: Path) -> None:
        """Every member's table in words as a scheduler job of its own (the job reads the text with the member's own
        tokenizer and keeps the table in its run folder), waited for; the group then reads the tables kept. A failed
        job stops the group with its log."""
        submitted = time.time()
        tasks = [Task(m.label, word_collect_job, (m, settings, self.words.text, self.collection), partial(blocks_written, m, submitted))
                 for m in members]
        check_jobs(run_jobs(tasks, settings.slurm, jobs, "txlab-word-losses", echo), "loss collection in words")

    def group(self, tables: Sequence[WordLosses], members: Sequence[Member]) -> tuple[GroupLosses, WordGroup]:
        words = word_group(tables, self.words, self.collection)
        labels = [m.label for m in members]
        return GroupLosses(labels, words.losses, words.grid, words.targets, words.block_len, self.sha256, dict.fromkeys(labels),
                           [m.run_dir for m in members], words.placebo), words

    def target_texts(self, targets: np.ndarray) -> list[str]:
        return [self.words.word(int(w)) for w in targets]

    def tokens_per_word(self, member: Member) -> float | None:
        """The member's tokens per word on the words it reads (each drawn block with its longest context), from one
        tokenization of them by its tokenizer: a checkpoint's, a trained run's, or the one a preset's recipe will train
        on own text with (an hf: tokenizer as it is; characters and words counted by their rule, whatever the
        vocabulary). None for a preset not trained yet on a registry corpus."""
        words, c = self.words, self.collection
        spans = [words.text[int(words.starts[s - c.grid[-1]]) : int(words.ends[s + c.block_len - 1])] for s in drawn_blocks(words, c).tolist()]
        if member.source:
            tokenizer = load_hf_tokenizer(member.source)
        elif has_checkpoint(member.run_dir):
            tokenizer = run_tokenizer(member.run_dir)
        elif member.config.data.corpus == TEXT_CORPUS:
            tokenizer = text_tokenizer(parse_tokenizer(member.config.data.tokenizer))
            if tokenizer.kind != "hf":  # a vocabulary of the spans' own symbols: every character, or every word, is one token
                tokenizer.vocab = Vocab(sorted(set("".join(spans))) if tokenizer.kind == "char" else [EOS, *sorted({w for s in spans for w in s.split()} - {EOS})])
        else:
            return None
        return sum(len(encoding.ids) for encoding in tokenizer.offsets(spans)) / (len(spans) * (c.grid[-1] + c.block_len))

    def unigram_units(self) -> tuple[list[str], list[str]]:
        """(the training split's words, the scored split's): what the unigram baseline is fitted on and scored on
        (txlab.analysis.per_unit.unigram_perplexity); the targets are word indices of the scored split."""
        return split_text_of(self.data, "train").split(), self.words.text.split()

    def oracle(self, targets: np.ndarray) -> None:
        return None


Source = TokenSource | WordSource


def group_source(group: Group, progress: bool) -> Source:
    """What a group is scored on, loaded once (every seed reads it) and checked before any model runs: in tokens its
    corpus (every Hugging Face member can read it, the split holds the targets); in words the text of its split
    (txlab.data.corpus.split_text_of: own text, or a registry corpus's recovered), which holds the target blocks after
    the longest context."""
    resolved, c = group.resolved[group.seeds[0]], group.collection
    if c.unit == "word":
        for m in resolved:  # a checkpoint's tokenizer is its own before any text is read with it
            if m.source:
                hf.check_tokenizer(m.source, load_hf_tokenizer(m.source), int(hf.saved_config(m.source).get("vocab_size") or 0))
        data = word_text(resolved, group.settings)
        words = cut_words(split_text_of(data, c.split, progress))
        check_spaced(words)
        drawn_blocks(words, c)  # the text holds the blocks after the longest context, or a refusal in words
        return WordSource(words, c, data)
    corpus = load_corpus(group_data(resolved, group.settings), progress=progress)
    check_hf_members(resolved, corpus)
    sample_blocks(len(corpus.split(c.split)), c.blocks, c.block_len, c.grid[-1], c.seed)
    return TokenSource(corpus, c)


def check_hf_members(members: Sequence[Member], corpus: Corpus) -> None:
    """Before any model runs: every Hugging Face member can read the group's corpus (txlab.models.hf.check_corpus);
    where one cannot, the refusal names the group's way out, words."""
    for m in members:
        if m.source:
            try:
                hf.check_corpus(m.source, m.label, corpus)
            except TxlabError as error:
                raise TxlabError(f"{error}; or score members with different tokenizers on shared words of one text: --unit word "
                                 "--text FILE") from None
