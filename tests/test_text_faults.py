"""Own text and its cache under faults (issue 50): a full disk while encoding or collecting, a line without end, a
killed encoding, a damaged cache, a text a training cannot use. Each ends in one `error:` line, exit 2, with nothing
half-written and nothing lost."""

import builtins
import errno
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import some_text
from txlab.data import formats, textdata
from txlab.data.cache import _HOST

FULL = Path("/dev/full")
"""Every write to it fails with ENOSPC: a full disk, from the kernel itself."""


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "my.txt"
    path.write_text(some_text(1500))
    return path


def one_error(result) -> str:
    """The command's one `error:` line (exit 2, no traceback), after what it printed before (a plan)."""
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def cache_root() -> Path:
    return Path(os.environ["TXLAB_CACHE_DIR"])


def entries() -> list[Path]:
    return sorted((cache_root() / "text").iterdir()) if (cache_root() / "text").is_dir() else []


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("where", ["the token stream", "a split's reservation"])
def test_a_full_disk_while_encoding_text_is_one_line_and_leaves_no_folders(text, cli, monkeypatch, where):
    if where == "the token stream":
        opened = builtins.open
        monkeypatch.setattr(textdata, "open", lambda path, mode="r", **kw: opened(FULL if str(path).endswith("ids.raw") else path, mode, **kw),
                            raising=False)
        named = "ids.raw: No space left on device (errno 28, ENOSPC)"
    else:
        def refused(fd, offset, length):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "posix_fallocate", refused, raising=False)
        named = "train.npy: No space left on device (errno 28, ENOSPC)"
    cli.assert_refused(cli("data", "info", "--text", text, "-q"), named)
    assert not cache_root().exists()  # no entry, no build folder, no empty cache folders
    monkeypatch.undo()
    cli.ok("data", "info", "--text", text, "-q")  # room again: the rerun encodes


def test_a_write_numpy_cuts_short_without_an_errno_is_one_line(tmp_path, cli, monkeypatch, untrained_run):
    """numpy's failed write of a loss block says only 'N requested and M written' (its errno lost): txlab asks the file
    system what it refused. Here a file-size limit refuses (EFBIG) after the block's header, as a full disk would (ENOSPC)."""
    import resource

    from txlab.measure import losses

    write_atomic = losses.write_atomic

    def limited(path, write):  # the limit holds while a block is written, and only then
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (150, hard))  # the 128-byte .npy header fits, the losses do not
        try:
            return write_atomic(path, write)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    monkeypatch.setattr(losses, "write_atomic", limited)
    run = untrained_run(tmp_path / "xl")
    line = one_error(cli("recl", "--group", run, "--size", "tiny", "--set", "grid=4,8", "--set", "blocks=2", "--set", "block_len=20",
                         "--out-dir", tmp_path / "out", "--fig-dir", tmp_path / "fig", "-q"))
    assert line.endswith("block-00000.npy: File too large (errno 27, EFBIG)") and not list(run.rglob(".block-*"))


@pytest.mark.parametrize("tokenizer", ["word", "char"])
def test_a_line_longer_than_the_bound_is_refused_for_words_and_read_by_characters(text, cli, monkeypatch, tokenizer):
    monkeypatch.setattr(formats, "BLOCK_CHARS", 100)
    monkeypatch.setattr(formats, "MAX_LINE_CHARS", 1000)
    text.write_text(some_text(1500).replace("\n", " "))  # no line end at all
    if tokenizer == "word":
        cli.assert_refused(cli("data", "info", "--text", text, "--tokenizer", "word", "-q"), "has a line of more than 1,000 characters")
        assert not cache_root().exists()
    else:  # characters need no lines: read in blocks, whatever the line length
        assert "tokens" in cli.ok("data", "info", "--text", text, "-q").output


def test_running_out_of_memory_while_encoding_is_one_line(text, cli, monkeypatch):
    def no_memory(self, paths):
        raise MemoryError

    monkeypatch.setattr(textdata.CharTokenizer, "count", no_memory)
    cli.assert_refused(cli("data", "info", "--text", text, "-q"), "ran out of memory (MemoryError): nothing was cached")
    assert not cache_root().exists()


def test_a_killed_encodings_folder_is_removed_by_the_rerun(text, cli):
    cli.ok("data", "info", "--text", text, "-q")
    [entry] = entries()
    gone = _gone_pid()  # what a killed encoding was
    dead, alive = (entry.parent / f".{entry.name}.{_HOST}.{pid}.0123abcd.tmp" for pid in (gone, os.getpid()))
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "ids.raw").write_bytes(bytes(100))
    shutil.rmtree(entry)
    cli.ok("data", "info", "--text", text, "-q")
    assert not dead.exists() and alive.exists()  # a build in progress (here: this process) is left alone


def _gone_pid() -> int:
    """The pid of a process that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("damage", ["ids beyond the vocabulary", "no valid split"])
def test_a_training_refused_for_its_text_leaves_no_run(tmp_path, text, cli, damage):
    if damage == "no valid split":
        text = tmp_path / "splits"
        text.mkdir()
        (text / "train.txt").write_text(some_text(1500))
        (text / "test.txt").write_text(some_text(200))
        named = "has no valid split"
    else:
        cli.ok("data", "info", "--text", text, "-q")
        [entry] = entries()
        valid = np.load(entry / "valid.npy", mmap_mode="r+")
        valid[3] = np.iinfo(valid.dtype).max  # what a damaged disk or a hand edit leaves
        valid.flush()
        del valid
        named = f"{entry / 'valid.npy'} is damaged (token id 255, outside its vocabulary"
    line = one_error(cli("train", "xl151m", "--size", "tiny", "--text", text, "--run-dir", tmp_path / "run", "-q", "--set", "train.max_steps=2"))
    assert named in line and not (tmp_path / "run").exists()  # no .lock, config.yaml or metrics.jsonl


DAMAGE = {  # what a file that is no UTF-8 text holds, and what its refusal names
    "a stray Latin-1 byte mid-text": (lambda text: text[:5000].encode() + b"caf\xe9 " + text[5000:].encode(), "is not UTF-8 text: byte 0xe9 at offset 5,003"),
    "a binary file": (lambda text: bytes(range(256)) * 40, "is not UTF-8 text: byte 0x80 at offset 128"),
    "NULs only": (lambda text: bytes(4000), "holds a NUL character (character 0): it is a binary file"),
    "a byte-order mark only": (lambda text: b"\xef\xbb\xbf", "holds only a byte-order mark, no text"),
}
READERS = {  # every way a command reads own text: by characters, by words (lines), and in words (the text held whole)
    "tokens by characters": ("data", "info", "--tokenizer", "char", "-q"),
    "tokens by words": ("data", "info", "--tokenizer", "word", "-q"),
    "words": ("recl", "--group", "xl151m", "--size", "tiny", "--unit", "word", "--set", "grid=2:8:2", "-q"),  # read before any member trains
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("damage", DAMAGE)
def test_a_file_that_is_no_utf8_text_is_one_line_naming_it_on_every_reader(text, cli, damage, reader):
    make, named = DAMAGE[damage]
    text.write_bytes(make(some_text(1500)))
    args = READERS[reader]
    assert one_error(cli(*args, "--text", text)).startswith(f"error: {text} {named}")
    assert not cache_root().exists()  # no entry, no build folder


def test_a_leading_byte_order_mark_is_no_text_on_every_reader(tmp_path, cli):
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text(some_text(1500))
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    for tokenizer in ("char", "word"):
        read = [[line for line in cli.ok("data", "info", "--text", path, "--tokenizer", tokenizer, "-q").output.splitlines()
                 if line.startswith("vocabulary:") or "stream sha256" in line] for path in (plain, marked)]
        assert read[0] == read[1] and len(read[0]) == 4  # the same vocabulary and token streams


def test_a_line_longer_than_the_bound_is_refused_in_words(text, cli, monkeypatch):
    monkeypatch.setattr(formats, "BLOCK_CHARS", 100)
    monkeypatch.setattr(formats, "MAX_LINE_CHARS", 1000)
    text.write_text(some_text(1500).replace("\n", " "))
    assert "has a line of more than 1,000 characters" in one_error(cli(*READERS["words"], "--text", text))


def test_a_split_without_words_is_refused_in_words(text, cli):
    text.write_text(some_text(1500) + " " * 20000)  # the last 5% (the test split) and the valid split's end: spaces
    line = one_error(cli(*READERS["words"], "--text", text, "--set", "split=test"))
    assert f"the test split of {text} holds no words (data.text_split gives it 0.05 of" in line and line.endswith("give more text or a larger fraction")
