"""`txlab ablate --launcher slurm`: every run a job, waited for, reported as a local study is; a failed
job named with its log; resubmission resumes. The default run checks the jobs machinery through
submitit's local executor on standard-library functions, and the study's side with its jobs run in this
process; the slow run sends whole studies (and recl's members) through real local jobs."""

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from txlab.cli import app
from txlab.drivers.ablate import run_study
from txlab.drivers.ablate_study import load_study
from txlab.errors import TxlabError
from txlab.runs.launch import Failure, SlurmSettings, Task, run_jobs

pytest.importorskip("submitit", reason="the slurm launcher needs submitit (pip install 'txlab[slurm]')")

runner = CliRunner()

STUDY = """
name: jobs
base: {{preset: xl128m}}
rows:
  - {{id: xl, recurrence: true}}
  - {{id: norecur, recurrence: false}}
profiles:
  cpu:
    size: tiny
    sets: [train.max_steps=2, train.eval_interval=2, train.eval_tokens=200, data.synthetic_tokens=5000, data.synthetic_eval_tokens=600]
    eval_lens: [8]
    eval_tokens: 200
    threads: 1
    out: {out}
    figures: {figures}
    slurm: {{partition: gpu, time_min: 30, cpus: 1}}
"""
LOCAL_JOBS = ["slurm.cluster=local", "slurm.poll_s=0.2"]


@pytest.fixture
def study(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(out=tmp_path / "results", figures=tmp_path / "figures"))
    return path


def test_the_profile_and_set_give_the_job_settings(study):
    settings = load_study(study, "cpu", ["slurm.time_min=600", "slurm.gpus=1"]).settings.slurm
    assert (settings.partition, settings.time_min, settings.gpus, settings.cpus, settings.cluster) == ("gpu", 600, 1, 1, "slurm")
    with pytest.raises(TxlabError, match="slurm.cpus must be"):
        load_study(study, "cpu", ["slurm.cpus=0"])
    with pytest.raises(TxlabError, match="launcher"):
        run_study(study, launcher="slurn")


def test_each_task_is_a_local_job_whose_progress_is_shown_and_a_failed_one_is_named_with_its_log(tmp_path):
    # jobs of standard-library functions: each job's fresh interpreter imports submitit, not torch
    source, copy = tmp_path / "source.txt", tmp_path / "copy.txt"
    source.write_text("written by a job")
    tasks = [Task("copies", shutil.copyfile, (source, copy), lambda: "copied" if copy.exists() else ""),
             Task("fails", os.remove, (tmp_path / "absent",))]
    lines = []
    settings = SlurmSettings(partition="gpu", time_min=30, cpus=1, cluster="local", poll_s=0.2)
    (failure,) = run_jobs(tasks, settings, tmp_path / "jobs", "txlab-test", lines.append)
    assert copy.read_text() == "written by a job"
    assert lines[0] == f"submitted 2 jobs to local (partition gpu, 30 min, 0 GPUs, 1 CPUs each); logs in {tmp_path / 'jobs'}"
    assert any(line.startswith("[1/2] copies: job ") and line.endswith(", copied") for line in lines), lines
    assert failure.name == "fails" and failure.error.startswith("FileNotFoundError: [Errno 2] No such file or directory")
    assert Path(failure.log).parent == tmp_path / "jobs" and "No such file or directory" in Path(failure.log).read_text()


# figures laid out, not rendered: tests/test_ablation.py::test_ablation_report_from_fixture_run_directories renders them
def test_the_study_hands_each_unfinished_run_to_a_job_then_reports_and_names_a_failed_one(study, tmp_path, monkeypatch, figure_files_only):
    # the jobs run in this process in place of submitit, their function and arguments pickled as a job's are
    handed = []

    def run_in_process(tasks, settings, folder, name, echo):
        failures = []
        for task in tasks:
            function, args = pickle.loads(pickle.dumps((task.function, task.args)))
            try:
                function(*args)
            except TxlabError as error:
                failures.append(Failure(task.name, "7", str(Path(folder) / f"{task.name}.err"), str(error)))
            handed.append((name, task.name, task.progress(), Path(folder)))
        return failures

    monkeypatch.setattr("txlab.drivers.ablate.run_jobs", run_in_process)
    lines = []
    result = run_study(study, launcher="slurm", progress=False, announce=lines.append, echo=lines.append)
    assert result.failed == [] and result.table.rows_finished == 2, "\n".join(lines)
    jobs = tmp_path / "results" / "jobs-cpu" / "jobs"
    assert handed == [("txlab-jobs-cpu", run_id, "step 2/2, 2/2 lengths scored", jobs) for run_id in ("xl-s0", "norecur-s0")]
    assert (tmp_path / "results" / "jobs-cpu" / "runs" / "norecur-s0" / "ablate" / "attn8-valid-n200.json").is_file()
    assert (tmp_path / "figures" / "jobs-cpu" / "ppl-vs-attn-len.png").is_file()

    # Nothing left to do: no job is handed over. A run made with another configuration fails its job.
    lines.clear()
    assert run_study(study, launcher="slurm", progress=False, announce=lines.append, echo=lines.append).failed == []
    assert "2 of 2 runs done; submitting the other 0" in lines and len(handed) == 2
    norecur = tmp_path / "results" / "jobs-cpu" / "runs" / "norecur-s0"
    (norecur / "ablate" / "attn8-valid-n200.json").unlink()
    saved = yaml.safe_load((norecur / "config.yaml").read_text())
    saved["train"]["lr"] = 0.5
    (norecur / "config.yaml").write_text(yaml.safe_dump(saved))
    result = runner.invoke(app, ["ablate", str(study), "--launcher", "slurm", "--json", "--quiet"])
    assert result.exit_code == 1, result.output
    (failure,) = json.loads([line for line in result.output.splitlines() if line.startswith("{")][-1])["failed"]
    assert failure["name"] == "norecur-s0" and "another configuration" in failure["error"] and failure["log"] == str(jobs / "norecur-s0.err")
    assert "failed: norecur-s0 (job 7)" in result.output and "rerun the same command" in result.output


@pytest.mark.slow  # real jobs that each start an interpreter, import torch and train: the two tests above, end to end
def test_each_run_is_a_job_then_the_study_reports_and_a_failed_job_names_its_log(study, tmp_path):
    lines = []
    result = run_study(study, launcher="slurm", sets=LOCAL_JOBS, progress=False, announce=lines.append, echo=lines.append)
    text = "\n".join(lines)
    assert result.failed == [] and result.table.rows_finished == 2, text
    assert "submitted 2 jobs to local (partition gpu, 30 min, 0 GPUs, 1 CPUs each)" in text
    for run_id in ("xl-s0", "norecur-s0"):  # per-job progress, read from the files each job writes
        assert f"{run_id}: job " in text and "step 2/2, 2/2 lengths scored" in text
        assert (tmp_path / "results" / "jobs-cpu" / "runs" / run_id / "ablate" / "attn8-valid-n200.json").is_file()
    assert (tmp_path / "figures" / "jobs-cpu" / "ppl-vs-attn-len.png").is_file()

    # Nothing left to do: no job is submitted. A run made with another configuration fails its job.
    lines.clear()
    assert run_study(study, launcher="slurm", sets=LOCAL_JOBS, progress=False, announce=lines.append, echo=lines.append).failed == []
    assert "2 of 2 runs done; submitting the other 0" in lines
    norecur = tmp_path / "results" / "jobs-cpu" / "runs" / "norecur-s0"
    (norecur / "ablate" / "attn8-valid-n200.json").unlink()
    saved = yaml.safe_load((norecur / "config.yaml").read_text())
    saved["train"]["lr"] = 0.5
    (norecur / "config.yaml").write_text(yaml.safe_dump(saved))
    result = runner.invoke(app, ["ablate", str(study), "--launcher", "slurm", *[arg for s in LOCAL_JOBS for arg in ("--set", s)], "--json", "--quiet"])
    assert result.exit_code == 1, result.output
    (failure,) = json.loads([line for line in result.output.splitlines() if line.startswith("{")][-1])["failed"]
    assert failure["name"] == "norecur-s0" and "another configuration" in failure["error"]
    assert "another configuration" in open(failure["log"]).read()
    assert f"failed: norecur-s0 (job {failure['job_id']})" in result.output and "rerun the same command" in result.output


@pytest.mark.slow  # the default run covers recl's job code in-process (test_group) and real local jobs of run_jobs (above)
def test_recl_trains_its_missing_members_and_collects_their_losses_as_jobs(tmp_path):
    args = ["recl", "--group", "xl151m", "qrnn", "--size", "tiny", "--set", "grid=2:8:2", "--set", "blocks=2", "--set", "block_len=10", "--set", "n_boot=0",
            "--set", "train.max_steps=2", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
            "--set", "data.synthetic_eval_tokens=600", "--launcher", "slurm", *[arg for s in LOCAL_JOBS for arg in ("--set", s)],
            "--models-root", str(tmp_path / "models"), "--out-dir", str(tmp_path / "results"), "--fig-dir", str(tmp_path / "figures")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.output.count("submitted 2 jobs to local") == 2 and "qrnn: job " in result.output  # training, then collection
    assert "checkpoint at step 2/2" in result.output  # each job's progress, read from the files it writes
    assert "2 loss blocks written" in result.output  # 2 blocks of losses per member, no placebo
    assert (tmp_path / "models" / "jobs").is_dir() and "RECL of xl151m+qrnn-tiny" in result.output
