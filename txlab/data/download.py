"""Downloads: fetching a registered corpus from its canonical sources, resumably and verified.

This module owns everything that touches the network. :func:`fetch_corpus` (`txlab data get`)
downloads each file txlab.data.registry registers for a corpus from its URLs, or from
``$TXLAB_DATA_MIRROR`` when set; it resumes partial downloads (``.part`` files, HTTP Range
requests), verifies sizes and sha256 checksums (removing a file that fails), and unpacks the
archive members the registry names, each written atomically. Loading a corpus never imports it.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import BinaryIO

from txlab import __version__
from txlab.config import DataConfig
from txlab.data import synthetic
from txlab.data.cache import file_sha256
from txlab.data.registry import CORPORA, RemoteFile, check_corpus_name, corpus_dir, locate_sources, missing_corpus_error
from txlab.errors import TxlabError
from txlab.fileio import write_atomic
from txlab.progress import Progress

_TIMEOUT_S = 60


class _Unreachable(Exception):
    """A mirror could not be reached (try the next one)."""


def _urls(remote: RemoteFile) -> tuple[str, ...]:
    mirror = os.environ.get("TXLAB_DATA_MIRROR")
    return (mirror.rstrip("/") + "/" + remote.filename,) if mirror else remote.urls


def _verification_problem(path: Path, remote: RemoteFile) -> str | None:
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"{path.name} has {size:,} bytes, expected {remote.size:,}"
    if remote.sha256 is not None:
        actual = file_sha256(path)
        if actual != remote.sha256:
            return f"checksum mismatch for {path.name}: sha256 {actual}, expected {remote.sha256}"
    return None


def _fetch(url: str, part: Path, remote: RemoteFile, name: str, progress: bool) -> None:
    """Download ``url`` into ``part``, continuing a partial file with an HTTP Range request."""
    have = part.stat().st_size if part.exists() else 0
    if remote.size is not None and have == remote.size:
        return
    headers = {"User-Agent": f"txlab/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=_TIMEOUT_S)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # nothing left to send: verification decides
            return
        raise _Unreachable(f"HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        raise _Unreachable(str(getattr(err, "reason", err))) from None
    with response:
        if have and response.status != 206:  # the server ignored the range: start over
            have = 0
        length = response.headers.get("Content-Length")
        expected = have + int(length) if length is not None else remote.size
        with open(part, "ab" if have else "wb") as fh, Progress(
            total=expected, initial=have, desc=remote.filename, unit="B", unit_scale=True, disable=not progress, file=sys.stderr
        ) as bar:
            while True:
                try:
                    chunk = response.read(1 << 20)
                except (http.client.HTTPException, OSError):
                    break  # connection dropped: reported as truncated below
                if not chunk:
                    break
                fh.write(chunk)
                bar.update(len(chunk))
    got = part.stat().st_size
    if expected is not None and got < expected:
        raise TxlabError(
            f"download of {url} stopped after {got:,} of {expected:,} bytes; the partial file {part} is kept: "
            f"run `txlab data get {name}` again to resume"
        )


def download(remote: RemoteFile, directory: Path, name: str, progress: bool = True) -> Path:
    """``directory/remote.filename``, downloaded (resuming a ``.part`` file) and verified."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / remote.filename
    if dest.exists():
        if _verification_problem(dest, remote) is None:
            return dest
        dest.unlink()  # a stale or corrupt copy: fetch it again
    part = dest.with_name(dest.name + ".part")
    failures = []
    for url in _urls(remote):
        try:
            _fetch(url, part, remote, name, progress)
        except _Unreachable as err:
            failures.append(f"{url}: {err}")
            continue
        problem = _verification_problem(part, remote)
        if problem:
            part.unlink()
            raise TxlabError(f"{problem}; the download was removed. Run `txlab data get {name}` again, or check the mirror")
        os.replace(part, dest)
        return dest
    raise TxlabError(f"could not download {remote.filename} for {name}: " + "; ".join(failures))


def _unpack(remote: RemoteFile, archive: Path, directory: Path) -> list[Path]:
    """Unpack the members named by ``remote.extract`` (each written atomically)."""
    wanted = [re.compile(p) for p in remote.extract]
    out: list[Path] = []

    def place(member: str, fh: BinaryIO) -> None:
        dest = directory / member.removeprefix(remote.strip)
        out.append(write_atomic(dest, lambda target: shutil.copyfileobj(fh, target, 1 << 24)))

    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if any(w.fullmatch(info.filename) for w in wanted):
                        with zf.open(info) as fh:
                            place(info.filename, fh)
        else:
            with tarfile.open(archive, mode="r|*") as tf:
                for info in tf:
                    if info.isfile() and any(w.fullmatch(info.name) for w in wanted):
                        place(info.name, tf.extractfile(info))
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as err:
        raise TxlabError(f"cannot unpack {archive} ({err}); delete it and run `txlab data get` again") from None
    if not out:
        raise TxlabError(f"{archive} holds none of the expected files ({', '.join(remote.extract)})")
    return out


def fetch_corpus(name: str, cfg: DataConfig, force: bool = False, progress: bool = True) -> dict:
    """Download, verify and unpack corpus ``name`` into its directory; a summary of what is there."""
    check_corpus_name(name)
    if name in synthetic.VARIANTS:
        return {"name": name, "status": "built in", "directory": None, "files": [], "unverified": []}
    spec = CORPORA[name]
    directory = corpus_dir(cfg, name)
    if not force and not locate_sources(spec, directory).missing:
        status = "already present"
    else:
        for remote in spec.downloads:
            path = download(remote, directory, name, progress)
            if remote.extract:
                _unpack(remote, path, directory)
                path.unlink()
        status = "downloaded"
    sources = locate_sources(spec, directory)
    if sources.missing:
        raise missing_corpus_error(spec, directory, "; ".join(sources.missing.values()))
    return {
        "name": name, "status": status, "directory": str(directory),
        "files": [str(p) for p in sources.unique_files()],
        "unverified": [r.filename for r in spec.downloads if r.sha256 is None],
    }
