"""Committed records name no folder of the machine that made them (#61): a run's config.yaml names its own text relative
to itself when the text lies in the home, the GPU benchmark names the paths it was given by placeholders, and the
documented commands of the words groups find their committed runs from a clone at any path."""

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from txlab.config import RunConfig, load_config, save_config, update_dataclass

from conftest import sample_file

ROOT = Path(__file__).resolve().parents[1]
ABSOLUTE = re.compile(rb"(?<![\w.~$-])/(?:work|tmp|root|home|Users|mnt|scratch|var|private)/")
"""The start of an absolute path into a machine's own folders (not a URL's path: its slash follows a host name)."""


def test_no_committed_record_holds_an_absolute_path():
    found = []
    for folder in ("results", "figures"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in {".json", ".jsonl", ".yaml", ".md", ".csv", ".txt", ".tex", ".log", ".py"} and path.is_file():
                found += [f"{path.relative_to(ROOT)}: {m.group().decode()}" for m in ABSOLUTE.finditer(path.read_bytes())]
    assert not found, found[:10]


def test_a_run_records_a_text_in_the_home_relative_to_itself_and_one_elsewhere_as_it_is(tmp_path, monkeypatch):
    home, elsewhere = tmp_path / "home", tmp_path / "corpora"
    monkeypatch.setenv("TXLAB_HOME", str(home))
    inside = update_dataclass(RunConfig(), {"data": {"corpus": "text", "text": str(home / "texts" / "a.txt")}})
    outside = update_dataclass(RunConfig(), {"data": {"corpus": "text", "text": str(elsewhere / "b.txt")}})
    run = home / "results" / "models" / "run"
    assert "text: ../../../texts/a.txt\n" in save_config(inside, run / "config.yaml").read_text()
    assert load_config(run / "config.yaml") == inside
    moved = shutil.copytree(home, tmp_path / "moved")  # the home at another path: its record names its own copy of the text
    assert load_config(moved / "results" / "models" / "run" / "config.yaml").data.text == str(moved / "texts" / "a.txt")
    assert f"text: {elsewhere / 'b.txt'}\n" in save_config(outside, run / "config.yaml").read_text()
    assert load_config(run / "config.yaml") == outside


def test_the_gpu_benchmark_records_the_paths_it_was_given_as_placeholders():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    gpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu)
    assert (gpu.recorded_command(["--text", "/tmp/text.txt", "--out=/root/out", "--only", "recl"])
            == "python benchmarks/gpu.py --text TEXT --out=OUT --only recl")


def wikitext_clone(clone: Path) -> Path:
    """What the WikiText words groups' commands read, at another path than the repository: the study file, the committed
    runs, and the text `studies/words_texts.py wikitext` makes, with word-level stand-ins for its two BPEs (training
    them takes 20 s; the runs named after their tokenizer are the first group's GPT-2 and Llama, which then go
    unnamed here)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    (clone / "studies").mkdir(parents=True)
    shutil.copy(ROOT / "studies" / "recl-words.yaml", clone / "studies")
    for run in (ROOT / "results" / "models").glob("*-words-wikitext-*"):  # what a clone has: no checkpoint, no kept losses
        shutil.copytree(run, clone / "results" / "models" / run.name, ignore=shutil.ignore_patterns("checkpoint", "losses", ".lock"))
    text = clone / "runs" / "words-wikitext"
    text.mkdir(parents=True)
    shutil.copy(sample_file("wikitext-2-sample/test.txt"), text / "train.txt")
    shutil.copy(sample_file("wikitext-2-sample/valid.txt"), text / "valid.txt")
    for name in ("bpe-bytes", "bpe-metaspace", "bpe-bytes-8k", "bpe-metaspace-8k"):
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0, "the": 1}, unk_token="<unk>"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(text / name)
    return clone


def test_the_wikitext_words_groups_documented_commands_find_their_committed_runs_from_a_clone_elsewhere(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(wikitext_clone(tmp_path / "elsewhere" / "txlab"))
    # the plan estimates each member's tokens from the first MiB of each file, which was most of this test's time;
    # a smaller sample estimates alike, and the subject here is which runs the plan names
    monkeypatch.setattr("txlab.data.textdata.ESTIMATE_CHARS", 1 << 14)
    for readme in sorted((ROOT / "results" / "recl").glob("recl-words-architectures-*/README.md")):
        commands = re.findall(r"^    txlab (--home \. recl --study studies/recl-words\.yaml .*)$", readme.read_text(), re.MULTILINE)
        assert commands, readme
        for command in commands:  # the first collection's, and a collection again where there was one
            out = cli.ok(*command.split(), "--dry-run").output
            assert f"group {readme.parent.name}:" in out
            runs = re.findall(r"train .+? into results/models/(\S+) ", out)
            committed = [run for run in runs if (ROOT / "results" / "models" / run / "config.yaml").is_file()]
            # BPE members named after their tokenizers (the first group's, each seed's) are not the stand-ins'; the XL and
            # the LSTM are found, once per training seed in the group over seeds
            assert len(committed) == (4 if "longer" in readme.parent.name else 6 if "seeds" in readme.parent.name else 2), out


def test_a_checkpoint_records_its_text_in_the_home_as_its_config_yaml_does(tmp_path, monkeypatch):
    from txlab.config import ModelConfig
    from txlab.models.build import build_model
    from txlab.runs.checkpoint import read_meta, save_checkpoint, saved_config

    home = tmp_path / "home"
    monkeypatch.setenv("TXLAB_HOME", str(home))
    cfg = update_dataclass(RunConfig(), {"data": {"corpus": "text", "text": str(home / "texts" / "a.txt")},
                                         "model": {"n_token": 11, "n_layer": 1, "d_model": 8, "n_head": 2, "d_head": 4, "d_inner": 8}})
    run = home / "results" / "models" / "run"
    run.mkdir(parents=True)
    save_checkpoint(run, build_model(ModelConfig(**vars(cfg.model))), cfg, step=1, vocab_hash="x")
    assert read_meta(run)["config"]["data"]["text"] == "../../../../texts/a.txt"  # from run/checkpoint/
    assert saved_config(run).data.text == str(home / "texts" / "a.txt")
    moved = shutil.copytree(home, tmp_path / "moved")
    assert saved_config(moved / "results" / "models" / "run").data.text == str(moved / "texts" / "a.txt")
