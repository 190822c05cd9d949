"""What the runs of a study learned, per token role (txlab.analysis.learned): each run's last per-role
validation, the copies beyond the training segment, the stall rule, and the learned-structure table."""

import json

import pandas as pd
import pytest

from txlab.analysis.ablation import write_ablation_report
from txlab.analysis.learned import LEARNED_ROLES, STALL_MARGIN, copies_beyond, distances_beyond, learned_roles


def role_record(step, copy_value, buckets):
    """A per-role validation record as training logs it: every role with the ideal model's two losses."""
    ideal = {"background": (1.0, 4.8), "hint": (2.8, 2.8), "source_value": (3.5, 6.2), "copy_value": (0.0, 6.2)}
    roles = {role: {"tokens": 10, "model": with_ + 1.0, "ideal_with": with_, "ideal_without": without} for role, (with_, without) in ideal.items()}
    roles["copy_value"]["model"] = copy_value
    return {"step": step, "split": "valid_by_role", "roles": roles, "tokens_seen": 100 * step, "elapsed_s": 1.0,
            "copy_distance": [{"lo": lo, "hi": hi, "tokens": n, "model": m, "ideal_with": 0.0, "ideal_without": 6.2} for lo, hi, n, m in buckets]}


# figures laid out, not rendered (the subject is learned.md): tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_learned_table_reads_each_runs_last_role_record_and_averages_over_seeds(tmp_path, study_run, figure_files_only):
    out = tmp_path / "results"
    # segment 16: the buckets from 16 on are the copies only memory can resolve
    finals = {0: (2.0, [(8, 16, 30, 1.0), (16, 24, 10, 3.0), (24, 32, 30, 5.0)]), 1: (4.0, [(8, 16, 30, 2.0), (16, 24, 10, 6.0), (24, 32, 30, 6.0)])}
    for seed, (copy_value, buckets) in finals.items():
        study_run(out, f"xl-s{seed}", "xl", seed, {32: 20.0}, validation=(8, -1, 500))  # memory -1: as in training (16)
        records = [role_record(10, 9.0, [(8, 32, 70, 9.0)]), role_record(20, copy_value, buckets)]
        (out / "runs" / f"xl-s{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    study_run(out, "other-s0", "other", 0, {32: 20.0})  # no metrics.jsonl (not a synthetic run): left out
    result = write_ablation_report(out, tmp_path / "figures", [("remark", "Remark")], ["xl-s0", "xl-s1", "other-s0"])
    assert str(out / "learned.md") in result.files
    # beyond the segment: seed 0 (3*10 + 5*30)/40 = 4.5, seed 1 (6*10 + 6*30)/40 = 6 -> mean 5.25, sd 1.06
    assert (out / "learned.md").read_text().splitlines() == [
        "| Row | Seeds | Stalled | Measured with | background | hint | source value | copied value | copied value, D 16..31 |",
        "|---|---|---|---|---|---|---|---|---|",
        "| ideal model, needed context in view |  |  |  | 1.00 | 2.80 | 3.50 | 0.00 | 0.00 |",
        "| ideal model, without it |  |  |  | 4.80 | 2.80 | 6.20 | 6.20 | 6.20 |",
        "| xl | 2 | 0 of 2 | segment 8, memory 16 (trained on 16) | 2.00 ± 0.00 | 3.80 ± 0.00 | 4.50 ± 0.00 | 3.00 ± 1.41 | 5.25 ± 1.06 |",
        "",
        "- Measured in each run's last validation during training (step 20, the first 500 validation targets) with the segment "
        "and memory shown, not as the table scores the row (attention length A with A tokens of memory). A row measured with "
        "memory 0 sees no token before its segment here, so its copies from farther back are out of view in these numbers but "
        "not in the table's.",
        "- Mean ± standard deviation over the row's seeds (n - 1); losses in nats. The last column keeps the copies whose source "
        "lies D tokens back in the distance bands that start at or past the row's training segment: D 16..31 for a segment of 16.",
        "- Stalled: seeds on which no structure that needs context was learned at that step (source value and copy value all "
        "within 0.5 nats of the ideal model's loss without context). Every run is counted; none was dropped or restarted.",
    ]
    # beside it in LaTeX for a paper: the same rows, the notes as the caption
    latex = (out / "learned.tex").read_text()
    assert str(out / "learned.tex") in result.files and "\\begin{tabular}{lllllllll}" in latex
    assert "xl & 2 & 0 of 2 & segment 8, memory 16 (trained on 16) & 2.00 $\\pm$ 0.00 & 3.80 $\\pm$ 0.00 & 4.50 $\\pm$ 0.00 & 3.00 $\\pm$ 1.41 & 5.25 $\\pm$ 1.06 \\\\" in latex
    assert "\\caption{Measured in each run's last validation" in latex and "none was dropped or restarted.}" in latex
    # a corpus whose copies all lie inside the segment has nothing beyond it: '-', not 'nan'
    for seed in (0, 1):
        records = [role_record(20, 1.0, [(8, 16, 30, 1.0)])]
        (out / "runs" / f"xl-s{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_ablation_report(out, tmp_path / "figures", [("remark", "Remark")], ["xl-s0", "xl-s1"])
    assert (out / "learned.md").read_text().splitlines()[4] == "| xl | 2 | 0 of 2 | segment 8, memory 16 (trained on 16) | 2.00 ± 0.00 | 3.80 ± 0.00 | 4.50 ± 0.00 | 1.00 ± 0.00 | - |"
    learned = pd.read_csv(out / "learned.csv")
    assert set(learned["step"]) == {20} and learned[learned["what"] == "model"]["copy_beyond_segment"].isna().all()
    assert learned.loc[0, ["train_segment", "measured_segment", "measured_memory", "measured_targets"]].tolist() == [16, 8, 16, 500]
    # a restart rule that fired: the count per row, in a column of its own, and the note says what it means
    (out / "runs" / "xl-s1" / "restarts.jsonl").write_text("".join(json.dumps({"attempt": a, "seed": 1 + 1000 * a}) + "\n" for a in (0, 1)))
    write_ablation_report(out, tmp_path / "figures", [("remark", "Remark")], ["xl-s0", "xl-s1"])
    lines = (out / "learned.md").read_text().splitlines()
    assert lines[0].startswith("| Row | Seeds | Stalled | Restarts | Measured with |")
    assert lines[2].startswith("| ideal model, needed context in view |  |  |  |  | 1.00 |")
    assert lines[4].startswith("| xl | 2 | 0 of 2 | 2 in 2 seeds | segment 8, memory 16 (trained on 16) | 2.00 ± 0.00 |")
    assert lines[-1].endswith("none was dropped. Restarts: how often the study's restart rule (train.max_restarts) started a seed again "
                              "from step 0; a seed's numbers are those of its last attempt, and each run's restarts.jsonl keeps the attempts abandoned.")


def test_copies_beyond_a_distance_with_no_copy_that_far_is_nan():
    record = role_record(1, 1.0, [(8, 16, 5, 1.0), (16, 24, 5, 3.0)])
    assert copies_beyond(record, 24).tokens == 0 and pd.isna(copies_beyond(record, 24).model)
    assert (copies_beyond(record, 16).tokens, copies_beyond(record, 16).model) == (5, 3.0)
    assert (copies_beyond(record, 8).tokens, copies_beyond(record, 8).model, copies_beyond(record, 8).ideal_without) == (10, 2.0, 6.2)
    # the bands are fixed: past a distance inside one, the copies counted start at the next band
    assert (distances_beyond(record, 12), distances_beyond(record, 16), distances_beyond(record, 8), distances_beyond(record, 24)) == (
        (16, 23), (16, 23), (8, 23), None)


def test_stalled_runs_follow_the_stated_rule():
    recall = learned_roles(["background", "latch_emission", "recall_key", "recalled_value", "other"])
    assert recall is LEARNED_ROLES[1]
    without = {"latch_emission": 4.16, "recalled_value": 5.55}
    stalled = [recall.stalled({"latch_emission": latch, "recalled_value": recalled}, without)
               for latch, recalled in [(4.0, 5.5), (2.0, 5.5), (4.0, 1.0), (4.16 - STALL_MARGIN, 5.5)]]
    # learned = strictly more than the margin below the no-context loss, in any structure of the family
    assert stalled == [True, False, False, True]
    with pytest.raises(ValueError, match="no learned-structure roles"):
        learned_roles(["background", "hint"])
