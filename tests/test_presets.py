import pytest
import torch

from txlab.build import build_model
from txlab.config import update_dataclass
from txlab.errors import TxlabError
from txlab.presets import PRESETS, SIZES, resolve_preset
from txlab.zoo import known_vocab_size, list_models, parameter_count, run_config, run_dir


@pytest.mark.parametrize(
    "name, expected",
    [("xl151m", 151.1e6), ("xl-enwik8-12l", 41.1e6), ("xl-enwik8-24l", 277.2e6), ("xl128m", 128.0e6),
     ("qrnn", 153.9e6), ("lstm", 151.1e6)],
)
def test_paper_parameter_counts(name, expected):
    assert parameter_count(resolve_preset(name, "paper")) == pytest.approx(expected, rel=0.005)


def test_recurrent_baselines_match_the_xl_budget_at_cpu_size():
    xl = parameter_count(resolve_preset("xl151m", "cpu"))
    for name in ("qrnn", "lstm", "transformer128m", "xl128m-shaw", "xl128m-norecur"):
        assert parameter_count(resolve_preset(name, "cpu")) == pytest.approx(xl, rel=0.05), name


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


def test_run_config_layers_and_zoo_naming(tmp_path):
    path = tmp_path / "extra.yaml"
    path.write_text("model:\n  n_layer: 3\n")
    cfg = run_config("qrnn", "cpu", "tinyshakespeare", path, ["train.lr=0.01"])
    assert (cfg.model.family, cfg.model.n_layer, cfg.data.corpus, cfg.train.lr) == ("qrnn", 3, "tinyshakespeare", 0.01)
    assert run_dir(cfg).as_posix() == "results/models/qrnn-cpu-tinyshakespeare"
    with pytest.raises(TxlabError, match="needs a name"):
        run_dir(run_config(None))


def test_list_models_covers_every_preset_and_size(tmp_path):
    rows = list_models(root=tmp_path)
    assert {(r["name"], r["size"]) for r in rows} == {(n, s) for n in PRESETS for s in SIZES}
    assert not any(r["trained"] for r in rows)


@pytest.mark.parametrize("name", ["xl151m", "lstm", "qrnn", "transformer128m"])
def test_targets_of_another_shape_are_refused(name):
    cfg = resolve_preset(name, "tiny")
    model = build_model(update_dataclass(cfg.model, {"n_token": 50}))
    tokens = torch.randint(0, 50, (2, 4))
    with pytest.raises(TxlabError, match="must have the shape of tokens"):
        model(tokens, model.init_state(2), tokens[:, :3])
