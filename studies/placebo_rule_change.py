"""The placebo-aware readings of committed groups before and after their far spans were read per target block.

A group collected again under per-block offsets (txlab.measure.reading.placebo_offsets) from the same models keeps
its main losses; only its placebo gains, and so its placebo-aware readings, can move. This script sets each
(group, member, r) reading and 95% interval of an earlier commit's table8.csv (made under one offset for all blocks)
beside today's, and counts how many readings moved and how often each rule's interval holds the other's reading:

    python studies/placebo_rule_change.py --before 61577a7 --out results/recl/placebo-rule-words-groups \
        recl-words-architectures-cpu-wikitext-text-words-wikitext ...

It reads the earlier tables with `git show`, so it runs in a clone with its history.
"""

from __future__ import annotations

import argparse
import io
import subprocess
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["placebo_label", "placebo_ci_low", "placebo_ci_high"]


def table_at(commit: str | None, group: str) -> pd.DataFrame:
    """A group's table8.csv as committed at ``commit`` (None: as it is in the working tree)."""
    path = f"results/recl/{group}/table8.csv"
    text = (ROOT / path).read_text() if commit is None else subprocess.check_output(["git", "show", f"{commit}:{path}"], cwd=ROOT, text=True)
    return pd.read_csv(io.StringIO(text), dtype={"placebo_label": str})


def readings(before: str, groups: list[str]) -> pd.DataFrame:
    """One row per (group, member, r) with a placebo-aware reading: both rules' readings and intervals, whether the
    member beats the unigram (is read by the rule), whether the reading moved, and whether each interval holds the
    other rule's reading. Labels are plain numbers here: a placebo-aware walk that ran off the grid would need care."""
    rows = []
    for group in groups:
        old, new = table_at(before, group), table_at(None, group)
        both = old[["model", "r", *COLUMNS]].merge(new[["model", "r", *COLUMNS, "beats_unigram"]], on=["model", "r"], suffixes=("_one", "_per_block"))
        for row in both[both.placebo_label_per_block.notna()].itertuples():
            one, per_block = int(row.placebo_label_one), int(row.placebo_label_per_block)
            rows.append({"group": group, "model": row.model, "r": row.r, "read": bool(row.beats_unigram),
                         "one_offset": one, "one_offset_low": int(row.placebo_ci_low_one), "one_offset_high": int(row.placebo_ci_high_one),
                         "per_block": per_block, "per_block_low": int(row.placebo_ci_low_per_block),
                         "per_block_high": int(row.placebo_ci_high_per_block), "moved": one != per_block,
                         "one_offset_interval_holds_per_block": row.placebo_ci_low_one <= per_block <= row.placebo_ci_high_one,
                         "per_block_interval_holds_one_offset": row.placebo_ci_low_per_block <= one <= row.placebo_ci_high_per_block})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="+", help="folders under results/recl/ collected again under per-block offsets")
    parser.add_argument("--before", required=True, help="a commit whose tables were made under one offset")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    table = readings(args.before, args.groups)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "readings.csv", index=False)
    moved = table[table.moved]
    print(f"{len(moved)} of {len(table)} readings moved ({int(moved.read.sum())} of {int(table.read.sum())} among members read); "
          f"of those that moved, the one-offset interval held the new reading {int(moved.one_offset_interval_holds_per_block.sum())} times, "
          f"the per-block interval the old one {int(moved.per_block_interval_holds_one_offset.sum())} times")
    print(f"written {args.out / 'readings.csv'}")


if __name__ == "__main__":
    main()
