"""Shared test setup.

- No test reads or writes the user's real corpus or cache directories, or a txlab home (runs/ or
  the repository's committed results): $TXLAB_HOME points at a fresh directory.
- Tests run torch on one thread: their models are tiny, where a second thread buys nothing, and on a
  2-core machine shared with any other work, two-thread parallel regions stall (measured: a tiny
  LSTM step went from 2 ms to 100 ms), which made the suite's run time erratic.
"""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _isolated_txlab_dirs(tmp_path_factory, monkeypatch):
    """Point $TXLAB_DATA_DIR, $TXLAB_CACHE_DIR and $TXLAB_HOME at fresh empty directories and drop any mirror."""
    base = tmp_path_factory.mktemp("txlab-env")
    monkeypatch.setenv("TXLAB_HOME", str(base / "home"))
    monkeypatch.setenv("TXLAB_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("TXLAB_CACHE_DIR", str(base / "cache"))
    monkeypatch.delenv("TXLAB_DATA_MIRROR", raising=False)
