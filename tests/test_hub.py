"""`txlab import hf ORG/NAME`: a local directory is read as it is (the Hub is never asked), a Hub id
is fetched through huggingface_hub, and without network or without huggingface_hub one line says
how to download it by hand. Nothing here touches the network."""

import json
import os
import subprocess
import sys

import pytest

from txlab.errors import TxlabError
from txlab.runs.convert import import_hf

huggingface_hub = pytest.importorskip("huggingface_hub", reason="the Hub path needs huggingface_hub (pip install 'txlab[hub]')")

TRANSFO_XL = json.dumps({"model_type": "transfo-xl", "vocab_size": 50})


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
