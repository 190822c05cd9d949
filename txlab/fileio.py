"""Writing and reading back txlab's files: atomic writes, reads that name a damaged file, and the
lock that keeps a second process out of a run directory.

Each writer writes a temporary file in the destination directory and renames it over the target,
so an interrupted write leaves either the old file or nothing.

Every file txlab reads back (run metadata, configs, metric logs, checkpoints, loss and corpus caches,
study outputs, imported files) goes through :func:`read_back` or a reader built on it, which turns a
parse or shape error into one message: ``FILE is damaged (why); REMEDY`` (delete it, or the command
that rebuilds it). A disk or permission error while reading or writing stays an OSError, which the
command line reports as one line naming the path and the errno.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import pickle
import shlex
import shutil
import socket
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
import yaml

from txlab.errors import TxlabError

T = TypeVar("T")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> Path:
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it to ``path``. If that
    fails (a full disk), the folders this call created are removed again: nothing is left behind."""
    path = Path(path)
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except BaseException:
        remove_empty_folders(created)
        raise
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes files private (0600); results are for everyone
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
                if os.fstat(fh.fileno()).st_size < fh.tell():  # numpy's tofile flushes its own buffer and ignores a failure
                    raise OSError(f"{os.fstat(fh.fileno()).st_size} of {fh.tell()} bytes reached the file")
            except OSError as err:
                if err.errno is None:
                    raise _short_write(fh, err) from None
                raise
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        remove_empty_folders(created)
        raise naming_path(err, path) from None
    return path


def _short_write(fh: BinaryIO, err: OSError) -> OSError:
    """The errno a library's failed write lost (numpy's ``tofile`` says only '1536 requested and 992 written', or nothing
    at all when the failure comes as it flushes its own buffer: the file is then shorter than written), asked of
    the file system by writing on at the same place: ENOSPC on a full disk, EDQUOT over a quota, EFBIG past a size
    limit; EIO when that write goes through (the space came back meanwhile). The file is discarded after."""
    try:
        os.write(fh.fileno(), bytes(1 << 16))
        os.fsync(fh.fileno())
    except OSError as refused:
        if refused.errno is not None:
            return OSError(refused.errno, os.strerror(refused.errno))
    return OSError(errno.EIO, f"the write stopped short ({err})")


@contextmanager
def staged_folder(final: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder beside ``final`` (named ``<prefix><final name>.<random>``) to write a whole folder into, renamed to
    ``final`` when the block ends without error and removed otherwise: a kill at any moment leaves nothing at ``final``,
    only that folder, which the next staging for ``final`` removes first. ``final`` must be absent or an empty folder."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f"{prefix}{final.name}.*"):  # what killed stagings for this folder left
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f"{prefix}{final.name}."))
    try:
        yield staging
        os.chmod(staging, 0o777 & ~_UMASK)  # mkdtemp makes it private; the folder is for everyone
        os.replace(staging, final)  # onto nothing, or onto an empty folder
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append one line to a log (a kill mid-write leaves a torn last line, which readers drop)."""
    try:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as err:
        raise naming_path(err, path) from None


def naming_path(err: BaseException, path: Path) -> BaseException:
    """``err``, or for an OSError that names no file (a failed write or fsync), one naming ``path``."""
    if isinstance(err, OSError) and err.filename is None and err.errno is not None:
        return OSError(err.errno, err.strerror, str(path))
    return err


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) where they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (another writer put something there) or already gone
            return


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    return write_atomic(path, lambda fh: fh.write(data))


def write_text_atomic(path: Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


# --------------------------------------------------------------------------------------------------
# Reading back


class DamagedFile(TxlabError):
    """A file txlab wrote (or was given) cannot be parsed, or holds the wrong shape of data."""

    def __init__(self, path: Path | str, why: str, remedy: str) -> None:
        super().__init__(f"{path} is damaged ({why}); {remedy}")
        self.path = Path(path)


_PARSE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # json.JSONDecodeError, UnicodeDecodeError and numpy's bad headers are ValueErrors
    TypeError,
    KeyError,
    IndexError,
    EOFError,
    yaml.YAMLError,
    pickle.UnpicklingError,
    zipfile.BadZipFile,
)


def _parse_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean 'this content is not what it should be', safetensors' and torch's included
    (imported here, not at module level: fileio is imported by modules that need neither)."""
    from safetensors import SafetensorError

    return (*_PARSE_ERRORS, SafetensorError, RuntimeError)


def read_back(path: Path | str, parse: Callable[[Path], T], remedy: str) -> T:
    """``parse(path)``, with any parse or shape error (a ValueError from ``parse``'s own checks
    included) reported as :class:`DamagedFile`. A missing file is damage too: callers that allow it
    check first. OSErrors other than a missing file (permissions, a failing disk) propagate."""
    path = Path(path)
    try:
        return parse(path)
    except FileNotFoundError:
        raise DamagedFile(path, "missing", remedy) from None
    except TxlabError:
        raise
    except _parse_errors() as err:
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DamagedFile(path, why[:300], remedy) from None


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ValueError(f"{what} is {type(value).__name__}, not {names}")
    return value


def read_json(path: Path | str, remedy: str, keys: dict[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
    """A JSON object from ``path``; ``keys``: entries it must hold, with their types."""

    def parse(p: Path) -> dict[str, Any]:
        obj = _expect(json.loads(p.read_text(encoding="utf-8")), dict, "the top level")
        for key, kind in (keys or {}).items():
            if key not in obj:
                raise ValueError(f"no {key!r}")
            _expect(obj[key], kind, repr(key))
        return obj

    return read_back(path, parse, remedy)


def read_jsonl(path: Path | str, remedy: str, on_torn_last_line: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a one-object-per-line log. A last line that does not parse is what a
    kill during an append leaves: with ``on_torn_last_line`` it is dropped (the callback gets a
    warning to show); anywhere else a bad line is damage."""

    def parse(p: Path) -> list[dict[str, Any]]:
        lines = p.read_text(encoding="utf-8").splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(_expect(json.loads(line), dict, f"line {number}"))
            except ValueError as err:
                if number == len(lines) and on_torn_last_line is not None:
                    on_torn_last_line(f"{p}: dropped its last line, cut short by an interrupted write ({err})")
                    continue
                raise ValueError(f"line {number}: {err}") from None
        return records

    return read_back(path, parse, remedy)


def read_csv(path: Path | str, remedy: str, text: Sequence[str] = (), numbers: Sequence[str] = (), blank_or_numbers: Sequence[str] = ()) -> Any:
    """A CSV table txlab wrote, as a pandas DataFrame, holding the columns a reader takes from it: ``text``, ``numbers``
    (every cell a number: no blank, no text, no NaN) and ``blank_or_numbers`` (a number or nothing, where present)."""

    def parse(p: Path) -> Any:
        import pandas as pd

        frame = pd.read_csv(p)
        for name in (*text, *numbers):
            if name not in frame:
                raise ValueError(f"no column {name!r}")
        for name in (*numbers, *(n for n in blank_or_numbers if n in frame)):
            values = pd.to_numeric(frame[name], errors="coerce")
            bad = values.isna() & (frame[name].notna() | (name in numbers))
            if bad.any():
                row = int(bad.to_numpy().argmax())
                raise ValueError(f"column {name!r}, line {row + 2}: {frame[name].iloc[row]!r} is not a number")
            frame[name] = values
        return frame

    return read_back(path, parse, remedy)


def read_yaml_mapping(path: Path | str, remedy: str) -> dict[str, Any]:
    """A YAML mapping txlab wrote (a run's config.yaml)."""
    return read_back(path, lambda p: _expect(load_yaml(read_text_file(p, MAX_YAML_BYTES, "the YAML file"), str(p)), dict, "the top level"), remedy)


# --------------------------------------------------------------------------------------------------
# Bounded reads: a file or a value given by a user must not make txlab allocate without limit

MAX_YAML_BYTES = 4 * 2**20
"""The largest YAML file txlab reads (configs and studies are a few kB; committed ones below 100 kB)."""

MAX_YAML_NODES = 200_000
"""The most values a YAML document may expand to, its aliases followed: a 'billion laughs' file of a
few hundred bytes (aliases of aliases, nine deep) expands to 10^9 and would fill the memory."""


def read_text_file(path: Path | str, limit: int, what: str) -> str:
    """The UTF-8 text of the regular file ``path``, refused when it holds more than ``limit`` bytes. A
    device (/dev/zero never ends), a pipe or a folder is refused: txlab reads only files it can measure."""
    import stat

    path = Path(path)
    info = path.stat()  # FileNotFoundError: the caller's missing-file message
    if not stat.S_ISREG(info.st_mode):
        raise TxlabError(f"{what} {path} is not a regular file (a device, pipe or folder): give a text file")
    if info.st_size > limit:
        raise TxlabError(f"{what} {path} holds {info.st_size:,} bytes, more than the {limit:,} txlab reads from one")
    with path.open("rb") as fh:
        data = fh.read(limit + 1)  # the file may have grown since stat
    if len(data) > limit:
        raise TxlabError(f"{what} {path} holds more than the {limit:,} bytes txlab reads from one")
    return data.decode("utf-8")


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_yaml(data: Any) -> str:
    """``yaml.safe_dump(data, sort_keys=False)``, emitted by libyaml where PyYAML was built with it: the same text as
    PyYAML's own emitter (tests/test_config.py holds them equal), about ten times faster."""
    return yaml.dump(data, Dumper=_SAFE_DUMPER, sort_keys=False)


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)``, refused when its aliases expand it beyond :data:`MAX_YAML_NODES` values
    (counted with each alias followed, so the check stops after that many steps however far the
    expansion would go), or when a number in it has more digits than Python converts (ValueError).

    Parsed by libyaml where PyYAML was built with it (the same values, about ten times faster: a study's status
    reads every run's config.yaml), else by PyYAML's own parser."""
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except RecursionError:
        raise TxlabError(f"{where} nests too deep to read") from None
    except ValueError as err:  # int() of more than 4,300 digits, e.g. a key or value of 100,000 digits
        why = str(err).split(";")[0][:200]  # Python's own advice (sys.set_int_max_str_digits) is not the user's to follow
        raise TxlabError(f"{where} holds a number txlab does not read ({why}); settings are 64-bit integers") from None
    if _expanded_size(data, MAX_YAML_NODES) > MAX_YAML_NODES:
        raise TxlabError(f"{where} expands to more than {MAX_YAML_NODES:,} values through its aliases (&name / *name): "
                         "refused, as a 'billion laughs' file would fill the memory; write the values out")
    return data


def _expanded_size(data: Any, limit: int) -> int:
    """Values in ``data`` with every shared (aliased) list or mapping counted each time it is reached, up to ``limit`` + 1."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


def load_npy(path: Path | str, remedy: str, *, mmap: bool = False, ndim: int | None = None, dtype: Any = None) -> np.ndarray:
    """A numpy array (never a pickle) from ``path``, checked for ``ndim`` and ``dtype``. The header is read
    first: a shape whose data the file does not hold (a forged header claiming 10^18 values) is damage,
    found before numpy allocates it."""

    def parse(p: Path) -> np.ndarray:
        _check_npy_header(p, in_memory=not mmap)
        array = np.load(p, mmap_mode="r" if mmap else None, allow_pickle=False)
        if ndim is not None and array.ndim != ndim:
            raise ValueError(f"{array.ndim} dimensions, expected {ndim}")
        if dtype is not None and array.dtype != np.dtype(dtype):
            raise ValueError(f"dtype {array.dtype}, expected {np.dtype(dtype)}")
        return array

    return read_back(path, parse, remedy)


def _check_npy_header(path: Path, *, in_memory: bool) -> None:
    """Raise ValueError unless the .npy header's shape and dtype account for exactly the bytes after it
    (and, for an array read into memory, fit the machine's memory)."""
    from numpy.lib import format as npy

    with path.open("rb") as fh:
        version = npy.read_magic(fh)
        shape, _, kind = npy.read_array_header_1_0(fh) if version == (1, 0) else npy.read_array_header_2_0(fh)
        header_end = fh.tell()
    claimed = math.prod(shape) * kind.itemsize  # Python integers: no overflow however large the shape
    held = path.stat().st_size - header_end
    if claimed != held:
        raise ValueError(f"its header claims shape {shape} of {kind} ({claimed:,} bytes), but the file holds {held:,} bytes of data")
    if in_memory and claimed > machine_ram():
        raise ValueError(f"its {claimed:,} bytes of data are more than this machine's memory")


def allocated_npy(path: Path, dtype: Any, length: int) -> np.memmap:
    """A new ``.npy`` file of ``length`` values, memory-mapped for writing (``np.lib.format.open_memmap``), its blocks
    reserved on disk first: writing into the memory map of a sparse file on a full disk kills the process (SIGBUS),
    while a reservation that does not fit is an OSError naming the file (ENOSPC)."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(length,))
    if hasattr(os, "posix_fallocate"):  # Linux, the BSDs
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):  # a file system that cannot reserve: written as before
                del array
                raise OSError(err.errno, err.strerror, str(path)) from None
        finally:
            os.close(fd)
    return array


def machine_ram() -> int:
    """Bytes of physical memory on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def read_metrics_log(path: Path | str, on_torn_last_line: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """A run's ``metrics.jsonl``: one record per logged step, each with an integer ``step``."""
    remedy = f"delete the bad lines, or rerun `txlab train --restart` to train {Path(path).parent} again"
    records = read_jsonl(path, remedy, on_torn_last_line)
    for number, record in enumerate(records, 1):
        if not isinstance(record.get("step"), int) or isinstance(record["step"], bool):
            raise DamagedFile(path, f"record {number} has no integer 'step'", remedy)
    return records


# --------------------------------------------------------------------------------------------------
# One process at a time in a directory

LOCK_FILE = ".lock"


@contextmanager
def hold_directory(directory: Path | str, command: str) -> Iterator[Path]:
    """Hold ``directory`` (created if needed) for this process until the block ends, or refuse.

    The lock is the kernel's (``flock`` on ``directory/.lock``), so it ends with its process however
    that ends (kill -9 included): the lock file of a dead process is simply taken over. The file
    records the holder (pid, host, command, start) so that a refusal names it. The folders this
    call created (the directory and new parents), where they hold nothing else at the end, are removed
    again, leaving nothing behind. A path that exists but is no directory (/dev/null) is refused.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():  # /dev/null, a file: mkdir would raise FileExistsError
        raise TxlabError(f"{directory} is not a directory (a file or a device); choose a folder for the run")
    created_folders = [p for p in (directory, *directory.parents) if not p.exists()]
    created = bool(created_folders)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    try:
        _lock_or_refuse(fd, fcntl.LOCK_EX, directory, command)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                  "command": shlex.join(["txlab", *sys.argv[1:]])[:500]}  # what the user ran (ablate and recl train runs too)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        yield directory
    finally:
        if created and [p.name for p in directory.iterdir()] == [LOCK_FILE]:
            path.unlink()
            remove_empty_folders(created_folders)  # the run directory and the parents this call made: a refused command leaves none
        os.close(fd)  # releases the lock


def check_not_held(directory: Path | str, command: str) -> None:
    """Refuse, as :func:`hold_directory` would, a directory another process holds, creating nothing.

    For checks a command makes before it takes the lock (a training's "pass --restart" about records
    that the running training is writing): the holder is the first thing to know. Call it before
    taking the lock: within the holding process a second flock on the file would conflict too.
    """
    path = Path(directory) / LOCK_FILE
    if not path.is_file():
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # unreadable or gone: hold_directory decides
    try:
        _lock_or_refuse(fd, fcntl.LOCK_SH, directory, command)
    finally:
        os.close(fd)  # releases the shared lock taken for the test


def _lock_or_refuse(fd: int, mode: int, directory: Path | str, command: str) -> None:
    """flock ``fd`` (LOCK_EX or LOCK_SH) without waiting, or refuse naming the process that holds the directory."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        raise TxlabError(
            f"{directory} is in use by {_lock_holder(Path(directory) / LOCK_FILE)}; wait for it to finish or stop it, then rerun `{command}`"
        ) from None


def _lock_holder(path: Path) -> str:
    """'pid N on HOST (COMMAND, since TIME)' from a lock file, as far as it can be read."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {holder['pid']} on {holder['host']} ({holder['command']}, since {holder['since']})"
    except (OSError, ValueError, TypeError, KeyError):
        return "another process (its lock file names no holder yet)"
