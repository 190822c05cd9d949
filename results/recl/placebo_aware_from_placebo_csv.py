"""Placebo-aware RECL of the two older gpu-small groups, walked from their committed placebo.csv (issue 33).

Those groups were scored at commit 11b7bc0, before txlab had a placebo-aware RECL: their placebo.csv
holds every step's gain and placebo gain at each r (computed as today: on the capped table, each r
its own T(c)), but recl.json, table8.csv and table8.md had no placebo-aware fields. Their loss tables
and checkpoints are not committed, so the bootstrap cannot be rerun: this script adds the point
estimates only (placebo_recl, placebo_censored, placebo_label, below_placebo), walked by
txlab.analysis.recl.placebo_aware_walk on the committed gains with each member's cap, after checking that the
paper's walk on the same gains gives the committed RECL of every row. The placebo-aware cells carry
no interval.

    python results/recl/placebo_aware_from_placebo_csv.py            # both groups
    python results/recl/placebo_aware_from_placebo_csv.py GROUP_DIR  # one
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from txlab.analysis.recl import capped, placebo_aware_walk, walk
from txlab.analysis.table8 import ReclEstimate, Table8Row, table8_markdown, write_table8
from txlab.config import load_config
from txlab.drivers.ablate_study import model_window
from txlab.errors import TxlabError
from txlab.fileio import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
GROUPS = ("table8-xl-rnn-gpu-small-synthetic-short", "table8-xl-ablations-gpu-small-synthetic-short")
NOTE = ("Placebo-aware RECL added afterwards (issue 33) by results/recl/placebo_aware_from_placebo_csv.py: point "
        "estimates walked on this group's placebo.csv, without intervals (the loss tables are not committed, so the "
        "bootstrap cannot be rerun).")


def member_caps(record: dict) -> dict[str, int | None]:
    """Each member's maximum context, as the collection took it: the window its run's config gives (counted, nothing
    built). A group in words has no caps (docs/recl.md, "No caps"), and a member whose run is not committed (a
    Hugging Face folder, a fresh clone's workspace) has none known here."""
    if record["settings"].get("unit") == "word":
        return {member: None for member in record["members"]}
    return {member: model_window(load_config(ROOT / run_dir / "config.yaml")) if (ROOT / run_dir / "config.yaml").is_file() else None
            for member, run_dir in zip(record["members"], record["run_dirs"])}


def walks(steps: pd.DataFrame, model: str, r: float, grid: list[int], cap: int | None) -> tuple[tuple[int, bool], tuple[int, bool]]:
    """(c, censored) of the paper's walk and of the placebo-aware one, for one model at one r, on placebo.csv's gains."""
    at = steps[(steps.model == model) & (steps.r == r)].sort_values("c")
    if at.c.tolist() != grid[:-1] or at.c_next.tolist() != grid[1:]:
        raise TxlabError(f"placebo.csv lacks steps of {model} at r = {r}")
    gains, placebo_gains = at.gain.tolist(), at.placebo_gain.tolist()
    return capped(*walk(gains, grid), cap), placebo_aware_walk(gains, placebo_gains, grid, cap=cap)


def add_placebo_aware(group_dir: Path) -> list[Table8Row]:
    record = json.loads((group_dir / "recl.json").read_text())
    grid, caps = record["grid"], member_caps(record)
    steps = pd.read_csv(group_dir / "placebo.csv")
    rows = []
    for row in map(Table8Row.from_record, record["rows"]):
        row = replace(row, placebo_aware=None)  # rerunnable
        if row.model in caps:
            paper, placebo_aware = walks(steps, row.model, row.r, grid, caps[row.model])
            if paper != (row.paper.recl, row.paper.censored):
                raise TxlabError(f"the paper's walk on {group_dir}/placebo.csv does not give {row.model}'s committed RECL at r = {row.r}")
            row = replace(row, placebo_aware=ReclEstimate(*placebo_aware))
        rows.append(row)
    record["rows"] = [row.record() for row in rows]
    record["placebo_aware"] = NOTE
    write_text_atomic(group_dir / "recl.json", json.dumps(record, indent=1) + "\n")
    write_table8(rows, group_dir / "table8")
    write_text_atomic(group_dir / "table8.md", table8_markdown(rows) + "\n" + NOTE + "\n")
    return rows


def main(dirs: list[str]) -> None:
    for group_dir in [Path(d) for d in dirs] or [ROOT / "results" / "recl" / g for g in GROUPS]:
        rows = add_placebo_aware(group_dir)
        marked = sum(bool(row.below_placebo) for row in rows)
        print(f"{group_dir.name}: {marked} of {sum(row.placebo_aware is not None for row in rows)} rows marked †")
        print((group_dir / "table8.md").read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
