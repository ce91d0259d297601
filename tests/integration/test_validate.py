"""testbed validate end to end on real local Ray: calibrate, run, predict, compare, report."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.compare import COMPARED_PHASES, MODELS
from testbed.calibration.calibrate import calibrate
from testbed.cli.validate import validate
from testbed.config.spec import parse_spec
from testbed.model.profile import load_profile
from testbed.records.rundir import RunFolder
from testbed.report.comparison import PLOTS
from testbed.report.writer import write_report

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def validated(ray_local, cache_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("validate")
    spec = parse_spec({"name": "tiny", "seed": 3, "gradient_bytes": "256KiB", "apply_seconds": "2ms",
                       "workload": {"steps": 6, "dataset_bytes": "8MiB"}, "compute": {"seconds": "10ms"},
                       "data": {"dir": str(base / "data"), "file_bytes": "4MiB", "init_io": "sequential",
                                "partition": "full", "step_reads": "random"},
                       "sweep": {"workers": [1, 2, 3]}})
    return validate(spec, out=base / "run", quick_calibration=True, monitor_interval_s=0.1)


def test_every_file_of_the_run_folder_is_written_with_its_content(validated):
    path = validated.path
    assert RunFolder.open(path).manifest["status"] == "complete"
    assert len(list((path / "events.parquet").glob("*.parquet"))) == 3
    configs = set(pd.read_csv(path / "summary.csv")["config_id"])
    assert len(configs) == 3
    # every family predicted every config, with finite positive times
    predictions = pd.read_csv(path / "predictions.csv")
    for model in MODELS:
        mine = predictions[predictions["model"] == model]
        assert set(mine["config_id"]) == configs, model
        assert np.isfinite(mine[["init_s", "train_s", "total_s"]].to_numpy()).all() and (mine["total_s"] > 0).all()
    # every family has finite error statistics for the driver-measured phases
    errors = pd.read_csv(path / "errors.csv")
    for model in MODELS:
        mine = errors[errors["model"] == model].set_index("phase")
        assert {"init", "train", "job"} <= set(mine.index), model
        assert (mine["n"] == 3).all()  # one row per config (one repeat each)
        assert np.isfinite(mine[["median_abs_err", "max_abs_err"]].to_numpy()).all()
        assert (mine["median_abs_err"] <= mine["max_abs_err"]).all()
    knees = pd.read_csv(path / "knees.csv")
    assert set(knees["model"]) == set(MODELS) and set(knees["knee_of"]) == {"train", "job"}
    # the trace holds the events, the profile is the one the run was predicted with
    trace = json.loads((path / "trace.json").read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == len(RunFolder.open(path).events())
    assert load_profile(path / "profile.json").disk is not None  # measured on the data set the run read
    assert len(pd.read_parquet(path / "resources.parquet")) > 0
    for png in [path / "utilisation.png", *(path / "plots" / f"{plot}.png" for plot in PLOTS)]:
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 1000, png
    # the report names every section and links every plot it wrote
    text = (path / "report.md").read_text()
    for section in ("## Summary", "## Hardware profile", "## Measured vs predicted", "## Error per family and phase",
                    "## Knees", "## Binding resource per config", "## Nodes", "## Clocks", "## Utilisation"):
        assert section in text, section
    for plot in PLOTS:
        assert f"(plots/{plot}.png)" in text, plot
    # complete comes last: after the profile, the errors and the report (which says complete)
    settled = (path / "manifest.json").stat().st_mtime_ns
    assert all((path / name).stat().st_mtime_ns <= settled for name in ("profile.json", "errors.csv", "report.md"))
    assert "Status: complete;" in (path / "report.md").read_text()



def test_the_per_call_level_is_checked_in_the_runs_session(validated):
    from testbed.calibration.level import CHECK_SIZES, FIGURES
    level = load_profile(validated.path / "profile.json").call_level
    assert level is not None and set(level["ratios"]) == set(FIGURES)
    for figure, rows in level["ratios"].items():
        assert [b for b, _ in rows] == [float(n) for n in CHECK_SIZES], figure
        assert all(1 / 3 <= r <= 3 for _, r in rows), figure
    # the check's own runs: real pushes and pulls at each size, larger gradients slower
    runs = level["runs"]
    assert [r["gradient_bytes"] for r in runs] == list(CHECK_SIZES)
    assert all(r["push_s"] > 0 and r["pull_s"] > 0 for r in runs)
    assert runs[-1]["pull_s"] > runs[0]["pull_s"]
    # one level for every curve: the median of the ratios
    import statistics
    assert level["level"] == statistics.median(r for rows in level["ratios"].values() for _, r in rows)
    # and the level applied at each checked size (by size where the sizes' medians run one way)
    from testbed.calibration.level import size_levels
    assert level["levels"] == size_levels(level["ratios"])
    assert [b for b, _ in level["levels"]] == [float(n) for n in CHECK_SIZES]
    assert "applied to every per-call curve" in (validated.path / "report.md").read_text()
    # and the init of each check run (processes started for it, nothing to read), kept
    assert all(r["init_s"] > 0 for r in runs)
    # a quick calibration's check is one round; its ratios are that round's
    assert level["repeats"] == 1 and level["ratios_by_round"] == [level["ratios"]]


def test_the_per_call_level_is_checked_again_after_the_runs(validated):
    from testbed.calibration.level import CHECK_SIZES, FIGURES, level_drift
    level = load_profile(validated.path / "profile.json").call_level
    after = level["after"]
    # a real round in the same session, after the last config: every figure at every size
    assert after["repeats"] == 1 and set(after["ratios"]) == set(FIGURES)
    assert all([b for b, _ in rows] == [float(n) for n in CHECK_SIZES] for rows in after["ratios"].values())
    assert after["measured"] >= level["measured"]
    assert 1 / 3 <= after["level"] <= 3 and level_drift(level) == pytest.approx(after["level"] / level["level"])
    # the runs were predicted at their span's level, between the two checks
    assert level["span"]["level"] == pytest.approx((after["level"] * level["level"]) ** 0.5)
    assert all(min(a, b) - 1e-9 <= s <= max(a, b) + 1e-9 for (_, a), (_, b), (_, s) in
               zip(level["levels"], after["levels"], level["span"]["levels"]))
    report = (validated.path / "report.md").read_text()
    assert "per-call level after the runs" in report and "per-call level of the runs' span" in report


def test_the_step_reads_level_is_checked_in_the_runs_session(validated):
    from testbed.calibration.readlevel import CHECK_HOT_READS, CHECK_PAUSE_S, CHECK_READS, WAKE_RATIO_BOUNDS, apply_read_level
    saved = load_profile(validated.path / "profile.json")
    level = saved.read_level
    assert level is not None and "failed" not in level, level
    # a quick calibration's check is one round, after the per-call check's one round, in the
    # runs' own data directory, page cache bypassed
    assert level["rounds"] == 1 and level["mode"] == "o_direct"
    assert set(level["orders"]) == {"sequential", "random"}
    lo, hi = WAKE_RATIO_BOUNDS
    for order, v in level["orders"].items():
        assert v["reads"] == [CHECK_HOT_READS, CHECK_READS], order
        # real reads: a direct 4 KiB read takes microseconds at least, and one after a sleep of
        # 20 ms is not counted with the sleep
        assert 1e-6 < v["hot_s"] < 0.1 and 1e-6 < v["paused_s"] < CHECK_PAUSE_S + 0.1, (order, v)
        assert lo <= v["wake_ratio"] <= hi
        # recorded beside the calibration's curves, which predict; applied, the curves would
        # read the check's means at the checked cell (bounded wake ratios aside)
        assert saved.step_reads.read_s(order, 4096, 0.0) == pytest.approx(v["calibrated_hot_s"])
        assert saved.step_reads.read_s(order, 4096, CHECK_PAUSE_S) == pytest.approx(v["calibrated_paused_s"])
        if lo < v["wake_ratio"] < hi and v["paused_s"] > v["hot_s"]:
            leveled = apply_read_level(saved, level).step_reads
            assert leveled.read_s(order, 4096, 0.0) == pytest.approx(v["hot_s"])
            assert leveled.read_s(order, 4096, CHECK_PAUSE_S) == pytest.approx(v["paused_s"])
    assert level["applied"] is False
    assert "step reads' level of the runs' session" in (validated.path / "report.md").read_text()


def test_the_checks_rounds_are_real_runs_and_each_ratio_their_median(validated):
    from testbed.calibration.level import CHECK_SIZES, measure_call_level, median_ratios
    from testbed.runner.cluster import ray_session
    profile = load_profile(validated.path / "profile.json")
    with ray_session(None):
        checked = measure_call_level(dataclasses.replace(profile, call_level=None), repeats=2).call_level
    assert checked["repeats"] == 2 and len(checked["ratios_by_round"]) == 2
    assert [r["gradient_bytes"] for r in checked["runs"]] == list(CHECK_SIZES) * 2
    assert all(r["push_s"] > 0 and r["pull_s"] > 0 for r in checked["runs"])
    assert checked["ratios"] == median_ratios(checked["ratios_by_round"])


def test_summary_has_every_prediction_and_error_column(validated):
    summary = pd.read_csv(validated.path / "summary.csv")
    for model in MODELS:
        for phase in COMPARED_PHASES:
            assert f"{phase}_s_pred_{model}" in summary.columns
            assert f"{phase}_err_{model}" in summary.columns
        for phase in ("init", "train", "job"):
            pred, err = summary[f"{phase}_s_pred_{model}"], summary[f"{phase}_err_{model}"]
            assert (pred > 0).all(), (model, phase)
            measured = summary[f"{phase}_s"]
            assert err.to_numpy() == pytest.approx(((pred - measured) / measured).to_numpy())
    # every step read was measured, so every family's read has an error
    for model in MODELS:
        assert (summary["read_mean_s"] > 0).all() and summary[f"read_err_{model}"].notna().all(), model
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
    assert {"init", "train", "job"} <= set(errors["phase"])


def test_report_regenerates_the_same_tables_from_the_folder_alone(validated):
    before = {name: pd.read_csv(validated.path / name) for name in ("summary.csv", "errors.csv", "knees.csv",
                                                                  "predictions.csv")}
    for name in before:
        (validated.path / name).unlink()
    write_report(validated.path)
    for name, frame in before.items():
        pd.testing.assert_frame_equal(pd.read_csv(validated.path / name), frame, check_exact=False, rtol=1e-9)


def _quick(validated, **options):
    """The quick calibration the validated run made (from the module's cache, measured when
    that run was not made first): each calibration here costs half a minute."""
    data_dir = RunFolder.open(validated.path).manifest["spec"]["data"]["dir"]
    return calibrate(data_dir=data_dir, quick=True, **options)


def _measured_as(profile, monkeypatch):
    """Calibration's measurements replaced by ``profile``'s figures: what the busy-machine test
    below holds is the warning, the load recorded and the cache rewritten, not the figures
    (the module's quick calibration measures those for real, and the tests after this one hold
    them); a second real calibration cost ~50 s of the module's ~140 s on the 2-core CI machine."""
    import dataclasses

    import testbed.calibration.calibrate as calibrate_module
    import testbed.calibration.disk as disk_module
    import testbed.calibration.reads as reads_module
    import testbed.calibration.scheduler as scheduler_module
    kept = ("identity", "cores_per_node", "nodes", "disk", "disk_reference", "load_average", "created",
            "step_reads", "scheduler")
    figures = {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile) if f.name not in kept}
    monkeypatch.setattr(calibrate_module, "measure_ray_figures", lambda progress, quick, cores=1: {**figures, "details": {}})
    monkeypatch.setattr(reads_module, "measure_step_reads", lambda *a, **k: profile.step_reads)
    monkeypatch.setattr(scheduler_module, "measure_scheduler", lambda *a, **k: profile.scheduler)
    disks = iter([profile.disk, profile.disk_reference])
    monkeypatch.setattr(disk_module, "calibrate_disk", lambda *a, **k: next(disks))


def test_calibration_is_cached_per_machine_and_warns_on_a_busy_one(validated, cache_dir, monkeypatch):
    import dataclasses
    first, path, reused = _quick(validated)
    assert path.parent == cache_dir / "profiles"
    again, path2, reused2 = _quick(validated)
    assert reused2 and path2 == path and again == first
    inode = path.stat().st_ino
    # measured again on a machine that says it is busy: a warning, and the load recorded
    import os as os_module
    monkeypatch.setattr(os_module, "getloadavg", lambda: (99.0, 99.0, 99.0))
    _measured_as(first, monkeypatch)
    said = []
    fresh, path3, reused3 = _quick(validated, recalibrate=True, progress=said.append)
    assert any(line.startswith("warning: the machine is busy (load average 99.0") for line in said)
    assert fresh.load_average == (99.0,)
    assert dataclasses.replace(fresh, load_average=first.load_average, created=first.created) == first
    # measured again and the cache rewritten (a new file, replaced atomically), not the old one returned
    assert not reused3 and path3 == path and path.stat().st_ino != inode
    assert load_profile(path) == fresh
    cached, _, reused4 = _quick(validated)
    assert reused4 and cached == fresh


def test_calibration_measures_per_call_curves_across_sizes_and_shards(validated, cache_dir):
    from testbed.calibration.costs import SHARDS, SIZES_BYTES
    from testbed.model.curves import CALL_COST_CURVES
    profile, _, _ = _quick(validated)
    assert [c.shards for c in profile.call_costs] == list(SHARDS)
    for costs in profile.call_costs:
        for name in CALL_COST_CURVES:
            curve = getattr(costs, name)
            assert len(curve.points) == len(SIZES_BYTES), name
            assert curve.hi_bytes / curve.lo_bytes == SIZES_BYTES[-1] / SIZES_BYTES[0], name
        # moving 32 MiB costs more than moving 4 KiB, on both sides of the call
        assert costs.worker_push_s.at(SIZES_BYTES[-1]) > costs.worker_push_s.at(SIZES_BYTES[0])
        assert costs.apply_s.points[-1][1] > costs.apply_s.points[0][1]
    assert profile.reference_curves is not None and len(profile.reference_curves.copy_s.points) == len(SIZES_BYTES)


def test_calibration_measures_the_init_call_to_several_processes_and_the_gate(validated, cache_dir):
    profile, _, _ = _quick(validated)
    fanout = profile.init_fanout_s_by_actors
    assert sorted(fanout) == [2, 4]  # the quick start-up counts
    assert all(0 < s < 1 for s in fanout.values())
    assert profile.init_call_s is not None and profile.init_call_s > 0
    # and the I/O gate's turns (a sequential init) through a real gate actor: every turn costs
    gate = profile.init_gate_s_by_workers
    assert sorted(gate) == [1, 2, 4] and gate[1] > 0 and gate[4] > gate[1]
    # and what hosting 2 and 8 workers a process adds, on the probes the quick batch allows
    # (4 probes, 3 groups: one process a group)
    assert sorted(profile.init_hosted_s_by_workers) == [2, 8] and profile.init_hosted_processes == 1
    assert all(0 <= s < 1 for s in profile.init_hosted_s_by_workers.values())


def test_the_startup_probe_hosts_its_workers_as_a_worker_process_does():
    from actors.probe import StartupProbe

    probe = StartupProbe()
    assert probe.host_workers(1) == 0  # one runs inline
    assert probe.init_hosted() == 1
    assert probe.host_workers(5) == 5  # a started thread each
    assert probe.init_hosted() == 5


def test_calibration_measures_a_bare_calls_cpu_at_the_callee_and_the_caller(validated, cache_dir):
    profile, _, _ = _quick(validated)
    idle, queued = profile.actor_call_cpu_s, profile.actor_call_cpu_busy_s
    assert idle is not None and queued is not None
    # a bare call costs its callee some CPU, and less than its whole round trip after a pause
    assert 0 < idle < profile.actor_call_latency_s * 5 and 0 < queued < 0.1
    # and its caller some (a worker's side of a tick of the ssp clock)
    caller = profile.actor_caller_cpu_s
    assert caller is not None and 0 < caller < profile.actor_call_latency_s * 5


def test_calibration_measures_the_scheduler_under_load(validated, cache_dir):
    from testbed.calibration.scheduler import QUICK_LOADS
    from testbed.model.scheduler import load_curve_at
    profile, _, _ = _quick(validated)
    sched = profile.scheduler
    assert sched is not None and sched.cores == profile.cores_per_node
    for curve in (sched.spin_overshoot_s, sched.wake_s, sched.wake_first_s):
        assert [x for x, _ in curve] == [float(x) for x in QUICK_LOADS]
        values = [v for _, v in curve]
        assert values[0] == 0.0 and values == sorted(values)  # the excess over no load, made non-decreasing
    # 8 spinning processes per core beside it: a 20 ms spin ends measurably late
    assert load_curve_at(sched.spin_overshoot_s, QUICK_LOADS[-1]) > 1e-4
    # a 4 ms sleep on the idle node ends late, by less than a scheduler quantum
    assert 0 < sched.sleep_overshoot_s < 0.004
    # a reply to a caller held waiting: by the hold, from 0 at a call answered at once, never
    # falling, and short of the longest hold itself
    from testbed.calibration.calibrate import REPLY_HOLDS_S
    assert [x for x, _ in sched.reply_wake_s] == list(REPLY_HOLDS_S)
    waits = [v for _, v in sched.reply_wake_s]
    assert waits[0] == 0.0 and waits == sorted(waits) and waits[-1] < REPLY_HOLDS_S[-1]


def test_calibration_measures_a_plain_push_answer_and_the_steps_beyond_two_shards(validated, cache_dir):
    from testbed.calibration.costs import BEYOND_LARGE_BYTES, BEYOND_LARGER_BYTES, BEYOND_SHARDS
    profile, _, _ = _quick(validated)
    # a plain push's answer: the median over the sizes of two real runs' difference, never below 0
    assert profile.push_return_s is not None and 0 <= profile.push_return_s < 0.05
    # the worker's figures at 4 shards at the smallest size and at the large one, from real pairs
    small, large = profile.small_calls_by_shards[BEYOND_SHARDS], profile.large_calls_by_shards[BEYOND_SHARDS]
    assert profile.large_calls_bytes == BEYOND_LARGE_BYTES
    worker = {"worker_push_s", "worker_pull_s", "worker_push_cpu_s", "worker_pull_cpu_s"}
    assert set(large) == worker
    # at the smallest size also the plain pull's step per shard at 4 shards (a third real run there)
    from testbed.model.curves import PLAIN_PULL_STEP
    assert set(small) == worker | {PLAIN_PULL_STEP} and 0 <= small[PLAIN_PULL_STEP] < 0.05
    # 2 MiB in four slices through the object store costs more than 4 KiB in four inline ones
    assert large["worker_push_s"] > small["worker_push_s"] > 0
    # and a third real pair at 16 MiB, measured apart from the 2 MiB one. Not "more than 2 MiB"
    # nor "more than 4 KiB": a quick calibration's pairs are single runs, each figure the curve's
    # plus the pair's difference, never below 0, and the per-call level can move by 2x within a
    # minute on a shared VM (docs/model.md, "The level, felt in proportion to the idle cores"):
    # on 2026-12-07 a 16 MiB push read 18.3 ms where the 2 MiB one read 19.7, and at 20:20 a
    # 16 MiB pair's difference took the whole push to 0.
    larger = profile.larger_calls_by_shards[BEYOND_SHARDS]
    assert profile.larger_calls_bytes == BEYOND_LARGER_BYTES and set(larger) == set(large)
    assert all(0 <= v < 1.0 for v in larger.values()) and larger != large
    assert any(v > 0 for v in larger.values())  # the pair's runs measured something


def test_calibration_measures_an_ssp_pull_at_two_shards_at_every_size(validated, cache_dir):
    from testbed.calibration.costs import SHARDS, SIZES_BYTES
    profile, _, _ = _quick(validated)
    # one real ssp run a size at the largest shard count: the step is read at each slice
    step = profile.plain_pull_step_s
    assert step is not None and [b for b, _ in step.points] == [n / SHARDS[-1] for n in SIZES_BYTES]
    assert all(0 <= v < 0.5 for _, v in step.points)
    # an ssp pull at 4 shards reads three steps more than an async one's part, each at the shape
    # measured at 4 shards (``terms.plain_pull_shape``); at one shard none
    from testbed.config.spec import ConfigFields
    from testbed.model.terms import step_terms

    def pull(servers, sync):
        cfg = ConfigFields.model_validate({"workers": 1, "servers": servers, "sync": sync, "gradient_bytes": 2**21,
                                           "compute": {"seconds": 0.02}, "workload": {"steps": 10}})
        t = step_terms(cfg, profile)
        return t.pull_transfer_s + t.pull_service_s
    assert pull(1, "ssp") == pytest.approx(pull(1, "async"))
    from testbed.model.terms import plain_pull_shape
    assert plain_pull_shape(profile, 4) != 1.0  # measured, so not the linear rule (1 only by chance)
    assert pull(4, "ssp") - pull(4, "async") == pytest.approx(3 * step.at(2**21 / 4) * plain_pull_shape(profile, 4))


def test_calibration_measures_rays_cpu_for_each_shard_beyond_the_first_at_every_size(validated, cache_dir):
    from testbed.calibration.costs import SHARDS, SIZES_BYTES
    from testbed.config.spec import ConfigFields
    from testbed.model.terms import ray_cpu_per_step
    profile, _, _ = _quick(validated)
    # from the sweep's own runs at one and two shards, pulling every step: a figure a size at the
    # slice, CPU seconds per step (the real runs' Ray processes, read from their clocks in 10 ms
    # ticks, so a quick run of 8 steps may read none at a small size: that size has no pair)
    step = profile.ray_cpu_shard_step_s
    assert step is not None and len(step.points) >= 2
    assert {b for b, _ in step.points} <= {n / SHARDS[-1] for n in SIZES_BYTES}
    assert all(0 <= v < 0.1 for _, v in step.points)
    cfg = ConfigFields.model_validate({"workers": 1, "servers": 4, "gradient_bytes": 2**23,
                                       "compute": {"seconds": 0.02}, "workload": {"steps": 10}})
    assert ray_cpu_per_step(cfg, profile) == pytest.approx(profile.ray_cpu_per_step_s.at(2**23)
                                                           + 3 * step.at(2**21))
