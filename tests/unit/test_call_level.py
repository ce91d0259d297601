"""The session's per-call level (testbed.calibration.level): ratios from the check's runs
against the curves, read between the checked sizes, and the profile scaled by them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from testbed.calibration.costs import RunPoint
from testbed.calibration.level import CHECK_SIZES, apply_call_level, level_from_points, ratio_at
from testbed.model.profile import HardwareProfile, profile_text
from testbed.report.profile_rows import profile_rows
from tests.unit.test_model_curves import KIB, MIB, costs, profile


def point(c, nbytes: int, factor: float, steps: int = 40) -> RunPoint:
    """What a check run at ``nbytes`` measures on a machine ``factor`` times the curves' ``c``."""
    b = float(nbytes)
    worker = steps * (c.worker_push_cpu_s.at(b) + c.worker_pull_cpu_s.at(b))
    shard = steps * (c.shard_push_cpu_s.at(b) + c.shard_pull_cpu_s.at(b))
    return RunPoint(nbytes, 1, steps, steps, steps, c.worker_push_s.at(b) * factor, c.worker_pull_s.at(b) * factor,
                    c.apply_s.at(b) * factor, c.step_gap_s.at(b) * factor, worker * factor, shard * factor)


def test_ratios_are_measured_over_calibrated_for_every_figure():
    one = costs(1)
    factors = {4 * KIB: 1.5, 512 * KIB: 1.2, 8 * MIB: 0.9}
    ratios = level_from_points([point(one, n, f) for n, f in factors.items()], one)
    for figure, rows in ratios.items():
        assert [r[0] for r in rows] == [float(n) for n in CHECK_SIZES], figure
        assert [r[1] for r in rows] == pytest.approx(list(factors.values())), figure


def test_the_checks_rounds_give_each_figure_its_median_ratio_at_each_size():
    from testbed.calibration.level import median_ratios
    one = costs(1)
    rounds = [{4 * KIB: 1.5, 512 * KIB: 1.0, 8 * MIB: 0.83},  # one round off at both ends
              {4 * KIB: 0.97, 512 * KIB: 0.95, 8 * MIB: 1.07},
              {4 * KIB: 1.01, 512 * KIB: 1.14, 8 * MIB: 1.27}]
    by_round = [level_from_points([point(one, n, f) for n, f in r.items()], one) for r in rounds]
    ratios = median_ratios(by_round)
    for figure, rows in ratios.items():
        assert [r[0] for r in rows] == [float(n) for n in CHECK_SIZES], figure
        assert [r[1] for r in rows] == pytest.approx([1.01, 1.0, 1.07]), figure
    assert median_ratios(by_round[:1]) == by_round[0]  # one round: as it is
    assert median_ratios([]) == {}


def test_a_broken_check_run_is_bounded():
    one = costs(1)
    ratios = level_from_points([point(one, 4 * KIB, 50.0), point(one, 8 * MIB, 0.001)], one)
    assert ratios["push"][0][1] == pytest.approx(3.0) and ratios["push"][1][1] == pytest.approx(1 / 3)


def test_ratio_is_linear_in_log_bytes_between_checked_sizes_and_flat_past_them():
    rows = [[4.0 * KIB, 2.0], [4.0 * MIB, 1.0]]
    assert ratio_at(rows, 1024) == 2.0 and ratio_at(rows, 64 * MIB) == 1.0
    assert ratio_at(rows, 128 * KIB) == pytest.approx(1.5)  # halfway in log bytes
    assert ratio_at([], 4096) == 1.0


def test_the_profile_is_scaled_at_every_shard_count_and_keeps_the_record():
    base = profile(costs(1), costs(2), small_calls_by_shards={4: {"worker_push_s": 2e-3, "worker_pull_s": 1e-3,
                                                                  "worker_push_cpu_s": 1e-3, "worker_pull_cpu_s": 5e-4}})
    ratios = {"push": [[4.0 * KIB, 2.0], [8.0 * MIB, 1.0]], "shard_cpu": [[4.0 * KIB, 0.5], [8.0 * MIB, 0.5]]}
    scaled = apply_call_level(base, ratios, {"measured": "now", "ratios": ratios})
    for old, new in zip(base.call_costs, scaled.call_costs):
        assert new.worker_push_s.at(4 * KIB) == pytest.approx(2 * old.worker_push_s.at(4 * KIB))
        assert new.worker_push_s.at(32 * MIB) == pytest.approx(old.worker_push_s.at(32 * MIB))
        lo = new.shard_pull_cpu_s.lo_bytes
        assert new.shard_pull_cpu_s.at(lo) == pytest.approx(0.5 * old.shard_pull_cpu_s.at(lo))
        assert new.worker_pull_s == old.worker_pull_s and new.apply_s == old.apply_s  # not checked: unchanged
    assert scaled.small_calls_by_shards[4]["worker_push_s"] == pytest.approx(4e-3)
    # the large pair is scaled at its own size: the push ratio at 8 MiB is 1 there
    big = dataclasses.replace(base, large_calls_by_shards={4: {"worker_push_s": 9e-3}}, large_calls_bytes=8 * MIB)
    assert apply_call_level(big, ratios, {"ratios": ratios}).large_calls_by_shards[4]["worker_push_s"] == pytest.approx(9e-3)
    # and the larger pair at its own: halfway in log bytes between 4 KiB and 8 MiB, x1.5
    bigger = dataclasses.replace(base, larger_calls_by_shards={4: {"worker_push_s": 9e-3}},
                                 larger_calls_bytes=int(2 ** ((12 + 23) / 2)))
    assert apply_call_level(bigger, ratios, {"ratios": ratios}).larger_calls_by_shards[4]["worker_push_s"] \
        == pytest.approx(1.5 * 9e-3)
    # a plain push's answer is a small call: the push figure's level at the smallest size
    answered = apply_call_level(dataclasses.replace(base, push_return_s=0.5e-3), ratios, {"ratios": ratios})
    assert answered.push_return_s == pytest.approx(1e-3)
    assert apply_call_level(base, ratios, {"ratios": ratios}).push_return_s is None
    assert scaled.small_calls_by_shards[4]["worker_pull_s"] == pytest.approx(1e-3)
    # a plain pull's step per shard is a pull figure, read at its slice's gradient at two shards
    from testbed.model.curves import SizeCurve
    stepped = dataclasses.replace(base, plain_pull_step_s=SizeCurve(((2.0 * KIB, 1e-3), (4.0 * MIB, 2e-3))))
    pulled = {"pull": [[4.0 * KIB, 3.0], [8.0 * MIB, 1.5]]}
    # (x3 at 4 KiB; x1.5 at 8 MiB)
    assert [v for _, v in apply_call_level(stepped, pulled, {"ratios": pulled}).plain_pull_step_s.points] == \
        pytest.approx([3e-3, 3e-3])
    assert apply_call_level(stepped, ratios, {"ratios": ratios}).plain_pull_step_s == stepped.plain_pull_step_s
    # saved and loaded with the profile, and shown in its table
    again = HardwareProfile.from_dict(json.loads(profile_text(scaled)))
    assert again.call_level["ratios"]["push"][0] == [4.0 * KIB, 2.0]
    rows = dict(profile_rows(again))
    assert rows["per-call level of the runs' session (checked now): push"] == "4 KiB: x2.00; 8 MiB: x1.00"


def test_the_session_level_is_the_median_of_every_ratio_and_is_shown():
    from testbed.calibration.level import session_level
    ratios = {"push": [[4096.0, 1.5], [8.0 * MIB, 2.03]], "pull": [[4096.0, 1.36], [8.0 * MIB, 0.9]],
              "apply": [[4096.0, 1.0]]}
    assert session_level(ratios) == pytest.approx(1.36)
    assert session_level({}) == 1.0
    base = profile(costs(1))
    level = session_level(ratios)
    applied = {f: [[b, level] for b, _ in rows] for f, rows in ratios.items()}
    scaled = apply_call_level(base, applied, {"measured": "now", "ratios": ratios, "level": level})
    # every curve the applied figures name moves by the one level at every size
    for b in (4 * KIB, 512 * KIB, 32 * MIB):
        assert scaled.call_costs[0].worker_push_s.at(b) == pytest.approx(1.36 * base.call_costs[0].worker_push_s.at(b))
    rows = dict(profile_rows(scaled))
    assert rows["per-call level of the runs' session (checked now): applied to every per-call curve"] == "x1.36"
    assert rows["per-call level of the runs' session (checked now): push"] == "4 KiB: x1.50; 8 MiB: x2.03"


def test_a_failed_check_is_kept_in_the_profile_and_shown():
    from testbed.cli.validate import profile_at_session_level

    def broken(profile, say, repeats, after_round=None):
        raise RuntimeError("the actor died")
    said = []
    base = profile(costs(1))
    after = profile_at_session_level(base, said.append, measure=broken)
    assert after.call_costs == base.call_costs  # predicted at the profile's own level
    assert after.call_level["failed"] == "RuntimeError: the actor died"
    assert any(line.startswith("warning: the per-call level check failed") for line in said)
    rows = dict(profile_rows(HardwareProfile.from_dict(json.loads(profile_text(after)))))
    [(label, text)] = [(k, v) for k, v in rows.items() if k.startswith("per-call level")]
    assert "check failed (RuntimeError: the actor died)" in text and "the calibration's level" in text
    # a profile already checked by an earlier folder: its level is the one predicted at, and said
    checked = dataclasses.replace(base, call_level={"measured": "then", "ratios": {}, "level": 1.4})
    again = profile_at_session_level(checked, said.append, measure=broken)
    assert again.call_level["carried_level"] == 1.4
    # failing again on that folder's profile still says the level it carries
    assert profile_at_session_level(again, said.append, measure=broken).call_level["carried_level"] == 1.4
    assert any("earlier check, x1.40" in v for k, v in profile_rows(again) if k.startswith("per-call level"))
    # a profile an earlier check scaled by size: failing on it says the levels by size it carries
    by_size = dataclasses.replace(base, call_level={"measured": "then", "ratios": {}, "level": 1.1,
                                                    "levels": [[4096.0, 0.66], [8.0 * MIB, 1.39]]})
    failed = profile_at_session_level(by_size, said.append, measure=broken)
    assert failed.call_level["carried_levels"] == [[4096.0, 0.66], [8.0 * MIB, 1.39]]
    again = profile_at_session_level(failed, said.append, measure=broken)
    assert any("earlier check, by size (4 KiB: x0.66; 8 MiB: x1.39)" in v
               for k, v in profile_rows(again) if k.startswith("per-call level"))


def test_the_level_goes_by_size_only_where_the_sizes_run_one_way():
    from testbed.calibration.level import session_level, size_levels
    # a session whose small calls moved more than its large ones: each size's median, applied
    rising = {"push": [[4096.0, 0.5], [512.0 * KIB, 0.8], [8.0 * MIB, 1.5]],
              "pull": [[4096.0, 0.6], [512.0 * KIB, 0.9], [8.0 * MIB, 1.4]],
              "apply": [[4096.0, 0.55], [512.0 * KIB, 0.7], [8.0 * MIB, 1.6]]}
    assert size_levels(rising) == [[4096.0, 0.55], [512.0 * KIB, 0.8], [8.0 * MIB, 1.5]]
    falling = {f: [[b, 2.0 / r] for b, r in rows] for f, rows in rising.items()}
    assert [v for _, v in size_levels(falling)] == pytest.approx([2 / 0.55, 2 / 0.8, 2 / 1.5])
    # one size disturbed (up, then down again): the one level at every size
    bumpy = {"push": [[4096.0, 1.5], [512.0 * KIB, 2.03], [8.0 * MIB, 1.36]],
             "pull": [[4096.0, 1.4], [512.0 * KIB, 1.9], [8.0 * MIB, 1.3]]}
    one = session_level(bumpy)
    assert size_levels(bumpy) == [[4096.0, one], [512.0 * KIB, one], [8.0 * MIB, one]]
    assert size_levels({}) == []
    # applied by size, read between the sizes in log bytes, and shown by size
    base = profile(costs(1))
    levels = size_levels(rising)
    scaled = apply_call_level(base, {f: levels for f in rising},
                              {"measured": "now", "ratios": rising, "level": session_level(rising), "levels": levels})
    c0, c1 = base.call_costs[0], scaled.call_costs[0]
    assert c1.worker_push_s.at(4 * KIB) == pytest.approx(0.55 * c0.worker_push_s.at(4 * KIB))
    assert c1.worker_pull_s.at(32 * MIB) == pytest.approx(1.5 * c0.worker_pull_s.at(32 * MIB))
    assert 0.55 < c1.apply_s.at(64 * KIB) / c0.apply_s.at(64 * KIB) < 0.8
    rows = dict(profile_rows(scaled))
    [text] = [v for k, v in rows.items() if "by size" in k]
    assert text == "4 KiB: x0.55; 512 KiB: x0.80; 8 MiB: x1.50"


def _checked(base, level, when="then"):
    return dataclasses.replace(base, call_level={"measured": when, "ratios": {"push": [[4096.0, level]]},
                                                 "level": level, "levels": [[4096.0, level]]})


def test_the_level_after_the_runs_is_recorded_beside_the_one_predicted_at_not_applied():
    from testbed.calibration.level import level_drift, with_level_after
    base = profile(costs(1))
    before = _checked(base, 1.34)
    after = {"measured": "later", "ratios": {"push": [[4096.0, 0.9]]}, "level": 0.9, "levels": [[4096.0, 0.9]],
             "repeats": 1, "runs": [{"push_s": 1e-3}], "ratios_by_round": [{}]}
    kept = with_level_after(before, after)
    assert kept.call_costs == before.call_costs  # recorded, not applied
    assert kept.call_level["level"] == 1.34 and kept.call_level["after"]["level"] == 0.9
    assert "runs" not in kept.call_level["after"] and "ratios_by_round" not in kept.call_level["after"]
    assert level_drift(kept.call_level) == pytest.approx(0.9 / 1.34)
    # and it rides the profile's round trip and its table
    again = HardwareProfile.from_dict(json.loads(profile_text(kept)))
    rows = dict(profile_rows(again))
    assert rows["per-call level after the runs (checked later)"] == \
        "x0.90 of the calibration's (1 round; recorded, not applied; before them x1.34, moved x0.67 while the configs ran)"
    # no drift without both levels
    assert level_drift(None) is None and level_drift(before.call_level) is None
    failed_before = dataclasses.replace(base, call_level={"measured": "then", "failed": "no Ray"})
    assert level_drift(with_level_after(failed_before, after).call_level) is None
    # a failed check before the runs still shows the one after them, without a drift
    assert dict(profile_rows(with_level_after(failed_before, after)))[
        "per-call level after the runs (checked later)"] == "x0.90 of the calibration's (1 round; recorded, not applied)"
    assert level_drift(with_level_after(before, {"measured": "later", "failed": "x"}).call_level) is None


def test_the_check_after_the_runs_measures_against_the_calibration_and_warns_on_drift():
    from testbed.cli.validate import DRIFT_BOUNDS, level_after_runs
    base = profile(costs(1))
    before = _checked(base, 1.0)
    seen = []

    def measure_at(level):
        def measure(prof, say, repeats, after_round=None):
            seen.append((prof, repeats))
            return _checked(prof, level, "later")
        return measure
    said = []
    steady = level_after_runs(before, base, said.append, measure=measure_at(1.1))
    assert seen[-1] == (base, 1)  # one round, against the calibrated curves (not the leveled ones)
    assert steady.call_level["after"]["level"] == 1.1
    # the runs predicted at their span's level: every curve at the two checks' geometric mean
    assert steady.call_level["span"]["level"] == pytest.approx(1.1 ** 0.5)
    for got, was in zip(steady.call_costs, before.call_costs):
        for (b, v), (b0, v0) in zip(got.worker_push_s.points, was.worker_push_s.points):
            assert b == b0 and v == pytest.approx(v0 * 1.1 ** 0.5)
    assert any("moved x1.10" in line and "span's x1.05" in line for line in said)
    assert not any(line.startswith("warning") for line in said)
    said.clear()
    moved = level_after_runs(before, base, said.append, measure=measure_at(DRIFT_BOUNDS[0] * 0.9))
    assert moved.call_level["after"]["level"] == pytest.approx(DRIFT_BOUNDS[0] * 0.9)
    assert any(line.startswith("warning: the machine's per-call cost moved x0.68") for line in said)


def test_a_failed_check_after_the_runs_loses_nothing_and_is_shown():
    from testbed.cli.validate import level_after_runs

    def broken(profile, say, repeats, after_round=None):
        raise RuntimeError("the actor died")
    said = []
    before = _checked(profile(costs(1)), 1.2)
    kept = level_after_runs(before, profile(costs(1)), said.append, measure=broken)
    assert kept.call_costs == before.call_costs and kept.call_level["level"] == 1.2
    assert kept.call_level["after"]["failed"] == "RuntimeError: the actor died"
    assert any(line.startswith("warning: the per-call level check after the runs failed") for line in said)
    rows = dict(profile_rows(kept))
    [text] = [v for k, v in rows.items() if k.startswith("per-call level after the runs")]
    assert text == "check failed (RuntimeError: the actor died)"


def test_the_held_out_section_says_how_far_the_machine_moved_while_the_configs_ran():
    from testbed.calibration.level import with_level_after
    from testbed.report.comparison import _drift_text
    before = _checked(profile(costs(1)), 1.34)
    assert _drift_text(before) == "" and _drift_text(None) == ""
    moved = with_level_after(before, {"measured": "later", "level": 0.9, "ratios": {}})
    text = _drift_text(moved)
    assert "read x1.34 of the calibration's" in text and "x0.90" in text and "moved x0.67" in text
    assert "predicted at the first" in text
    from testbed.calibration.level import at_span_level
    spanned = at_span_level(with_level_after(before, {"measured": "later", "level": 0.9, "levels": [[4096.0, 0.9]]}))
    assert "predicted at their span's level, x1.10" in _drift_text(spanned)


def test_the_runs_are_predicted_at_the_geometric_mean_of_the_checks_size_by_size():
    from testbed.calibration.level import FIGURES, at_span_level, span_levels, with_level_after
    base = profile(costs(1))
    before_levels, after_levels = [[4096.0, 1.44], [8.0 * MIB, 0.81]], [[4096.0, 1.0], [8.0 * MIB, 1.0]]
    assert span_levels(before_levels, after_levels) == [[4096.0, pytest.approx(1.2)], [8.0 * MIB, pytest.approx(0.9)]]
    before = apply_call_level(base, {f: before_levels for f in FIGURES},
                              {"measured": "then", "ratios": {"push": before_levels}, "level": 1.1, "levels": before_levels})
    after = {"measured": "later", "ratios": {"push": after_levels}, "level": 1.0, "levels": after_levels}
    span = at_span_level(with_level_after(before, after))
    want = apply_call_level(base, {f: span_levels(before_levels, after_levels) for f in FIGURES})
    for got, ref in zip(span.call_costs, want.call_costs):
        for name in ("worker_push_s", "worker_pull_s", "shard_push_cpu_s", "apply_s"):
            for (b, v), (b0, v0) in zip(getattr(got, name).points, getattr(ref, name).points):
                assert b == b0 and v == pytest.approx(v0), (name, b)
    assert span.call_level["span"]["level"] == pytest.approx(1.1 ** 0.5)
    assert span.call_level["level"] == 1.1 and span.call_level["after"]["level"] == 1.0  # both checks kept
    rows = dict(profile_rows(HardwareProfile.from_dict(json.loads(profile_text(span)))))
    assert rows["per-call level of the runs' session (checked then): the level before the runs, by size "
                "(the sizes' medians run one way)"] == "4 KiB: x1.44; 8 MiB: x0.81"
    assert rows["per-call level of the runs' span (the geometric mean of the checks before and after them): "
                "applied to every per-call curve, by size"] == "4 KiB: x1.20; 8 MiB: x0.90"
    assert "one end of the runs' span" in rows["per-call level after the runs (checked later)"]
    # either check failed: the level before stands (or the calibration's), nothing is scaled
    for kept in (at_span_level(with_level_after(before, {"measured": "later", "failed": "x"})),
                 at_span_level(with_level_after(dataclasses.replace(base, call_level={"failed": "no Ray"}), after)),
                 at_span_level(before)):
        assert "span" not in kept.call_level
        assert kept.call_costs in (before.call_costs, base.call_costs)
