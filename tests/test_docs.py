"""The README and the manual stay true: short README, links and anchors that resolve, commands that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from txlab.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def _code_lines(page: Path) -> list[str]:
    """Shell lines of indented code blocks (and ```bash blocks), continuations joined."""
    lines, fenced, joined = [], False, ""
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced and line.strip() in ("```bash", "```sh", "```console")
            continue
        if fenced or line.startswith("    "):
            joined += line.strip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                lines.append(joined.strip())
                joined = ""
    return lines


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_and_anchor_resolves(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to a missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name} links to {target}, but {linked.name} has no such heading"


def _txlab_commands(page: Path) -> list[list[str]]:
    commands = []
    for line in _code_lines(page):
        for part in re.split(r"&&|;", line):
            if not part.strip().startswith("txlab "):
                continue
            words = shlex.split(part, comments=True)
            if words[:1] == ["txlab"]:
                commands.append([w.strip("[]") for w in words[1:]])
    return commands


def _resolve(words: list[str]):
    """The command object a `txlab ...` line names, the words after it, and its name."""
    command = typer.main.get_command(app)
    name = "txlab"
    while words and words[0] == "--home":
        words = words[2:]
    while hasattr(command, "commands") and words and words[0] in command.commands:
        command, name, words = command.commands[words[0]], f"{name} {words[0]}", words[1:]
    return command, words, name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_shown_exists_with_the_options_it_uses(page):
    for words in _txlab_commands(page):
        if not words or words[0] in ("--help", "--version"):
            continue
        command, rest, name = _resolve(words)
        assert not hasattr(command, "commands") or not rest or rest[0].startswith("-"), f"{page.name}: no command {words[0]!r}"
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
        for word in rest:
            option = word.split("=", 1)[0]
            if option.startswith("-") and option not in ("-", "--"):
                assert option in known, f"{page.name}: `{name}` has no option {option}"


def _imported_modules(source: str, package: Path) -> set[str]:
    """The txlab modules a source file imports, as dotted names relative to the package."""
    named = set(re.findall(r"^\s*(?:from|import) txlab\.([\w.]+)", source, flags=re.M))
    for parent, names in re.findall(r"^\s*from txlab((?:\.\w+)*) import ([\w, ]+)", source, flags=re.M):
        for name in names.split(","):
            dotted = f"{parent.lstrip('.')}.{name.split(' as ')[0].strip()}".lstrip(".")
            named.add(dotted)
    return {name for name in named if (package / f"{name.replace('.', '/')}.py").exists()}


def test_the_module_map_orders_the_layers_as_the_imports_run():
    """docs/design.md: "a module imports only modules above it" in its table of layers."""
    order = []
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        if re.match(r"\| (settings|analysis|data|models|runs|measure|drivers|interface) \|", line):
            order += re.findall(r"`([\w.]+)`", line.split("|")[2])
    package = ROOT / "txlab"
    modules = {str(p.relative_to(package).with_suffix("")).replace("/", ".") for p in package.rglob("*.py")}
    modules = {name for name in modules if not name.endswith("__init__") and name != "__main__"}
    assert sorted(order) == sorted(modules), "every module appears once in the map"
    position = {name: i for i, name in enumerate(order)}
    for name in order:
        for other in _imported_modules((package / f"{name.replace('.', '/')}.py").read_text(), package):
            assert position[other] < position[name], f"{name} imports {other}, which the map places below it"
    layers = [line.split("|")[1].strip() for line in (ROOT / "docs" / "design.md").read_text().splitlines()
              if re.match(r"\| (settings|analysis|data|models|runs|measure|drivers|interface) \|", line)]
    folders = sorted(p.name for p in package.iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(set(layers) - {"settings", "interface"}), "each subpackage is one layer of the map"
