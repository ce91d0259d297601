"""testbed validate end to end on real local Ray: calibrate, run, predict, compare, report."""

import os

import pandas as pd
import pytest

from testbed.analysis.compare import COMPARED_PHASES, MODELS
from testbed.calibration.calibrate import calibrate
from testbed.cli.validate import validate
from testbed.config.spec import parse_spec
from testbed.records.rundir import RunFolder
from testbed.report.comparison import PLOTS
from testbed.report.sections import write_report

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """Profiles cached in a folder of the test's own, not the user's."""
    path = tmp_path_factory.mktemp("cache")
    old = os.environ.get("TESTBED_CACHE_DIR")
    os.environ["TESTBED_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        del os.environ["TESTBED_CACHE_DIR"]
    else:
        os.environ["TESTBED_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def validated(ray_local, cache_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("validate")
    spec = parse_spec({"name": "tiny", "seed": 3, "gradient_bytes": "256KiB", "apply_seconds": "2ms",
                       "workload": {"steps": 6, "dataset_bytes": "8MiB"}, "compute": {"seconds": "10ms"},
                       "data": {"dir": str(base / "data"), "file_bytes": "4MiB", "init_io": "sequential",
                                "partition": "full"},
                       "sweep": {"workers": [1, 2, 3]}})
    return validate(spec, out=base / "run", quick_calibration=True, monitor_interval_s=0.1)


def test_every_file_of_the_run_folder_is_written(validated):
    path = validated.path
    for name in ("manifest.json", "summary.csv", "predictions.csv", "errors.csv", "knees.csv", "report.md",
                 "trace.json", "profile.json", "resources.parquet", "utilisation.png"):
        assert (path / name).is_file(), name
    assert len(list((path / "events.parquet").glob("*.parquet"))) == 3
    for plot in PLOTS:
        assert (path / "plots" / f"{plot}.png").stat().st_size > 1000, plot
    assert RunFolder.open(path).manifest["status"] == "complete"
    # complete comes last: after the profile, the errors and the report (which says complete)
    settled = (path / "manifest.json").stat().st_mtime_ns
    assert all((path / name).stat().st_mtime_ns <= settled for name in ("profile.json", "errors.csv", "report.md"))
    assert "Status: complete;" in (path / "report.md").read_text()


def test_summary_has_every_prediction_and_error_column(validated):
    summary = pd.read_csv(validated.path / "summary.csv")
    for model in MODELS:
        for phase in COMPARED_PHASES:
            assert f"{phase}_s_pred_{model}" in summary.columns
            assert f"{phase}_err_{model}" in summary.columns
        for phase in ("init", "train", "total"):
            pred, err = summary[f"{phase}_s_pred_{model}"], summary[f"{phase}_err_{model}"]
            assert (pred > 0).all(), (model, phase)
            measured = summary[f"{phase}_s"]
            assert err.to_numpy() == pytest.approx(((pred - measured) / measured).to_numpy())
    # no step reads were configured: that phase has no measurement, so no error either
    assert summary["read_err_queueing"].isna().all()
    # the initial model reads alone at full speed; sequential full reads take N times that
    init = summary.set_index("workers")
    assert init.loc[3, "init_s_pred_updated"] > 2.5 * init.loc[1, "init_s_pred_initial"]


def test_report_states_the_comparison(validated):
    text = (validated.path / "report.md").read_text()
    for section in ("## Hardware profile", "## Measured vs predicted", "## Error per family and phase",
                    "## Knees", "## Initialization time against workers", "## Binding resource per config",
                    "## Staleness"):
        assert section in text, section
    errors = pd.read_csv(validated.path / "errors.csv")
    assert set(errors["model"]) == set(MODELS)
    assert {"init", "train", "total"} <= set(errors["phase"])


def test_report_regenerates_the_same_tables_from_the_folder_alone(validated):
    before = {name: pd.read_csv(validated.path / name) for name in ("summary.csv", "errors.csv", "knees.csv",
                                                                  "predictions.csv")}
    for name in before:
        (validated.path / name).unlink()
    write_report(validated.path)
    for name, frame in before.items():
        pd.testing.assert_frame_equal(pd.read_csv(validated.path / name), frame, check_exact=False, rtol=1e-9)


def test_calibration_is_cached_per_machine(ray_local, cache_dir):
    first, path, reused = calibrate(with_disk=False, quick=True)
    assert path.parent == cache_dir / "profiles"
    again, path2, reused2 = calibrate(with_disk=False, quick=True)
    assert reused2 and path2 == path and again == first
    fresh, _, reused3 = calibrate(with_disk=False, quick=True, recalibrate=True)
    assert not reused3 and fresh.created >= first.created
