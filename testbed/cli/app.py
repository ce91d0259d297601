"""The ``testbed`` Typer application; every subcommand module registers itself on it."""

import typer

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Emulate parameter-server training on Ray, predict it with a model, compare.")
