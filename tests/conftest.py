"""Shared test setup: no test reads or writes the user's real corpus or cache directories."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_txlab_dirs(tmp_path_factory, monkeypatch):
    """Point $TXLAB_DATA_DIR and $TXLAB_CACHE_DIR at fresh empty directories and drop any mirror."""
    base = tmp_path_factory.mktemp("txlab-env")
    monkeypatch.setenv("TXLAB_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("TXLAB_CACHE_DIR", str(base / "cache"))
    monkeypatch.delenv("TXLAB_DATA_MIRROR", raising=False)
