"""docs/recl-limits.md: its known-answer tables, the formula its prose uses, and the command that writes them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from txlab.analysis import recl, recl_limits
from txlab.analysis.recl_limits import Reader, fill_page, loss_table, make_corpus, page_tables, placebo_table, render_cases
from txlab.errors import TxlabError

PAGE = Path(__file__).resolve().parents[1] / "docs" / "recl-limits.md"


def test_the_corpus_spreads_its_dependencies_evenly():
    corpus = make_corpus()
    recall = corpus.distance[corpus.distance > 0]
    assert len(corpus.distance) == 20_000 and len(recall) == 2_000
    assert (np.bincount(recall, minlength=1001)[1:] == 2).all()  # every distance 1 .. 1000 exactly twice
    sparse = make_corpus(recall_share=0.02).distance
    assert np.histogram(sparse[sparse > 0], bins=range(0, 1001, 100))[0].tolist() == [40] * 10
    background = np.sort(corpus.background[corpus.distance == 0])
    assert (background[0], background[-1]) == recl_limits.BACKGROUND
    np.testing.assert_array_equal(make_corpus().distance, corpus.distance)  # the seed fixes it


def test_the_pages_formula_gives_the_windows_gains():
    # Step 300 -> 400 of the reader with w = 301 resolves the 2 targets at d = 301, 11.5 nats each, out of
    # |T(300)| = r * 20,000 targets: a gain of 1 - exp(-2 * 11.5 / (r * 20,000)).
    corpus = make_corpus()
    table = loss_table(corpus, Reader(window=301))[None]
    for r, want in ((0.1, 400), (0.5, 300), (1.0, 300)):
        (result,) = recl.recl(table, recl_limits.GRID, ["w301"], r)
        assert result.gains[2] == pytest.approx(1 - math.exp(-2 * 11.5 / (r * 20_000)), rel=1e-12)
        assert (result.recl, result.censored) == (want, False)


def test_noise_runs_off_the_grid_and_the_placebo_sees_through_it():
    corpus = make_corpus()
    reader = Reader(window=500, noise=0.05)
    table, placebo = loss_table(corpus, reader)[None], placebo_table(corpus, reader)[None]
    for r in recl_limits.RS:
        (result,) = recl.recl(table, recl_limits.GRID, ["noisy"], r, placebo=placebo)
        assert (result.label, result.placebo_recl, result.below_placebo) == (">= 1000", 500, True)
    clean = loss_table(corpus, Reader(window=500))
    np.testing.assert_array_equal(placebo_table(corpus, Reader(window=500)), clean[:-1])  # no noise: the placebo is l(c, t)


def test_the_page_holds_the_tables_the_command_writes():
    tables = render_cases()
    assert page_tables(PAGE.read_text()) == tables, "docs/recl-limits.md is stale: run python -m txlab.analysis.recl_limits --write docs/recl-limits.md"


def test_fill_page_replaces_only_between_markers_and_refuses_missing_ones():
    page = "intro\n<!-- recl-limits:decay -->\nold\n<!-- /recl-limits:decay -->\noutro\n"
    assert fill_page(page, {"decay": "| new |\n"}) == "intro\n<!-- recl-limits:decay -->\n| new |\n<!-- /recl-limits:decay -->\noutro\n"
    with pytest.raises(TxlabError, match="recl-limits:noise"):
        fill_page(page, {"noise": "| x |\n"})
    with pytest.raises(TxlabError, match="no RECL case 'nope'"):
        render_cases(["nope"])


def test_the_command_prints_and_writes(tmp_path, capsys):
    recl_limits.main(["decay"])
    assert "decay:\n| decay length |" in capsys.readouterr().out
    page = tmp_path / "page.md"
    page.write_text("<!-- recl-limits:decay -->\n<!-- /recl-limits:decay -->\n")
    recl_limits.main(["--write", str(page), "decay"])
    assert page_tables(page.read_text())["decay"] == render_cases(["decay"])["decay"]
    with pytest.raises(SystemExit) as exit_info:
        recl_limits.main(["nope"])
    assert exit_info.value.code == 2
