"""`txlab speed`'s driver: a speed study (studies/table9.yaml) or the command line, read into the
settings of the Table 9 measurement, and the plan printed before it runs.

The measurement itself, and the :class:`~txlab.measure.speed.SpeedSettings` it takes, are txlab.measure.speed: a
library call (``speed_table``) that other code and the benchmarks use without any study file. This
module does for `txlab speed` what txlab.drivers.ablate and txlab.drivers.recl do for theirs: the
study's profile through :func:`txlab.study.read_study`, then the command line's options and
``--set`` through :func:`txlab.config.override_settings`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from txlab.config import override_settings
from txlab import devices
from txlab.errors import TxlabError
from txlab.measure.speed import DEFAULT_GPU_BATCH, PAPER_ATTN_LENS, PRESET, SpeedSettings, check_request, timed_config, vanilla_round_calls
from txlab.runs.evaluate import evaluation_context
from txlab.runs.plan import Plan, format_seconds, is_long_on_cpu, machine_gflops, model_counts, quickest, seconds_for, smaller_sizes
from txlab.study import entry, read_study
from txlab.tables import count_label


@dataclass(frozen=True)
class SpeedStudy:
    """What one `txlab speed` invocation measures: output file stem, attention lengths, profile, settings."""

    name: str
    attn_lens: list[int]
    profile: str
    settings: SpeedSettings


@dataclass(frozen=True)
class SpeedStudyFile:
    """A speed study file's keys besides ``profiles`` (txlab.study.read_section checks them)."""

    name: str = entry("", "text (the stem of the files it writes)")
    attn_lens: list[int] = entry(list(PAPER_ATTN_LENS), "a list of integers")


def load_study(path: str | Path, profile: str) -> SpeedStudy:
    """Read a speed study (see studies/table9.yaml for the format) and pick one profile.

    The study's name is ``<name in the file>-<profile>``, the stem of the files it writes.
    """
    study, settings = read_study(path, SpeedStudyFile, profile, SpeedSettings())
    return SpeedStudy(f"{study.name or Path(path).stem}-{profile}", study.attn_lens, profile, settings)


NAMED_SETTINGS = ("run", "size", "device", "threads", "batch_size", "tgt_len", "stride", "eval_cache", "attn_kernel")
"""Settings that change what is timed, and so the table's name when the command line sets them apart
from the study (budget_s, repeats, warmup and seed change only how precisely it is timed)."""


def name_part(key: str, value: Any) -> str:
    """How a setting reads in a table's name: '-run-xl128m-cpu-attention', '-1thread', '-batch4', '-tiny', '-sdpa'."""
    if key == "run":
        return f"-run-{Path(str(value).rstrip('/')).name}"
    if key == "threads":
        return f"-{value}thread" + ("s" if value != 1 else "")
    if key == "batch_size":
        return f"-batch{value}"
    if key == "tgt_len":
        return f"-tgt{value}"
    if key == "stride":
        return f"-stride{value}"
    if key == "eval_cache":
        return "-nocache" if not value else "-cache"
    return f"-{str(value).replace(':', '')}"


def resolve_study(path: str | Path | None, profile: str, attn_lens: Sequence[int], options: dict[str, Any] | None = None,
                  sets: Sequence[str] = ()) -> SpeedStudy:
    """A study file's profile (or the defaults: table9, the paper's lengths), then the command line's
    ``options`` (SpeedSettings fields; None means 'not given') and ``--set`` overrides. Empty
    ``attn_lens`` keeps the study's.

    The name says what the command line changed from the study (``table9-tiny-1thread``,
    ``table9-cpu-run-xl128m-cpu-attention``), so that timing another model or shape never writes over
    the study's table; the same command names the same table."""
    study = load_study(path, profile) if path else SpeedStudy("table9", list(PAPER_ATTN_LENS), "", SpeedSettings())
    settings = override_settings(study.settings, options, sets)
    devices.check_device(settings.device, "--device" if (options or {}).get("device") is not None else "device")
    name = study.name + "".join(name_part(key, getattr(settings, key)) for key in NAMED_SETTINGS
                                if getattr(settings, key) != getattr(study.settings, key))
    return SpeedStudy(name, list(attn_lens) or study.attn_lens, study.profile, settings)


def check_output(table: Path, command: str) -> None:
    """Refuse to write over a speed table that another command made (its CSV's ``command`` column): a
    rerun of the same command replaces its own measurement, anything else keeps the table unless
    the user names another file or deletes it."""
    if not table.is_file():
        return
    import pandas as pd

    try:
        made_by = str(pd.read_csv(table, usecols=["command"])["command"].iloc[0])
    except (ValueError, KeyError, IndexError, pd.errors.ParserError, pd.errors.EmptyDataError):
        made_by = "an unknown command"
    if _without_home(made_by) != _without_home(command):
        raise TxlabError(f"{table} holds a table made by `{made_by}`, and this is `{command}`: choose another name with "
                         f"--name (e.g. --name {table.stem}-2), or delete {table.name} to replace it")


def _without_home(command: str) -> str:
    """The command from 'speed' on: the home it wrote to is part of where the table is, not of what it measured."""
    return command[command.find(" speed ") :] if " speed " in command else command


def _timing_plan(study: SpeedStudy, ceilings: dict[str, float | None]) -> Plan:
    settings = study.settings
    cfg = timed_config(settings)
    shape = replace(cfg.model, dropout=0.0, dropatt=0.0)
    xl = model_counts(replace(cfg, model=replace(shape, family="xl", pos_enc="ours", max_len=0)))
    tgt_len = settings.tgt_len or evaluation_context(cfg.model, cfg.eval)[0]
    batch = settings.batch_size or (DEFAULT_GPU_BATCH if torch.device(settings.device).type == "cuda" else 1)
    plan = Plan(ceilings=ceilings, device=settings.device)
    label = settings.run or f"{PRESET} at size {settings.size}"
    plan.add(f"time {label} ({count_label(xl.parameters)} parameters) on {settings.device}, {settings.threads} threads, "
             f"{batch} streams/windows per call:")
    passes = 1 if batch == 1 else 2  # with more streams, every method is timed again at batch 1 for its latency
    for n in study.attn_lens:
        vanilla = model_counts(replace(cfg, model=replace(shape, family="vanilla", pos_enc="alrfou", mem_len=0, same_length=False, max_len=n, tgt_len=n)))
        fill = n * xl.flops_per_token(n // 2)
        xl_flops = batch * (fill + (settings.warmup + settings.repeats) * tgt_len * xl.flops_per_token(n))
        rolling_flops = batch * (fill + (settings.warmup + settings.repeats) * tgt_len * xl.flops_per_token(n))  # an XL segment's tokens a round
        stride = settings.stride or min(tgt_len, n)
        strided_flops = batch * (settings.warmup + settings.repeats) * vanilla.window_flops(n, stride)
        call_s = seconds_for(batch * vanilla.window_flops(n), ceilings, device=settings.device) or 0.0
        round_calls = vanilla_round_calls(settings.repeats)
        vanilla_s = max(settings.budget_s, settings.repeats * round_calls * call_s) + settings.warmup * round_calls * call_s
        plan.add(f"  attention length {n}: {settings.repeats} rounds, each of vanilla windows of {n} for {settings.budget_s / settings.repeats:.3g} s "
                 f"(at least {round_calls} call{'s' if round_calls > 1 else ''}, about {format_seconds(call_s)} each here), a strided window "
                 f"advanced by {stride}, {tgt_len} rolling-cache tokens and an XL segment of {tgt_len}, after XL and the rolling cache fill "
                 f"{n} tokens of memory" + (" (everything twice: again at batch 1 for latency)" if passes == 2 else ""),
                 passes * (xl_flops + rolling_flops + strided_flops), passes * vanilla_s)
    return plan


def speed_plan(study: SpeedStudy, gflops: Callable[[str, int, str], float | None] = machine_gflops) -> Plan:
    """What `txlab speed` will time and how long it should take here; when that is over an hour on a
    CPU, the smaller preset size that takes minutes."""
    settings = study.settings
    check_request(study.attn_lens, settings)
    plan = _timing_plan(study, {"fp32": gflops(settings.device, settings.threads, "fp32")})
    if is_long_on_cpu(plan, settings.device) and not settings.run:
        candidates = [(f"--size {size}", _timing_plan(replace(study, settings=replace(settings, size=size)), plan.ceilings))
                      for size in smaller_sizes(settings.size)]
        plan.faster = quickest(candidates)
    return plan
