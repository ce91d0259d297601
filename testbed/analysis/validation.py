"""Compare a run folder's measurements with every model family.

``compare_run`` turns a run folder and a hardware profile into a ``Comparison`` (tables
only); ``testbed.report.comparison`` writes and renders it. Everything is derived from
the folder's events and manifest plus the profile saved beside them, so ``testbed report``
regenerates the same tables from the folder alone.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import pandas as pd

from testbed.analysis.compare import (
    MODELS,
    add_predictions,
    curve_predictions,
    distribution_table,
    error_table,
    group_label,
    knee_table,
    noise_error,
    noise_spread,
    predict_run,
)
from testbed.config.spec import RunConfig
from testbed.model.profile import HardwareProfile
from testbed.records.rundir import RunFolder

__all__ = ["Comparison", "compare_run", "init_fit"]

@dataclasses.dataclass
class Comparison:
    compared: pd.DataFrame     # summary rows + group + <phase>_s_pred_<model> + <phase>_err_<model>
    predictions: pd.DataFrame  # the model's rows, one per config and family
    errors: pd.DataFrame       # median / max absolute relative error per family and phase
    knees: pd.DataFrame        # measured vs predicted knee per group and family
    curves: pd.DataFrame       # predictions at every worker count, for plots
    profile: HardwareProfile
    distribution: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)  # error distribution, + noise
    sample: Optional[dict] = None  # the manifest's record of a sampled run (space, k, seed, noise), else None


def _configs(folder: RunFolder) -> list[RunConfig]:
    return [RunConfig.model_validate(c) for c in folder.manifest["configs"]]


def compare_run(folder: RunFolder, profile: HardwareProfile, models=MODELS) -> Comparison:
    configs = _configs(folder)
    summary = folder.summary()
    sample = folder.manifest.get("sample")
    # A sampled run's configs differ in every field: one group (the draw), and no curves
    # over workers (each would be a different job).
    labels = {c.config_id: "draw" if sample else group_label(c.sweep_values) for c in configs}
    summary.insert(2, "group", summary["config_id"].map(labels))
    predictions = predict_run(configs, profile, models)
    compared = add_predictions(summary, predictions)
    noise = noise_spread(compared, sample.get("noise_config_ids", [])) if sample else None
    noise_err = noise_error(compared, sample.get("noise_config_ids", [])) if sample else None
    return Comparison(compared=compared, predictions=predictions, errors=error_table(compared, models),
                      knees=knee_table(compared, folder.manifest["configs"], models),
                      curves=pd.DataFrame() if sample else curve_predictions(configs, profile, models),
                      profile=profile, distribution=distribution_table(compared, models, noise=noise, noise_err=noise_err), sample=sample)


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
