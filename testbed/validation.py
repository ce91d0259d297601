"""Compare a run folder's measurements with every model family, and write the results.

``compare_run`` turns a run folder and a hardware profile into a ``Comparison`` (tables
only); ``write_comparison`` writes its files into the folder (summary.csv with the
prediction and error columns, predictions.csv, errors.csv, knees.csv, plots/*.png);
``comparison_markdown`` renders the report's model sections. Everything is derived from
the folder's events and manifest plus the profile saved beside them, so ``testbed report``
regenerates the same tables from the folder alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from testbed import plots
from testbed.compare import (MODELS, add_predictions, curve_predictions, error_table, group_label, knee_table,
                             predict_run)
from testbed.profile import HardwareProfile
from testbed.rundir import RunFolder
from testbed.spec import RunConfig
from testbed.summary import summarize
from testbed.units import format_bytes, format_seconds

__all__ = ["Comparison", "compare_run", "write_comparison", "comparison_markdown", "init_fit", "PLOTS"]

PLOTS = ("init_vs_workers", "train_vs_workers", "total_vs_workers", "speedup_vs_workers", "phase_breakdown",
         "measured_vs_predicted")


@dataclasses.dataclass
class Comparison:
    compared: pd.DataFrame     # summary rows + group + <phase>_s_pred_<model> + <phase>_err_<model>
    predictions: pd.DataFrame  # the model's rows, one per config and family
    errors: pd.DataFrame       # median / max absolute relative error per family and phase
    knees: pd.DataFrame        # measured vs predicted knee per group and family
    curves: pd.DataFrame       # predictions at every worker count, for plots
    profile: HardwareProfile


def _configs(folder: RunFolder) -> list[RunConfig]:
    return [RunConfig.model_validate(c) for c in folder.manifest["configs"]]


def compare_run(folder: RunFolder, profile: HardwareProfile, models=MODELS) -> Comparison:
    configs = _configs(folder)
    statuses = {(f["config_id"], f["repeat"]): f.get("status", "ok") for f in folder.manifest.get("finished", [])}
    summary = summarize(folder.events(), folder.manifest["configs"], statuses,
                        finished=folder.manifest.get("finished", []))
    labels = {c.config_id: group_label(c.sweep_values) for c in configs}
    summary.insert(2, "group", summary["config_id"].map(labels))
    predictions = predict_run(configs, profile, models)
    compared = add_predictions(summary, predictions)
    return Comparison(compared=compared, predictions=predictions, errors=error_table(compared, models),
                      knees=knee_table(compared, folder.manifest["configs"], models),
                      curves=curve_predictions(configs, profile, models), profile=profile)


def write_comparison(folder: RunFolder, comparison: Comparison) -> list[Path]:
    from testbed.rundir import atomic_write_text
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


def init_fit(compared: pd.DataFrame) -> pd.DataFrame:
    """Per group: slope (s per worker), intercept and R^2 of init time against workers."""
    rows = []
    for label, sub in compared.groupby("group", sort=False):
        x, y = sub["workers"].to_numpy(float), sub["init_s"].to_numpy(float)
        if len(np.unique(x)) < 2:
            continue
        slope, intercept = np.polyfit(x, y, 1)
        resid = y - (intercept + slope * x)
        total = ((y - y.mean()) ** 2).sum()
        r2 = 1.0 - (resid ** 2).sum() / total if total > 0 else float("nan")
        rows.append({"group": label, "slope_s_per_worker": slope, "intercept_s": intercept, "r2": r2})
    return pd.DataFrame(rows, columns=["group", "slope_s_per_worker", "intercept_s", "r2"])


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
    out.append("\n## Error per family and phase\n\nAbsolute relative error over every config and repeat.\n\n")
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
