"""The session's per-call level as a config's cores feel it (testbed.model.level): the curves
scaled by the check, read back in proportion to the node's idle share, and the simulated
family's prediction at that level."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.calibration.level import CHECK_SIZES, apply_call_level
from testbed.model import ModelFamily, predict
from testbed.model.curves import SizeCurve
from testbed.model.level import checked_levels, level_felt, ratio_at
from tests.unit.test_model_curves import KIB, MIB, config, costs, profile

LEVELS = [[float(CHECK_SIZES[0]), 2.5], [float(CHECK_SIZES[1]), 1.8], [float(CHECK_SIZES[2]), 1.3]]


def checked(base, levels=LEVELS):
    """``base`` scaled as ``testbed validate``'s check scales it (one set of levels for every figure)."""
    ratios = {figure: levels for figure in ("push", "pull", "worker_cpu", "shard_cpu", "apply", "step_gap")}
    return apply_call_level(base, ratios, {"levels": levels, "ratios": ratios, "level": 1.8})


def base_profile():
    return profile(costs(1), costs(2), push_return_s=0.5e-3,
                   plain_pull_step_s=SizeCurve(((2 * KIB, 1e-3), (8 * MIB, 2e-3))),
                   small_calls_by_shards={4: {"worker_push_s": 3e-3, "worker_pull_s": 2e-3}})


def curve_values(p):
    c = p.call_costs[1]
    return ([v for _, v in c.worker_push_s.points] + [v for _, v in c.apply_s.points]
            + [v for _, v in p.plain_pull_step_s.points] + [p.push_return_s, p.small_calls_by_shards[4]["worker_push_s"]])


def test_a_fully_idle_node_feels_the_whole_level_and_a_busy_one_none_of_it():
    base = base_profile()
    leveled = checked(base)
    assert level_felt(leveled, 1.0) is leveled
    assert curve_values(level_felt(leveled, 0.0)) == pytest.approx(curve_values(base))
    assert curve_values(level_felt(leveled, -0.3)) == pytest.approx(curve_values(base))  # clamped
    # the record stays: a report still says which check the profile carries
    assert level_felt(leveled, 0.0).call_level == leveled.call_level


def test_between_the_two_each_point_moves_by_the_idle_share_of_its_sizes_level():
    base = base_profile()
    half = level_felt(checked(base), 0.5)
    for (b, v0), (_, v) in zip(base.call_costs[0].worker_push_s.points, half.call_costs[0].worker_push_s.points):
        r = ratio_at(LEVELS, b)
        assert v == pytest.approx(v0 * (1 + (r - 1) * 0.5)), b
    # the 4-shard step and a plain push's answer are read at the smallest size, as the check scales them
    r0 = ratio_at(LEVELS, base.call_costs[0].worker_push_s.lo_bytes)
    assert half.small_calls_by_shards[4]["worker_push_s"] == pytest.approx(3e-3 * (1 + (r0 - 1) * 0.5))
    assert half.push_return_s == pytest.approx(0.5e-3 * (1 + (r0 - 1) * 0.5))


def test_no_check_or_a_failed_one_leaves_the_profile_alone():
    base = base_profile()
    assert checked_levels(base) == [] and level_felt(base, 0.0) is base
    failed = dataclasses.replace(checked(base), call_level={"failed": "RayError: gone", "carried_level": 1.4})
    assert checked_levels(failed) == [] and level_felt(failed, 0.0) is failed
    assert checked_levels(checked(base)) == LEVELS


def test_the_simulated_family_reads_the_level_by_its_configs_idle_cores():
    base = profile(costs(1))
    leveled = checked(base, [[float(n), 2.0] for n in CHECK_SIZES])
    lone = config(workers=1, gradient_bytes=64 * KIB, compute={"seconds": 0.05})
    busy = config(workers=6, gradient_bytes=64 * KIB, compute={"mode": "spin", "seconds": 0.05})
    sim = ModelFamily.SIMULATED
    whole = dataclasses.replace(leveled, call_level=None)  # the same curves, read as they are
    for cfg in (lone, busy):
        at_cal, felt, at_level = (predict(cfg, p, sim).push_s for p in (base, leveled, whole))
        assert at_cal < felt <= at_level * (1 + 1e-9), cfg.workers
    # a sleeping worker alone leaves the cores idle: nearly the whole level
    lone_cal, lone_felt = predict(lone, base, sim), predict(lone, leveled, sim)
    assert lone_felt.push_s / lone_cal.push_s > 1.8
    # six spinning workers on two cores keep them busy: little of it
    busy_cal, busy_felt = predict(busy, base, sim), predict(busy, leveled, sim)
    assert busy_felt.push_s / busy_cal.push_s < 1.2
    # the queueing family (a comparison) keeps the check's level whole
    q = ModelFamily.QUEUEING
    assert predict(busy, leveled, q).push_s / predict(busy, base, q).push_s > 1.8


def test_the_report_says_how_the_simulated_family_reads_the_level():
    from testbed.report.profile_rows import profile_rows
    rows = dict(profile_rows(checked(base_profile())))
    assert any("as the simulated family reads it" in k and "idle cores" in v for k, v in rows.items())
    assert not any("as the simulated family reads it" in k for k in dict(profile_rows(base_profile())))
