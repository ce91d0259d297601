"""``testbed residuals``: the model's errors pooled over several compared run folders, and the
groups of configs it misses alike (``testbed.analysis.residuals``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from testbed.cli.app import app
from testbed.cli.common import err_console, out_console
from testbed.config.errors import UserError

__all__ = ["residuals"]


@app.command()
def residuals(folders: List[Path] = typer.Argument(..., help="folders written by `testbed validate` (or a folder of them)"),
              family: str = typer.Option("simulated", "--family", help="the model family whose errors to pool"),
              repredict: bool = typer.Option(False, "--repredict",
                                             help="predict each folder again with this checkout's model, on the profile "
                                                  "saved in it (seen data: for trying a change)"),
              min_n: int = typer.Option(8, "--min-n", help="the fewest configs a group needs"),
              bias: float = typer.Option(0.15, "--bias", help="the smallest median signed error a group is shown at"),
              alpha: float = typer.Option(0.01, "--alpha", help="the sign test's largest p-value for a group"),
              pairs: bool = typer.Option(True, "--pairs/--no-pairs", help="also group by two dimensions at once"),
              csv: Optional[Path] = typer.Option(None, "--csv", help="write the pooled rows (config x phase) here"),
              out: Optional[Path] = typer.Option(None, "--out", help="also write the tables (markdown) here")) -> None:
    """Pool the model's errors over FOLDERS: per phase, and the groups of configs it misses alike."""
    from testbed.analysis import residuals as r
    from testbed.records.rundir import atomic_write_text
    if min_n < 2:
        raise UserError(f"--min-n {min_n}: a group needs at least 2 configs")
    if not (0 < alpha <= 1):
        raise UserError(f"--alpha {alpha}: give a p-value in (0, 1]")
    if bias < 0:
        raise UserError(f"--bias {bias}: give a non-negative fraction (0.15 is 15 %)")
    paths = r.folders_from(folders)
    pooled = r.residuals(paths, family, repredict=repredict,
                         progress=lambda msg: err_console.print(msg, style="dim") if repredict else None)
    if pooled.empty:
        raise UserError(f"no config of {len(paths)} folder(s) has a measured phase with a {family} prediction")
    text = r.describe(pooled, r.biased_groups(pooled, min_n=min_n, bias=bias, alpha=alpha, pairs=pairs),
                      r.phase_table(pooled), family, folders=len(paths))
    if repredict:
        text += "\nRe-predicted with this checkout's model: the configs were seen, so these are not held-out figures.\n"
    out_console.print(text, markup=False, highlight=False)
    if csv is not None:
        atomic_write_text(csv, pooled.to_csv(index=False))
        out_console.print(f"written: {csv}")
    if out is not None:
        atomic_write_text(out, text)
        out_console.print(f"written: {out}")
