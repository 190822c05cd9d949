"""The vocabulary: symbols <-> ids, and the hash that identifies it.

A :class:`Vocab` is an ordered list of symbols (words, characters or byte values) with an optional
unknown-word symbol; a symbol's id is its place in the list. Its ``sha256`` (of the symbol list, so
order matters) is the vocabulary's identity: checkpoints and the encoded-corpus cache record it, and
a model reads only a corpus whose vocabulary has that hash (or one relabelled into it). It saves as
JSON or as plain text (a header line, then one symbol per line) and loads either, naming the file
when it is damaged. This module knows nothing of corpora or downloads, so loading a checkpoint's
vocabulary (txlab.runs.checkpoint) pulls in neither.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from txlab.errors import TxlabError
from txlab.fileio import read_back, write_atomic, write_json_atomic


class Vocab:
    """Symbols <-> ids. ``sha256`` is the sha256 of the symbol list as compact JSON (order matters)."""

    def __init__(self, symbols: Iterable[str], unk: str | None = None) -> None:
        self.symbols: list[str] = list(symbols)
        self.index: dict[str, int] = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            dup = next(s for s, c in Counter(self.symbols).items() if c > 1)
            raise TxlabError(f"vocabulary lists the symbol {dup!r} more than once")
        if unk is not None and unk not in self.index:
            raise TxlabError(f"vocabulary has no unknown-word symbol {unk!r}")
        self.unk = unk
        payload = json.dumps(self.symbols, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.sha256 = hashlib.sha256(payload).hexdigest()

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], specials: Sequence[str] = (), min_freq: int = 1, unk: str | None = None) -> Vocab:
        """Specials first, then symbols by falling count; equal counts keep the order of ``counts``
        (first occurrence, when counted from text with a Counter). ``unk`` is used only if present."""
        special = set(specials)
        ranked = sorted((s for s, c in counts.items() if s not in special and c >= min_freq), key=lambda s: -counts[s])
        symbols = [*specials, *ranked]
        return cls(symbols, unk=unk if unk in set(symbols) else None)

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.symbols == other.symbols and self.unk == other.unk

    def __repr__(self) -> str:
        return f"Vocab({len(self)} symbols, sha256={self.sha256[:12]})"

    @property
    def unk_id(self) -> int | None:
        return None if self.unk is None else self.index[self.unk]

    def encode(self, symbols: Sequence[str]) -> np.ndarray:
        """int64 ids; unknown symbols map to ``unk``, or raise TxlabError when there is none."""
        try:
            return np.fromiter(map(self.index.__getitem__, symbols), dtype=np.int64, count=len(symbols))
        except KeyError as err:
            if self.unk is None:
                raise TxlabError(f"symbol {err.args[0]!r} is not in the vocabulary (which has no unknown-word symbol)") from None
            get, unk = self.index.get, self.index[self.unk]
            return np.fromiter((get(s, unk) for s in symbols), dtype=np.int64, count=len(symbols))

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.symbols[int(i)] for i in ids]

    def to_dict(self) -> dict:
        """JSON-ready form (what checkpoints and the cache store)."""
        return {"format": "txlab-vocab", "version": 1, "size": len(self), "unk": self.unk, "sha256": self.sha256, "symbols": self.symbols}

    @classmethod
    def from_dict(cls, data: Mapping, where: str = "vocabulary") -> Vocab:
        if data.get("format") != "txlab-vocab" or not isinstance(data.get("symbols"), list):
            raise TxlabError(f"{where} is not a txlab vocabulary")
        vocab = cls(data["symbols"], unk=data.get("unk"))
        if data.get("sha256") not in (None, vocab.sha256):
            raise TxlabError(f"{where} is corrupt: its symbols hash to {vocab.sha256[:12]}, the file says {data['sha256'][:12]}")
        return vocab

    def save(self, path: str | Path) -> Path:
        """Write as JSON (``*.json``) or plain text: a header line, then one symbol per line."""
        path = Path(path)
        if path.suffix == ".json":
            return write_json_atomic(path, self.to_dict())
        bad = next((s for s in self.symbols if s == "" or "\n" in s or "\r" in s or s != s.strip()), None)
        if bad is not None:
            raise TxlabError(f"symbol {bad!r} cannot be written one per line; save the vocabulary as .json")
        header = "#txlab-vocab " + json.dumps({"sha256": self.sha256, "unk": self.unk})
        return write_atomic(path, lambda fh: fh.write("\n".join([header, *self.symbols, ""]).encode("utf-8")))

    @classmethod
    def load(cls, path: str | Path, remedy: str = "delete it and rerun the command that wrote it") -> Vocab:
        path = Path(path)
        if not path.is_file():
            raise TxlabError(f"no vocabulary file {path}")
        return read_back(path, lambda p: cls._parse(p), remedy)

    @classmethod
    def _parse(cls, path: Path) -> Vocab:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            header, _, body = text.partition("\n")
            if not header.startswith("#txlab-vocab "):
                raise ValueError("it does not start with a '#txlab-vocab' header line")
            symbols = body.split("\n")[:-1] if body.endswith("\n") else body.split("\n")
            data = {**json.loads(header.removeprefix("#txlab-vocab ")), "format": "txlab-vocab", "symbols": symbols}
        if not isinstance(data, dict) or data.get("format") != "txlab-vocab" or not isinstance(data.get("symbols"), list):
            raise ValueError("not a txlab vocabulary")
        if not all(isinstance(s, str) for s in data["symbols"]) or not isinstance(data.get("unk"), (str, type(None))):
            raise ValueError("its symbols are not all strings")
        return cls.from_dict(data, where=str(path))
