"""What `txlab recl` hands a reader: members under the names the user gave them (in Table 8, its LaTeX, recl.json, the
figures and the group's folder), Figure 4's perplexity with its block-bootstrap interval, every per-token loss as a
tidy table, and Table 8 (and the ablation table) as LaTeX that parses as a booktabs tabular."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from txlab.analysis import recl
from txlab.analysis.ablation import ablation_latex
from txlab.analysis.per_unit import UNIGRAM_FIT, unigram_perplexity
from txlab.analysis.table8 import Interval, ReclEstimate, SeedSpreadRow, Table8Row, UnigramCheck, seed_rows, table8_markdown, table8_text
from txlab.analysis.token_losses import COLUMNS, token_loss_table, write_token_losses
from txlab.drivers.recl import groups as recl_groups
from txlab.errors import TxlabError
from txlab.measure.losses import find_losses, load_losses
from txlab.measure.reading import placebo_offsets
from txlab.tables import latex_text

from conftest import TINY_TRAINING
from test_ablation import row as ablation_row
from test_recl_words import GRID as WORD_GRID
from test_recl_words import three_tokenizers  # noqa: F401 (a fixture)

TINY_COLLECTION = ["--size", "tiny", "--set", "grid=2:8:2", "--set", "blocks=3", "--set", "block_len=20", "--set", "n_boot=10"]


# --------------------------------------------------------------------------------------------------
# Display names


def _resolve(members, labels, study=None):
    return recl_groups.resolve_groups(members, study, "tiny" if study else "cpu", None, {"labels": labels})


def test_a_display_name_replaces_the_members_name_and_names_its_groups_folder():
    (group,) = _resolve(["xl151m", "qrnn"], ["xl151m=XL (ours)"])
    assert [m.label for m in group.resolved[None]] == ["XL (ours)", "qrnn"]
    assert group.name == "XL-ours+qrnn-cpu" and group.model_order == ("XL (ours)", "qrnn")
    (plain,) = _resolve(["xl151m", "qrnn"], [])  # no label: today's names
    assert [m.label for m in plain.resolved[None]] == ["xl151m", "qrnn"] and plain.name == "xl151m+qrnn-cpu"
    # a preset member keeps its preset: a display name never reaches where its run trains
    assert group.resolved[None][0].run_dir == plain.resolved[None][0].run_dir


def test_a_studys_models_take_their_colours_in_one_order_whichever_group_runs():
    (ablations,) = _resolve(["xl-ablations"], ["qrnn=QRNN (2016)"], "studies/table8.yaml")
    assert ablations.model_order == ("xl151m", "QRNN (2016)", "lstm", "xl128m", "xl128m-shaw", "xl128m-norecur", "transformer128m")


@pytest.mark.parametrize("labels, message", [
    (["xl15m=XL"], "unknown member in labels 'xl15m'. Did you mean 'xl151m'"),
    (["xl151m"], "must look like MEMBER=NAME"),
    (["xl151m=a | b"], "is not a display name"),
    (["xl151m=oracle"], "is not a display name"),
    (["xl151m=A", "xl151m=B"], "xl151m is named twice"),
    (["xl151m=Same", "qrnn=Same"], "the group names a model twice"),
])
def test_a_display_name_that_names_no_member_or_could_not_head_a_row_is_refused(labels, message):
    with pytest.raises(TxlabError, match=re.escape(message)):
        _resolve(["xl151m", "qrnn"], labels)


# figures laid out, not rendered: tests/test_recl_figures.py::test_redraw_draws_both_figures_from_the_tables_and_scores_nothing renders them
def test_names_reach_every_output_and_the_per_token_table_holds_the_loss_table(tmp_path, cli, tiny_members, figure_files_only):
    models = tiny_members(tmp_path / "models", "xl151m", "qrnn")
    runs = [str(models / "xl151m-tiny-synthetic-small"), str(models / "qrnn-tiny-synthetic-small")]
    doc = cli.json("recl", "--group", *runs, "--label", "xl151m-tiny-synthetic-small=XL (ours)", "--label", f"{runs[1]}=QRNN", *TINY_COLLECTION,
                   *TINY_TRAINING, "--set", "placebo=true", "--export-losses", "--out-dir", tmp_path / "results", "--fig-dir", tmp_path / "figures", "--json",
                   "--quiet")
    (group,) = doc["groups"]
    names = ["XL (ours)", "QRNN"]
    folder = "XL-ours+QRNN-tiny-grid-2-8-2-blocks-3-block_len-20"
    assert group["group"] == folder and set(group["recl"]) == {*names, "oracle (ground truth)"}
    tables, figures = tmp_path / "results" / folder, tmp_path / "figures" / folder
    # § (the tiny runs lose to the unigram): in LaTeX as \S{}, as in the caption's note
    assert "| XL (ours) § |" in (tables / "table8.md").read_text() and "XL (ours) \\S{} & " in (tables / "table8.tex").read_text()
    record = json.loads((tables / "recl.json").read_text())
    assert record["model_order"] == names and record["members"] == runs
    # where each target block read its far spans: the rule's draw for this split, seed and grid, as every table holds
    meta = load_losses(find_losses(runs[0])).meta
    assert record["placebo_offsets"] == placebo_offsets(meta["n_tokens"], 3, record["settings"]["seed"], record["grid"]).tolist() == meta["placebo_offsets"]
    for table in (tables / "table8.csv", tables / "figure3.csv", figures / "figure3.csv", figures / "figure4.csv"):
        assert set(pd.read_csv(table)["model"]) - {"oracle (ground truth)"} == set(names), table.name

    # the tidy table: one row per member, context length and target, the losses and placebo losses as collected
    exported = pd.read_csv(tables / "losses.csv", keep_default_na=False, na_values=[""])
    assert tuple(exported.columns) == COLUMNS and set(exported["unit"]) == {"token"}
    for name, run in zip(names, runs):
        loss_table = load_losses(find_losses(run))
        mine = exported[exported["member"] == name]
        assert list(mine["c"].unique()) == [2, 4, 6, 8] and len(mine) == 4 * len(loss_table.targets)
        assert np.allclose(mine["loss"].to_numpy().reshape(4, -1), loss_table.losses)
        assert (mine["target"].to_numpy().reshape(4, -1) == loss_table.targets).all()
        assert mine[mine["c"] == 2]["placebo_loss"].isna().all()
        assert np.allclose(mine[mine["c"] > 2]["placebo_loss"].to_numpy().reshape(3, -1), loss_table.placebo)
    assert (exported["target_text"].str.len() > 0).all()


# --------------------------------------------------------------------------------------------------
# Figure 4's intervals


def test_perplexity_intervals_resample_whole_target_blocks():
    # two blocks of two targets: block means 1 and 5 nats. Drawing whole blocks, a resample's mean is 1, 3 or 5, each
    # end with chance 1/4, so the 2.5% and 97.5% quantiles are exactly e^1 and e^5; drawing single targets would
    # reach means below 1 and above 5.
    losses = np.array([[[0.0, 2.0, 4.0, 6.0]] * 2])  # [M=1, G=2, T=4]
    intervals = recl.bootstrap_perplexity(losses, [8, 16], ["a"], block_size=2, n_boot=400, seed=0)
    assert intervals.shape == (1, 2, 2) and np.allclose(intervals[0], [[math.e, math.e ** 5]] * 2)
    same = np.array([[[1.0, 3.0, 1.0, 3.0]] * 2])  # every block alike: no spread
    assert recl.bootstrap_perplexity(same, [8, 16], ["a"], block_size=2, n_boot=50)[0, 0].tolist() == pytest.approx([math.e ** 2] * 2)
    with pytest.raises(TxlabError, match="do not split into blocks of 3"):
        recl.bootstrap_perplexity(losses, [8, 16], ["a"], block_size=3)


def test_the_per_byte_interval_resamples_the_same_blocks_and_divides_by_their_bytes():
    # blocks (0, 2) nats over (1, 1) bytes and (4, 6) nats over (4, 6) bytes: per byte e^1 and e^1, no spread, where
    # per target they are e^1 and e^5; one byte a target gives the per-target interval
    losses = np.array([[[0.0, 2.0, 4.0, 6.0]] * 2])  # [M=1, G=2, T=4]
    per_byte = recl.bootstrap_perplexity(losses, [8, 16], ["a"], block_size=2, n_boot=400, seed=0, units=np.array([1, 1, 4, 6]))
    assert np.allclose(per_byte[0], math.e)
    ones = recl.bootstrap_perplexity(losses, [8, 16], ["a"], block_size=2, n_boot=400, seed=0, units=np.ones(4))
    assert np.allclose(ones, recl.bootstrap_perplexity(losses, [8, 16], ["a"], block_size=2, n_boot=400, seed=0))


def test_the_unigram_baseline_is_add_one_over_both_splits_types_and_marks_who_loses_to_it():
    # train a a b (3 units), scored b c: types {a, b, c}, so P(b) = (1 + 1) / (3 + 3) and P(c) = 1 / 6
    for train, scored in ((["a", "a", "b"], ["b", "c"]), (np.array([0, 0, 1]), np.array([1, 2]))):
        assert unigram_perplexity(train, scored, np.array([0, 1])) == pytest.approx(math.exp(-(math.log(2 / 6) + math.log(1 / 6)) / 2))
        assert unigram_perplexity(train, scored, np.array([1])) == pytest.approx(6.0)
    check = UnigramCheck(1470.0, "word", 32, {"XL": 632.0, "GPT-2": 2197.0}, UNIGRAM_FIT)
    assert check.not_read == ["GPT-2"] and UnigramCheck.from_record(check.record()) == check
    rows = check.mark([Table8Row("XL", 0.1, ReclEstimate(4, False)), Table8Row("GPT-2", 0.1, ReclEstimate(30, False)),
                       Table8Row("oracle (ground truth)", 0.1, ReclEstimate(16, False), ground_truth=True)])
    assert [row.beats_unigram for row in rows] == [True, False, None] and Table8Row.from_record(rows[1].record()) == rows[1]
    assert table8_markdown(rows).splitlines()[2:5] == ["| XL | 4 |", "| GPT-2 § | 30 |", "| oracle (ground truth) | 16 |"]
    assert check.note() == ("\nA unigram fitted on the training split (add-one over the types of the training split and the scored split) has "
                            "perplexity per word 1,470 on these targets; the members' at c = 32: XL 632, GPT-2 2,197 §. § does not beat it: its "
                            "RECL says nothing about how it uses context, so it is not read.\n")


# --------------------------------------------------------------------------------------------------
# The per-token table


def test_the_tidy_table_puts_each_placebo_loss_at_the_length_its_step_reaches(tmp_path):
    losses = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)  # [M, G, T]
    placebo = 100 + np.arange(2 * 2 * 2, dtype=np.float32).reshape(2, 2, 2)  # [M, G-1, T]
    table = token_loss_table(losses, [4, 8, 16], ["a", "b"], np.array([10, 11]), ["x", "\n"], "token", placebo)
    assert len(table) == 12 and tuple(table.columns) == COLUMNS
    b16 = table[(table["member"] == "b") & (table["c"] == 16)]
    assert b16["loss"].tolist() == [10.0, 11.0] and b16["placebo_loss"].tolist() == [106.0, 107.0]
    assert b16["target"].tolist() == [10, 11] and b16["target_text"].tolist() == ["x", "\n"]
    assert table[table["c"] == 4]["placebo_loss"].isna().all()
    (csv, *parquet) = write_token_losses(table, tmp_path / "losses")
    back = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    assert back["target_text"].tolist() == table["target_text"].tolist() and np.allclose(back["loss"], table["loss"])
    assert [p.suffix for p in parquet] == ([".parquet"] if _has_pyarrow() else [])


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


# --------------------------------------------------------------------------------------------------
# LaTeX


def parse_booktabs(tex: str) -> list[list[str]]:
    """The cells of a booktabs table (header row first), after checking what LaTeX needs: one tabular of 'l' columns
    between \\toprule, \\midrule and \\bottomrule, every row with one cell per column and ending in \\\\, braces
    balanced, ASCII only, and no special character (& % # _ $) unescaped outside math."""
    lines = tex.strip().splitlines()
    assert lines[:2] == ["\\begin{table}[t]", "\\centering"] and lines[-1] == "\\end{table}"
    spec = re.fullmatch(r"\\begin\{tabular\}\{(l+)\}", lines[2])
    assert spec, lines[2]
    n = len(spec.group(1))
    assert lines[3] == "\\toprule" and lines[5] == "\\midrule"
    bottom = lines.index("\\bottomrule")
    assert lines[bottom + 1] == "\\end{tabular}" and all(line.startswith("\\caption{") for line in lines[bottom + 2:-1])
    assert tex.isascii() and tex.count("{") == tex.count("}")
    rows = []
    for line in [lines[4], *lines[6:bottom]]:
        assert line.endswith(" \\\\"), line
        text = re.sub(r"\$[^$]*\$", "", line.replace("\\$", ""))  # math and escaped dollars out
        assert not re.search(r"(?<!\\)[%#_$]", text), line
        cells = re.split(r"(?<!\\)&", line[: -len(" \\\\")])
        assert len(cells) == n, line
        rows.append([cell.strip() for cell in cells])
    return rows


def test_table8_and_the_seeds_table_in_latex_parse_as_booktabs_and_say_what_markdown_says():
    interval = Interval(40, 240, 0.95, 0.5)
    rows = [Table8Row("my_model & co", 0.1, ReclEstimate(240, True, interval), ReclEstimate(20, False, Interval(20, 40, 0.95, 0.0))),
            Table8Row("qrnn", 0.1, ReclEstimate(60, False, interval), ReclEstimate(60, False, interval))]
    text = table8_text(rows)
    cells = parse_booktabs(text.latex("Table 8 at 100% of the targets"))
    assert cells[0] == ["model", "r = 0.1", "r = 0.1, placebo-aware"]
    assert cells[1] == ["my\\_model \\& co", "$\\geq$ 240 [40, $\\geq$ 240] $^\\dagger$", "20 [20, 40]"]
    assert "100\\% of the targets" in text.latex("Table 8 at 100% of the targets")
    assert latex_text(text.notes[0]).startswith("$^\\dagger$ a step")
    spread = seed_rows({0: rows, 1: rows})
    assert all(isinstance(row, SeedSpreadRow) for row in spread)
    from txlab.analysis.table8 import seed_spread_text

    seeds = parse_booktabs(seed_spread_text(spread).latex("seeds"))
    assert seeds[0] == ["model", "r", "RECL", "seed 0", "seed 1", "min", "max", "mean", "sd"] and len(seeds) == 1 + len(spread)


def test_the_ablation_table_in_latex_parses_as_booktabs():
    from txlab.analysis.ablation import METRICS, OverSeeds

    rows = [ablation_row(remark="a_b & c $5", seeds=3, metric=METRICS["ppl"], init=OverSeeds(5.2, 0.05), best=OverSeeds(5.06, 0.05))]
    cells = parse_booktabs(ablation_latex(rows, [("remark", "Remark"), ("recurrence", "Recurrence"), ("ppl_best", "PPL best")], "Table 6"))
    assert cells[1] == ["a\\_b \\& c \\$5", "$\\checkmark$", "5.06 $\\pm$ 0.05"]


@pytest.mark.slow  # the command in words on three tokenizers, about 25 s here; tokens take the default run's test above
# figures laid out, not rendered: tests/test_recl_words.py::test_a_group_of_three_tokenizers_is_scored_in_words_with_its_coverage renders them in words
def test_in_words_the_tidy_table_names_each_target_word(tmp_path, cli, three_tokenizers, figure_files_only):  # noqa: F811 (the fixture imported above)
    from txlab.config import DataConfig
    from txlab.data.textdata import split_text
    from txlab.data.words import cut_words

    text, members = three_tokenizers
    cli.ok("--home", tmp_path, "recl", *members[:2], "--text", text, "--unit", "word", *WORD_GRID, "--set", "grid=1,2", "--name", "mixed",
           "--label", "bpe=BPE (ours)", "--export-losses", "--out-dir", tmp_path / "tables", "--fig-dir", tmp_path / "figures")
    record = json.loads((tmp_path / "tables" / "mixed" / "recl.json").read_text())
    exported = pd.read_csv(tmp_path / "tables" / "mixed" / "losses.csv", keep_default_na=False, na_values=[""])
    assert set(exported["unit"]) == {"word"} and list(exported["member"].unique()) == ["BPE (ours)", "word-run"]
    valid = split_text(DataConfig(corpus="text", text=str(text)), "valid")
    words = cut_words(valid)
    first = exported[(exported["member"] == "BPE (ours)") & (exported["c"] == 1)]
    assert first["target"].tolist() == record["words"]["targets"]
    assert first["target_text"].tolist() == [valid[words.starts[w]:words.ends[w]] for w in record["words"]["targets"]]
    assert len(exported) == 2 * 2 * record["n_targets"] and exported[exported["c"] > 1]["placebo_loss"].notna().all()
