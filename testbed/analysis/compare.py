"""Measured against predicted: the comparison columns, the error statistics and the knees.

Pure pandas/numpy over a run's summary and the model's predictions (no Ray, no files).

Terms:
- *compared phase*: ``init``, ``train``, ``total`` (the driver's spans) and the per-step
  phases ``read``, ``compute``, ``push``, ``pull``, ``queue``, ``apply`` (event means).
- *signed relative error*: ``(predicted - measured) / measured``; positive means the model
  predicted more time than was measured.
- *group*: the configs of a run that differ only in their worker count (the sweep values
  other than ``workers``); knees are found per group.
- *sparse knee*: on the sweep's worker counts n_1 < n_2 < ..., the first n_i from which
  going to n_{i+1} gains less than half of the linear gain per added worker, the rate of
  n_1 workers divided by n_1. Applied alike to the measured and the predicted rates, so
  the two are compared on the same grid ("within one sweep step").
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from testbed.config.spec import RunConfig
from testbed.model import ModelFamily
from testbed.model.profile import HardwareProfile
from testbed.model.sweep import predict_configs

__all__ = ["COMPARED_PHASES", "measured_column", "predict_run", "add_predictions", "error_table",
           "group_label", "sparse_knee", "knee_table", "curve_predictions", "MODELS", "judged_rows", "left_out"]

COMPARED_PHASES = ("init", "train", "total", "read", "compute", "push", "pull", "queue", "apply")
MODELS = tuple(m.value for m in ModelFamily)


def measured_column(phase: str) -> str:
    return f"{phase}_s" if phase in ("init", "train", "total") else f"{phase}_mean_s"


def predict_run(configs: Sequence[RunConfig], profile: HardwareProfile,
                models: Iterable[str] = MODELS) -> pd.DataFrame:
    """One prediction row per config and family (the model's own columns)."""
    return predict_configs(list(configs), profile, list(models))


def add_predictions(summary: pd.DataFrame, predictions: pd.DataFrame) -> pd.DataFrame:
    """The summary with ``<phase>_s_pred_<model>`` and ``<phase>_err_<model>`` for every
    compared phase and family, and ``bound_<model>``. A phase that was not measured (no
    events: e.g. ``read`` without step reads) gets an error of NaN, not a fake 0."""
    out = summary.copy()
    for model, pred in predictions.groupby("model", sort=False):
        pred = pred.set_index("config_id")
        for phase in COMPARED_PHASES:
            col = measured_column(phase)
            predicted = out["config_id"].map(pred[col]).astype(float)
            measured = out[col].astype(float)
            out[f"{phase}_s_pred_{model}"] = predicted
            with np.errstate(divide="ignore", invalid="ignore"):
                err = (predicted - measured) / measured
            out[f"{phase}_err_{model}"] = err.where(measured > 0)
        out[f"bound_{model}"] = out["config_id"].map(pred["bound"])
    return out


def judged_rows(compared: pd.DataFrame) -> pd.DataFrame:
    """The rows the model is judged on: config repeats that ran to their end (status ``ok``).
    A failed or timed-out one measured a run cut short, not the config the model predicts."""
    if "status" not in compared:
        return compared
    return compared[compared["status"] == "ok"]


def left_out(compared: pd.DataFrame) -> pd.DataFrame:
    """(config_id, repeat, status) of the rows ``judged_rows`` leaves out."""
    if "status" not in compared:
        return pd.DataFrame(columns=["config_id", "repeat", "status"])
    return compared.loc[compared["status"] != "ok", ["config_id", "repeat", "status"]].reset_index(drop=True)


def error_table(compared: pd.DataFrame, models: Iterable[str] = MODELS,
                phases: Iterable[str] = COMPARED_PHASES) -> pd.DataFrame:
    """Median and maximum absolute relative error per family and phase (over the configs and
    repeats that ran ok: ``judged_rows``)."""
    compared = judged_rows(compared)
    rows = []
    for model in models:
        for phase in phases:
            col = f"{phase}_err_{model}"
            if col not in compared:
                continue
            err = compared[col].abs().dropna()
            if not len(err):
                continue
            rows.append({"model": model, "phase": phase, "n": len(err), "median_abs_err": float(err.median()),
                         "max_abs_err": float(err.max())})
    return pd.DataFrame(rows, columns=["model", "phase", "n", "median_abs_err", "max_abs_err"])


def group_label(sweep_values: dict[str, Any]) -> str:
    """The label of a config's group: its sweep values other than ``workers``."""
    rest = {k: v for k, v in sweep_values.items() if k != "workers"}
    return ", ".join(f"{k}={v}" for k, v in rest.items()) or "all"


def sparse_knee(workers: Sequence[int], rate: Sequence[float], fraction: float = 0.5) -> Optional[int]:
    """The sparse knee (see the module doc) of ``rate`` over the sorted ``workers``; None when
    every step still pays, or with fewer than two points."""
    pairs = sorted(zip(workers, rate))
    if len(pairs) < 2 or not pairs[0][1] > 0:
        return None
    per_worker = pairs[0][1] / pairs[0][0]
    for (n0, x0), (n1, x1) in zip(pairs, pairs[1:]):
        if (x1 - x0) / (n1 - n0) < fraction * per_worker:
            return int(n0)
    return None


def _groups(compared: pd.DataFrame, configs: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for c in configs:
        groups.setdefault(group_label(c.get("sweep_values", {})), []).append(c["config_id"])
    return groups


def knee_table(compared: pd.DataFrame, configs: Sequence[dict[str, Any]],
               models: Iterable[str] = MODELS) -> pd.DataFrame:
    """Per group: the measured train-phase knee and job knee on the sweep grid, each family's
    knee on the same grid, whether it lies within one sweep step, and the family's own
    (continuous) knees from the largest config. Only the rows that ran ok (``judged_rows``)."""
    rows = []
    compared = judged_rows(compared)
    means = compared.groupby("config_id", sort=False).mean(numeric_only=True)
    for label, ids in _groups(compared, configs).items():
        ids = [i for i in ids if i in means.index]
        if len(ids) < 2:
            continue
        sub = means.loc[ids].sort_values("workers")
        grid = [int(n) for n in sub["workers"]]
        job = sub["workers"] * sub["steps"]
        measured = {"train": sparse_knee(grid, sub["steps_per_s"].tolist()),
                    "job": sparse_knee(grid, (job / sub["total_s"]).tolist())}
        for model in models:
            if f"train_s_pred_{model}" not in sub:
                continue
            pred_train = job / sub[f"train_s_pred_{model}"]
            pred_job = job / sub[f"total_s_pred_{model}"]
            predicted = {"train": sparse_knee(grid, pred_train.tolist()), "job": sparse_knee(grid, pred_job.tolist())}
            for kind in ("train", "job"):
                rows.append({"group": label, "model": model, "knee_of": kind, "grid": json.dumps(grid),
                             "measured_knee": measured[kind], "predicted_knee": predicted[kind],
                             "within_one_step": _within_one_step(grid, measured[kind], predicted[kind])})
    return pd.DataFrame(rows, columns=["group", "model", "knee_of", "grid", "measured_knee", "predicted_knee",
                                       "within_one_step"])


def _within_one_step(grid: list[int], measured: Optional[int], predicted: Optional[int]) -> bool:
    # "No knee on the grid" is a position too: one past the last point.
    pos = lambda k: len(grid) if k is None else grid.index(k)
    return abs(pos(measured) - pos(predicted)) <= 1


def curve_predictions(configs: Sequence[RunConfig], profile: HardwareProfile, models: Iterable[str] = MODELS,
                      max_points: int = 64) -> pd.DataFrame:
    """Predictions at every worker count from 1 to the group's largest (for smooth curves in
    plots), one row per group, family and worker count."""
    rows = []
    seen: dict[str, RunConfig] = {}
    for c in configs:
        label = group_label(c.sweep_values)
        if label not in seen or c.workers > seen[label].workers:
            seen[label] = c
    for label, c in seen.items():
        counts = np.unique(np.linspace(1, c.workers, min(c.workers, max_points)).round().astype(int))
        variants = [c.model_copy(update={"workers": int(n)}) for n in counts]
        frame = predict_configs(variants, profile, list(models))
        frame["group"] = label
        rows.append(frame)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
