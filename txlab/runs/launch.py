"""Runs of a grid as jobs of a cluster scheduler, through submitit (``--launcher slurm``).

Each job runs the same resumable stages a local run does, in its own process on a node, so a job
that is cut off (time limit, preemption) leaves its checkpoint behind and the next submission resumes
it. This process submits every job at once, waits, prints each job's state and progress as they
change, and returns the ones that failed with the path of their log; the caller then reports as it
does after local runs.

submitit is an optional dependency (``pip install 'txlab[slurm]'``), imported only here and only
when a launcher is asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txlab.config import NON_NEGATIVE, POSITIVE, Range, setting
from txlab.errors import TxlabError, did_you_mean

LAUNCHERS = ("local", "slurm")
"""``local``: runs one after the other in this process; ``slurm``: one submitit job per run."""


@dataclass(frozen=True)
class SlurmSettings:
    """How each job is submitted (a study profile's ``slurm:`` mapping, or ``--set slurm.<key>=<value>``)."""

    partition: str = setting("", "Slurm partition (empty: the cluster's default).")
    time_min: int = setting(240, "Wall-time limit of one job, in minutes. A run cut off by it resumes from its checkpoint on the next submission.",
                            valid=POSITIVE)
    gpus: int = setting(0, "GPUs per job (set the profile's device to cuda to use them).", valid=NON_NEGATIVE)
    cpus: int = setting(2, "CPU cores per job.", valid=POSITIVE)
    mem_gb: float = setting(0.0, "Memory per job in GB (0: the partition's default).", valid=NON_NEGATIVE)
    account: str = setting("", "Slurm account to charge (empty: your default).")
    cluster: str = setting("slurm", "'slurm', or 'local': each job a subprocess of this machine (a check of the set-up without a cluster).",
                           ("slurm", "local"))
    poll_s: float = setting(15.0, "Seconds between two looks at the jobs' states.", valid=Range(0.1))
    logs: str = setting("", "Folder of the job scripts and logs (empty: ``<the study's results>/jobs``).")


@dataclass(frozen=True)
class Task:
    """One job to run: a name, the function and its arguments (picklable), and how to read its progress."""

    name: str
    function: Callable[..., Any]
    args: tuple[Any, ...]
    progress: Callable[[], str] = lambda: ""
    """A short progress note read from the files the job writes (e.g. 'step 400/2000')."""


@dataclass(frozen=True)
class Failure:
    name: str
    job_id: str
    log: str
    """The job's log (its stderr, where a failing run's traceback is)."""
    error: str

    def describe(self) -> str:
        """'<name> (job <id>): <error>, log <path>': how every command names a failed job."""
        return f"{self.name} (job {self.job_id}): {self.error}, log {self.log}"


def check_launcher(name: str) -> str:
    if name not in LAUNCHERS:
        raise did_you_mean(name, LAUNCHERS, "launcher")
    return name


def _executor(settings: SlurmSettings, folder: Path, name: str) -> Any:
    try:
        import submitit
    except ImportError:
        raise TxlabError("--launcher slurm needs submitit: pip install 'txlab[slurm]' (or pip install submitit)") from None
    executor = submitit.AutoExecutor(folder=folder, cluster=settings.cluster)
    parameters: dict[str, Any] = {"name": name, "timeout_min": settings.time_min, "cpus_per_task": settings.cpus,
                                  "gpus_per_node": settings.gpus, "tasks_per_node": 1, "nodes": 1}
    if settings.mem_gb:
        parameters["mem_gb"] = settings.mem_gb
    if settings.cluster == "slurm":
        parameters.update({f"slurm_{key}": value for key, value in (("partition", settings.partition), ("account", settings.account)) if value})
    executor.update_parameters(**parameters)
    return executor


def error_line(report: str) -> str:
    """The exception line of a failed job's report (submitit gives the job's traceback, then where its
    logs are); a txlab user error without its class name, as the command line prints it."""
    trace = report.split("You can check full logs")[0]
    lines = [line.strip() for line in trace.splitlines() if line.strip().strip("-")]  # not the ---- rules around the trace
    last = lines[-1] if lines else ""
    return last.removeprefix(f"{TxlabError.__module__}.{TxlabError.__name__}: ")


def run_jobs(tasks: Sequence[Task], settings: SlurmSettings, folder: Path, name: str, echo: Callable[[str], None]) -> list[Failure]:
    """Submit every task as a job, wait for all of them while echoing each change of state or
    progress, and return the jobs that failed (with their logs). The job scripts and logs go to
    ``settings.logs``, else to ``folder`` (the command's own, e.g. ``<results>/jobs``)."""
    if not tasks:
        return []
    folder = Path(settings.logs) if settings.logs else Path(folder)
    executor = _executor(settings, folder, name)
    jobs = [executor.submit(task.function, *task.args) for task in tasks]
    where = f"partition {settings.partition}" if settings.partition else "the default partition"
    echo(f"submitted {len(jobs)} jobs to {settings.cluster} ({where}, {settings.time_min} min, {settings.gpus} GPUs, "
         f"{settings.cpus} CPUs each); logs in {folder}")
    shown: dict[str, str] = {}
    while True:
        finished = [job.done() for job in jobs]
        for i, (task, job) in enumerate(zip(tasks, jobs), 1):
            note = task.progress()
            line = f"{job.state}{f', {note}' if note else ''}"
            if shown.get(task.name) != line:
                shown[task.name] = line
                echo(f"[{i}/{len(jobs)}] {task.name}: job {job.job_id} {line}")
        if all(finished):
            break
        time.sleep(settings.poll_s)
    failures = []
    for task, job in zip(tasks, jobs):
        error = job.exception()
        if error is not None:
            failures.append(Failure(task.name, str(job.job_id), str(job.paths.stderr), error_line(str(error)) or type(error).__name__))
    return failures


def check_jobs(failures: Sequence[Failure], what: str) -> None:
    """Stop a command whose next stage needs every job of this one (``what``: 'training', 'loss collection'):
    one error naming each failed job and its log; rerunning the command resumes them."""
    if failures:
        raise TxlabError(f"{what} failed: {'; '.join(f.describe() for f in failures)}. Rerun the same command to resume")
