"""testbed.analysis.notebook on run folders built by hand (events with chosen durations): no Ray."""

from __future__ import annotations

import functools
import json

import pytest

from testbed import analysis
from testbed.analysis.findings import ServerSaturation, _knee_shift
from testbed.config.errors import UserError
from testbed.config.spec import expand, parse_spec
from testbed.model.profile import save_profile
from testbed.records.atomic import atomic_write_text
from testbed.records.events import EVENT_SCHEMA, RESOURCE_SCHEMA
from testbed.records.rundir import RunFolder
from testbed.report import plots
from tests import factories

STEPS = 10
S = 10**9  # ns


# Figures of the order a laptop measures, so the predictions look like a run's.
profile = functools.partial(factories.profile, server_apply_bytes_per_s=4e9, server_call_overhead_s=1e-4,
                            actor_call_latency_s=4e-4, transfer_bytes_per_s_local=1.5e9,
                            disk=factories.disk({1: 4e8, 2: 5e8}, block_bytes=2**20))


def build_run(path, name="exp", *, workers=(1, 2, 4), init_s=lambda n: 0.5 * n, rate=lambda n: 10.0 * min(n, 2),
              started="2025-01-01T00:00:00+00:00", status="complete", with_profile=True, with_monitor=False,
              extra_sweep=None):
    """A run folder whose init takes ``init_s(N)`` and whose train phase runs at ``rate(N)`` steps/s."""
    sweep = {**(extra_sweep or {}), "workers": list(workers)}
    spec = parse_spec({"name": name, "workload": {"steps": STEPS}, "gradient_bytes": "64KiB", "sweep": sweep})
    configs = expand(spec)
    folder = RunFolder.create(path, run_id=name, experiment=name, spec=spec.model_dump(mode="json"),
                              configs=[c.model_dump(mode="json") for c in configs], repeats=1)
    names = [n for n, _, _ in EVENT_SCHEMA]
    t0 = 10**18
    for cfg in configs:
        n = cfg.workers
        train_ns = int(n * STEPS / rate(n) * S)
        spans = [("setup", S), ("init", int(init_s(n) * S)), ("train", train_ns)]
        rows, t = [], t0
        for phase, duration in spans:
            rows.append((name, cfg.config_id, 0, "driver", "driver", "node", phase, -1, t, duration, 0, -1))
            t += duration
        for w in range(n):
            for step in range(STEPS):
                for phase, ms in (("compute", 3), ("push", 2 * n)):
                    rows.append((name, cfg.config_id, 0, f"worker-{w}", "worker", "node", phase, step, t, ms * 10**6,
                                 0, -1))
                rows.append((name, cfg.config_id, 0, "server-0", "server", "node", "apply", step, t, 10**5, 0, w))
        folder.write_config_events(cfg.config_id, 0, {c: [r[i] for r in rows] for i, c in enumerate(names)})
        if with_monitor:
            values = ("node", cfg.config_id, 0, t0, 50.0, 10, 1.0, 1e6, 2e6, 3e5, 3e5, 0.5)
            folder.append_resources({c: [v] for (c, _), v in zip(RESOURCE_SCHEMA, values)})
    folder.update(started=started)
    folder.set_status(status)
    folder.release()
    if with_profile:
        save_profile(profile(), folder.path / "profile.json", atomic_write_text)
    return folder.path


def test_find_runs_filters_and_orders_by_start(tmp_path, monkeypatch):
    results = tmp_path / "results"
    old = build_run(results / "b-old", "a", started="2025-01-01T00:00:00+00:00", with_profile=False)
    new = build_run(results / "a-new", "a", started="2025-02-01T00:00:00+00:00", with_profile=False)
    other = build_run(results / "c-other", "b", started="2025-03-01T00:00:00+00:00", with_profile=False)
    build_run(results / "d-failed", "a", started="2025-04-01T00:00:00+00:00", status="failed", with_profile=False)
    (results / "not-a-run").mkdir()
    assert analysis.find_runs("a", results) == [old, new]
    assert len(analysis.find_runs("a", results, statuses=None)) == 3
    assert analysis.newest_run(results) == other
    assert analysis.newest_run(results, "a") == new
    with pytest.raises(UserError, match="experiments/zzz.yaml"):
        analysis.newest_run(results, "zzz")
    with pytest.raises(UserError, match="no complete run folder"):
        analysis.newest_run(tmp_path / "nowhere")
    # a path beats the environment, which beats the newest
    monkeypatch.setenv(analysis.RUN_ENV, str(old))
    assert analysis.resolve_run(None, results_dir=results) == old
    assert analysis.resolve_run(other, results_dir=results) == other
    monkeypatch.delenv(analysis.RUN_ENV)
    assert analysis.resolve_run(None, results_dir=results) == other
    with pytest.raises(UserError, match="not a run folder"):
        analysis.resolve_run(tmp_path / "results" / "not-a-run")


def test_resolve_paper_runs_reads_each_experiments_variable(tmp_path, monkeypatch):
    results = tmp_path / "results"
    made = {name: build_run(results / name, name, with_profile=False) for name in analysis.PAPER_EXPERIMENTS}
    elsewhere = build_run(tmp_path / "elsewhere", "paper_cntk", with_profile=False)
    for var in analysis.PAPER_EXPERIMENTS.values():
        monkeypatch.delenv(var, raising=False)
    assert analysis.resolve_paper_runs(results_dir=results) == made
    monkeypatch.setenv("DDNN_PAPER_CNTK_RUN", str(elsewhere))
    assert analysis.resolve_paper_runs(results_dir=results)["paper_cntk"] == elsewhere


def test_load_run_without_profile_is_the_measurements_alone(tmp_path):
    run = analysis.load_run(build_run(tmp_path / "run", with_profile=False))
    assert run.comparison is None and run.curves is None
    assert run.compared is run.summary
    assert list(run.summary["group"]) == ["all"] * 3 and list(run.summary["workers"]) == [1, 2, 4]
    assert run.has_staleness and not run.has_resources and plots.utilisation_png(run) is None
    assert list(run.summary["steps_per_s"]) == pytest.approx([10.0, 20.0, 20.0])


def test_load_run_with_profile_compares_every_family(tmp_path):
    run = analysis.load_run(build_run(tmp_path / "run", with_monitor=True))
    assert run.comparison is not None
    assert {"init_s_pred_queueing", "init_err_updated"} <= set(run.compared.columns)
    assert set(run.curves["model"]) == {"initial", "updated", "queueing", "simulated"}
    assert run.summary.columns[0] == "group" and "init_s_pred_queueing" not in run.summary
    assert plots.utilisation_png(run)[:4] == b"\x89PNG"
    assert not (run.path / "utilisation.png").exists()  # drawn elsewhere: notebooks only read


def test_tables_and_pictures(tmp_path):
    run = analysis.load_run(build_run(tmp_path / "run", with_profile=False))
    table = analysis.manifest_table(run.manifest).set_index("field")["value"]
    assert table["experiment"] == "exp" and table["configs x repeats"] == "3 x 1" and table["finished"] == 3
    shown = analysis.summary_table(run)
    assert "init_s" in shown and "read_mean_s" not in shown  # a phase never measured is left out
    import matplotlib
    from matplotlib.figure import Figure
    backend = matplotlib.get_backend()
    assert plots.figure_png(Figure())[:4] == b"\x89PNG"
    assert matplotlib.get_backend() == backend  # the plots never switch a notebook's backend
    assert plots.show(b"\x89PNG-ish").data == b"\x89PNG-ish"


def test_combine_runs_relabels_groups(tmp_path):
    one = analysis.load_run(build_run(tmp_path / "one", "one"))
    two = analysis.load_run(build_run(tmp_path / "two", "two", workers=(1, 2), extra_sweep={"servers": [1, 2]}))
    compared, curves = analysis.combine_runs({"A": one, "B": two})
    assert list(compared["group"].unique()) == ["A", "B: servers=1", "B: servers=2"]
    assert set(curves["group"]) == {"A", "B: servers=1", "B: servers=2"}


def test_init_scaling_quotes_slope_fit_and_knee(tmp_path):
    run = analysis.load_run(build_run(tmp_path / "run", init_s=lambda n: 0.5 * n + 1.0))
    (f,) = analysis.init_scaling(run)
    assert f.workers == (1, 2, 4) and f.init_s == pytest.approx((1.5, 2.0, 3.0))
    assert f.slope_s_per_worker == pytest.approx(0.5) and f.r2 == pytest.approx(1.0)
    assert f.trend == "grows" and set(f.predicted_slope_s_per_worker) == {"initial", "updated", "queueing", "simulated"}
    # total = 1 s setup + init + 4 workers x 10 steps / 20 steps/s
    assert f.init_share_at_max == pytest.approx(3.0 / (1.0 + 3.0 + 2.0))
    text = f.describe()
    assert "init time grows with the worker count: slope +0.5 s per worker, R^2 = 1.00" in text
    flat = analysis.init_scaling(analysis.load_run(build_run(tmp_path / "flat", init_s=lambda n: 2.0 - 0.01 * n)))
    falls = analysis.init_scaling(analysis.load_run(build_run(tmp_path / "falls", init_s=lambda n: 2.0 / n)))
    assert flat[0].trend == "is flat" and falls[0].trend == "falls"


def test_server_saturation_finds_the_knee_and_the_models(tmp_path):
    run = analysis.load_run(build_run(tmp_path / "run"))  # 10, 20, 20 steps/s: the gain stops after 2
    (s,) = analysis.server_saturation(run)
    assert s.workers == (1, 2, 4) and s.steps_per_s == pytest.approx((10, 20, 20))
    assert s.train_knee == 2 and s.speedup == pytest.approx(2.0)
    assert s.step_ms == pytest.approx((100, 100, 200))
    assert s.push_ms == pytest.approx((2, 4, 8)) and s.queue_ms == (0, 0, 0)
    assert s.model == "queueing" and s.model_knee is not None and 0 < s.server_utilization <= 1
    assert "Measured train knee: 2 workers; the queueing model's" in s.describe()
    bare = analysis.server_saturation(analysis.load_run(build_run(tmp_path / "bare", with_profile=False)))[0]
    assert bare.predicted_train_knee is None and bare.model_knee is None and bare.train_knee == 2


def _sat(servers, knee, model_knee=None):
    return ServerSaturation(experiment="x", group=f"servers={servers}", servers=servers, workers=(1, 2, 4),
                            steps_per_s=(1.0, 2.0, 3.0), step_ms=(1, 1, 1), compute_ms=(1, 1, 1), push_ms=(1, 1, 1),
                            queue_ms=(0, 0, 0), train_knee=knee, model="queueing", predicted_train_knee=None,
                            model_knee=model_knee, server_utilization=None)


@pytest.mark.parametrize("knees, words", [
    ((1, 2, None), "moves right with more shards (S=1: 1 worker; S=2: 2 workers; S=4: none up to 4 workers)"),
    ((2, 2, 2), "does not move"), ((None, None, None), "no knee for any shard count"),
    ((4, 2, 1), "moves left"), ((2, 1, 4), "moves both ways")])
def test_knee_shift_says_what_the_data_show(knees, words):
    assert words in _knee_shift([_sat(s, k) for s, k in zip((1, 2, 4), knees)], "train_knee")


def test_finding_numbers_needs_every_experiment_and_compares_the_fixes(tmp_path):
    runs = {"paper_cntk": analysis.load_run(build_run(tmp_path / "p", "paper_cntk")),
            "fix_parallel_io": analysis.load_run(build_run(tmp_path / "f", "fix_parallel_io", init_s=lambda n: 1 / n)),
            "fix_sharded_ps": analysis.load_run(build_run(tmp_path / "s", "fix_sharded_ps", workers=(1, 2, 4),
                                                          extra_sweep={"servers": [1, 2]}))}
    with pytest.raises(UserError, match="fix_sharded_ps"):
        analysis.finding_numbers({k: v for k, v in runs.items() if k != "fix_sharded_ps"})
    f = analysis.finding_numbers(runs)
    assert f.sequential_io[0].trend == "grows" and f.parallel_io[0].trend == "falls"
    assert [s.servers for s in f.sharded] == [1, 2]
    assert "1 worker: 0.5 s vs 1 s; 2 workers: 1 s vs 0.5 s; 4 workers: 2 s vs 0.25 s" in f.parallel_io_text()
    assert "The measured train knee does not move (S=1: 2 workers; S=2: 2 workers)" in f.sharded_text()


def test_the_module_imports_no_ray():
    import subprocess
    import sys
    code = "import sys, testbed.analysis.notebook; print(json.dumps('ray' in sys.modules))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) is False
