"""What every `txlab` command shares, so each follows the same conventions: the root group (a user's error is one
line on stderr and exit code 2, never a traceback; Ctrl-C is one line and exit code 130, SIGTERM one line and 143), help
text without types and in whole sentences, ``--home`` and ``--version``, and the options every command spells alike (``--json``,
``--quiet``, ``--dry-run``, ``--set``, ``--show-settings``). txlab.cli defines the commands on :data:`app`.
"""

from __future__ import annotations

import inspect
import os
import re
import signal
import threading
from pathlib import Path

import typer
from typer.core import TyperGroup

from txlab import __version__
from txlab.errors import TxlabError, io_error_message


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM (a scheduler's or ``kill``'s stop): like KeyboardInterrupt, no ``except
    Exception`` takes it for an error of its own, and every ``finally`` and ``except BaseException`` cleans up on the way."""


def _terminate(signum, frame) -> None:
    raise Terminated


class CommandGroup(TyperGroup):
    """Root group that reports TxlabError, and a full or read-only disk, as a clean message with exit code 2.

    Ctrl-C exits 130, the shell's code for a process stopped by SIGINT, with one line: click turns it
    into "Aborted!" and 1, typer into 130 and nothing said, and neither tells a script it was stopped.
    SIGTERM likewise exits 143 (128 + 15) with one line, after the cleanup a Ctrl-C gets (training installs its own
    handler, which first saves a checkpoint).
    """

    def get_help_option(self, ctx):
        return _without_type(super().get_help_option(ctx))

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _help_flags_without_type(command, ctx)
        return command

    def invoke(self, ctx):
        main_thread = threading.current_thread() is threading.main_thread()  # where Python runs signal handlers
        previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            typer.echo("interrupted: stopped by Ctrl-C", err=True)
            raise typer.Exit(code=130) from None
        except Terminated:
            typer.echo("interrupted: stopped by SIGTERM", err=True)
            raise typer.Exit(code=128 + signal.SIGTERM) from None
        except TxlabError as err:
            # typer.Exit rather than a click exception class: recent typer vendors its own click, and
            # only typer's public exceptions are handled the same way by every typer version.
            code = getattr(err, "exit_code", 2)  # a training stopped by a signal says so with that signal's code
            typer.echo(f"{'error' if code == 2 else 'interrupted'}: {err}", err=True)
            raise typer.Exit(code=code) from None
        except OSError as err:
            message = io_error_message(err)
            if message is None:
                raise
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(code=2) from None
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)  # None: set outside Python


def _without_type(option):
    # typer shows a flag's type, "<bool>", unless its metavar is empty (the convention of every txlab
    # flag); click creates --help itself, so it gets the same treatment here.
    if option is not None:
        option.metavar = ""
    return option


def _unwrapped(help_text: str | None) -> str | None:
    """A docstring's paragraphs as one line each, an example (a line starting `txlab `) on its own line.

    typer's rich help keeps a docstring's line breaks after its first paragraph (and in the command
    list), so a sentence wrapped in the source broke mid-line on any terminal wider or narrower than
    the source; joined, the terminal wraps it.
    """
    if not help_text:
        return help_text
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(re.sub(r"\n(?!txlab )", " ", paragraph) for paragraph in paragraphs)


def _help_flags_without_type(command, ctx) -> None:
    """Give --help no shown type, and the help text whole sentences, on ``command`` and, for a group
    (data, bench, import), on its sub-commands."""
    _without_type(command.get_help_option(ctx))
    command.help = _unwrapped(command.help)
    for sub in getattr(command, "commands", {}).values():
        _help_flags_without_type(sub, ctx)


app = typer.Typer(
    cls=CommandGroup,
    help="txlab: reproduce and extend the analyses of Transformer-XL (Dai et al., 2019).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    _version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the txlab version and exit.", metavar=""),
    home: Path = typer.Option(None, "--home", help="Where default outputs go: <home>/results/..., <home>/figures/... \\[default: $TXLAB_HOME, else runs]. "
                              "--home . regenerates the repository's committed results.", show_default=False),
) -> None:
    """txlab: reproduce and extend the analyses of Transformer-XL (Dai et al., 2019).

    Default outputs (trained runs, tables, figures) go under the home, runs/ unless --home or
    $TXLAB_HOME says otherwise; paths given as options are taken as given.
    """
    if home is not None:
        from txlab.workspace import HOME_ENV

        # through the environment, so that what the command launches (torchrun, Slurm jobs) writes there too
        os.environ[HOME_ENV] = str(home)


JSON = typer.Option(False, "--json", help="Also print one compact JSON document (snake_case keys) as the last line of stdout.", metavar="")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress bars or status messages on stderr.", metavar="")

SET = typer.Option([], "--set", help="Override a config value, e.g. --set model.n_layer=6 --set train.lr=1e-3 (repeatable).")
DRY_RUN = typer.Option(False, "--dry-run", help="Print the plan (what would run, an estimated time on this machine) and stop.", metavar="")


def show_settings(module: str, settings_class: str):
    """``--show-settings``: list a study command's settings (what --set and a study profile take) and exit."""

    def show(wanted: bool) -> None:
        if wanted:
            import importlib

            from txlab.config import describe_settings

            typer.echo(describe_settings(getattr(importlib.import_module(module), settings_class)()))
            raise typer.Exit()

    return typer.Option(False, "--show-settings", callback=show, is_eager=True, metavar="",
                        help="List the settings (the keys of --set and of a study file's profiles) with their defaults and what they accept, and exit.")


def print_json(obj) -> None:
    import json

    typer.echo(json.dumps(obj, separators=(",", ":")))
