"""``testbed bench``: the testbed's own benchmarks (``testbed.bench``)."""

from __future__ import annotations

import typer

from testbed.cli.app import app

__all__ = ["bench"]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context) -> None:
    """Run the testbed's own benchmarks (--only, --quick; --out DIR, --update-repo-results)."""
    from testbed.bench.__main__ import main as bench_main
    code = bench_main(list(ctx.args))
    if code:
        raise typer.Exit(code)
