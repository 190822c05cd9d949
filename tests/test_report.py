import json
import math

import pandas as pd
import pytest
import yaml

from txlab.analysis.report import learning_curves, run_label
from txlab.errors import TxlabError


def fake_run(root, name, losses, corpus="synthetic"):
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text(f"preset: {name}\nsize: cpu\ndata:\n  corpus: {corpus}\n")
    lines = []
    for i, loss in enumerate(losses, start=1):
        lines.append({"step": 10 * i, "split": "train", "loss": loss + 0.1, "tokens": 1000 * i, "elapsed_s": 6.0 * i})
        lines.append({"step": 10 * i, "split": "valid", "loss": loss, "ppl": 2.0, "tokens": 50, "tokens_seen": 1000 * i, "elapsed_s": 6.0 * i})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return run


def test_learning_curves_write_figure_and_the_plotted_points(tmp_path):
    runs = [fake_run(tmp_path, "xl", [5.0, 4.0, 3.5]), fake_run(tmp_path, "qrnn", [5.5, 4.5])]
    out = learning_curves(runs, tmp_path / "fig" / "curves.png", title="demo")
    assert [p.suffix for p in out["figures"]] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in out["figures"])
    points = pd.read_csv(out["table"])
    valid, train = points[points["split"] == "valid"], points[points["split"] == "train"]
    assert list(valid["loss"]) == [5.0, 4.0, 3.5, 5.5, 4.5]
    assert list(valid["tokens_seen"]) == [1000, 2000, 3000, 1000, 2000]
    assert list(train["loss"]) == pytest.approx([5.1, 4.1, 3.6, 5.6, 4.6]) and list(train["tokens_seen"]) == [1000, 2000, 3000, 1000, 2000]
    assert set(points["label"]) == {"xl (cpu) on synthetic", "qrnn (cpu) on synthetic"}
    assert run_label(tmp_path / "missing") == "missing"


def test_learning_curves_read_bits_per_character_on_character_corpora(tmp_path):
    runs = []
    for name, bpcs in (("a", [2.0, 1.5]), ("b", [2.2, 1.6])):
        run = fake_run(tmp_path, name, [1.4, 1.0], corpus="enwik8")
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        valid = [r for r in records if r["split"] == "valid"]
        for record, bpc in zip(valid, bpcs):
            record.pop("ppl")
            record["bpc"] = bpc
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        runs.append(run)
    points = pd.read_csv(learning_curves(runs, tmp_path / "bpc.png")["table"])
    assert list(points.loc[points["split"] == "valid", "loss"]) == [2.0, 1.5, 2.2, 1.6]
    assert list(points.loc[points["split"] == "train", "loss"]) == pytest.approx([1.5 / math.log(2), 1.1 / math.log(2)] * 2)
    # a word-level run among them: every curve stays in nats
    mixed = pd.read_csv(learning_curves([*runs, fake_run(tmp_path, "w", [5.0])], tmp_path / "mixed.png")["table"])
    assert list(mixed.loc[mixed["split"] == "valid", "loss"]) == [1.4, 1.0, 1.4, 1.0, 5.0]


def test_learning_curves_draw_a_run_without_validation_from_its_training_loss(tmp_path):
    early = fake_run(tmp_path, "early", [5.0])
    records = [json.loads(line) for line in (early / "metrics.jsonl").read_text().splitlines()]
    (early / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["split"] == "train"))
    points = pd.read_csv(learning_curves([fake_run(tmp_path, "xl", [5.0, 4.0]), early], tmp_path / "c.png")["table"])
    assert list(points.loc[points["run"] == "early", "split"]) == ["train"]
    (early / "metrics.jsonl").write_text("")
    with pytest.raises(TxlabError, match="no training or validation records yet"):
        learning_curves([early], tmp_path / "x.png")


def test_learning_curves_refuse_non_runs(tmp_path):
    with pytest.raises(TxlabError, match="no metrics.jsonl"):
        learning_curves([tmp_path], tmp_path / "x.png")


# --------------------------------------------------------------------------------------------------
# Ablation tables (txlab ablate)

from txlab.analysis.report import ablation_latex, ablation_markdown, init_best, write_ablation_report  # noqa: E402


def test_init_best_takes_the_training_length_the_minimum_and_its_shortest_length():
    assert init_best([64, 128, 256, 512], [30.0, 28.0, 27.0, 27.0], 128) == (28.0, 27.0, 256)
    assert init_best([128, 256], [31.0, 31.5], 128) == (31.0, 31.0, 128)
    with pytest.raises(TxlabError, match="training length 100 was not evaluated"):
        init_best([64, 128], [1.0, 2.0], 100)


def fake_ablation_run(root, run_id, row_id, seed, curve, *, remark="", mem_len=16, pos_enc="ours", loss="full", init_len=32, metric="ppl",
                      validation=None):
    """A finished study run; ``validation`` (segment, memory, targets) is how training validated it."""
    run = root / "runs" / run_id
    (run / "ablate").mkdir(parents=True)
    cfg = {"model": {"family": "xl", "mem_len": mem_len, "pos_enc": pos_enc, "tgt_len": 16}, "train": {"loss": loss}}
    if validation:
        cfg["eval"] = {"tgt_len": validation[0], "mem_len": validation[1]}
        cfg["train"]["eval_tokens"] = validation[2]
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "ablate" / "row.json").write_text(json.dumps({
        "run_id": run_id, "row_id": row_id, "remark": remark, "seed": seed, "init_len": init_len, "eval_lens": sorted(curve),
        "split": "valid", "eval_tokens": 100, "params": 1_500_000}))
    for length, value in curve.items():  # the loss in nats that the perplexity (or bpc) comes from
        loss = math.log(value) if metric == "ppl" else value * math.log(2)
        (run / "ablate" / f"attn{length}-valid-n100.json").write_text(json.dumps({metric: value, "loss": loss, "tokens": 100}))


def test_ablation_report_from_fixture_run_directories(tmp_path):
    out = tmp_path / "results"
    fake_ablation_run(out, "xl-s0", "xl", 0, {16: 30.0, 32: 28.0, 64: 26.0, 128: 26.0}, remark="Transformer-XL")
    fake_ablation_run(out, "xl-s1", "xl", 1, {16: 32.0, 32: 30.0, 64: 27.0, 128: 25.0}, remark="Transformer-XL")
    fake_ablation_run(out, "xl-s2", "xl", 2, {16: 90.0, 32: 90.0, 64: 90.0, 128: 90.0}, remark="Transformer-XL")
    (out / "runs" / "xl-s2" / "ablate" / "attn128-valid-n100.json").unlink()  # still being scored: left out
    fake_ablation_run(out, "shaw-s0", "shaw", 0, {16: 31.0, 32: 29.0, 64: 29.5}, mem_len=0, pos_enc="shaw", loss="half", init_len=32)
    columns = [("remark", "Remark"), ("recurrence", "Recurrence"), ("encoding", "Encoding"), ("loss", "Loss"),
               ("ppl_init", "PPL init"), ("ppl_best", "PPL best"), ("attn_len", "Attn Len")]
    result = write_ablation_report(out, tmp_path / "figures", columns, ["xl-s0", "xl-s1", "xl-s2", "shaw-s0", "missing-s0"], title="demo")
    xl, shaw = result["rows"]
    # mean curve over seeds: 31, 29, 26.5, 25.5 -> init (at 32) 29, best 25.5 at 128; spreads over seeds
    assert (xl["ppl_init"], xl["ppl_best"], xl["attn_len"], xl["seeds"]) == (29.0, 25.5, 128, 2)
    assert xl["ppl_init_std"] == pytest.approx(2 ** 0.5) and xl["ppl_best_std"] == pytest.approx(0.5 ** 0.5)
    assert (shaw["ppl_init"], shaw["ppl_best"], shaw["attn_len"], shaw["ppl_init_std"]) == (29.0, 29.0, 32, None)
    assert result["markdown"] == (
        "| Remark | Recurrence | Encoding | Loss | PPL init | PPL best | Attn Len |\n"
        "|---|---|---|---|---|---|---|\n"
        "| Transformer-XL | ✓ | Ours | Full | 29.00 ± 1.41 | 25.50 ± 0.71 | 128 |\n"
        "|  | ✗ | Shaw et al. (2018) | Half | 29.00 | 29.00 | 32 |\n"
        "\n"
        "- PPL init: at the training attention length (segment + memory), the mean over seeds.\n"
        "- PPL best: the row's lowest mean over seeds among its evaluation lengths (3 to 4 per row), at Attn Len, every seed taken "
        "at that one length. It is chosen and reported on the same validation targets, so it is optimistic by that choice: the "
        "scores are whole-split means, with no held-out half to choose on.\n"
        "- ±: standard deviation over the row's seeds (2; with n - 1); a value without ± comes from one seed.\n"
    )
    tex = (out / "table.tex").read_text()
    assert "\\toprule" in tex and "Transformer-XL & $\\checkmark$ & Ours & Full & 29.00 $\\pm$ 1.41 & 25.50 $\\pm$ 0.71 & 128 \\\\" in tex
    assert "\\caption{demo. PPL init: at the training attention length" in tex and "$\\pm$: standard deviation over the row's seeds (2" in tex
    table = pd.read_csv(out / "table.csv")
    assert list(table["row_id"]) == ["xl", "shaw"] and table.loc[0, "params"] == 1_500_000
    assert len(pd.read_csv(out / "curves.csv")) == 14
    assert (tmp_path / "figures" / "ppl-vs-attn-len.png").stat().st_size > 1000


def test_ablation_tables_say_bpc_on_character_corpora_and_latex_escapes():
    rows = [{"remark": "a_b & c $5", "ppl_init": 1.23456, "ppl_best": 1.2, "metric": "bpc", "ppl_init_std": None, "ppl_best_std": None}]
    columns = [("remark", "Remark"), ("ppl_init", "PPL init"), ("ppl_best", "PPL")]
    assert ablation_markdown(rows, columns).splitlines()[0] == "| Remark | bpc init | bpc |"
    assert "a\\_b \\& c \\$5 & 1.235 & 1.200 \\\\" in ablation_latex(rows, columns)


def test_ablation_report_without_runs_says_what_to_do(tmp_path):
    with pytest.raises(TxlabError, match="run the study first"):
        write_ablation_report(tmp_path, tmp_path, [("remark", "Remark")], ["a-s0"])


def test_ablation_report_reads_each_row_one_way_in_table_claims_and_figure(tmp_path):
    from txlab.analysis.claims import Claim

    out = tmp_path / "results"
    # ours: seed 2 stalls, so its own best length (32) differs from the row's (64, where the mean is lowest)
    ours = [{32: 26.0, 64: 25.0}, {32: 27.0, 64: 26.0}, {32: 40.0, 64: 44.0}]
    shaw = [{32: 27.0, 64: 28.0}, {32: 28.5, 64: 29.5}, {32: 25.5, 64: 26.5}]
    for seed in range(3):
        fake_ablation_run(out, f"xl-s{seed}", "xl", seed, ours[seed])
        fake_ablation_run(out, f"shaw-s{seed}", "shaw", seed, shaw[seed], pos_enc="shaw")
    ids = [f"{row}-s{seed}" for row in ("xl", "shaw") for seed in range(3)]
    result = write_ablation_report(out, tmp_path / "figures", [("remark", "Remark"), ("ppl_best", "PPL best"), ("attn_len", "Attn Len")],
                                   ids, claims=[Claim("ours beats Shaw", "xl", "shaw")])
    xl = result["rows"][0]
    # the row's means: (26 + 27 + 40) / 3 = 31.0 at 32 and (25 + 26 + 44) / 3 = 31.67 at 64
    assert (xl["attn_len"], xl["ppl_best"]) == (32, pytest.approx(31.0))
    assert xl["ppl_best_std"] == pytest.approx(pd.Series([26.0, 27.0, 40.0]).std())
    [claim] = result["claims"]
    # every seed at its row's length (32 for both), not at its own best: 26, 27, 40 against 27, 28.5, 25.5
    assert claim.better_values == (26.0, 27.0, 40.0) and claim.worse_values == (27.0, 28.5, 25.5)
    assert claim.differences == pytest.approx(tuple(math.log(w / b) for b, w in zip(claim.better_values, claim.worse_values)))
    # differences +0.038, +0.054, -0.450 (sum -0.358): reached by the observed signs and by the four
    # patterns that flip the stall's -0.450 (+0.542, +0.466, +0.434, +0.358) -> 5/8
    assert (claim.wins, claim.p_value, claim.verdict) == (2, 0.625, "underpowered (needs 5 seeds)")
    text = (out / "claims.md").read_text()
    assert "| ours beats Shaw | xl | shaw | ppl_best | 3 (2 won) | 31.00 ± 7.81 (26.00 / 27.00 / 40.00) |" in text
    assert "| 31.00 ± 7.81 |" in (out / "table.md").read_text()  # the same numbers as the table's row
    claims = pd.read_csv(out / "claims.csv")
    assert list(claims["verdict"]) == ["underpowered (needs 5 seeds)"] and list(claims["seed_ids"]) == ["0 1 2"]
    assert list(claims["family_size"]) == [1] and claims.loc[0, "better_mean"] == pytest.approx(31.0)
    points = pd.read_csv(tmp_path / "figures" / "ppl-vs-attn-len.csv").set_index(["row_id", "attn_len"])
    assert points.loc[("xl", 32), "mean"] == pytest.approx(31.0) and points.loc[("xl", 32), "sd"] == pytest.approx(xl["ppl_best_std"])


def role_record(step, copy_value, buckets):
    """A per-role validation record as training logs it: every role with the ideal model's two losses."""
    ideal = {"background": (1.0, 4.8), "hint": (2.8, 2.8), "source_value": (3.5, 6.2), "copy_value": (0.0, 6.2)}
    roles = {role: {"tokens": 10, "model": with_ + 1.0, "ideal_with": with_, "ideal_without": without} for role, (with_, without) in ideal.items()}
    roles["copy_value"]["model"] = copy_value
    return {"step": step, "split": "valid_by_role", "roles": roles, "tokens_seen": 100 * step, "elapsed_s": 1.0,
            "copy_distance": [{"lo": lo, "hi": hi, "tokens": n, "model": m, "ideal_with": 0.0, "ideal_without": 6.2} for lo, hi, n, m in buckets]}


def test_learned_table_reads_each_runs_last_role_record_and_averages_over_seeds(tmp_path):
    out = tmp_path / "results"
    # segment 16: the buckets from 16 on are the copies only memory can resolve
    finals = {0: (2.0, [(8, 16, 30, 1.0), (16, 24, 10, 3.0), (24, 32, 30, 5.0)]), 1: (4.0, [(8, 16, 30, 2.0), (16, 24, 10, 6.0), (24, 32, 30, 6.0)])}
    for seed, (copy_value, buckets) in finals.items():
        fake_ablation_run(out, f"xl-s{seed}", "xl", seed, {32: 20.0}, validation=(8, -1, 500))  # memory -1: as in training (16)
        records = [role_record(10, 9.0, [(8, 32, 70, 9.0)]), role_record(20, copy_value, buckets)]
        (out / "runs" / f"xl-s{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    fake_ablation_run(out, "other-s0", "other", 0, {32: 20.0})  # no metrics.jsonl (not a synthetic run): left out
    result = write_ablation_report(out, tmp_path / "figures", [("remark", "Remark")], ["xl-s0", "xl-s1", "other-s0"])
    assert str(out / "learned.md") in result["files"]
    # beyond the segment: seed 0 (3*10 + 5*30)/40 = 4.5, seed 1 (6*10 + 6*30)/40 = 6 -> mean 5.25, sd 1.06
    assert (out / "learned.md").read_text().splitlines() == [
        "| Row | Seeds | Stalled | Measured with | background | hint | source value | copied value | copied value, D >= training segment |",
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
        "lies at or beyond the row's training segment.",
        "- Stalled: seeds on which no structure that needs context was learned at that step (source value and copy value all "
        "within 0.5 nats of the ideal model's loss without context). Every run is counted; none was dropped or restarted.",
    ]
    # a corpus whose copies all lie inside the segment has nothing beyond it: '-', not 'nan'
    for seed in (0, 1):
        records = [role_record(20, 1.0, [(8, 16, 30, 1.0)])]
        (out / "runs" / f"xl-s{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_ablation_report(out, tmp_path / "figures", [("remark", "Remark")], ["xl-s0", "xl-s1"])
    assert (out / "learned.md").read_text().splitlines()[4] == "| xl | 2 | 0 of 2 | segment 8, memory 16 (trained on 16) | 2.00 ± 0.00 | 3.80 ± 0.00 | 4.50 ± 0.00 | 1.00 ± 0.00 | - |"
    learned = pd.read_csv(out / "learned.csv")
    assert set(learned["step"]) == {20} and learned[learned["what"] == "model"]["copy_beyond_segment"].isna().all()
    assert learned.loc[0, ["train_segment", "measured_segment", "measured_memory", "measured_targets"]].tolist() == [16, 8, 16, 500]


def test_copies_beyond_a_distance_with_no_copy_that_far_is_nan():
    from txlab.analysis.report import copies_beyond

    record = role_record(1, 1.0, [(8, 16, 5, 1.0)])
    assert copies_beyond(record, 16)["tokens"] == 0 and pd.isna(copies_beyond(record, 16)["model"])
    assert copies_beyond(record, 8)["model"] == 1.0


def test_stalled_runs_follow_the_stated_rule():
    from txlab.analysis.report import LEARNED_ROLES, STALL_MARGIN, stalled_runs
    recall = LEARNED_ROLES[1]
    lines = []
    for seed, (latch, recalled) in enumerate([(4.0, 5.5), (2.0, 5.5), (4.0, 1.0), (4.16 - STALL_MARGIN, 5.5)]):
        lines.append({"row_id": "r", "seed": seed, "what": "model", "latch_emission": latch, "recalled_value": recalled})
        lines.append({"row_id": "r", "seed": seed, "what": "ideal_without", "latch_emission": 4.16, "recalled_value": 5.55})
    # learned = strictly more than the margin below the no-context loss, in any structure of the family
    assert stalled_runs(pd.DataFrame(lines), recall).tolist() == [True, False, False, True]
