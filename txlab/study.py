"""A study file (studies/*.yaml): its keys, its profiles, and profiles that extend one another.

Every study command (``txlab ablate``, ``recl``, ``speed``) reads its file through :func:`read_study`:

- the keys besides ``profiles`` are a dataclass of :func:`entry` fields, each saying what it takes in
  words and, optionally, a rule for its values; :func:`read_section` checks a mapping against it and
  keeps each value exactly as written (a study says what it means);
- a profile is the command's settings dataclass, whose fields are :func:`txlab.config.setting`'s: it
  is applied strictly, as a run configuration is, because the command line's ``--set`` goes over the
  same settings afterwards;
- a profile may say ``extends: <other profile>``: it starts from the other's settings (which may extend
  a third) and each setting it gives replaces the other's. An override list (a setting declared with
  ``setting(..., overrides=True)``, such as ``sets``: items ``<key>=<value>``) is merged by key instead:
  an item replaces the other profile's item of the same key where it stands, and an item of a new key
  comes after them. That is what applying the two lists one after the other would resolve to, so a
  profile can extend another's recipe and change one override of it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from txlab.config import field_types, read_yaml, update_dataclass
from txlab.errors import TxlabError, did_you_mean
from txlab.workspace import check_name

EXTENDS = "extends"
"""The profile key that names the profile it starts from."""


def entry(default: Any, expects: str, rule: Callable[[Any], str] | None = None) -> Any:
    """A key of a study file's section (:func:`read_section`): its default, what it takes in words (the error
    for a value of another type says it), and a ``rule`` that returns what is wrong with a value of the right
    type ('' when nothing is)."""
    meta = {"expects": expects, "rule": rule}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):  # a nested section: its own fields' defaults
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


def read_section(cls: type, raw: Any, where: str, what: str) -> Any:
    """A section of a study file (a mapping) as the dataclass ``cls`` whose fields are :func:`entry`'s: the one
    check of every section, by its declaration. Unknown keys are refused with the nearest valid ones, a value
    of another type than its annotation with what the key takes, one its rule rejects with the rule's words,
    each naming ``where`` (file, file:line); a key left out or empty (null) keeps its default."""
    names = [f.name for f in dataclasses.fields(cls)]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TxlabError(f"{where}: {what} must be a mapping with keys among {', '.join(names)}")
    for key in raw:
        if key not in names:
            raise did_you_mean(str(key), names, f"{what} key at {where}")
    hints = field_types(cls)
    values = {}
    for f in dataclasses.fields(cls):
        value = raw.get(f.name)
        if value is None:
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = read_section(hints[f.name], value, where, f.name)
            continue
        if not _is_of_type(value, hints[f.name]):
            raise TxlabError(f"{where}: {f.name} must be {f.metadata['expects']}, got {value!r}")
        problem = f.metadata["rule"](value) if f.metadata["rule"] else ""
        if problem:
            raise TxlabError(f"{where}: {problem}")
        values[f.name] = value
    return cls(**values)


def _is_of_type(value: Any, typ: Any) -> bool:
    """Whether a value read from YAML has the annotated type (no conversion: a study says what it means)."""
    origin, args = typing.get_origin(typ), typing.get_args(typ)
    if typ is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_is_of_type(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_is_of_type(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_is_of_type(k, args[0]) and _is_of_type(v, args[1]) for k, v in value.items())
    if typ in (int, float):
        return isinstance(value, (int, float) if typ is float else int) and not isinstance(value, bool)
    return isinstance(value, typ)


def read_study(path: str | Path, keys: type, profile: str, settings: Any) -> tuple[Any, Any]:
    """The one reader of a study file (every study command's): its keys besides ``profiles`` as the dataclass
    ``keys`` (:func:`read_section`), and ``settings`` (the command's settings dataclass, at its defaults)
    updated strictly with the chosen profile, after the profiles it extends. An unknown key or profile is
    refused with the nearest names."""
    data = read_yaml(path)
    valid = (*(f.name for f in dataclasses.fields(keys)), "profiles")
    unknown = set(data) - set(valid)
    if unknown:
        raise TxlabError(f"{path}: unknown key {sorted(unknown)[0]!r}; valid: {', '.join(valid)}")
    if isinstance(data.get("name"), str):  # a study's name names its output folders and files
        check_name(data["name"], f"{path}: name")
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict) or not profiles:
        raise TxlabError(f"{path}: 'profiles' must map profile names to settings")
    if profile not in profiles:
        raise did_you_mean(profile, profiles, f"profile in {path}")
    for name in _lineage(profiles, profile, path):
        settings = _apply_profile(settings, profiles[name] or {}, f"profiles.{name}.")
    return read_section(keys, {key: value for key, value in data.items() if key != "profiles"}, str(path), "study"), settings


def _lineage(profiles: dict[str, Any], profile: str, path: str | Path) -> list[str]:
    """``profile`` and the profiles it extends, the one it starts from first."""
    chain = [profile]
    while True:
        values = profiles[chain[-1]]
        parent = values.get(EXTENDS) if isinstance(values, dict) else None
        if parent is None:
            return chain[::-1]
        where = f"{path}: profiles.{chain[-1]}.{EXTENDS}"
        if not isinstance(parent, str) or parent not in profiles:
            raise did_you_mean(str(parent), profiles, f"profile at {where}")
        if parent in chain:
            raise TxlabError(f"{where}: the profiles extend one another in a cycle: {' -> '.join([*chain, parent])}")
        chain.append(parent)


def _apply_profile(settings: Any, values: Any, prefix: str) -> Any:
    """``settings`` with one profile's ``values`` applied strictly, its override lists merged by key."""
    if isinstance(values, dict):
        values = {key: value for key, value in values.items() if key != EXTENDS}
    updated = update_dataclass(settings, values, prefix=prefix)  # checks every value, and that values is a mapping
    merged = {f.name: merge_overrides(getattr(settings, f.name), getattr(updated, f.name))
              for f in dataclasses.fields(settings) if f.metadata.get("overrides") and f.name in values}
    return dataclasses.replace(updated, **merged)


def override_key(item: str) -> str:
    """What an override item sets: 'xl151m:model.clamp_len=12' -> 'xl151m:model.clamp_len'."""
    return item.partition("=")[0].strip()


def merge_overrides(first: list[str], then: list[str]) -> list[str]:
    """The override list ``first`` followed by ``then``, merged by key: the first item of ``then`` with a key that
    ``first`` has replaces the last item of ``first`` with that key, where it stands; every other item of ``then``
    comes after them, in its order. Read in order, the merged list sets what ``first + then`` sets."""
    merged, replaced = list(first), set()
    for item in then:
        key = override_key(item)
        same = [i for i, old in enumerate(first) if override_key(old) == key]
        if same and key not in replaced:
            merged[same[-1]] = item
            replaced.add(key)
        else:
            merged.append(item)
    return merged
