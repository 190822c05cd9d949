"""Study files (txlab.study): one reader for every study command, sections checked by their declaration,
and profiles that extend one another resolving to exactly the settings they had when written out in full."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from txlab.config import RunConfig, apply_overrides, setting, update_dataclass
from txlab.drivers import ablate_study, speed
from txlab.drivers.recl import settings as recl
from txlab.errors import TxlabError
from txlab.measure.speed import SpeedSettings
from txlab.study import entry, merge_overrides, override_key, read_section, read_study

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Keys:
    name: str = entry("", "text")


@dataclasses.dataclass(frozen=True)
class Settings:
    size: str = setting("cpu", "Size.")
    blocks: int = setting(8, "Blocks.")
    seeds: list[int] = setting([], "Seeds (a plain list: replaced whole).")
    sets: list[str] = setting([], "Overrides (merged by key).", overrides=True)


def test_read_study_checks_keys_and_applies_the_profile_strictly(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("name: demo\nprofiles:\n  cpu: {blocks: 4}\n  paper: {size: paper}\n")
    keys, settings = read_study(path, Keys, "cpu", Settings())
    assert keys == Keys("demo") and settings == Settings(blocks=4)
    with pytest.raises(TxlabError, match="Did you mean 'paper'"):
        read_study(path, Keys, "papr", Settings())
    path.write_text("name: demo\nextra: 1\nprofiles:\n  cpu: {}\n")
    with pytest.raises(TxlabError, match="unknown key 'extra'; valid: name, profiles"):
        read_study(path, Keys, "cpu", Settings())
    path.write_text("profiles:\n  cpu: {blocs: 4}\n")
    with pytest.raises(TxlabError, match="profiles.cpu.blocs"):
        read_study(path, Keys, "cpu", Settings())


def test_a_study_section_is_checked_by_its_declaration():
    @dataclasses.dataclass(frozen=True)
    class Base:
        preset: str = entry("", "a preset name")

    @dataclasses.dataclass(frozen=True)
    class Section:
        name: str = entry("", "text")
        lengths: list[int] = entry([8], "a list of integers", lambda v: f"lengths must be >= 1, got {sorted(v)}" if min(v) < 1 else "")
        base: Base = entry(Base, "a mapping with the key preset")

    assert read_section(Section, {"name": "a", "base": {"preset": "xl"}}, "f.yaml", "study") == Section("a", [8], Base("xl"))
    assert read_section(Section, {"name": None, "lengths": None}, "f.yaml", "study") == Section() == read_section(Section, None, "f.yaml", "study")
    for raw, message in [
        ({"lengths": [1, "x"]}, "f.yaml: lengths must be a list of integers, got [1, 'x']"),
        ({"lengths": [True]}, "f.yaml: lengths must be a list of integers, got [True]"),
        ({"lengths": [4, 0]}, "f.yaml: lengths must be >= 1, got [0, 4]"),
        ({"lenghts": [4]}, "unknown study key at f.yaml 'lenghts'. Did you mean 'lengths'?"),
        ({"base": {"presett": "xl"}}, "unknown base key at f.yaml 'presett'. Did you mean 'preset'?"),
        ({"base": "xl"}, "f.yaml: base must be a mapping with keys among preset"),
        ([1], "f.yaml: study must be a mapping with keys among name, lengths, base"),
    ]:
        with pytest.raises(TxlabError) as refused:
            read_section(Section, raw, "f.yaml", "study")
        assert str(refused.value).startswith(message), (raw, str(refused.value))


EXTENDING = """
name: demo
profiles:
  base: {size: tiny, blocks: 4, seeds: [0, 1], sets: [a.x=1, a.y=2, a.x=3]}
  child: {extends: base, seeds: [2], sets: [a.x=4, a.z=5]}
  grandchild: {extends: child, blocks: 6}
"""


def test_an_extending_profile_starts_from_the_other_and_its_own_keys_replace_the_others(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(EXTENDING)
    base = read_study(path, Keys, "base", Settings())[1]
    assert base == Settings("tiny", 4, [0, 1], ["a.x=1", "a.y=2", "a.x=3"])  # a profile's own list is kept as written
    # a plain list is replaced whole; an override replaces the other's of its key where it stands, a new one comes after
    assert read_study(path, Keys, "child", Settings())[1] == Settings("tiny", 4, [2], ["a.x=1", "a.y=2", "a.x=4", "a.z=5"])
    assert read_study(path, Keys, "grandchild", Settings())[1] == Settings("tiny", 6, [2], ["a.x=1", "a.y=2", "a.x=4", "a.z=5"])


@pytest.mark.parametrize("profiles, message", [
    ("a: {extends: b}\n  b: {extends: a}", r"study.yaml: profiles.b.extends: the profiles extend one another in a cycle: a -> b -> a"),
    ("a: {extends: a}", r"profiles.a.extends: the profiles extend one another in a cycle: a -> a"),
    ("a: {extends: bse}\n  base: {}", r"unknown profile at .*study.yaml: profiles.a.extends 'bse'. Did you mean 'base'\?"),
    ("a: {extends: [base]}\n  base: {}", r"unknown profile at .*profiles.a.extends"),
    ("a: {extends: base}\n  base: {blocs: 3}", r"profiles.base.blocs"),
])
def test_a_cycle_or_an_unknown_profile_to_extend_is_refused_with_one_clear_error(tmp_path, profiles, message):
    path = tmp_path / "study.yaml"
    path.write_text(f"profiles:\n  {profiles}\n")
    with pytest.raises(TxlabError, match=message):
        read_study(path, Keys, "a", Settings())


@pytest.mark.parametrize("first, then", [
    ([], ["model.d_model=64", "model.d_model=32"]),
    (["train.lr=0.1", "model.n_layer=2", "train.lr=0.2"], ["train.lr=0.3", "train.lr=0.4", "model.d_model=64"]),
    (["model.n_layer=2"], ["model.n_head=2", "model.n_layer=3"]),
])
def test_merged_overrides_set_what_the_two_lists_one_after_the_other_set(first, then):
    merged = merge_overrides(first, then)
    assert apply_overrides(RunConfig(), merged) == apply_overrides(RunConfig(), first + then)
    assert [override_key(item) for item in merged[: len(first)]] == [override_key(item) for item in first]  # the first list's keys stay where they stand


STUDY_KINDS = {
    "table6.yaml": (ablate_study.StudyFile, ablate_study.AblationSettings),
    "table7.yaml": (ablate_study.StudyFile, ablate_study.AblationSettings),
    "table10.yaml": (ablate_study.StudyFile, ablate_study.AblationSettings),
    "table8.yaml": (recl.ReclStudyFile, recl.ReclSettings),
    "table9.yaml": (speed.SpeedStudyFile, SpeedSettings),
}


LATER_PROFILES = {"table8.yaml:cpu-recall-long-again": ("cpu-recall-long", {"models_root": "results/models-recall-cpu-again"}),
                  "table8.yaml:cpu-text-again": ("cpu-text", {"models_root": "results/models-text-cpu-again"}),
                  "table8.yaml:cpu-latches-again": ("cpu-latches", {"models_root": "results/models-latches-cpu-again"}),
                  "table8.yaml:cpu-recall-again": ("cpu-recall", {"models_root": "results/models-cpu-recall-again"})}
"""Profiles added to those study files later: each extends a profile of that time and changes only what it names (the
same recipes trained again into another folder)."""

LATER_STUDIES = ("recl-words.yaml",)
"""Study files written after profiles could extend others (tests/test_recl_words.py reads recl-words.yaml)."""


def test_every_profile_of_every_study_resolves_to_the_settings_it_had_before_profiles_could_extend_others():
    """tests/golden/study-profiles.json holds every profile's resolved settings as read before `extends` existed, when
    each profile wrote its recipe out in full: the profiles that now extend another resolve to exactly those (and so
    do their run names, configurations and results)."""
    golden = json.loads((ROOT / "tests" / "golden" / "study-profiles.json").read_text())
    # every study file is either one of that time or a later one that never wrote a recipe out twice
    assert sorted(golden) == sorted(STUDY_KINDS)
    assert sorted(p.name for p in (ROOT / "studies").glob("*.yaml")) == sorted([*STUDY_KINDS, *LATER_STUDIES])
    extending = []
    for name, (keys, settings) in STUDY_KINDS.items():
        path = ROOT / "studies" / name
        profiles = yaml.safe_load(path.read_text())["profiles"]
        assert [p for p in profiles if f"{name}:{p}" not in LATER_PROFILES] == list(golden[name]), name
        for profile, values in profiles.items():
            base, changes = LATER_PROFILES.get(f"{name}:{profile}", (profile, {}))
            if changes:  # a later profile: the one it extends, and only what it names changed
                assert values == {"extends": base, **changes}, (name, profile)
            expected = update_dataclass(settings(), {**golden[name][base], **changes})
            assert read_study(path, keys, profile, settings())[1] == expected, (name, profile)
            extending += [f"{name}:{profile}"] * ("extends" in values and not changes)
    # the recipes the study files share: cpu-latches is cpu-recall-long's but for its corpus, runs folder and LSTM name
    assert extending == ["table6.yaml:cpu-recall", "table7.yaml:cpu-recall", "table10.yaml:cpu-recall", "table8.yaml:cpu-latches"]
