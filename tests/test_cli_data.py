"""`txlab data list|get|info` through typer's CliRunner, downloads from a local HTTP server included."""

import dataclasses
import hashlib
import io
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from txlab.config import DataConfig
from txlab.data import registry
from txlab.data.corpus import load_corpus
from txlab.data.registry import RemoteFile

SHAKESPEARE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 30).encode()


# ---------------------------------------------------------------------------------------------------
# A local file server that speaks HTTP Range and can cut a response short once


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        server = self.server
        body = server.files.get(self.path.lstrip("/"))
        server.requests.append((self.path, self.headers.get("Range")))
        if body is None:
            self.send_error(404)
            return
        start = int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
        payload = body[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if server.cut_after is not None:  # promise the whole body, send part of it, hang up
            payload, server.cut_after = payload[: server.cut_after], None
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def file_server(monkeypatch):
    """Serves ``server.files`` on 127.0.0.1 and is the data mirror; stopped when the test ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.files, server.requests, server.cut_after = {}, [], None
    server.timeout = 5
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("TXLAB_DATA_MIRROR", f"http://127.0.0.1:{server.server_address[1]}/files")
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _serve_shakespeare(server, monkeypatch, content: bytes = SHAKESPEARE) -> Path:
    """Register a tinyshakespeare download whose checksum is that of SHAKESPEARE; serve ``content``."""
    remote = RemoteFile("input.txt", ("http://unused.invalid/input.txt",), len(SHAKESPEARE), hashlib.sha256(SHAKESPEARE).hexdigest())
    monkeypatch.setitem(registry.CORPORA, "tinyshakespeare", dataclasses.replace(registry.CORPORA["tinyshakespeare"], downloads=(remote,)))
    server.files["files/input.txt"] = content
    return registry.corpus_dir(DataConfig(), "tinyshakespeare")


# ---------------------------------------------------------------------------------------------------
# list and info


def test_help_texts(cli):
    for command in ("list", "get", "info"):
        result = cli("data", command, "--help")
        assert result.exit_code == 0 and "--data-dir" in result.output
    assert "checksum" in cli("data", "get", "--help").output


def test_list_shows_presence_size_and_vocab(tmp_path, cli):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(SHAKESPEARE)
    before = cli.json("data", "list", "--data-dir", str(tmp_path), "--json")
    rows = {r["name"]: r for r in before["corpora"]}
    assert set(rows) == set(registry.CORPUS_NAMES)
    assert rows["tinyshakespeare"]["present"] and rows["tinyshakespeare"]["size_bytes"] == len(SHAKESPEARE)
    assert rows["tinyshakespeare"]["vocab_size"] is None  # not encoded yet
    assert not rows["wikitext-103"]["present"] and rows["synthetic"]["kind"] == "synthetic"
    assert cli("data", "info", "tinyshakespeare", "--data-dir", str(tmp_path), "-q").exit_code == 0
    result = cli("data", "list", "--data-dir", str(tmp_path), "--json")
    assert result.exit_code == 0
    line = next(line for line in result.output.splitlines() if line.startswith("tinyshakespeare"))
    assert " yes " in line and f"{len(SHAKESPEARE) / 1000:.1f} kB" in line
    assert {r["name"]: r for r in cli.last_json(result.output)["corpora"]}["tinyshakespeare"]["vocab_size"] == len(set(SHAKESPEARE.decode()))


def test_info_real_corpus_json(tmp_path, cli):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(SHAKESPEARE)
    result = cli("data", "info", "tinyshakespeare", "--data-dir", str(tmp_path), "--json", "--quiet")
    assert result.exit_code == 0, result.output
    info = cli.last_json(result.output)
    n, k = len(SHAKESPEARE), len(SHAKESPEARE) // 20
    assert {s: v["tokens"] for s, v in info["splits"].items()} == {"train": n - 2 * k, "valid": k, "test": k}
    assert info["files"][0]["sha256"] == hashlib.sha256(SHAKESPEARE).hexdigest()
    corpus = load_corpus(DataConfig(corpus="tinyshakespeare", data_dir=str(tmp_path)), progress=False)
    assert info["vocab_sha256"] == corpus.vocab.sha256 and info["cache_dir"] == str(corpus.cache_dir)
    assert info["splits"]["valid"]["token_stream_sha256"] == corpus.token_stream_hash("valid")
    assert f"{n - 2 * k:>13,} tokens" in result.output


def test_info_on_a_folder_with_only_some_splits(tmp_path, cli):
    for split in ("valid", "test"):
        (tmp_path / f"{split}.txt").write_text(f" the {split} split \n")
    result = cli("data", "info", "wikitext-2", "--corpus-dir", str(tmp_path), "-q", "--json")
    assert result.exit_code == 0, result.output
    info = cli.last_json(result.output)
    assert {s: v["tokens"] for s, v in info["splits"].items()} == {"valid": 4, "test": 4}
    assert "train" in info["missing_splits"] and "train: missing (looked for wiki.train.tokens or train.txt" in result.output


def test_info_synthetic(cli):
    result = cli("data", "info", "synthetic-short", "--json", "-q")
    assert result.exit_code == 0, result.output
    info = cli.last_json(result.output)
    assert info["vocab_size"] == 5312 and info["splits"]["valid"]["tokens"] == 200_000
    assert info["synthetic"]["max_context"] == 200 and abs(info["synthetic"]["fraction_copy_value"] - 0.13) < 0.005
    assert "copies 8..199 tokens back" in result.output


# ---------------------------------------------------------------------------------------------------
# Errors: one clean message, exit code 2


def test_unknown_corpus(cli):
    cli.assert_refused(cli("data", "info", "wikitxt-103"), "Did you mean 'wikitext-103'")
    cli.assert_refused(cli("data", "get", "enwk8"), "Did you mean 'enwik8'")


def test_missing_data_names_the_place_and_the_command(tmp_path, cli):
    cli.assert_refused(cli("data", "info", "ptb", "--data-dir", str(tmp_path)), str(tmp_path / "ptb"), "`txlab data get ptb`")


def test_empty_and_non_utf8_files(tmp_path, cli):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(b"")
    cli.assert_refused(cli("data", "info", "tinyshakespeare", "--data-dir", str(tmp_path), "-q"), "input.txt is empty")
    (tmp_path / "tinyshakespeare" / "input.txt").write_bytes(b"To be \xff or not")
    cli.assert_refused(cli("data", "info", "tinyshakespeare", "--data-dir", str(tmp_path), "-q"), "is not UTF-8 text")


def test_get_synthetic_needs_nothing(cli):
    result = cli("data", "get", "synthetic")
    assert result.exit_code == 0 and "nothing to download" in result.output


# ---------------------------------------------------------------------------------------------------
# Downloads


def test_get_downloads_verifies_and_then_reports_present(file_server, monkeypatch, cli):
    directory = _serve_shakespeare(file_server, monkeypatch)
    result = cli("data", "get", "tinyshakespeare", "-q")
    assert result.exit_code == 0, result.output
    assert f"tinyshakespeare: downloaded in {directory}" in result.output
    assert (directory / "input.txt").read_bytes() == SHAKESPEARE and not (directory / "input.txt.part").exists()
    assert file_server.requests == [("/files/input.txt", None)]
    again = cli("data", "get", "tinyshakespeare", "-q")
    assert "already present" in again.output and len(file_server.requests) == 1


def test_truncated_download_resumes_with_a_range_request(file_server, monkeypatch, cli):
    directory = _serve_shakespeare(file_server, monkeypatch)
    file_server.cut_after = 1000
    first = cli("data", "get", "tinyshakespeare", "-q")
    cli.assert_refused(first, f"stopped after 1,000 of {len(SHAKESPEARE):,} bytes", "run `txlab data get tinyshakespeare` again to resume")
    assert (directory / "input.txt.part").stat().st_size == 1000 and not (directory / "input.txt").exists()
    second = cli("data", "get", "tinyshakespeare", "-q")
    assert second.exit_code == 0, second.output
    assert file_server.requests[-1] == ("/files/input.txt", "bytes=1000-")
    assert (directory / "input.txt").read_bytes() == SHAKESPEARE


def test_checksum_mismatch_removes_the_download(file_server, monkeypatch, cli):
    tampered = SHAKESPEARE.replace(b"speak", b"SPEAK")
    directory = _serve_shakespeare(file_server, monkeypatch, content=tampered)
    result = cli("data", "get", "tinyshakespeare", "-q")
    cli.assert_refused(result, "checksum mismatch for input.txt", hashlib.sha256(SHAKESPEARE).hexdigest())
    assert not (directory / "input.txt").exists() and not (directory / "input.txt.part").exists()


def test_unreachable_mirror(file_server, monkeypatch, cli):
    _serve_shakespeare(file_server, monkeypatch)
    del file_server.files["files/input.txt"]
    cli.assert_refused(cli("data", "get", "tinyshakespeare", "-q"), "could not download input.txt", "HTTP 404")


def _tar_gz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_get_lm1b_unpacks_the_shards_and_fetches_the_reference_vocabulary(file_server, monkeypatch, tmp_path, cli):
    top = "1-billion-word-language-modeling-benchmark-r13output/"
    archive = _tar_gz({
        top + "training-monolingual.tokenized.shuffled/news.en-00001-of-00100": "the cat sat\n",
        top + "training-monolingual.tokenized.shuffled/news.en-00002-of-00100": "a dog ran\nthe end\n",
        top + "heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050": "the dog sat\n",
        top + "heldout-monolingual.tokenized.shuffled/news.en.heldout-00001-of-00050": "not extracted\n",
        top + "README": "not extracted",
    })
    vocab_file, shards = registry.CORPORA["lm1b"].downloads
    assert vocab_file.filename == "1b_word_vocab.txt" and shards.sha256 is not None and vocab_file.sha256 is None
    shards = dataclasses.replace(shards, size=len(archive), sha256=hashlib.sha256(archive).hexdigest())
    monkeypatch.setitem(registry.CORPORA, "lm1b", dataclasses.replace(registry.CORPORA["lm1b"], downloads=(vocab_file, shards)))
    file_server.files["files/" + shards.filename] = archive
    file_server.files["files/1b_word_vocab.txt"] = "<S> 5\nthe 3\ndog 2\n<UNK> 0\n".encode()
    result = cli("data", "get", "lm1b", "--data-dir", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    assert "note: 1b_word_vocab.txt has no published checksum (unverified)" in result.output
    directory = tmp_path / "lm1b"
    assert sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()) == [
        "1b_word_vocab.txt",
        "heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050",
        "training-monolingual.tokenized.shuffled/news.en-00001-of-00100",
        "training-monolingual.tokenized.shuffled/news.en-00002-of-00100",
    ]
    info = cli.json("data", "info", "lm1b", "--data-dir", str(tmp_path), "--json", "-q")
    assert info["vocab_size"] == 4  # the downloaded list, not the words counted in training
    # <S> the cat sat <S> a dog ran <S> the end <S>; valid and test: <S> the dog sat <S>
    assert {s: v["tokens"] for s, v in info["splits"].items()} == {"train": 12, "valid": 5, "test": 5}


def test_get_unpacks_an_archive(file_server, monkeypatch, tmp_path, cli):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for split in ("train", "valid", "test"):
            zf.writestr(f"wikitext-2/wiki.{split}.tokens", f" = {split} = \n the {split} text \n")
        zf.writestr("wikitext-2/README", "not extracted")
    archive = buffer.getvalue()
    remote = dataclasses.replace(registry.CORPORA["wikitext-2"].downloads[0], size=len(archive), sha256=hashlib.sha256(archive).hexdigest())
    monkeypatch.setitem(registry.CORPORA, "wikitext-2", dataclasses.replace(registry.CORPORA["wikitext-2"], downloads=(remote,)))
    file_server.files["files/wikitext-2-v1.zip"] = archive
    result = cli("data", "get", "wikitext-2", "--data-dir", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "wikitext-2").iterdir()) == ["wiki.test.tokens", "wiki.train.tokens", "wiki.valid.tokens"]
    info = cli.json("data", "info", "wikitext-2", "--data-dir", str(tmp_path), "--json", "-q")
    assert info["splits"]["train"]["tokens"] == 8  # = train = <eos> the train text <eos>
