"""What a scored group leaves: :class:`GroupResult` (recl.json), :class:`SeedsResult` (table8-seeds.json), the
figures drawn from the tables in words (:func:`draw_figures`, also what ``--redraw`` does), and the ``--json``
summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from txlab.analysis import recl, table8
from txlab.data import registry
from txlab.data.registry import CORPORA
from txlab.data.synthetic import VARIANTS as SYNTHETIC
from txlab.drivers.recl.groups import MIXED, display_names
from txlab.drivers.recl.settings import ReclSettings
from txlab.errors import TxlabError
from txlab.fileio import read_json
from txlab.measure.collection import Collection
from txlab.measure.words import WordGroup
from txlab.presets import PRESETS
from txlab.workspace import resolve

if TYPE_CHECKING:
    from txlab.analysis.figures import ModelLegend

FIGURE3_R = 0.1
"""The paper's Figure 3 shows the gains at r = 0.1."""
"""The size of a group whose members differ in size, or have none (a Hugging Face checkpoint)."""
RELATIVE_TITLE = "RECL is relative to the group: adding a member can move another's reading"
"""What Figure 3's and the seeds figure's titles say of reading a RECL (txlab.analysis.table8.RELATIVE_NOTE)."""


@dataclass(frozen=True)
class GroupResult:
    """One group's RECL as `txlab recl` wrote it (its fields but ``markdown`` and ``files`` are recl.json's)."""

    group: str
    members: list[str]
    run_dirs: list[str]
    settings: ReclSettings
    grid: list[int]
    n_targets: int
    source_fields: dict[str, Any]
    """What names what the group was scored on: ``token_stream_sha256``, or in words ``unit`` and ``text_sha256`` (the
    sha256 of the split's text)."""
    rows: list[table8.Table8Row]
    """Table 8's rows (txlab.analysis.table8.recl_rows, the placebo-aware RECL and the ideal model's where there are)."""
    markdown: str
    files: list[Path]
    train_seed: int | None = None
    """The training seed of the preset members' runs, for one seed's group of ``settings.train_seeds``."""
    words: dict[str, Any] | None = None
    """In words (:func:`word_record`): each member's coverage, truncated contexts, method and perplexity per word and
    per byte; None in tokens."""
    corpus: str = ""
    """The corpus every member was scored on (its name in txlab's registry, or the own text's)."""
    model_order: list[str] = field(default_factory=list)
    """The study's models in the order figures colour them (txlab.drivers.recl.groups.Group.model_order)."""
    strided: dict[str, Any] | None = None
    """With a stride (:func:`strided_record`): the stride, s at each c and the contexts' range; None for exact contexts."""
    extrapolation: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Member -> {trained_positions, contexts}: the grid's contexts (in the group's unit) past the positions it was
    trained on (txlab.drivers.recl.plan.extrapolation); only members that have some."""
    unigram: dict[str, Any] | None = None
    """The unigram baseline and each member's verdict (txlab.analysis.table8.UnigramCheck.record); None where none was fitted."""
    size: str = ""
    """The members' size (txlab.drivers.recl.groups.size_label): their one preset size, or 'mixed'."""
    placebo_offsets: list[int] | None = None
    """Where each target block read its placebo's far spans, in the group's units (txlab.measure.reading.placebo_offsets:
    every member's table reads the same); None without placebo losses. A record without it predates per-block offsets."""

    def record(self) -> dict[str, Any]:
        """What recl.json holds (``train_seed`` only in one seed's group, ``words`` only in words)."""
        seed = {} if self.train_seed is None else {"train_seed": self.train_seed}
        optional = {key: value for key, value in (("words", self.words), ("strided", self.strided), ("unigram", self.unigram),
                                                   ("extrapolation", self.extrapolation or None), ("placebo_offsets", self.placebo_offsets))
                    if value is not None}
        return {"group": self.group, **seed, "members": self.members, "run_dirs": self.run_dirs, "settings": asdict(self.settings),
                "size": self.size, "corpus": self.corpus, "grid": self.grid, "n_targets": self.n_targets, **self.source_fields,
                "model_order": self.model_order, "rows": [row.record() for row in self.rows], **optional}


def word_record(table: WordGroup) -> dict[str, Any]:
    """What recl.json says of a group in words: the shared targets (word indices of the split's text), and per member
    the words it scores exactly (of those drawn), the contexts read as their nearest tokens (per c), its method, the
    tokenizer it read the text with (kind, vocabulary size, tokenizer_id), and its perplexity per word and per byte (per c)."""
    per_word, per_byte = table.word_perplexity(), table.byte_perplexity()
    return {"drawn": table.drawn, "shared": table.shared, "kept": len(table.targets), "kept_per_block": table.block_len,
            "targets": table.targets.tolist(),
            "members": {name: {"covered": table.covered[name], "truncated": table.truncated[i].tolist(), "method": table.methods[i],
                               "tokenizer": table.tokenizers[i], "word_perplexity": per_word[i].tolist(), "byte_perplexity": per_byte[i].tolist()}
                        for i, name in enumerate(table.members)}}


def strided_record(collection: Collection) -> dict[str, Any] | None:
    """What recl.json says of a strided collection: the stride as given, s at each c of the grid, in words; None
    for exact contexts."""
    if collection.stride is None:
        return None
    return {"stride": collection.stride, "s": [collection.stride_at(c) for c in collection.grid], "in_words": collection.stride_words(),
            "contexts": "each target's context lies in [c, c + s): c + (t - t_first) tokens, t_first the first target of its run of s"}


def extrapolation_note(beyond: dict[str, dict[str, Any]], unit: str) -> str:
    """Table 8's Markdown note naming the contexts read past a member's trained positions; '' when none is."""
    if not beyond:
        return ""
    parts = "; ".join(f"{name} past {x['trained_positions']:,} tokens: c = {', '.join(f'{c:,}' for c in x['contexts'])} {unit}s"
                      for name, x in beyond.items())
    return (f"\nExtrapolation: some contexts lie past the positions a member was trained on ({parts}); its losses there measure how "
            "it extrapolates, not how it uses context.\n")


def strided_note(strided: dict[str, Any]) -> str:
    """Table 8's Markdown note for a strided collection, from recl.json's ``strided`` (:func:`strided_record`)."""
    return (f"\nContexts are strided ({strided['in_words']}): the targets were read in runs of s, each run once from c tokens before "
            "its first target, so a target's context lies in [c, c + s), not exactly c. The gains and RECL are those of these "
            "contexts: slightly longer than c, more so for the later targets of a run.\n")


def strided_title(record: dict[str, Any]) -> str:
    """What a figure title adds for a strided group: ', contexts strided (s = 512 tokens): each in [c, c + s)'; '' otherwise."""
    strided = record.get("strided")
    return f"\ncontexts strided ({strided['in_words']}): each in [c, c + s)" if strided else ""


def words_note(words: dict[str, Any]) -> str:
    """Table 8's Markdown note in words, from recl.json's ``words`` (:func:`word_record`): what c and the targets
    count, and each member's coverage."""
    members = words["members"]
    covered = ", ".join(f"{name} {m['covered']:,}" for name, m in members.items())
    cut = [f"{name} {sum(m['truncated']):,}" for name, m in members.items() if sum(m["truncated"])]
    return (f"\nContext lengths and targets are words (runs of non-whitespace). Of {words['drawn']:,} words drawn, each member "
            f"scores exactly ({covered}); the {words['shared']:,} every member scores are the shared targets, {words['kept_per_block']:,} kept "
            f"per block ({words['kept']:,} in all). Perplexity per word and per byte at each c: recl.json."
            + (f" Contexts longer than a member's window, read as its nearest tokens: {', '.join(cut)}." if cut else "") + "\n")


def table8_note(record: dict[str, Any]) -> str:
    """The paragraphs under a group's Table 8, from what its recl.json holds (:meth:`GroupResult.record`): how to read a
    RECL (relative to the group), the unigram check, and where there are, the words, the stride and the contexts read
    past a member's trained positions."""
    unigram, words, strided = record.get("unigram"), record.get("words"), record.get("strided")
    return (f"\n{table8.RELATIVE_NOTE}\n" + ("" if unigram is None else table8.UnigramCheck.from_record(unigram).note())
            + ("" if words is None else words_note(words)) + ("" if strided is None else strided_note(strided))
            + extrapolation_note(record.get("extrapolation", {}), record["settings"]["unit"]))


SEED_SUMMARY = "table8-seeds"
"""The stem of a group's RECL over its training seeds (.csv, .md, .json), beside the seeds' folders seed-<s>/."""


@dataclass(frozen=True)
class SeedsResult:
    """A group scored once per training seed (``settings.train_seeds``): each seed's group and the spread over them."""

    group: str
    train_seeds: list[int]
    seeds: list[GroupResult]
    """Each seed's group, as :func:`run_group` wrote it into ``<group>/seed-<s>/``."""
    rows: list[table8.SeedSpreadRow]
    """txlab.analysis.table8.seed_rows rows: per model, r and estimate, the RECL of each seed and their spread."""
    markdown: str
    files: list[Path]

    @property
    def n_targets(self) -> int:
        return self.seeds[0].n_targets

    def record(self) -> dict[str, Any]:
        """What table8-seeds.json holds."""
        first = self.seeds[0]
        return {"group": self.group, "train_seeds": self.train_seeds, "members": first.members,
                "run_dirs": {str(r.train_seed): r.run_dirs for r in self.seeds}, "settings": asdict(first.settings), "corpus": first.corpus,
                "grid": first.grid, "n_targets": first.n_targets, **first.source_fields,
                "model_order": first.model_order, "rows": [row.record() for row in self.rows]}


def _corpus_of(record: dict[str, Any]) -> str | None:
    """The corpus a group was scored on: as recorded, else (a record written before it said so) its data setting,
    its first run's configuration, or the corpus its name ends with."""
    settings = record.get("settings", {})
    if record.get("corpus") or settings.get("data"):
        return record.get("corpus") or settings["data"]
    run_dirs = record.get("run_dirs", [])
    first = next(iter(run_dirs.values()))[0] if isinstance(run_dirs, dict) else run_dirs[0] if run_dirs else None
    config = resolve(first) / "config.yaml" if first else None
    if config is not None and config.is_file():
        return (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data", {}).get("corpus")
    known = sorted([*CORPORA, *SYNTHETIC], key=len, reverse=True)
    return next((c for c in known if record.get("group", "").endswith("-" + c)), None)


def corpus_in_words(record: dict[str, Any]) -> str:
    """'Tiny Shakespeare', 'the synthetic corpus (small language, copies up to 200 tokens back)', 'own text notes.txt'."""
    settings = record.get("settings", {})
    if settings.get("text"):
        return f"own text {Path(settings['text']).name}"
    corpus = _corpus_of(record)
    return registry.corpus_in_words(corpus) if corpus else record.get("group", "")


def record_unit(record: dict[str, Any]) -> str:
    """The unit of a recorded group's contexts and targets: 'token', or 'word' (records before units were tokens)."""
    return record.get("settings", {}).get("unit", "token")


def is_char_level(record: dict[str, Any]) -> bool:
    """Whether a recorded group's corpus is read in characters (so in bits per character); never in words, whose
    unit is the word whatever each member's tokenizer."""
    settings = record.get("settings", {})
    if record_unit(record) == "word":
        return False
    if settings.get("text"):
        return settings.get("tokenizer") in (None, "char")
    corpus = _corpus_of(record)
    return corpus in CORPORA and CORPORA[corpus].level == "char"


def member_names(record: dict[str, Any]) -> list[str]:
    """The members' names in a recorded group's tables (display names where given), in the group's order."""
    return list(dict.fromkeys(row["model"] for row in record.get("rows", []) if not row.get("ground_truth")))


def figure_legend(record: dict[str, Any], order: Sequence[str] | None = None) -> ModelLegend:
    """Colours and legend names of a recorded group's figures: by ``order`` (a study's models), else the
    study's order the record holds, else the group's own; the display names the user gave, as they are."""
    # matplotlib and scipy load where a figure is drawn: a plan needs neither
    from txlab.analysis.figures import ModelLegend

    names = display_names(record.get("settings", {}).get("labels", []))
    not_read = table8.UnigramCheck.from_record(record["unigram"]).not_read if "unigram" in record else []
    return ModelLegend(tuple(record.get("model_order", ()) if order is None else order), frozenset(names.values()), frozenset(not_read))


def group_in_words(record: dict[str, Any]) -> str:
    """A figure title's models and text: 'Transformer-XL, QRNN and LSTM (cpu size, training seed 0) on Tiny Shakespeare'.
    A display name is given as it is; the size the members have ('mixed sizes' where they differ), or in a record
    written before it said so, the settings' only when every member is a preset (a run directory or a checkpoint is
    whatever size it was trained at)."""
    from txlab.analysis.figures import models_in_words

    members, verbatim = record.get("members", []), figure_legend(record).verbatim
    names = member_names(record)
    words = [name if name in verbatim else member for member, name in zip(members, names)] if len(names) == len(members) else members
    size = record.get("size") or (record.get("settings", {}).get("size") if members and all(m in PRESETS for m in members) else "")
    about = [f"{size} size{'s' * (size == MIXED)}"] * bool(size)
    about += [f"training seed {record.get('train_seed')}"] * ("train_seed" in record)
    return models_in_words(words, verbatim) + (f" ({', '.join(about)})" if about else "") + f" on {corpus_in_words(record)}"


def draw_figures(table_dir: Path, figure_dir: Path, record: dict[str, Any], char_level: bool | None = None,
                 legend: ModelLegend | None = None) -> list[Path]:
    """Figures 3 and 4 of one group from the tables in ``table_dir`` (figure3.csv, figure4.csv and its intervals,
    table8.csv's bootstrap intervals, placebo.csv where there is one) into ``figure_dir``, titled in words by
    ``record`` (recl.json's fields), coloured by ``legend`` (else :func:`figure_legend` of the record). What a run
    draws, and what --redraw draws again without scoring anything."""
    from txlab.analysis import recl_figures

    table_dir, figure_dir = Path(table_dir), Path(figure_dir)
    legend = figure_legend(record) if legend is None else legend
    about = group_in_words(record) + strided_title(record)
    char_level = is_char_level(record) if char_level is None else char_level
    unit = record_unit(record)
    files = recl_figures.figure3(table_dir / "figure3.csv", figure_dir / "figure3.png",
                                 title=f"Figure 3: gains from longer context\n{about}\n{RELATIVE_TITLE}",
                                 intervals=table_dir / "table8.csv", placebo=table_dir / "placebo.csv", r=FIGURE3_R,
                                 threshold=recl.DEFAULT_THRESHOLD, legend=legend, unit=unit)
    files += recl_figures.figure4(table_dir / "figure4.csv", figure_dir / "figure4.png", char_level=char_level,
                                  title=f"Figure 4: {'bits per character' if char_level else 'perplexity'} by context length\n{about}",
                                  intervals=table_dir / recl_figures.FIGURE4_INTERVALS, legend=legend, unit=unit,
                                  unigram=record["unigram"]["perplexity"] if "unigram" in record else None)
    return files


def seeds_figure(record: dict[str, Any], rows: Sequence[table8.SeedSpreadRow], out: Path, legend: ModelLegend | None = None) -> list[Path]:
    """The RECL of every training seed of a group (table8-seeds.json's ``record``, its ``rows``), titled in words."""
    from txlab.analysis import recl_figures

    title = f"RECL over training seeds {', '.join(map(str, record['train_seeds']))}\n{group_in_words(record)}\n{RELATIVE_TITLE}"
    return recl_figures.seed_spread_figure(rows, out, title, figure_legend(record) if legend is None else legend,
                                           record_unit(record))


RECORD_REMEDY = "run the `txlab recl` that wrote it again (--redraw draws from a group's complete folder of tables)"


def _read_record(table_dir: Path) -> tuple[Path, dict[str, Any]]:
    """(the record file, its fields) of a group's folder of tables: recl.json, or a group over seeds' table8-seeds.json."""
    for name, keys in (("recl.json", {"rows": list}), (f"{SEED_SUMMARY}.json", {"rows": list, "train_seeds": list})):
        if (table_dir / name).is_file():
            return table_dir / name, read_json(table_dir / name, RECORD_REMEDY, keys)
    raise TxlabError(f"no recl.json or {SEED_SUMMARY}.json in {table_dir}: --redraw takes a group's folder of tables that txlab recl wrote")


def _checked_folder(table_dir: Path) -> tuple[Path, dict[str, Any], dict[int, dict[str, Any]], list[table8.SeedSpreadRow]]:
    """(the record file, its fields, each training seed's recl.json fields, a group over seeds' rows) of a group's folder
    of tables, every table its figures read checked (txlab.analysis.recl_figures.check_tables): what --redraw reads of
    every folder before it draws."""
    from txlab.analysis import recl_figures

    record_file, record = _read_record(table_dir)
    if record_file.name == "recl.json":
        recl_figures.check_tables(table_dir)
        return record_file, record, {}, []
    try:
        rows = [table8.SeedSpreadRow.from_record(row) for row in record["rows"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:  # a row without a key, or a key holding another type
        raise TxlabError(f"{record_file} is damaged (a row of it: {type(err).__name__} {err}); {RECORD_REMEDY}") from None
    seeds = {}
    for seed in record["train_seeds"]:
        seeds[seed] = read_json(table_dir / f"seed-{seed}" / "recl.json", RECORD_REMEDY, {"rows": list})
        recl_figures.check_tables(table_dir / f"seed-{seed}")
    return record_file, record, seeds, rows


def redraw_groups(table_dirs: Sequence[Path], fig_dir: Path) -> list[Path]:
    """Draw scored groups' figures again from their folders of tables into ``fig_dir``/<group>/ (one training seed's
    group: ``fig_dir``/<group>/seed-<s>/; a group over seeds: its spread and every seed's figures): nothing trains or
    scores. The folders are drawn as one study: a model keeps one colour in every figure, by the study's order where
    the records hold it, else by its first appearance over the folders in the order given. Every folder is read and
    checked before any figure is written, so a damaged one is refused naming its file and leaves no figures behind."""
    read = [(Path(d), *_checked_folder(Path(d))) for d in table_dirs]
    order = list(dict.fromkeys(m for _, _, record, _, _ in read for m in record.get("model_order") or member_names(record)))
    files = []
    for table_dir, record_file, record, seed_records, rows in read:
        legend = figure_legend(record, order)
        if record_file.name == "recl.json":
            where = table_dir.resolve()
            folder = Path(where.parent.name, where.name) if "train_seed" in record else Path(table_dir.name)
            files += draw_figures(table_dir, Path(fig_dir) / folder, record, legend=legend)
            continue
        files += seeds_figure(record, rows, Path(fig_dir) / table_dir.name / SEED_SUMMARY, legend)
        for seed, seed_record in seed_records.items():
            seed_dir = table_dir / f"seed-{seed}"
            files += draw_figures(seed_dir, Path(fig_dir) / table_dir.name / seed_dir.name, seed_record, legend=legend)
    return files


def summary(results: Sequence[GroupResult | SeedsResult]) -> dict[str, Any]:
    """The --json document: per group, model and r, the RECL, its interval and whether it is censored (and,
    with placebo losses, the placebo-aware RECL, its interval and whether the RECL is below its placebo).
    A group with training seeds holds that per seed (``seeds``), and per model, r and estimate the RECL of
    every seed with their spread (``spread``)."""
    groups = []
    for result in results:
        if isinstance(result, SeedsResult):
            spread: dict[str, dict[str, Any]] = {}
            for row in result.rows:
                spread.setdefault(row.model, {}).setdefault(str(row.r), {})[row.estimate] = {
                    k: v for k, v in row.record().items() if k not in ("model", "r", "estimate", "seeds")}
            first = result.seeds[0]
            groups.append({"group": result.group, "members": first.members, "train_seeds": result.train_seeds, "grid": first.grid,
                           "n_targets": first.n_targets, "seeds": {str(r.train_seed): _group_summary(r) for r in result.seeds},
                           "spread": spread, "files": [str(f) for f in result.files]})
        else:
            groups.append(_group_summary(result))
    return {"groups": groups}


def _group_summary(result: GroupResult) -> dict[str, Any]:
    per_model: dict[str, dict[str, Any]] = {}
    for row in result.rows:
        record = row.record()
        per_model.setdefault(row.model, {})[str(row.r)] = {
            k: record[k] for k in ("recl", "ci_low", "ci_high", "censored", "label", "placebo_recl", "placebo_ci_low", "placebo_ci_high",
                                   "placebo_censored", "placebo_label", "below_placebo", "beats_unigram") if k in record
        }
    return {"group": result.group, "members": result.members, "run_dirs": result.run_dirs, "grid": result.grid, "n_targets": result.n_targets,
            "recl": per_model, "files": [str(f) for f in result.files]}
