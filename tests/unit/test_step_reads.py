"""The paused-read curves: the profile field, its interpolation, the read term that uses it,
the calibration's arithmetic and the probe's plain class."""

from __future__ import annotations

import dataclasses
import json

import pytest

from actors.readprobe import ReadProbe
from testbed.calibration.reads import BATCH_SAMPLES, PAUSED_BYTES, SIZES_BYTES, step_reads_from_sweep, sweep_cells
from testbed.model import predict
from testbed.model.curves import SizeCurve
from testbed.model.profile import HardwareProfile, load_profile, save_profile
from testbed.model.reads import PausedReadCurve, StepReadCosts, coerce_step_reads
from testbed.model.terms import step_terms
from testbed.records.atomic import atomic_write_text
from tests import factories

KIB, MIB, US = 2**10, 2**20, 1e-6


def costs(**fields) -> StepReadCosts:
    """Sequential reads: 50 us + 0.25 us per KiB back to back, 100 us more after 10 ms, 300 us
    more after 100 ms; random reads 10 us slower than those."""
    def curve(base_s: float) -> SizeCurve:
        return SizeCurve(((4 * KIB, base_s + 1 * US), (1 * MIB, base_s + 256 * US)))
    curves = [PausedReadCurve(order, pause, curve(49 * US + extra + (10 * US if order == "random" else 0)))
              for order in ("sequential", "random") for pause, extra in ((0.0, 0.0), (0.01, 100 * US), (0.1, 300 * US))]
    return StepReadCosts(tuple(curves), **fields)


def reading(**fields):
    base = dict(workload={"steps": 10, "dataset_bytes": 64 * MIB, "sample_bytes": 4 * KIB, "minibatch": 8},
                data={"step_reads": "sequential"}, compute={"seconds": 0.01})
    for key, value in fields.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return factories.config_fields(**base)


def test_a_read_is_exact_at_the_measured_points_and_linear_between():
    c = costs()
    assert c.read_s("sequential", 4 * KIB, 0.0) == pytest.approx(50 * US)
    assert c.read_s("sequential", 1 * MIB, 0.1) == pytest.approx(605 * US)
    # linear in bytes (half way between 4 KiB and 1 MiB) and in the pause (half way to 10 ms)
    mid = (4 * KIB + 1 * MIB) / 2
    assert c.read_s("sequential", mid, 0.0) == pytest.approx((50 + 305) / 2 * US)
    assert c.read_s("random", 4 * KIB, 0.005) == pytest.approx(110 * US)
    # flat in the pause beyond the longest measured, and the shortest below it
    assert c.read_s("random", 4 * KIB, 1.0) == c.read_s("random", 4 * KIB, 0.1)
    # along the end segment in bytes beyond the largest size (a block at a time)
    assert c.read_s("sequential", 2 * MIB, 0.0) > c.read_s("sequential", 1 * MIB, 0.0)


def test_a_steps_read_is_one_range_in_order_and_one_paused_sample_then_a_stream_at_random():
    c = costs()
    assert c.step_read_s("sequential", 4 * KIB, 8, 0.01) == pytest.approx(c.read_s("sequential", 32 * KIB, 0.01))
    first, rest = c.read_s("random", 4 * KIB, 0.01), c.read_s("random", 4 * KIB, 0.0)
    assert c.step_read_s("random", 4 * KIB, 8, 0.01) == pytest.approx(first + 7 * rest)


def test_an_order_never_measured_reads_the_other_ones_curves():
    only_seq = StepReadCosts(tuple(x for x in costs().curves if x.order == "sequential"))
    assert only_seq.read_s("random", 4 * KIB, 0.01) == only_seq.read_s("sequential", 4 * KIB, 0.01)


@pytest.mark.parametrize("bad, message", [
    (dict(curves=()), "at least one"),
    (dict(curves=(PausedReadCurve("sequential", 0.0, SizeCurve(((4096, 1e-4),))),) * 2), "twice"),
])
def test_bad_step_read_costs_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        StepReadCosts(**bad)


@pytest.mark.parametrize("order, pause", [("strided", 0.0), ("random", -1.0), ("random", float("inf"))])
def test_a_bad_curve_is_refused(order, pause):
    with pytest.raises(ValueError, match="paused read curve"):
        PausedReadCurve(order, pause, SizeCurve(((4096, 1e-4),)))


def test_the_profile_field_round_trips_through_json(tmp_path):
    p = factories.profile(step_reads=costs(directory="data"))
    path = save_profile(p, tmp_path / "p.json", atomic_write_text)
    saved = json.loads(path.read_text())
    assert saved["step_reads"]["curves"][0]["read_s"]["points"]
    back = load_profile(path)
    assert back == p and isinstance(back.step_reads, StepReadCosts)
    assert coerce_step_reads(saved["step_reads"]) == p.step_reads
    with pytest.raises(TypeError, match="step_reads"):
        coerce_step_reads([1, 2])


def test_a_profile_from_before_the_curves_loads_and_predicts_reads_as_it_did():
    old = factories.profile().to_dict()
    del old["step_reads"]  # written by a testbed without the field
    p = HardwareProfile.from_dict(json.loads(json.dumps(old)))
    assert p.step_reads is None
    t = step_terms(reading(), p)
    assert t.read_s == pytest.approx(32 * KIB / 1e6)  # the bytes at the single-stream bandwidth
    assert t.read_rate_multipliers == (1.0, 1.5, 1.75, 2.0)


def test_the_read_term_reads_the_curves_at_the_steps_own_pause():
    p = factories.profile(step_reads=costs())
    t = step_terms(reading(), p)
    # the rest of the step: compute, then the push and the pull (1 ms each alone on this profile)
    pause = t.compute_s + t.worker_extra_s + t.push_transfer_s + t.push_service_s \
        + (t.pull_transfer_s + t.pull_service_s) / t.pull_every
    assert pause > t.compute_s
    assert t.read_s == pytest.approx(p.step_reads.step_read_s("sequential", 4 * KIB, 8, pause))
    assert t.read_rate_multipliers == (1.0, 1.5, 1.75, 2.0)  # concurrent readers still share B(j)
    longer = step_terms(reading(compute={"seconds": 0.05}), p)
    assert longer.read_s > t.read_s  # a longer pause wakes a sleepier disk
    rand = step_terms(reading(data={"step_reads": "random"}), p)
    assert rand.read_rate_multipliers == (1.0,)
    assert rand.read_s == pytest.approx(p.step_reads.step_read_s("random", 4 * KIB, 8, pause))


def test_the_curves_need_no_disk_figures_and_no_reads_cost_nothing():
    p = factories.profile(disk=None, step_reads=costs())
    assert step_terms(reading(), p).read_s > 0
    assert step_terms(reading(data={"step_reads": "none"}), p).read_s == 0


@pytest.mark.parametrize("family", ["initial", "updated", "queueing", "simulated"])
def test_every_family_predicts_one_workers_read_from_the_curves(family):
    cfg = reading(data={"step_reads": "random"})
    p = factories.profile(step_reads=costs())
    assert predict(cfg, p, family).read_s == pytest.approx(step_terms(cfg, p).read_s, rel=0.02)
    assert predict(cfg, p, family).read_s == pytest.approx(costs().step_read_s("random", 4 * KIB, 8, 0.013), rel=0.05)
    # without the curves, the family predicts what it did: the bytes at the disk's bandwidth
    old = predict(cfg, dataclasses.replace(p, step_reads=None), family).read_s
    assert old == pytest.approx(32 * KIB / 1e6, rel=0.02)


def test_the_sweep_makes_each_pauses_curve_the_back_to_back_one_plus_the_wake_up():
    hot_cells, paused_cells = sweep_cells((0.005, 0.1))
    assert len(hot_cells) == 2 * len(SIZES_BYTES) + 1 and all(n == PAUSED_BYTES for _, n, _ in paused_cells)
    assert hot_cells[-1] == ("random", PAUSED_BYTES, BATCH_SAMPLES)
    hot_s = [[(50 + i) * US] * 3 for i in range(len(hot_cells) - 1)]
    hot_s.append([(53 + 7 * 40) * US] * 3)  # 8 random samples of 4 KiB: the single one's 53 us, then 40 us each
    # sequential 4 KiB after 5 ms: 80 us; after 100 ms 200 us; random: 40 us (below back to back: no wake-up)
    means = {("sequential", 0.005): 80, ("sequential", 0.1): 200, ("random", 0.005): 40, ("random", 0.1): 300}
    paused_s = [[means[o, p] * US, means[o, p] * US] for o, _, p in paused_cells]
    c = step_reads_from_sweep(hot_cells, hot_s, paused_cells, paused_s, block_bytes=MIB, directory="d")
    assert c.read_s("sequential", 4 * KIB, 0.0) == pytest.approx(50 * US)
    assert c.read_s("sequential", 4 * KIB, 0.005) == pytest.approx(80 * US)
    assert c.read_s("sequential", 1 * MIB, 0.1) == pytest.approx((52 + 150) * US)
    random_4k = 50 + len(SIZES_BYTES)
    assert c.read_s("random", 4 * KIB, 0.005) == pytest.approx(random_4k * US)
    assert c.read_s("random", 4 * KIB, 0.1) == pytest.approx(300 * US)
    assert len(c.curves) == 2 * 3 and c.source.startswith("testbed-reader")
    # the reader's own work once per step read: 53 us a single sample, of which 40 us the sample
    assert c.step_overhead_s == pytest.approx(13 * US)
    assert c.step_read_s("random", 4 * KIB, 8, 0.1) == pytest.approx((300 + 7 * 40) * US)
    # a sequential step read is one contiguous read: no later samples, nothing taken off
    assert c.step_read_s("sequential", 4 * KIB, 8, 0.0) == pytest.approx(c.read_s("sequential", 32 * KIB, 0.0))


def test_the_step_overhead_is_the_single_reads_rest_and_stays_within_it():
    from testbed.calibration.reads import step_overhead
    assert step_overhead([100 * US] * 4, [(100 + 7 * 70) * US] * 4, 8) == pytest.approx(30 * US)
    # a batch no dearer than the single read (noise): the single read is all the step's own work
    assert step_overhead([100 * US], [90 * US], 8) == pytest.approx(100 * US)
    # samples dearer alone than the single read: no overhead, never negative
    assert step_overhead([100 * US], [(100 + 7 * 150) * US], 8) == 0.0
    assert step_overhead([], [1e-3], 8) == 0.0 and step_overhead([1e-4], [1e-3], 1) == 0.0


def test_a_profile_before_version_28_takes_nothing_off_and_a_bad_overhead_is_refused():
    old = costs()
    assert old.step_overhead_s == 0.0
    assert old.step_read_s("random", 4 * KIB, 8, 0.0) == pytest.approx(8 * old.read_s("random", 4 * KIB, 0.0))
    newer = dataclasses.replace(old, step_overhead_s=old.read_s("random", 4 * KIB, 0.0) / 2)
    assert newer.step_read_s("random", 4 * KIB, 8, 0.0) == pytest.approx(4.5 * old.read_s("random", 4 * KIB, 0.0))
    # saved and loaded as a dict
    assert coerce_step_reads(dataclasses.asdict(newer)).step_overhead_s == newer.step_overhead_s
    with pytest.raises(ValueError, match="step_overhead_s"):
        dataclasses.replace(old, step_overhead_s=-1e-6)


def test_the_probe_times_paused_reads_from_its_own_file_and_removes_it(tmp_path):
    hot_cells = [("sequential", 4 * KIB), ("random", 64 * KIB), ("random", 64 * KIB, 8)]
    paused_cells = [("random", 4 * KIB, 0.001)]
    hot, paused, mode = ReadProbe().sweep_s(str(tmp_path), 4 * MIB, hot_cells, paused_cells, hot_repeats=5,
                                            rounds=4)
    assert mode in ("o_direct", "fadvise")
    assert [len(x) for x in hot] == [5, 5, 5] and [len(x) for x in paused] == [4]
    # eight random samples of 64 KiB a step read take longer than one
    assert sum(hot[2]) > sum(hot[1])
    assert all(s > 0 for xs in hot + paused for s in xs)
    assert list(tmp_path.iterdir()) == []
    # spinning in the pause instead of sleeping: the same reads
    _, spun, _ = ReadProbe().sweep_s(str(tmp_path), 2 * MIB, [], [("sequential", 32 * KIB, 0.001)], hot_repeats=1,
                                     rounds=3, pause_kind="spin", passes=1)
    assert len(spun[0]) == 3 and min(spun[0]) > 0
    with pytest.raises(ValueError, match="pause_kind"):
        ReadProbe().sweep_s(str(tmp_path), 2 * MIB, [], [], hot_repeats=1, rounds=1, pause_kind="nap")


def test_a_longer_pause_never_gets_a_smaller_wake_up():
    from testbed.calibration.reads import monotone_in_pause
    assert monotone_in_pause([(0.005, 80e-6, 30), (0.02, 120e-6, 30), (0.1, 250e-6, 30)]) == [80e-6, 120e-6, 250e-6]
    # a tail read lifted the 20 ms mean above the 100 ms one: the two share their reads' mean
    pooled = monotone_in_pause([(0.1, 240e-6, 10), (0.005, 80e-6, 30), (0.02, 600e-6, 30)])
    assert pooled == pytest.approx([80e-6, (600e-6 * 30 + 240e-6 * 10) / 40, (600e-6 * 30 + 240e-6 * 10) / 40])
    assert monotone_in_pause([]) == []


def test_the_sweeps_wake_ups_are_pooled_when_out_of_order():
    hot_cells, paused_cells = [("sequential", 4 * KIB)], [("sequential", 4 * KIB, 0.02), ("sequential", 4 * KIB, 0.1)]
    c = step_reads_from_sweep(hot_cells, [[50 * US]], paused_cells, [[650 * US] * 2, [350 * US] * 2],
                              block_bytes=MIB, directory="d")
    assert c.read_s("sequential", 4 * KIB, 0.02) == pytest.approx(500 * US)
    assert c.read_s("sequential", 4 * KIB, 0.1) == pytest.approx(500 * US)


def test_a_larger_read_never_costs_less_than_a_smaller_one():
    from testbed.calibration.reads import monotone_in_size
    # a tail read among 40 lifted the 4 KiB mean above the 64 KiB one: the two share their reads
    pooled = monotone_in_size({("sequential", 4 * KIB): (370 * US, 40), ("sequential", 64 * KIB): (350 * US, 40),
                               ("sequential", MIB): (900 * US, 40), ("random", 4 * KIB): (60 * US, 40)})
    assert pooled == pytest.approx({("sequential", 4 * KIB): 360 * US, ("sequential", 64 * KIB): 360 * US,
                                    ("sequential", MIB): 900 * US, ("random", 4 * KIB): 60 * US})
    # and the curves the sweep makes: a step's read of 8 sequential samples (one 32 KiB range
    # after the pause) never below one of a single sample after the same pause
    hot_cells, paused_cells = sweep_cells((0.02,))
    raw = {4 * KIB: 370, 64 * KIB: 350, MIB: 900}
    hot_s = [[raw[c[1]] * US * (c[2] if len(c) > 2 else 1)] * 40 for c in hot_cells]
    paused_s = [[500 * US] * 30 for _ in paused_cells]
    c = step_reads_from_sweep(hot_cells, hot_s, paused_cells, paused_s, block_bytes=MIB, directory="d")
    for order in ("sequential", "random"):
        assert c.step_read_s(order, 4 * KIB, 8, 0.02) >= c.read_s(order, 4 * KIB, 0.02)
        assert c.read_s(order, 64 * KIB, 0.0) >= c.read_s(order, 4 * KIB, 0.0)
    # the paused sample keeps its measured mean
    assert c.read_s("sequential", 4 * KIB, 0.02) == pytest.approx(500 * US)


def test_the_wake_after_the_pause_is_what_the_pause_adds_to_the_steps_read():
    c = costs()
    for order in ("sequential", "random"):
        paused = c.step_read_s(order, 4 * KIB, 8, 0.01)
        assert c.step_read_wake_s(order, 4 * KIB, 8, 0.01) == pytest.approx(paused - c.step_read_s(order, 4 * KIB, 8, 0.0))
        assert c.step_read_wake_s(order, 4 * KIB, 8, 0.01) == pytest.approx(100 * US)  # the curves' gap at 10 ms
        assert c.step_read_wake_s(order, 4 * KIB, 8, 0.0) == 0.0


def test_readers_at_once_wait_their_wake_side_by_side_and_share_the_disk_for_the_rest():
    # A sync round's workers all read at the same moment on a disk with one reader's rate
    # however many read: each read's wake after the pause (the device waking) is its own
    # wait, so four readers take wake + 4 x the back-to-back read, not 4 x the paused read.
    from testbed.model.profile import DiskProfile
    from testbed.model.simfamily import sim_spec
    from testbed.model.simulation import simulate
    from tests.unit.test_model_simulated import config, profile

    slow = StepReadCosts(tuple(PausedReadCurve("sequential", pause, SizeCurve(((4 * KIB, base), (1 * MIB, base))))
                               for pause, base in ((0.0, 0.001), (0.01, 0.003))))
    flat = DiskProfile(seq_read_bytes_per_s={1: 1e9}, block_bytes=4096)
    prof = profile(cores_per_node=64, disk=flat, step_reads=slow)

    def read(workers: int, **changes) -> tuple[float, float, float]:
        cfg = config(workers=workers, sync="sync", compute={"mode": "sleep", "seconds": 0.05},
                     workload={"steps": 10, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
                     data={"step_reads": "sequential"})
        terms = step_terms(cfg, prof)
        spec = dataclasses.replace(sim_spec(cfg, prof, terms), **changes)
        return terms.read_s, terms.read_wake_s, simulate(spec).phases["read"]

    alone, wake, one = read(1)
    assert alone == pytest.approx(0.003) and wake == pytest.approx(0.002)  # the pause is past 10 ms: flat
    assert one == pytest.approx(alone, rel=1e-6)  # a lone reader: the same read either way
    _, _, four = read(4)
    assert four == pytest.approx(0.002 + 4 * 0.001, rel=1e-6)
    # the whole read served on the disk, as before: four paused reads in turn
    _, _, shared = read(4, read_wake_s=0.0)
    assert shared == pytest.approx(4 * 0.003, rel=1e-6)
