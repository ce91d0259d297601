"""The report's model sections: the comparison of a run with every model family, rendered
as markdown, and its files (summary.csv with the prediction and error columns,
predictions.csv, errors.csv, knees.csv, plots/*.png) written into the run folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from testbed.analysis.compare import MODELS, left_out
from testbed.analysis.validation import Comparison, init_fit
from testbed.config.units import format_bytes, format_seconds
from testbed.model.profile import HardwareProfile
from testbed.records.rundir import RunFolder
from testbed.report import plots

__all__ = ["write_comparison", "comparison_markdown", "profile_markdown", "PLOTS"]

PLOTS = ("init_vs_workers", "train_vs_workers", "total_vs_workers", "speedup_vs_workers", "phase_breakdown",
         "measured_vs_predicted")


def write_comparison(folder: RunFolder, comparison: Comparison) -> list[Path]:
    from testbed.records.rundir import atomic_write_text
    written = []
    for name, frame in (("summary.csv", comparison.compared), ("predictions.csv", comparison.predictions),
                        ("errors.csv", comparison.errors), ("knees.csv", comparison.knees)):
        atomic_write_text(folder.path / name, frame.to_csv(index=False))
        written.append(folder.path / name)
    plot_dir = folder.path / "plots"
    plot_dir.mkdir(exist_ok=True)
    c, curves = comparison.compared, comparison.curves
    figures = {
        "init_vs_workers": lambda: plots.phase_vs_workers(c, curves, "init"),
        "train_vs_workers": lambda: plots.phase_vs_workers(c, curves, "train"),
        "total_vs_workers": lambda: plots.phase_vs_workers(c, curves, "total"),
        "speedup_vs_workers": lambda: plots.speedup_vs_workers(c, curves),
        "phase_breakdown": lambda: plots.phase_breakdown(c),
        "measured_vs_predicted": lambda: plots.measured_vs_predicted(c),
    }
    for name in PLOTS:
        written.append(plots.save(figures[name](), plot_dir / f"{name}.png"))
    return written


def _md_table(frame: pd.DataFrame, floatfmt: str = "{:.4g}") -> str:
    if frame.empty:
        return "_(none)_\n"
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append("-" if np.isnan(v) else floatfmt.format(v))
            else:
                cells.append("-" if v is None or v is pd.NA else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pct(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v * 100:+.1f}%"


def profile_markdown(profile: HardwareProfile) -> str:
    p = profile
    lines = ["| figure | value |", "|---|---|",
             f"| nodes | {len(p.identity.get('nodes', [])) or 1} (cores per node: {p.cores_per_node}) |",
             f"| CPU | {p.identity.get('cpu_model', '?')} |",
             f"| actor-call latency L | {format_seconds(p.actor_call_latency_s)} |",
             f"| transfer bandwidth W (same node) | {format_bytes(p.transfer_bytes_per_s_local)}/s |",
             f"| server apply bandwidth A | {format_bytes(p.server_apply_bytes_per_s)}/s |",
             f"| server per-call overhead o | {format_seconds(p.server_call_overhead_s)} |",
             f"| matmul rate | {p.flops_per_s / 1e9:.1f} GFLOP/s |"]
    for key, value in sorted(p.extra.items()):
        shown = f"{format_bytes(value)}/s" if key.endswith("bytes_per_s") else (
            format_seconds(value) if key.endswith("_s") else f"{value:g}")
        lines.append(f"| {key} | {shown} |")
    if p.disk:
        for jobs, bps in sorted(p.disk.seq_read_bytes_per_s.items()):
            lines.append(f"| disk sequential read, {jobs} reader(s) | {format_bytes(bps)}/s |")
        lines.append(f"| disk figures from | {p.disk.source} ({p.disk.fs_type or '?'}) |")
    if p.disk_reference:
        for jobs, bps in sorted(p.disk_reference.seq_read_bytes_per_s.items()):
            lines.append(f"| fio sequential read, {jobs} reader(s) (reference) | {format_bytes(bps)}/s |")
    return "\n".join(lines) + "\n"


def comparison_markdown(comparison: Comparison) -> str:
    c = comparison.compared
    out = ["## Hardware profile\n", profile_markdown(comparison.profile)]
    out.append("\n## Measured vs predicted\n\nMean over repeats; errors are (predicted - measured) / measured.\n")
    for label, sub in c.groupby("group", sort=False):
        means = sub.groupby("config_id", sort=False).mean(numeric_only=True).reset_index()
        table = pd.DataFrame({"config": means["config_id"], "N": means["workers"].astype(int),
                              "S": means["servers"].astype(int)})
        for phase in ("init", "train", "total"):
            table[f"{phase} s"] = means[f"{phase}_s"]
            for model in MODELS:
                if f"{phase}_err_{model}" in means:
                    table[f"{phase} err {model}"] = means[f"{phase}_err_{model}"].map(_pct)
        out.append(f"\n### {label}\n\n" + _md_table(table))
    out.append("\n## Error per family and phase\n\nAbsolute relative error over every config and repeat that ran ok.\n\n")
    dropped = left_out(c)
    if len(dropped):
        out.append("Left out of the errors and the knees (their measurements stop where the run was cut short): "
                   + ", ".join(f"`{r.config_id}` repeat {r.repeat} ({r.status})" for r in dropped.itertuples())
                   + ".\n\n")
    errors = comparison.errors.copy()
    for col in ("median_abs_err", "max_abs_err"):
        errors[col] = errors[col].map(lambda v: f"{v * 100:.1f}%")
    out.append(_md_table(errors))
    out.append("\n## Knees\n\nThe sparse knee on the sweep's worker counts (see docs/model.md): the first worker "
               "count from which adding workers gains less than half of the linear gain.\n\n")
    out.append(_md_table(comparison.knees.drop(columns=["grid"])))
    fit = init_fit(c)
    if len(fit):
        out.append("\n## Initialization time against workers\n\nLeast-squares line of init time on workers.\n\n")
        out.append(_md_table(fit))
    bounds = c.groupby("config_id", sort=False).first().reset_index()
    cols = ["config_id", "workers", "servers"] + [f"bound_{m}" for m in MODELS if f"bound_{m}" in bounds]
    out.append("\n## Binding resource per config\n\n" + _md_table(bounds[cols]))
    out.append("\n## Plots\n\n" + "".join(f"![{name}](plots/{name}.png)\n" for name in PLOTS))
    return "".join(out)
