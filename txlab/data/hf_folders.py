"""Reading a Hugging Face checkpoint or tokenizer without running anything it holds.

transformers can import Python that a folder brings: an ``auto_map`` in config.json or tokenizer_config.json
names classes in the folder's own ``.py`` files, and without ``trust_remote_code`` transformers asks on stdin
whether to run them (a ``y`` piped in says yes). txlab never runs such code. Every transformers load goes
through :func:`from_pretrained` (or :func:`from_config`), which passes ``trust_remote_code=False``, and

- a local folder whose config.json or tokenizer_config.json holds an ``auto_map`` is refused before transformers
  reads it (:func:`refuse_custom_code`);
- a Hub repository that asks for its own code is refused by transformers itself (it is told not to trust it),
  and a Hub config that names code beside a built-in architecture is refused after reading, before any model
  is built from it: the built-in class would not be the model its authors meant.

A JSON file a load reads that does not parse is named in the error (:func:`read_json`, through txlab.fileio),
so a damaged tokenizer is never mistaken for a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from txlab import fileio
from txlab.errors import TxlabError

CODE_FILES = ("config.json", "tokenizer_config.json")
"""The files whose ``auto_map`` makes transformers import a folder's own Python."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model",
                   "spiece.model", "special_tokens_map.json", "added_tokens.json")
"""A folder holding any of these brings a tokenizer (one that then must load)."""

REMEDY = "copy the file again from where the checkpoint or tokenizer came from (save_pretrained writes it whole)"
"""What a damaged file of a Hugging Face folder asks the user to do."""


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file of a Hugging Face folder (txlab.fileio.read_json): one that does not parse is named."""
    return fileio.read_json(path, REMEDY)


def custom_code_message(source: str, where: str, auto_map: Any = None) -> str:
    """The one line refusing a checkpoint or tokenizer that asks to run its own Python."""
    named = ""
    if isinstance(auto_map, dict) and auto_map:  # class references, one or a (slow, fast) pair per Auto class
        classes = {str(c) for v in auto_map.values() for c in (v if isinstance(v, (list, tuple)) else [v]) if c}
        named = f": {', '.join(sorted(classes))}"[:200]
    return (f"{source} asks to run its own Python code (auto_map in {where}{named}): txlab never runs code from a checkpoint "
            "or tokenizer; use one whose architecture and tokenizer transformers has built in")


def refuse_custom_code(source: str) -> None:
    """Refuse a local folder whose config.json or tokenizer_config.json has an ``auto_map`` (custom code), reading
    only those JSON files; a Hub id passes (see the module docstring)."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        return
    for name in CODE_FILES:
        if (folder / name).is_file():
            content = read_json(folder / name)
            if content.get("auto_map"):
                raise TxlabError(custom_code_message(source, name, content["auto_map"]))


def refuse_loaded_custom_code(source: str, loaded: Any) -> None:
    """Refuse a loaded config, model or tokenizer whose files named custom code (what a Hub repository brings:
    transformers built its own class instead, and nothing of the repository ran)."""
    config = getattr(loaded, "config", loaded)
    auto_map = getattr(config, "auto_map", None) or (getattr(loaded, "init_kwargs", None) or {}).get("auto_map")
    if auto_map:
        raise TxlabError(custom_code_message(source, "its config", auto_map))


def _never_trusted(trust_remote_code: bool) -> None:
    # every caller says trust_remote_code=False where it loads, so a reader (and a grep) sees it at each load
    if trust_remote_code is not False:
        raise ValueError("txlab never runs a checkpoint's own code: pass trust_remote_code=False")


def from_pretrained(loader: Any, source: str, *, trust_remote_code: bool, **kwargs: Any) -> Any:
    """``loader.from_pretrained(source, **kwargs)`` (a transformers Auto class) with ``trust_remote_code=False``,
    the only value taken; a folder or repository that asks for custom code is refused in one line (see the module
    docstring). Other errors of transformers pass through, for the caller to say what failed to load."""
    _never_trusted(trust_remote_code)
    refuse_custom_code(source)
    try:
        loaded = loader.from_pretrained(source, trust_remote_code=False, **kwargs)
    except ValueError as err:
        if "trust_remote_code" in str(err) or "custom code" in str(err):
            raise TxlabError(custom_code_message(source, "its config")) from None
        raise
    refuse_loaded_custom_code(source, loaded)
    return loaded


def from_config(loader: Any, config: Any, *, trust_remote_code: bool, **kwargs: Any) -> Any:
    """``loader.from_config(config, **kwargs)`` with ``trust_remote_code=False``, the only value taken: a model built
    from a config alone never imports code the config names."""
    _never_trusted(trust_remote_code)
    return loader.from_config(config, trust_remote_code=False, **kwargs)
