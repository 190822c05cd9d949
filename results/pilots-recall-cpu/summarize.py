"""Summarise the recall-family pilot runs from their training records: what each run learned, per seed.

    python results/pilots-recall-cpu/summarize.py results/pilots-recall-cpu/v2    # writes v2/pilots.csv and v2/pilots.md

Reads each run's per-role records and reports the loss on latch emissions and recalled values against
the ideal model, recalled values by distance band (inside the 128-token training segment, and beyond
it inside the 256-token span), latch emissions by gap band (below the cpu RECL grid's first value of
20 tokens, and from there to 200), the first step at which recalled values fall below 1 nat, and the
stall rule fixed before the runs. The final numbers come from the run's `txlab eval RUN --by-role`
record (the whole 200k-token validation split) where the run has one (v3 on), else from its last
training validation (metrics.jsonl, 20k tokens). The stall rule: a run is *stalled* at a step when neither
structure has left its plateau, i.e. both latch emissions and recalled values are still within
0.5 nats of the ideal model's loss without context.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import yaml

from txlab.analysis.learned import STALL_MARGIN, learned_roles
from txlab.tables import markdown_table

SEGMENT, SPAN = 128, 256
"""The cpu recipe's training segment and memory + segment."""


LATCH_FLOOR = 20
"""The cpu RECL grid's first value: a latch held no further than this reads as the grid floor."""


def band(record: dict, lo: int, hi: int, table: str = "copy_distance") -> float:
    """Token-weighted mean model loss of the ``table``'s tokens (recalled values by default) with distance lo <= D < hi."""
    buckets = [b for b in record[table] if b["lo"] >= lo and b["hi"] <= hi and b["tokens"]]
    tokens = sum(b["tokens"] for b in buckets)
    return sum(b["model"] * b["tokens"] for b in buckets) / tokens if tokens else float("nan")


def summarise_run(run_dir: Path) -> dict | None:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"valid_by_role"' in line]
    if not records:
        return None
    final = sorted((run_dir / "eval").glob("valid-*-roles.json"))
    scored = json.loads(final[-1].read_text()) if final else records[-1]
    last = scored["by_role"] if final else scored
    roles = last["roles"]
    recall_below_1 = next((r["step"] for r in records if r["roles"]["recalled_value"]["model"] < 1.0), None)
    name, _, seed = run_dir.name.rpartition("-s")
    max_steps = yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["max_steps"]
    return {
        "row": name, "seed": int(seed), "step": scored["step"], "of_steps": max_steps,
        "background": roles["background"]["model"],
        "latch_emission": roles["latch_emission"]["model"], "latch_ideal": roles["latch_emission"]["ideal_with"],
        "latch_without": roles["latch_emission"]["ideal_without"],
        "recalled_value": roles["recalled_value"]["model"], "recalled_without": roles["recalled_value"]["ideal_without"],
        "recalled_near_lt_segment": band(last, 0, SEGMENT), "recalled_segment_to_span": band(last, SEGMENT, SPAN),
        "latch_lt_20": band(last, 0, LATCH_FLOOR, "latch_distance"), "latch_20_to_200": band(last, LATCH_FLOOR, 201, "latch_distance"),
        "scored_on": "eval, 200k tokens" if final else "last validation, 20k tokens",
        "recall_below_1_nat_at_step": recall_below_1,
        "stalled": not any(roles[r]["model"] < roles[r]["ideal_without"] - STALL_MARGIN for r in learned_roles(roles).structures),
    }


def _markdown(frame: pd.DataFrame) -> str:
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
    return markdown_table(list(frame.columns), [[cell(v) for v in row] for row in frame.itertuples(index=False)])


def main() -> None:
    folder = Path(sys.argv[1])
    rows = [r for d in sorted(folder.iterdir()) if (d / "metrics.jsonl").is_file() and (r := summarise_run(d))]
    table = pd.DataFrame(rows)
    table.to_csv(folder / "pilots.csv", index=False, float_format="%.3f")
    per_row = table.groupby("row", sort=False).agg(
        seeds=("seed", "count"), step=("step", "max"), of_steps=("of_steps", "max"), stalled=("stalled", "sum"),
        latch=("latch_emission", "mean"), latch_ideal=("latch_ideal", "first"), latch_without=("latch_without", "first"),
        recalled=("recalled_value", "mean"), inside_segment=("recalled_near_lt_segment", "mean"),
        segment_to_span=("recalled_segment_to_span", "mean"), latch_lt_20=("latch_lt_20", "mean"),
        latch_20_to_200=("latch_20_to_200", "mean"),
    )
    (folder / "pilots.md").write_text(
        "# Recall-family pilots (cpu profile), last validation of each run\n\n"
        "A run whose `step` is below `of_steps` was stopped at the end of the session that started it (not resumed).\n\n"
        "Per seed (`pilots.csv`), and the mean over seeds per row (nats; `stalled`: runs on which neither latch emissions nor "
        f"recalled values are {STALL_MARGIN} nats below the no-context loss):\n\n"
        + _markdown(per_row.reset_index()) + "\n\n" + _markdown(table) + "\n"
    )
    print(f"wrote {folder / 'pilots.csv'} and {folder / 'pilots.md'}")


if __name__ == "__main__":
    main()
