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
home too. Paths given explicitly on the command line (``--out-dir``, ``--run-dir``, ...) are taken
as given, relative to the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "TXLAB_HOME"
DEFAULT_HOME = Path("runs")
MODELS = Path("results/models")
"""Where trained preset runs live, relative to the home."""


def home() -> Path:
    """The home: ``$TXLAB_HOME`` (which ``txlab --home`` sets for the command and what it launches), else ``runs``."""
    chosen = os.environ.get(HOME_ENV, "")
    return Path(chosen) if chosen else DEFAULT_HOME


def resolve(path: str | Path) -> Path:
    """A path relative to the home (absolute paths are kept as they are)."""
    path = Path(path)
    return path if path.is_absolute() else home() / path


def command_prefix() -> str:
    """How a recorded command starts: ``txlab``, or ``txlab --home DIR`` when it wrote to another home than
    the default workspace, so that rerunning it rewrites the same files (``txlab --home .`` for committed ones)."""
    where = home()
    return "txlab" if where == DEFAULT_HOME else f"txlab --home {where}"


def models_root() -> Path:
    """Where trained preset runs live: ``<home>/results/models``."""
    return resolve(MODELS)
