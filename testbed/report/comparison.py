"""The report's model sections: the comparison of a run with every model family, rendered
as markdown, and its files (predictions.csv, errors.csv, knees.csv, plots/*.png), returned
for the report's writer to put into the run folder.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis.compare import MODELS
from testbed.analysis.validation import Comparison, init_fit
from testbed.model.profile import HardwareProfile
from testbed.report import plots
from testbed.report.markdown import frame_table, markdown_table
from testbed.report.profile_rows import profile_rows

__all__ = ["comparison_files", "comparison_markdown", "profile_markdown", "PLOTS"]

PLOTS = ("init_vs_workers", "train_vs_workers", "total_vs_workers", "speedup_vs_workers", "phase_breakdown",
         "measured_vs_predicted")


def comparison_files(comparison: Comparison) -> dict[str, Any]:
    """The comparison's tables and plots, by path in the run folder (``summary.csv`` with the
    prediction columns is the report writer's: it holds ``comparison.compared``)."""
    files: dict[str, Any] = {"predictions.csv": comparison.predictions, "errors.csv": comparison.errors,
                             "knees.csv": comparison.knees}
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
        files[f"plots/{name}.png"] = figures[name]()
    return files


def _md_table(frame: pd.DataFrame) -> str:
    return "\n".join(frame_table(frame)) + "\n"


def _pct(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v * 100:+.1f}%"


def profile_markdown(profile: HardwareProfile) -> str:
    """The profile's figures (``profile_rows``, the same rows ``testbed calibrate`` prints) as a table."""
    return "\n".join(markdown_table(profile_rows(profile), ["figure", "value"])) + "\n"


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
