"""The one exception type for mistakes a user can make.

Anything raised as :class:`TxlabError` is reported by the CLI as a single clear message with
exit code 2 and no traceback; every other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TxlabError(Exception):
    """A problem caused by input (a bad name, a missing file, an impossible length)."""


def did_you_mean(name: str, choices: Iterable[str], what: str) -> TxlabError:
    """An error for an unknown ``name`` that suggests the nearest valid ``choices``."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return TxlabError(f"unknown {what} {name!r}.{hint} Valid: {', '.join(choices)}.")
