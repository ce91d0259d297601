"""The step reads' level of the runs' session (testbed.calibration.readlevel): the check's reads
against the curves, the curves moved to that level, the record, and a failed check."""

from __future__ import annotations

import json

import pytest

from testbed.calibration.readlevel import (
    CHECK_BYTES,
    CHECK_PAUSE_S,
    WAKE_RATIO_BOUNDS,
    ReadRound,
    apply_read_level,
    read_level_from_samples,
)
from testbed.model.profile import HardwareProfile
from testbed.report.profile_rows import profile_rows
from tests.unit.test_model_curves import costs as call_costs
from tests.unit.test_model_curves import profile
from tests.unit.test_step_reads import costs

KIB, MIB, US = 2**10, 2**20, 1e-6


def check_round(reads, order_hot: dict[str, float], order_paused: dict[str, float], n: int = 20) -> ReadRound:
    return ReadRound({o: [t] * n for o, t in order_hot.items()}, {o: [t] * n for o, t in order_paused.items()},
                     "o_direct")


def test_the_leveled_curves_read_the_checks_own_means_at_the_checked_cell():
    reads = costs()
    hot = {"sequential": 80 * US, "random": 120 * US}
    paused = {"sequential": 400 * US, "random": 700 * US}
    record = read_level_from_samples(reads, [check_round(reads, hot, paused)])
    leveled = apply_read_level(profile(call_costs(1), step_reads=reads), record).step_reads
    for order in ("sequential", "random"):
        assert leveled.read_s(order, CHECK_BYTES, 0.0) == pytest.approx(hot[order])
        assert leveled.read_s(order, CHECK_BYTES, CHECK_PAUSE_S) == pytest.approx(paused[order])


def test_the_shape_over_sizes_and_pauses_stays_the_calibrations():
    reads = costs()
    shifted = reads.at_level({"sequential": 30 * US}, {"sequential": 2.0})
    for nbytes in (4 * KIB, 256 * KIB, 1 * MIB):
        # the back-to-back read moves by the same seconds at every size (the device's latency)
        assert shifted.read_s("sequential", nbytes, 0.0) == pytest.approx(reads.read_s("sequential", nbytes, 0.0) + 30 * US)
        for pause in (0.005, 0.01, 0.05, 0.1, 1.0):
            wake = reads.read_s("sequential", nbytes, pause) - reads.read_s("sequential", nbytes, 0.0)
            # every pause's wake-up twice the calibration's, on the moved back-to-back read
            assert shifted.read_s("sequential", nbytes, pause) == pytest.approx(
                reads.read_s("sequential", nbytes, 0.0) + 30 * US + 2 * wake)
        # an order neither figure names stays as it was
        for pause in (0.0, 0.01, 0.1):
            assert shifted.read_s("random", nbytes, pause) == reads.read_s("random", nbytes, pause)
    # a shift larger than the read itself leaves it at 0, never below
    gone = reads.at_level({"random": -1.0}, {"random": 0.0})
    assert gone.read_s("random", 4 * KIB, 0.0) == 0.0 and gone.read_s("random", 4 * KIB, 0.1) == 0.0


def test_the_check_pools_its_rounds_and_bounds_the_wake_ratio():
    reads = costs()
    cal_hot = reads.read_s("sequential", CHECK_BYTES, 0.0)
    cal_wake = reads.read_s("sequential", CHECK_BYTES, CHECK_PAUSE_S) - cal_hot
    rounds = [check_round(reads, {"sequential": cal_hot}, {"sequential": cal_hot + 2 * cal_wake}),
              check_round(reads, {"sequential": cal_hot}, {"sequential": cal_hot + 4 * cal_wake})]
    record = read_level_from_samples(reads, rounds)
    seq = record["orders"]["sequential"]
    assert seq["reads"] == [40, 40] and seq["wake_ratio"] == pytest.approx(3.0)  # the pooled mean's
    assert seq["hot_shift_s"] == pytest.approx(0.0)
    assert "random" not in record["orders"]  # not read: left out, its curves stay
    assert record["rounds"] == 2 and record["pause_s"] == CHECK_PAUSE_S and record["bytes"] == CHECK_BYTES
    # a broken round's wake-up is taken as the bound
    wild = read_level_from_samples(reads, [check_round(reads, {"sequential": cal_hot}, {"sequential": 1.0})])
    assert wild["orders"]["sequential"]["wake_ratio"] == WAKE_RATIO_BOUNDS[1]
    none = read_level_from_samples(reads, [check_round(reads, {"sequential": cal_hot}, {"sequential": 0.0})])
    assert none["orders"]["sequential"]["wake_ratio"] == WAKE_RATIO_BOUNDS[0]


def test_a_curve_without_a_wake_up_is_only_shifted():
    flat = costs().at_level({}, {"sequential": 0.0, "random": 0.0})  # every wake-up 0
    record = read_level_from_samples(flat, [check_round(flat, {"sequential": 60 * US}, {"sequential": 500 * US})])
    assert record["orders"]["sequential"]["wake_ratio"] == 1.0


def test_the_record_is_kept_saved_and_shown(tmp_path):
    from testbed.model.profile import load_profile, save_profile
    from testbed.records.atomic import atomic_write_text
    reads = costs()
    record = read_level_from_samples(reads, [check_round(reads, {"sequential": 80 * US, "random": 90 * US},
                                                         {"sequential": 400 * US, "random": 500 * US})])
    leveled = apply_read_level(profile(call_costs(1), step_reads=reads), record)
    assert {k: v for k, v in leveled.read_level.items() if k != "calibrated_curves"} == record
    # the calibration's curves kept beside it: the folder can be re-predicted without the check
    from testbed.calibration.readlevel import without_read_level
    assert without_read_level(leveled).step_reads == reads and without_read_level(leveled).read_level is None
    save_profile(leveled, tmp_path / "p.json", atomic_write_text)
    again = load_profile(tmp_path / "p.json")
    assert again.read_level == json.loads(json.dumps(leveled.read_level)) and again.step_reads == leveled.step_reads
    rows = dict(profile_rows(leveled))
    label = f"step reads' level of the runs' session (checked {record['measured']}): sequential"
    assert rows[label].startswith("back to back 80 us (calibrated 50), after 20 ms 400 us (calibrated ")
    assert "wake-ups x" in rows[label]
    # a profile without step-read curves keeps the record only
    bare = apply_read_level(profile(call_costs(1)), record)
    assert bare.step_reads is None and bare.read_level == record
    assert without_read_level(bare).read_level is None
    # profiles saved before the field load as before
    assert HardwareProfile.from_dict({k: v for k, v in again.to_dict().items() if k != "read_level"}).read_level is None


def test_a_failed_round_keeps_the_calibrations_curves_and_says_why():
    from testbed.cli.validate import ReadCheck
    reads = costs()
    base = profile(call_costs(1), step_reads=reads)
    said: list[str] = []

    def broken(directory, **kw):
        raise OSError("No space left on device")
    check = ReadCheck("/data", base, said.append, measure=broken)
    check.round(0)
    after = check.finish(base, 3)
    assert after.step_reads == reads
    assert after.read_level["failed"] == "OSError: No space left on device"
    assert any("warning: the step reads' level check failed" in s for s in said)
    rows = dict(profile_rows(after))
    assert any("check failed (OSError: No space left on device)" in v for v in rows.values())


def test_rounds_the_call_check_did_not_reach_are_made_before_the_level_is_taken():
    from testbed.cli.validate import ReadCheck
    reads = costs()
    base = profile(call_costs(1), step_reads=reads)
    made: list[str] = []

    def probe(directory, **kw):
        made.append(directory)
        return check_round(reads, {"sequential": 60 * US}, {"sequential": 300 * US})
    check = ReadCheck("/data", base, lambda s: None, measure=probe)
    check.round(0)  # the call check stopped after one round (a profile without call curves: none)
    after = check.finish(base, 3)
    assert made == ["/data"] * 3 and after.read_level["rounds"] == 3
    # recorded, not applied: the calibration's curves predict (held out twice, applied lost)
    assert after.step_reads == reads and after.read_level["applied"] is False
    assert after.read_level["orders"]["sequential"]["paused_s"] == pytest.approx(300 * US)
    rows = dict(profile_rows(after))
    label = f"step reads' level of the runs' session (checked {after.read_level['measured']}): sequential"
    assert "recorded, not applied" in rows[label]
    # and a folder's profile can be re-predicted with it
    leveled = apply_read_level(after, after.read_level).step_reads
    assert leveled.read_s("sequential", CHECK_BYTES, CHECK_PAUSE_S) == pytest.approx(300 * US)
