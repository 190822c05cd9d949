"""The one exception type for mistakes a user can make.

Anything raised as :class:`TxlabError` is reported by the CLI as a single clear message with
exit code 2 and no traceback; every other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import errno
import os
from collections.abc import Iterable


class TxlabError(Exception):
    """A problem caused by input (a bad name, a missing file, an impossible length)."""


ENVIRONMENT_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EFBIG", "EIO", "ENAMETOOLONG", "EISDIR", "ENOTDIR", "EMFILE")
    if hasattr(errno, name)
)
"""Errors of the file system a command was pointed at (full, read-only, not permitted), not of txlab."""


def io_error_message(err: OSError) -> str | None:
    """One line naming the path and the errno of a file-system error a user can fix, else None (a bug)."""
    if err.errno not in ENVIRONMENT_ERRNOS:
        return None
    where = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 else "") if err.filename else "a file txlab reads or writes"
    return f"{where}: {err.strerror or os.strerror(err.errno)} (errno {err.errno}, {errno.errorcode[err.errno]})"


def did_you_mean(name: str, choices: Iterable[str], what: str, shown: str | None = None) -> TxlabError:
    """An error for an unknown ``name`` that suggests the nearest valid ``choices``.

    ``shown`` is how the name appears in the message when it differs from what is matched (a config
    key's full dotted path, matched by its last part).
    """
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return TxlabError(f"unknown {what} {shown or name!r}.{hint} Valid: {', '.join(choices)}.")
