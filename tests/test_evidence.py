"""The committed ablation evidence and the sentences about it: the tables are what the code makes of
the committed runs, the docs' verdicts are the code's, and the README's numbers are the files'."""

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from txlab.analysis.ablation import ablation_curves, ablation_markdown, ablation_rows, seed_scores
from txlab.analysis.claims import ALPHA, VERDICTS, claims_markdown, evaluate_claims, smallest_p, verdict_word
from txlab.analysis.learned import learned_markdown, learned_runs
from txlab.drivers.ablate import load_study

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"6": "table6-cpu", "7": "table7-cpu", "10": "table10-cpu"}
DOCS = [ROOT / "README.md", ROOT / "docs" / "cpu-evidence.md", ROOT / "docs" / "ablations.md"]


def claims_of(table: str) -> pd.DataFrame:
    return pd.read_csv(ROOT / "results" / "ablate" / TABLES[table] / "claims.csv").set_index("claim")


@pytest.mark.parametrize("table", sorted(TABLES))
def test_committed_ablation_tables_are_what_the_code_makes_of_the_committed_runs(table):
    # `txlab --home . ablate studies/tableN.yaml --profile cpu --report` wrote them; this rebuilds the
    # Markdown without the figure, from the same committed per-seed scores
    study = load_study(ROOT / "studies" / f"table{table}.yaml", "cpu", sets=[f"out={ROOT / 'results' / 'ablate'}"])
    runs, curves = ablation_curves(study.out_dir, [run.run_id for run in study.runs])
    committed = lambda name: (study.out_dir / name).read_text(encoding="utf-8")  # noqa: E731
    assert ablation_markdown(ablation_rows(runs, curves), study.columns) == committed("table.md")
    assert claims_markdown(evaluate_claims(seed_scores(runs, curves), study.claims)) == committed("claims.md")
    assert learned_markdown(learned_runs(study.out_dir, runs)) == committed("learned.md")


def test_the_ablation_verdicts_in_cpu_evidence_are_the_committed_claims():
    text = (ROOT / "docs" / "cpu-evidence.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if re.match(r"\| Table (6|7|10) \|", line)]
    assert len(lines) == sum(len(claims_of(t)) for t in TABLES)  # every claim of every table, once
    for line in lines:
        table, claim, verdict, won, _, difference, p = [cell.strip() for cell in line.strip("|").split("|")]
        committed = claims_of(table.split()[1]).loc[claim]
        assert verdict == f"**{committed['verdict']}**", claim
        assert won == f"{committed['wins']} of {committed['seeds']}", claim
        assert difference == f"{committed['diff_mean_nats']:+.3f} (x{committed['ratio']:.2f})", claim
        assert p == f"{committed['p_value']:.3g}", claim


VERDICT_LIKE = re.compile(r"\b(holds?|not shown|underpowered|untested|within noise|reversed|uncertain)\b", re.IGNORECASE)


def test_every_verdict_word_the_docs_use_comes_from_the_code():
    claims_files = [ROOT / "results" / "ablate" / name / "claims.md" for name in TABLES.values()]
    for path in DOCS + claims_files:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"within noise|does not hold", text, re.IGNORECASE), f"{path}: a verdict the code no longer gives"
        for span in re.findall(r"\*\*(.+?)\*\*", text):
            if VERDICT_LIKE.search(span):  # a bold verdict: exactly one the code gives
                assert re.fullmatch(r"holds|not shown|untested|underpowered( \(needs (\d+|N) seeds\))?", span), f"{path}: **{span}**"
                assert verdict_word(span) in VERDICTS
    for name in TABLES.values():
        for verdict in pd.read_csv(ROOT / "results" / "ablate" / name / "claims.csv")["verdict"]:
            assert verdict_word(verdict) in VERDICTS


def readme_summary() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return " ".join(re.search(r"\*\*What the cpu profile reproduces\.\*\*(.+?)\n\n", text, re.DOTALL)[1].split())


def recl(path: str, model: str, r: float) -> str:
    table = pd.read_csv(ROOT / "results" / "recl" / path / "table8.csv")
    return str(table[(table["model"] == model) & (table["r"] == r)]["placebo_label"].astype(int).iloc[0])


def test_the_readme_evidence_summary_quotes_the_committed_files():
    summary = readme_summary()
    checked = []

    def quote(pattern: str) -> tuple[str, ...]:
        match = re.search(pattern, summary)
        assert match, f"the README's evidence summary no longer says {pattern!r}"
        checked.append(match.span())
        return match.groups()

    # Table 8: the committed table and the rerun from a fresh clone agree at r = 0.1
    xl, rnn = quote(r"placebo-aware RECL at r = 0\.1: (\d+) against (\d+) for the QRNN and the LSTM")
    for path in ("table8-xl-rnn-cpu-synthetic-small-short", "table8-xl-rnn-cpu-rerun-2026-11-23"):
        assert (recl(path, "xl151m", 0.1), recl(path, "qrnn", 0.1), recl(path, "lstm", 0.1)) == (xl, rnn, rnn)
    assert quote(r"uses context (\d+) tokens back where the RNNs use (\d+)") == (xl, rnn)
    roles = pd.read_csv(ROOT / "figures" / "roles" / "table8-xl-rnn-cpu-synthetic-small-short.csv")
    copied = roles[(roles["group"] == "copy_value") & roles["label"].str.contains("(xl151m)", regex=False)]["model"].iloc[0]
    loss, group, ln_group = quote(r"copied-value loss (\d\.\d\d) nats, just above ln (\d+) = (\d\.\d\d)")
    assert (loss, ln_group) == (f"{copied:.2f}", f"{math.log(int(group)):.2f}") and float(loss) > float(ln_group)
    # the claims: every one underpowered, and the seeds each table's family needs
    assert quote(r"every claim is \*\*(underpowered)\*\*") == ("underpowered",)
    six, seven_ten = quote(r"needs (\d+) seeds per row in Table 6 and (\d+) in Tables 7 and 10")
    assert set(claims_of("6")["verdict"]) == {f"underpowered (needs {six} seeds)"}
    assert set(claims_of("7")["verdict"]) == set(claims_of("10")["verdict"]) == {f"underpowered (needs {seven_ten} seeds)"}
    assert quote(r"over (\d+) seeds per row") == ("3",) and set(claims_of("6")["seeds"]) == {3}
    (alpha,) = quote(r"cannot reach p < (0\.\d+)")
    assert float(alpha) == ALPHA and smallest_p(3) > ALPHA and set(claims_of("6")["alpha"]) == {ALPHA}
    relative = claims_of("6").loc["relative beats absolute encodings (half loss)"]
    won, seeds, better, worse = quote(r"relative encodings beat absolute ones in (\d) of (\d) seeds \(perplexity (\d+\.\d\d) against (\d+\.\d\d)\)")
    assert (won, seeds, better, worse) == (str(relative["wins"]), str(relative["seeds"]), f"{relative['better_mean']:.2f}", f"{relative['worse_mean']:.2f}")
    # stalls: relative-encoding runs of Table 6 whose source values stayed at the no-context loss
    learned = pd.read_csv(ROOT / "results" / "ablate" / "table6-cpu" / "learned.csv")
    encodings = pd.read_csv(ROOT / "results" / "ablate" / "table6-cpu" / "table.csv").set_index("row_id")["encoding"]
    relative_runs = learned[(learned["what"] == "model") & learned["row_id"].map(encodings).isin(["Ours", "Shaw et al. (2018)"])]
    stalled, total = quote(r"(\d+) of Table 6's (\d+) relative-encoding runs stalled")
    assert (stalled, total) == (str(int((relative_runs["source_value"] > 6.0).sum())), str(len(relative_runs)))
    shaw = claims_of("7").loc["Shaw et al. (with recurrence) beats no recurrence"]
    assert quote(r"Shaw's encoding beats no recurrence in (\d) of (\d) seeds of Table 7") == (str(shaw["wins"]), str(shaw["seeds"]))
    half = claims_of("10").loc["recurrence beats a longer segment (half loss)"]
    longer_won, seeds = quote(r"longer segment without recurrence beats recurrence in (\d) of (\d) seeds of Table 10")
    assert (int(longer_won), int(seeds)) == (half["seeds"] - half["wins"], half["seeds"])
    # every number the summary states is one of those checked (table names aside)
    for match in re.finditer(r"\d+(\.\d+)?", summary):
        inside = any(start <= match.start() < end for start, end in checked)
        table_name = re.search(r"Tables? (\d+, )*(\d+ and )?$", summary[: match.start()]) is not None
        assert inside or table_name, f"the README quotes {match.group()} ({summary[max(0, match.start() - 40): match.end() + 10]!r}) unchecked"
