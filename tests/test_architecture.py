"""The package's shape holds: the analysis layer is pure (no torch), and the old flat module names are gone."""

import subprocess
import sys
from pathlib import Path

import pytest

ANALYSIS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "txlab" / "analysis").glob("*.py") if p.stem != "__init__")


def test_there_are_analysis_modules():
    assert {"recl", "recl_limits", "claims", "table8", "recl_figures", "ablation", "learned", "table9", "roles", "curves", "figures",
            "run_logs"} <= set(ANALYSIS)


def test_no_analysis_module_imports_torch():
    """Metrics and reports are functions of tables: importing them never loads torch. One fresh
    interpreter imports every module in turn and names the first after which torch is loaded."""
    code = ("import importlib, sys\n"
            f"for module in {ANALYSIS!r}:\n"
            "    importlib.import_module('txlab.analysis.' + module)\n"
            "    if 'torch' in sys.modules:\n"
            "        print(module)\n"
            "        break\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.slow  # a fresh interpreter per module: the check above, each module on its own
@pytest.mark.parametrize("module", ANALYSIS)
def test_no_analysis_module_imports_torch_on_its_own(module):
    code = f"import sys, txlab.analysis.{module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
