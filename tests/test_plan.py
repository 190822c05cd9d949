"""The plan every long command prints first: its FLOPs against torch's count of a real tiny run, the
sizes and grids it chooses, the quicker settings it names, and --dry-run starting nothing."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from txlab.cli import app
from txlab.drivers.recl.groups import Member, resolve_groups, resolve_member
from txlab.drivers.recl.plan import collection_flops, plan_groups
from txlab.drivers.speed import resolve_study, speed_plan
from txlab.errors import TxlabError
from txlab.measure.collection import Collection
from txlab.measure.losses import collect_group_losses, collect_losses
from txlab.models import hf
from txlab.models.interface import Context
from txlab.runs.plan import Plan, format_seconds, split_tokens, training_flops, training_plan
from txlab.runs.train import train
from txlab.runs.zoo import run_config

runner = CliRunner()

TINY_DATA = ["data.synthetic_tokens=5000", "data.synthetic_eval_tokens=600"]
FLOP_FACTOR = 1.25
"""The analytic FLOPs of a run stay within this factor of what torch counts it executing (they count
the same matmuls; the rest is the attention's masked columns and the memory's re-projection)."""
COUNTED_FAMILIES = ["xl151m", "qrnn", "transformer128m"]
"""torch's FlopCounterMode does not see inside the fused LSTM kernel (it counts 0 FLOPs for nn.LSTM),
so the LSTM's estimate cannot be checked this way."""


def fixed_ceiling(gflops: float):
    return lambda device, threads, precision="fp32": gflops


@pytest.mark.parametrize("preset", COUNTED_FAMILIES)
def test_training_flops_match_torchs_count_of_a_tiny_training_run(tmp_path, preset):
    cfg = run_config(preset, "tiny", overrides=["train.max_steps=4", "train.eval_interval=2", *TINY_DATA])
    with FlopCounterMode(display=False) as counter:
        train(cfg, tmp_path / "run", progress=False, echo=lambda message: None)
    estimated, counted = training_flops(cfg), counter.get_total_flops()
    assert counted / FLOP_FACTOR <= estimated <= counted * FLOP_FACTOR, (estimated, counted)
    # The finished run plans nothing more; a longer one plans only the steps beyond its checkpoint.
    assert training_plan(cfg, tmp_path / "run", gflops=fixed_ceiling(10.0)).flops == 0
    longer = run_config(preset, "tiny", overrides=["train.max_steps=10", "train.eval_interval=2", *TINY_DATA])
    plan = training_plan(longer, tmp_path / "run", gflops=fixed_ceiling(10.0))
    assert plan.flops == training_flops(longer, steps=6) and "resumes at step 4" in plan.describe()


@pytest.mark.parametrize("placebo", [pytest.param(False, marks=pytest.mark.slow), True])  # with placebo: the main table counted too
def test_collection_flops_match_torchs_count_of_a_tiny_collection(tmp_path, placebo):
    options = {"size": "tiny", "models_root": str(tmp_path)}
    (group,) = resolve_groups(COUNTED_FAMILIES, None, "cpu", None, options, ["grid=4:32:4", "blocks=2", "block_len=20", f"placebo={placebo}",
                                                                          "train.max_steps=2", "train.eval_interval=2", *TINY_DATA])
    s = group.settings
    for name in group.members:
        member = resolve_member(name, s)
        train(member.config, member.run_dir, progress=False, echo=lambda message: None)
        with FlopCounterMode(display=False) as counter:
            collect_group_losses([member.run_dir], group.collection, batch_size=s.batch_size, progress=False)
        estimated, counted = collection_flops(member, group.collection), counter.get_total_flops()
        assert counted / FLOP_FACTOR <= estimated <= counted * FLOP_FACTOR, (name, estimated, counted)


def _causal_attention_flops(query_shape, key_shape, *args, **kwargs) -> int:
    """FLOPs of CPU scaled-dot-product attention with a causal mask, which torch's counter leaves out: scores and the
    weighted values (2 x 2 FLOPs per query, key and channel), over the keys a query attends, (k + 1) / 2 on average."""
    batch, heads, queries, channels = query_shape
    return 2 * 2 * batch * heads * channels * queries * (key_shape[-2] + 1) // 2


@pytest.mark.slow  # the property, collection FLOPs as torch counts them, has its default representative above
def test_a_strided_hugging_face_collection_counts_the_flops_torch_counts(tmp_path, random_causal_lm):
    # a fresh-start window per run of s targets, and its placebo behind the far span: the plan reads each at the mean
    # keys of the longest window; measured with attention counted, within the factor of the other collections
    folder = random_causal_lm(tmp_path / "llama", "llama", positions=512)
    model = hf.load_causal_lm(f"hf:{folder}")
    tokens = np.random.default_rng(0).integers(0, 41, 2000).astype(np.int32)
    grid, stride, blocks, block_len = (16, 32, 64, 128, 256), 16, [600, 1200], 32
    counted = 0
    for placebo in (False, True):  # the main table, then the placebo losses
        with FlopCounterMode(display=False, custom_mapping={torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _causal_attention_flops}) as counter:
            collect_losses(model, tokens, grid, blocks, block_len, tgt_len=64, context=Context(mem_len=0), stride=stride, placebo=placebo)
        counted += counter.get_total_flops()
    member = Member("llama", tmp_path / "out", None, source=str(folder))
    estimated = collection_flops(member, Collection("valid", grid, len(blocks), block_len, placebo=True, stride=stride))
    assert counted / FLOP_FACTOR <= estimated <= counted * FLOP_FACTOR, (estimated, counted)


def test_split_sizes_are_known_for_the_paper_corpora_and_generated_for_the_synthetic_ones():
    assert split_tokens(run_config("xl-text8-24l", "paper"), "test") == 5_000_000
    assert split_tokens(run_config("xl-ptb", "paper"), "valid") == 73_760
    # One Billion Word's are not recorded: unknown, not the synthetic corpus's size (its vocabulary is known)
    lm1b = run_config("xl-lm1b-base", "paper")
    assert split_tokens(lm1b, "valid") is None
    plan = training_plan(lm1b, Path("unused"), gflops=fixed_ceiling(100.0)).describe()
    assert "357.81M parameters" in plan and "unknown (a vocabulary or split size is not known" in plan
    assert split_tokens(run_config("xl151m", "tiny", overrides=TINY_DATA), "valid") == 600


def test_time_is_each_works_flops_over_its_share_of_the_ceiling_plus_start_up_and_budgets():
    from txlab.runs.plan import SHARES, STARTUP_S, Work

    plan = Plan(ceilings={"fp32": 10.0})
    plan.add("a", 2e12)
    plan.add("b", 3e12, budget_s=30.0, work=Work("window"))
    expected = 2e12 / (10e9 * SHARES["cpu", "fp32", "train"]) + 3e12 / (10e9 * SHARES["cpu", "fp32", "window"])
    assert plan.seconds == pytest.approx(expected + 30.0 + STARTUP_S) and STARTUP_S == 5.0
    assert "other processes" not in plan.describe()
    plan.others = 0.5  # a CPU shared while its ceiling was measured: the plan says so, with the compute stretched as a floor
    assert f"other processes took 50% of the CPU while it was measured: the estimate is for the CPU to itself; sharing it, expect at least " \
           f"{format_seconds(2 * expected + 30.0 + STARTUP_S)}" in plan.describe()
    plan.add("c", None)  # a part that cannot be counted makes the whole estimate unknown
    assert plan.seconds is None and "estimated time: unknown" in plan.describe()
    assert [format_seconds(s) for s in (4.2, 45, 600, 7200, 5 * 86400)] == ["4.2 s", "45 s", "10 min", "2.0 h", "5 days"]


def test_the_headline_command_scores_the_paper_grid_at_paper_size_and_the_training_span_below():
    (paper,) = resolve_groups(["xl151m", "qrnn", "lstm"], None, "cpu", None, {"size": "paper"})
    assert (paper.settings.grid, paper.settings.blocks, paper.settings.block_len) == ("100:1000:100", 20, 500)
    # cpu: XL trains on 128 tokens with 128 of memory, so the grid reaches 240, as the cpu study profile's does.
    (cpu,) = resolve_groups(["xl151m", "qrnn", "lstm"], None, "cpu", None)
    assert (cpu.settings.grid, cpu.settings.blocks, cpu.settings.block_len) == ("20:240:20", 8, 250)
    (tiny,) = resolve_groups(["qrnn"], None, "cpu", None, {"size": "tiny"}, ["blocks=3"])
    assert (tiny.settings.grid, tiny.settings.blocks) == ("1:16:1", 3)  # what is given stays


def test_a_plan_of_hours_on_a_cpu_names_the_size_that_takes_minutes():
    cfg = run_config("xl151m", "paper")
    plan = training_plan(cfg, Path("absent"), gflops=fixed_ceiling(50.0))
    assert plan.seconds > 3600 * 24 * 365
    assert "over an hour on this CPU: `txlab train xl151m --size cpu` (synthetic-small-short) would take about" in plan.describe()
    groups = resolve_groups(["xl151m", "qrnn", "lstm"], None, "cpu", None, {"size": "paper"})
    plan = plan_groups(groups, suggest_smaller=True, gflops=fixed_ceiling(100.0))  # the cpu group: 90 TFLOP, under an hour at 100 GFLOP/s
    assert "--size cpu (grid 20:240:20, 8 x 250 targets) would take about" in plan.describe()
    speed = speed_plan(resolve_study(None, "", [8000], {"size": "paper"}, ["budget_s=1.0"]), gflops=fixed_ceiling(5.0))
    assert "--size cpu would take about" in speed.describe()
    quick = training_plan(run_config("xl151m", "tiny"), Path("absent"), gflops=fixed_ceiling(50.0))
    assert quick.seconds < 60 and "over an hour" not in quick.describe()


def test_dry_runs_print_the_plan_and_start_nothing(tmp_path):
    runs = tmp_path / "runs"
    commands = [
        ["train", "xl151m", "--size", "tiny", "--run-dir", str(runs / "one"), "--dry-run"],
        ["recl", "--group", "xl151m", "qrnn", "--size", "tiny", "--models-root", str(runs), "--out-dir", str(runs),
         "--fig-dir", str(runs), "--dry-run"],
        ["speed", "--size", "tiny", "--attn-len", "16", "--out-dir", str(runs), "--fig-dir", str(runs), "--dry-run"],
        ["ablate", "studies/table7.yaml", "--profile", "tiny", "--set", f"out={runs}", "--set", f"figures={runs}", "--dry-run"],
    ]
    for args in commands:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "estimated time: " in result.output and "matmul ceiling measured now" in result.output
        assert not runs.exists(), args
    result = runner.invoke(app, commands[1][:-1] + ["--dry-run", "--json"])
    assert "train xl151m into" in result.output and "train qrnn into" in result.output and "token-steps each" in result.output


def test_an_ablation_of_hours_on_a_cpu_names_the_profile_that_takes_minutes(tmp_path, monkeypatch):
    from txlab.drivers import ablate

    path = tmp_path / "study.yaml"
    path.write_text(f"""
name: demo
base: {{preset: xl128m}}
rows: [{{recurrence: true}}, {{recurrence: false}}]
profiles:
  big: {{size: paper, data: wikitext-103, eval_lens: [128], out: {tmp_path}}}
  gpu: {{size: paper, device: cuda, eval_lens: [128], out: {tmp_path}}}
  small: {{size: tiny, eval_lens: [16], eval_tokens: 1000, out: {tmp_path}}}
""")
    monkeypatch.setattr(ablate, "machine_gflops", fixed_ceiling(50.0))
    lines = []
    ablate.run_study(path, "big", dry_run=True, announce=lines.append, echo=lines.append)
    (named,) = [line for line in "\n".join(lines).splitlines() if "over an hour" in line]
    assert named.startswith("that is over an hour on this CPU: --profile small (2 runs, size tiny) would take about")
    lines.clear()
    ablate.run_study(path, "small", dry_run=True, announce=lines.append, echo=lines.append)
    assert "over an hour" not in "\n".join(lines)


def test_a_trial_run_gets_its_own_directory_and_the_plan_says_so(tmp_path):
    from txlab.runs.plan import training_plan
    from txlab.runs.zoo import run_config, run_dir, train_run_dir

    recipe = run_config("xl151m", "cpu")
    trial = run_config("xl151m", "cpu", overrides=["train.max_steps=300"])
    assert train_run_dir(recipe, tmp_path) == run_dir(recipe, tmp_path) == tmp_path / "xl151m-cpu-synthetic-small-short"
    assert train_run_dir(trial, tmp_path) == tmp_path / "xl151m-cpu-synthetic-small-short-300steps"
    plan = training_plan(trial, train_run_dir(trial, tmp_path), gflops=fixed_ceiling(50.0)).describe()
    assert "a trial run of 300 steps, the recipe trains 2,000: its own directory, which the recipe's run never resumes" in plan
    shared = training_plan(trial, run_dir(trial, tmp_path), gflops=fixed_ceiling(50.0)).describe()  # --run-dir given: said, not hidden
    assert "300 steps where the xl151m preset's cpu recipe trains 2,000" in shared


ESTIMATE_FACTOR = 2.0
"""How far an estimate may stray from a recorded run of its command family (either way)."""

IDLE_CEILING_2_THREADS = 206.0
"""The matmul ceiling the quick start's transcript recorded (results/recl/table8-xl-rnn-cpu-rerun-2026-11-23/output.txt)."""

CEILING_1_THREAD = 92.5
"""The 1-thread ceiling results/speed/table9-paper-cpu-1thread.csv recorded on the same machine: the
cpu recipe's models train with train.threads=1."""


def _last_elapsed(run_dir) -> float:
    import json

    return max(json.loads(line).get("elapsed_s", 0.0) for line in (run_dir / "metrics.jsonl").read_text().splitlines())


def test_estimates_hold_within_their_factor_on_a_recorded_run_of_each_command_family(tmp_path, monkeypatch):
    """Each family's plan, computed by today's code at the ceiling recorded beside a committed run, against
    that run's measured time: recl (the quick start, 18 min 39 s), train (the cpu recipe's xl151m),
    ablate (one Table 6 run's training) and speed (table9-cpu's rows)."""
    import csv
    from pathlib import Path

    from txlab.drivers.ablate import run_cost
    from txlab.drivers.ablate_study import load_study
    from txlab.drivers.recl.groups import resolve_groups
    from txlab.drivers.recl.plan import plan_groups
    from txlab.drivers.speed import resolve_study, speed_plan
    from txlab.runs.zoo import run_config

    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("TXLAB_HOME", str(tmp_path))  # nothing trained: every model from scratch, as in the records
    ratios = {}
    groups = resolve_groups(["xl-rnn"], "studies/table8.yaml", "cpu", None)
    quick_start = plan_groups(groups, gflops=fixed_ceiling(IDLE_CEILING_2_THREADS)).seconds
    ratios["recl"] = quick_start / (18 * 60 + 39)
    recipe = run_config("xl151m", "cpu", overrides=["train.threads=1"])
    train_s = training_plan(recipe, tmp_path / "none", gflops=fixed_ceiling(CEILING_1_THREAD)).seconds
    ratios["train"] = train_s / _last_elapsed(root / "results" / "models" / "xl151m-cpu-synthetic-small-short")
    study = load_study("studies/table6.yaml", "cpu")
    run = next(r for r in study.runs if r.run_id == "recur-ours-full-s0")
    ablate_s = run_cost(run, study.settings).seconds({"fp32": CEILING_1_THREAD})
    ratios["ablate"] = ablate_s / _last_elapsed(root / "results" / "ablate" / "table6-cpu" / "runs" / run.run_id)
    rows = list(csv.DictReader((root / "results" / "speed" / "table9-cpu.csv").open()))
    speed = speed_plan(resolve_study("studies/table9.yaml", "cpu", []), gflops=fixed_ceiling(float(rows[0]["matmul_peak_gflops"]))).seconds
    ratios["speed"] = speed / sum(float(r["seconds"]) for r in rows)
    for family, ratio in ratios.items():
        assert 1 / ESTIMATE_FACTOR <= ratio <= ESTIMATE_FACTOR, (family, ratios)
    assert 0.8 <= ratios["recl"] <= 1.25, ratios  # the README's quick-start time is this estimate's record


def test_a_plan_counts_the_blocks_on_disk_and_measures_nothing_when_none_is_left(tmp_path, untrained_run, monkeypatch):
    import json

    from txlab.measure.losses import Collected

    runs = [untrained_run(tmp_path / name, preset) for name, preset in (("a", "xl151m"), ("b", "qrnn"))]
    (group,) = resolve_groups([str(run) for run in runs], None, "cpu", None, {"size": "tiny"}, ["blocks=4", "block_len=10", "placebo=true"])
    c = group.collection
    a, b = group.resolved[None]

    def on_disk(run: Path, blocks: int, placebo: int, stream: str = "s", **other) -> Path:
        """What a collection leaves in a run: its meta.json and its finished blocks (their contents are not read)."""
        folder = run / "losses" / f"{c.split}-{stream}{len(other)}"
        folder.mkdir(parents=True)
        meta = {"split": c.split, "grid": list(c.grid), "block_len": c.block_len, "seed": c.seed, "block_starts": list(range(c.blocks)),
                "token_stream_sha256": stream, **other}
        (folder / "meta.json").write_text(json.dumps(meta))
        for kind, count in (("block", blocks), ("placebo", placebo)):
            for i in range(count):
                (folder / f"{kind}-{i:05d}.npy").touch()
        return folder

    def never(device: str, threads: int) -> float:
        raise AssertionError("the machine was measured for a plan with nothing to compute")

    on_disk(runs[0], 4, 4)
    on_disk(runs[0], 0, 0, block_len=99)  # another collection of the run: not this one
    b_folder = on_disk(runs[1], 4, 4)
    plan = plan_groups([group], gflops=never)
    assert plan.flops == 0 and plan.seconds == plan.startup_s
    assert "already collected: a all 4 blocks, b all 4 blocks" in plan.describe() and "nothing to compute" in plan.describe()
    # nothing left to read, so neither is the model's shape (for a Hugging Face member: transformers and a model build)
    monkeypatch.setattr("txlab.drivers.recl.plan.model_counts", lambda cfg: pytest.fail("counted a model with nothing left"))
    assert collection_flops(a, c, Collected(4, 4)) == 0
    monkeypatch.undo()
    # b lacks one main block and two placebo blocks: the plan reads that share of each of its two tables
    for name in ("block-00003.npy", "placebo-00002.npy", "placebo-00003.npy"):
        (b_folder / name).unlink()
    full = collection_flops(b, c)
    main_only = replace(c, placebo=False)
    main, placebo = collection_flops(b, main_only), full - collection_flops(b, main_only)
    plan = plan_groups([group], gflops=fixed_ceiling(100.0))
    assert plan.flops == pytest.approx(main / 4 + placebo / 2) and "b 3 of 4 blocks (placebo 2 of 4)" in plan.describe()
    # with the group's token stream known (its corpus read), blocks of another stream are not its own
    plan = plan_groups([group], gflops=fixed_ceiling(100.0), sources=[SimpleNamespace(sha256="another")])
    assert plan.flops == pytest.approx(collection_flops(a, c) + full) and "none collected yet" in plan.describe()
    assert plan_groups([group], gflops=fixed_ceiling(100.0), sources=[SimpleNamespace(sha256="s")]).flops == pytest.approx(main / 4 + placebo / 2)


def test_a_strided_plan_counts_its_runs_and_says_its_contexts_are_strided():
    sets = ["grid=1024,2048", "blocks=2", "block_len=500", "placebo=true", "stride=256"]
    (group,) = resolve_groups(["qrnn"], None, "cpu", None, {"size": "tiny"}, sets)
    c = group.collection
    # per block: at c = 1024 one run of 256 (1,024 + 255 tokens) and one of 244 (1,024 + 243), likewise at 2048
    assert c.token_steps() == 2 * ((1024 + 255) + (1024 + 243) + (2048 + 255) + (2048 + 243))
    assert c.placebo_token_steps() == 2 * ((2048 + 255) + (2048 + 243))  # the far span of 1,024 before each run at c = 1024
    assert c.token_steps() < replace(c, stride=None).token_steps() / 20  # against (T + c) x c
    assert group.name.endswith("-stride-256")  # strided tables never replace the exact ones
    (line,) = [line for line in plan_groups([group], gflops=fixed_ceiling(50.0)).lines if "collect losses" in line]
    assert "strided, s = 256 tokens (contexts strided: each in [c, c + s)" in line and f"{c.token_steps() / 1e6:.1f}M token-steps" in line
    (fraction,) = resolve_groups(["qrnn"], None, "cpu", None, {"size": "tiny"}, [*sets[:-1], "stride=0.25"])
    assert [fraction.collection.stride_at(x) for x in (1024, 2048)] == [256, 512]
    for bad in ("stride=0", "stride=-8", "stride=1.5"):
        with pytest.raises(TxlabError, match="stride"):
            resolve_groups(["qrnn"], None, "cpu", None, {"size": "tiny"}, [*sets[:-1], bad])


BENCH = Path(__file__).resolve().parents[1] / "results" / "bench"


def _gpt2_bench_counts():
    """The GPU benchmark's collected model, GPT-2 124M (benchmarks/gpu.py: transformers' GPT2Config defaults), counted without transformers."""
    from txlab.config import ModelConfig

    return hf.hf_counts(ModelConfig(family="hf", hf_arch="gpt2", n_token=50257, d_model=768, n_layer=12, n_head=12, d_head=64, d_inner=3072, max_len=1024))


def _gpu_records() -> list[dict]:
    import json

    return [json.loads(path.read_text()) for path in sorted(BENCH.glob("gpu-*/*.json"))]


def test_the_shares_of_the_ceiling_are_the_committed_benchmarks_and_their_estimates_hold_within_2x(tmp_path, monkeypatch):
    """Each measured entry of SHARES is the median, over the committed runs, of the plan's FLOPs for the work each run
    read (its recorded token-steps) over its seconds times its ceiling; the plan of each run, by today's count of its
    FLOPs at that share and its own ceiling, lands within 2x of the seconds it took."""
    import json
    import statistics

    from txlab.drivers.recl import plan as recl_plan
    from txlab.models.interface import TRAINING_FLOPS_PER_FORWARD
    from txlab.runs.evaluate import evaluation_context
    from txlab.runs.plan import SHARES, Work, model_counts, seconds_for
    from txlab.runs.zoo import known_vocab_size

    gpt2 = _gpt2_bench_counts()
    monkeypatch.setattr(recl_plan.hf, "checkpoint_counts", lambda source: gpt2)
    member = Member("gpt2", tmp_path, None, source="benchmarks/gpu.py")
    shares: dict[tuple[str, str, str], list[float]] = {}
    estimates = []  # (what, estimated seconds, measured seconds)
    xl = run_config("xl151m", "paper")
    xl_keys = int(xl.model.mem_len + (xl.model.tgt_len + 1) / 2)
    for record in _gpu_records():
        ceiling, recl = record["ceiling"], record.get("recl", {})
        if not recl.get("compiled"):  # a collection as txlab reads today on a GPU: its layers compiled (compile=auto)
            recl = {}
        if "rows" in recl:  # the main table by windows, at the mean keys of half the longest window as the plan counts it
            row, grid = recl["rows"]["main"], tuple(recl["grid"])
            flops = row["token_steps"] * gpt2.reading_flops_per_token(grid[-1] // 2) + recl["targets"] * len(grid) * gpt2.output_flops_per_token()
            shares.setdefault(("cuda", "bf16", "window"), []).append(flops / row["seconds"] / (ceiling["bf16_tflops"] * 1e12))
            today = collection_flops(member, Collection("valid", grid, recl["targets"] // 500, 500))
            estimates.append((f"{record['device_name']} window", seconds_for(today, {"bf16": ceiling["bf16_tflops"] * 1e3}, Work("window", "bf16"), "cuda"), row["seconds"]))
        if isinstance(recl.get("strided"), dict):
            row = recl["strided"]
            collection = Collection("valid", tuple(row["grid"]), 1, row["targets"], stride=row["stride"])
            flops = row["token_steps"] * gpt2.reading_flops_per_token(row["grid"][-1] // 2) + row["targets"] * len(row["grid"]) * gpt2.output_flops_per_token()
            shares.setdefault(("cuda", "bf16", "strided"), []).append(flops / row["seconds"] / (ceiling["bf16_tflops"] * 1e12))
            today = collection_flops(member, collection)
            estimates.append((f"{record['device_name']} strided", seconds_for(today, {"bf16": ceiling["bf16_tflops"] * 1e3}, Work("strided", "bf16"), "cuda"), row["seconds"]))
        for precision, row in record.get("train", {}).get("steps", {}).items():  # one step of 60 x 150 tokens, forward and backward
            flops = 60 * 150 * TRAINING_FLOPS_PER_FORWARD * model_counts(xl).flops_per_token(xl_keys)
            shares.setdefault(("cuda", precision, "train"), []).append(flops / (row["ms_per_step"] / 1e3) / (ceiling[f"{precision}_tflops"] * 1e12))
            estimates.append((f"{record['device_name']} train {precision}", seconds_for(flops, {precision: ceiling[f"{precision}_tflops"] * 1e3},
                                                                                          Work("train", precision), "cuda"), row["ms_per_step"] / 1e3))
    cpu = json.loads((BENCH / "collection-cpu.json").read_text())
    ceiling = (cpu["ceiling_before"] + cpu["ceiling_after"]) / 2
    llama = hf.hf_counts(replace(xl.model, family="hf", hf_arch="llama", n_token=256, d_model=128, n_layer=4, n_head=4, d_head=32, d_inner=512, max_len=4096,
                                 dropout=0.0))
    methods = {"main window": "window", "placebo windows": "window", "main per (c, t)": "naive", "placebo per (c, t)": "naive", "main strided": "strided"}
    for row in cpu["rows"]:
        grid = row["grid"]
        if row["model"].startswith("hf-"):  # read from a fresh start: half the window
            counts, keys = llama, grid[-1] // 2
        else:
            cfg = run_config(row["model"].removesuffix("-cpu"), "cpu")
            cfg = replace(cfg, model=replace(cfg.model, n_token=known_vocab_size(cfg.data.corpus)))
            tgt_len, context = evaluation_context(cfg.model, cfg.eval)
            counts, keys = model_counts(cfg), min(int(context.mem_len + (tgt_len + 1) / 2), grid[-1] // 2)
        flops = row["token_steps"] * counts.reading_flops_per_token(keys) + row["targets"] * len(grid) * counts.output_flops_per_token()
        work = Work(methods[row["variant"]])
        shares.setdefault(("cpu", "fp32", work.method), []).append(flops / row["seconds"] / (ceiling * 1e9))
        estimates.append((f"cpu {row['model']} {row['variant']}", seconds_for(flops, {"fp32": ceiling}, work, "cpu"), row["seconds"]))
    for key, measured in shares.items():
        assert SHARES[key] == pytest.approx(statistics.median(measured), abs=0.01), (key, sorted(measured))
    for what, estimated, measured in estimates:
        assert 1 / ESTIMATE_FACTOR <= estimated / measured <= ESTIMATE_FACTOR, (what, estimated, measured)


def _llama_config(folder: Path, positions: int, hidden: int = 64, layers: int = 2) -> Path:
    """A Hugging Face Llama's config.json alone: all a plan reads (its FLOPs and memory come from the model on the meta device)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden, "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers, "num_attention_heads": hidden // 32, "num_key_value_heads": hidden // 32,
        "max_position_embeddings": positions, "vocab_size": 256}))
    return folder


def test_a_cuda_plan_gives_a_time_and_a_memory_line_names_extrapolation_and_refuses_what_cannot_fit(tmp_path, monkeypatch):
    """On a CPU machine, with the GPU's ceilings and memory stubbed: a bf16 collection's time at the bf16 ceiling, its memory
    against the GPU's, the contexts past the member's 1,024 trained positions named, a stride suggested for a plan of hours,
    and a batch that cannot fit refused before anything loads."""
    pytest.importorskip("transformers")
    from txlab.runs import plan as run_plan

    folder = _llama_config(tmp_path / "llama", positions=1024)
    asked = {"size": "tiny", "device": "cuda", "precision": "bf16", "data": "synthetic-small", "models_root": str(tmp_path)}
    (group,) = resolve_groups([f"hf:{folder}"], None, "cpu", None, asked, ["grid=512,1024,2048,4096", "blocks=2", "block_len=4000"])
    asked_for = []

    def h100(device: str, threads: int, precision: str) -> float:
        asked_for.append((device, precision))
        return {"fp32": 51e3, "bf16": 755e3}[precision] / 3e4  # a GPU 30,000 times slower: hours, to be shortened
    monkeypatch.setattr(run_plan, "device_memory", lambda device: 80 * 2**30)
    text = plan_groups([group], gflops=h100).describe()
    assert asked_for == [("cuda", "bf16")]
    assert "at 42% of the bf16 matmul ceiling measured now on cuda" in text and "estimated time: unknown" not in text
    assert "memory: at least " in text and "of the 80.0 GiB of this GPU" in text
    assert "extrapolation: llama at contexts 2048, 4096 (past the 1,024 positions it was trained on)" in text
    assert "that is over an hour on this GPU: --set stride=0.125" in text
    monkeypatch.setattr(run_plan, "device_memory", lambda device: 2**20)
    with pytest.raises(TxlabError, match=r"llama, 16 windows of 4,096 tokens needs at least .* MiB at once, more than the 1.0 MiB of this GPU: lower --set batch_size"):
        plan_groups([group], gflops=h100)
