"""Table 8's typed rows (txlab.analysis.table8): a RECL's cell with its interval, the row's records, the
Markdown table, and every committed group's tables rebuilt from the rows its recl.json holds."""

import json
from pathlib import Path

import pandas as pd
import pytest

from txlab.analysis.table8 import Interval, ReclEstimate, Table8Row, table8_markdown
from txlab.drivers.recl.report import table8_note, words_note

RESULTS = Path(__file__).resolve().parents[1] / "results" / "recl"
GROUPS = sorted(path.parent.name for path in RESULTS.glob("*/recl.json"))


def test_a_recl_cell_shows_its_interval_and_a_high_end_that_ran_off_the_grid():
    assert ReclEstimate(180, False).cell() == "180"
    assert ReclEstimate(180, False, Interval(140, 200, 0.95, 0.025)).cell() == "180 [140, 200]"
    # more censored resamples (3%) than the upper tail holds (2.5%): the high end is only a lower bound
    assert ReclEstimate(1000, True, Interval(900, 1000, 0.95, 0.03)).cell() == ">= 1000 [900, >= 1000]"
    assert Interval(900, 1000, 0.9, 0.03).high_censored is False  # a 90% interval's tail holds 5%


def test_a_row_is_marked_below_its_placebo_only_when_the_placebo_aware_recl_is_smaller():
    paper = ReclEstimate(8, True, Interval(6, 8, 0.95, 0.5))
    below = Table8Row("xl", 0.1, paper, ReclEstimate(6, False, Interval(4, 6, 0.95, 0.0)))
    assert below.below_placebo is True and below.cell() == ">= 8 [6, >= 8] †"
    assert Table8Row("xl", 0.1, paper, ReclEstimate(8, True)).below_placebo is False
    assert Table8Row("xl", 0.1, paper).below_placebo is None
    # the record: table8.csv's columns and recl.json's keys, the placebo-aware ones after the paper's
    assert below.record() == {"model": "xl", "r": 0.1, "recl": 8, "censored": True, "label": ">= 8", "ci_low": 6, "ci_high": 8, "ci": 0.95,
                              "censored_fraction": 0.5, "placebo_recl": 6, "placebo_censored": False, "placebo_label": "6",
                              "placebo_ci_low": 4, "placebo_ci_high": 6, "placebo_ci": 0.95, "placebo_censored_fraction": 0.0,
                              "below_placebo": True}
    oracle = Table8Row("oracle (ground truth)", 0.1, ReclEstimate(200, False), ground_truth=True)
    assert oracle.record() == {"model": "oracle (ground truth)", "r": 0.1, "recl": 200, "censored": False, "label": "200", "ground_truth": True}
    assert Table8Row.from_record(below.record()) == below and Table8Row.from_record(oracle.record()) == oracle


def test_table8_markdown_golden():
    def row(model, r, recl, censored, low=None, high=None, fraction=0.0):
        return Table8Row(model, r, ReclEstimate(recl, censored, None if low is None else Interval(low, high, 0.95, fraction)))

    rows = [row("xl", 0.1, 900, False, 800, 1000, 0.01), row("lstm", 0.1, 400, False, 300, 500), row("xl", 0.5, 1000, True, 900, 1000, 0.6),
            row("lstm", 0.5, 300, False, 300, 300), Table8Row("oracle (ground truth)", 0.1, ReclEstimate(200, False), ground_truth=True)]
    assert table8_markdown(rows) == (
        "| model | r = 0.1 | r = 0.5 |\n"
        "|---|---|---|\n"
        "| xl | 900 [800, 1000] | >= 1000 [900, >= 1000] |\n"
        "| lstm | 400 [300, 500] | 300 [300, 300] |\n"
        "| oracle (ground truth) | 200 | - |\n"
    )


@pytest.mark.parametrize("group", GROUPS)
def test_the_committed_tables_of_a_group_are_what_its_recl_json_rows_give(group):
    folder = RESULTS / group
    record = json.loads((folder / "recl.json").read_text(encoding="utf-8"))
    rows = [Table8Row.from_record(row) for row in record["rows"]]
    assert [list(row.record().items()) for row in rows] == [list(row.items()) for row in record["rows"]]  # keys in order too
    assert pd.DataFrame.from_records([row.record() for row in rows]).to_csv(index=False) == (folder / "table8.csv").read_text(encoding="utf-8")
    if "size" in record:  # written by today's `txlab recl`: the note it writes from the record
        note = table8_note(record)
    else:  # an older record: its coverage in words, and a note a script beside it added afterwards
        note = "\n" + record["placebo_aware"] + "\n" if "placebo_aware" in record else ""
        note += words_note(record["words"]) if "words" in record else ""
    assert table8_markdown(rows) + note == (folder / "table8.md").read_text(encoding="utf-8")
