"""Hub ids. `txlab import hf ORG/NAME`: a local directory is read as it is (the Hub is never asked), a Hub id
is fetched through huggingface_hub, and without network or without huggingface_hub one line says
how to download it by hand. hf: members and tokenizers (issue 50): a Hub id the network cannot reach is refused in
seconds, or read from the Hugging Face cache; a bare name is a folder unless the cache holds it. Nothing here touches
the network: the Hub's address refuses every connection."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from txlab.errors import TxlabError
from txlab.runs.convert import import_hf

huggingface_hub = pytest.importorskip("huggingface_hub", reason="the Hub path needs huggingface_hub (pip install 'txlab[hub]')")

TRANSFO_XL = json.dumps({"model_type": "transfo-xl", "vocab_size": 50})


@pytest.mark.slow  # a fresh interpreter; test_offline_an_import_of_a_hub_id_is_refused_in_one_line pins the refusal in-process
def test_offline_the_error_is_one_line_that_says_how_to_download_it(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "txlab", "import", "hf", "transfo-xl/transfo-xl-wt103", "--out", str(tmp_path / "run"),
                           "--data", "wikitext-103"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: transfo-xl/transfo-xl-wt103 is not a directory here and could not be fetched from the Hugging Face Hub")
    assert "hf download transfo-xl/transfo-xl-wt103 --local-dir DIR" in line and "txlab import hf DIR" in line
    assert not (tmp_path / "run").exists()


def test_without_huggingface_hub_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if it were not installed
    with pytest.raises(TxlabError, match=r"pip install 'txlab\[hub\]', or download it where there is network"):
        import_hf("transfo-xl/transfo-xl-wt103", tmp_path / "run", corpus="wikitext-103")


def test_a_local_directory_is_read_as_it_is_and_a_hub_id_through_the_cache(tmp_path, monkeypatch):
    asked = []

    def snapshot_download(repo_id, allow_patterns):
        asked.append((repo_id, allow_patterns))
        snapshot = tmp_path / "cache" / "snapshots" / "0123abcd"
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(TRANSFO_XL)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    (tmp_path / "org" / "name" / "config.json").write_text(TRANSFO_XL)
    # A directory spelled like a Hub id is a local directory: the Hub is not asked.
    with pytest.raises(TxlabError, match="no weights in org/name"):
        import_hf("org/name", tmp_path / "run", corpus="synthetic")
    assert asked == []
    # An id with no such directory is fetched (only the files an import reads) and read from the cache.
    with pytest.raises(TxlabError, match=r"no weights in .*snapshots/0123abcd"):
        import_hf("transfo-xl/transfo-xl-wt103", tmp_path / "run", corpus="synthetic")
    assert asked == [("transfo-xl/transfo-xl-wt103", ["config.json", "model.safetensors", "pytorch_model.bin", "vocab.pkl", "vocab.bin", "vocab.txt"])]
    with pytest.raises(TxlabError, match="nor a Hub id"):
        import_hf(tmp_path / "absent", tmp_path / "run", corpus="synthetic")


# --- hf: members and tokenizers: a Hub id refused in seconds when it cannot be read; a bare name is a folder ------------


def in_hub_cache(cache: Path, repo_id: str, make) -> Path:
    """``make(folder)`` written where the Hugging Face cache keeps ``repo_id``'s snapshot (as a download leaves it)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    make(repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    return repo


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, the Hub at an address that refuses every connection, online."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:9/{tmp_path.name}")  # a new address: asked anew
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    (tmp_path / "my.txt").write_text("the king of a land and his people saw it\n" * 60)
    return tmp_path / "hub-cache"


def test_offline_an_import_of_a_hub_id_is_refused_in_one_line(hub, tmp_path, cli, monkeypatch):
    """`txlab import hf ORG/NAME` with HF_HUB_OFFLINE and nothing in the cache: one line saying how to download it by hand."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    (line,) = cli.refused("import", "hf", "transfo-xl/transfo-xl-wt103", "--out", tmp_path / "run", "--data", "wikitext-103").splitlines()
    assert line.startswith("error: transfo-xl/transfo-xl-wt103 is not a directory here and could not be fetched from the Hugging Face Hub")
    assert "hf download transfo-xl/transfo-xl-wt103 --local-dir DIR" in line and "txlab import hf DIR" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a fresh interpreter; test_a_hub_id_is_read_from_the_cache_when_offline_or_unreachable_and_refused_when_not_there pins the refusal in-process
def test_a_hub_id_the_network_cannot_reach_is_refused_in_one_line_without_retries(tmp_path):
    """Through the command line, the network unreachable by the environment (HF_ENDPOINT): stderr holds the one error
    line, none of the retries transformers alone printed for over a minute (no wall time is asserted: see
    benchmarks for speed)."""
    (tmp_path / "my.txt").write_text("the king of a land\n" * 50)
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    done = subprocess.run([sys.executable, "-m", "txlab", "eval", "hf:someorg/somemodel", "--text", "my.txt"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: someorg/somemodel is no local folder, and the Hugging Face Hub (http://127.0.0.1:9) does not answer")
    assert "hf download someorg/somemodel --local-dir DIR" in line


def test_a_hub_id_is_read_from_the_cache_when_offline_or_unreachable_and_refused_when_not_there(hub, tmp_path, cli, monkeypatch,
                                                                                               hf_checkpoint):
    from huggingface_hub import constants

    text = tmp_path / "my.txt"
    refused = cli.assert_refused(cli("eval", "hf:org/name", "--text", text, "-q"), "org/name is no local folder", "does not answer")
    in_hub_cache(hub, "org/name", hf_checkpoint)
    assert "valid: loss" in cli.ok("eval", "hf:org/name", "--text", text, "--max-tokens", 20, "-q").output  # the cached copy
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "valid: loss" in cli.ok("eval", "hf:org/name", "--text", text, "--max-tokens", 20, "-q").output
    cli.assert_refused(cli("eval", "hf:org/other", "--text", text, "-q"), "does not hold it while HF_HUB_OFFLINE is set")
    assert refused.count("\n") == 1


def test_a_bare_name_that_is_no_folder_is_refused_unless_the_cache_holds_it(hub, tmp_path, cli, monkeypatch, hf_checkpoint):
    text = tmp_path / "my.txt"
    monkeypatch.chdir(tmp_path)
    for command in (["eval", "hf:loop", "--text", text], ["eval", "hf:" + str(hf_checkpoint(tmp_path / "ck")), "--text", text, "--tokenizer", "hf:loop"],
                    ["recl", "--group", "hf:loop", "--text", text, "--dry-run"]):
        cli.assert_refused(cli(*command, "-q"), "no ", "loop: a bare name is a local folder, or a model the Hugging Face cache already holds")
    in_hub_cache(hub, "loop", hf_checkpoint)  # a legacy id downloaded before (as gpt2 is)
    assert "valid: loss" in cli.ok("eval", "hf:loop", "--text", text, "--max-tokens", 20, "-q").output
    (tmp_path / "loop").mkdir()  # a folder of that name is the folder
    cli.assert_refused(cli("eval", "hf:loop", "--text", text, "-q"), "loop has no config.json")
