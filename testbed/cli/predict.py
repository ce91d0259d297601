"""``testbed predict``: predict every config of a spec with the model (no Ray needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Optional

import pandas as pd
import typer

from testbed.cli.app import app
from testbed.cli.common import out_console
from testbed.config.errors import UserError
from testbed.config.units import format_seconds
from testbed.model import ModelFamily
from testbed.records.rundir import atomic_write_text

__all__ = ["predict", "format_table", "write_csv"]


@app.command()
def predict(spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
            profile: Path = typer.Option(..., "--profile", help="hardware profile (JSON) from `testbed calibrate`"),
            models: str = typer.Option("initial,updated,queueing", "--models", help="model families, comma-separated"),
            csv: Optional[Path] = typer.Option(None, "--csv", help="write the predictions here"),
            set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)")) -> None:
    """Predict every config of SPEC with the model (no Ray needed)."""
    from testbed.config.spec import load_spec
    from testbed.model.sweep import predict_spec
    frame = predict_spec(load_spec(spec, overrides=set_), profile, models)
    out_console.print(format_table(frame), markup=False, highlight=False)
    if csv:
        write_csv(frame, csv)
        out_console.print(f"written: {csv}")


def _knee(value: Any, search_max: Any, model: str) -> str:
    """A knee count, '>n' when the search found none up to n, '-' for the initial family
    (which scales linearly by construction)."""
    if model == ModelFamily.INITIAL.value:
        return "-"
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return f">{search_max}" if search_max is not None and not pd.isna(search_max) else "-"
    return str(int(value))


def format_table(frame: pd.DataFrame) -> str:
    """A plain-text table per config: one line per family with the times, the rate, the
    binding resource and the knees."""
    if frame.empty:
        return "(no configs)"
    header = ["model", "init", "train", "total", "step", "steps/s", "bound", "knee", "knee(train)", "N*"]
    blocks = []
    for config_id, group in frame.groupby("config_id", sort=False):
        first = group.iloc[0]
        lines = [[str(r["model"]), format_seconds(r["init_s"]), format_seconds(r["train_s"]),
                  format_seconds(r["total_s"]), format_seconds(r["step_s"]), f"{r['steps_per_s']:.4g}",
                  str(r["bound"]), _knee(r["knee_workers"], r.get("knee_search_max"), r["model"]),
                  _knee(r.get("knee_train_workers"), r.get("knee_search_max"), r["model"]),
                  "-" if pd.isna(r.get("knee_asymptotic")) else f"{r['knee_asymptotic']:.3g}"]
                 for _, r in group.iterrows()]
        widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header))]
        fmt = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
        title = f"{config_id}: workers={first['workers']} servers={first['servers']} steps/worker={first['steps']}"
        blocks.append("\n".join([title, fmt(header)] + [fmt(row) for row in lines]))
    return "\n\n".join(blocks)


def write_csv(frame: pd.DataFrame, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write the predictions as CSV (one row per config and family); atomically, so a
    reader never sees half a file."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise UserError(f"{path} exists; pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, frame.to_csv(index=False))
    return path
