"""Markdown tables, the form every committed result table takes (one writer, so they all read alike)."""

from __future__ import annotations

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
