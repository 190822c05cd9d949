"""Every file a reader opens is inert (issue 62): a label or a text a user gives (a display name, a run folder, a target
word) is written escaped in each output format, by the one escaping function of that format (txlab.tables), so that LaTeX
runs no control sequence, a Markdown table keeps its cells and rows, and a spreadsheet reads no formula."""

import csv
import re

import numpy as np
import pytest

from txlab.analysis.table8 import ReclEstimate, Table8Row, write_table8
from txlab.analysis.token_losses import token_loss_table, write_token_losses
from txlab.tables import csv_cell, latex_text, markdown_table

HOSTILE = ["\\input{/etc/passwd}\\immediate\\write18{touch x}", "a | b\nc", "=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-cmd", "@SUM(A1)",
           "\tx", "\rx", "50% of #1 & $2_{a}^b ~", "plain"]
"""Labels and texts that would be markup, a command or a formula if written as they are."""
LATEX_ESCAPE = re.compile(r"\\(textbackslash\{\}|textasciicircum\{\}|textasciitilde\{\}|[{}&%_#$])")


def control_sequences(tex: str) -> set[str]:
    """The control sequences ``tex`` runs, once the escapes of text are taken out."""
    return set(re.findall(r"\\[A-Za-z@]+|\\.", LATEX_ESCAPE.sub("", tex)))


@pytest.mark.parametrize("label", HOSTILE)
def test_table8_writes_any_label_inertly_in_latex_markdown_and_csv(tmp_path, label):
    rows = [Table8Row(label, 0.1, ReclEstimate(240, True)), Table8Row("xl", 0.1, ReclEstimate(20, False))]
    csv_file, md, tex = write_table8(rows, tmp_path / "table8")
    written = tex.read_text()
    assert control_sequences(written) <= control_sequences(write_table8(rows[1:], tmp_path / "plain")[2].read_text())  # the table's own only
    lines = md.read_text().splitlines()
    assert len(lines) == 4 and len({len(re.findall(r"(?<!\\)\|", line)) for line in lines}) == 1  # header, rule, two rows of as many cells
    with open(csv_file, newline="") as fh:  # a CR inside a cell is the cell's
        [first, _] = list(csv.DictReader(fh))
    assert first["model"] == csv_cell(label) and first["recl"] == "240"


def test_latex_text_escapes_control_sequences_braces_and_specials_in_one_pass():
    assert latex_text("\\input{x} 5% a_b ± ≥ 2") == "\\textbackslash{}input\\{x\\} 5\\% a\\_b $\\pm$ $\\geq$ 2"
    assert latex_text("line\nbreak") == "line break"


def test_a_markdown_cell_keeps_its_row():
    assert markdown_table(["a|b"], [["x\ny|z"]]) == "| a\\|b |\n|---|\n| x y\\|z |"


def test_csv_cells_a_spreadsheet_reads_as_formulas_get_a_quote_and_numbers_stay(tmp_path):
    texts = ["=1+2", "+A1", "-", "@a", "\tx", "\rx", "-3", "+1", "plain", " =x"]
    table = token_loss_table(np.full((1, 2, len(texts)), 1.5), [4, 8], ["=member"], np.arange(len(texts)), texts, "word")
    [path, *_] = write_token_losses(table, tmp_path / "losses")
    with open(path, newline="") as fh:  # a CR inside a cell is the cell's
        read = list(csv.DictReader(fh))
    assert [row["target_text"] for row in read[: len(texts)]] == ["'=1+2", "'+A1", "'-", "'@a", "'\tx", "'\rx", "-3", "+1", "plain", " =x"]
    assert {row["member"] for row in read} == {"'=member"} and {row["loss"] for row in read} == {"1.5"} and read[0]["c"] == "4"
