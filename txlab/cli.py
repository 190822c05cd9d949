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


class UserError(click.ClickException):
    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message}", err=True)


class _Group(TyperGroup):
    """Root group that reports TxlabError as a clean message with exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TxlabError as err:
            raise UserError(str(err)) from None


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
