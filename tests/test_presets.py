import pytest
import torch

from txlab.config import update_dataclass
from txlab.data.registry import CORPORA
from txlab.errors import TxlabError
from txlab.models.build import build_model
from txlab.presets import PRESETS, SIZES, resolve_preset
from txlab.runs.zoo import known_vocab_size, list_models, parameter_count, run_config, run_dir


@pytest.mark.parametrize(
    "name, expected",
    [  # the models of the authors' run_*.sh scripts: the counts of their MemTransformerLM, exactly
     ("xl151m", 151_107_538), ("xl-wt103-large", 285_170_506), ("xl-enwik8-12l", 41_055_436), ("xl-enwik8-24l", 277_231_820),
     ("xl-text8-12l", 40_964_635), ("xl-text8-24l", 277_050_395), ("xl-lm1b-base", 357_812_082), ("xl-lm1b-large", 841_295_982),
     # shapes the scripts do not give (see docs/presets.md)
     ("xl128m", 128_007_688), ("qrnn", 153_886_638), ("lstm", 151_129_498), ("xl-ptb", 24_644_020)],
)
def test_paper_parameter_counts(name, expected):
    assert parameter_count(resolve_preset(name, "paper")) == expected


def test_the_large_wikitext_model_keeps_the_authors_head_projections():
    model = resolve_preset("xl-wt103-large", "paper").model
    assert (model.div_val, model.full_width_proj, model.tie_projs) == (4, True, [False, True, True, True])
    # without them it is the same function class with 2 x 1024^2 fewer parameters
    plain = update_dataclass(resolve_preset("xl-wt103-large", "paper"), {"model": {"full_width_proj": False}})
    assert parameter_count(resolve_preset("xl-wt103-large", "paper")) - parameter_count(plain) == 2 * 1024**2


@pytest.mark.parametrize("name, d_model", [("xl-lm1b-base", 1024), ("xl-lm1b-large", 1280)])
def test_the_one_billion_word_models_project_every_cluster_and_tie_no_projection(name, d_model):
    cfg = resolve_preset(name, "paper")
    m = cfg.model
    assert (m.adaptive, m.cutoffs, m.div_val, m.full_width_proj, m.tie_projs, m.tie_weight) == (
        True, [60_000, 100_000, 640_000], 4, True, False, True)
    # tying the three tail projections (as train.py does for WikiText-103) would share d_model x d_model/4^i each
    tied_tails = update_dataclass(cfg, {"model": {"tie_projs": [False, True, True, True]}})
    assert parameter_count(cfg) - parameter_count(tied_tails) == sum(d_model * (d_model // 4**i) for i in (1, 2, 3))


def test_the_text8_models_are_the_enwik8_models_on_27_characters():
    for text8, enwik8 in (("xl-text8-12l", "xl-enwik8-12l"), ("xl-text8-24l", "xl-enwik8-24l")):
        a, b = resolve_preset(text8, "paper"), resolve_preset(enwik8, "paper")
        assert (a.model, a.eval) == (b.model, b.eval) and (a.data.corpus, b.data.corpus) == ("text8", "enwik8")
        # the tied softmax and its bias: 177 fewer symbols of width d_model + 1
        assert parameter_count(b) - parameter_count(a) == (204 - 27) * (a.model.d_model + 1)
    # run_text8_large.sh gives no warm-up where run_enwik8_large.sh warms up for 4000 steps
    assert (resolve_preset("xl-text8-24l", "paper").train.warmup_steps, resolve_preset("xl-enwik8-24l", "paper").train.warmup_steps) == (0, 4000)


def test_every_paper_size_is_counted_without_data_on_a_registry_corpus():
    for name, preset in PRESETS.items():
        if "paper" in preset.sizes:
            corpus = resolve_preset(name, "paper").data.corpus
            assert corpus in CORPORA and known_vocab_size(corpus) is not None, name


def test_the_penn_treebank_model_is_the_papers_size_at_the_151m_models_layer():
    cfg, base = resolve_preset("xl-ptb", "paper"), resolve_preset("xl151m", "paper")
    layer = ("d_model", "n_head", "d_head", "d_inner")
    assert [getattr(cfg.model, k) for k in layer] == [getattr(base.model, k) for k in layer] and cfg.model.n_layer == 8
    assert 24e6 <= parameter_count(cfg) < 25e6  # Table 5: 24M
    assert parameter_count(update_dataclass(cfg, {"model": {"n_layer": 7}})) < 23e6  # one layer fewer is further from it
    assert (cfg.data.corpus, cfg.model.adaptive, cfg.model.tgt_len, cfg.model.mem_len, cfg.model.dropout, cfg.train.batch_size) == (
        "ptb", False, 70, 70, 0.4, 20)
    assert (cfg.eval.tgt_len, cfg.eval.mem_len, cfg.eval.clamp_len, cfg.eval.same_length) == (70, 280, 0, True)


def test_recurrent_baselines_match_the_xl_budget_at_cpu_size():
    xl = parameter_count(resolve_preset("xl151m", "cpu"))
    for name in ("qrnn", "lstm", "transformer128m", "xl128m-norecur"):
        assert parameter_count(resolve_preset(name, "cpu")) == pytest.approx(xl, rel=0.05), name
    # Shaw et al.'s learned distance embeddings (per layer) weigh more beside the small language's 100K embedding
    assert parameter_count(resolve_preset("xl128m-shaw", "cpu")) == pytest.approx(xl, rel=0.07)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_and_runs_at_tiny_size(name):
    cfg = resolve_preset(name, "tiny")
    assert (cfg.preset, cfg.size) == (name, "tiny")
    model = build_model(update_dataclass(cfg.model, {"n_token": known_vocab_size(cfg.data.corpus)}))
    tokens = torch.randint(0, cfg.model.n_token or 50, (2, cfg.model.tgt_len))
    out = model(tokens, model.init_state(2), tokens)
    assert out.nll.shape == (2, cfg.model.tgt_len) and torch.isfinite(out.nll).all()


def test_variants_differ_only_where_they_should():
    base, shaw, norecur = (resolve_preset(n, "cpu").model for n in ("xl128m", "xl128m-shaw", "xl128m-norecur"))
    assert update_dataclass(shaw, {"pos_enc": "ours"}) == base
    assert update_dataclass(norecur, {"mem_len": base.mem_len}) == base
    vanilla = resolve_preset("transformer128m", "paper").model
    assert (vanilla.family, vanilla.pos_enc, vanilla.max_len, vanilla.mem_len) == ("vanilla", "alrfou", 128, 0)


def test_unknown_names_suggest_the_nearest():
    with pytest.raises(TxlabError, match="Did you mean 'xl151m'"):
        resolve_preset("xl151", "cpu")
    with pytest.raises(TxlabError, match="size"):
        resolve_preset("xl151m", "huge")


def test_run_config_layers_and_zoo_naming(tmp_path, monkeypatch):
    path = tmp_path / "extra.yaml"
    path.write_text("model:\n  n_layer: 3\n")
    cfg = run_config("qrnn", "cpu", "tinyshakespeare", path, ["train.lr=0.01"])
    assert (cfg.model.family, cfg.model.n_layer, cfg.data.corpus, cfg.train.lr) == ("qrnn", 3, "tinyshakespeare", 0.01)
    monkeypatch.setenv("TXLAB_HOME", ".")  # the repository's evidence: its committed models root
    assert run_dir(cfg).as_posix() == "results/models/qrnn-cpu-tinyshakespeare"
    monkeypatch.delenv("TXLAB_HOME")
    assert run_dir(cfg).as_posix() == "runs/results/models/qrnn-cpu-tinyshakespeare"
    with pytest.raises(TxlabError, match="needs a name"):
        run_dir(run_config(None))


def test_list_models_covers_every_preset_and_size(tmp_path):
    rows = list_models(root=tmp_path)
    assert {(r["name"], r["size"]) for r in rows} == {(n, s) for n in PRESETS for s in SIZES if s in PRESETS[n].sizes}
    assert all(set(PRESETS[n].sizes) == set(SIZES) for n in PRESETS if n not in ("gpt2", "llama"))  # the paper's models come in every size
    assert not any(r["trained"] for r in rows)


@pytest.mark.parametrize("name", ["xl151m", "lstm", "qrnn", "transformer128m"])
def test_targets_of_another_shape_are_refused(name):
    cfg = resolve_preset(name, "tiny")
    model = build_model(update_dataclass(cfg.model, {"n_token": 50}))
    tokens = torch.randint(0, 50, (2, 4))
    with pytest.raises(TxlabError, match="must have the shape of tokens"):
        model(tokens, model.init_state(2), tokens[:, :3])


# The authors' pytorch/run_*.sh (train and eval branches): shape, training and test-time settings
# (eval.py's segment, memory, clamp_len and streams; clamp_len 0 is none, eval.py's default).
AUTHORS_SCRIPTS = {
    "xl151m": ("run_wt103_base.sh", dict(n_layer=16, d_model=410, n_head=10, d_head=41, d_inner=2100, dropout=0.1, dropatt=0.0,
               tgt_len=150, mem_len=150, div_val=1), dict(batch_size=60, max_steps=200_000, warmup_steps=0), (64, 640, 400, 10)),
    "xl-wt103-large": ("run_wt103_large.sh", dict(n_layer=18, d_model=1024, n_head=16, d_head=64, d_inner=4096, dropout=0.2,
                       dropatt=0.2, tgt_len=384, mem_len=384, div_val=4), dict(batch_size=128, max_steps=4_000_000, warmup_steps=16_000),
                       (128, 1600, 1000, 10)),
    "xl-enwik8-12l": ("run_enwik8_base.sh", dict(n_layer=12, d_model=512, n_head=8, d_head=64, d_inner=2048, dropout=0.1, dropatt=0.0,
                      tgt_len=512, mem_len=512), dict(batch_size=22, max_steps=400_000, warmup_steps=0), (80, 2100, 820, 10)),
    "xl-enwik8-24l": ("run_enwik8_large.sh", dict(n_layer=24, d_model=1024, n_head=8, d_head=128, d_inner=3072, dropout=0.15,
                      dropatt=0.15, tgt_len=768, mem_len=768), dict(batch_size=64, max_steps=400_000, warmup_steps=4000), (128, 3800, 1000, 10)),
    "xl-text8-12l": ("run_text8_base.sh", dict(n_layer=12, d_model=512, n_head=8, d_head=64, d_inner=2048, dropout=0.1, dropatt=0.0,
                     tgt_len=512, mem_len=512), dict(batch_size=22, max_steps=400_000, warmup_steps=0), (80, 2100, 820, 10)),
    "xl-text8-24l": ("run_text8_large.sh", dict(n_layer=24, d_model=1024, n_head=8, d_head=128, d_inner=3072, dropout=0.15,
                     dropatt=0.15, tgt_len=768, mem_len=768), dict(batch_size=64, max_steps=400_000, warmup_steps=0), (128, 3800, 1000, 10)),
    "xl-lm1b-base": ("run_lm1b_base.sh", dict(n_layer=18, d_model=1024, n_head=8, d_head=128, d_inner=4096, dropout=0.0, dropatt=0.0,
                     tgt_len=32, mem_len=32, div_val=4), dict(batch_size=224, max_steps=500_000, warmup_steps=20_000), (32, 128, 0, 64)),
    "xl-lm1b-large": ("run_lm1b_large.sh", dict(n_layer=24, d_model=1280, n_head=16, d_head=80, d_inner=8192, dropout=0.05,
                      dropatt=0.05, tgt_len=32, mem_len=32, div_val=4), dict(batch_size=512, max_steps=1_200_000, warmup_steps=30_000),
                      (32, 128, 0, 8)),
}


@pytest.mark.parametrize("name", sorted(AUTHORS_SCRIPTS))
def test_script_presets_train_and_evaluate_as_the_authors_scripts(name):
    _, model, train, (eval_tgt, eval_mem, eval_clamp, eval_streams) = AUTHORS_SCRIPTS[name]
    cfg = resolve_preset(name, "paper")
    assert {k: getattr(cfg.model, k) for k in model} == model
    assert {k: getattr(cfg.train, k) for k in train} == train
    # train.py's defaults: Adam at 2.5e-4, cosine to 0, clipping at 0.25, validation every 4000 steps
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.scheduler, cfg.train.lr_min, cfg.train.clip, cfg.train.eval_interval) == (
        "adam", 2.5e-4, "cosine", 0.0, 0.25, 4000)
    # eval.py: its test-time lengths, same_length, its streams (10 unless the script says)
    e = cfg.eval
    assert (e.tgt_len, e.mem_len, e.clamp_len, e.same_length, e.batch_size) == (eval_tgt, eval_mem, eval_clamp, True, eval_streams)
