import dataclasses
from pathlib import Path

import pytest
import yaml

from txlab.config import ModelConfig, RunConfig, apply_overrides, check_fields, field_doc, load_config, parse_override, save_config, to_dict, to_yaml
from txlab.errors import TxlabError

ROOT = Path(__file__).resolve().parents[1]


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


def test_null_is_refused_where_the_setting_cannot_be_unset():
    with pytest.raises(TxlabError, match="'model.tie_weight' expects true/false or a list of true/false, got None"):
        apply_overrides(RunConfig(), ["model.tie_weight=null"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.d_modle=3", r"unknown config key 'model.d_modle'.*Did you mean 'd_model'"),
        ("modle.d_model=3", r"unknown config key 'modle'.*Did you mean 'model'"),
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


def test_libyaml_writes_and_reads_configs_and_study_files_as_pyyaml_does():
    # txlab emits and parses YAML with libyaml where PyYAML has it, for speed: the same text out, the same values in
    from txlab.fileio import load_yaml
    from txlab.presets import PRESETS
    from txlab.runs.zoo import run_config

    configs = [run_config(name, size) for name, preset in PRESETS.items() for size in preset.sizes]
    configs.append(apply_overrides(RunConfig(), ["name=naïve – unicode", "model.cutoffs=[5, 9]", "train.lr=1e-300", "data.text=" + "x" * 200]))
    for cfg in configs:
        assert to_yaml(cfg) == yaml.safe_dump(to_dict(cfg), sort_keys=False)
    for path in [*ROOT.glob("studies/*.yaml"), *ROOT.glob("results/ablate/*/study.yaml")]:
        assert load_yaml(path.read_text(), str(path)) == yaml.safe_load(path.read_text()), path


def test_saved_files_are_readable_by_everyone_the_umask_allows(tmp_path):
    import os

    path = save_config(RunConfig(), tmp_path / "config.yaml")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# --------------------------------------------------------------------------------------------------
# Declared ranges, and the property: any value resolves to a valid config or is a TxlabError


def _leaf_fields(cls=RunConfig, prefix=""):
    """(dotted key, field) of every value field of the config tree."""
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default_factory() if callable(f.default_factory) else f.default):
            yield from _leaf_fields(type(f.default_factory()), f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


def _is_numeric(annotation) -> bool:
    text = str(annotation)
    return "int" in text or "float" in text


def test_every_numeric_field_declares_its_range():
    from txlab.drivers.ablate_study import AblationSettings
    from txlab.drivers.recl.settings import ReclSettings
    from txlab.measure.speed import SpeedSettings

    undeclared = [key for key, f in _leaf_fields() if _is_numeric(f.type) and f.metadata.get("range") is None]
    for settings in (AblationSettings, ReclSettings, SpeedSettings):
        undeclared += [f"{settings.__name__}.{f.name}" for f in dataclasses.fields(settings)
                       if _is_numeric(f.type) and f.metadata.get("range") is None]
    assert undeclared == []


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.eval_interval=0", r"train.eval_interval must be >= 1, got 0"),
        ("train.log_interval=0", r"train.log_interval must be >= 1"),
        ("train.max_steps=0", r"train.max_steps must be >= 1"),
        ("model.n_head=0", r"model.n_head must be >= 1"),
        ("model.dropout=2.0", r"model.dropout must be in \[0, 1\), got 2.0"),
        ("model.dropatt=1", r"model.dropatt must be in \[0, 1\)"),
        ("train.lr=.nan", r"train.lr must be > 0, got nan"),
        ("train.clip=.inf", r"train.clip must be >= 0, got inf"),
        ("eval.batch_size=0", r"eval.batch_size must be >= 1"),
        ("eval.mem_len=-7", r"eval.mem_len must be >= 0, or -1, got -7"),
        ("model.cutoffs=[10, 0]", r"model.cutoffs must be >= 1, got 0"),
        ("train.seed=-1", r"train.seed must be in \[0, "),
    ],
)
def test_out_of_range_values_name_their_key(override, message):
    with pytest.raises(TxlabError, match=message):
        apply_overrides(RunConfig(), [override])


def test_special_values_stay_allowed():
    cfg = apply_overrides(RunConfig(), ["eval.tgt_len=-1", "eval.mem_len=0", "model.mem_len=0", "train.clip=0"])
    assert (cfg.eval.tgt_len, cfg.eval.mem_len, cfg.model.mem_len, cfg.train.clip) == (-1, 0, 0, 0.0)


def test_study_settings_go_through_the_same_checks(tmp_path):
    from txlab.drivers.ablate_study import load_study
    from txlab.drivers.recl.groups import resolve_groups
    from txlab.drivers.speed import resolve_study

    with pytest.raises(TxlabError, match="n_boot must be >= 0, got -1"):
        resolve_groups(["xl151m"], None, "cpu", None, sets=["n_boot=-1"])
    with pytest.raises(TxlabError, match="batch_size must be >= 1, got 0"):
        resolve_groups(["xl151m"], None, "cpu", None, sets=["batch_size=0"])
    with pytest.raises(TxlabError, match="repeats must be >= 1"):
        resolve_study(None, "", [100], sets=["repeats=0"])
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nrows: [{id: a, preset: xl151m}]\nprofiles: {cpu: {eval_tokens: -5}}\n")
    with pytest.raises(TxlabError, match=r"profiles.cpu.eval_tokens must be >= 0, got -5"):
        load_study(study, "cpu")


_VALUES = [
    -(10**12), -7, -1, 0, 1, 2, 3, 8, 17, 10**6, 10**15, 2**64,
    float("nan"), float("inf"), float("-inf"), -0.5, 0.0, 1e-30, 0.3, 0.999, 1.0, 2.5, 1e300,
    "", "x", "ours", "1e-3", "cpu", "full", True, False, None, [], [0], [1, 2], [4, 2], [3, 5], ["a"], [[1]], {"a": 1},
]


def _random_value(rng, f):
    """Half the time any value at all, half the time one of the field's type near the tiny sizes."""
    if rng.random() < 0.5:
        return _VALUES[rng.integers(len(_VALUES))]
    if f.metadata.get("choices"):
        return str(rng.choice(f.metadata["choices"]))
    text = str(f.type)
    if "bool" in text:
        return bool(rng.integers(2))
    if "list" in text:
        return sorted(int(x) for x in rng.integers(1, 40, size=rng.integers(0, 3)))
    if "float" in text:
        return float(rng.choice([0.0, rng.random(), 1e-3]))
    if "int" in text:
        return int(rng.integers(-1, 12))
    return str(rng.choice(["", "x"]))


def _exercise(cfg):
    """Resolve ``cfg`` as training does (vocabulary from a corpus, the memory check), then, when it is
    small, build it and run one training and one evaluation step: a valid config must work."""
    import types

    import torch

    from txlab.models.build import build_model, count_model
    from txlab.runs.capacity import check_fits, step_bytes
    from txlab.runs.evaluate import evaluation_context, segment_loss
    from txlab.runs.train import resolve_for_corpus, training_context

    cfg = resolve_for_corpus(cfg, types.SimpleNamespace(n_token=cfg.model.n_token or 40, name="synthetic"))
    check_fields(cfg)
    m, t = cfg.model, cfg.train
    rows = t.batch_size // t.grad_accum
    check_fits(m, rows, m.tgt_len, m.mem_len, training=True, device="cpu", what="training")
    eval_len, context = evaluation_context(m, cfg.eval)
    if count_model(m).parameters > 3e5 or step_bytes(m, rows, m.tgt_len, m.mem_len, training=True) > 2e7 or max(m.tgt_len, eval_len) > 64 \
            or max(m.mem_len, context.mem_len, m.max_len, m.clamp_len) > 256 or rows > 8:
        return
    model = build_model(m)
    model.set_context(training_context(m))
    tokens = torch.randint(m.n_token, (rows, m.tgt_len + 1))
    out = model(tokens[:, :-1], model.init_state(rows), tokens[:, 1:])
    segment_loss(out.nll, t.loss).backward()
    model.eval()
    model.set_context(context)
    with torch.no_grad():
        model(tokens[:, :eval_len], model.init_state(rows), tokens[:, 1 : eval_len + 1])


@pytest.mark.parametrize("compiling", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["layers-not-compiled", "layers-compiled"])
@pytest.mark.parametrize("preset", ["xl151m", "transformer128m", pytest.param("xl128m-shaw", marks=pytest.mark.slow), "lstm",
                                    pytest.param("qrnn", marks=pytest.mark.slow)])  # one per family in the default run
def test_any_value_resolves_to_a_working_config_or_is_a_txlab_error(preset, compiling, monkeypatch):
    """The property, from a seeded generator: 1-3 random values for random keys of a tiny preset.

    A trial that draws model.compile=true builds and runs its model; in the default run without
    compiling the layers (torch.compile takes 25-60 s in a fresh process), in the slow run compiled
    (tests/test_model.py checks that a compiled model computes what the eager one does, also slow)."""
    import numpy as np
    import torch

    from txlab.presets import resolve_preset

    if not compiling:
        monkeypatch.setattr(torch.nn.Module, "compile", lambda self, *args, **kwargs: None)

    rng = np.random.default_rng(20)
    base = resolve_preset(preset, "tiny")
    fields = [(key, f) for key, f in _leaf_fields() if not key.startswith("data.") and key not in ("train.device", "train.tensorboard", "train.wandb")]
    for trial in range(150):
        changes = {fields[i][0]: _random_value(rng, fields[i][1]) for i in rng.choice(len(fields), size=rng.integers(1, 4), replace=False)}
        overrides = [f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}" for key, value in changes.items()]
        try:
            _exercise(load_config(None, overrides, base=base))
        except TxlabError:
            pass
        except Exception as err:  # noqa: BLE001 - the property: nothing but TxlabError
            raise AssertionError(f"trial {trial}: {overrides} raised {type(err).__name__}: {err}") from err
