"""`txlab speed`'s driver: a speed study (studies/table9.yaml) or the command line, read into the
settings of the Table 9 measurement, and the plan printed before it runs.

The measurement itself, and the :class:`~txlab.speed.SpeedSettings` it takes, are txlab.speed: a
library call (``speed_table``) that other code and the benchmarks use without any study file. This
module does for `txlab speed` what txlab.drivers.ablate and txlab.drivers.recl do for theirs: the
study's profile through :func:`txlab.config.read_profile`, then the command line's options and
``--set`` through :func:`txlab.config.override_settings`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from txlab.config import override_settings, read_profile
from txlab.errors import TxlabError
from txlab.evaluate import evaluation_context
from txlab.plan import Plan, format_seconds, is_long_on_cpu, machine_gflops, meta_model, quickest, seconds_for, smaller_sizes
from txlab.speed import DEFAULT_GPU_BATCH, MIN_VANILLA_CALLS, PAPER_ATTN_LENS, PRESET, SpeedSettings, check_request, timed_config


@dataclass(frozen=True)
class SpeedStudy:
    """What one `txlab speed` invocation measures: output file stem, attention lengths, profile, settings."""

    name: str
    attn_lens: list[int]
    profile: str
    settings: SpeedSettings


def load_study(path: str | Path, profile: str) -> SpeedStudy:
    """Read a speed study (see studies/table9.yaml for the format) and pick one profile.

    The study's name is ``<name in the file>-<profile>``, the stem of the files it writes.
    """
    data, settings = read_profile(path, ("name", "attn_lens"), profile, SpeedSettings())
    lens = data.get("attn_lens", list(PAPER_ATTN_LENS))
    if not isinstance(lens, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in lens):
        raise TxlabError(f"{path}: 'attn_lens' must be a list of integers, got {lens!r}")
    return SpeedStudy(f"{data.get('name') or Path(path).stem}-{profile}", lens, profile, settings)


def resolve_study(path: str | Path | None, profile: str, attn_lens: Sequence[int], options: dict[str, Any] | None = None,
                  sets: Sequence[str] = ()) -> SpeedStudy:
    """A study file's profile (or the defaults: table9, the paper's lengths), then the command line's
    ``options`` (SpeedSettings fields; None means 'not given') and ``--set`` overrides. Empty
    ``attn_lens`` keeps the study's."""
    study = load_study(path, profile) if path else SpeedStudy("table9", list(PAPER_ATTN_LENS), "", SpeedSettings())
    return SpeedStudy(study.name, list(attn_lens) or study.attn_lens, study.profile, override_settings(study.settings, options, sets))


def _timing_plan(study: SpeedStudy, gflops: float | None) -> Plan:
    settings = study.settings
    cfg = timed_config(settings)
    shape = replace(cfg.model, dropout=0.0, dropatt=0.0)
    xl = meta_model(replace(cfg, model=replace(shape, family="xl", pos_enc="ours", max_len=0)))
    tgt_len = settings.tgt_len or evaluation_context(cfg.model, cfg.eval)[0]
    batch = settings.batch_size or (DEFAULT_GPU_BATCH if torch.device(settings.device).type == "cuda" else 1)
    plan = Plan(gflops=gflops)
    label = settings.run or f"{PRESET} at size {settings.size}"
    plan.add(f"time {label} ({xl.num_parameters() / 1e6:.1f}M parameters) on {settings.device}, {settings.threads} threads, "
             f"{batch} streams/windows per call:")
    for n in study.attn_lens:
        vanilla = meta_model(replace(cfg, model=replace(shape, family="vanilla", pos_enc="alrfou", mem_len=0, same_length=False, max_len=n, tgt_len=n)))
        xl_flops = batch * (n * xl.flops_per_token(n // 2) + (settings.warmup + settings.repeats) * tgt_len * xl.flops_per_token(n))
        call_s = seconds_for(batch * vanilla.window_flops(n), gflops) or 0.0
        vanilla_s = max(settings.budget_s, MIN_VANILLA_CALLS * call_s) + settings.warmup * call_s
        plan.add(f"  attention length {n}: XL fills {n} tokens of memory and times {settings.repeats} segments of {tgt_len}; "
                 f"vanilla times windows of {n} for {settings.budget_s:g} s (at least {MIN_VANILLA_CALLS} calls, "
                 f"about {format_seconds(call_s)} each here)", xl_flops, vanilla_s)
    return plan


def speed_plan(study: SpeedStudy, gflops: Callable[[str, int], float | None] = machine_gflops) -> Plan:
    """What `txlab speed` will time and how long it should take here; when that is over an hour on a
    CPU, the smaller preset size that takes minutes."""
    settings = study.settings
    check_request(study.attn_lens, settings)
    plan = _timing_plan(study, gflops(settings.device, settings.threads))
    if is_long_on_cpu(plan, settings.device) and not settings.run:
        candidates = [(f"--size {size}", _timing_plan(replace(study, settings=replace(settings, size=size)), plan.gflops))
                      for size in smaller_sizes(settings.size)]
        plan.faster = quickest(candidates)
    return plan
