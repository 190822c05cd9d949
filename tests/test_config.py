import dataclasses

import pytest
import yaml

from txlab.config import (
    ModelConfig,
    RunConfig,
    apply_overrides,
    field_doc,
    load_config,
    parse_override,
    save_config,
    to_dict,
)
from txlab.errors import TxlabError


def test_every_field_is_documented():
    for cls in (RunConfig, *(type(getattr(RunConfig(), f.name)) for f in dataclasses.fields(RunConfig) if f.name in ("model", "data", "train", "eval"))):
        for f in dataclasses.fields(cls):
            assert field_doc(cls, f.name).strip(), f"{cls.__name__}.{f.name} has no doc"


def test_override_sets_typed_values():
    cfg = apply_overrides(
        RunConfig(),
        ["model.d_model=256", "train.lr=1e-3", "model.same_length=true", "model.cutoffs=[10, 20]", "data.corpus=ptb"],
    )
    assert cfg.model.d_model == 256 and isinstance(cfg.model.d_model, int)
    assert cfg.train.lr == pytest.approx(1e-3) and isinstance(cfg.train.lr, float)
    assert cfg.model.same_length is True
    assert cfg.model.cutoffs == [10, 20]
    assert cfg.data.corpus == "ptb"
    # the original is untouched: configs are values
    assert RunConfig().model.d_model == ModelConfig().d_model


def test_integer_given_for_float_is_accepted_but_not_the_reverse():
    assert apply_overrides(RunConfig(), ["train.lr=1"]).train.lr == 1.0
    with pytest.raises(TxlabError, match="model.n_layer.*integer"):
        apply_overrides(RunConfig(), ["model.n_layer=2.5"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.d_modle=3", r"unknown config key 'model.d_modle'.*Did you mean d_model"),
        ("modle.d_model=3", r"unknown config key 'modle'.*Did you mean model"),
        ("model.same_length=maybe", r"model.same_length.*true or false"),
        ("model.pos_enc=rope", r"model.pos_enc.*one of ours, shaw, vaswani, alrfou"),
        ("model.cutoffs=5", r"model.cutoffs.*list"),
        ("model.d_model", r"section.key=value"),
        ("model.d_model.x=1", r"'model.d_model' is a value, not a section"),
    ],
)
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(TxlabError, match=message):
        apply_overrides(RunConfig(), [override])


def test_parse_override_uses_yaml_scalars():
    assert parse_override("a.b=null") == (["a", "b"], None)
    assert parse_override("a=x=y") == (["a"], "x=y")


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  n_layer: 6\n  pos_enc: shaw\ntrain:\n  lr: 0.001\n")
    cfg = load_config(path, ["model.n_layer=8"])
    assert (cfg.model.n_layer, cfg.model.pos_enc, cfg.train.lr) == (8, "shaw", 0.001)


def test_yaml_errors_give_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  n_layer: 6\n  d_model: [1, 2\n")
    with pytest.raises(TxlabError, match=r"bad.yaml:\d+:\d+"):
        load_config(path)
    path.write_text("model:\n  n_lyer: 6\n")
    with pytest.raises(TxlabError, match="model.n_lyer"):
        load_config(path)
    with pytest.raises(TxlabError, match="no such file"):
        load_config(tmp_path / "missing.yaml")


def test_saved_config_round_trips(tmp_path):
    cfg = apply_overrides(RunConfig(), ["model.cutoffs=[5, 9]", "name=demo"])
    path = save_config(cfg, tmp_path / "run" / "config.yaml")
    assert yaml.safe_load(path.read_text()) == to_dict(cfg)
    assert load_config(path) == cfg
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_saved_files_are_readable_by_everyone_the_umask_allows(tmp_path):
    import os

    path = save_config(RunConfig(), tmp_path / "config.yaml")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_read_study_checks_keys_and_applies_the_profile_strictly(tmp_path):
    import dataclasses as dc

    from txlab.config import read_study

    @dc.dataclass
    class Settings:
        size: str = "cpu"
        blocks: int = 8

    path = tmp_path / "study.yaml"
    path.write_text("name: demo\nprofiles:\n  cpu: {blocks: 4}\n  paper: {size: paper}\n")
    data, settings = read_study(path, ("name",), "cpu", Settings())
    assert data["name"] == "demo" and settings == Settings(blocks=4)
    with pytest.raises(TxlabError, match="Did you mean 'paper'"):
        read_study(path, ("name",), "papr", Settings())
    path.write_text("name: demo\nextra: 1\nprofiles:\n  cpu: {}\n")
    with pytest.raises(TxlabError, match="unknown key 'extra'; valid: name, profiles"):
        read_study(path, ("name",), "cpu", Settings())
    path.write_text("profiles:\n  cpu: {blocs: 4}\n")
    with pytest.raises(TxlabError, match="profiles.cpu.blocs"):
        read_study(path, (), "cpu", Settings())
