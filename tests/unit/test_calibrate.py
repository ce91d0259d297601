"""Calibration's pure parts: line fits, machine identity, and the cache decision."""

import dataclasses
import json

import pytest

from testbed.calibration.calibrate import fit_line, identity_key, machine_identity, reusable_profile
from testbed.model.profile import save_profile
from testbed.records.atomic import atomic_write_text
from tests import factories

NODES = [{"NodeManagerAddress": "10.0.0.2", "Alive": True, "Resources": {"CPU": 8.0, "memory": 30 * 2**30}},
         {"NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"CPU": 4.0, "memory": 14 * 2**30}},
         {"NodeManagerAddress": "10.0.0.3", "Alive": False, "Resources": {"CPU": 4.0}}]


def profile(identity):
    return factories.profile(identity=identity, cores_per_node=4, disk=factories.disk({1: 5e8, 2: 9e8}, block_bytes=2**20))


def test_fit_line_recovers_latency_and_bandwidth():
    sizes = [1e6, 8e6, 32e6]
    times = [5e-4 + s / 2e9 for s in sizes]
    a, b = fit_line(sizes, times)
    assert a == pytest.approx(5e-4)
    assert 1 / b == pytest.approx(2e9)
    with pytest.raises(ValueError):
        fit_line([1.0], [1.0])


def test_identity_ignores_dead_nodes_and_order():
    ident = machine_identity(NODES, "~/data")
    assert [n["ip"] for n in ident["nodes"]] == ["10.0.0.1", "10.0.0.2"]
    assert ident["nodes"][0]["cpus"] == 4
    assert identity_key(ident) == identity_key(machine_identity(list(reversed(NODES)), "~/data"))
    assert identity_key(ident) != identity_key(machine_identity(NODES, "/other"))


def test_cached_profile_is_reused_only_for_the_same_machine(tmp_path):
    ident = machine_identity(NODES, "~/data")
    path = tmp_path / "p.json"
    assert reusable_profile(path, ident) is None  # nothing cached
    save_profile(profile(ident), path, atomic_write_text)
    assert reusable_profile(path, ident) == profile(ident)
    other = machine_identity(NODES[:1], "~/data")
    assert reusable_profile(path, other) is None  # another cluster: measure again
    path.write_text("{not json")
    assert reusable_profile(path, ident) is None  # corrupt: measure again


def test_profile_round_trips_through_json(tmp_path):
    ident = machine_identity(NODES, None)
    path = save_profile(profile(ident), tmp_path / "p.json", atomic_write_text)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 2 and data["disk"]["seq_read_bytes_per_s"] == {"1": 5e8, "2": 9e8}


def columns(steps, push_ms, pull_ms, gap_ms, pull_every=1, compute_ms=20.0, shards=1):
    """Event columns of a one-worker run laid out step by step, as the actors record them."""
    cols = {k: [] for k in ("role", "phase", "step", "start_ns", "duration_ns")}

    def add(role, phase, step, start, dur_ms):
        for k, v in zip(cols, (role, phase, step, int(start), int(dur_ms * 1e6))):
            cols[k].append(v)
    t = 0.0
    for s in range(steps):
        add("worker", "compute", s, t, compute_ms)
        t += compute_ms * 1e6
        add("worker", "push", s, t, push_ms)
        for _ in range(shards):
            add("server", "apply", s, t, 0.5)
        t += push_ms * 1e6
        if (s + 1) % pull_every == 0:
            add("worker", "pull", s, t, pull_ms)
            t += pull_ms * 1e6
        t += gap_ms * 1e6
    add("driver", "init", -1, 0, 1.5)
    add("driver", "train", -1, 0, t / 1e6)
    return cols


def test_the_init_call_is_read_from_the_runs_that_started_a_process():
    """A run of the testbed inits right after starting its processes; the sweep's runs mostly
    reuse them, and a session with a new process inits slower: the calibrated call is the fresh
    runs' median when there are enough of them, every run's otherwise."""
    import dataclasses

    from testbed.calibration.costs import FRESH_INIT_RUNS, init_call_from_points, mean_point, point_from_run
    base = point_from_run(4096, 1, 10, columns(10, 2.0, 1.0, 0.3), {})
    reused = [dataclasses.replace(base, init_s=s) for s in (0.7e-3, 0.8e-3, 0.9e-3, 0.75e-3, 0.85e-3)]
    fresh = [dataclasses.replace(base, init_s=s, fresh=True) for s in (1.0e-3, 1.1e-3, 1.2e-3)]
    assert len(fresh) == FRESH_INIT_RUNS
    assert init_call_from_points(reused + fresh) == pytest.approx(1.1e-3)
    # Too few fresh runs to stand alone: every run's median, as before.
    assert init_call_from_points(reused + fresh[:FRESH_INIT_RUNS - 1]) == pytest.approx(0.85e-3)
    # A remeasured pair is fresh only when both runs were.
    assert mean_point(fresh[0], fresh[1]).fresh and not mean_point(fresh[0], reused[0]).fresh
    assert mean_point(fresh[0], reused[0]).init_s == pytest.approx(0.85e-3)


def test_a_run_point_is_read_from_the_events():
    from testbed.calibration.costs import point_from_run
    p = point_from_run(4096, 1, 10, columns(10, 2.0, 1.0, 0.3), {"worker-0": 0.02, "server-0": 0.01})
    assert (p.pushes, p.pulls) == (10, 10)
    assert p.push_s == pytest.approx(2e-3) and p.pull_s == pytest.approx(1e-3) and p.apply_s == pytest.approx(5e-4)
    assert p.step_gap_s == pytest.approx(3e-4)
    assert (p.worker_cpu_s, p.shard_cpu_s) == (0.02, 0.01)
    assert p.init_s == pytest.approx(1.5e-3)  # the driver's init span, nothing to read


def test_the_init_call_is_calibrated_and_predicts_an_empty_init():
    from testbed.calibration.costs import init_call_from_points, point_from_run
    from testbed.model import ModelFamily, init_seconds, predict
    points = [point_from_run(4096, 1, 10, columns(10, 2.0, 1.0, 0.3), {}) for _ in range(3)]
    assert init_call_from_points(points) == pytest.approx(1.5e-3)
    assert init_call_from_points([]) is None
    cfg = factories.config_fields(workers=4)
    prof = factories.profile(init_call_s=4e-3)
    assert init_seconds(cfg, prof, 4, ideal=False) == pytest.approx(4e-3)  # not the 1 ms call latency
    assert init_seconds(cfg, factories.profile(), 4, ideal=False) == pytest.approx(1e-3)
    for family in (ModelFamily.QUEUEING, ModelFamily.SIMULATED):
        assert predict(cfg, prof, family).init_s == pytest.approx(4e-3)


def test_the_gate_is_timed_more_often_where_a_pair_is_cheap():
    from testbed.calibration.calibrate import GATE_REPEATS, gate_repeats
    assert [gate_repeats(j) for j in (1, 2, 4, 16)] == [7, 5, 5, GATE_REPEATS]
    assert gate_repeats(1) % 2 == 1 and gate_repeats(4) % 2 == 1  # an odd count: the median is a pair


def test_cpu_is_split_between_push_and_pull_by_two_runs():
    from testbed.calibration.costs import split_per_call
    # 10 pushes and 10 pulls cost 30 ms; 10 pushes and 1 pull 21 ms: 2 ms per push, 1 per pull
    assert split_per_call((10, 10, 0.030), (10, 1, 0.021)) == pytest.approx((2e-3, 1e-3))
    # a pull that travels with the push can't be told apart: all of it is the push's
    assert split_per_call((10, 0, 0.02), (10, 0, 0.02)) == pytest.approx((2e-3, 0.0))


def test_call_costs_from_runs_at_two_shard_counts():
    from testbed.calibration.costs import call_costs_from_points, point_from_run
    points = []
    for size, push in ((4096, 1.0), (2**20, 3.0), (2**24, 9.0)):
        cpu = lambda pulls: (10 * push + pulls * push / 2) * 1e-3  # noqa: E731 - a pull costs half a push
        points.append(point_from_run(size, 1, 10, columns(10, push, push, 0.2), {"worker-0": cpu(10),
                                                                                "server-0": cpu(10) / 2}))
        points.append(point_from_run(size, 1, 10, columns(10, push, push, 0.2, pull_every=10),
                                     {"worker-0": cpu(1), "server-0": cpu(1) / 2}))
        points.append(point_from_run(size, 2, 10, columns(10, 2 * push, push, 0.2, shards=2),
                                     {"worker-0": 2 * cpu(10), "server-0": cpu(10), "server-1": cpu(10)}))
    one, two = call_costs_from_points(points)
    assert (one.shards, two.shards) == (1, 2)
    assert one.worker_push_cpu_s.at(2**20) == pytest.approx(3e-3)
    assert one.worker_pull_cpu_s.at(2**20) == pytest.approx(1.5e-3)
    assert one.shard_push_cpu_s.at(2**20) == pytest.approx(1.5e-3)
    assert one.worker_push_s.at(2**20) == pytest.approx(3e-3) and one.step_gap_s.at(2**20) == pytest.approx(2e-4)
    # two shards: a shard's figures are at its slice, split in the one-shard ratio
    assert two.shard_push_cpu_s.lo_bytes == 2048
    assert two.worker_push_s.at(2**24) == pytest.approx(18e-3)
    w_push, w_pull = two.worker_push_cpu_s.at(2**20), two.worker_pull_cpu_s.at(2**20)
    assert w_push == pytest.approx(2 * w_pull) and 10 * (w_push + w_pull) == pytest.approx(2 * 0.045)


def test_a_plain_push_answer_is_the_median_over_sizes_of_the_runs_difference():
    from testbed.calibration.costs import push_return_from_points
    # one shard: the run pulling every step (push part of push-and-pull) and the one pulling once
    # (plain pushes, answered): 0.4, 0.6, 0.5 ms longer at three sizes, one size disturbed
    points = []
    for size, every, plain in ((4096, 2.0, 2.4), (2**20, 3.0, 3.6), (2**23, 6.0, 6.5), (2**25, 14.0, 9.0)):
        points.append(_sweep_point(size, 1, 10, every * 1e-3))
        points.append(_sweep_point(size, 1, 1, plain * 1e-3))
        points.append(_sweep_point(size, 2, 10, 2 * every * 1e-3))  # other shard counts are not read
    assert push_return_from_points(points) == pytest.approx(0.45e-3)
    # never below 0 (a larger one-off is noise, not a push that answers before it is done)
    lower = [p if p.pulls >= p.steps else dataclasses.replace(p, push_s=p.push_s - 3e-3) for p in points]
    assert push_return_from_points(lower) == 0.0
    # without the pairs it is not calibrated
    assert push_return_from_points([p for p in points if p.pulls >= p.steps]) is None


def test_a_plain_push_answers_in_every_family_and_only_when_no_pull_travels_with_it():
    from testbed.model import ModelFamily, predict, step_terms
    from testbed.model.terms import plain_push_fraction
    prof, answered = factories.profile(), factories.profile(push_return_s=0.5e-3)
    for fields, fraction in (({}, 0.0), ({"pull_every": 4}, 0.75), ({"sync": "ssp"}, 1.0),
                             ({"sync": "sync"}, 0.0)):
        cfg = factories.config_fields(**fields)
        assert plain_push_fraction(cfg) == fraction
        t0, t1 = step_terms(cfg, prof), step_terms(cfg, answered)
        assert t1.push_event_transfer_s - t0.push_event_transfer_s == pytest.approx(fraction * 0.5e-3)
        for family in (ModelFamily.INITIAL, ModelFamily.QUEUEING, ModelFamily.SIMULATED):
            p0, p1 = predict(cfg, prof, family), predict(cfg, answered, family)
            assert p1.phases["push"] - p0.phases["push"] == pytest.approx(fraction * 0.5e-3, abs=1e-12), (fields, family)


def test_ray_cpu_per_step_is_calibrated_and_takes_the_cores_in_the_simulation():
    from testbed.calibration.costs import point_from_run, ray_cpu_from_points
    from testbed.model import ModelFamily, predict
    from testbed.model.curves import SizeCurve
    points = [point_from_run(size, 1, 10, columns(10, 2.0, 1.0, 0.3), {}, ray_cpu_s=cost)
              for size, cost in ((4096, 0.01), (2**20, 0.05))]
    points.append(point_from_run(4096, 1, 10, columns(10, 2.0, 1.0, 0.3, pull_every=10), {}, ray_cpu_s=0.5))
    curve = ray_cpu_from_points(points)
    assert curve is not None and curve.points == ((4096.0, 1e-3), (2.0**20, 5e-3))  # per step; pull-every-step runs
    assert ray_cpu_from_points(points[:1]) is None
    cfg = factories.config_fields(workers=8, compute={"seconds": 0.005})
    quiet = predict(cfg, factories.profile(), ModelFamily.SIMULATED)
    busy = predict(cfg, factories.profile(ray_cpu_per_step_s=SizeCurve(((1.0, 4e-3), (2.0**30, 4e-3)))),
                   ModelFamily.SIMULATED)
    assert busy.train_s > quiet.train_s  # 8 workers x 4 ms of Ray's CPU per step on 2 cores


def _sweep_point(size, shards, pulls, push_s, steps=10, plain_pulls=False):
    from testbed.calibration.costs import RunPoint
    # A plain-pull run's pulls take a third longer (and 10 % more CPU) than the pull parts.
    pull_s = (push_s / 2) * (4 / 3 if plain_pulls else 1.0) if pulls else 0.0
    return RunPoint(size, shards, steps, steps, pulls, push_s, pull_s, 1e-4, 2e-4,
                    steps * push_s * (1.1 if plain_pulls else 1.0), steps * push_s / 2, plain_pulls=plain_pulls)


def test_a_size_whose_calls_cost_more_than_the_next_ones_is_disturbed():
    from testbed.calibration.costs import disturbed_sizes
    cost = {4096: 2e-3, 65536: 2.4e-3, 2**19: 9e-3, 2**21: 5e-3, 2**23: 8e-3}
    points = [_sweep_point(n, s, 10, c * s) for n, c in cost.items() for s in (1, 2)]
    points += [_sweep_point(n, 1, 1, c * 3) for n, c in cost.items()]  # pull-once runs are not compared
    assert disturbed_sizes(points) == [2**19]
    cost[2**19] = 5.5e-3  # within the ratio of the next size: noise, not a disturbance
    assert disturbed_sizes([_sweep_point(n, 1, 10, c) for n, c in cost.items()]) == []


def test_the_sweep_measures_a_disturbed_size_again_and_keeps_the_undisturbed_runs(monkeypatch):
    from testbed.calibration import costs
    calls = []
    cost = dict(zip(costs.SIZES_BYTES, (2e-3, 2.4e-3, 4e-3, 5e-3, 8e-3, 12e-3)))

    def fake_run_point(nbytes, shards, pull_every, steps, reuse=None, plain_pulls=False):
        calls.append(nbytes)
        burst = 3.0 if nbytes == 2**19 and calls.count(nbytes) <= 4 else 1.0  # the first four runs at 512 KiB
        return _sweep_point(nbytes, shards, steps if pull_every == 1 else 1, burst * cost[nbytes] * shards, steps,
                            plain_pulls)

    monkeypatch.setattr(costs, "run_point", fake_run_point)
    said = []
    curves, points = costs.measure_call_costs(True, said.append)
    assert calls.count(2**19) == 8 and len(calls) == 4 * len(costs.SIZES_BYTES) + 4
    assert any("512 KiB again" in s for s in said)
    assert curves[0].worker_push_s.at(2**19) == pytest.approx(4e-3)  # the run made again, not the burst
    assert [p.gradient_bytes for p in points] == sorted(p.gradient_bytes for p in points)
    # The plain-pull runs are at the largest shard count, one a size, and stay out of the curves.
    plain = [p for p in points if p.plain_pulls]
    assert sorted(p.gradient_bytes for p in plain) == sorted(costs.SIZES_BYTES) and {p.shards for p in plain} == {2}
    assert curves[1].worker_pull_s.at(2**21) == pytest.approx(5e-3 * 2 / 2)


def test_a_size_disturbed_twice_keeps_the_mean_of_both_measurements(monkeypatch):
    from testbed.calibration import costs
    cost = dict(zip(costs.SIZES_BYTES, (2e-3, 2.4e-3, 4e-3, 5e-3, 8e-3, 12e-3)))
    seen = []

    def fake_run_point(nbytes, shards, pull_every, steps, reuse=None, plain_pulls=False):
        seen.append(nbytes)
        burst = (3.0 if seen.count(nbytes) <= 4 else 2.0) if nbytes == 2**19 else 1.0
        return _sweep_point(nbytes, shards, steps if pull_every == 1 else 1, burst * cost[nbytes] * shards, steps,
                            plain_pulls)

    monkeypatch.setattr(costs, "run_point", fake_run_point)
    curves, _ = costs.measure_call_costs(True, lambda s: None)
    assert curves[0].worker_push_s.at(2**19) == pytest.approx(2.5 * 4e-3)


def test_only_runs_of_one_kind_are_averaged():
    from testbed.calibration.costs import mean_point
    a, b = _sweep_point(4096, 1, 10, 2e-3), _sweep_point(4096, 1, 10, 4e-3)
    assert mean_point(a, b).push_s == pytest.approx(3e-3) and mean_point(a, b).pulls == 10
    with pytest.raises(ValueError, match="one size"):
        mean_point(a, _sweep_point(4096, 2, 10, 2e-3))


def test_call_cpu_figures_are_the_callee_cpu_per_call_of_each_series():
    from testbed.calibration.calibrate import call_cpu_figures
    # 100 paused calls (+1 that read the clock) took 80.8 ms of the callee's CPU; 200 queued
    # (+1) took 50.25 ms
    got = call_cpu_figures((1.0, 1.0808), 100, (2.0, 2.05025), 200)
    assert got["actor_call_cpu_s"] == pytest.approx(0.0008)
    assert got["actor_call_cpu_busy_s"] == pytest.approx(0.00025)
    # a clock that went backwards (a restarted process) is no figure below zero
    assert call_cpu_figures((2.0, 1.0), 10, (1.0, 1.0), 10)["actor_call_cpu_s"] == 0.0
    # the caller's clock around the paused series: its CPU per call (a worker's side of a tick)
    assert "actor_caller_cpu_s" not in got
    caller = call_cpu_figures((1.0, 1.0808), 100, (2.0, 2.05025), 200, caller=(5.0, 5.101))
    assert caller["actor_caller_cpu_s"] == pytest.approx(0.001)


def test_the_plain_pull_step_is_the_pull_difference_per_shard_beyond_the_first_at_the_slice():
    from testbed.calibration.costs import disturbed_sizes, mean_point, plain_pull_step_from_points
    sizes = (4096, 2**19, 2**23)
    points = [_sweep_point(n, 2, 10, 4e-3 * (1 + n / 2**23)) for n in sizes]
    points += [_sweep_point(n, 2, 10, 4e-3 * (1 + n / 2**23), plain_pulls=True) for n in sizes]
    step = plain_pull_step_from_points(points)
    # the pull parts are push / 2, the plain pulls a third longer: (1/3) (push / 2) over one shard more
    assert [b for b, _ in step.points] == [n / 2 for n in sizes]
    for (_, v), n in zip(step.points, sizes):
        assert v == pytest.approx(4e-3 * (1 + n / 2**23) / 6)
    # never below 0, and none from fewer than two pairs
    cheaper = [dataclasses.replace(p, pull_s=p.pull_s / 2) if p.plain_pulls else p for p in points]
    assert all(v == 0 for _, v in plain_pull_step_from_points(cheaper).points)
    assert plain_pull_step_from_points(points[:1] + points[3:4]) is None
    # a dip between two sizes is pooled with the size below it: a larger reply never costs less
    dipped = [dataclasses.replace(p, pull_s=p.pull_s * 0.5) if p.plain_pulls and p.gradient_bytes == 2**19 else p
              for p in points]
    values = [v for _, v in plain_pull_step_from_points(dipped).points]
    assert values[0] == values[1] < values[2] and values == sorted(values)
    assert values[0] == pytest.approx(4e-3 * (1 + 4096 / 2**23) / 6 / 2)  # the mean of 4 KiB's step and 0
    # the plain runs are not compared with the others for disturbance, nor averaged with them
    burst = [dataclasses.replace(p, push_s=p.push_s * 5) if p.plain_pulls else p for p in points]
    assert disturbed_sizes(burst) == []
    with pytest.raises(ValueError, match="one size"):
        mean_point(points[0], points[3])


def test_rays_cpu_step_per_shard_is_the_two_shard_run_less_the_one_shard_run_at_the_slice():
    import dataclasses

    from testbed.calibration.costs import ray_cpu_from_points, ray_cpu_shard_step_from_points
    sizes = (4096, 2**19, 2**23)
    # Ray's CPU per step: 1 ms + 0.1 ns a byte at one shard, 2.5 ms more at two past the inline
    # limit, nothing more inline (4 KiB)
    def ray(n, s):
        return 10 * (1e-3 + 1e-10 * n + (2.5e-3 if s == 2 and n / 2 >= 100 * 1024 else 0.0))
    points = [dataclasses.replace(_sweep_point(n, s, 10, 4e-3), ray_cpu_s=ray(n, s)) for n in sizes for s in (1, 2)]
    step = ray_cpu_shard_step_from_points(points)
    assert [b for b, _ in step.points] == [n / 2 for n in sizes]
    assert [v for _, v in step.points] == pytest.approx([0.0, 2.5e-3, 2.5e-3])
    # the one-shard curve is unchanged by the two-shard runs
    assert [v for _, v in ray_cpu_from_points(points).points] == pytest.approx([1e-3 + 1e-10 * n for n in sizes])
    # never below 0; plain-pull runs and runs that did not pull every step are not paired
    cheaper = [dataclasses.replace(p, ray_cpu_s=p.ray_cpu_s / 10) if p.shards == 2 else p for p in points]
    assert all(v == 0 for _, v in ray_cpu_shard_step_from_points(cheaper).points)
    others = [dataclasses.replace(p, plain_pulls=True) if p.shards == 2 and p.gradient_bytes > 4096 else p
              for p in points]
    assert ray_cpu_shard_step_from_points(others) is None
    # where both runs read the raylet's own CPU, the step is the raylet's (the agents' CPU a
    # second left out); the raylet's figure of 0 is one not read
    agents = [dataclasses.replace(p, ray_cpu_s=p.ray_cpu_s + (0.05 if p.shards == 1 else 0.0),
                                  raylet_cpu_s=p.ray_cpu_s - 5e-3) for p in points]
    assert [v for _, v in ray_cpu_shard_step_from_points(agents).points] == pytest.approx([0.0, 2.5e-3, 2.5e-3])
    assert all(v == 0 for _, v in ray_cpu_shard_step_from_points(
        [dataclasses.replace(p, raylet_cpu_s=0.0) for p in agents]).points)
    # none from fewer than two pairs, nor where Ray's CPU was not measured
    assert ray_cpu_shard_step_from_points(points[:2]) is None
    assert ray_cpu_shard_step_from_points([dataclasses.replace(p, ray_cpu_s=0.0) for p in points]) is None
