"""Markdown tables, the form every committed result table takes, the same tables in LaTeX (booktabs) for a paper, and
the CSV every table and figure's points are written as: one writer each, so they all read alike, and one escaping
function per format (:func:`markdown_cell`, :func:`latex_text`, :func:`csv_cell`), so that no label or text a user
gives (a display name, a run folder, a target word) is read as markup, a command or a formula by what opens the file."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def markdown_cell(text: object) -> str:
    """``text`` as one cell of a Markdown table: a ``|`` escaped (it would end the cell) and line ends made spaces (one
    would end the row)."""
    return re.sub(r"\r\n|[\r\n]", " ", str(text)).replace("|", "\\|")


def count_label(n: float) -> str:
    """A parameter count with a unit that keeps its digits: '44.8k', '0.96M', '151.10M', '7.00B' (a tiny model's 0.19M
    printed as '0.0M' said nothing)."""
    if abs(n) >= 1e9:
        return f"{n / 1e9:.2f}B"
    return f"{n / 1e6:.2f}M" if abs(n) >= 100_000 else f"{n / 1e3:.1f}k"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table, one line per row, without a final newline.

    ``numeric`` marks the columns to right-align (numbers line up by their last digit).
    """
    numeric = list(numeric) if numeric is not None else [False] * len(headers)
    if len(numeric) != len(headers):
        raise ValueError(f"{len(numeric)} alignments for {len(headers)} columns")
    lines = ["| " + " | ".join(map(markdown_cell, headers)) + " |", "|" + "".join("---:|" if right else "---|" for right in numeric)]
    for row in rows:
        cells = [markdown_cell(cell) for cell in row]
        if len(cells) != len(headers):
            raise ValueError(f"a row of {len(cells)} cells under {len(headers)} headers: {cells}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


LATEX_SYMBOLS = {"±": "$\\pm$", "†": "$^\\dagger$", "≥": "$\\geq$", ">= ": "$\\geq$ ", "✓": "$\\checkmark$", "✗": "$\\times$", "§": "\\S{}",
                 "↳": "$\\hookrightarrow$"}
"""What a table's text writes that LaTeX's text mode cannot: each as math (``>=`` of a RECL ran off the grid)."""
LATEX_ESCAPES = {"\\": "\\textbackslash{}", "{": "\\{", "}": "\\}", "&": "\\&", "%": "\\%", "_": "\\_", "#": "\\#", "$": "\\$",
                 "^": "\\textasciicircum{}", "~": "\\textasciitilde{}", "\r\n": " ", "\n": " ", "\r": " "}
"""LaTeX's special characters as text: a backslash would start a control sequence (``\\input{/etc/passwd}``,
``\\write18`` runs a shell command where shell escape is on), braces group, and a line end in a cell (two make a
paragraph) breaks the table."""
_LATEX = re.compile("|".join(map(re.escape, sorted({**LATEX_ESCAPES, **LATEX_SYMBOLS}, key=len, reverse=True))))


def latex_text(text: str) -> str:
    """``text`` for a LaTeX table, inert: :data:`LATEX_ESCAPES` as text and :data:`LATEX_SYMBOLS` as math, in one pass (an
    escape's own backslash is never escaped again)."""
    return _LATEX.sub(lambda m: LATEX_ESCAPES.get(m.group(0)) or LATEX_SYMBOLS[m.group(0)], str(text))


def latex_table(headers: Sequence[str], rows: Iterable[Sequence[object]], caption: str = "") -> str:
    """A booktabs table for a paper (``\\usepackage{booktabs}``; ``amssymb`` for a check mark), every column left-aligned.
    ``headers`` and the cells are LaTeX already (:func:`latex_text` makes them from text); ``caption`` too."""
    lines = ["\\begin{table}[t]", "\\centering", f"\\begin{{tabular}}{{{'l' * len(headers)}}}", "\\toprule", " & ".join(headers) + " \\\\", "\\midrule"]
    for row in rows:
        cells = [str(cell) for cell in row]
        if len(cells) != len(headers):
            raise ValueError(f"a row of {len(cells)} cells under {len(headers)} headers: {cells}")
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if caption:
        lines.append(f"\\caption{{{caption}}}")
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def latex_text_table(headers: Sequence[str], rows: Iterable[Sequence[object]], notes: Sequence[str] = ()) -> str:
    """:func:`latex_table` of a table whose headers and cells are text (each made LaTeX by :func:`latex_text`), its
    ``notes`` (what a Markdown table lists under it) joined into the caption."""
    return latex_table([latex_text(h) for h in headers], ([latex_text(cell) for cell in row] for row in rows), latex_text(" ".join(notes)))


CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""How a cell that a spreadsheet (Excel, LibreOffice, Google Sheets) reads as a formula starts."""


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet opens inertly: text starting with one of :data:`CSV_FORMULA_STARTS` gets a
    single quote before it (OWASP's advice against CSV injection: ``=HYPERLINK(...)`` as a target word is shown, not
    run); numbers, and text that reads as a number (``-3``, ``-inf``), stay as they are."""
    if not isinstance(value, str) or not value.startswith(CSV_FORMULA_STARTS):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def csv_text(frame: pd.DataFrame, **to_csv: Any) -> str:
    """``frame`` as CSV without its index (``to_csv`` goes to pandas), every text cell through :func:`csv_cell`; numeric
    columns are written as they are. A text holding a carriage return has every text cell quoted: the csv module quotes
    only what holds the line end it writes (a line feed), and a reader takes a bare CR for the end of a row."""
    import csv

    from pandas.api.types import is_object_dtype, is_string_dtype

    text_columns = [name for name in frame.columns if is_object_dtype(frame[name]) or is_string_dtype(frame[name])]
    safe = frame.assign(**{name: frame[name].map(csv_cell) for name in text_columns})
    if any(safe[name].astype(str).str.contains("\r", regex=False).any() for name in text_columns):
        to_csv = {"quoting": csv.QUOTE_NONNUMERIC, **to_csv}
    return safe.to_csv(index=False, **to_csv)
