"""Synthetic corpora: determinism, the documented statistics, and ground truth checked by hand and by rule."""

import math

import numpy as np
import pytest
from tqdm import tqdm

from txlab.data import synthetic
from txlab.data.formats import _corpus_blocks, words
from txlab.data.registry import EOS
from txlab.data.synthetic import BACKGROUND, COPY_KEY, COPY_VALUE, HINT, SOURCE_KEY, SOURCE_VALUE, VARIANTS, build_text, generate, get_spec, write_wikitext_format
from txlab.errors import TxlabError

SPEC = VARIANTS["synthetic"]


@pytest.fixture(scope="module")
def text():
    return generate(SPEC, 300_000, seed=3, split="valid")


def test_deterministic_by_seed_and_split():
    a = generate(SPEC, 20_000, seed=1)
    b = generate(SPEC, 20_000, seed=1)
    for field in ("tokens", "role", "needed_context", "oracle_nll_with", "oracle_nll_without"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.tokens, generate(SPEC, 20_000, seed=2).tokens)
    assert not np.array_equal(a.tokens, generate(SPEC, 20_000, seed=1, split="test").tokens)


def test_hand_checked_tiny_layout():
    """One fact: hints at 1..4, key at 5, values 6..9; copy D = 6 later: key at 11, values 12..15."""
    t = build_text(SPEC, 24, np.array([1]), np.array([6]), np.random.default_rng(0))
    B, H, SK, SV, CK, CV = BACKGROUND, HINT, SOURCE_KEY, SOURCE_VALUE, COPY_KEY, COPY_VALUE
    assert t.role.tolist() == [B, H, H, H, H, SK, SV, SV, SV, SV, B, CK, CV, CV, CV, CV] + [B] * 8
    # background: distance to the previous background token (0 for the first); source values: their
    # hint 5 back; copy key: its source key D = 6 back; copied values: source value and its predecessor.
    assert t.needed_context.tolist() == [0, 0, 0, 0, 0, 0, 5, 5, 5, 5, 10, 6, 7, 7, 7, 7, 6] + [1] * 7
    tok = t.tokens.astype(int)
    assert tok[11] == tok[5] and tok[12:16].tolist() == tok[6:10].tolist()
    n_bg, n_hint, n_key = SPEC.n_background, SPEC.n_hints, SPEC.n_keys
    hints = tok[1:5] - n_bg
    values = tok[6:10] - (n_bg + n_hint + n_key)
    assert ((0 <= hints) & (hints < n_hint)).all()
    assert (values // SPEC.values_per_hint == hints).all()  # each value lies in its hint's group
    assert n_bg + n_hint <= tok[5] < n_bg + n_hint + n_key
    ln = math.log
    steps = -np.log(np.array(SPEC.step_probs))
    expected_with = [ln(128)] + [ln(64)] * 4 + [ln(1024)] + [ln(64)] * 4 + [None] + [0.0] * 5 + [None] * 8
    for i, w in enumerate(expected_with):
        if w is not None:
            assert t.oracle_nll_with[i] == pytest.approx(w, rel=1e-6), i
    bg = [10, *range(16, 24)]
    assert all(np.isclose(steps, t.oracle_nll_with[i]).any() for i in bg)  # one of the four step costs
    expected_without = [ln(128)] + [ln(64)] * 4 + [ln(1024)] + [ln(4096)] * 4 + [ln(128), ln(1024)] + [ln(4096)] * 4 + [ln(128)] * 8
    np.testing.assert_allclose(t.oracle_nll_without, expected_without, rtol=1e-6)
    # the oracle that sees exactly c tokens
    assert t.oracle_loss(6)[11] == 0 and t.oracle_loss(5)[11] == pytest.approx(ln(1024))
    assert t.oracle_loss(7)[12] == 0 and t.oracle_loss(6)[12] == pytest.approx(ln(4096))


def test_background_follows_its_sparse_chain(text):
    """Each background symbol has exactly four successors, and the recorded cost is that step's."""
    bg = np.flatnonzero(text.role == BACKGROUND)
    perm = synthetic._language(SPEC)
    state = np.argsort(perm)[text.tokens[bg].astype(int)]
    delta = (state[1:] - state[:-1]) % SPEC.n_background
    assert set(np.unique(delta).tolist()) == {1, 2, 3, 4}
    np.testing.assert_allclose(text.oracle_nll_with[bg[1:]], -np.log(np.array(SPEC.step_probs))[delta - 1], rtol=1e-6)
    np.testing.assert_array_equal(text.needed_context[bg[1:]], np.diff(bg))
    freq = np.bincount(delta - 1, minlength=4) / len(delta)
    np.testing.assert_allclose(freq, SPEC.step_probs, atol=0.01)


def test_copies_are_resolved_by_their_needed_context(text):
    cv = np.flatnonzero(text.role == COPY_VALUE)
    need = text.needed_context[cv].astype(int)
    np.testing.assert_array_equal(text.tokens[cv], text.tokens[cv - need + 1])  # the source value
    np.testing.assert_array_equal(text.tokens[cv - 1], text.tokens[cv - need])  # its predecessor lines up
    ck = np.flatnonzero(text.role == COPY_KEY)
    src = ck - text.needed_context[ck]
    assert (text.role[src] == SOURCE_KEY).all()
    np.testing.assert_array_equal(text.tokens[ck], text.tokens[src])
    # induction resolves every copy: no other occurrence of the key between source and copy
    key_pos = np.flatnonzero(np.isin(text.role, (SOURCE_KEY, COPY_KEY)))
    keys = text.tokens[key_pos]
    previous = {}
    for p, k in zip(key_pos.tolist(), keys.tolist()):
        if text.role[p] == COPY_KEY:
            assert previous[k] == p - text.needed_context[p]
        previous[k] = p
    sv = np.flatnonzero(text.role == SOURCE_VALUE)
    hint = text.tokens[sv - SPEC.fact_len - 1].astype(int) - SPEC.n_background
    value = text.tokens[sv].astype(int) - (SPEC.n_background + SPEC.n_hints + SPEC.n_keys)
    np.testing.assert_array_equal(value // SPEC.values_per_hint, hint)


def test_documented_statistics(text):
    stats = text.stats()
    assert stats["fraction_copy_value"] == pytest.approx(SPEC.copy_fraction, abs=0.002)
    L = SPEC.fact_len
    assert stats["fraction_copy_key"] == pytest.approx(SPEC.copy_fraction / L, abs=0.001)
    assert stats["fraction_hint"] == pytest.approx(stats["fraction_copy_value"], abs=0.001)
    assert stats["fraction_source_value"] == pytest.approx(stats["fraction_copy_value"], abs=0.001)
    # distances spread uniformly over [min_distance, max_distance]: copied values need D + 1
    need = text.needed_context[text.role == COPY_VALUE]
    assert need.min() == SPEC.min_distance + 1 and need.max() == SPEC.max_context == 1000
    counts, _ = np.histogram(need, bins=10, range=(SPEC.min_distance + 1, SPEC.max_context + 1))
    assert counts.min() > 0.85 * counts.mean() and counts.max() < 1.15 * counts.mean()
    # every RECL grid step 100..1000 has context-starved tokens to gain
    for c in range(100, 1000, 100):
        assert ((need > c) & (need <= c + 100)).sum() > 0.05 * len(need)
    assert text.needed_context.max() == SPEC.max_context


def test_context_starved_tokens_are_the_hardest(text):
    """For a short-context model the top 10% hardest tokens are copied values, worth ln 4096 each."""
    loss = text.oracle_loss(50)
    top = np.argsort(-loss, kind="stable")[: len(loss) // 10]
    assert np.mean(text.role[top] == COPY_VALUE) > 0.99
    starved = (text.role == COPY_VALUE) & (text.needed_context > 50)
    assert np.allclose(loss[starved], math.log(4096))
    assert loss[~starved].max() < math.log(4096)


def test_oracle_loss_falls_with_context_and_bottoms_out(text):
    means = [text.oracle_loss(c).mean() for c in (0, 1, 10, 100, 500, 1000, 5000)]
    assert all(a >= b for a, b in zip(means, means[1:]))
    np.testing.assert_array_equal(text.oracle_loss(SPEC.max_context), text.oracle_nll_with)
    assert means[-1] == pytest.approx(float(text.oracle_nll_with.mean()))
    assert means[3] - means[-1] > 0.5  # long context is worth a lot


@pytest.mark.parametrize("name, horizon", [("synthetic-short", 200), ("synthetic-long", 3000), ("synthetic-local", 32)])
def test_variants_share_the_language_and_differ_in_horizon(name, horizon):
    spec = VARIANTS[name]
    t = generate(spec, 150_000, seed=0)
    assert t.needed_context.max() == spec.max_context == horizon
    assert spec.symbols() == SPEC.symbols()
    np.testing.assert_array_equal(synthetic._language(spec), synthetic._language(SPEC))


def test_spec_lookup_and_validation():
    assert get_spec("synthetic", max_context=400).max_context == 400
    with pytest.raises(TxlabError, match="Did you mean 'synthetic-long'"):
        get_spec("synthetic-lng")
    with pytest.raises(TxlabError, match="fact_len < min_distance"):
        get_spec("synthetic", max_context=3)
    with pytest.raises(TxlabError, match="must be positive"):
        generate(SPEC, 0)


def test_write_wikitext_format_reads_back_as_words_plus_eos(tmp_path):
    path = write_wikitext_format(tmp_path / "wiki.train.tokens", 1_050, seed=5, words_per_line=100)
    lines = path.read_text().split("\n")
    assert len(lines) == 12 and lines[-1] == "" and len(lines[10].split()) == 50
    expected_words = np.array(SPEC.symbols())[generate(SPEC, 1_050, seed=5).tokens].tolist()
    read = [w for block in _corpus_blocks(path, tqdm(disable=True)) for w in words(block, "eos")]
    assert [w for w in read if w != EOS] == expected_words
    assert read.count(EOS) == 11 and read[100] == EOS


@pytest.mark.parametrize("name, horizon", [("synthetic-small", 500), ("synthetic-small-short", 200), ("synthetic-small-local", 32)])
def test_small_language_keeps_the_process_with_fewer_symbols(name, horizon):
    spec = VARIANTS[name]
    assert (spec.n_keys, spec.n_values, spec.vocab_size) == (128, 512, 784)
    t = generate(spec, 100_000, seed=0)
    assert t.needed_context.max() == spec.max_context == horizon
    np.testing.assert_array_equal(synthetic._language(spec), synthetic._language(SPEC))  # same background chain
    # a copied value out of view (ln 512) still costs more than any other token (a source key: ln 128)
    starved = (t.role == COPY_VALUE) & (t.needed_context > 16)
    loss = t.oracle_loss(16)
    assert np.allclose(loss[starved], math.log(512)) and loss[~starved].max() < math.log(512)
    assert t.stats()["fraction_copy_value"] == pytest.approx(0.13, abs=0.003)
