"""The ``testbed`` command line: one module per subcommand, each a thin layer over one
library function (tests call the functions without parsing arguments).

A ``UserError`` becomes one line on stderr and exit code 2; Ctrl-C exits 130 after the run
folder has been marked ``incomplete``.
"""

from __future__ import annotations

import sys
from typing import Optional

from testbed.cli import bench, calibrate, predict, presets, report, residuals, run, validate  # noqa: F401  (register the commands)
from testbed.cli.app import app
from testbed.cli.common import err_console, out_console
from testbed.config.errors import EXIT_USER_ERROR, UserError

__all__ = ["app", "main"]


@app.command()
def version() -> None:
    """Print the testbed's version."""
    from testbed import __version__
    out_console.print(__version__)


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of the console script; returns the exit code.

    SIGTERM (a kill, a batch system's time limit) ends a run like Ctrl-C: the folder is marked
    ``incomplete`` and keeps every finished config (Ray's driver turns SIGTERM into SystemExit,
    and ``run_experiment`` handles both)."""
    import signal
    try:
        signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (tests calling main in a thread)
        pass
    try:
        code = app(args=argv, standalone_mode=False)  # a command's typer.Exit(n) comes back as n
        if code == 130:  # typer turns KeyboardInterrupt into this return value
            raise KeyboardInterrupt
    except UserError as err:
        err_console.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err_console.print("interrupted: finished configs are kept; the run folder is marked incomplete "
                          "(finish it with `testbed run --resume RUN_DIR`)", markup=False, highlight=False)
        return 130
    except SystemExit as exit_:
        import signal
        if exit_.code in (signal.SIGTERM, 128 + signal.SIGTERM):
            err_console.print("terminated: finished configs are kept; the run folder is marked incomplete "
                              "(finish it with `testbed run --resume RUN_DIR`)", markup=False, highlight=False)
            return 128 + signal.SIGTERM
        raise
    except Exception as err:
        usage_errors, aborts = _click_exception_types()
        if isinstance(err, usage_errors):  # a mistyped command or option: click's usage answer
            err.show()
            return EXIT_USER_ERROR
        if isinstance(err, aborts):
            return 130
        raise
    return code if isinstance(code, int) else 0


def _click_exception_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The usage-error and abort classes of the click the installed typer runs on.

    With ``standalone_mode=False`` click raises its usage errors instead of printing them.
    Recent typer vendors click as ``typer._click`` (its classes are not ``click``'s), older
    typer runs on ``click`` itself: both are looked for, so a mistyped command never falls
    through to a traceback."""
    import importlib

    import typer
    usage: list[type] = []
    aborts: list[type] = [typer.Abort]
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        usage.append(module.ClickException)
        if hasattr(module, "Abort"):
            aborts.append(module.Abort)
    return tuple(usage), tuple(aborts)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
