"""Shared test setup.

- No test reads or writes the user's real corpus or cache directories, or a txlab home (runs/ or
  the repository's committed results): $TXLAB_HOME points at a fresh directory.
- Tests run torch on one thread: their models are tiny, where a second thread buys nothing, and on a
  2-core machine shared with any other work, two-thread parallel regions stall (measured: a tiny
  LSTM step went from 2 ms to 100 ms), which made the suite's run time erratic.
- The matmul ceiling that plans and speed rows read is measured once per worker process and setting,
  not at every command: every plan probes it five times, which cost the suite about a second a command.
- The suite runs on two worker processes (pytest-xdist, addopts in pyproject.toml): no test may rely on
  another having run first, in its process or at all.
- Shared helpers: the ``cli`` fixture (`txlab` in-process, with the JSON and user-error checks), the
  ``tiny_members`` fixture (copies of tiny runs trained once per worker process), the
  ``untrained_run`` fixture (a run directory holding a tiny model's checkpoint, no training), the
  ``hf_checkpoint`` fixture (a Hugging Face checkpoint folder with its tokenizer, built offline), the
  ``study_run`` fixture (the records of a finished ablation study run, no model), the
  ``figure_files_only`` fixture (figures drawn but not rendered to PNG and PDF) and the ``png_only``
  fixture (figures rendered to PNG, not PDF, for a redraw).
- The real sample texts the repository ships (studies/data) are read through :func:`sample_file` alone, when a
  test runs, never at import: a clone that lacks one skips the tests that need it, naming the file.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """The modules the fixtures use, imported in every process that runs tests. pytest-xdist's controller runs none
    (it hands them to the workers) and skips them: importing torch, matplotlib and txlab took it 4 s, before it
    started the workers."""
    if config.getoption("numprocesses", default=None) and not hasattr(config, "workerinput"):
        return
    global plt, torch, typer, yaml, CliRunner, Result, app, update_dataclass, load_corpus, write_atomic, build_model, save_checkpoint
    global run_config, matmul_peak_gflops
    import matplotlib.pyplot as plt
    import torch
    import typer.testing
    import yaml
    from typer.testing import CliRunner, Result

    from txlab.cli import app
    from txlab.config import update_dataclass
    from txlab.data.corpus import load_corpus
    from txlab.fileio import write_atomic
    from txlab.models.build import build_model
    from txlab.runs.checkpoint import save_checkpoint
    from txlab.runs.zoo import run_config
    from txlab.timing import matmul_peak_gflops


SAMPLES = Path(__file__).resolve().parents[1] / "studies" / "data"
"""The sample texts the repository ships (studies/data/README.md says what each file is)."""


def sample_file(name: str) -> Path:
    """The shipped sample text ``studies/data/<name>``; called from a test or a fixture, so that where it is missing
    the test skips with the reason instead of failing."""
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"the sample text {path} is missing: the repository ships it (git checkout -- studies/data)")
    return path


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True, scope="session")
def _ceiling_measured_once():
    # a real measurement still runs (the first one of each setting), so the code that measures stays exercised
    measured_once = functools.cache(matmul_peak_gflops)
    with pytest.MonkeyPatch.context() as patch:
        for module in ("txlab.runs.plan", "txlab.measure.speed"):
            patch.setattr(f"{module}.matmul_peak_gflops", measured_once)
        yield


@pytest.fixture(autouse=True, scope="session")
def _no_waiting_for_the_disk():
    # txlab fsyncs every file it writes atomically, so that a power cut leaves the old file or the new one; no test
    # cuts the power, and the suite's 1,500 fsyncs held a core idle for about 2.5 s (tests of a failing fsync set their own)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fsync", lambda fd: None)
        yield


@pytest.fixture(autouse=True, scope="session")
def _click_commands_built_once():
    # typer builds the app's click commands again on every invocation, evaluating every command's annotations
    # (measured: 21 s of a 386 s profile of the suite); a process's tests share one build per app, as one run of txlab does
    real_get_command = getattr(typer.testing, "_get_command", None)
    if real_get_command is None:  # a typer that invokes otherwise: each invocation builds its commands, only slower
        yield
        return
    built: dict[int, tuple] = {}  # id -> (the app, its click command)

    def get_command(typer_app: typer.Typer):
        if id(typer_app) not in built:
            built[id(typer_app)] = (typer_app, real_get_command(typer_app))  # the app kept, so its id is never reused
        return built[id(typer_app)][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", get_command)
        yield


@pytest.fixture(autouse=True)
def _isolated_txlab_dirs(tmp_path_factory, monkeypatch):
    """Point $TXLAB_DATA_DIR, $TXLAB_CACHE_DIR and $TXLAB_HOME at fresh empty directories and drop any mirror."""
    base = tmp_path_factory.mktemp("txlab-env")
    monkeypatch.setenv("TXLAB_HOME", str(base / "home"))
    monkeypatch.setenv("TXLAB_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("TXLAB_CACHE_DIR", str(base / "cache"))
    monkeypatch.delenv("TXLAB_DATA_MIRROR", raising=False)


class TxlabCli:
    """The `txlab` command run in-process through typer's CliRunner, with the checks CLI tests share."""

    def __init__(self) -> None:
        self._runner = CliRunner()

    def __call__(self, *args, **kwargs) -> Result:
        """``txlab ARGS...`` (paths and numbers may be passed as they are); kwargs go to CliRunner.invoke."""
        return self._runner.invoke(app, [str(arg) for arg in args], **kwargs)

    def ok(self, *args, **kwargs) -> Result:
        """``txlab ARGS...``, which must succeed."""
        result = self(*args, **kwargs)
        assert result.exit_code == 0, result.output
        return result

    def refused(self, *args, **kwargs) -> str:
        """The output of ``txlab ARGS...``, which must end in a user error (exit code 2) without a traceback."""
        result = self(*args, **kwargs)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        return result.output

    def json(self, *args, **kwargs) -> dict:
        """The JSON document a successful ``--json`` command prints on its last line."""
        return self.last_json(self.ok(*args, **kwargs).output)

    @staticmethod
    def last_json(output: str) -> dict:
        """The JSON document on the last line of a command's output."""
        return json.loads(output.strip().splitlines()[-1])

    @staticmethod
    def assert_refused(result: Result, *fragments: str) -> str:
        """A user error: exit code 2, one 'error: ...' message naming every fragment, no traceback."""
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        assert result.output.startswith("error: ")
        for fragment in fragments:
            assert fragment in result.output
        return result.output


@pytest.fixture(scope="session")
def cli() -> TxlabCli:
    return TxlabCli()


TINY_TRAINING = ("--set", "train.max_steps=2", "--set", "train.eval_interval=2", "--set", "data.synthetic_tokens=5000",
                 "--set", "data.synthetic_eval_tokens=600")
"""The recipe of the suite's tiny trained runs: 2 steps on a short synthetic corpus (``--size tiny``)."""


@pytest.fixture(scope="session")
def tiny_members(tmp_path_factory) -> Callable[..., Path]:
    """``copy(models_root, *presets)``: ``models_root`` holding a fresh copy of each preset's run trained at
    size tiny with :data:`TINY_TRAINING`, named as `txlab recl --size tiny` with that recipe finds its
    members (``<preset>-tiny-synthetic-small``); returns ``models_root``.

    Each preset trains once per worker process, the first time a test asks for it, with a corpus cache
    and home of its own (not the asking test's); tests only ever see copies, so none can change another's."""
    root = tmp_path_factory.mktemp("tiny-members")
    runs: dict[str, Path] = {}

    def trained(preset: str) -> Path:
        if preset not in runs:
            run = root / "models" / f"{preset}-tiny-synthetic-small"
            with pytest.MonkeyPatch.context() as env:
                for name in ("HOME", "DATA_DIR", "CACHE_DIR"):
                    env.setenv(f"TXLAB_{name}", str(root / name.lower()))
                TxlabCli().ok("train", preset, "--size", "tiny", "--run-dir", run, "--quiet", *TINY_TRAINING)
            runs[preset] = run
        return runs[preset]

    def copy(models_root: Path, *presets: str) -> Path:
        for preset in presets:
            shutil.copytree(trained(preset), Path(models_root) / f"{preset}-tiny-synthetic-small")
        return Path(models_root)

    return copy


@pytest.fixture
def figure_files_only(monkeypatch) -> list[Path]:
    """Figures drawn once without output in place of rendering them to PNG and PDF, for tests whose subject is
    not the image: rendering is most of the time of a command that draws (two formats, each laid out twice for
    the tight bounding box). The drawing code still runs and each figure is drawn, so an error in what it
    shows (a title matplotlib cannot parse, a layout that fails) still fails the test; empty files land,
    written the same atomic way, where its PNG and PDF would. Returns those paths, in the order asked.

    The layout is not computed either (``tight_layout`` and the constrained layout engine): it measures every
    label again, shows only in the rendered image, and was about half the drawing time of Figures 3 and 5.

    Where a test uses it, a comment names the default test that renders the figures it skips."""
    asked: list[Path] = []

    def save_figure(fig: plt.Figure, path: Path) -> list[Path]:
        fig.set_layout_engine("none")
        fig.draw_without_rendering()
        plt.close(fig)
        written = [write_atomic(Path(path).with_suffix(suffix), lambda fh: None) for suffix in (".png", ".pdf")]
        asked.extend(written)
        return written

    for module in ("txlab.analysis.figures", "txlab.measure.attention"):
        monkeypatch.setattr(f"{module}.save_figure", save_figure)
    monkeypatch.setattr(plt.Figure, "tight_layout", lambda fig, **kwargs: None)
    return asked


@pytest.fixture
def png_only(monkeypatch) -> None:
    """Figures rendered to PNG as txlab renders them, and an empty file where each PDF lands: for a second
    drawing of a figure whose PNG is the subject (a redraw compared byte for byte) after the test rendered
    it in full once, PDF included (rendering the PDF is about half the time). Asked for mid-test with
    ``request.getfixturevalue("png_only")``, it applies from there on."""
    for module in ("txlab.analysis.figures", "txlab.measure.attention"):
        real_save_figure = getattr(importlib.import_module(module), "save_figure")

        def save_figure(fig: plt.Figure, path: Path, real_save_figure=real_save_figure) -> list[Path]:
            savefig = fig.savefig
            fig.savefig = lambda fh, format, **kwargs: savefig(fh, format=format, **kwargs) if format == "png" else None
            return real_save_figure(fig, path)

        monkeypatch.setattr(f"{module}.save_figure", save_figure)


@pytest.fixture
def untrained_run():
    """A builder of untrained run directories: a preset at size tiny on a small synthetic corpus, its
    vocabulary filled in, weights from seed 0, saved at step 0 (a checkpoint is all that reading a model
    needs). ``sets`` are --set overrides; ``prepare(model)`` may change the weights before saving."""

    def build(path: Path, preset: str = "xl151m", sets: Sequence[str] = (), prepare: Callable[[torch.nn.Module], None] | None = None) -> Path:
        cfg = run_config(preset, "tiny", overrides=["data.synthetic_tokens=3000", "data.synthetic_eval_tokens=600", *sets])
        corpus = load_corpus(cfg.data, progress=False)
        cfg = update_dataclass(cfg, {"model": {"n_token": corpus.n_token}})
        torch.manual_seed(0)
        model = build_model(cfg.model)
        if prepare is not None:
            prepare(model)
        save_checkpoint(path, model, cfg, step=0, vocab_hash=corpus.vocab.sha256)
        return path

    return build


WORDS = "the of and to a in that is was he for it with as his on be at by i this had not are but from or have an they which".split()


def some_text(n_words: int = 3000, seed: int = 0) -> str:
    """Deterministic English-like lines: enough tokens for a few blocks of targets."""
    import random

    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n_words // 7)]
    return "\n".join(lines) + "\n"


@pytest.fixture
def hf_checkpoint():
    """``make(folder, text_file=None)``: what a researcher brings, a Hugging Face checkpoint folder with its
    tokenizer (a tiny GPT-2 with N(0, 0.5) weights and a byte-level BPE trained on :func:`some_text`),
    and with ``text_file`` that text beside it. Nothing is downloaded."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")

    def make(folder: Path, text_file: Path | None = None) -> Path:
        text = some_text()
        if text_file is not None:
            text_file.write_text(text)
        tok = tokenizers.Tokenizer(tokenizers.models.BPE())
        tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tokenizers.decoders.ByteLevel()
        trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, show_progress=False, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(text.splitlines(), trainer)
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
        return save_random_causal_lm(folder, "gpt2", vocab=tok.get_vocab_size(), positions=128)

    return make


def random_causal_lm_model(arch: str, vocab: int = 41, positions: int = 12, **from_config: object):
    """A tiny random GPT-2 or Llama (transformers); N(0, 0.5) weights so that context matters."""
    transformers = pytest.importorskip("transformers")
    common = dict(vocab_size=vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if arch == "gpt2":
        config = transformers.GPT2Config(n_positions=positions, n_embd=16, n_layer=2, n_head=2, n_inner=24, **common)
    else:
        config = transformers.LlamaConfig(max_position_embeddings=positions, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                          num_key_value_heads=2, intermediate_size=24, **common)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, **from_config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def save_random_causal_lm(folder: Path, arch: str, vocab: int = 41, positions: int = 12) -> Path:
    """:func:`random_causal_lm_model` saved as a Hugging Face folder."""
    random_causal_lm_model(arch, vocab, positions).save_pretrained(folder)
    return folder


@pytest.fixture
def random_causal_lm():
    """``save(folder, arch, vocab=41, positions=12)``: :func:`save_random_causal_lm`."""
    return save_random_causal_lm


@pytest.fixture
def study_run():
    """``make(root, run_id, row_id, seed, curve, ...)``: what a finished run of an ablation study leaves under
    ``root``/runs/``run_id`` (config.yaml, ablate/row.json, one score file per length of ``curve``: length ->
    perplexity, or bpc with ``metric="bpc"``), no model. ``validation`` (segment, memory, targets) is how
    training validated it."""

    def make(root: Path, run_id: str, row_id: str, seed: int, curve: dict[int, float], *, remark: str = "", mem_len: int = 16,
             pos_enc: str = "ours", loss: str = "full", init_len: int = 32, metric: str = "ppl",
             validation: tuple[int, int, int] | None = None) -> Path:
        run = root / "runs" / run_id
        (run / "ablate").mkdir(parents=True)
        cfg = {"model": {"family": "xl", "mem_len": mem_len, "pos_enc": pos_enc, "tgt_len": 16}, "train": {"loss": loss}}
        if validation:
            cfg["eval"] = {"tgt_len": validation[0], "mem_len": validation[1]}
            cfg["train"]["eval_tokens"] = validation[2]
        (run / "config.yaml").write_text(yaml.safe_dump(cfg))
        (run / "ablate" / "row.json").write_text(json.dumps({
            "run_id": run_id, "row_id": row_id, "remark": remark, "seed": seed, "init_len": init_len, "eval_lens": sorted(curve),
            "split": "valid", "eval_tokens": 100, "params": 1_500_000}))
        for length, value in curve.items():  # the loss in nats that the perplexity (or bpc) comes from
            nats = math.log(value) if metric == "ppl" else value * math.log(2)
            (run / "ablate" / f"attn{length}-valid-n100.json").write_text(json.dumps({metric: value, "loss": nats, "tokens": 100}))
        return run

    return make
