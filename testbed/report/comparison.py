"""The report's model sections: the comparison of a run with every model family, rendered
as markdown, and its files (predictions.csv, errors.csv, knees.csv, distribution.csv,
plots/*.png), returned for the report's writer to put into the run folder.

The model is judged on the emulated job (init, train, job = init + train, and the per-step
phases); the testbed's own actor start-up (setup) is shown beside it, never as an error.
A sampled run (``testbed validate SPACE --sample K``) gets the "Held-out accuracy" section:
the error distribution on the draw and the configs the model missed most.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from testbed.analysis.compare import MODELS, left_out, worst_configs
from testbed.analysis.validation import Comparison, init_fit
from testbed.config.units import format_bytes, format_seconds
from testbed.model.profile import HardwareProfile
from testbed.report import plots
from testbed.report.markdown import frame_table, markdown_table
from testbed.report.profile_rows import profile_rows

__all__ = ["comparison_files", "comparison_markdown", "profile_markdown", "heldout_markdown", "PLOTS",
           "HELD_OUT_PHASES", "KEY_COLUMNS"]

PLOTS = ("init_vs_workers", "train_vs_workers", "job_vs_workers", "speedup_vs_workers", "phase_breakdown",
         "measured_vs_predicted")
HELD_OUT_PHASES = ("init", "train", "job", "read", "compute", "push", "pull", "queue", "apply")
# The fields that tell a drawn config from another, shown with the worst configs.
KEY_COLUMNS = ("workers", "servers", "sync", "gradient_bytes", "compute_mode", "compute_s", "pull_every",
               "dataset_bytes", "init_io", "partition", "apply_seconds")


def comparison_files(comparison: Comparison) -> dict[str, Any]:
    """The comparison's tables and plots, by path in the run folder (``summary.csv`` with the
    prediction columns is the report writer's: it holds ``comparison.compared``)."""
    files: dict[str, Any] = {"predictions.csv": comparison.predictions, "errors.csv": comparison.errors,
                             "knees.csv": comparison.knees,
                             "distribution.csv": comparison.distribution}
    c, curves = comparison.compared, comparison.curves
    figures = {
        "init_vs_workers": lambda: plots.phase_vs_workers(c, curves, "init"),
        "train_vs_workers": lambda: plots.phase_vs_workers(c, curves, "train"),
        "job_vs_workers": lambda: plots.phase_vs_workers(c, curves, "job"),
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
    out.append("\n## Measured vs predicted\n\nMean over repeats; errors are (predicted - measured) / measured. "
               "The job is init + train, what the model predicts; setup (actor start-up) is the testbed's own "
               "overhead, shown, not compared.\n")
    for label, sub in c.groupby("group", sort=False):
        means = sub.groupby("config_id", sort=False).mean(numeric_only=True).reset_index()
        table = pd.DataFrame({"config": means["config_id"], "N": means["workers"].astype(int),
                              "S": means["servers"].astype(int), "setup s": means["setup_s"]})
        for phase in ("init", "train", "job"):
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
    for col in ("median_abs_err", "p90_abs_err", "max_abs_err"):
        errors[col] = errors[col].map(lambda v: f"{v * 100:.1f}%")
    errors["median_signed_err"] = errors["median_signed_err"].map(_pct)
    out.append(_md_table(errors))
    if comparison.sample:
        out.append(heldout_markdown(comparison))
    out.append("\n## Knees\n\nThe sparse knee on the sweep's worker counts (see docs/model.md): the first worker "
               "count from which adding workers gains less than half of the linear gain.\n\n")
    out.append(_md_table(comparison.knees.drop(columns=["grid"])))
    fit = init_fit(c) if not comparison.sample else pd.DataFrame()
    if len(fit):
        out.append("\n## Initialization time against workers\n\nLeast-squares line of init time on workers.\n\n")
        out.append(_md_table(fit))
    bounds = c.groupby("config_id", sort=False).first().reset_index()
    cols = ["config_id", "workers", "servers"] + [f"bound_{m}" for m in MODELS if f"bound_{m}" in bounds]
    out.append("\n## Binding resource per config\n\n" + _md_table(bounds[cols]))
    out.append("\n## Plots\n\n" + "".join(f"![{name}](plots/{name}.png)\n" for name in PLOTS))
    return "".join(out)


def _fmt_key(key: str, value) -> str:
    if key in ("gradient_bytes", "dataset_bytes"):
        return format_bytes(value)
    if key in ("compute_s", "apply_seconds"):
        return format_seconds(value)
    return str(value)


def _drift_text(profile: Optional[HardwareProfile]) -> str:
    """How far the machine's per-call level moved while the configs ran (the check before the
    first config and the one after the last), or nothing without both."""
    from testbed.calibration.level import level_drift
    level = profile.call_level if profile is not None else None
    drift = level_drift(level)
    if drift is None:
        return ""
    span = level.get("span") or {}
    at = (f"the runs are predicted at their span's level, x{span['level']:.2f}, the two checks' geometric mean"
          if "level" in span else "the runs are predicted at the first")
    return (f"\nThe machine while the configs ran: the per-call level checked before the first config read "
            f"x{level['level']:.2f} of the calibration's, the one after the last "
            f"x{level['after']['level']:.2f}: it moved x{drift:.2f} in between; {at}. Past a quarter either "
            f"way, the errors below hold that drift as well as the model's.\n")


def heldout_markdown(comparison: Comparison, worst: int = 5) -> str:
    """The error distribution on a draw from a validation space, and each family's worst configs."""
    s = comparison.sample or {}
    noise = s.get("noise_config_ids") or []
    out = [f"\n## Held-out accuracy\n\n{s.get('k', '?')} configs drawn from `{s.get('space', '?')}` with seed "
           f"{s.get('seed', '?')} ({s.get('seed_source', 'given')}); re-make the draw with `testbed validate "
           f"{s.get('space', 'SPACE')} --sample {s.get('k', 'K')} --seed {s.get('seed', 'S')}`. Absolute relative "
           f"error over the draw (each config's first repeat): median, 90th percentile, maximum.\n"]
    if noise:
        out.append(f"\nNoise floor: the first {len(noise)} drawn configs ran {s.get('noise_repeats', 5)} times back "
                   f"to back; `noise` is the median over them of (max - min) / mean of the measured time per "
                   f"phase (the run-to-run range), `noise as error` the median |error| of a model that knew each "
                   f"of them exactly, their mean over the other repeats: the floor to hold `median` against "
                   f"(the last column: how many times the floor each median is).\n")
    out.append(_drift_text(comparison.profile))
    table = comparison.distribution
    table = table[table["phase"].isin(HELD_OUT_PHASES)].copy() if len(table) else table
    if len(table):
        if "noise_abs_err" not in table:  # folders reported before the column existed
            table["noise_abs_err"] = float("nan")
        # How far each median stands above the floor: x1 is as good as the testbed's own noise allows.
        ratio = table["median_abs_err"] / table["noise_abs_err"].where(table["noise_abs_err"] > 0)
        table["above"] = ratio.map(lambda v: "-" if v != v else f"x{v:.1f}")
        for col in ("median_abs_err", "p90_abs_err", "max_abs_err", "noise_spread", "noise_abs_err"):
            table[col] = table[col].map(lambda v: "-" if v != v else f"{v * 100:.1f}%")
        table["median_signed_err"] = table["median_signed_err"].map(_pct)
        table = table.rename(columns={"median_abs_err": "median", "p90_abs_err": "p90", "max_abs_err": "max",
                                      "median_signed_err": "bias (median signed)", "noise_spread": "noise",
                                      "noise_abs_err": "noise as error", "above": "median / noise as error"})
        if not noise:
            table = table.drop(columns=["noise", "noise as error", "median / noise as error"])
    out.append("\n" + _md_table(table))
    out.append(f"\n### Worst configs by job error\n\nPer family, the {worst} configs with the largest |job error|; "
               "`missed` is the term whose predicted-minus-measured time contributes most to the job's error "
               "(init, or steps x a per-step phase; a pull counts every pull_every steps), with that "
               "contribution.\n")
    for model in MODELS:
        top = worst_configs(comparison.compared, model, worst, KEY_COLUMNS)
        if top.empty:
            continue
        shown = pd.DataFrame({"config": top["config_id"]})
        shown["fields"] = top.apply(lambda r: ", ".join(f"{k}={_fmt_key(k, r[k])}" for k in KEY_COLUMNS if k in r
                                                        and r[k] == r[k]), axis=1)
        shown["job s"] = top["job_s"].map(lambda v: f"{v:.3f}")
        shown["predicted s"] = top["job_s_pred"].map(lambda v: f"{v:.3f}")
        shown["error"] = top["job_err"].map(_pct)
        shown["bound"] = top["bound"]
        shown["missed"] = [f"{t} ({v:+.3f} s)" for t, v in zip(top["missed_term"], top["missed_s"])]
        out.append(f"\n**{model}**\n\n" + _md_table(shown))
    return "".join(out)
