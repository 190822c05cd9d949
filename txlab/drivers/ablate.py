"""The driver of `txlab ablate`: plan a study's runs, run them stage by stage, report.

The study file and the runs it expands into are txlab.drivers.ablate_study's; this module plans them
with :class:`txlab.runs.plan.Plan` (one line per run and the estimated time, as every long command
prints first) and runs them. Built as every study driver (txlab.drivers): the profile read into
:class:`~txlab.drivers.ablate_study.AblationSettings` by :func:`txlab.study.read_study`, ``--set``
applied by :func:`txlab.config.override_settings`, and an :class:`AblationResult` back.

Every run lives in ``<out>/<name>-<profile>/runs/<run id>/`` and goes through stages that each
leave a file behind, so a rerun skips what is done and an interrupted study resumes:

    fit    (rows with ``fit`` only) fit.json: the config value that fits the memory budget
    train  checkpoint/ at train.max_steps (an interrupted training resumes from its checkpoint;
           a run whose checkpoint was not kept counts as trained when metrics.jsonl reached
           max_steps and every length is scored, as for committed results)
    eval   ablate/attn<A>-<split>-n<tokens>.json for every evaluation attention length A

``--shard i/N`` runs every N-th run starting at the i-th, so N machines split a study; copying
their ``runs/`` folders together merges them (run ids are stable), and ``--report`` rebuilds the
table from whatever runs are present. ``--seeds`` keeps some training seeds (before the shards split
them), so a long study can be done a few seeds at a time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import yaml

from txlab.analysis.ablation import AblationReport, ablation_eval_name, write_ablation_report
from txlab.config import RunConfig, from_record, read_yaml, to_dict, update_dataclass
from txlab.data.corpus import load_corpus
from txlab.drivers.ablate_study import AblationSettings, AblationStudy, PlannedRun, load_study, model_window, scoring_lengths
from txlab.errors import TxlabError
from txlab.fileio import read_json, read_yaml_mapping, write_json_atomic, write_text_atomic
from txlab.runs.checkpoint import config_differences, has_checkpoint, read_meta
from txlab.runs.evaluate import EvalSettings, evaluate_run
from txlab.runs.footprint import MIB, fit_length, training_memory
from txlab.runs.launch import Failure, Task, check_launcher, run_jobs
from txlab.runs.plan import MODEL_OVERHEAD_S, Plan, format_seconds, is_long_on_cpu, machine_gflops, model_counts, quickest, split_tokens, training_flops, vocab_size
from txlab.runs.train import train
from txlab.runs.zoo import known_vocab_size, logged_training_step


@dataclass(frozen=True)
class RunCost:
    """What one run costs from scratch: its parameters and the analytic FLOPs of its training (forward and backward,
    with the periodic validation) and of its scoring at every length; None where only the corpus can tell."""

    run_id: str
    params: int | None
    train_flops: float | None
    eval_flops: float | None

    @property
    def flops(self) -> float | None:
        return None if self.train_flops is None or self.eval_flops is None else self.train_flops + self.eval_flops

    def seconds(self, ceilings: dict[str, float | None], device: str = "cpu") -> float | None:
        """The run's estimated time on its own: its FLOPs, and the overhead of building, training and scoring one model."""
        plan = Plan(ceilings=ceilings, device=device, startup_s=0.0)
        plan.add("", self.flops, budget_s=MODEL_OVERHEAD_S)
        return plan.seconds


@dataclass
class AblationResult:
    """What one ``txlab ablate`` did: the plan, and unless it was a dry run the table it wrote."""

    study: str
    profile: str
    shard: tuple[int, int]
    """(i, N): the i-th of N shards (1, 1 for the whole study)."""
    plan: Plan
    """What the command said it would do (:func:`study_plan`)."""
    costs: list[RunCost]
    """The cost of each planned run."""
    out_dir: str
    table: AblationReport | None = None
    """None for a dry run."""
    failed: list[Failure] | None = None
    """The jobs that failed, with their logs (None unless the runs went to a scheduler)."""
    elapsed_s: float | None = None

    def summary(self) -> dict[str, Any]:
        """The --json document: the plan, and the rows, claims and failed jobs where there are any."""
        doc: dict[str, Any] = {"study": self.study, "profile": self.profile, "shard": list(self.shard), "out_dir": self.out_dir}
        if self.table is not None:
            doc.update(rows=[row.record() for row in self.table.rows], claims=[claim.record() for claim in self.table.claims])
        doc["plan"] = {"runs": [{**asdict(cost), "seconds": cost.seconds(self.plan.ceilings, self.plan.device)} for cost in self.costs],
                       "total_flops": self.plan.flops, "gflops": self.plan.ceilings.get("fp32"), "seconds": self.plan.seconds}
        if self.failed is not None:
            doc["failed"] = [asdict(f) for f in self.failed]
        return doc


# --------------------------------------------------------------------------------------------------
# The runs this command does


def parse_shard(spec: str | None) -> tuple[int, int]:
    """'2/4' -> (2, 4): the second of four shards (1-based); None -> (1, 1)."""
    if not spec:
        return 1, 1
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise TxlabError(f"--shard takes i/N with 1 <= i <= N (e.g. 1/4), got {spec!r}")
    return int(match[1]), int(match[2])


def runs_of_seeds(study: AblationStudy, seeds: Sequence[int] | None) -> list[PlannedRun]:
    """The study's runs of the training seeds ``seeds`` (every run for None); a seed no run has is refused."""
    if seeds is None:
        return list(study.runs)
    planned = sorted({run.seed for run in study.runs})
    unknown = [seed for seed in seeds if seed not in planned]
    if unknown:
        raise TxlabError(f"--seeds {','.join(map(str, unknown))}: the profile {study.profile!r} trains seeds {','.join(map(str, planned))}")
    return [run for run in study.runs if run.seed in seeds]


def shard_runs(runs: Sequence[PlannedRun], index: int, count: int) -> list[PlannedRun]:
    """The runs of shard ``index`` of ``count``: every count-th run, starting at the index-th."""
    return [run for i, run in enumerate(runs) if i % count == index - 1]


# --------------------------------------------------------------------------------------------------
# Plan


def run_cost(run: PlannedRun, settings: AblationSettings) -> RunCost:
    """Parameters and analytic FLOPs of a run's training (forward + backward) and evaluation."""
    cfg = run.config
    n_token = vocab_size(cfg)
    if n_token is None:
        return RunCost(run.run_id, None, None, None)
    model = model_counts(cfg, n_token)
    eval_tokens = settings.eval_tokens or split_tokens(cfg, settings.split)
    eval_flops = None if eval_tokens is None else sum(eval_tokens * model.flops_per_token(length) for length in run.eval_lens)
    return RunCost(run.run_id, model.parameters, training_flops(cfg), eval_flops)


def study_plan(study: AblationStudy, runs: Sequence[PlannedRun], ceilings: dict[str, float | None]) -> tuple[Plan, list[RunCost]]:
    """The plan of ``runs`` (one line each: parameters, shape, loss, evaluation lengths, estimated time and status),
    every run counted from scratch with its per-model overhead, at the fp32 ``ceilings`` of the study's device; and each run's cost."""
    device = study.settings.device
    plan = Plan([f"{'run':<34} {'params':>8} {'tgt/mem':>9} {'loss':>5} {'eval lengths':<28} {'est.':>7}  status"], ceilings=ceilings, device=device)
    costs = [run_cost(run, study.settings) for run in runs]
    for run, cost in zip(runs, costs):
        c = run.config
        params = f"{cost.params / 1e6:.2f}M" if cost.params else "-"
        shape = f"{'fit' if run.row.fit == 'model.tgt_len' else c.model.tgt_len}/{c.model.mem_len}"
        lens = ",".join(map(str, run.eval_lens))
        plan.add(f"{run.run_id:<34} {params:>8} {shape:>9} {c.train.loss:>5} {lens:<28} {format_seconds(cost.seconds(ceilings, device)):>7}  "
                 f"{run_status(run, study.settings)}", cost.flops, budget_s=MODEL_OVERHEAD_S)
    plan.lines.append("(every estimate counts its runs from scratch, done or not)")
    return plan, costs


def quicker_profile(study: AblationStudy, ceilings: dict[str, float | None]) -> str:
    """'--profile P (n runs, size S) would take about T' for the first other profile of the study that runs on
    a CPU in under an hour here, else ''."""
    candidates = []
    for name in read_yaml(study.path)["profiles"]:
        if name == study.profile:
            continue
        other = load_study(study.path, name)
        if torch.device(other.settings.device).type == "cpu":
            candidates.append((f"--profile {name} ({len(other.runs)} runs, size {other.settings.size})", study_plan(other, other.runs, ceilings)[0]))
    return quickest(candidates)


# --------------------------------------------------------------------------------------------------
# Running


def _eval_record_path(run: PlannedRun, length: int, settings: AblationSettings) -> Path:
    return run.directory / "ablate" / ablation_eval_name(length, settings.split, settings.eval_tokens)


def _is_trained(run: PlannedRun, config: RunConfig) -> bool:
    if not has_checkpoint(run.directory):
        return False
    return read_meta(run.directory)["step"] >= config.train.max_steps


def run_status(run: PlannedRun, settings: AblationSettings) -> str:
    """'done', 'trained, k/n lengths scored', 'resumes at step s' or 'new'.

    A run whose checkpoint is gone (committed results keep records, not weights) is done when its
    training reached max_steps and every length is scored; otherwise it has to train again."""
    try:  # the planned config before its fit: the fitted key is the one it may differ in
        _check_same_config(run, run.config, also_ignored=_fitted_keys(run, settings))
    except TxlabError:  # said in the plan, not found by the run after training the others
        return "another configuration in its folder: the run refuses it"
    run = _as_fitted(run, settings)
    scored = sum(_eval_record_path(run, a, settings).is_file() for a in run.eval_lens)
    steps = run.config.train.max_steps
    if has_checkpoint(run.directory):
        step = read_meta(run.directory)["step"]
        if step >= steps:
            return "done" if scored == len(run.eval_lens) else f"trained, {scored}/{len(run.eval_lens)} lengths scored"
        return f"resumes at step {step}"
    if scored == len(run.eval_lens) and logged_training_step(run.directory) >= steps:
        return "done"
    return "new"


def _as_fitted(run: PlannedRun, settings: AblationSettings) -> PlannedRun:
    """A fitted row's run as its saved config has it (the fitted key, its steps under fit_equal_tokens, the lengths it is
    scored at); the plan as it is for any other run, or before the fit."""
    saved = run.directory / "config.yaml"
    if not (run.row.fit and saved.is_file()):
        return run
    config = _saved_config(saved)
    eval_lens, init_len = scoring_lengths(run.row, config, settings)
    return replace(run, config=config, eval_lens=eval_lens, init_len=init_len)


def _fitted_keys(run: PlannedRun, settings: AblationSettings) -> tuple[str, ...]:
    """Config keys (as config_differences names them) that a run's fit sets, so its saved config may differ from the plan in them."""
    if not run.row.fit:
        return ()
    return (f"{run.row.fit}:", "train.max_steps:") if settings.fit_equal_tokens else (f"{run.row.fit}:",)


def _saved_config(saved: Path) -> RunConfig:
    """A run's config.yaml, its paths resolved (txlab.config.from_record). Read through the config classes, so a key
    added to txlab since the run was saved reads as its default, which by design reproduces what the run did before
    the key existed."""
    return from_record(update_dataclass(RunConfig(), read_yaml_mapping(saved, "delete it and rerun `txlab ablate` to write it again")), saved.parent)


def _check_same_config(run: PlannedRun, config: RunConfig, also_ignored: tuple[str, ...] = ()) -> None:
    saved = run.directory / "config.yaml"
    if not saved.is_file():
        return
    written = _saved_config(saved)
    differences = config_differences(to_dict(written), to_dict(config))
    differences = [d for d in differences if not d.startswith(("model.n_token", "train.device", "train.threads", *also_ignored))]
    if differences:
        raise TxlabError(
            f"{run.directory} was made with another configuration ({'; '.join(differences[:3])}); "
            "move it away to rerun, or restore the study as it was"
        )


def _n_token(cfg: RunConfig) -> int:
    return cfg.model.n_token or known_vocab_size(cfg.data.corpus) or load_corpus(cfg.data, progress=False).n_token


def _fit_run(run: PlannedRun, study: AblationStudy, budget_bytes: Callable[[], int], echo: Callable[[str], None]) -> RunConfig:
    """The run's configuration with its ``fit`` key set to the largest value within the budget (cached in fit.json)."""
    if not run.row.fit:
        return run.config
    record_path = run.directory / "fit.json"
    if record_path.is_file():
        record = read_json(record_path, "delete it and rerun `txlab ablate` to measure it again", keys={"key": str, "value": int})
    else:
        n_token = _n_token(run.config)
        budget = budget_bytes()
        value, used = fit_length(
            run.config, run.row.fit, budget, lambda cfg: training_memory(cfg, n_token, study.settings.device), step=study.settings.fit_step
        )
        record = {"key": run.row.fit, "value": value, "bytes": used, "budget_bytes": budget, "device": study.settings.device}
        write_json_atomic(record_path, record)
        echo(f"{run.run_id}: {run.row.fit} = {value} fits the memory budget ({used / MIB:.1f} of {budget / MIB:.1f} MiB)")
    section, _, key = record["key"].partition(".")
    fitted = update_dataclass(run.config, {section: {key: record["value"]}})
    if study.settings.fit_equal_tokens:
        fitted = update_dataclass(fitted, {"train": {"max_steps": equal_token_steps(_budget_row_config(study), fitted)}})
    return fitted


def equal_token_steps(reference: RunConfig, cfg: RunConfig) -> int:
    """The steps at which ``cfg`` reads as many training tokens as ``reference`` does in its max_steps (to the nearest step)."""
    return max(1, round(reference.train.max_steps * reference.tokens_per_step / cfg.tokens_per_step))


def _budget_row_config(study: AblationStudy) -> RunConfig:
    return next(run.config for run in study.runs if run.row.id == study.memory_budget)


def _budget(study: AblationStudy) -> Callable[[], int]:
    """The memory budget in bytes, measured once on first use."""
    cache: list[int] = []

    def measure() -> int:
        if not cache:
            budget = study.memory_budget
            if isinstance(budget, str):
                row_runs = [run for run in study.runs if run.row.id == budget]
                cache.append(training_memory(row_runs[0].config, _n_token(row_runs[0].config), study.settings.device))
                for run in row_runs:  # the table shows the budget beside the fitted rows' memory
                    write_json_atomic(run.directory / "memory.json", {"bytes": cache[0], "device": study.settings.device})
            else:
                cache.append(int(float(budget) * MIB))
        return cache[0]

    return measure


def _evaluate(run: PlannedRun, config: RunConfig, settings: AblationSettings, window: int | None, progress: bool, echo: Callable[[str], None]) -> None:
    for length in run.eval_lens:
        record_path = _eval_record_path(run, length, settings)
        if record_path.is_file():
            continue
        if window is None:  # memory of `length` tokens, every query attending exactly `length` keys
            scoring = {"tgt_len": config.eval.tgt_len if config.eval.tgt_len > 0 else config.model.tgt_len, "attn_len": length}
        else:  # a fixed window: segments of `length` tokens without memory, as in training
            scoring = {"tgt_len": length, "mem_len": 0}
        evaluation = EvalSettings(split=settings.split, batch_size=settings.eval_batch_size or None, max_tokens=settings.eval_tokens, **scoring)
        metric, value = evaluate_run(run.directory, evaluation, device=settings.device, progress=progress, record_path=record_path).metric
        echo(f"{run.run_id}: attention length {length}: {metric} {value:.3f}")


def _write_row_record(run: PlannedRun, config: RunConfig, study: AblationStudy) -> None:
    """What the report needs to know of a run besides its config: its row, seed and how it is scored."""
    write_json_atomic(run.directory / "ablate" / "row.json", {
        "params": model_counts(config, _n_token(config)).parameters, "run_id": run.run_id,
        "row_id": run.row.id, "remark": run.row.remark, "seed": run.seed, "init_len": run.init_len,
        "eval_lens": list(run.eval_lens), "split": study.settings.split, "eval_tokens": study.settings.eval_tokens,
        "study": study.name, "profile": study.profile,
    })


def run_one(run: PlannedRun, config: RunConfig, study: AblationStudy, progress: bool, echo: Callable[[str], None]) -> None:
    """The missing stages of one run after ``fit`` (``config`` holds the fitted value): train, evaluate."""
    if not _is_trained(run, config):
        from_scratch = not has_checkpoint(run.directory)
        if from_scratch:  # scores and records of an earlier model are stale: the study replaces them on purpose
            for stale in (run.directory / "ablate").glob("attn*.json"):
                stale.unlink()
        echo(f"{run.run_id}: training ({config.train.max_steps} steps)")
        train(config, run.directory, resume=not from_scratch, progress=progress, echo=echo)
    _evaluate(run, config, study.settings, model_window(config), progress, echo)


def run_planned(run: PlannedRun, study: AblationStudy, budget_bytes: Callable[[], int], progress: bool, echo: Callable[[str], None], counter: str = "") -> None:
    """Every missing stage of one run: fit, train, evaluate (nothing when it is done)."""
    config = _fit_run(run, study, budget_bytes, echo)
    if run.row.fit:  # a fitted segment length moves the training attention length (PPL init)
        eval_lens, init_len = scoring_lengths(run.row, config, study.settings)
        run = replace(run, eval_lens=eval_lens, init_len=init_len)
    _check_same_config(run, config)  # a finished run of another configuration is not this study's result
    _write_row_record(run, config, study)
    status = run_status(run, study.settings)
    echo(f"{counter}{run.run_id}: {status}")
    if status != "done":
        run_one(run, config, study, progress, echo)


def run_job(path: str, profile: str, run_id: str, sets: list[str]) -> str:
    """One run of a study as a scheduler job (what ``--launcher slurm`` submits): reads the study as
    the submitting command did and does the run's missing stages. Returns the run's directory."""
    study = load_study(path, profile, sets)
    (run,) = [run for run in study.runs if run.run_id == run_id]
    run_planned(run, study, _budget(study), progress=True, echo=print)
    return str(run.directory)


def job_progress(run: PlannedRun, settings: AblationSettings) -> str:
    """'step s/n, k/m lengths scored', from the files a run's job writes."""
    run = _as_fitted(run, settings)
    scored = sum(_eval_record_path(run, a, settings).is_file() for a in run.eval_lens)
    return f"step {logged_training_step(run.directory)}/{run.config.train.max_steps}, {scored}/{len(run.eval_lens)} lengths scored"


def run_study(
    path: str | Path,
    profile: str = "cpu",
    *,
    shard: str | None = None,
    seeds: Sequence[int] | None = None,
    dry_run: bool = False,
    report_only: bool = False,
    launcher: str = "local",
    sets: Sequence[str] = (),
    progress: bool = True,
    announce: Callable[[str], None] = print,
    echo: Callable[[str], None] = print,
) -> AblationResult:
    """What ``txlab ablate`` does: plan, (run the missing stages of this shard's runs, here or as
    scheduler jobs with ``launcher`` slurm), report.

    ``seeds`` keeps the runs of those training seeds (before ``shard`` splits them), for a study done in parts;
    the report covers every run present.

    Returns the plan and, unless ``dry_run``, the table written (and with the slurm launcher the jobs
    that failed, with their logs).
    """
    check_launcher(launcher)
    study = load_study(path, profile, sets)
    index, count = parse_shard(shard)
    runs = shard_runs(runs_of_seeds(study, seeds), index, count)
    settings = study.settings
    plan, costs = study_plan(study, runs, {} if report_only else {"fp32": machine_gflops(settings.device, settings.threads)})
    shard_note = f", shard {index}/{count}" if count > 1 else ""
    announce(
        f"study {study.name} ({study.path}), profile {profile!r}: size {settings.size}, corpus {settings.data or 'per preset'}, "
        f"device {settings.device}; {len(runs)} of {len(study.runs)} runs{shard_note}"
    )
    if not report_only:
        if is_long_on_cpu(plan, settings.device):
            plan.faster = quicker_profile(study, plan.ceilings)
        announce(plan.describe() if dry_run else plan.estimate())
    elif dry_run:  # nothing is measured for a report: the runs without an estimate
        announce("\n".join(plan.lines))
    result = AblationResult(study.name, profile, (index, count), plan, costs, str(study.out_dir))
    if dry_run:
        return result
    if not report_only:
        write_text_atomic(study.out_dir / "study.yaml", yaml.safe_dump(
            {"study": str(study.path), "profile": profile, "settings": asdict(study.settings),
             "runs": [run.run_id for run in study.runs]}, sort_keys=False))
        budget_bytes = _budget(study)
        if isinstance(study.memory_budget, str) and any(run.row.fit for run in runs):
            budget_bytes()  # measured (and recorded beside the budget row) even when every fit is cached
        started = time.perf_counter()
        if launcher == "slurm":
            pending = [run for run in runs if run_status(run, settings) != "done"]
            echo(f"{len(runs) - len(pending)} of {len(runs)} runs done; submitting the other {len(pending)}")
            tasks = [Task(run.run_id, run_job, (str(study.path), profile, run.run_id, list(sets)), partial(job_progress, run, settings))
                     for run in pending]
            result.failed = run_jobs(tasks, settings.slurm, study.out_dir / "jobs", f"txlab-{study.name}-{profile}", echo)
        else:
            for i, run in enumerate(runs, 1):
                run_planned(run, study, budget_bytes, progress, echo, f"[{i}/{len(runs)}] ")
        result.elapsed_s = time.perf_counter() - started
    result.table = write_ablation_report(
        study.out_dir, study.fig_dir, study.columns,
        [run.run_id for run in study.runs], title=f"{study.description or study.name} ({profile} profile)", claims=study.claims,
    )
    return result
