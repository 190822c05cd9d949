"""The package's shape holds: the analysis layer is pure (no torch), the data layer keeps its boundaries, and the old
flat module names are gone."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "txlab"
ANALYSIS = sorted(p.stem for p in (PACKAGE / "analysis").glob("*.py") if p.stem != "__init__")


def test_there_are_analysis_modules():
    assert {"recl", "recl_limits", "claims", "table8", "recl_figures", "ablation", "learned", "table9", "roles", "curves", "figures",
            "run_logs"} <= set(ANALYSIS)


# the boundaries the data layer keeps: what importing the first module may not pull in
DATA_BOUNDARIES = [
    ("txlab.runs.checkpoint", ["txlab.data.registry", "txlab.data.cache", "txlab.data.formats", "txlab.data.tokenizers", "txlab.data.textdata",
                               "txlab.data.corpus", "txlab.data.download", "txlab.data.batching"]),  # loading weights needs only the vocabulary
    ("txlab.data.corpus", ["txlab.data.download"]),  # reading a corpus never touches the network code
]


def _module_file(module: str) -> Path | None:
    """The source of a txlab module or package, or None for a name that is not one (an attribute, another package)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def _imports_at_import_time(module: str) -> set[str]:
    """The modules that importing ``module`` imports itself: the imports of its module-level statements, including
    those inside a module-level ``if`` or ``try`` but not under ``if TYPE_CHECKING``, nor inside a function or class
    body (those run later, if at all). ``from a import b`` counts a.b too where b is a txlab module."""
    path = _module_file(module)
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: txlab imports by absolute names, which this reading follows"
                base = node.module
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names if _module_file(f"{base}.{alias.name}"))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(handler.body for handler in node.handlers)):
                    visit(block)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


@functools.cache
def _imported_by(module: str) -> frozenset[str]:
    """Every module that importing ``module`` loads, as far as the source says: txlab modules are followed (a
    submodule loads its parent packages first), any other module is a leaf."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a.b.c imports a and a.b first
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            seen.add(prefix)
            if prefix.split(".")[0] == "txlab" and _module_file(prefix):
                todo.extend(_imports_at_import_time(prefix))
    return frozenset(seen)


def _loads_torch(modules: frozenset[str]) -> bool:
    # torch itself, or a bridge that imports it (safetensors.torch)
    return any(m == "torch" or m.startswith("torch.") or m.endswith(".torch") for m in modules)


def test_module_boundaries_hold_in_the_import_graph_of_the_source():
    """Metrics and reports are functions of tables: importing them never loads torch. Loading weights needs only the
    vocabulary, and reading a corpus never touches the download code. Read from the source's import statements (a
    fresh interpreter costs seconds): the slow tests below import each module for real."""
    assert [m for m in ANALYSIS if _loads_torch(_imported_by(f"txlab.analysis.{m}"))] == []
    for module, kept_out in DATA_BOUNDARIES:
        assert sorted(set(kept_out) & _imported_by(module)) == [], module
    # the reading sees what it must: a module that does load torch, and the data layer's own imports
    assert _loads_torch(_imported_by("txlab.runs.checkpoint")) and "txlab.data.vocab" in _imported_by("txlab.runs.checkpoint")
    assert "txlab.data.registry" in _imported_by("txlab.data.corpus")


@pytest.mark.slow  # one fresh interpreter: the import graph above, as Python imports it
def test_module_boundaries_hold_in_a_fresh_interpreter():
    """The check above, by importing: every analysis module in turn, printing the first after which torch is loaded,
    then each data boundary's module, printing what it pulled in that it must not."""
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
