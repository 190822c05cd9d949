"""Markdown tables, the form every committed result table takes, and the same tables in LaTeX (booktabs) for a paper:
one writer each, so they all read alike."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table, one line per row, without a final newline.

    ``numeric`` marks the columns to right-align (numbers line up by their last digit).
    """
    numeric = list(numeric) if numeric is not None else [False] * len(headers)
    if len(numeric) != len(headers):
        raise ValueError(f"{len(numeric)} alignments for {len(headers)} columns")
    lines = ["| " + " | ".join(headers) + " |", "|" + "".join("---:|" if right else "---|" for right in numeric)]
    for row in rows:
        cells = [str(cell) for cell in row]
        if len(cells) != len(headers):
            raise ValueError(f"a row of {len(cells)} cells under {len(headers)} headers: {cells}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


LATEX_SYMBOLS = {"±": "$\\pm$", "†": "$^\\dagger$", "≥": "$\\geq$", ">= ": "$\\geq$ ", "✓": "$\\checkmark$", "✗": "$\\times$",
                 "↳": "$\\hookrightarrow$"}
"""What a table's text writes that LaTeX's text mode cannot: each as math (``>=`` of a RECL ran off the grid)."""


def latex_text(text: str) -> str:
    """``text`` for a LaTeX table: its special characters escaped (& % _ # $, and ^ ~ as text, e.g. a note's 2^n) and
    :data:`LATEX_SYMBOLS` as math."""
    escaped = re.sub(r"([&%_#$])", r"\\\1", str(text)).replace("^", "\\textasciicircum{}").replace("~", "\\textasciitilde{}")
    return re.sub("|".join(map(re.escape, LATEX_SYMBOLS)), lambda m: LATEX_SYMBOLS[m.group(0)], escaped)


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
