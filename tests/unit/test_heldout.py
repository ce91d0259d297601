"""The error distribution (median, p90, max), the noise floor, the term that missed, and the
job as init + train (setup apart)."""

import datetime

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.compare import (
    COMPARED_PHASES,
    distribution_table,
    error_table,
    measured_column,
    missed_term,
    noise_error,
    noise_spread,
    worst_configs,
)
from testbed.cli.validate import date_seed


def _compared(errors: list[float], model: str = "queueing") -> pd.DataFrame:
    n = len(errors)
    return pd.DataFrame({"config_id": [f"c{i:03d}" for i in range(n)], "repeat": [0] * n,
                         f"job_err_{model}": errors})


def test_p90_is_the_90th_percentile_of_the_absolute_error():
    errors = [0.01 * i * (-1) ** i for i in range(1, 11)]  # |e| = 1% .. 10%, alternating signs
    table = error_table(_compared(errors), models=["queueing"], phases=["job"])
    row = table.iloc[0]
    assert row["n"] == 10
    assert row["median_abs_err"] == pytest.approx(0.055)
    assert row["p90_abs_err"] == pytest.approx(np.percentile(np.arange(1, 11) / 100, 90))  # 9.1%
    assert row["p90_abs_err"] == pytest.approx(0.091)
    assert row["max_abs_err"] == pytest.approx(0.10)
    assert row["median_signed_err"] == pytest.approx(np.median(errors))


def test_p90_lies_between_median_and_max_and_skips_missing_phases():
    rng = np.random.default_rng(0)
    errors = list(rng.normal(0, 0.2, 50))
    frame = _compared(errors)
    frame["read_err_queueing"] = np.nan  # not measured: no row rather than a fake 0
    table = error_table(frame, models=["queueing"], phases=["job", "read"])
    assert list(table["phase"]) == ["job"]
    row = table.iloc[0]
    assert row["median_abs_err"] < row["p90_abs_err"] < row["max_abs_err"]


def test_the_distribution_counts_each_config_once_and_puts_the_noise_beside_it():
    frame = pd.DataFrame({"config_id": ["a"] * 5 + ["b", "c"], "repeat": [0, 1, 2, 3, 4, 0, 0],
                          "job_s": [1.0, 1.1, 0.9, 1.0, 1.2, 2.0, 3.0],
                          "job_err_queueing": [0.1, 0.5, 0.5, 0.5, 0.5, 0.2, 0.3]})
    noise = noise_spread(frame, ["a"], phases=["job"])
    assert noise["job"] == pytest.approx((1.2 - 0.9) / np.mean([1.0, 1.1, 0.9, 1.0, 1.2]))
    table = distribution_table(frame, models=["queueing"], phases=["job"], noise=noise)
    row = table.iloc[0]
    assert row["n"] == 3 and row["max_abs_err"] == pytest.approx(0.3)  # repeats 1-4 of a not counted
    assert row["noise_spread"] == pytest.approx(noise["job"])


def test_the_noise_floor_as_an_error_is_each_repeat_against_the_mean_of_the_others():
    frame = pd.DataFrame({"config_id": ["a"] * 4 + ["b"] * 2 + ["c"], "repeat": [0, 1, 2, 3, 0, 1, 0],
                          "job_s": [1.0, 1.0, 1.0, 1.3, 2.0, 2.0, 9.0],
                          "job_err_queueing": [0.1] * 7})
    floor = noise_error(frame, ["a", "b", "c"], phases=["job"])
    # a: three repeats at 1.0 against the others' mean 1.1 (|-0.1| / 1.1 each), the fourth 0.3 off;
    # b: two equal repeats (0 each); c: one repeat, nothing to hold it against
    errors = [0.1 / 1.1] * 3 + [0.3] + [0.0, 0.0]
    assert floor["job"] == pytest.approx(float(np.median(errors)))
    # well under the range the spread reports for the same runs
    assert floor["job"] < noise_spread(frame, ["a"], phases=["job"])["job"]
    assert np.isnan(noise_error(frame, ["c"], phases=["job"])["job"])
    table = distribution_table(frame, models=["queueing"], phases=["job"], noise_err=floor)
    assert table.iloc[0]["noise_abs_err"] == pytest.approx(floor["job"])


def test_setup_is_not_a_compared_phase_and_job_is():
    assert "job" in COMPARED_PHASES and "setup" not in COMPARED_PHASES and "total" not in COMPARED_PHASES
    assert measured_column("job") == "job_s" and measured_column("push") == "push_mean_s"


def _row(**over):
    row = {"config_id": "c000", "repeat": 0, "steps": 10, "pull_every": 2, "sync": "async", "init_s": 1.0,
           "init_s_pred_queueing": 1.05, "read_mean_s": np.nan, "read_s_pred_queueing": 0.0,
           "compute_mean_s": 0.02, "compute_s_pred_queueing": 0.02, "push_mean_s": 0.010,
           "push_s_pred_queueing": 0.012, "pull_mean_s": 0.010, "pull_s_pred_queueing": 0.050,
           "barrier_mean_s": np.nan, "job_s": 2.0, "job_s_pred_queueing": 2.3, "job_err_queueing": 0.15,
           "bound_queueing": "server", "workers": 4}
    row.update(over)
    return pd.Series(row)


def test_the_missed_term_is_the_largest_contribution_to_the_jobs_error():
    # pull: 10 steps x (50 - 10 ms) / 2 (a pull every other step) = +0.2 s; push +0.02 s; init +0.05 s
    term, seconds = missed_term(_row(), "queueing")
    assert term == "pull" and seconds == pytest.approx(0.2)
    term, seconds = missed_term(_row(init_s_pred_queueing=0.5), "queueing")
    assert term == "init" and seconds == pytest.approx(-0.5)
    # under sync the barrier is measured but no family predicts it as its own phase
    term, seconds = missed_term(_row(sync="sync", pull_every=1, pull_s_pred_queueing=0.01, barrier_mean_s=0.1),
                                "queueing")
    assert term == "barrier" and seconds == pytest.approx(-1.0)


def test_worst_configs_are_ranked_by_absolute_job_error():
    rows = [_row(config_id=f"c{i:03d}", job_err_queueing=e) for i, e in enumerate([0.1, -0.6, 0.3, 0.05])]
    rows.append(_row(config_id="c000", repeat=1, job_err_queueing=0.9))  # a noise repeat: not ranked
    top = worst_configs(pd.DataFrame(rows), "queueing", n=2, key_columns=("workers",))
    assert list(top["config_id"]) == ["c001", "c002"]
    assert list(top.columns[:2]) == ["config_id", "workers"]
    assert list(top["missed_term"]) == ["pull", "pull"] and list(top["bound"]) == ["server", "server"]


def test_the_default_seed_is_the_utc_date():
    assert date_seed(datetime.date(2026, 12, 1)) == 20261201
    today = datetime.datetime.now(datetime.timezone.utc).date()
    assert date_seed() in {date_seed(today), date_seed(today + datetime.timedelta(days=1))}


def test_prediction_job_is_init_plus_train():
    from testbed.config.spec import expand, parse_spec
    from testbed.model.prediction import predict
    from testbed.model.profile import DiskProfile, HardwareProfile

    profile = HardwareProfile(identity={}, cores_per_node=2, server_apply_bytes_per_s=1e6, server_call_overhead_s=1e-3,
                              actor_call_latency_s=1e-3, transfer_bytes_per_s_local=1e6,
                              disk=DiskProfile(seq_read_bytes_per_s={1: 1e6, 2: 1.5e6}, block_bytes=4096))
    cfg = expand(parse_spec({"name": "t", "workers": 2, "gradient_bytes": 1000,
                             "workload": {"steps": 5, "dataset_bytes": 100000}}))[0]
    for family in ("initial", "updated", "queueing"):
        p = predict(cfg, profile, family)
        assert p.init_s > 0 and p.job_s == pytest.approx(p.init_s + p.train_s)
        assert p.total_s == pytest.approx(p.setup_s + p.job_s)
        assert p.to_row()["job_s"] == pytest.approx(p.job_s)
