"""The third-party modules txlab and its tests import are exactly the ones pyproject.toml declares.

A fresh machine has nothing but what pip installs from pyproject.toml, so an import that is not
declared breaks every user while passing on a developer's machine that happens to have it. The check
reads the source (it imports nothing), so it fails here, not in a user's terminal.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]

# Import names whose distribution has another name.
DISTRIBUTION_OF = {"yaml": "pyyaml", "xdist": "pytest-xdist"}
# The tests' own modules (a test may import a constant from conftest): no distribution.
TEST_MODULES = {path.stem for path in (ROOT / "tests").glob("*.py")}
# Submodules of a declared package that need a distribution of their own to import.
NEEDS_DISTRIBUTION = {"torch.utils.tensorboard": "tensorboard"}


def normalise(name: str) -> str:
    """PEP 503 normalisation: 'PyYAML', 'pyyaml' and 'py_yaml' name one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """(hard dependencies, extra -> its dependencies) from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    hard = {requirement_name(r) for r in project["dependencies"]}
    extras = {name: {requirement_name(r) for r in reqs} for name, reqs in project.get("optional-dependencies", {}).items()}
    return hard, extras


def _distributions_of_module(module: str) -> set[str]:
    needed = {dist for prefix, dist in NEEDS_DISTRIBUTION.items() if module == prefix or module.startswith(prefix + ".")}
    top = module.split(".")[0]
    if top not in sys.stdlib_module_names and top != "txlab" and top not in TEST_MODULES:
        needed.add(normalise(DISTRIBUTION_OF.get(top, top)))
    return needed


def imported_distributions(source: str, filename: str) -> dict[str, bool]:
    """Distribution -> whether some import of it runs when the module is imported (at module level,
    outside a function); ``pytest.importorskip("x")`` counts as an optional import of x."""
    tree = ast.parse(source, filename)
    at_import_time = {id(node) for node in tree.body}
    found: dict[str, bool] = {}

    def note(module: str, node: ast.AST) -> None:
        for dist in _distributions_of_module(module):
            found[dist] = found.get(dist, False) or id(node) in at_import_time

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                note(alias.name, node)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            note(node.module, node)
            for alias in node.names:  # `from torch.utils import tensorboard`
                note(f"{node.module}.{alias.name}", node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            note(node.args[0].value, node)  # a skip, never a failure: always optional
    return found


@functools.cache  # three tests read the scans of txlab/ and tests/ (a second each): scanned once per process, never changed
def imports_under(folder: str) -> dict[str, dict[str, bool]]:
    """Distribution -> {file: imported at module level} for every .py file under ``folder``."""
    uses: dict[str, dict[str, bool]] = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        for dist, eager in imported_distributions(path.read_text(), str(path)).items():
            uses.setdefault(dist, {})[str(path.relative_to(ROOT))] = eager
    return uses


def test_the_scanner_sees_every_kind_of_import():
    source = (
        "import numpy as np\nfrom yaml import safe_load\nimport os, json\nfrom . import sibling\nfrom txlab import model\n"
        "def late():\n    import scipy.stats\n    from torch.utils.tensorboard import SummaryWriter\n"
        "pytest.importorskip('transformers')\n"
    )
    assert imported_distributions(source, "x.py") == {
        "numpy": True, "pyyaml": True, "scipy": False, "torch": False, "tensorboard": False, "transformers": False,
    }


def test_every_import_of_the_package_is_declared_and_eager_ones_are_hard_dependencies():
    hard, extras = declared()
    optional = set().union(*extras.values())
    problems = []
    for dist, files in imports_under("txlab").items():
        eager = sorted(f for f, at_import in files.items() if at_import)
        if dist not in hard and eager:
            problems.append(f"{dist} is imported when {eager[0]} loads but is not in [project.dependencies]")
        elif dist not in hard | optional:
            problems.append(f"{dist} is imported by {sorted(files)[0]} but declared nowhere in pyproject.toml")
    assert not problems, "\n".join(problems)


def plugins_of_the_test_run() -> dict[str, dict[str, bool]]:
    """Distribution -> {"pyproject.toml": True} for each plugin pytest imports because the test
    configuration names it (``-p NAME`` in addopts): the tests use it without an import statement."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    names = re.findall(r"(?:^|\s)-p\s+(\S+)", addopts)
    return {dist: {"pyproject.toml": True} for name in names if not name.startswith("no:") for dist in _distributions_of_module(name)}


def test_the_test_run_plugins_are_seen():
    assert "pytest-xdist" in plugins_of_the_test_run()


def test_every_import_of_the_tests_is_declared():
    hard, extras = declared()
    allowed = hard | set().union(*extras.values())
    missing = {dist: sorted(files)[0] for dist, files in {**imports_under("tests"), **plugins_of_the_test_run()}.items() if dist not in allowed}
    assert not missing, f"imported by the tests but declared nowhere in pyproject.toml: {missing}"


def test_nothing_is_declared_that_nothing_imports():
    hard, extras = declared()
    package, tests = imports_under("txlab"), {**imports_under("tests"), **plugins_of_the_test_run()}
    unused = sorted(hard - set(package))
    unused += sorted(f"{dist} (extra '{name}')" for name, dists in extras.items() for dist in dists - set(package) - set(tests))
    assert not unused, f"declared in pyproject.toml but imported nowhere: {unused}"
