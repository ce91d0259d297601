"""Measured against predicted: the comparison columns, the error statistics and the knees.

Pure pandas/numpy over a run's summary and the model's predictions (no Ray, no files).

Terms:
- *compared phase*: ``init``, ``train`` (the driver's spans), ``job`` (init + train: the
  emulated job) and the per-step phases ``read``, ``compute``, ``push``, ``pull``,
  ``queue``, ``apply`` (event means). Actor start-up (``setup``) is the testbed's own
  overhead: shown beside the job, never counted as a model error.
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
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import pandas as pd

from testbed.config.spec import RunConfig
from testbed.model import ModelFamily
from testbed.model.profile import HardwareProfile
from testbed.model.sweep import predict_configs

__all__ = ["COMPARED_PHASES", "SPAN_PHASES", "measured_column", "predict_run", "add_predictions", "error_table",
           "group_label", "sparse_knee", "knee_table", "curve_predictions", "MODELS", "ERROR_COLUMNS",
           "noise_spread", "noise_error", "distribution_table", "missed_term", "worst_configs", "judged_rows", "left_out"]

COMPARED_PHASES = ("init", "train", "job", "read", "compute", "push", "pull", "queue", "apply")
SPAN_PHASES = ("init", "train", "job")
MODELS = tuple(m.value for m in ModelFamily)


def measured_column(phase: str) -> str:
    return f"{phase}_s" if phase in SPAN_PHASES + ("setup", "total") else f"{phase}_mean_s"


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


ERROR_COLUMNS = ["model", "phase", "n", "median_abs_err", "p90_abs_err", "max_abs_err", "median_signed_err"]


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
    """The distribution of the absolute relative error per family and phase (over configs and
    repeats): its median, 90th percentile (linear interpolation, numpy's default) and maximum,
    with the count, and the median signed error (the bias: positive, the model predicts too long),
    over the configs and repeats that ran ok (``judged_rows``)."""
    compared = judged_rows(compared)
    rows = []
    for model in models:
        for phase in phases:
            col = f"{phase}_err_{model}"
            if col not in compared:
                continue
            signed = compared[col].dropna()
            err = signed.abs()
            if not len(err):
                continue
            rows.append({"model": model, "phase": phase, "n": len(err), "median_abs_err": float(err.median()),
                         "p90_abs_err": float(np.percentile(err, 90)), "max_abs_err": float(err.max()),
                         "median_signed_err": float(signed.median())})
    return pd.DataFrame(rows, columns=ERROR_COLUMNS)


def noise_spread(compared: pd.DataFrame, config_ids: Iterable[str],
                 phases: Iterable[str] = COMPARED_PHASES) -> dict[str, float]:
    """The noise floor: per phase, the median over ``config_ids`` of the spread of that config's
    repeats, (max - min) / mean of the measured time (configs with fewer than 2 repeats skipped)."""
    out = {}
    for phase in phases:
        spreads = [float((x.max() - x.min()) / x.mean()) for x in _repeats(compared, config_ids, phase) if x.mean() > 0]
        out[phase] = float(np.median(spreads)) if spreads else float("nan")
    return out


def _repeats(compared: pd.DataFrame, config_ids: Iterable[str], phase: str) -> Iterator[np.ndarray]:
    """Per config of ``config_ids`` with two or more measured repeats: the phase's measured times."""
    col = measured_column(phase)
    for _, sub in compared[compared["config_id"].isin(set(config_ids))].groupby("config_id"):
        x = sub[col].astype(float).dropna().to_numpy()
        if len(x) >= 2:
            yield x


def noise_error(compared: pd.DataFrame, config_ids: Iterable[str],
                phases: Iterable[str] = COMPARED_PHASES) -> dict[str, float]:
    """The noise floor in the errors' own unit: per phase, the median over ``config_ids`` and
    their repeats of |x_r - m_r| / m_r, m_r the mean of the config's other repeats: the absolute
    relative error of a model that knew each config's mean from its other runs exactly.

    Why beside the spread: (max - min) / mean over five repeats is a range, about 2.3 standard
    deviations, while a median |error| of a perfect model is about 0.7 of one; the spread is the
    run-to-run range to expect, this is the error no model can beat. On draw 2026120308, pull:
    spread 32 %, this 11 %; init 45 % and 10 %."""
    out = {}
    for phase in phases:
        errors = []
        for x in _repeats(compared, config_ids, phase):
            for r in range(len(x)):
                rest = float(np.delete(x, r).mean())
                if rest > 0:
                    errors.append(abs(float(x[r]) - rest) / rest)
        out[phase] = float(np.median(errors)) if errors else float("nan")
    return out


def distribution_table(compared: pd.DataFrame, models: Iterable[str] = MODELS,
                       phases: Iterable[str] = COMPARED_PHASES, noise: dict[str, float] | None = None,
                       noise_err: dict[str, float] | None = None) -> pd.DataFrame:
    """``error_table`` over each config's first repeat (configs repeated for the noise floor
    count once), with the noise floor beside it, as a spread and as an error (NaN without one)."""
    first = compared[compared["repeat"] == compared.groupby("config_id")["repeat"].transform("min")]
    table = error_table(first, models, phases)
    table["noise_spread"] = table["phase"].map(noise or {}).astype(float)
    table["noise_abs_err"] = table["phase"].map(noise_err or {}).astype(float)
    return table


# The terms of a job's error: init once; per step, each worker phase (a pull every k steps;
# the barrier under sync, which no family predicts as its own phase, so all of it is missed).
_STEP_TERMS = ("read", "compute", "push", "pull", "barrier")


def missed_term(row: pd.Series, model: str) -> tuple[str, float]:
    """The term whose predicted-minus-measured time contributes most to the job's error, and
    that contribution in seconds: init, or steps x the per-step difference of a phase."""
    contributions = {"init": row.get(f"init_s_pred_{model}", np.nan) - row["init_s"]}
    steps = float(row["steps"])
    for phase in _STEP_TERMS:
        measured = row.get(f"{phase}_mean_s", np.nan)
        measured = 0.0 if measured != measured else float(measured)
        if phase == "barrier":
            if row.get("sync") != "sync":
                continue
            predicted = 0.0
        else:
            predicted = row.get(f"{phase}_s_pred_{model}", np.nan)
            predicted = 0.0 if predicted != predicted else float(predicted)
        per_step = 1.0 / float(row["pull_every"]) if phase == "pull" else 1.0
        contributions[phase] = steps * per_step * (predicted - measured)
    contributions = {k: v for k, v in contributions.items() if v == v}
    if not contributions:
        return "-", float("nan")
    term = max(contributions, key=lambda k: abs(contributions[k]))
    return term, float(contributions[term])


def worst_configs(compared: pd.DataFrame, model: str, n: int = 5, key_columns: Sequence[str] = ()) -> pd.DataFrame:
    """The n configs (first repeat) with the largest absolute job error for ``model``: their key
    fields, measured and predicted job time, the error, the binding resource and the missed term."""
    col = f"job_err_{model}"
    first = compared[compared["repeat"] == compared.groupby("config_id")["repeat"].transform("min")]
    if col not in first:
        return pd.DataFrame()
    top = first.assign(_abs=first[col].abs()).dropna(subset=["_abs"]).nlargest(n, "_abs")
    rows = []
    for _, row in top.iterrows():
        term, seconds = missed_term(row, model)
        rows.append({"config_id": row["config_id"], **{k: row[k] for k in key_columns if k in row},
                     "job_s": row["job_s"], "job_s_pred": row[f"job_s_pred_{model}"], "job_err": row[col],
                     "bound": row.get(f"bound_{model}"), "missed_term": term, "missed_s": seconds})
    return pd.DataFrame(rows)


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
                    "job": sparse_knee(grid, (job / sub["job_s"]).tolist())}
        for model in models:
            if f"train_s_pred_{model}" not in sub:
                continue
            pred_train = job / sub[f"train_s_pred_{model}"]
            pred_job = job / sub[f"job_s_pred_{model}"]
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
