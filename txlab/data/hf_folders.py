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

Folders and Hub ids (:func:`hub_id`). A source that is a local folder is read as it is. Otherwise it is a Hub id
``ORG/NAME``, or a bare ``NAME`` only when the Hugging Face cache already holds it (a legacy id such as ``gpt2``
downloaded before): a bare name that is no folder is far more often a mistyped or missing folder (``hf:loop``) than
a wish to download, and is refused as "no folder" at once. A path (absolute, ``./``, ``~``, more than one ``/``)
that is no folder is refused likewise. Before transformers is asked for a Hub id (:func:`hub_loading`), txlab checks
in seconds that it can be read: with ``HF_HUB_OFFLINE=1`` it must be in the cache; online, one request with a short
timeout and no retries asks whether the Hub answers, and if not the cached copy is read (``local_files_only``) or
the id is refused in one line, never after transformers' minute of retries.
"""

from __future__ import annotations

import functools
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


def hub_id(source: str, what: str) -> str:
    """``source``, which names no local folder, as a Hub id (see the module docstring), or one line refusing it as a
    missing ``what`` (e.g. 'folder', 'tokenizer folder')."""
    path_like = source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1
    if path_like or (source.count("/") == 0 and not in_hub_cache(source)):
        bare = "" if path_like else (": a bare name is a local folder, or a model the Hugging Face cache already holds; a Hub id "
                                     "to download is ORG/NAME, e.g. hf:openai-community/gpt2")
        raise TxlabError(f"no {what} {source}{bare}")
    return source


def in_hub_cache(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds a snapshot of the model repository ``repo_id``."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


HUB_PROBE_TIMEOUT_S = 5.0
"""How long :func:`hub_loading` waits for the Hub to answer its one request."""


def hub_loading(repo_id: str) -> dict[str, Any]:
    """How transformers (or huggingface_hub) is to read the Hub id ``repo_id`` without waiting on a network that is not
    there: {} to ask the Hub as usual, or ``{'local_files_only': True}`` to read the cached copy when the Hub does not
    answer. Refused in one line, in seconds, when it can be read neither way (see the module docstring)."""
    from huggingface_hub import constants

    cached = in_hub_cache(repo_id)
    if constants.HF_HUB_OFFLINE:
        if cached:
            return {}
        raise TxlabError(f"{repo_id} is no local folder, and the Hugging Face cache ({constants.HF_HUB_CACHE}) does not hold it while "
                         f"HF_HUB_OFFLINE is set: download it where there is network (`hf download {repo_id} --local-dir DIR`) and give hf:DIR")
    unreachable = _hub_unreachable(constants.ENDPOINT)
    if unreachable is None:
        return {}
    if cached:
        return {"local_files_only": True}
    raise TxlabError(f"{repo_id} is no local folder, and the Hugging Face Hub ({constants.ENDPOINT}) does not answer ({unreachable}): "
                     f"download it where there is network (`hf download {repo_id} --local-dir DIR`) and give hf:DIR")


@functools.cache
def _hub_unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` does not answer one request within :data:`HUB_PROBE_TIMEOUT_S` (no retries), or None when it
    answers at all (any HTTP status: the network is there). Asked once per process."""
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception as err:  # the HTTP client's own errors (httpx or requests, by huggingface_hub's version): no answer
        return str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
    return None


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
    if not Path(source).expanduser().is_dir():
        kwargs = {**hub_loading(hub_id(source, "folder")), **kwargs}
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
