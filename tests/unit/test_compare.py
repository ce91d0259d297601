"""testbed.analysis.compare on small hand-built frames: every value checked by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.compare import COMPARED_PHASES, add_predictions, error_table, knee_table, measured_column

MEASURED = {"init": 2.0, "train": 10.0, "job": 12.0, "read": float("nan"), "compute": 0.01, "push": 0.002,
            "pull": 0.0, "queue": 0.001, "apply": 0.004}


def summary(**per_config: dict[str, float]) -> pd.DataFrame:
    """One row per config: the measured columns, each phase at ``MEASURED`` unless changed."""
    rows = []
    for config_id, changes in per_config.items():
        values = {**MEASURED, **changes}
        rows.append({"config_id": config_id, **{measured_column(p): values[p] for p in COMPARED_PHASES}})
    return pd.DataFrame(rows)


def predictions(model: str, bound: str, **per_config: dict[str, float]) -> pd.DataFrame:
    rows = []
    for config_id, values in per_config.items():
        rows.append({"config_id": config_id, "model": model, "bound": bound,
                     **{measured_column(p): values.get(p, 1.0) for p in COMPARED_PHASES}})
    return pd.DataFrame(rows)


def test_add_predictions_gives_each_family_its_prediction_error_and_bound():
    measured = summary(a={}, b={"init": 4.0})
    preds = pd.concat([predictions("queueing", "server", a={"init": 3.0, "train": 8.0, "compute": 0.01},
                                   b={"init": 3.0, "train": 10.0}),
                       predictions("initial", "compute", a={"init": 1.0}, b={"init": 1.0})])
    out = add_predictions(measured, preds)
    assert list(out["config_id"]) == ["a", "b"] and len(out) == 2  # the summary's rows, in its order
    assert list(out["init_s_pred_queueing"]) == [3.0, 3.0]
    assert list(out["init_err_queueing"]) == pytest.approx([0.5, -0.25])   # (3 - 2) / 2, (3 - 4) / 4
    assert list(out["train_err_queueing"]) == pytest.approx([-0.2, 0.0])   # (8 - 10) / 10
    assert out.loc[0, "compute_err_queueing"] == pytest.approx(0.0)
    assert list(out["init_err_initial"]) == pytest.approx([-0.5, -0.75])
    assert list(out["bound_queueing"]) == ["server", "server"] and list(out["bound_initial"]) == ["compute"] * 2
    # not measured (NaN) and measured as zero: no error rather than an infinite or fake one
    assert out["read_err_queueing"].isna().all() and out["pull_err_queueing"].isna().all()
    assert out["read_s_pred_queueing"].notna().all()  # the prediction itself is kept
    assert "init_err_queueing" not in measured  # the input is not changed


def test_error_table_takes_median_and_max_of_absolute_errors_without_the_missing_ones():
    compared = pd.DataFrame({"init_err_queueing": [0.1, -0.3, 0.2, float("nan")],
                             "train_err_queueing": [-0.05, 0.05, 0.05, 0.05],
                             "init_err_updated": [float("nan")] * 4})
    table = error_table(compared, models=("queueing", "updated", "initial"), phases=("init", "train", "read"))
    assert list(table.columns) == ["model", "phase", "n", "median_abs_err", "p90_abs_err", "max_abs_err",
                                   "median_signed_err"]
    # updated has no finite error and initial no column, read no column: no rows for them
    assert [tuple(r) for r in table[["model", "phase", "n"]].itertuples(index=False)] == [
        ("queueing", "init", 3), ("queueing", "train", 4)]
    init, train = table.iloc[0], table.iloc[1]
    assert init["median_abs_err"] == pytest.approx(0.2) and init["max_abs_err"] == pytest.approx(0.3)
    assert init["p90_abs_err"] == pytest.approx(0.28)  # 0.2 + 0.8 x (0.3 - 0.2): numpy's linear interpolation
    assert init["median_signed_err"] == pytest.approx(0.1)
    assert train["median_abs_err"] == pytest.approx(0.05) and train["max_abs_err"] == pytest.approx(0.05)
    assert error_table(pd.DataFrame({"x": [1]})).empty


def _knee_frame() -> tuple[pd.DataFrame, list[dict]]:
    """Workers 1, 2, 4, 8 (two repeats each) plus a group of one config. Measured train rate
    10 x min(N, 2) steps/s (knee at 2), measured job rate 10 x min(N, 4) (knee at 4); the
    queueing family predicts a train rate of 10 x min(N, 4) (knee at 4) and a linear job
    rate (no knee on the grid)."""
    steps, rows, configs = 10, [], []
    for n in (1, 2, 4, 8):
        cid = f"n{n}"
        configs.append({"config_id": cid, "sweep_values": {"workers": n}})
        job = n * steps
        for spread in (-1.0, 1.0):  # the repeats average to the stated rate
            rows.append({"config_id": cid, "workers": n, "steps": steps, "steps_per_s": 10.0 * min(n, 2) + spread,
                         "job_s": job / (10.0 * min(n, 4)), "train_s_pred_queueing": job / (10.0 * min(n, 4)),
                         "job_s_pred_queueing": job / (10.0 * n)})
    configs.append({"config_id": "lone", "sweep_values": {"servers": 2, "workers": 1}})
    rows.append({"config_id": "lone", "workers": 1, "steps": steps, "steps_per_s": 10.0, "job_s": 1.0,
                 "train_s_pred_queueing": 1.0, "job_s_pred_queueing": 1.0})
    return pd.DataFrame(rows), configs


def test_knee_table_compares_measured_and_predicted_knees_on_the_sweep_grid():
    compared, configs = _knee_frame()
    table = knee_table(compared, configs, models=("queueing", "updated"))
    # one group (the lone config has no second worker count), one family with predictions
    assert list(table.columns) == ["group", "model", "knee_of", "grid", "measured_knee", "predicted_knee",
                                   "within_one_step"]
    assert set(table["group"]) == {"all"} and set(table["model"]) == {"queueing"}
    rows = {r.knee_of: r for r in table.itertuples(index=False)}
    assert json.loads(rows["train"].grid) == [1, 2, 4, 8]
    assert (rows["train"].measured_knee, rows["train"].predicted_knee) == (2, 4)
    assert rows["train"].within_one_step  # positions 1 and 2 of the grid
    assert rows["job"].measured_knee == 4
    assert rows["job"].predicted_knee is None or math.isnan(rows["job"].predicted_knee)  # linear: no knee
    assert not rows["job"].within_one_step  # "no knee" sits one past the grid's end: two steps away


def test_knee_table_without_predictions_or_groups_is_empty():
    compared, configs = _knee_frame()
    assert knee_table(compared.drop(columns=["train_s_pred_queueing", "job_s_pred_queueing"]), configs).empty
    assert knee_table(compared[compared["config_id"] == "lone"], configs).empty
    assert np.array_equal(knee_table(compared, configs).columns, knee_table(compared.iloc[:0], configs).columns)
