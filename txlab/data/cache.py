"""The encoded-corpus cache: entries built once, checked against their source files, memory-mapped after.

A corpus read from files (a registry corpus, :mod:`txlab.data.formats`, or own text,
:mod:`txlab.data.textdata`) is encoded once into an entry: a folder holding ``{split}.npy`` (the
smallest unsigned dtype that fits: uint8, uint16 or int32), ``vocab.json`` and ``meta.json``; later loads
memory-map it. Each reader names its entries (by corpus, source files and options); an entry is valid
while every source file keeps its size and fingerprint (sha256 of its first and last MiB; when the mtime
changes, the full sha256 recorded at build time is recomputed and compared). Entries are built in a
temporary directory and renamed into place, so a crash never leaves a half-written cache.

Entries live under the cache root: ``DataConfig.cache_dir``, else ``$TXLAB_CACHE_DIR``, else
``<data_dir>/.encoded`` if writable, else the user cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import platformdirs

from txlab import __version__
from txlab.config import DataConfig
from txlab.data.registry import data_root
from txlab.data.vocab import Vocab
from txlab.errors import TxlabError
from txlab.fileio import load_npy, read_json, remove_empty_folders, write_json_atomic

CACHE_FORMAT = 1
_FINGERPRINT_BYTES = 1 << 20
COPY_TOKENS = 1 << 23
"""Tokens copied, counted or hashed at a time from an encoded stream (32 MiB of int32): a split may be larger than memory."""


def cache_root(cfg: DataConfig) -> Path:
    """Where encoded corpora go: cfg.cache_dir, $TXLAB_CACHE_DIR, <data_dir>/.encoded if writable, else
    the user cache directory."""
    explicit = cfg.cache_dir or os.environ.get("TXLAB_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    root = data_root(cfg)
    probe = root if root.exists() else root.parent
    if os.access(probe, os.W_OK):
        return root / ".encoded"
    return Path(platformdirs.user_cache_dir("txlab")) / "encoded"


def key_digest(key: dict) -> str:
    """16 hex digits naming an entry: the start of the sha256 of its key as sorted JSON."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------------
# Hashes and storage


def _file_fingerprint(path: Path) -> dict:
    """Cheap identity of a file: size, mtime, sha256 of its first and last MiB."""
    stat = path.stat()
    digest = hashlib.sha256(str(stat.st_size).encode())
    with open(path, "rb") as fh:
        digest.update(fh.read(_FINGERPRINT_BYTES))
        if stat.st_size > _FINGERPRINT_BYTES:
            fh.seek(max(stat.st_size - _FINGERPRINT_BYTES, _FINGERPRINT_BYTES))
            digest.update(fh.read())
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "quick_sha256": digest.hexdigest()}


def file_sha256(path: Path) -> str:
    """Full sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def ids_sha256(ids: np.ndarray) -> str:
    """sha256 of the ids as little-endian int32 (so the hash does not depend on the storage dtype)."""
    digest = hashlib.sha256()
    for lo in range(0, len(ids), COPY_TOKENS):
        digest.update(np.ascontiguousarray(ids[lo : lo + COPY_TOKENS], dtype="<i4").tobytes())
    return digest.hexdigest()


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds every id of a vocabulary of ``vocab_size`` symbols."""
    for dtype in (np.uint8, np.uint16):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def occurring_ids(ids: np.ndarray, vocab_size: int, lo: int, hi: int) -> np.ndarray:
    """The ids that occur in ``ids[lo:hi]``, ascending (counted in pieces)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for at in range(lo, hi, COPY_TOKENS):
        counts += np.bincount(ids[at : min(at + COPY_TOKENS, hi)], minlength=len(counts))
    return np.flatnonzero(counts)


# ----------------------------------------------------------------------------------------------------
# Entries


def valid_meta(entry: Path, files: Sequence[Path]) -> dict | None:
    """The entry's meta if it was built from exactly these (unchanged) files, else None (a damaged
    entry too: it is rebuilt)."""
    try:
        meta = read_json(entry / "meta.json", "", keys={"format": int, "sources": list, "splits": dict, "missing_splits": dict})
    except (OSError, TxlabError):
        return None
    recorded = meta["sources"]
    source_keys = ("path", "size", "quick_sha256", "mtime_ns", "sha256")
    if not all(isinstance(r, dict) and all(k in r for k in source_keys) for r in recorded) or not all(
        isinstance(info, dict) and isinstance(info.get("tokens"), int) and isinstance(info.get("dtype"), str)
        and isinstance(info.get("token_stream_sha256"), str) for info in meta["splits"].values()
    ):
        return None
    if meta["format"] != CACHE_FORMAT or [r["path"] for r in recorded] != [str(p) for p in files]:
        return None
    if not all((entry / name).is_file() for name in ("vocab.json", *(f"{s}.npy" for s in meta["splits"]))):
        return None
    touched = False
    for rec in recorded:
        path = Path(rec["path"])
        try:
            now = _file_fingerprint(path)
        except OSError:
            return None
        if now["size"] != rec["size"] or now["quick_sha256"] != rec["quick_sha256"]:
            return None
        if now["mtime_ns"] != rec["mtime_ns"]:  # touched or copied: trust only the full hash
            if file_sha256(path) != rec["sha256"]:
                return None
            rec["mtime_ns"], touched = now["mtime_ns"], True
    if touched:
        write_json_atomic(entry / "meta.json", meta)
    return meta


@dataclass(frozen=True)
class Encoded:
    """What encoding wrote into an entry's folder: ``{split}.npy`` for every split of ``lengths``."""

    about: dict
    """The meta's fields that say what was encoded (corpus, level, options, ...), in the order meta.json lists them."""
    vocab: Vocab
    lengths: dict[str, int]
    """Tokens per split."""
    missing: dict[str, str]
    """Splits without tokens -> why (the meta's missing_splits)."""


def build_entry(entry: Path, files: Sequence[Path], encode: Callable[[Path], Encoded]) -> dict:
    """Build entry ``entry`` from source ``files`` and return its meta: ``encode(workdir)`` writes the
    splits into a fresh folder beside the entry, which is then renamed into place (a crash never leaves a
    half-written entry); when another process (a DDP rank) installed a valid entry first, theirs is kept."""
    started = time.perf_counter()
    created = [p for p in (entry.parent, *entry.parent.parents) if not p.exists()]
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        _remove_killed_builds(entry)
        workdir = entry.parent / f".{entry.name}.{_HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        workdir.mkdir()
    except OSError as err:
        remove_empty_folders(created)
        raise TxlabError(f"cannot write the encoded-corpus cache at {entry.parent} ({err.strerror}); set data.cache_dir or $TXLAB_CACHE_DIR to a writable directory") from None
    try:
        records = [{**_file_fingerprint(p), "sha256": file_sha256(p)} for p in files]  # before encoding: what the tokens were read from
        encoded = encode(workdir)
        encoded.vocab.save(workdir / "vocab.json")
        meta = {
            "format": CACHE_FORMAT, **encoded.about, "sources": records, "splits": _split_records(workdir, encoded.lengths),
            "missing_splits": encoded.missing, "vocab_size": len(encoded.vocab), "vocab_sha256": encoded.vocab.sha256,
            "built_with": f"txlab {__version__}", "build_seconds": round(time.perf_counter() - started, 3),
        }
        write_json_atomic(workdir / "meta.json", meta)
        if valid_meta(entry, files):
            shutil.rmtree(workdir)
        else:
            if entry.exists():  # stale
                shutil.rmtree(entry)
            try:
                os.rename(workdir, entry)
            except OSError:  # lost a race for the same entry: use the winner's
                shutil.rmtree(workdir, ignore_errors=True)
        return json.loads((entry / "meta.json").read_text())
    except BaseException as err:
        shutil.rmtree(workdir, ignore_errors=True)
        remove_empty_folders(created)  # a failed first build leaves no empty cache folders
        if isinstance(err, MemoryError):
            raise TxlabError(f"encoding {', '.join(map(str, files))} ran out of memory (MemoryError): nothing was cached; "
                             "give the machine more memory, or the text in smaller files or shorter lines") from None
        raise


_HOST = socket.gethostname().replace(".", "_")
"""Names the machine in a build folder's name: a cache on a shared file system may be built from several."""


def _remove_killed_builds(entry: Path) -> None:
    """Remove the build folders of ``entry`` that killed builds on this machine left (their process is gone); a build
    in progress (a DDP rank's, another command's) is left alone."""
    for folder in entry.parent.glob(f".{entry.name}.{_HOST}.*.tmp"):
        pid = folder.name[len(f".{entry.name}.{_HOST}."):].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _split_records(workdir: Path, lengths: dict[str, int]) -> dict[str, dict]:
    """Per split written to ``workdir/{split}.npy``: its token count, storage dtype and token-stream hash."""
    splits = {}
    for split, n in lengths.items():
        ids = np.load(workdir / f"{split}.npy", mmap_mode="r") if n else np.zeros(0, np.uint8)
        splits[split] = {"tokens": n, "dtype": str(ids.dtype), "token_stream_sha256": ids_sha256(ids)}
        del ids
    return splits


@dataclass(frozen=True)
class Entry:
    """A valid cache entry: its folder and its meta.json."""

    path: Path
    meta: dict

    def read(self) -> tuple[Vocab, dict[str, np.ndarray]]:
        """The vocabulary and memory-mapped splits, checked against the meta."""
        remedy = f"delete {self.path} and rerun to encode the corpus again"
        vocab = Vocab.load(self.path / "vocab.json", remedy)
        splits = {s: load_npy(self.path / f"{s}.npy", remedy, mmap=True, ndim=1, dtype=info["dtype"]) if info["tokens"] else np.zeros(0, np.dtype(info["dtype"]))
                  for s, info in self.meta["splits"].items()}
        for s, info in self.meta["splits"].items():
            if len(splits[s]) != info["tokens"]:
                raise TxlabError(f"{self.path / f'{s}.npy'} is damaged ({len(splits[s])} tokens, its meta.json says {info['tokens']}); {remedy}")
        return vocab, splits

    @property
    def token_stream_hashes(self) -> dict[str, str]:
        """Per split, the sha256 of its ids as recorded at build time."""
        return {s: info["token_stream_sha256"] for s, info in self.meta["splits"].items()}


def open_entry(entry: Path, files: Sequence[Path], build: Callable[[], dict]) -> Entry:
    """Entry ``entry`` when it is valid for source ``files``, else the one ``build()`` makes (it returns the meta)."""
    return Entry(entry, valid_meta(entry, files) or build())
