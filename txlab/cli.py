"""The `txlab` command: thin wrappers that parse, call one library function, and say where results went.

Every error a user can cause is a :class:`~txlab.errors.TxlabError`; the root group turns it into
one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import click
import typer
from typer.core import TyperGroup

from txlab import __version__
from txlab.errors import TxlabError


class _Group(TyperGroup):
    """Root group that reports TxlabError as a clean message with exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TxlabError as err:
            # typer.Exit rather than a click exception class: recent typer vendors its own click, and
            # only typer's public exceptions are handled the same way by every typer version.
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(code=2) from None


app = typer.Typer(
    cls=_Group,
    help="txlab: reproduce and extend the analyses of Transformer-XL (Dai et al., 2019).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """txlab: reproduce and extend the analyses of Transformer-XL (Dai et al., 2019)."""


@app.command()
def version() -> None:
    """Print the txlab version."""
    typer.echo(__version__)


# ---------------------------------------------------------------------------------------------------
# txlab data: list | get | info

data_app = typer.Typer(help="Corpora: which are available, downloading them, and what they hold.", no_args_is_help=True)
app.add_typer(data_app, name="data")

_DATA_DIR = typer.Option("", "--data-dir", help="Directory holding one folder per corpus [default: $TXLAB_DATA_DIR, else the user cache directory].")
_JSON = typer.Option(False, "--json", help="Also print one compact JSON document (snake_case keys) as the last line of stdout.")
_QUIET = typer.Option(False, "--quiet", "-q", help="No progress bars or status messages on stderr.")
_CORPUS = typer.Argument(..., help="Corpus name, e.g. wikitext-103, enwik8, synthetic (see `txlab data list`).")


def _data_config(data_dir: str, corpus: str = "synthetic", corpus_dir: str = ""):
    from txlab.config import DataConfig

    return DataConfig(data_dir=data_dir, corpus=corpus, corpus_dir=corpus_dir)


def _size(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _print_json(obj) -> None:
    import json

    typer.echo(json.dumps(obj, separators=(",", ":")))


@data_app.command("list")
def data_list(data_dir: str = _DATA_DIR, json_output: bool = _JSON) -> None:
    """List every corpus: whether its files are present, their size, and the vocabulary size once encoded."""
    from txlab.data import data_root, list_corpora

    cfg = _data_config(data_dir)
    rows = list_corpora(cfg)
    typer.echo(f"data directory: {data_root(cfg)}")
    typer.echo(f"{'corpus':<16} {'level':<5} {'present':<8} {'size':>9} {'vocab':>8}  description")
    for r in rows:
        present = "built-in" if r["kind"] == "synthetic" else "yes" if r["complete"] else "partial" if r["present"] else "no"
        vocab = f"{r['vocab_size']:,}" if r["vocab_size"] else "-"
        typer.echo(f"{r['name']:<16} {r['level']:<5} {present:<8} {_size(r['size_bytes']):>9} {vocab:>8}  {r['description']}")
    if json_output:
        _print_json({"data_dir": str(data_root(cfg)), "corpora": rows})


@data_app.command("get")
def data_get(
    name: str = _CORPUS,
    data_dir: str = _DATA_DIR,
    force: bool = typer.Option(False, "--force", help="Download again even when the files are present."),
    quiet: bool = _QUIET,
) -> None:
    """Download a corpus into <data-dir>/<name>/, verify its checksum and unpack it.

    Interrupted downloads resume where they stopped (from the .part file). Set $TXLAB_DATA_MIRROR to a
    URL to fetch <URL>/<file name> instead of the canonical sources. Synthetic corpora need nothing.
    """
    from txlab.data import fetch_corpus

    result = fetch_corpus(name, _data_config(data_dir), force=force, progress=not quiet)
    if result["status"] == "built in":
        typer.echo(f"{name} is generated on the fly; nothing to download.")
        return
    typer.echo(f"{name}: {result['status']} in {result['directory']}")
    for path in result["files"]:
        typer.echo(f"  {path}")
    for unverified in result["unverified"]:
        typer.echo(f"  note: {unverified} has no published checksum; only its size was checked (unverified)")


@data_app.command("info")
def data_info(
    name: str = _CORPUS,
    data_dir: str = _DATA_DIR,
    corpus_dir: str = typer.Option("", "--corpus-dir", help="Read this folder instead of <data-dir>/<name> (e.g. a sample holding only some splits)."),
    json_output: bool = _JSON,
    quiet: bool = _QUIET,
) -> None:
    """Show one corpus: files, tokens per split, vocabulary size, hashes and cache location.

    The first call on a real corpus encodes it (cached afterwards, so later loads take seconds).
    """
    from txlab.data import corpus_info

    info = corpus_info(name, _data_config(data_dir, name, corpus_dir), progress=not quiet)
    typer.echo(f"{info['name']} ({info['level']} level) from {info['source']}")
    typer.echo(f"vocabulary: {info['vocab_size']:,} symbols, sha256 {info['vocab_sha256']}")
    for split, s in info["splits"].items():
        typer.echo(f"{split:>5}: {s['tokens']:>13,} tokens  stream sha256 {s['token_stream_sha256']}")
    for split, looked_for in info["missing_splits"].items():
        typer.echo(f"{split:>5}: missing (looked for {looked_for})")
    for f in info["files"]:
        typer.echo(f"file: {f['path']} ({_size(f['size_bytes'])}, sha256 {f['sha256']})")
    if info.get("options"):
        typer.echo(f"options: {info['options']}")
    if info["cache_dir"]:
        typer.echo(f"cache: {info['cache_dir']}")
    if "synthetic" in info:
        syn = info["synthetic"]
        typer.echo(
            f"copies {syn['min_distance']}..{syn['max_distance']} tokens back (longest needed context {syn['max_context']}); "
            f"valid split: {syn['fraction_copy_value']:.1%} copied values, oracle loss {syn['oracle_nll_full_context']:.3f} nats "
            f"with full context, {syn['oracle_nll_no_context']:.3f} with none"
        )
    if json_output:
        _print_json(info)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
