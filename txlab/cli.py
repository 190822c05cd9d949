"""The `txlab` command: thin wrappers that parse, call one library function, and say where results went.

Every error a user can cause is a :class:`~txlab.errors.TxlabError`; the root group turns it into
one line on stderr and exit code 2, never a traceback. Ctrl-C is one line and exit code 130.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from txlab import __version__
from txlab.cli_conventions import DRY_RUN, JSON, QUIET, SET, app, print_json, show_settings
from txlab.errors import TxlabError


@app.command()
def version() -> None:
    """Print the txlab version."""
    typer.echo(__version__)


# ---------------------------------------------------------------------------------------------------
# txlab data: list | get | info

data_app = typer.Typer(help="Corpora: which are available, downloading them, and what they hold.", no_args_is_help=True)
app.add_typer(data_app, name="data")

_DATA_DIR = typer.Option("", "--data-dir", help="Directory holding one folder per corpus \\[default: $TXLAB_DATA_DIR, else the user cache directory].")
_CORPUS = typer.Argument(..., help="Corpus name, e.g. wikitext-103, enwik8, synthetic (see `txlab data list`).")


def _data_config(data_dir: str, corpus: str = "synthetic", corpus_dir: str = ""):
    from txlab.config import DataConfig

    return DataConfig(data_dir=data_dir, corpus=corpus, corpus_dir=corpus_dir)


@data_app.command("list")
def data_list(data_dir: str = _DATA_DIR, json_output: bool = JSON) -> None:
    """List every corpus: whether its files are present, their size, and the vocabulary size once encoded."""
    from txlab.data.corpus import list_corpora, readable_size
    from txlab.data.registry import data_root

    cfg = _data_config(data_dir)
    rows = list_corpora(cfg)
    typer.echo(f"data directory: {data_root(cfg)}")
    wide = max([len("corpus"), *(len(r["name"]) for r in rows)])  # the longest name sets the column: a fixed 16 misaligned the rest
    typer.echo(f"{'corpus':<{wide}} {'level':<5} {'present':<8} {'size':>9} {'vocab':>8}  description")
    for r in rows:
        present = "built-in" if r["kind"] == "synthetic" else "yes" if r["complete"] else "partial" if r["present"] else "no"
        vocab = f"{r['vocab_size']:,}" if r["vocab_size"] else "-"
        typer.echo(f"{r['name']:<{wide}} {r['level']:<5} {present:<8} {readable_size(r['size_bytes']):>9} {vocab:>8}  {r['description']}")
    if json_output:
        print_json({"data_dir": str(data_root(cfg)), "corpora": rows})


@data_app.command("get")
def data_get(
    name: str = _CORPUS,
    data_dir: str = _DATA_DIR,
    force: bool = typer.Option(False, "--force", help="Download again even when the files are present.", metavar=""),
    quiet: bool = QUIET,
) -> None:
    """Download a corpus into <data-dir>/<name>/, verify its checksum and unpack it.

    Interrupted downloads resume where they stopped (from the .part file). Set $TXLAB_DATA_MIRROR to a
    URL to fetch <URL>/<file name> instead of the canonical sources. Synthetic corpora need nothing.
    """
    from txlab.data.download import fetch_corpus

    result = fetch_corpus(name, _data_config(data_dir), force=force, progress=not quiet)
    if result["status"] == "built in":
        typer.echo(f"{name} is generated on the fly; nothing to download.")
        return
    typer.echo(f"{name}: {result['status']} in {result['directory']}")
    for path in result["files"]:
        typer.echo(f"  {path}")
    for unverified in result["unverified"]:
        typer.echo(f"  note: {unverified} has no published checksum (unverified)")


_TEXT = typer.Option("", "--text", help="Own text: a UTF-8 text file (cut into train/valid/test by data.text_split, 0.9/0.05/0.05) "
                     "or a folder holding train.txt, valid.txt and test.txt (sets data.corpus=text, data.text).")
_TOKENIZER = typer.Option("", "--tokenizer", help="How own text becomes tokens: char, word, or hf:PATH_OR_HUB_ID (a Hugging Face tokenizer; "
                          "no special tokens added) \\[default: char].")


@data_app.command("info")
def data_info(
    name: str = typer.Argument("", help="Corpus name, e.g. wikitext-103, enwik8, synthetic (see `txlab data list`); omitted with --text.", show_default=False),
    data_dir: str = _DATA_DIR,
    corpus_dir: str = typer.Option("", "--corpus-dir", help="Read this folder instead of <data-dir>/<name> (e.g. a sample holding only some splits)."),
    text: str = _TEXT,
    tokenizer: str = _TOKENIZER,
    text_split: str = typer.Option("", "--text-split", help="Own text in one file: the train,valid,test fractions of its tokens \\[default: 0.9,0.05,0.05]."),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Show one corpus, or own text: files, tokens per split, vocabulary size, tokenizer id, hashes and cache location.

    The first call on a real corpus or a text encodes it (cached afterwards, so later loads take seconds).
    """
    from txlab.data.corpus import corpus_info_text, text_corpus_info

    info = text_corpus_info(name, text, tokenizer, text_split, _data_config(data_dir, name or "synthetic", corpus_dir), progress=not quiet)
    typer.echo(corpus_info_text(info, own_text=bool(text)))
    if json_output:
        print_json(info)


# ---------------------------------------------------------------------------------------------------
# txlab models | train | eval

_PRESET = typer.Argument(..., help="Preset name (see `txlab models`), e.g. xl151m, qrnn, lstm, xl128m-shaw.")
_SIZE = typer.Option("cpu", "--size", help="paper (the paper's setting, for GPUs), cpu (minutes on a laptop) or tiny (a smoke test).")
_CORPUS_DIR = typer.Option("", "--corpus-dir", help="Read the corpus from this folder instead of <data-dir>/<corpus> (sets data.corpus_dir).")
@app.command()
def models(
    size: list[str] = typer.Option([], "--size", help="Only these sizes (repeatable); default all."),
    json_output: bool = JSON,
) -> None:
    """List the presets with parameter counts at each size, and which are trained in <home>/results/models/."""
    from txlab.presets import SIZES
    from txlab.runs.zoo import format_models, list_models

    rows = list_models(tuple(size) or SIZES)
    typer.echo(format_models(rows))
    if json_output:
        print_json({"models": rows})


@app.command()
def runs(
    roots: list[Path] = typer.Argument(None, help="Folders to search for run directories, at any depth \\[default: the home's results, and results if present]."),
    json_output: bool = JSON,
) -> None:
    """List the run directories under folders: preset, size, family, corpus, steps reached of the
    recipe's, last validation, whether the checkpoint is there (committed results keep only records)."""
    from txlab.runs.zoo import default_run_folders, format_runs, list_runs

    rows = list_runs(roots or default_run_folders())
    typer.echo(format_runs(rows))
    if json_output:
        print_json({"runs": rows})


@app.command()
def train(
    preset: str = _PRESET,
    size: str = _SIZE,
    data: str = typer.Option("", "--data", help="Corpus to train on \\[default: the preset's: the paper corpus at paper size, a synthetic one otherwise (synthetic-small-short at cpu size, synthetic-small at tiny)]."),
    corpus_dir: str = _CORPUS_DIR,
    text: str = _TEXT,
    tokenizer: str = _TOKENIZER,
    config: str = typer.Option("", "--config", help="YAML file of config overrides, applied before --set."),
    overrides: list[str] = SET,
    device: str = typer.Option("", "--device", help="cpu, cuda, cuda:1, ... (sets train.device) \\[default: the preset's, cpu]."),
    run_dir: str = typer.Option("", "--run-dir", help="Run directory \\[default: <home>/results/models/<preset>-<size>-<corpus>, "
                                "with -<N>steps when train.max_steps differs from the recipe's: a trial run never resumes the recipe's]."),
    restart: bool = typer.Option(False, "--restart", help="Train from scratch, replacing what the run directory holds (its checkpoint, records, another configuration).", metavar=""),
    dry_run: bool = DRY_RUN,
    quiet: bool = QUIET,
) -> None:
    """Train a preset (resuming its run directory if a checkpoint is there).

    First prints the plan: the steps and tokens left to train and an estimated time on this machine.

    Rerunning the same command after an interruption continues from the last checkpoint; SIGTERM or
    Ctrl-C save one before exiting. Under torchrun (`torchrun --nproc_per_node N -m txlab train ...`)
    each process trains its share of the streams with DistributedDataParallel.
    """
    from txlab.runs.plan import training_plan
    from txlab.runs.train import train as train_run
    from txlab.runs.train import training_request

    main_process = os.environ.get("RANK", "0") == "0"
    cfg, directory = training_request(preset, size, data or None, config or None, list(overrides), text=text, tokenizer=tokenizer, device=device,
                                      corpus_dir=corpus_dir, run_dir=run_dir, restart=restart, main_process=main_process)
    if main_process:
        typer.echo(training_plan(cfg, directory, resume=not restart).describe())
    if dry_run:
        return
    say = (lambda msg: None) if quiet or not main_process else (lambda msg: typer.echo(msg, err=True))
    say(f"profile: {size} | preset {preset} | corpus {cfg.data.corpus}" + (f" ({cfg.data.text}, tokenizer {cfg.data.tokenizer})" if text else ""))
    result = train_run(cfg, directory, resume=not restart, progress=not quiet, echo=say)
    if main_process:
        metric = ", ".join(f"{k} {v:.4g}" for k, v in result.valid.items() if k != "tokens")
        typer.echo(f"trained to step {result.step}: valid {metric}")
        typer.echo(f"run directory: {result.run_dir} (config.yaml, metrics.jsonl, checkpoint/)")


@app.command("eval")
def eval_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `txlab train`, or hf:PATH_OR_HUB_ID (a Hugging Face causal LM, "
                                    "scored on --text or --data)."),
    split: str = typer.Option("valid", "--split", help="train, valid or test."),
    tgt_len: int = typer.Option(None, "--tgt-len", help="Evaluation segment length \\[default: the run's eval.tgt_len]."),
    mem_len: int = typer.Option(None, "--mem-len", help="Memory length \\[default: the run's eval.mem_len]."),
    clamp_len: int = typer.Option(None, "--clamp-len", help="Relative distances beyond this share one embedding \\[default: the run's]."),
    same_length: bool = typer.Option(None, "--same-length/--no-same-length", help="Every query attends the same number of keys \\[default: the run's].", metavar=""),
    attn_len: int = typer.Option(None, "--attn-len", help="The paper's attention length: every query attends exactly this many keys (sets mem_len, same_length)."),
    batch_size: int = typer.Option(None, "--batch-size", help="Evaluation streams \\[default: the run's eval.batch_size]."),
    streams: str = typer.Option(None, "--streams", help="exact: every target once; reference: the targets the authors' eval.py scores "
                                "(each stream's first token and the len % batch tail left out) [default: the run's eval.streams]."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    precision: str = typer.Option(None, "--precision", help="fp32, or bf16 or fp16 autocast (the log-softmax stays fp32); a Hugging Face "
                                  "model's weights are loaded in it \\[default: the run's eval.precision; fp32 for hf:]."),
    corpus_dir: str = typer.Option("", "--corpus-dir", help="Read the corpus from this folder instead of the run's data.corpus_dir (its vocabulary must be the run's)."),
    by_role: bool = typer.Option(False, "--by-role", help="Synthetic corpora: also the loss per token role and per copy distance, beside the ideal model's.", metavar=""),
    data: str = typer.Option(None, "--data", help="hf: models only: the corpus to score (`txlab data list`)."),
    text: str = typer.Option(None, "--text", help="hf: models only: your own text to score (a file, or a folder of split files); "
                            "one file's split is cut in characters at word starts, the same characters for every tokenizer."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="hf: models only: how --text becomes tokens \\[default: the model's own tokenizer, else char]."),
    max_tokens: int = typer.Option(0, "--max-tokens", help="Score only the split's first N targets (0: all)."),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Score a trained run with the paper's protocol: every token once, token-weighted mean loss.

    Reports perplexity for word-level corpora and bits per character for character-level ones,
    and writes the result to RUN_DIR/eval/. A Hugging Face model (hf:PATH) is read in segments of
    --tgt-len tokens, each after --mem-len tokens of context (default 0), and its record goes to
    <home>/results/eval/.
    """
    from txlab.data.diagnostics import format_summary
    from txlab.runs.evaluate import EvalSettings, evaluate_checkpoint, evaluate_run

    if str(run_dir).startswith("hf:"):
        from txlab.drivers.recl.groups import settle_tokenizer
        from txlab.drivers.recl.settings import ReclSettings
        from txlab.runs.zoo import run_config

        for option, value in {"--clamp-len": clamp_len, "--same-length": same_length, "--attn-len": attn_len, "--streams": streams,
                              "--corpus-dir": corpus_dir or None, "--by-role": by_role or None}.items():
            if value is not None:
                raise TxlabError(f"{option} sets how a txlab run is evaluated; a Hugging Face model takes --tgt-len and --mem-len")
        spec = str(run_dir)
        chosen = settle_tokenizer(ReclSettings(data=data or "", text=text or "", tokenizer=tokenizer or ""), [spec])
        if not chosen.data and not chosen.text:
            raise TxlabError("a Hugging Face model is scored on --text FILE (your text) or --data NAME (`txlab data list`)")
        data_cfg = run_config(None, corpus=chosen.data or None, text=chosen.text, tokenizer=chosen.tokenizer).data
        scored = evaluate_checkpoint(spec, data_cfg, split=split, tgt_len=tgt_len, mem_len=mem_len or 0, batch_size=batch_size or 1,
                                     max_tokens=max_tokens, device=device, precision=precision or "fp32", progress=not quiet)
        typer.echo(f"{scored.split}: loss {scored.loss:.4f}, {_headline(scored.metric)} over {scored.tokens:,} tokens (segments of "
                   f"{scored.tgt_len} after {scored.mem_len} tokens of context, {scored.batch_size} streams, {scored.precision}); {_per_unit(scored)}")
        typer.echo(f"written to {scored.path}")
        if json_output:
            record = scored.as_record()
            print_json({k: record[k] for k in ("loss", "ppl", "bpc", "per_word", "per_byte", "words", "bytes", "tokens", "split", "tgt_len", "mem_len", "batch_size",
                                               "precision") if k in record})
        return
    for option, value in {"--data": data, "--text": text, "--tokenizer": tokenizer}.items():
        if value is not None:
            raise TxlabError(f"{option} is for hf: models; a txlab run is scored on its own corpus (--corpus-dir if it moved)")
    settings = EvalSettings(split=split, tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, same_length=same_length, attn_len=attn_len,
                            batch_size=batch_size, streams=streams, precision=precision, max_tokens=max_tokens, by_role=by_role,
                            corpus_dir=corpus_dir)
    r = evaluate_run(run_dir, settings, device=device, progress=not quiet)
    memory = f", mem_len {r.mem_len}, clamp_len {r.clamp_len}, same_length {r.same_length}" if r.family == "xl" else ""
    typer.echo(f"{r.split}: loss {r.loss:.4f}, {_headline(r.metric)} over {r.tokens:,} tokens "
               f"(tgt_len {r.tgt_len}{memory}, {r.batch_size} streams, {r.streams}, {r.precision}); {_per_unit(r)}")
    if r.by_role is not None:
        typer.echo(format_summary(r.by_role))
    typer.echo(f"written to {r.path}")
    if json_output:
        record = r.as_record()
        keys = ("loss", "ppl", "bpc", "per_word", "per_byte", "words", "bytes", "tokens", "split", "tgt_len", "mem_len", "clamp_len", "same_length", "batch_size", "streams", "precision", "by_role")
        print_json({k: record[k] for k in keys if k in record})


def _per_unit(score) -> str:
    """'perplexity per word 812.4, per byte 3.012': the scale members with different tokenizers share."""
    return f"perplexity per word {score.per_word:.4g}, per byte {score.per_byte:.4g}"


def _headline(metric: tuple[str, float]) -> str:
    """'ppl 12.345' or 'bpc 1.2345': the paper's headline metric as `txlab eval` prints it."""
    name, value = metric
    return f"ppl {value:.3f}" if name == "ppl" else f"bpc {value:.4f}"


@app.command()
def roles(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories trained on a synthetic corpus."),
    out: Path = typer.Option(None, "--out", help="Figure path (.png; a .pdf and a .csv of the points are written beside it) \\[default: <home>/figures/roles/<run names>.png, "
                     "so other runs get another figure].", show_default=False),
    split: str = typer.Option("valid", "--split", help="train, valid or test."),
    max_tokens: int = typer.Option(0, "--max-tokens", help="Score only the split's first N targets \\[default: all].", show_default=False),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    title: str = typer.Option("", "--title", help="Figure title \\[default: the models, their size, the corpus and the targets, in words].", show_default=False),
    from_records: bool = typer.Option(False, "--from-records", help="Only draw the figure again from the records an earlier scoring of the same "
                                      "--split and --max-tokens left in each RUN/eval/: no checkpoint needed, nothing is scored.", metavar=""),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """What runs have learned: loss per token role and copied-value loss by distance, beside the ideal model.

    Each run is scored with its evaluation settings (records in RUN/eval/); the figure shows how far
    back each run copies from, against the ideal model with and without the source in view.
    """
    from txlab.analysis.figures import runs_stem
    from txlab.data.diagnostics import format_summary
    from txlab.drivers.roles import redraw_roles, score_roles
    from txlab.workspace import resolve

    default = resolve(f"figures/roles/{runs_stem(run_dirs)}" + (f"-{split}" if split != "valid" else "") + (f"-{max_tokens}tokens" if max_tokens else "") + ".png")
    if from_records:
        result = redraw_roles(run_dirs, out or default, split=split, max_tokens=max_tokens, title=title)
    else:
        result = score_roles(run_dirs, out or default, split=split, max_tokens=max_tokens, device=device, title=title, progress=not quiet)
    for run in result["runs"]:
        typer.echo(f"{run['label']} ({run['run_dir']}, step {run['step']}): loss {run['loss']:.4f}\n{format_summary(run['by_role'])}\n")
    for path in [*result["figures"], result["table"]]:
        typer.echo(f"written {path}")
    if json_output:
        print_json({"runs": result["runs"], "figures": [str(p) for p in result["figures"]], "table": str(result["table"])})


@app.command()
def curves(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories made by `txlab train`."),
    out: Path = typer.Option(None, "--out", help="Figure path (.png; a .pdf and a .csv of the points are written beside it) \\[default: <home>/figures/train/<run names>.png "
                     "(-roles.png with --by-role), so other runs get another figure].", show_default=False),
    title: str = typer.Option("", "--title", help="Figure title."),
    by_role: bool = typer.Option(False, "--by-role", help="Synthetic corpora: one panel per token role, beside the ideal model's loss.", metavar=""),
    json_output: bool = JSON,
) -> None:
    """Plot learning curves: training and validation loss against training tokens, and validation loss
    against wall time (with --by-role: each token role's validation loss against training tokens).

    A run still short of its first validation is drawn from its training loss.
    """
    from txlab.analysis.curves import learning_curves
    from txlab.analysis.figures import runs_stem
    from txlab.analysis.roles import role_curves
    from txlab.workspace import resolve

    default = resolve(f"figures/train/{runs_stem(run_dirs)}{'-roles' if by_role else ''}.png")
    written = (role_curves if by_role else learning_curves)(run_dirs, out or default, title)
    for path in written.paths:
        typer.echo(f"written {path}")
    if json_output:
        print_json({"figures": [str(p) for p in written.figures], "table": str(written.table)})


bench_app = typer.Typer(help="Benchmarks (tokens/s and achieved GFLOP/s; medians after warm-up).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("model")
def bench_model_command(
    shape: list[str] = typer.Option([], "--shape", help="Benchmark shapes (docs/performance.md): tiny, small (repeatable) \\[default: both, unless --preset is given]."),
    preset: list[str] = typer.Option([], "--preset", help="Also benchmark these presets at --size (repeatable), e.g. --preset qrnn --preset lstm."),
    size: str = typer.Option("cpu", "--size", help="Size of the --preset models."),
    mode: list[str] = typer.Option([], "--mode", help="train, eval_mem<M>, eval_mem<M>_uncached (the training path), generate_mem<M> (text generation after a prompt filling a memory of M; "
                                                    "generate_mem<M>_uncached too), vanilla_win<L> (repeatable) \\[default: train, eval_mem128, eval_mem512, and vanilla_win512 for --shape shapes]."),
    batch_size: int = typer.Option(8, "--batch-size", help="Streams (or windows) per step."),
    seg_len: int = typer.Option(128, "--seg-len", help="Segment length."),
    threads: int = typer.Option(2, "--threads", help="torch CPU threads."),
    repeats: int = typer.Option(5, "--repeats", help="Timed runs per row (the median is reported)."),
    warmup: int = typer.Option(2, "--warmup", help="Untimed runs before timing."),
    authors_code: Path = typer.Option(None, "--authors-code", help="A clone of kimiyoung/transformer-xl: also run the authors' model on every row's work, timed in alternation with txlab's, and report that ratio."),
    json_output: bool = JSON,
) -> None:
    """Training and evaluation throughput of the models, against the machine's matmul ceiling.

    Rows also carry the load average and the CPU share other processes took while they ran: with 2
    threads on 2 cores any competitor distorts the numbers, so rerun rows where it is above a few percent.
    """
    from txlab.measure.bench import DEFAULT_MODES, bench_model, bench_table_markdown, preset_configs
    from txlab.timing import cpu_kernels, cpu_model, matmul_peak_gflops

    shapes = shape or ([] if preset else ["tiny", "small"])
    rows = []
    peak_before = matmul_peak_gflops(threads)  # the ceiling, measured before and after the rows in the same run
    timing = dict(batch_size=batch_size, seg_len=seg_len, threads=threads, repeats=repeats, warmup=warmup, authors_code_dir=authors_code)
    if shapes:
        rows += bench_model(shapes, mode or DEFAULT_MODES, **timing)
    if preset:
        rows += bench_model(preset_configs(preset, size), mode or ("train", "eval_mem128", "eval_mem512"), **timing)
    peak_after = matmul_peak_gflops(threads)
    peak = (peak_before + peak_after) / 2
    typer.echo(f"machine: {cpu_model()} ({cpu_kernels()} kernels), {threads} threads, fp32 matmul 2048^3 reaches {peak:.1f} GFLOP/s "
               f"(the practical ceiling; {peak_before:.1f} before the rows, {peak_after:.1f} after)")
    typer.echo(bench_table_markdown(rows, peak))
    if json_output:
        print_json({"cpu": cpu_model(), "cpu_kernels": cpu_kernels(), "matmul_peak_gflops": peak, "matmul_peak_gflops_before": peak_before,
                    "matmul_peak_gflops_after": peak_after, "rows": [row.as_record() for row in rows]})


@app.command()
def speed(
    attn_len: list[int] = typer.Option([], "--attn-len", help="Attention length (repeatable) \\[default: the study's, else the paper's 800 1800 2800 3800]."),
    size: str = typer.Option(None, "--size", help="Shape of the xl-enwik8-12l preset: paper, cpu or tiny \\[default: paper: timing needs no training, so the table times the paper's own model, unlike the commands that train]."),
    run: str = typer.Option(None, "--run", help="Time this trained run directory (XL or vanilla) instead of the preset shape."),
    device: str = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... \\[default: cpu]."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads \\[default: 2]."),
    overrides: list[str] = typer.Option([], "--set", help="A setting (keys: `txlab speed --show-settings`), e.g. --set budget_s=10 --set batch_size=4 "
                                        "--set repeats=20 --set eval_cache=false (repeatable)."),
    study: Path = typer.Option(None, "--study", help="A speed study YAML (e.g. studies/table9.yaml); its profile sets the defaults."),
    profile: str = typer.Option("cpu", "--profile", "-p", help="The study profile to use (with --study)."),
    name: str = typer.Option(None, "--name", help="Output file stem \\[default: <study name>-<profile> with --study, else table9]."),
    dry_run: bool = DRY_RUN,
    redraw: Path = typer.Option(None, "--redraw", help="Only draw the figure again from a table txlab speed wrote (its .csv), into --fig-dir; time nothing."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Where the table (.csv, .md) goes \\[default: <home>/results/speed].", show_default=False),
    fig_dir: Path = typer.Option(None, "--fig-dir", help="Where the figure (.png, .pdf) goes \\[default: <home>/figures/speed].", show_default=False),
    _show: bool = show_settings("txlab.measure.speed", "SpeedSettings"),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Evaluation speed of the vanilla Transformer vs Transformer-XL at equal attention length (the paper's Table 9), with today's baselines.

    Vanilla recompute predicts each token from a window of the attn_len tokens before it, recomputed for every prediction; strided recompute advances that window by a stride and scores its last stride predictions; a rolling KV cache reads one token at a time over the cached keys and values of the last attn_len tokens; Transformer-XL reads segments with a memory of attn_len, so every query attends exactly attn_len keys.

    All run the same shape, in inference mode: tokens/s, latency per token at batch 1, peak memory, and with --run perplexity. The table goes to --out-dir (CSV, Markdown), the figure to --fig-dir.

    First prints the plan with an estimated time on this machine (--dry-run stops there). How it times (budget_s, repeats, warmup, batch_size, tgt_len, stride, eval_cache, attn_kernel, seed) are --set keys: `txlab speed --show-settings`.
    """
    from dataclasses import asdict

    from txlab.analysis.table9 import table9_figure
    from txlab.drivers.speed import check_output, resolve_study, speed_plan
    from txlab.measure.speed import command_line, contention_warning, speed_table, table9_markdown
    from txlab.tables import count_label
    from txlab.workspace import resolve

    if name is not None:
        from txlab.workspace import check_name

        check_name(name, "--name")  # the stem of the table and figure files, inside --out-dir and --fig-dir
    out_dir, fig_dir = out_dir or resolve("results/speed"), fig_dir or resolve("figures/speed")
    if redraw is not None:
        for path in table9_figure(redraw, fig_dir / f"{name or redraw.stem}.png"):
            typer.echo(f"written {path}")
        return
    chosen = resolve_study(study, profile, attn_len, {"size": size, "run": run, "device": device, "threads": threads}, overrides)
    stem = name or chosen.name
    check_output(out_dir / f"{stem}.csv", command_line(chosen.attn_lens, chosen.settings, stem))
    typer.echo(f"profile: {f'{chosen.profile} ({study})' if study else 'defaults'} | attn_len {' '.join(map(str, chosen.attn_lens))} | "
               + " ".join(f"{k} {v}" for k, v in asdict(chosen.settings).items() if v != "") + f" | table {out_dir / stem}.csv")
    typer.echo(speed_plan(chosen).describe())
    if dry_run:
        return
    say = (lambda msg: None) if quiet else (lambda msg: typer.echo(msg, err=True))
    result = speed_table(chosen.attn_lens, chosen.settings, out_dir=out_dir, name=stem, profile=chosen.profile, echo=say)
    figures = table9_figure(result.table, fig_dir / f"{stem}.png")
    m = result.machine
    typer.echo(f"{result.model} ({result.size}, {count_label(result.params)} parameters) on {m.device} ({m.device_name}), "
               f"{m.threads} threads, torch {m.torch}; fp32 matmul ceiling {m.matmul_peak_gflops:,.0f} GFLOP/s")
    typer.echo(table9_markdown(result.rows))
    contention = contention_warning(result.rows)
    if contention:
        typer.echo(f"warning: {contention}")
    for path in [result.table, result.markdown, *figures]:
        typer.echo(f"written {path}")
    if json_output:
        print_json(result.summary())


@app.command()
def recl(
    members: list[str] = typer.Argument(None, help="More group members (presets, run directories or hf:PATH), after --group's first one.", show_default=False),
    group: list[str] = typer.Option([], "--group", "-g", help="Group members: preset names (trained or found in --models-root), run directories, "
                                    "or hf:PATH_OR_HUB_ID (a Hugging Face causal LM), space-separated: --group xl151m qrnn lstm. "
                                    "With --study: the study's groups to run \\[default: all]."),
    r: list[str] = typer.Option([], "--r", help="Fraction of hardest targets, repeatable or comma-separated: --r 0.1 --r 0.5 (the setting rs) \\[default: the study's, else 0.1 0.5 1.0]."),
    size: str = typer.Option(None, "--size", help="Size of preset members: paper, cpu or tiny \\[default: the study's, else cpu]."),
    data: str = typer.Option(None, "--data", help="Corpus of preset members \\[default: each preset's own]."),
    text: str = typer.Option(None, "--text", help="Your own text, which every member is scored on: a UTF-8 file (cut 90/5/5) or a folder "
                             "of train/valid/test files; preset members train on it."),
    tokenizer: str = typer.Option(None, "--tokenizer", help="How --text becomes tokens: char, word or hf:PATH_OR_HUB_ID "
                                  "\\[default: the first hf: member's own tokenizer, else char]."),
    unit: str = typer.Option(None, "--unit", help="What context lengths and targets count: token (members share one tokenizer) or word (words of "
                             "--text, shared by members with any tokenizers; give the grid in words, e.g. --set grid=2:40:2; each member's "
                             "table is kept in its run folder, so a rerun or a group with another member reads only what is new) "
                             "\\[default: the study's, else token]."),
    label: list[str] = typer.Option([], "--label", help="A member's display name, MEMBER=NAME, repeatable: --label hf:ckpt/gpt2=GPT-2 "
                                    "--label my-run=\"XL (ours)\". MEMBER as the group names it or as the table would (the preset, the "
                                    "folder's name); NAME is what Table 8, the legends, recl.json and a command-line group's folder call it "
                                    "(the setting labels) \\[default: the study's labels, else the preset or folder name]."),
    corpus_dir: str = _CORPUS_DIR,
    device: str = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... \\[default: the study's, else cpu]."),
    overrides: list[str] = typer.Option([], "--set", help="A setting (keys: `txlab recl --show-settings`), e.g. --set grid=20:240:20 --set placebo=true "
                                        "--set slurm.partition=gpu; or a preset member's config key under model., data., train. or eval. "
                                        "(where they live, how missing ones train), e.g. --set train.max_steps=400. Repeatable."),
    launcher: str = typer.Option(None, "--launcher", help="How missing presets train and each member's losses are collected: local (here) or slurm "
                                 "(one submitit job each, waited for) \\[default: the study's, else local]."),
    train_seeds: str = typer.Option(None, "--train-seeds", help="Training seeds, comma-separated: each preset member trains once per seed "
                                    "(<preset>-<size>-<corpus>-seed<s>), RECL is computed once per seed's group (<group>/seed-<s>/), and "
                                    "table8-seeds.{csv,md,json} give each RECL per seed and its spread \\[default: the study's, else one run, no seed].",
                                    show_default=False),
    export_losses: bool = typer.Option(None, "--export-losses", help="Also write every member's per-token losses beside Table 8 as one tidy "
                                       "table, losses.csv (and losses.parquet with pyarrow): member, unit, c, target, target_text, loss, "
                                       "placebo_loss (the setting export_losses).", show_default=False, metavar=""),
    dry_run: bool = DRY_RUN,
    study: Path = typer.Option(None, "--study", help="A RECL study YAML (studies/table8.yaml): its groups and the --profile's settings."),
    profile: str = typer.Option("cpu", "--profile", "-p", help="The study profile (with --study)."),
    name: str = typer.Option(None, "--name", help="Group name for the output folders \\[default: members joined by '+', then size and corpus]."),
    models_root: str = typer.Option(None, "--models-root", help="Where preset runs live (<root>/<preset>-<size>-<corpus>/) \\[default: the study's, else <home>/results/models]."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Tables go to <out-dir>/<group>/ \\[default: <home>/results/recl].", show_default=False),
    fig_dir: Path = typer.Option(None, "--fig-dir", help="Figures go to <fig-dir>/<group>/ \\[default: <home>/figures/recl].", show_default=False),
    redraw: list[Path] = typer.Option([], "--redraw", help="Only draw the figures again from a group's folder of tables (results/recl/<group>), "
                                      "into <fig-dir>/<group>/; nothing trains or scores. Repeat it for the groups of one study: a model "
                                      "keeps one colour across them.", show_default=False),
    _show: bool = show_settings("txlab.drivers.recl.settings", "ReclSettings"),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Relative effective context length of a group of models (the paper's Table 8, Figures 3 and 4).

    First prints the plan (models to train, token-steps to collect, an estimated time on this machine;
    --dry-run stops there). Without --study, --size paper scores the paper's grid 100..1000 and 20 x 500
    targets, a smaller size a grid up to the models' training span and 8 x 250 targets.

    The other settings (grid, blocks, block_len, placebo, n_boot, ...) are --set keys (`txlab recl --show-settings`).
    For long contexts, --set stride=512 reads each run of 512 targets once per c: contexts in [c, c + 512).

    Trains the presets that are missing (or refuses with --set train_missing=false), collects per-token
    losses at each context length of the grid on one shared set of target blocks (resumable), and prints
    each model's RECL at each r with a bootstrap interval ('>= c' when it ran off the grid). Example:
    txlab recl --group xl151m qrnn lstm --r 0.1

    Members with different tokenizers share words, not tokens: --unit word scores each on the words of --text
    that every member spells exactly, after exactly c words of context, e.g.
    txlab recl --group hf:gpt2-dir hf:llama-dir RUN_DIR --text notes.txt --unit word --set grid=2:40:2
    """
    from txlab.config import parse_seeds
    from txlab.drivers.recl.report import SeedsResult, redraw_groups, summary
    from txlab.drivers.recl.run import recl_groups
    from txlab.drivers.recl.settings import parse_rs

    if redraw:
        from txlab.workspace import resolve

        for path in redraw_groups(redraw, fig_dir or resolve("figures/recl")):
            typer.echo(f"wrote {path}")
        return
    say = (lambda msg: None) if quiet else (lambda msg: typer.echo(msg, err=True))
    options = {"size": size, "data": data, "text": text, "tokenizer": tokenizer, "unit": unit, "rs": parse_rs(r), "device": device,
               "models_root": models_root, "launcher": launcher, "train_seeds": parse_seeds(train_seeds), "labels": label or None,
               "export_losses": export_losses or None}
    results = recl_groups(
        [*group, *(members or [])], study, profile, name, options=options, sets=[*([f"data.corpus_dir={corpus_dir}"] if corpus_dir else []), *overrides],
        out_dir=out_dir, fig_dir=fig_dir, announce=typer.echo, echo=say, progress=not quiet, dry_run=dry_run,
    )
    for result in results:
        seeds = f" over training seeds {', '.join(map(str, result.train_seeds))}" if isinstance(result, SeedsResult) else ""
        unit = "words" if (result.seeds[0] if isinstance(result, SeedsResult) else result).settings.unit == "word" else "targets"
        typer.echo(f"RECL of {result.group}{seeds} ({result.n_targets:,} {unit}; '>= c': ran off the grid):")
        typer.echo(result.markdown.rstrip())
        for path in [*(f for one in getattr(result, "seeds", []) for f in one.files), *result.files]:
            typer.echo(f"written {path}")
    if json_output:
        print_json(summary(results))


@app.command()
def ablate(
    study: Path = typer.Argument(..., help="A study YAML (studies/table6.yaml, table7.yaml, table10.yaml).", show_default=False),
    profile: str = typer.Option("cpu", "--profile", "-p", help="The study's profile: paper (GPUs, the paper's settings) or cpu (2 cores, minutes)."),
    shard: str = typer.Option(None, "--shard", help="Run only shard i of N (i/N, e.g. 2/4: every 4th run from the 2nd), for one machine or array task each."),
    seeds: str = typer.Option(None, "--seeds", help="Run only these training seeds of the profile (comma-separated, e.g. 0,1,2; before --shard splits "
                              "them): a long study done a few seeds at a time. The table covers every run present.", show_default=False),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs with parameters, evaluation lengths, estimated time and status; run nothing.", metavar=""),
    report_only: bool = typer.Option(False, "--report", help="Only rebuild the table and figure from the runs present (e.g. after merging shards).", metavar=""),
    launcher: str = typer.Option("local", "--launcher", help="local: the runs one after the other here; slurm: one Slurm job per run through submitit "
                                 "(pip install 'txlab\\[slurm]'), waited for here, settings from the profile's slurm: mapping or --set."),
    overrides: list[str] = typer.Option([], "--set", help="Override a profile setting (keys: `txlab ablate --show-settings`), e.g. --set eval_tokens=20000 "
                                        "--set slurm.partition=gpu --set slurm.time_min=600 (repeatable)."),
    _show: bool = show_settings("txlab.drivers.ablate_study", "AblationSettings"),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Ablation grid: train every configuration of a study (or find it trained), score each at the
    study's evaluation attention lengths, and write the paper's Table 6 layout (Remark, Recurrence,
    Encoding, Loss, PPL init, PPL best, Attn Len) plus a figure of perplexity against attention length.

    A profile's settings (size, eval_lens, seeds, slurm, ...) are also --set keys: `txlab ablate --show-settings` lists them.

    Stages leave files behind, so rerunning resumes an interrupted study. Example:
    txlab ablate studies/table6.yaml --profile cpu
    """
    from txlab.config import parse_seeds
    from txlab.drivers.ablate import run_study

    say = (lambda msg: None) if quiet else (lambda msg: typer.echo(msg, err=True))
    result = run_study(study, profile, shard=shard, seeds=parse_seeds(seeds, "--seeds"), dry_run=dry_run, report_only=report_only, launcher=launcher, sets=overrides,
                       progress=not quiet, announce=typer.echo, echo=say)
    if result.table is not None:
        typer.echo(result.table.markdown.rstrip())
        if result.table.claims:
            from txlab.analysis.claims import claims_markdown

            typer.echo("\n" + claims_markdown(result.table.claims).rstrip())
        for path in result.table.files:
            typer.echo(f"written {path}")
    if json_output:
        print_json(result.summary())
    for failure in result.failed or []:
        typer.echo(f"failed: {failure.describe()}", err=True)
    if result.failed:
        typer.echo("the other runs are in the table; rerun the same command to resume the failed ones", err=True)
        raise typer.Exit(code=1)


# ---------------------------------------------------------------------------------------------------
# txlab attention | generate: looking inside a trained model (the paper's Appendices D and E)


@app.command("attention")
def attention_command(
    run_dir: Path = typer.Argument(..., help="A Transformer-XL run directory made by `txlab train`."),
    split: str = typer.Option("valid", "--split", help="train, valid or test."),
    tokens: int = typer.Option(10_000, "--tokens", help="Queries to average over, at least (0 = the whole split)."),
    tgt_len: int = typer.Option(None, "--tgt-len", help="Segment length \\[default: the run's eval.tgt_len]."),
    mem_len: int = typer.Option(None, "--mem-len", help="Memory length \\[default: the run's eval.mem_len]."),
    batch_size: int = typer.Option(None, "--batch-size", help="Streams read in parallel \\[default: the run's eval.batch_size]."),
    heads: int = typer.Option(3, "--heads", help="Widest-span heads shown in Figure 6."),
    sample_rows: int = typer.Option(16, "--sample-rows", help="Queries (rows) of Figure 6's sample."),
    terms: str = typer.Option(None, "--terms", help="Score terms of Figure 7, comma-separated letters from a,b,c,d \\[default: those of a,b,d the model has]."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Figures and tables go to <out-dir>/<run name>/ \\[default: <home>/figures/attention].", show_default=False),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    from_csv: bool = typer.Option(False, "--from-csv", help="Only draw Figures 5-7 again from the tables (CSV and attention.json) an earlier run of this "
                                  "command wrote in <out-dir>/<run name>/: no checkpoint needed, nothing is read through the model.", metavar=""),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Where a trained Transformer-XL attends: the paper's Appendix D figures.

    Figure 5: average attention by relative distance for every head of every layer. Figure 6: the
    widest-span heads at a sample position. Figure 7: the same averages for the score terms (a)
    content-content, (b) content-position and (d) global position bias, each alone. Writes PNG, PDF
    and the numbers as CSV to <out-dir>/<run name>/.
    """
    from txlab.measure.attention import attention_analysis, redraw_attention

    if from_csv:
        result = redraw_attention(run_dir, out_dir=out_dir)
        for path in result["files"]:
            typer.echo(f"written {path}")
        if json_output:
            print_json({"files": result["files"]})
        return
    chosen = [t.strip() for t in terms.split(",") if t.strip()] if terms else None
    result = attention_analysis(run_dir, split=split, n_targets=tokens, tgt_len=tgt_len, mem_len=mem_len, batch_size=batch_size,
                                heads=heads, sample_rows=sample_rows, terms=chosen, out_dir=out_dir, device=device, progress=not quiet)
    typer.echo(f"{result['label']}: {result['split']}, {result['queries']:,} queries, segment {result['tgt_len']}, memory {result['mem_len']}")
    n_head = max(h["head"] for h in result["heads"])
    typer.echo("mean attended distance (tokens), by layer and head:")
    typer.echo("layer " + "".join(f"{f'h{h}':>8}" for h in range(1, n_head + 1)))
    for layer in sorted({h["layer"] for h in result["heads"]}):
        typer.echo(f"{layer:>5} " + "".join(f"{h['mean_distance']:8.1f}" for h in result["heads"] if h["layer"] == layer))
    typer.echo("widest: " + ", ".join(f"layer {h['layer']} head {h['head']}" for h in result["widest"]))
    if result["term_mean_distance"]:
        typer.echo("each term alone, mean distance over heads: " + ", ".join(f"({t}) {d:.1f}" for t, d in result["term_mean_distance"].items()))
    for note in result["notes"]:
        typer.echo(f"note: {note}")
    for path in result["files"]:
        typer.echo(f"written {path}")
    if json_output:
        print_json({k: v for k, v in result.items() if k != "files"})


@app.command("generate")
def generate_command(
    run_dir: Path = typer.Argument(..., help="A run directory made by `txlab train` (any model family), or hf:PATH_OR_HUB_ID "
                                    "(a Hugging Face checkpoint with its tokenizer)."),
    prompt: str = typer.Option(None, "--prompt", help="The text to continue."),
    prompt_file: Path = typer.Option(None, "--prompt-file", help="Read the text to continue from this UTF-8 file."),
    tokens: int = typer.Option(100, "--tokens", help="Tokens to generate."),
    top_k: int = typer.Option(40, "--top-k", help="Sample from the k most likely tokens, renormalised."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling: of those k, keep the most likely until their probability reaches p (1 keeps all)."),
    temperature: float = typer.Option(1.0, "--temperature", help="Divide the log-probabilities by this before sampling."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same text."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1, ..."),
    json_output: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Continue a prompt by sampling with memory (the paper's Appendix E), streaming the text as it comes.

    The prompt is read once, then each sampled token is fed back carrying the model's state. Unknown
    words become <unk> (with a warning) where the vocabulary has it. Example:
    txlab generate runs/results/models/xl128m-cpu-tinyshakespeare --prompt "ROMEO:" --tokens 200 --seed 1
    """
    from txlab.measure.generate import generate

    say = (lambda message: None) if quiet else (lambda message: typer.echo(message, err=True))
    result = generate(run_dir, prompt=prompt, prompt_file=prompt_file, n_tokens=tokens, top_k=top_k, temperature=temperature,
                      seed=seed, device=device, top_p=top_p, on_text=lambda text: typer.echo(text, nl=False),
                      warn=lambda message: say(f"warning: {message}"))
    typer.echo("")
    say(f"generated {len(result['tokens'])} tokens after a {result['prompt_tokens']}-token prompt "
        f"(top-k {top_k}" + (f", top-p {top_p:g}" if top_p < 1 else "") + f", temperature {temperature:g}, seed {seed})" + (" before Ctrl-C stopped it" if result["interrupted"] else ""))
    if json_output:
        print_json(result)
    if result["interrupted"]:
        raise typer.Exit(code=130)  # the shell's code for a command stopped by Ctrl-C (SIGINT)


# ---------------------------------------------------------------------------------------------------
# txlab import: hf | reference

import_app = typer.Typer(help="Import an existing Transformer-XL checkpoint into a txlab run directory.", no_args_is_help=True)
app.add_typer(import_app, name="import")

_IMPORT_OUT = typer.Option(..., "--out", help="Run directory to create, e.g. runs/results/models/xl-wt103-hf.")
_IMPORT_DATA = typer.Option(..., "--data", help="The txlab corpus the model reads (e.g. wikitext-103): what eval and recl score it on.")
_IMPORT_FORCE = typer.Option(False, "--force", help="Replace an existing run directory at --out (deletes its evaluations and losses).", metavar="")


def _report_import(result) -> None:
    typer.echo(f"imported {result.params:,} parameters and a {result.vocab_size:,}-symbol vocabulary into {result.run_dir}")
    for note in result.notes:
        typer.echo(f"  note: {note}")
    typer.echo(f"next: txlab eval {result.run_dir}")


@import_app.command("hf")
def import_hf_command(
    directory: str = typer.Argument(..., help="A Hugging Face TransfoXLLMHeadModel directory (config.json and model.safetensors or pytorch_model.bin), "
                                    "or a Hub id ORG/NAME, downloaded when it is not a local directory (pip install 'txlab\\[hub]')."),
    out: Path = _IMPORT_OUT,
    data: str = _IMPORT_DATA,
    vocab: Path = typer.Option(None, "--vocab", help="Vocabulary: tokenizer pickle, or plain text with one symbol per line \\[default: DIR/vocab.pkl, vocab.bin or vocab.txt]."),
    config: str = typer.Option("", "--config", help="YAML of run settings applied over those from config.json (e.g. eval lengths), before --set."),
    overrides: list[str] = SET,
    force: bool = _IMPORT_FORCE,
) -> None:
    """Convert a Hugging Face TransfoXL checkpoint (a directory, or a Hub id such as transfo-xl/transfo-xl-wt103): shape and memory settings from its config.json.

    The tokenizer's pickled vocabulary is read without running code from it.
    """
    from txlab.runs.convert import import_hf

    _report_import(import_hf(directory, out, corpus=data, vocab_file=vocab, config_file=config or None, overrides=overrides, force=force))


@import_app.command("reference")
def import_reference_command(
    state_dict: Path = typer.Argument(..., help="State dict of the authors' MemTransformerLM (torch.save of model.state_dict(), or .safetensors)."),
    vocab: Path = typer.Option(..., "--vocab", help="Its vocabulary in id order: plain text (one symbol per line), a tokenizer pickle or a txlab vocab.json."),
    out: Path = _IMPORT_OUT,
    data: str = _IMPORT_DATA,
    preset: str = typer.Option("", "--preset", help="Preset giving the hyper-parameters (e.g. xl151m for the WikiText-103 base model)."),
    size: str = typer.Option("paper", "--size", help="Size of --preset \\[default: paper, the size of the authors' released checkpoints].", show_default=False),
    config: str = typer.Option("", "--config", help="YAML of hyper-parameters (model: {n_layer: ..., cutoffs: ...}), after --preset."),
    overrides: list[str] = SET,
    force: bool = _IMPORT_FORCE,
) -> None:
    """Convert a state dict of the authors' reference PyTorch code; its hyper-parameters come from --preset, --config and --set.

    model.n_token is the vocabulary's size; shared or per-layer biases and weight tying are read off the weights.
    """
    from txlab.runs.convert import import_reference

    _report_import(import_reference(state_dict, out, vocab_file=vocab, corpus=data, preset=preset or None, size=size,
                                    config_file=config or None, overrides=overrides, force=force))


@app.command("export")
def export_command(
    run_dir: Path = typer.Argument(..., help="A run directory of model family hf (e.g. the gpt2 or llama preset trained by `txlab train`)."),
    out: Path = typer.Argument(..., help="New folder for the Hugging Face checkpoint."),
) -> None:
    """Write a run of model family hf as a Hugging Face checkpoint folder (config.json, model.safetensors), with the
    tokenizer of a run on own text (its Hugging Face one, or txlab's char or word vocabulary as one).

    from_pretrained loads it, every txlab command takes it as hf:OUT; txlab_export.json records the run's vocabulary."""
    from txlab.runs.convert import export_hf_run

    result = export_hf_run(run_dir, out)
    for path in result.files:
        typer.echo(f"written {path}")
    typer.echo(f"next: {result.next_command}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
