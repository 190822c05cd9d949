"""Where txlab's outputs go: the two homes.

txlab writes every default output (trained runs, tables, figures) under one folder, its *home*:

- the **workspace home**, ``runs/`` in the current directory unless ``$TXLAB_HOME`` or
  ``txlab --home DIR`` names another, holds a user's own runs and outputs. It is ignored by git,
  so nothing a user tries touches the project's evidence;
- the **evidence home** is the repository root (``txlab --home . <command>``): its ``results/``
  and ``figures/`` are committed, and the commands recorded beside each committed result name it.

Both homes have one layout, so ``--home .`` writes exactly the committed files::

    <home>/results/models/<preset>-<size>-<corpus>/   trained runs (txlab train, recl, models)
    <home>/results/<analysis>/...                     tables (speed, recl, ablate)
    <home>/figures/<analysis>/...                     figures (speed, recl, ablate, attention, roles, train)

Relative output paths inside study files (``out``, ``figures``, ``models_root``) are read under the
home too, and may not leave it (``..``). Names (``--name``, a run's ``name``, a study's ``name``) are
one folder or file name each (:func:`check_name`), so what they name stays inside the home. Paths
given explicitly on the command line (``--out-dir``, ``--run-dir``, ...) are taken as given,
relative to the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from txlab.errors import TxlabError

HOME_ENV = "TXLAB_HOME"
DEFAULT_HOME = Path("runs")
MODELS = Path("results/models")
"""Where trained preset runs live, relative to the home."""


def home() -> Path:
    """The home: ``$TXLAB_HOME`` (which ``txlab --home`` sets for the command and what it launches), else ``runs``."""
    chosen = os.environ.get(HOME_ENV, "")
    return Path(chosen) if chosen else DEFAULT_HOME


def resolve(path: str | Path) -> Path:
    """A path relative to the home (absolute paths are kept as they are); a relative one that climbs
    out of the home (``..``) is refused: write elsewhere only through an absolute path."""
    path = Path(path)
    if path.is_absolute():
        return path
    if ".." in path.parts:
        raise TxlabError(f"{path} leaves the home {home()} ('..'); give an absolute path to write outside it")
    return home() / path


NAME_MAX = 200
"""Characters a name may have (file systems allow 255 bytes for a folder, and txlab appends suffixes)."""


def check_name(name: str, what: str) -> str:
    """``name`` if it is a single folder or file name, else a TxlabError naming ``what`` (e.g. ``--name``):
    no ``/`` or ``\\`` (a name of ``../../x`` would write outside the home), not ``.`` or ``..``, not hidden
    (txlab's own temporary folders start with a dot), no control characters, at most NAME_MAX characters."""
    if (not name or name in (".", "..") or name.startswith(".") or any(c in name for c in "/\\") or len(name) > NAME_MAX
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise TxlabError(f"{what} {name!r} is not a name: give one folder name (letters, digits, '-', '_', '.'; no '/', "
                         f"not starting with '.', at most {NAME_MAX} characters); a path goes to the path options (--run-dir, --out-dir)")
    return name


def command_prefix() -> str:
    """How a recorded command starts: ``txlab``, or ``txlab --home DIR`` when it wrote to another home than
    the default workspace, so that rerunning it rewrites the same files (``txlab --home .`` for committed ones)."""
    where = home()
    return "txlab" if where == DEFAULT_HOME else f"txlab --home {where}"


def models_root() -> Path:
    """Where trained preset runs live: ``<home>/results/models``."""
    return resolve(MODELS)
