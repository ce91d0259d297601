"""Per-call cost curves: interpolation, the extrapolation flag, the profile's schema migration,
and the model reading the curves at the config's size."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import ConfigFields
from testbed.model import ModelFamily, extrapolated, predict, step_terms
from testbed.model.curves import CALL_COST_CURVES, CallCosts, SizeCurve, leave_one_out_residuals
from testbed.model.profile import PROFILE_SCHEMA_VERSION, HardwareProfile, StepCpuLine, load_profile, save_profile
from testbed.records.atomic import atomic_write_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KIB, MIB, MS = 2**10, 2**20, 1e-3
SIZES = (4 * KIB, 64 * KIB, 512 * KIB, 2 * MIB, 8 * MIB, 32 * MIB)


def test_curve_is_exact_at_its_points_and_linear_between():
    curve = SizeCurve(((4096, 1e-3), (1 * MIB, 2e-3), (4 * MIB, 8e-3)))
    for b, s in curve.points:
        assert curve.at(b) == pytest.approx(s)
    assert curve.at((1 * MIB + 4 * MIB) / 2) == pytest.approx(5e-3)   # halfway in bytes
    assert curve.at(2 * MIB) == pytest.approx(2e-3 + 6e-3 / 3)
    assert curve.covers(4096) and curve.covers(3 * MIB) and not curve.covers(8 * MIB) and not curve.covers(1024)
    # beyond the range: along the nearest end segment, never below 0
    assert curve.at(7 * MIB) == pytest.approx(8e-3 + 3 * 2e-3)
    assert curve.at(1) >= 0
    # log-log interpolation: a geometric mean halfway in log bytes
    assert curve.at(2 * MIB, scale="loglog") == pytest.approx((2e-3 * 8e-3) ** 0.5)


def test_curve_checks_its_points():
    with pytest.raises(ValueError, match="at least one"):
        SizeCurve(())
    with pytest.raises(ValueError, match="seconds >= 0"):
        SizeCurve(((4096, -1.0),))
    with pytest.raises(ValueError, match="twice"):
        SizeCurve(((4096, 1.0), (4096.0, 2.0)))
    assert SizeCurve(((2.0, 1.0), (1.0, 0.5))).points == ((1.0, 0.5), (2.0, 1.0))  # sorted


def test_leave_one_out_residuals_favour_the_interpolation_that_fits():
    line = SizeCurve(tuple((b, 1e-3 + b / 1e9) for b in SIZES))
    linear = leave_one_out_residuals(line, "linear")
    loglog = leave_one_out_residuals(line, "loglog")
    assert len(linear) == len(SIZES) - 2
    assert max(abs(e) for _, e in linear) < 1e-9 < max(abs(e) for _, e in loglog)


def costs(shards: int = 1, push_factor=lambda b: 1.0, sizes=SIZES) -> CallCosts:
    """Curves of a plain machine: 1 ms per call plus 1 ns per byte, measured at ``sizes``
    (a shard's figures at its slice of each size)."""
    def curve(fixed_s, per_byte_s, part=1, factor=lambda b: 1.0):
        return SizeCurve(tuple((b / part, (fixed_s + per_byte_s * b / part) * factor(b)) for b in sizes))
    return CallCosts(shards=shards, worker_push_s=curve(1 * MS, 1e-9, factor=push_factor),
                     worker_pull_s=curve(1 * MS, 1e-9), worker_push_cpu_s=curve(0.4 * MS, 0.2e-9),
                     worker_pull_cpu_s=curve(0.2 * MS, 0.2e-9), shard_push_cpu_s=curve(0.3 * MS, 0.3e-9, shards),
                     shard_pull_cpu_s=curve(0.2 * MS, 0.2e-9, shards), apply_s=curve(0.01 * MS, 0.1e-9, shards),
                     step_gap_s=curve(0.1 * MS, 0.05e-9))


def profile(*call_costs: CallCosts, **changes) -> HardwareProfile:
    base = dict(identity={}, cores_per_node=2, server_apply_bytes_per_s=1e9, server_call_overhead_s=1e-4,
                actor_call_latency_s=5e-4, transfer_bytes_per_s_local=1e9, call_costs=call_costs)
    base.update(changes)
    return HardwareProfile(**base)


def config(**fields) -> ConfigFields:
    base = {"workers": 1, "gradient_bytes": 4 * MIB, "compute": {"seconds": 0.02}, "workload": {"steps": 10}}
    base.update(fields)
    return ConfigFields.model_validate(base)


def test_one_worker_push_and_pull_are_the_calibrated_curves():
    p = profile(costs())
    pred = predict(config(), p, ModelFamily.QUEUEING)
    push, pull = 1 * MS + 4 * MIB * 1e-9, 1 * MS + 4 * MIB * 1e-9
    assert pred.push_s == pytest.approx(push) and pred.pull_s == pytest.approx(pull)
    assert pred.apply_s == pytest.approx(0.01 * MS + 4 * MIB * 0.1e-9)
    gap = 0.1 * MS + 4 * MIB * 0.05e-9
    assert pred.step_s == pytest.approx(0.02 + push + pull + gap)
    t = step_terms(config(), p)
    # the shard's CPU per push is its service; the worker's side is the rest of the push
    assert t.push_service_s == pytest.approx(0.3 * MS + 4 * MIB * 0.3e-9)
    assert t.push_transfer_s + t.push_service_s == pytest.approx(push)
    # every process's CPU per step feeds the CPU centre, once
    cpu = (0.4 + 0.2) * MS + 4 * MIB * 0.4e-9 + (0.3 + 0.2) * MS + 4 * MIB * 0.5e-9
    assert t.rpc_cpu_s == pytest.approx(cpu)


def test_a_curve_that_doubles_the_push_at_4_mib_doubles_the_predicted_push():
    sizes = (4 * KIB, 64 * KIB, 512 * KIB, 2 * MIB, 4 * MIB, 8 * MIB, 32 * MIB)
    plain = predict(config(), profile(costs(sizes=sizes)))
    doubled = predict(config(), profile(costs(sizes=sizes, push_factor=lambda b: 2.0 if b == 4 * MIB else 1.0)))
    assert doubled.push_s == pytest.approx(2 * plain.push_s)
    assert doubled.pull_s == pytest.approx(plain.pull_s)
    assert doubled.step_s == pytest.approx(plain.step_s + plain.push_s)
    # halfway between 4 and 8 MiB the push is halfway between double and single
    six = config(gradient_bytes=6 * MIB)
    single = 1 * MS + 8 * MIB * 1e-9
    assert predict(six, profile(costs(sizes=sizes, push_factor=lambda b: 2.0 if b == 4 * MIB else 1.0))).push_s \
        == pytest.approx((2 * (1 * MS + 4 * MIB * 1e-9) + single) / 2)


def test_pull_every_k_divides_the_pull_cpu():
    t1, t4 = step_terms(config(), profile(costs())), step_terms(config(pull_every=4), profile(costs()))
    pull_cpu = 0.2 * MS + 4 * MIB * 0.2e-9
    assert t1.worker_cpu_s + t1.worker_extra_s - (t4.worker_cpu_s + t4.worker_extra_s) == pytest.approx(
        pull_cpu * 3 / 4)


def test_shard_figures_are_read_at_the_slice_and_the_nearest_shard_count():
    p = profile(costs(1), costs(2))
    two = step_terms(config(servers=2), p)
    assert two.apply_s == pytest.approx(0.01 * MS + 2 * MIB * 0.1e-9)
    assert p.call_costs_for(4).shards == 2 and p.call_costs_for(1).shards == 1


def test_extrapolated_figures_are_named():
    p = profile(costs(1), costs(2))
    assert extrapolated(config(), p) == ()
    big = extrapolated(config(gradient_bytes=64 * MIB), p)
    assert {f.split(" ")[0] for f in big} == set(CALL_COST_CURVES)
    assert "worker_push_s at 67108864 B (calibrated 4096..33554432 B)" in big
    # four shards: beyond the calibrated counts, and each slice of 4 KiB is 1 KiB, below the range
    small = extrapolated(config(gradient_bytes=4 * KIB, servers=4), p)
    assert any(f.startswith("shards: 4") for f in small)
    assert any(f.startswith("shard_push_cpu_s at 1024 B") for f in small)
    assert not any(f.startswith("worker_push_s") for f in small)
    assert extrapolated(config(gradient_bytes=64 * MIB), profile()) == ()  # no curves: nothing to flag


def test_profile_with_curves_round_trips(tmp_path):
    p = profile(costs(1), costs(2))
    path = save_profile(p, tmp_path / "p.json", atomic_write_text)
    assert json.loads(path.read_text())["schema_version"] == PROFILE_SCHEMA_VERSION == 2
    assert load_profile(path) == p


def test_old_profile_migrates_its_extra_figures():
    old = json.loads((FIXTURES / "profile-v1.json").read_text())
    assert old["schema_version"] == 1 and "extra" in old
    p = load_profile(FIXTURES / "profile-v1.json")
    extra = old["extra"]
    assert p.schema_version == 2 and p.call_costs == ()
    assert p.object_store_call_s == extra["object_store_call_s"]
    assert p.server_copy_bytes_per_s == extra["server_copy_bytes_per_s"]
    assert p.gradient_fill_bytes_per_s == extra["gradient_fill_bytes_per_s"]
    assert p.actor_setup_s == extra["actor_setup_s"] and p.nodes == 1
    assert p.step_cpu == StepCpuLine(extra["worker_cpu_per_step_s"], extra["worker_cpu_bytes_per_s"],
                                     extra["server_cpu_per_step_s"], extra["server_cpu_bytes_per_s"])
    # the old figures still feed the model as they did: the straight line of CPU per step
    t = step_terms(config(gradient_bytes=1 * MIB), p)
    assert t.worker_cpu_s == pytest.approx(extra["worker_cpu_per_step_s"] + MIB / extra["worker_cpu_bytes_per_s"])


def test_old_profile_with_an_unknown_extra_figure_is_refused(tmp_path):
    old = json.loads((FIXTURES / "profile-v1.json").read_text())
    old["extra"]["made_up_s"] = 1.0
    (tmp_path / "p.json").write_text(json.dumps(old))
    with pytest.raises(UserError, match="made_up_s"):
        load_profile(tmp_path / "p.json")


def test_typed_figures_check_their_values():
    with pytest.raises(ValueError, match="object_store_call_s"):
        profile(object_store_call_s=-1.0)
    with pytest.raises(ValueError, match="nodes"):
        profile(nodes=0)
    with pytest.raises(ValueError, match="worker_per_step_s"):
        StepCpuLine(worker_per_step_s=-1e-3)
    with pytest.raises(ValueError, match="shards"):
        CallCosts(0, *(SizeCurve(((4096, 1e-3),)),) * len(CALL_COST_CURVES))
    with pytest.raises(ValueError, match="twice"):
        profile(costs(1), costs(1))


def test_one_worker_whose_cpu_exceeds_its_whole_step_is_still_predicted_as_calibrated():
    # 30 ms of shard CPU per pull (it runs on after answering, in parallel with the worker)
    # against a step of 20 ms compute plus the calls: a lone step is still compute + calls
    heavy = dataclasses.replace(costs(), shard_pull_cpu_s=SizeCurve(tuple((b, 30 * MS) for b in SIZES)))
    pred = predict(config(), profile(heavy), ModelFamily.QUEUEING)
    push, pull, gap = 1 * MS + 4 * MIB * 1e-9, 1 * MS + 4 * MIB * 1e-9, 0.1 * MS + 4 * MIB * 0.05e-9
    assert pred.step_s == pytest.approx(0.02 + push + pull + gap)
    assert pred.push_s == pytest.approx(push) and pred.pull_s == pytest.approx(pull)
    # more CPU per step than two cores deliver in a lone step: the cores bound even one worker
    heavier = dataclasses.replace(costs(), shard_pull_cpu_s=SizeCurve(tuple((b, 60 * MS) for b in SIZES)))
    u = step_terms(config(), profile(heavier)).cpu_demand_s
    assert predict(config(), profile(heavier)).step_s == pytest.approx(
        u / 2 + step_terms(config(), profile(heavier)).server_demand_s)
    # and many such workers saturate the two cores: N u / K bounds the step from below
    many = predict(config(workers=16), profile(heavy), ModelFamily.QUEUEING)
    assert many.step_s >= 16 * step_terms(config(), profile(heavy)).cpu_demand_s / 2 * 0.999


def test_worker_figures_grow_by_a_calls_fixed_cost_per_shard_beyond_the_calibrated_counts():
    # 1 shard: a push of 4 MiB costs c; 2 shards: 1.5 c. Beyond 2, each shard more adds the
    # step between 1 and 2 shards read at the smallest size (one call's fixed part), not the
    # step at 4 MiB: the bytes are M in all, however many shards share them.
    one, two = costs(1), costs(2, push_factor=lambda b: 1.5)
    p = profile(one, two)
    c = one.worker_push_s.at(4 * MIB)
    small = one.worker_push_s.lo_bytes
    per_call = 0.5 * one.worker_push_s.at(small)
    t = {s: step_terms(config(servers=s), p) for s in (1, 2, 4)}
    push = {s: t[s].push_transfer_s + t[s].push_service_s for s in t}
    assert push[1] == pytest.approx(c) and push[2] == pytest.approx(1.5 * c)
    assert push[4] == pytest.approx(1.5 * c + 2 * per_call)
    assert push[4] < 2.5 * c
    # a figure that does not grow with S is not made to shrink beyond the calibrated counts
    flat = profile(costs(1, push_factor=lambda b: 1.2), costs(2))
    assert step_terms(config(servers=4), flat).worker_cpu_s == pytest.approx(step_terms(config(servers=2), flat)
                                                                             .worker_cpu_s)


def test_a_measured_step_beyond_the_curves_replaces_the_one_between_the_two_largest_counts():
    # The same curves, and calibration ran 4 shards at the smallest size: the push there took
    # 1.6 x the 2-shard push (not the 2 x the 1 -> 2 step says). Each shard beyond 2 adds half
    # of that 0.6, at every size; 3 shards lie halfway, 8 shards along the same step.
    one, two = costs(1), costs(2, push_factor=lambda b: 1.5)
    small = one.worker_push_s.lo_bytes
    base = two.worker_push_s.at(small)
    figures = {name: getattr(two, name).at(small) for name in
               ("worker_push_s", "worker_pull_s", "worker_push_cpu_s", "worker_pull_cpu_s")}
    figures["worker_push_s"] = 1.6 * base
    p = dataclasses.replace(profile(one, two), small_calls_by_shards={4: figures})
    step = 0.6 * base / 2
    c2 = two.worker_push_s.at(4 * MIB)
    for s in (3, 4, 8):
        t = step_terms(config(servers=s), p)
        assert t.push_transfer_s + t.push_service_s == pytest.approx(c2 + step * (s - 2))
    # the pull's measured step is 0 here: it stays the 2-shard figure
    t2, t4 = step_terms(config(servers=2), p), step_terms(config(servers=4), p)
    assert t4.pull_transfer_s + t4.pull_service_s == pytest.approx(t2.pull_transfer_s + t2.pull_service_s)
    # it survives the profile's file (keys become strings in JSON)
    again = HardwareProfile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.small_calls_by_shards == p.small_calls_by_shards


def test_the_small_calls_run_is_split_like_the_one_shard_run():
    from testbed.calibration.costs import RunPoint, small_calls_from_point
    one = costs(1)
    point = RunPoint(gradient_bytes=4 * KIB, shards=4, steps=10, pushes=10, pulls=10, push_s=3 * MS, pull_s=1 * MS,
                     apply_s=0.0, step_gap_s=0.0, worker_cpu_s=0.05, shard_cpu_s=0.01)
    got = small_calls_from_point(point, one)
    assert got["worker_push_s"] == 3 * MS and got["worker_pull_s"] == 1 * MS
    assert 10 * (got["worker_push_cpu_s"] + got["worker_pull_cpu_s"]) == pytest.approx(0.05)
    ratio = one.worker_push_cpu_s.at(4 * KIB) / one.worker_pull_cpu_s.at(4 * KIB)
    assert got["worker_push_cpu_s"] / got["worker_pull_cpu_s"] == pytest.approx(ratio)


def test_the_step_beyond_the_curves_is_taken_from_a_pair_of_runs_made_back_to_back():
    from testbed.calibration.costs import RunPoint, paired_small_calls
    one, two = costs(1), costs(2)
    small = 4 * KIB
    base = two.worker_push_s.at(small)

    def run(shards, push_s):
        return RunPoint(gradient_bytes=small, shards=shards, steps=10, pushes=10, pulls=10, push_s=push_s,
                        pull_s=1 * MS, apply_s=0.0, step_gap_s=0.0, worker_cpu_s=0.05, shard_cpu_s=0.01)
    # the pair ran at twice the sweep's level: 2 shards took 2 x base, 4 shards 0.4 ms more than that
    got = paired_small_calls(run(4, 2 * base + 0.4 * MS), run(2, 2 * base), one, two)
    assert got["worker_push_s"] == pytest.approx(base + 0.4 * MS)  # the curves' level, the pair's step
    assert got["worker_pull_s"] == pytest.approx(two.worker_pull_s.at(small))  # no step measured: none added
    p = dataclasses.replace(profile(one, two), small_calls_by_shards={4: got})
    t2, t4 = step_terms(config(servers=2, gradient_bytes=small), p), step_terms(config(servers=4, gradient_bytes=small), p)
    assert (t4.push_transfer_s + t4.push_service_s) - (t2.push_transfer_s + t2.push_service_s) == pytest.approx(0.4 * MS)
    # a pair whose 4-shard run came out cheaper never makes the figure negative
    assert paired_small_calls(run(4, 0.0), run(2, 10 * base), one, two)["worker_push_s"] == 0.0


def test_slices_through_the_object_store_step_by_the_large_pair_inline_ones_by_the_small():
    one, two = costs(1), costs(2)
    small, large = 4 * KIB, 2 * MIB
    names = ("worker_push_s", "worker_pull_s", "worker_push_cpu_s", "worker_pull_cpu_s")
    at_small = {n: getattr(two, n).at(small) for n in names}
    at_large = {n: getattr(two, n).at(large) for n in names}
    at_small["worker_push_s"] += 2 * 0.3 * MS   # 0.3 ms a shard more, inline
    at_large["worker_push_s"] += 2 * 2.0 * MS   # 2 ms a shard more, each slice a put and a get
    p = dataclasses.replace(profile(one, two), small_calls_by_shards={4: at_small},
                            large_calls_by_shards={4: at_large}, large_calls_bytes=large)
    push = lambda m, s: (lambda t: t.push_transfer_s + t.push_service_s)(step_terms(config(servers=s, gradient_bytes=m), p))  # noqa: E731
    # 8 MiB on 4 shards: 2 MiB slices, past the inline limit: the large step, from the 2-shard curve at 8 MiB
    assert push(8 * MIB, 4) - push(8 * MIB, 2) == pytest.approx(2 * 2.0 * MS)
    assert push(8 * MIB, 3) - push(8 * MIB, 2) == pytest.approx(2.0 * MS)
    # 200 KiB on 4 shards: 50 KiB slices, inline: the small step, from the 2-shard curve where
    # its slices are 50 KiB too (100 KiB in all), not at 200 KiB
    assert push(200 * KIB, 4) - push(100 * KIB, 2) == pytest.approx(2 * 0.3 * MS)
    assert push(192 * KIB, 3) - push(128 * KIB, 2) == pytest.approx(0.3 * MS)
    # without the large pair (older profiles) the small step serves every size, as before
    q = dataclasses.replace(p, large_calls_by_shards={}, large_calls_bytes=0)
    t8 = step_terms(config(servers=4, gradient_bytes=8 * MIB), q)
    t2 = step_terms(config(servers=2, gradient_bytes=8 * MIB), q)
    assert (t8.push_transfer_s + t8.push_service_s) - (t2.push_transfer_s + t2.push_service_s) == pytest.approx(0.6 * MS)
    # it survives the profile's file
    again = HardwareProfile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.large_calls_by_shards == p.large_calls_by_shards and again.large_calls_bytes == large


def test_the_step_past_the_inline_limit_grows_with_the_slice_through_the_larger_pair():
    one, two = costs(1), costs(2)
    large, larger = 2 * MIB, 16 * MIB
    names = ("worker_push_s", "worker_pull_s", "worker_push_cpu_s", "worker_pull_cpu_s")

    def pair(at: int, step_s: float) -> dict[str, float]:
        figures = {n: getattr(two, n).at(at) for n in names}
        figures["worker_push_s"] += 2 * step_s
        return figures
    p = dataclasses.replace(profile(one, two), large_calls_by_shards={4: pair(large, 2.0 * MS)}, large_calls_bytes=large,
                            larger_calls_by_shards={4: pair(larger, 4.0 * MS)}, larger_calls_bytes=larger)
    push = lambda m, s: (lambda t: t.push_transfer_s + t.push_service_s)(step_terms(config(servers=s, gradient_bytes=m), p))  # noqa: E731
    # at the two sizes, their own steps; between them linear in bytes; beyond, along that line
    assert push(large, 4) - push(large, 2) == pytest.approx(2 * 2.0 * MS)
    assert push(larger, 4) - push(larger, 2) == pytest.approx(2 * 4.0 * MS)
    assert push(9 * MIB, 4) - push(9 * MIB, 2) == pytest.approx(2 * 3.0 * MS)
    assert push(30 * MIB, 4) - push(30 * MIB, 2) == pytest.approx(2 * 6.0 * MS)
    # below the large size (1 MiB: 256 KiB slices, still through the object store), the large step
    assert push(MIB, 4) - push(MIB, 2) == pytest.approx(2 * 2.0 * MS)
    # a larger step measured below the large one slopes down, never below 0
    q = dataclasses.replace(p, larger_calls_by_shards={4: pair(larger, 1.0 * MS)})
    assert push(30 * MIB, 4) - push(30 * MIB, 2) > 0
    assert (lambda t4, t2: (t4.push_transfer_s + t4.push_service_s) - (t2.push_transfer_s + t2.push_service_s))(
        step_terms(config(servers=4, gradient_bytes=64 * MIB), q),
        step_terms(config(servers=2, gradient_bytes=64 * MIB), q)) == pytest.approx(0.0, abs=1e-12)
    # without it (profiles before version 23) the large step serves every size past the limit
    r = dataclasses.replace(p, larger_calls_by_shards={}, larger_calls_bytes=0)
    t30 = (step_terms(config(servers=4, gradient_bytes=30 * MIB), r), step_terms(config(servers=2, gradient_bytes=30 * MIB), r))
    assert (t30[0].push_transfer_s + t30[0].push_service_s) - (t30[1].push_transfer_s + t30[1].push_service_s) \
        == pytest.approx(2 * 2.0 * MS)
    again = HardwareProfile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.larger_calls_by_shards == p.larger_calls_by_shards and again.larger_calls_bytes == larger


def test_bytes_through_the_object_store_read_the_curve_past_the_inline_limit():
    from testbed.model.curves import INLINE_LIMIT_BYTES, at_side
    # a step of 1 ms at the inline limit: 0.5 ms inline, 1.5 ms + 1 ns a byte past it
    c = SizeCurve(((4 * KIB, 0.5 * MS), (64 * KIB, 0.5 * MS), (512 * KIB, 1.5 * MS + 512 * KIB * 1e-9),
                   (2 * MIB, 1.5 * MS + 2 * MIB * 1e-9)))
    past = 131 * KIB
    assert at_side(c, past, INLINE_LIMIT_BYTES, True) == pytest.approx(1.5 * MS + past * 1e-9)
    assert c.at(past) < 0.8 * MS  # across the step, the plain reading is far below either side
    # inline bytes read the whole curve, as before; a side with one point is flat from it
    assert at_side(c, 90 * KIB, INLINE_LIMIT_BYTES, False) == c.at(90 * KIB)
    lone = SizeCurve(((64 * KIB, 0.5 * MS), (512 * KIB, 2 * MS)))
    assert at_side(lone, 200 * KIB, INLINE_LIMIT_BYTES, True) == pytest.approx(2 * MS)


def test_the_terms_read_each_slice_on_its_side_of_the_inline_limit():
    # Two shards: the curve of 2 shards steps at 200 KiB of gradient (100 KiB slices).
    sizes = (4 * KIB, 64 * KIB, 512 * KIB, 2 * MIB, 8 * MIB, 32 * MIB)

    def stepped(name_factor):
        return lambda b: 1.0 if b < 200 * KIB else name_factor

    two = costs(shards=2, sizes=sizes, push_factor=stepped(3.0))
    p = profile(costs(sizes=sizes), two)
    at = lambda m: step_terms(config(servers=2, gradient_bytes=m), p)  # noqa: E731
    push = lambda m: at(m).push_transfer_s + at(m).push_service_s  # noqa: E731
    # 300 KiB (150 KiB slices): the 512 KiB-2 MiB segment of the stepped curve, extended down
    expected = 3.0 * (1 * MS + 300 * KIB * 1e-9)
    assert push(300 * KIB) == pytest.approx(expected, rel=1e-6)
    # 150 KiB (75 KiB slices, inline): the whole curve, between 64 and 512 KiB
    assert push(150 * KIB) == pytest.approx(two.worker_push_s.at(150 * KIB), rel=1e-6)


@pytest.mark.parametrize("shards", [2, 3, 4, 8])
def test_one_simulated_worker_with_more_shards_than_cores_pushes_and_pulls_at_the_calibrated_figures(shards):
    # The figures beyond the curves were measured on the cores the shards share: the simulation,
    # which shares its cores among the shards' services itself, must not add that a second time.
    one, two = costs(1), costs(2, push_factor=lambda b: 1.5)
    names = ("worker_push_s", "worker_pull_s", "worker_push_cpu_s", "worker_pull_cpu_s")
    figures = {n: 1.8 * getattr(two, n).at(4 * KIB) for n in names}
    p = dataclasses.replace(profile(one, two), small_calls_by_shards={4: figures})
    cfg = config(servers=shards, gradient_bytes=64 * KIB, pull_every=1, compute={"mode": "sleep", "seconds": 0.02})
    t = step_terms(cfg, p)
    pred = predict(cfg, p, ModelFamily.SIMULATED)
    assert pred.push_s == pytest.approx(t.push_transfer_s + t.push_service_s, rel=1e-6)
    assert pred.pull_s == pytest.approx(t.pull_transfer_s + t.pull_service_s, rel=1e-6)


def test_an_ssp_pull_has_every_shards_reply_in_it_and_the_other_modes_keep_the_curves():
    step = SizeCurve(((2 * KIB, 0.5 * MS), (256 * KIB, 1 * MS), (1 * MIB, 2 * MS), (4 * MIB, 3 * MS)))
    with_step, without = profile(costs(1), costs(2), plain_pull_step_s=step), profile(costs(1), costs(2))
    for sync in ("async", "sync"):
        c = config(servers=2, sync=sync)
        assert step_terms(c, with_step).pull_transfer_s == pytest.approx(step_terms(c, without).pull_transfer_s)
        assert not step_terms(c, with_step).plain_pull_step
    one = config(sync="ssp", staleness=1)  # one shard: no other shard's reply
    assert step_terms(one, with_step).pull_transfer_s == pytest.approx(step_terms(one, without).pull_transfer_s)
    # the terms say where the step was added (the simulated family reads it, not the rule again)
    assert not step_terms(one, with_step).plain_pull_step
    assert not step_terms(config(servers=2, sync="ssp", staleness=1), without).plain_pull_step
    assert step_terms(config(servers=2, sync="ssp", staleness=1), with_step).plain_pull_step
    # 4 MiB over 4 shards: 1 MiB slices through the object store, three replies more than the curves' one
    four = config(servers=4, sync="ssp", staleness=1)
    grown = step_terms(four, with_step).pull_transfer_s - step_terms(four, without).pull_transfer_s
    assert grown == pytest.approx(3 * 2 * MS)
    assert predict(four, with_step, ModelFamily.SIMULATED).pull_s - predict(four, without, ModelFamily.SIMULATED).pull_s \
        == pytest.approx(3 * 2 * MS, rel=0.05)
    # the step rides the profile's round trip
    assert HardwareProfile.from_dict(json.loads(json.dumps(with_step.to_dict()))) == with_step
    # and the profile's table names it
    from testbed.report.profile_rows import profile_rows
    assert dict(profile_rows(with_step))["an ssp pull (a call of its own): what each shard beyond the first adds, "
                                         "by slice"].startswith("2 KiB: 500 us")


@pytest.mark.parametrize("nbytes", [4 * KIB, 64 * KIB, 4 * MIB])
def test_an_ssp_pull_of_its_own_is_dispatched_as_a_bare_call(nbytes):
    # One worker, one shard: the pull of its own takes the curve's pull (its copy as measured
    # travelling with a push) plus a bare call's dispatch at the shard, at every size; the push's
    # dispatch (0.29 ms here, fixed) is not it. Without the bare call's figure: the rule before,
    # the push's dispatch with the copy inside it (so nothing added once the copy is the longer).
    bare = profile(costs(1), actor_call_cpu_s=0.7 * MS, actor_call_cpu_busy_s=0.3 * MS)
    plain = profile(costs(1))
    ssp, asynchronous = config(sync="ssp", staleness=1, gradient_bytes=nbytes), config(gradient_bytes=nbytes)
    added = (predict(ssp, bare, ModelFamily.SIMULATED).pull_s
             - predict(asynchronous, bare, ModelFamily.SIMULATED).pull_s)
    assert added == pytest.approx(0.7 * MS, rel=1e-6)
    t = step_terms(ssp, plain)
    dispatch, copy = t.push_service_s - t.apply_s, t.pull_service_s
    before = (predict(ssp, plain, ModelFamily.SIMULATED).pull_s
              - predict(asynchronous, plain, ModelFamily.SIMULATED).pull_s)
    assert before == pytest.approx(max(0.0, dispatch - copy), abs=1e-9)
    # pushes, async and sync pulls keep their dispatch
    for cfg in (asynchronous, config(sync="sync", gradient_bytes=nbytes)):
        assert predict(cfg, bare, ModelFamily.SIMULATED).pull_s == pytest.approx(
            predict(cfg, plain, ModelFamily.SIMULATED).pull_s, rel=1e-9)
    assert predict(ssp, bare, ModelFamily.SIMULATED).push_s == pytest.approx(
        predict(ssp, plain, ModelFamily.SIMULATED).push_s, rel=1e-9)


@pytest.mark.parametrize("servers", [2, 4])
def test_an_ssp_pull_to_several_shards_keeps_the_rule_its_calibrated_step_was_measured_against(servers):
    # The step per shard beyond the first (plain_pull_step_s) was calibrated with the push's
    # dispatch as the pull's own: the bare call's figure changes nothing there.
    step = SizeCurve(((2 * KIB, 0.5 * MS), (256 * KIB, 1 * MS), (1 * MIB, 2 * MS), (4 * MIB, 3 * MS)))
    with_bare = profile(costs(1), costs(2), plain_pull_step_s=step, actor_call_cpu_s=0.7 * MS)
    without = profile(costs(1), costs(2), plain_pull_step_s=step)
    cfg = config(servers=servers, sync="ssp", staleness=1)
    assert predict(cfg, with_bare, ModelFamily.SIMULATED).pull_s == pytest.approx(
        predict(cfg, without, ModelFamily.SIMULATED).pull_s, rel=1e-9)


@pytest.mark.parametrize("nbytes", [4 * KIB, 256 * KIB, 4 * MIB])
@pytest.mark.parametrize("servers", [2, 4])
def test_one_ssp_worker_at_several_shards_simulates_calibrations_own_pull(servers, nbytes):
    # The calibrated figure (the pull travelling with a push plus a step a shard beyond the
    # first) holds the shards' dispatch of the call already: one worker alone pulls in the
    # calibrated event (its transfer plus the shard's service), whatever the slice.
    step = SizeCurve(((2 * KIB, 0.5 * MS), (256 * KIB, 1 * MS), (1 * MIB, 2 * MS), (4 * MIB, 3 * MS)))
    prof = profile(costs(1), costs(2), plain_pull_step_s=step)
    cfg = config(servers=servers, sync="ssp", staleness=1, gradient_bytes=nbytes)
    t = step_terms(cfg, prof)
    assert predict(cfg, prof, ModelFamily.SIMULATED).pull_s == pytest.approx(t.pull_transfer_s + t.pull_service_s,
                                                                                rel=0.02)


def test_a_busy_shards_dispatch_is_discounted_in_its_fixed_part_and_only_for_inline_slices():
    from testbed.model.simfamily import sim_spec
    busy = profile(costs(1), actor_call_cpu_s=1.0 * MS, actor_call_cpu_busy_s=0.4 * MS)
    # the fixed part: the shard's CPU per push beyond the apply at the smallest slice (0.3 ms +
    # 4 KiB at 0.3 ns a byte, less the apply there)
    small = config(gradient_bytes=64 * KIB)
    t = step_terms(small, busy)
    fixed = (0.3 * MS + 0.3e-9 * 4 * KIB) - (0.01 * MS + 0.1e-9 * 4 * KIB)
    assert t.dispatch_fixed_s == pytest.approx(fixed)
    spec = sim_spec(small, busy, t)
    # a call that finds the shard serving another saves 60 % of the fixed part, none of the bytes'
    assert spec.overhead_s - spec.overhead_busy_s == pytest.approx(0.6 * fixed)
    # a slice through the object store keeps its whole dispatch, as does a profile with no busy figure
    large = config(gradient_bytes=4 * MIB)
    assert step_terms(large, busy).dispatch_fixed_s == 0.0
    spec = sim_spec(large, busy, step_terms(large, busy))
    assert spec.overhead_busy_s == pytest.approx(spec.overhead_s)
    plain = profile(costs(1))
    spec = sim_spec(small, plain, step_terms(small, plain))
    assert spec.overhead_busy_s == pytest.approx(spec.overhead_s)


def test_rays_cpu_grows_by_the_calibrated_step_for_each_shard_beyond_the_first():
    from testbed.model.terms import ray_cpu_per_step
    curve = SizeCurve(((4 * KIB, 1 * MS), (32 * MIB, 5 * MS)))
    step = SizeCurve(((2 * KIB, 0.0), (32 * KIB, 0.1 * MS), (256 * KIB, 2 * MS), (4 * MIB, 3 * MS)))
    with_step = profile(costs(1), costs(2), ray_cpu_per_step_s=curve, ray_cpu_shard_step_s=step)
    without = profile(costs(1), costs(2), ray_cpu_per_step_s=curve)
    one, four = config(servers=1), config(servers=4)
    # one shard: the curve alone, with or without the step
    assert ray_cpu_per_step(one, with_step) == pytest.approx(curve.at(4 * MIB))
    assert ray_cpu_per_step(four, without) == pytest.approx(curve.at(4 * MIB))
    # 4 MiB over 4 shards: 1 MiB slices through the object store, three steps at the slice
    grown = ray_cpu_per_step(four, with_step) - ray_cpu_per_step(four, without)
    assert grown == pytest.approx(3 * SizeCurve(((256 * KIB, 2 * MS), (4 * MIB, 3 * MS))).at(1 * MIB))
    assert step_terms(four, with_step).ray_cpu_s == pytest.approx(ray_cpu_per_step(four, with_step))
    # inline slices read the inline side of the step; a profile without Ray's curve: none at all
    small = config(servers=2, gradient_bytes=64 * KIB)
    assert ray_cpu_per_step(small, with_step) - ray_cpu_per_step(small, without) == pytest.approx(step.at(32 * KIB))
    assert ray_cpu_per_step(four, profile(costs(1), ray_cpu_shard_step_s=step)) == 0.0
    # the step rides the profile's round trip, and the profile's table names it
    assert HardwareProfile.from_dict(json.loads(json.dumps(with_step.to_dict()))) == with_step
    from testbed.report.profile_rows import profile_rows
    assert dict(profile_rows(with_step))["Ray's own processes' CPU per worker step: what each shard beyond the first "
                                         "adds, by slice"].startswith("2 KiB: 0")


def test_the_plain_pull_step_at_four_shards_is_the_pair_difference_per_shard_beyond_the_first():
    from testbed.calibration.costs import RunPoint, plain_pull_step_beyond
    travelling = RunPoint(4 * KIB, 4, 16, 16, 16, 3e-3, 1.0e-3, 1e-5, 1e-4, 0.1, 0.1)
    plain = dataclasses.replace(travelling, pull_s=4.0e-3, plain_pulls=True)
    assert plain_pull_step_beyond(plain, travelling) == pytest.approx(1.0e-3)
    cheaper = dataclasses.replace(plain, pull_s=0.5e-3)
    assert plain_pull_step_beyond(cheaper, travelling) == 0.0


@pytest.mark.parametrize("measured, shape3, shape4, shape6", [
    (None, 1.0, 1.0, 1.0),              # not measured: linear in the shards, as before
    (0.7e-3, 0.85, 0.7, 0.7),           # 0.7 x the 2-shard step at 4: halfway at 3, flat beyond
    (1e-6, 2 / 3, 1 / 3, 1 / 3),        # a broken run is bounded
])
def test_an_ssp_pulls_step_per_shard_follows_the_shape_measured_at_four_shards(measured, shape3, shape4, shape6):
    from testbed.model.curves import PLAIN_PULL_STEP
    from testbed.model.terms import plain_pull_shape
    step = SizeCurve(((2 * KIB, 1e-3), (256 * KIB, 1.5e-3), (4 * MIB, 3e-3)))
    figures = {"worker_push_s": 3e-3, "worker_pull_s": 2e-3}
    if measured is not None:
        figures[PLAIN_PULL_STEP] = measured
    prof = profile(costs(1), costs(2), plain_pull_step_s=step, small_calls_by_shards={4: figures})
    assert plain_pull_shape(prof, 2) == 1.0
    assert [plain_pull_shape(prof, s) for s in (3, 4, 6)] == pytest.approx([shape3, shape4, shape6])
    # the pull's term: the travelling pull plus (S - 1) steps at the slice, each at the shape
    flat = profile(costs(1), costs(2), plain_pull_step_s=step, small_calls_by_shards={4: {
        k: v for k, v in figures.items() if k != PLAIN_PULL_STEP}})
    for s, shape in ((3, shape3), (4, shape4)):
        cfg = config(servers=s, sync="ssp", staleness=1, gradient_bytes=256 * KIB)
        extra = step_terms(cfg, prof).pull_transfer_s + step_terms(cfg, prof).pull_service_s \
            - step_terms(cfg, flat).pull_transfer_s - step_terms(cfg, flat).pull_service_s
        assert extra == pytest.approx((s - 1) * step.at(256 * KIB / s) * (shape - 1.0), abs=1e-12)


@pytest.mark.parametrize("servers", [2, 4])
def test_a_plain_pull_to_several_busy_shards_pays_its_whole_dispatch(servers):
    import dataclasses

    from testbed.model.simfamily import sim_spec
    from testbed.model.simulation import simulate
    step = SizeCurve(((2 * KIB, 0.5 * MS), (256 * KIB, 1 * MS), (1 * MIB, 2 * MS), (4 * MIB, 3 * MS)))
    busy = profile(costs(1), costs(2), plain_pull_step_s=step, actor_call_cpu_s=1.0 * MS, actor_call_cpu_busy_s=0.3 * MS)
    many = config(servers=servers, sync="ssp", staleness=1, gradient_bytes=16 * KIB, workers=12)
    spec = sim_spec(many, busy, step_terms(many, busy))
    # the push's dispatch is discounted when it finds the shard busy; the plain pull's is not
    assert spec.overhead_busy_s < spec.overhead_s
    assert spec.pull_dispatch_s == spec.pull_dispatch_busy_s == spec.overhead_s
    # and the pulls of many workers come out longer than with the discount (which left them
    # 43-61 % short on the draws of 2026-12-07)
    discounted = dataclasses.replace(spec, pull_dispatch_s=None, pull_dispatch_busy_s=None)
    assert simulate(spec).phases["pull"] > simulate(discounted).phases["pull"]
    # async and sync pulls travel with the push (no call of their own): unchanged
    for sync in ("async", "sync"):
        cfg = config(servers=servers, sync=sync, gradient_bytes=16 * KIB, workers=12)
        assert sim_spec(cfg, busy, step_terms(cfg, busy)).pull_dispatch_s is None
    # one shard: the bare call's dispatch, discounted when busy, as before
    one = config(servers=1, sync="ssp", staleness=1, gradient_bytes=16 * KIB, workers=12)
    spec1 = sim_spec(one, busy, step_terms(one, busy))
    assert spec1.pull_dispatch_s == pytest.approx(1.0 * MS) and spec1.pull_dispatch_busy_s == pytest.approx(0.3 * MS)
