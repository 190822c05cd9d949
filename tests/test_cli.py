import itertools
import json
import re

import pytest
import torch

from txlab.cli import app

COMMANDS = ["version", "models", "runs", "train", "eval", "roles", "curves", "speed", "recl", "ablate", "attention", "generate",
            "export", "data", "bench", "import"]


def test_help_lists_every_command_in_order_with_the_start_of_its_own_help(cli):
    import typer.main

    result = cli("--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    panel = result.output.split("─ Commands ")[1]
    listed = re.findall(r"^│ (\S+)\s{2,}(.+?)\s*│$", panel, flags=re.MULTILINE)  # first lines only: wrapped ones start with spaces
    assert [name for name, _ in listed] == COMMANDS
    registered = typer.main.get_command(app).commands
    for name, summary in listed:
        assert " ".join(registered[name].help.split()).startswith(summary), name


@pytest.mark.parametrize("args", [["--version"], ["version"]])
def test_version_as_option_and_command(args, cli):
    from txlab import __version__

    result = cli(*args)
    assert result.exit_code == 0 and result.output == f"{__version__}\n"


def test_models_json(cli):
    result = cli("models", "--size", "paper", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in cli.last_json(result.output)["models"]}
    assert abs(rows["xl151m"]["params"] - 151.1e6) < 0.005 * 151.1e6
    assert {"name", "size", "params"} <= set(rows["qrnn"])


# figures laid out, not rendered: tests/test_roles.py::test_the_figure_from_records_is_the_figure_scoring_drew renders them
def test_train_then_eval_end_to_end(tmp_path, cli, figure_files_only):
    run = tmp_path / "run"
    sets = ["--set", "train.max_steps=4", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
            "--set", "data.synthetic_eval_tokens=600"]
    result = cli("train", "xl151m", "--size", "tiny", "--run-dir", str(run), "--quiet", *sets)
    assert result.exit_code == 0, result.output
    assert "trained to step 4" in result.output and (run / "checkpoint" / "model.safetensors").is_file()
    # the resolved config is printed as it is saved, the vocabulary size filled in from the corpus
    shown = cli("train", "xl151m", "--size", "tiny", "--run-dir", str(tmp_path / "shown"), *sets)
    printed = shown.stderr.split("--- resolved config, as saved in")[1].split("\n", 1)[1].split("---")[0]
    assert printed == (tmp_path / "shown" / "config.yaml").read_text() and "n_token: 784" in printed
    result = cli("eval", str(run), "--split", "test", "--attn-len", "24", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    record = cli.last_json(result.output)
    assert record["tokens"] == 599 and record["mem_len"] == 24 and record["same_length"] is True
    assert abs(record["ppl"] - 2.718281828 ** record["loss"]) < 1e-6 * record["ppl"]
    # one synthetic token is one word, so perplexity per word is perplexity; a word spells more than one byte
    assert record["per_word"] == pytest.approx(record["ppl"]) and record["per_byte"] < record["per_word"]
    assert (run / "eval" / "test-tgt16-mem24-clamp0-same-b8.json").is_file()
    # the reference's streams: 600 tokens in 4 streams of 150, each stream's first token not scored
    result = cli("eval", str(run), "--split", "test", "--streams", "reference", "--batch-size", "4", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    assert cli.last_json(result.output)["tokens"] == 4 * 149 and (run / "eval" / "test-tgt16-mem32-clamp0-same-b4-reference.json").is_file()
    one_stream = [cli.last_json(cli("eval", str(run), "--split", "test", "--streams", s, "--batch-size", "1", "--json", "--quiet").output)
                  for s in ("exact", "reference")]
    assert one_stream[0]["loss"] == one_stream[1]["loss"] and one_stream[0]["tokens"] == one_stream[1]["tokens"] == 599
    # by role: the roles partition the scored tokens, so their token-weighted mean is the loss
    result = cli("eval", str(run), "--split", "test", "--by-role", "--json", "--quiet")
    assert result.exit_code == 0, result.output
    record = cli.last_json(result.output)
    groups = record["by_role"]["roles"].values()
    assert sum(g["tokens"] for g in groups) == record["tokens"] == 599
    assert sum(g["tokens"] * g["model"] for g in groups if g["tokens"]) / 599 == pytest.approx(record["loss"])
    assert "copy distance" in result.output
    result = cli("roles", str(run), str(run), "--out", str(tmp_path / "fig" / "roles.png"), "--quiet", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    valid_roles = cli.last_json(cli("eval", str(run), "--split", "valid", "--by-role", "--json", "--quiet").output)["by_role"]["roles"]
    assert len(doc["runs"]) == 2 and doc["runs"][0]["by_role"]["roles"] == doc["runs"][1]["by_role"]["roles"]
    assert doc["runs"][0]["by_role"]["roles"]["copy_value"]["tokens"] == valid_roles["copy_value"]["tokens"] > 0
    assert {p.name for p in (tmp_path / "fig").iterdir()} == {"roles.png", "roles.pdf", "roles.csv"}
    # learning curves per role, from the per-role records of training's evaluations (steps 2 and 4)
    result = cli("curves", str(run), "--by-role", "--out", str(tmp_path / "curves" / "roles.png"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["table"] == str(tmp_path / "curves" / "roles.csv")
    points = (tmp_path / "curves" / "roles.csv").read_text().splitlines()
    assert len(points) == 1 + 2 * 6 and points[0].startswith("label,run,step,tokens_seen,elapsed_s,role,tokens,model")


def test_user_errors_exit_2_without_traceback(tmp_path, cli):
    for args, message in [
        (["train", "xl15m"], "Did you mean 'xl151m'"),
        (["train", "xl151m", "--set", "model.n_layr=2"], "unknown config key 'model.n_layr'"),
        (["train", "xl151m", "--size", "tiny", "--data", "wikitext-103", "--run-dir", str(tmp_path / "r")], "txlab data get wikitext-103"),
        (["eval", str(tmp_path / "nothing")], "no checkpoint"),
    ]:
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_bench_model_json_rows(monkeypatch, cli):
    # stubbed timers: every step takes 0.5 s, the matmul ceiling reads 40 GFLOP/s before the rows and 60 after
    monkeypatch.setattr("txlab.measure.bench.interleaved_median_seconds", lambda steps, warmup, repeats: [0.5] * len(steps))
    ceilings = itertools.cycle([40.0, 60.0])
    monkeypatch.setattr("txlab.timing.matmul_peak_gflops", lambda threads: next(ceilings))
    result = cli("bench", "model", "--shape", "tiny", "--preset", "qrnn", "--size", "tiny", "--mode", "train",
                                 "--mode", "eval_mem32", "--repeats", "1", "--warmup", "0", "--batch-size", "2", "--seg-len", "16", "--json")
    assert result.exit_code == 0, result.output
    doc = cli.last_json(result.output)
    assert [(r["config"], r["mode"]) for r in doc["rows"]] == [("tiny", "train"), ("tiny", "eval_mem32"), ("qrnn-tiny", "train"), ("qrnn-tiny", "eval_mem32")]
    assert [r["tokens_per_s"] for r in doc["rows"]] == [2 * 16 / 0.5] * 4
    assert (doc["matmul_peak_gflops_before"], doc["matmul_peak_gflops_after"], doc["matmul_peak_gflops"]) == (40.0, 60.0, 50.0)
    assert doc["cpu_kernels"] == torch.backends.cpu.get_cpu_capability() and doc["cpu"] in result.output
    assert "reaches 50.0 GFLOP/s" in result.output and "(the practical ceiling; 40.0 before the rows, 60.0 after)" in result.output
    result = cli("bench", "model", "--mode", "fast")
    assert result.exit_code == 2 and "unknown bench mode" in result.output


def _commands(group=None, prefix=()):
    """(name path, click command) of every txlab command, sub-commands included."""
    import typer.main

    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_shares_one_grammar_for_the_common_options():
    """--json, --quiet/-q, --profile/-p and --dry-run mean the same, with the same spellings, wherever they appear."""
    seen = {}
    for name, command in _commands():
        for param in command.params:
            for flag in param.opts:
                seen.setdefault(flag, []).append(" ".join(name))
            if "--json" in param.opts:
                assert param.opts == ["--json"] and param.help.startswith("Also print one compact JSON document"), name
            if "--quiet" in param.opts:
                assert sorted(param.opts) == ["--quiet", "-q"], name
            if "--profile" in param.opts:
                assert sorted(param.opts) == ["--profile", "-p"], name
    # the commands that print results for scripts all offer --json, and the long ones --dry-run
    for command in ("recl", "speed", "ablate", "eval", "generate", "curves", "runs", "models", "roles"):
        assert command in seen["--json"], command
    for command in ("recl", "speed", "ablate", "train"):
        assert command in seen["--dry-run"], command
    assert "generate" in seen["--quiet"]
    # one name for the corpus folder on every command that reads a corpus from the data directory
    assert sorted(seen["--corpus-dir"]) == ["data info", "eval", "recl", "train"]
    assert "--shape" in seen and "bench model" in seen["--shape"] and "bench model" not in seen["--config"]


def test_help_texts_show_no_type_on_flags_and_keep_their_bracketed_defaults(cli):
    # the root and the groups (data, bench, import) too: --help itself is a flag
    for name in [(), ("data",), ("bench",), ("import",), *(name for name, _ in _commands())]:
        text = cli(*name, "--help", env={"COLUMNS": "200"}).output
        flags = [line for line in text.splitlines() if "<bool>" in line]
        assert not flags, (name, flags)  # click >= 8.2 shows a flag's type unless its metavar is empty
        # one default per option: a bracketed default in the help and typer's own would read twice
        assert not [line for line in text.splitlines() if line.count("[default:") > 1], name
    assert "Corpus to train on [default: the preset's" in cli("train", "--help", env={"COLUMNS": "200"}).output
    assert "first N targets [default: all]. " in cli("roles", "--help", env={"COLUMNS": "200"}).output


def test_help_paragraphs_wrap_at_the_terminal_not_where_the_source_broke_its_lines(cli):
    wide = cli("recl", "--help", env={"COLUMNS": "400"}).output
    # one source paragraph, three source lines: one line on a wide terminal; the example keeps its own line
    assert "an estimated time on this machine; --dry-run stops there). Without --study" in wide
    assert "\n txlab recl --group xl151m qrnn lstm --r 0.1" in wide
    assert "steps reached of the recipe's, last validation" in cli("--help", env={"COLUMNS": "400"}).output


def test_bench_mode_help_lists_every_mode(cli):
    import txlab.measure.bench

    text = " ".join(cli("bench", "model", "--help", env={"COLUMNS": "400"}).output.split())
    for mode in ("train", "eval_mem<M>", "eval_mem<M>_uncached", "generate_mem<M>", "generate_mem<M>_uncached", "vanilla_win<L>"):
        # each is a mode the benchmark takes
        assert mode in text and txlab.measure.bench._MODE.fullmatch(mode.replace("<M>", "8").replace("<L>", "8")), mode


@pytest.mark.parametrize("args, stopped", [(["data", "list"], "txlab.data.corpus.list_corpora"),
                                           (["models", "--size", "tiny"], "txlab.runs.zoo.list_models")])
def test_ctrl_c_exits_130_with_one_line(args, stopped, monkeypatch, cli):
    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stopped, ctrl_c)
    result = cli(*args)
    assert result.exit_code == 130  # the shell's code for SIGINT: scripts see an interruption, not a user error (2)
    assert result.output == "interrupted: stopped by Ctrl-C\n"


def test_sigterm_during_recl_exits_143_with_one_line(tmp_path, monkeypatch, cli, untrained_run):
    """A real SIGTERM to this process while recl collects (the handler the command line installs raises in the main
    thread); the handler before the command is restored after it."""
    import os
    import signal

    from txlab.drivers.recl import sources

    collect = sources.collect_run_losses

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return collect(*args, **kwargs)

    monkeypatch.setattr(sources, "collect_run_losses", terminated)
    before = signal.getsignal(signal.SIGTERM)
    result = cli("recl", "--group", untrained_run(tmp_path / "xl"), "--size", "tiny", "--set", "grid=4,8", "--set", "blocks=2",
                 "--set", "block_len=20", "--out-dir", tmp_path / "out", "--fig-dir", tmp_path / "fig", "-q")
    assert result.exit_code == 143  # 128 + SIGTERM, as a training stopped by SIGTERM
    assert result.output.splitlines()[-1] == "interrupted: stopped by SIGTERM" and "Traceback" not in result.output
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("preset, option", [("lstm", ["--attn-len", "64"]), ("qrnn", ["--mem-len", "64"]), ("lstm", ["--same-length"]),
                                            ("transformer128m", ["--clamp-len", "8"])])
def test_memory_settings_are_refused_for_families_without_memory(tmp_path, preset, option, cli, tiny_members):
    run = tiny_members(tmp_path, preset) / f"{preset}-tiny-synthetic-small"
    message = cli.refused("eval", run, *option, "--quiet")
    assert f"{option[0]} sets Transformer-XL's memory" in message and not (run / "eval").exists()
    scored = cli.ok("eval", run, "--quiet").output.splitlines()[0]  # nor does it report memory settings it has not got
    assert "tgt_len" in scored and not any(key in scored for key in ("mem_len", "clamp_len", "same_length"))


_TINY = ["--size", "tiny", "--set", "train.max_steps=4", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
         "--set", "data.synthetic_eval_tokens=600"]


def test_validation_and_evaluation_show_progress_unless_quiet_and_it_changes_no_number(tmp_path, cli):
    loud = cli.ok("train", "xl151m", *_TINY, "--run-dir", tmp_path / "loud")
    quiet = cli.ok("train", "xl151m", *_TINY, "--run-dir", tmp_path / "quiet", "--quiet")
    assert "eval: 100%" in loud.stderr and quiet.stderr == ""

    def valid(run):
        return [(r["step"], r["loss"]) for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "valid"]

    assert valid("loud") == valid("quiet") and [step for step, _ in valid("loud")] == [2, 4]
    scored = [cli("eval", str(tmp_path / "loud"), "--json", *flag) for flag in ([], ["--quiet"])]
    assert "eval: 100%" in scored[0].stderr and scored[1].stderr == ""
    assert cli.last_json(scored[0].output)["loss"] == cli.last_json(scored[1].output)["loss"]


def test_corpus_dir_is_one_option_from_training_to_evaluation(tmp_path, cli):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 200
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "input.txt").write_text(text)
    run = tmp_path / "run"
    cli.ok("train", "qrnn", "--size", "tiny", "--data", "tinyshakespeare", "--corpus-dir", tmp_path / "here", "--set", "train.max_steps=2",
        "--run-dir", run, "--quiet")
    assert f"corpus_dir: {tmp_path / 'here'}" in (run / "config.yaml").read_text()
    first = cli.last_json(cli.ok("eval", run, "--json", "--quiet").output)
    (tmp_path / "here").rename(tmp_path / "moved")
    assert "tinyshakespeare" in cli.refused("eval", run, "--quiet")
    moved = cli.last_json(cli.ok("eval", run, "--corpus-dir", tmp_path / "moved", "--json", "--quiet").output)
    assert moved["loss"] == first["loss"] and moved["tokens"] == first["tokens"]


def _aligned(lines: list[str], *columns: str) -> None:
    """Every row's entry in each named column starts where the header's name does."""
    header, rows = lines[0], lines[1:]
    for column in columns:
        at = header.index(column)
        for row in rows:
            assert row[at - 1] == " " and row[at] != " ", (column, row)


def test_models_and_data_list_align_long_corpus_names(cli):
    # synthetic-small-short (21 characters) is longer than the old fixed corpus columns (13 and 16)
    models = cli.ok("models", "--size", "cpu").output.splitlines()
    assert any("synthetic-small-short" in line for line in models)
    _aligned(models, "size", "corpus", "trained")
    end = models[0].index("params") + len("params")  # right-aligned: the counts end where 'params' does
    assert all(row[end - 1] != " " and row[end] == " " for row in models[1:]), models
    corpora = cli.ok("data", "list").output.splitlines()[1:]
    assert any(line.startswith("synthetic-small-short ") for line in corpora)
    _aligned(corpora, "level", "present")


def test_models_counts_each_preset_as_the_model_counts_itself(cli):
    # the table counts each preset from its configuration, with the vocabulary its corpus will give it: the model's own
    # count (txlab.models.build.count_model), which tests/test_counts.py holds to every preset's built model
    import dataclasses

    from txlab.models.build import count_model
    from txlab.presets import resolve_preset
    from txlab.runs.zoo import known_vocab_size

    rows = cli.last_json(cli.ok("models", "--json").output)["models"]
    assert len(rows) > 40
    for row in rows:
        cfg = resolve_preset(row["name"], row["size"])
        model = dataclasses.replace(cfg.model, n_token=cfg.model.n_token or known_vocab_size(cfg.data.corpus))
        assert row["params"] == count_model(model).parameters, row
