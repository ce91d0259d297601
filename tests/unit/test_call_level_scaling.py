"""The scaling of a profile's per-call curves by the session's level (testbed.model.level), and
the simulated family reading the scaled profile whole (the level felt by the idle cores was
tried after 2026120715 and taken out: docs/model.md)."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.calibration.level import CHECK_SIZES, apply_call_level
from testbed.model import ModelFamily, predict
from testbed.model.curves import PLAIN_PULL_STEP, SizeCurve
from testbed.model.level import ratio_at, scale_call_curves
from tests.unit.test_model_curves import KIB, config, costs, profile

LEVELS = [[float(CHECK_SIZES[0]), 2.5], [float(CHECK_SIZES[1]), 1.8], [float(CHECK_SIZES[2]), 1.3]]


def checked(base, levels=LEVELS):
    """``base`` scaled as ``testbed validate``'s check scales it (one set of levels for every figure)."""
    ratios = {figure: levels for figure in ("push", "pull", "worker_cpu", "shard_cpu", "apply", "step_gap")}
    return apply_call_level(base, ratios, {"levels": levels, "ratios": ratios, "level": 1.8})


def base_profile():
    return profile(costs(1), costs(2), push_return_s=0.5e-3,
                   plain_pull_step_s=SizeCurve(((2 * KIB, 1e-3), (8 * 2**20, 2e-3))),
                   small_calls_by_shards={4: {"worker_push_s": 3e-3, "worker_pull_s": 2e-3, PLAIN_PULL_STEP: 1e-3,
                                              "worker_push_cpu_s": 1e-3}})


def test_every_per_call_figure_moves_by_its_figures_level_at_its_size():
    base = base_profile()
    leveled = checked(base)
    for (b, v0), (_, v) in zip(base.call_costs[1].worker_push_s.points, leveled.call_costs[1].worker_push_s.points):
        assert v == pytest.approx(v0 * ratio_at(LEVELS, b)), b
    # beyond the curves' counts, at the smallest size: the worker's figures and the plain pull's step
    r0 = ratio_at(LEVELS, base.call_costs[0].worker_push_s.lo_bytes)
    for name in ("worker_push_s", "worker_pull_s", PLAIN_PULL_STEP, "worker_push_cpu_s"):
        assert leveled.small_calls_by_shards[4][name] == pytest.approx(base.small_calls_by_shards[4][name] * r0), name
    assert leveled.push_return_s == pytest.approx(0.5e-3 * r0)
    # a plain pull's 2-shard step, read at its two-shard gradient
    for (b, v0), (_, v) in zip(base.plain_pull_step_s.points, leveled.plain_pull_step_s.points):
        assert v == pytest.approx(v0 * ratio_at(LEVELS, 2 * b)), b


def test_a_factor_of_one_changes_nothing_but_the_factor_is_read_per_figure():
    base = base_profile()
    same = scale_call_curves(base, lambda figure, nbytes: 1.0)
    assert same.call_costs == base.call_costs and same.small_calls_by_shards == base.small_calls_by_shards
    only_apply = scale_call_curves(base, lambda figure, nbytes: 2.0 if figure == "apply" else 1.0)
    assert only_apply.call_costs[0].worker_push_s == base.call_costs[0].worker_push_s
    assert [v for _, v in only_apply.call_costs[0].apply_s.points] == pytest.approx(
        [2 * v for _, v in base.call_costs[0].apply_s.points])


def test_the_simulated_family_reads_the_checked_profile_whole():
    base = profile(costs(1))
    leveled = checked(base, [[float(n), 2.0] for n in CHECK_SIZES])
    busy = config(workers=6, gradient_bytes=64 * KIB, compute={"mode": "spin", "seconds": 0.05})
    unrecorded = dataclasses.replace(leveled, call_level=None)  # the same curves without the check's record
    sim = ModelFamily.SIMULATED
    assert predict(busy, leveled, sim).push_s == pytest.approx(predict(busy, unrecorded, sim).push_s)
    assert predict(busy, leveled, sim).push_s > 1.5 * predict(busy, base, sim).push_s
