"""The package's shape holds: the analysis layer is pure (no torch), the data layer keeps its boundaries, and the old
flat module names are gone."""

import subprocess
import sys
from pathlib import Path

import pytest

ANALYSIS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "txlab" / "analysis").glob("*.py") if p.stem != "__init__")


def test_there_are_analysis_modules():
    assert {"recl", "recl_limits", "claims", "table8", "recl_figures", "ablation", "learned", "table9", "roles", "curves", "figures",
            "run_logs"} <= set(ANALYSIS)


# the boundaries the data layer keeps: what importing the first module may not pull in
DATA_BOUNDARIES = [
    ("txlab.runs.checkpoint", ["txlab.data.registry", "txlab.data.cache", "txlab.data.formats", "txlab.data.tokenizers", "txlab.data.textdata",
                               "txlab.data.corpus", "txlab.data.download", "txlab.data.batching"]),  # loading weights needs only the vocabulary
    ("txlab.data.corpus", ["txlab.data.download"]),  # reading a corpus never touches the network code
]


def test_module_boundaries_hold_in_a_fresh_interpreter():
    """Metrics and reports are functions of tables: importing them never loads torch. Loading weights needs only the
    vocabulary, and reading a corpus never touches the download code. One fresh interpreter (they cost seconds each)
    imports every analysis module in turn, printing the first after which torch is loaded, then each data boundary's
    module, printing what it pulled in that it must not."""
    code = ("import importlib, sys\n"
            f"for module in {ANALYSIS!r}:\n"
            "    importlib.import_module('txlab.analysis.' + module)\n"
            "    if 'torch' in sys.modules:\n"
            "        print(module)\n"
            "        break\n"
            "print('analysis done')\n"
            + "".join(f"importlib.import_module({module!r}); print(sorted(m for m in {kept_out!r} if m in sys.modules))\n"
                      for module, kept_out in DATA_BOUNDARIES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["analysis done", "[]", "[]"]


@pytest.mark.slow  # a fresh interpreter per module: the check above, each module on its own
@pytest.mark.parametrize("module", ANALYSIS)
def test_no_analysis_module_imports_torch_on_its_own(module):
    code = f"import sys, txlab.analysis.{module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
